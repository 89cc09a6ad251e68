//! What a program that was not written for uzswap needs from its memory,
//! addressed by plain addresses (the preload library's calls): pinning a
//! range resident for a system call or a protection change, discarding a
//! range (`MADV_DONTNEED`, `munmap`), and bringing everything in before a
//! `fork`.
//!
//! # Pins
//! A pinned chunk carries `chunk::PINNED`, which the evictor honours when it
//! takes a victim (`chunk::take_for_evict` fails), so a pinned chunk that is
//! mapped stays mapped. A region's pin counts live in `RegionInner::pins`;
//! the flag mirrors "count > 0" and is set or cleared only under that lock,
//! so two pinners of one chunk never race on it. Pinning sets the flag
//! first and touches the pages after: a chunk an evictor took before the
//! flag landed is stored and zapped, and the touch then faults it back in
//! (it waits for the eviction to end), after which no evictor can take it.
//!
//! # Discard
//! A whole chunk is taken (BUSY, as a resolver takes it), zapped, its cache
//! entries invalidated, its charge dropped, and left UNTOUCHED: the next
//! fault zero-fills it, as the kernel does for a dropped anonymous page. A
//! STORED chunk only partly in the range stays STORED: the cache's entries
//! of the discarded pages are replaced with zero pages (same-filled: no
//! allocation, no compression), as the kernel drops a swapped-out page's
//! entry without reading it, and the other pages are not read either
//! (decompressed, installed and charged only to be zeroed in part, and an
//! unreadable neighbour made the discard itself fault with SIGBUS). Any
//! other chunk partly in the range is written with zeros (faulting in what
//! it needs): its other pages keep their data, and RESIDENT keeps meaning
//! "every page mapped".
//!
//! # Fork
//! Without `UFFD_FEATURE_EVENT_FORK` (which an unprivileged process cannot
//! enable) a child's copy of a region is no longer registered, so a page
//! evicted at the fork would read as zeros in the child. `prepare_fork`
//! therefore holds eviction (every eviction slot, and `Shared::frozen` so
//! faults skip the backstop) and brings every stored chunk in; the child then
//! shares every page copy-on-write. The budget is exceeded until the guard
//! is dropped, when the evictor takes it back down.
//!
//! Lock order: every eviction slot (fork) → `RegionInner::live` (read) →
//! `RegionInner::pins`. Pages are touched with no lock held: their faults
//! take `live` themselves.

use super::chunk::{self, *};
use super::{evict, fault, Advice, RegionError, RegionInner, Shared, Uzswap};
use crate::PAGE_SIZE;
use serde::Serialize;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::*};
use std::sync::Arc;

/// Whether a system call that touches an evicted page of a region works.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelFaults {
    /// The kernel hands faults it takes inside system calls to the handler
    /// (`/dev/userfaultfd`, handler threads): `read(2)` into an evicted
    /// page works as on resident memory.
    Served,
    /// Such a fault fails the call with EFAULT (`UFFD_USER_MODE_ONLY`, or
    /// signal mode): buffers must be brought in and pinned for the call
    /// ([`Uzswap::pin`]).
    NotServed,
}

pub(super) fn kernel_faults(sh: &Shared) -> KernelFaults {
    if sh.signal || sh.open_path == super::OpenPath::SyscallUserMode {
        KernelFaults::NotServed
    } else {
        KernelFaults::Served
    }
}

/// The regions `addr..addr+len` overlaps, each with the overlapping bytes.
fn regions_in(sh: &Shared, addr: usize, len: usize) -> Vec<(Arc<RegionInner>, Range<usize>)> {
    let end = addr.saturating_add(len);
    let map = sh.regions.read();
    let mut out = Vec::new();
    // The region starting at or before `addr`, then every one starting
    // inside the range.
    let first = map.range(..=addr).next_back().map(|(_, r)| r.clone());
    for r in first.into_iter().chain(
        map.range(addr.saturating_add(1)..end)
            .map(|(_, r)| r.clone()),
    ) {
        let (s, e) = (addr.max(r.base), end.min(r.base + r.len));
        if s < e {
            out.push((r, s..e));
        }
    }
    out
}

fn chunks_of(sh: &Shared, r: &RegionInner, range: &Range<usize>) -> Range<usize> {
    (range.start - r.base) / sh.chunk..(range.end - r.base).div_ceil(sh.chunk)
}

/// Pin the chunks of `range`; with `touch`, bring in what is not mapped
/// (with `write`, what is not writable) too.
fn pin_in(sh: &Shared, r: &RegionInner, range: &Range<usize>, touch: bool, write: bool) {
    let chunks = chunks_of(sh, r, range);
    {
        let mut pins = r.pins.lock();
        for ci in chunks.clone() {
            let n = pins.entry(ci as u32).or_insert(0);
            *n += 1;
            if *n == 1 {
                chunk::update_flags(&r.state[ci], 0, PINNED);
            }
        }
    }
    if !touch {
        return;
    }
    // Bring in what is not mapped (or, for a write, not writable). A
    // pinned chunk that is RESIDENT stays so; CLEAN and PARTIAL pages are
    // readable. Touching only what needs it keeps a pinned range that the
    // program protected (`mprotect`) from faulting in our hands.
    for ci in chunks {
        let base = r.chunk_addr(ci, sh.chunk);
        let (s, e) = (base.max(range.start), (base + sh.chunk).min(range.end));
        let mut completions = 0;
        loop {
            let w = r.state[ci].load(Acquire);
            let done = match chunk::state(w) {
                RESIDENT => true,
                CLEAN => !write,
                PARTIAL if !write => chunk::part_mask(w).is_some_and(|m| {
                    (s & !(PAGE_SIZE - 1)..e).step_by(PAGE_SIZE).all(|p| {
                        m & chunk::group_bit((p - base) / PAGE_SIZE, sh.chunk / PAGE_SIZE) != 0
                    })
                }),
                _ => false,
            };
            if done {
                break;
            }
            if !*r.live.read() {
                return;
            }
            // Which of a PARTIAL chunk's mapped pages are writable the word
            // does not say (DIRTY is per chunk): complete it, then
            // write-touch what is still protected. Where its other pages
            // cannot be read back, completing it fails every time: touch
            // once (an unreadable page raises SIGBUS there, as a kernel
            // swap-in error would) and go on, rather than try for ever.
            // Likewise where the install keeps failing (a copy refused
            // each time): a few tries, then the touch.
            // An inherited region's UNTOUCHED chunk may map the pages
            // already (the parent's): one touch brings in what is missing,
            // and what it maps then stays (pinned), whatever the word says.
            let mut last = chunk::state(w) == UNTOUCHED && r.may_map_inherited(ci);
            if write && chunk::state(w) == PARTIAL {
                // Every group mapped (KEPT, or completed group by group):
                // nothing to bring in, and a write to each page lifts its
                // protection (a KEPT chunk's first, the whole chunk's), so
                // one touch leaves them all writable; the pin keeps them
                // so. It may stay PARTIAL all the same (DIRTY), so done
                // after the touch whatever the word says then.
                if !fault::whole(sh, w) {
                    completions += 1;
                    if fault::will_need(sh, r, ci..ci + 1).is_ok() && completions < 3 {
                        continue;
                    }
                }
                last = true;
            }
            for p in (s & !(PAGE_SIZE - 1)..e).step_by(PAGE_SIZE) {
                // SAFETY: `p` lies in a live region mapping; the access is
                // resolved by the fault handler like any other. A write is
                // an atomic OR of zero, so a concurrent write of the
                // program's to the same byte is never lost (`black_box`:
                // an OR known to be of zero is folded into a load, which
                // an unused result then removes).
                unsafe {
                    if write {
                        (*(p as *const AtomicU8)).fetch_or(std::hint::black_box(0), Relaxed);
                    } else {
                        std::ptr::read_volatile(p as *const u8);
                    }
                }
            }
            if last {
                break;
            }
        }
    }
}

fn unpin_in(sh: &Shared, r: &RegionInner, range: &Range<usize>) {
    let mut pins = r.pins.lock();
    for ci in chunks_of(sh, r, range) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = pins.entry(ci as u32) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
                chunk::update_flags(&r.state[ci], PINNED, 0);
            }
        }
    }
}

/// Ranges pinned for a system call; unpinned on drop.
pub struct PinGuard<'a> {
    sh: &'a Shared,
    pinned: Vec<(Arc<RegionInner>, Range<usize>)>,
}

impl Drop for PinGuard<'_> {
    fn drop(&mut self) {
        for (r, range) in &self.pinned {
            unpin_in(self.sh, r, range);
        }
        if !self.pinned.is_empty() {
            evict::maybe_kick(self.sh);
        }
    }
}

/// Every chunk brought in for a fork; eviction resumes on drop (in the
/// parent: a child must `std::mem::forget` it, the lock it holds belongs
/// to the parent's threads).
pub struct ForkGuard<'a> {
    pub(super) sh: &'a Shared,
    pub(super) _slots: evict::Slot<'a>,
    /// Writeback's setting before a sharing fork held it off
    /// (`Uzswap::prepare_fork_sharing`), restored on drop.
    pub(super) writeback: Option<bool>,
}

impl Drop for ForkGuard<'_> {
    fn drop(&mut self) {
        if let Some(on) = self.writeback {
            self.sh.zswap.set_writeback_enabled(on);
        }
        self.sh.frozen.store(false, Release);
        evict::maybe_kick(self.sh);
    }
}

impl Uzswap {
    /// Whether system calls on evicted region memory are served (see
    /// [`KernelFaults`]).
    pub fn kernel_faults(&self) -> KernelFaults {
        kernel_faults(&self.owner.sh)
    }

    /// Whether `addr` lies in one of this instance's regions.
    pub fn contains(&self, addr: usize) -> bool {
        self.owner.sh.lookup(addr).is_some()
    }

    /// Bring the region memory in `addr..addr+len` in and keep it mapped
    /// (and, with `write`, writable) until the guard is dropped: for a
    /// system call that uses it as a buffer where the kernel does not hand
    /// its faults to us ([`KernelFaults::NotServed`]), and on every path
    /// for a read by DMA (`O_DIRECT`, a device's transfer): the device
    /// writes the pages the kernel looked up when the call began, past the
    /// page tables, so an eviction during the transfer would store the old
    /// bytes and lose the data. Bytes outside every region are ignored.
    /// Pinned memory is charged and may take usage over the budget; pin
    /// what one call needs.
    pub fn pin(&self, addr: usize, len: usize, write: bool) -> PinGuard<'_> {
        let sh = &*self.owner.sh;
        let pinned = regions_in(sh, addr, len);
        for (r, range) in &pinned {
            pin_in(sh, r, range, true, write);
        }
        PinGuard { sh, pinned }
    }

    /// Keep the evictor off the chunks of `addr..addr+len` without bringing
    /// anything in: for memory the program made inaccessible or read-only
    /// (`mprotect`), which the evictor must not read or write-protect. A
    /// stored chunk stays stored and comes in at its next fault as usual.
    /// Each call must be matched by one [`Uzswap::unpin`] of the same range.
    pub fn pin_range(&self, addr: usize, len: usize) {
        let sh = &*self.owner.sh;
        for (r, range) in regions_in(sh, addr, len) {
            pin_in(sh, &r, &range, false, false);
        }
    }

    /// Undo one [`Uzswap::pin_range`] of the same range.
    pub fn unpin(&self, addr: usize, len: usize) {
        drop(PinGuard {
            sh: &self.owner.sh,
            pinned: regions_in(&self.owner.sh, addr, len),
        });
    }

    /// `MADV_DONTNEED` for region memory: the pages of `addr..addr+len`
    /// read back as zeros, and what they held resident or in the cache is
    /// freed. `addr` must be page-aligned; the length is rounded up to
    /// whole pages. Bytes outside every region are ignored.
    pub fn discard(&self, addr: usize, len: usize) -> Result<(), RegionError> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(RegionError::Config(format!(
                "discard at {addr:#x}: not page-aligned"
            )));
        }
        let len = len
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or_else(|| RegionError::Config("discard length overflows".into()))?;
        let sh = &*self.owner.sh;
        for (r, range) in regions_in(sh, addr, len) {
            discard_in(sh, &r, range);
        }
        Ok(())
    }

    /// [`super::Region::advise`] by address: the hint for every region
    /// `addr..addr+len` overlaps.
    pub fn advise_range(&self, addr: usize, len: usize, advice: Advice) -> Result<(), RegionError> {
        let sh = &self.owner.sh;
        for (r, range) in regions_in(sh, addr, len) {
            super::advise_in(sh, &r, range.start - r.base..range.end - r.base, advice)?;
        }
        Ok(())
    }

    /// Bring every stored page of every region in and hold eviction until
    /// the guard is dropped, so that a child forked meanwhile has all its
    /// parent's bytes (see the module comment). Costs a decompression of
    /// everything evicted, and memory over the budget while held.
    pub fn prepare_fork(&self) -> Result<ForkGuard<'_>, RegionError> {
        let guard = self.hold_eviction();
        guard.bring_in_all()?;
        Ok(guard)
    }
}

impl ForkGuard<'_> {
    /// Bring every stored chunk in (eviction held by the guard).
    pub fn bring_in_all(&self) -> Result<(), RegionError> {
        bring_in(self.sh, |_, _| true)
    }
}

/// Bring in every chunk of every region that has a page not mapped and that
/// `which` names (region, chunk index), until none is left (eviction held
/// by the caller's fork guard).
pub(super) fn bring_in(
    sh: &Shared,
    which: impl Fn(&RegionInner, usize) -> bool,
) -> Result<(), RegionError> {
    // Left: a chunk with a page not mapped (a PARTIAL chunk with every
    // group mapped has none).
    let unmapped = |w: u32| fault::unmapped(sh, w);
    for attempt in 0.. {
        let mut left = 0usize;
        for r in sh.snapshot_regions() {
            // Nothing of a region no eviction ever took can be
            // unmapped (`RegionInner::evicted_once`; every slot is ours,
            // so no eviction is between its taking and that flag).
            if !r.registered.load(Acquire) || !r.evicted_once.load(Acquire) {
                continue;
            }
            let mut ci = 0;
            while ci < r.state.len() {
                if !which(&r, ci) {
                    ci += 1;
                    continue;
                }
                let run = ci + (ci..r.state.len()).take_while(|&c| which(&r, c)).count();
                fault::will_need(sh, &r, ci..run)?;
                for s in &r.state[ci..run] {
                    let w = s.load(Acquire);
                    if matches!(chunk::state(w), BUSY | EVICTING) {
                        chunk::wait_released(s);
                        left += usize::from(unmapped(s.load(Acquire)));
                    } else {
                        left += usize::from(unmapped(w));
                    }
                }
                ci = run;
            }
        }
        if left == 0 {
            break;
        }
        if attempt == 3 {
            return Err(RegionError::Os(format!(
                "fork: {left} chunks could not be brought in (see fault_errors)"
            )));
        }
    }
    Ok(())
}

fn discard_in(sh: &Shared, r: &RegionInner, range: Range<usize>) {
    if !r.registered.load(Acquire) {
        let _mapped = sh.mapped.lock();
        if !r.registered.load(Acquire) {
            // Plain memory still: the kernel's own semantics are ours.
            // SAFETY: a range of the region's own mapping.
            unsafe {
                libc::madvise(
                    range.start as *mut _,
                    range.end - range.start,
                    libc::MADV_DONTNEED,
                )
            };
            return;
        }
    }
    let mut run = InheritedRun::default();
    for ci in chunks_of(sh, r, &range) {
        let base = r.chunk_addr(ci, sh.chunk);
        let (s, e) = (base.max(range.start), (base + sh.chunk).min(range.end));
        let pages = (s - base) / PAGE_SIZE..(e - base) / PAGE_SIZE;
        if run.take(r, ci, s..e) {
            continue;
        }
        run.flush(sh, r);
        if s == base && e == base + sh.chunk {
            discard_chunk(sh, r, ci);
        } else if !discard_stored_pages(sh, r, ci, pages)
            && chunk::state(r.state[ci].load(Acquire)) != UNTOUCHED
        {
            // SAFETY: bytes of a live region mapping; the writes fault the
            // pages in like the program's own would.
            unsafe { std::ptr::write_bytes(s as *mut u8, 0, e - s) };
        }
    }
    run.flush(sh, r);
}

/// UNTOUCHED chunks of an inherited region in a row that may map pages the
/// parent left, held BUSY, and the bytes of them being discarded (whole
/// chunks, but for the range's first and last), dropped by one
/// `MADV_DONTNEED`: a discard of a large range there (a program's `munmap`
/// of an arena it inherited, a shell's exit) zapped it chunk by chunk, a
/// system call per 64 KiB (512 for 32 MiB: milliseconds on every fork of a
/// shell).
#[derive(Default)]
struct InheritedRun<'a> {
    /// Chunk indices `first..end`, held, the bytes to drop, and the
    /// region's `live` read while they are held (no other lock is taken
    /// meanwhile: the run is flushed before anything else of the discard).
    held: Option<(
        Range<usize>,
        Range<usize>,
        parking_lot::RwLockReadGuard<'a, bool>,
    )>,
}

impl<'a> InheritedRun<'a> {
    /// Hold chunk `ci` for dropping `bytes` of it (the next chunk after the
    /// run, or a new run's first) if it is UNTOUCHED and may map pages the
    /// parent left.
    fn take(&mut self, r: &'a RegionInner, ci: usize, bytes: Range<usize>) -> bool {
        if !r.may_map_inherited(ci) {
            return false;
        }
        let own = |c: &AtomicU32| chunk::transition(c, UNTOUCHED, BUSY, 0, 0).is_ok();
        match &mut self.held {
            Some((cis, b, _)) if cis.end == ci && b.end == bytes.start => {
                if !own(&r.state[ci]) {
                    return false;
                }
                cis.end = ci + 1;
                b.end = bytes.end;
                true
            }
            Some(_) => false,
            None => {
                let live = r.live.read();
                if !*live || !own(&r.state[ci]) {
                    return false;
                }
                self.held = Some((ci..ci + 1, bytes, live));
                true
            }
        }
    }

    fn flush(&mut self, sh: &Shared, r: &RegionInner) {
        let Some((cis, bytes, live)) = self.held.take() else {
            return;
        };
        // SAFETY: bytes of chunks of the region that we hold (BUSY).
        unsafe {
            libc::madvise(
                bytes.start as *mut _,
                bytes.end - bytes.start,
                libc::MADV_DONTNEED,
            )
        };
        for ci in cis.clone() {
            let base = r.chunk_addr(ci, sh.chunk);
            // Zapped whole: no page the parent left is mapped any more.
            if bytes.start <= base && base + sh.chunk <= bytes.end {
                r.clear_inherited(ci);
            }
            chunk::release(&r.state[ci], UNTOUCHED, 0, 0);
        }
        let base = r.chunk_addr(cis.start, sh.chunk);
        sh.wake(base, cis.len() * sh.chunk);
        drop(live);
    }
}

/// Discard `pages` (a part) of chunk `ci` where it is STORED: their cache
/// entries become zero pages. Returns false where the chunk is not STORED,
/// or a zero page could not be stored (same-filled pages turned off and the
/// pool refusing): the caller then writes zeros through faults; pages
/// already zeroed here read as zeros all the same.
fn discard_stored_pages(sh: &Shared, r: &RegionInner, ci: usize, pages: Range<usize>) -> bool {
    let live = r.live.read();
    if !*live || chunk::transition(&r.state[ci], STORED, BUSY, 0, 0).is_err() {
        return false;
    }
    let first = sh.entry(r, ci);
    let zeros = &sh.zeros[..PAGE_SIZE];
    let n = pages.len() as u64;
    let done = pages
        .into_iter()
        .all(|p| sh.zswap.restore(first.offset(p as u64), zeros).is_ok());
    if done {
        sh.ctr.discarded_stored_pages.fetch_add(n, Relaxed);
    }
    if chunk::release(&r.state[ci], STORED, 0, 0) {
        sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
    }
    drop(live);
    done
}

fn discard_chunk(sh: &Shared, r: &RegionInner, ci: usize) {
    let s = &r.state[ci];
    let (live, prev) = loop {
        let live = r.live.read();
        if !*live {
            return;
        }
        let w = s.load(Acquire);
        match chunk::state(w) {
            // Maps no page, unless the parent left some (`inherited`).
            UNTOUCHED if !r.may_map_inherited(ci) => return,
            BUSY | EVICTING => {
                drop(live);
                chunk::wait_released(s);
            }
            st => {
                if let Ok(prev) = chunk::transition(s, st, BUSY, 0, 0) {
                    break (live, prev);
                }
            }
        }
    };
    let base = r.chunk_addr(ci, sh.chunk);
    let charged = r.charged(ci, prev, sh.chunk);
    let shared = r.take_shared(ci, sh.chunk);
    if charged > 0 || shared > 0 || r.may_map_inherited(ci) {
        // SAFETY: a chunk of a live region that we own (BUSY).
        unsafe { libc::madvise(base as *mut _, sh.chunk, libc::MADV_DONTNEED) };
        sh.resident.fetch_sub(charged, Relaxed);
        r.clear_inherited(ci);
    }
    sh.zswap.invalidate_range(sh.entry(r, ci), 1 << sh.order);
    let clear = REF | ACTIVE | REJECTED | PART_BITS;
    if chunk::release(s, UNTOUCHED, clear, 0) {
        sh.wake(base, sh.chunk);
    }
    drop(live);
}

impl super::Region {
    /// [`Uzswap::discard`] of the bytes `range` of this region (widened to
    /// whole pages).
    pub fn discard(&self, range: Range<usize>) -> Result<(), RegionError> {
        if range.start > range.end || range.end > self.len() {
            return Err(RegionError::Config(format!(
                "range {range:?} outside region of {} bytes",
                self.len()
            )));
        }
        let start = range.start & !(PAGE_SIZE - 1);
        let sh = &*self.owner.sh;
        discard_in(
            sh,
            &self.inner,
            self.inner.base + start
                ..self.inner.base + range.end.next_multiple_of(PAGE_SIZE).min(self.len()),
        );
        Ok(())
    }
}
