//! A fork whose child takes the evicted memory over from its copy of the
//! parent's instance, instead of the parent bringing it in first
//! (`pin.rs`, `prepare_fork`).
//!
//! Without `UFFD_FEATURE_EVENT_FORK` a child's copy of a region is not
//! registered, and an evicted page would read as zeros there. Bringing
//! every evicted page in before the fork costs a decompression of all of
//! them and takes the parent past its budget by as much, until its evictor
//! takes it back: a Redis `BGSAVE` under a budget needs the whole dataset
//! at once, and a memory cgroup's limit kills it. The kernel's child
//! shares the parent's swap entries instead (`swap_duplicate`).
//!
//! The child here holds a copy-on-write copy of the parent's instance, its
//! pool's objects included. Where that copy is consistent — every thread of
//! uzswap's at rest at the fork (`compress::quiesce`), no chunk owned by a
//! fault or an eviction — the child's instance takes each evicted chunk
//! over as it stood ([`Uzswap::adopt_inheriting`]): STORED stays STORED,
//! PARTIAL stays PARTIAL, their entries referring to the objects in that
//! copy (`zswap::inherit`), so nothing is copied or decompressed at the
//! fork and the objects stay shared with the parent. A fault in the child
//! loads from them as from its own pool, and keeps them as clean copies
//! (`chunk::KEPT`, as for written-back pages: they hold no memory of its
//! pool), so a chunk the child reads and does not write is dropped again by
//! its eviction, not compressed a second time. The mapped groups of a
//! PARTIAL chunk are the parent's pages, shared copy-on-write; their write
//! protection did not survive the fork (the kernel drops the marker in a
//! child not registered for it), so their copies are not taken and the
//! chunk is DIRTY here. Like an inherited whole chunk's pages they are
//! charged to nobody and no eviction of the child's takes them
//! (`RegionInner::shared`), until a bring-in completes the chunk.
//!
//! What the child cannot take: pages written back. The parent frees and
//! reuses its slots after the fork, so [`Uzswap::prepare_fork_sharing`]
//! holds writeback off and brings the chunks with a page on the device in
//! first; [`ForkGuard::sharable`] checks, once every thread is at rest,
//! that none came back meanwhile (a writeback in flight when it was held
//! off), and where one did, or a chunk is owned, the caller brings the rest
//! in as before ([`ForkGuard::bring_in_all`]).
//!
//! Locking: as `prepare_fork` (every eviction slot, then each region's
//! `live` inside the bring-in); the checks read chunk words and take one
//! tree shard lock at a time.

use super::chunk::{self, *};
use super::pin::{self, ForkGuard};
use super::{fault, Region, RegionError, RegionInner, Shared, Uzswap};
use crate::compress::quiesce;
use crate::zswap::LoadMode;
use crate::PAGE_SIZE;
use std::sync::atomic::Ordering::*;

/// Rests a sharing fork tries for ([`ForkGuard::rest_for_sharing`]).
const SHARE_TRIES: usize = 3;
/// Pages `reconcile_touched` asks mincore(2) about at a time (256 MiB).
const MAP_WINDOW_PAGES: usize = 64 << 10;

impl Uzswap {
    /// Hold eviction and writeback for a fork whose child takes the
    /// evicted memory over ([`Uzswap::adopt_inheriting`]), and bring in
    /// the chunks it could not take: those with a page written back. Both
    /// resume when the guard drops. The caller brings uzswap's threads to
    /// rest next and asks [`ForkGuard::sharable`].
    pub fn prepare_fork_sharing(&self) -> Result<ForkGuard<'_>, RegionError> {
        let mut guard = self.hold_eviction();
        let zswap = &guard.sh.zswap;
        guard.writeback = Some(zswap.writeback_enabled());
        zswap.set_writeback_enabled(false);
        guard.bring_in_written_back()?;
        Ok(guard)
    }

    /// Hold eviction (every slot, and faults skip the backstop) until the
    /// guard drops, bringing nothing in: for a child taking its regions
    /// over one by one.
    pub fn hold_eviction(&self) -> ForkGuard<'_> {
        let sh = &*self.owner.sh;
        sh.frozen.store(true, Release);
        ForkGuard {
            sh,
            _slots: sh.slots.take_all(),
            writeback: None,
        }
    }

    /// Whether any region of this instance ever had a chunk evicted: a
    /// fork before that has nothing to bring in or take over.
    pub fn evicted_any(&self) -> bool {
        self.owner
            .sh
            .snapshot_regions()
            .iter()
            .any(|r| r.evicted_once.load(Acquire))
    }

    /// [`Uzswap::adopt`], and every evicted chunk of `parent` taken over as
    /// it stood: its entries refer to the objects in this process's copy of
    /// the parent's pool (`Zswap::inherit`), under the parent's region id
    /// (the entries' keys and checksums carry it). The mapped groups of a
    /// PARTIAL chunk are charged here (its eviction stores or drops them);
    /// what else the parent left mapped stays charged to nobody.
    ///
    /// # Safety
    /// `parent` is a region of the instance this process inherited at a
    /// fork, made with the same chunk size, given up
    /// ([`Uzswap::abandon_in_child`]) after [`ForkGuard::sharable`] held
    /// in the parent at the fork; that instance is never used or dropped
    /// again, nor its memory unmapped.
    pub unsafe fn adopt_inheriting(&self, parent: &Region) -> Result<Region, RegionError> {
        let sh = &*self.owner.sh;
        let psh = &*parent.owner.sh;
        let p = &*parent.inner;
        if psh.chunk != sh.chunk {
            return Err(RegionError::Config(format!(
                "taking over {:#x}: chunks of {} bytes, the parent's of {}",
                p.base, sh.chunk, psh.chunk
            )));
        }
        let n = 1usize << sh.order;
        // Chunks left UNTOUCHED here that may map the parent's pages: any
        // but the evicted ones taken over, as `adopt` judges.
        let taken = |w: u32| fault::unmapped(psh, w);
        let may_map = |ci: usize| {
            let w = p.state[ci].load(Acquire);
            !taken(w) && (chunk::state(w) != UNTOUCHED || p.may_map_inherited(ci))
        };
        let setup = |r: &RegionInner| {
            if !p.evicted_once.load(Acquire) {
                return Ok(());
            }
            r.evicted_once.store(true, Release);
            for ci in 0..p.state.len() {
                let w = p.state[ci].load(Acquire);
                if !taken(w) {
                    continue;
                }
                let first = psh.entry(p, ci);
                // A PARTIAL chunk's mapped groups lost their write
                // protection at the fork (the kernel clears the marker in
                // a child not registered for it), so their copies are not
                // taken and the chunk is DIRTY. They are the parent's
                // pages, as an inherited whole chunk's are: charged to
                // nobody and kept by every eviction of the chunk (`shared`)
                // until it is completed. Charged, they took a Redis
                // `BGSAVE` child's budget at once, and its evictions stored
                // them into its own pool (688 k pages stored, 260 k read
                // back from its device, for memory the parent still
                // mapped).
                let (word, mapped) = match chunk::part_mask(w) {
                    Some(m) if chunk::state(w) == PARTIAL => {
                        (PARTIAL | (w & (PART | MASK_BITS)) | DIRTY, m)
                    }
                    _ => (STORED, 0),
                };
                let mapped_pages = chunk::mask_ranges(mapped, n);
                let is_mapped = |i: u64| mapped_pages.iter().any(|m| m.contains(&(i as usize)));
                // SAFETY: the caller's: `psh.zswap` is the parent's cache,
                // quiesced at the fork and given up.
                unsafe {
                    sh.zswap
                        .inherit(&psh.zswap, first, n as u64, |i| !is_mapped(i))
                }
                .map_err(|e| RegionError::Os(format!("taking over chunk {ci}: {e}")))?;
                if let Some(m) = &r.shared {
                    m[ci].store(mapped, Relaxed);
                }
                r.state[ci].store(word, Release);
            }
            Ok(())
        };
        let region = self.adopt_with(p.base, p.len, may_map, Some(p.id), setup)?;
        // SAFETY: this process's memory, registered now, and nothing runs
        // in it but this thread.
        if let Err(e) = unsafe { reconcile_touched(sh, &region.inner) } {
            // Leaked, not dropped: a region unmaps its memory as it goes,
            // and the caller's fallback writes the parent's pages there.
            std::mem::forget(region);
            return Err(RegionError::Os(format!("taking over {:#x}: {e}", p.base)));
        }
        Ok(region)
    }

    /// Where a child could not take its memory over after a sharing fork:
    /// no region of this (the child's new) instance stays registered, so
    /// its memory is plain and faults nothing to a handler.
    ///
    /// # Safety
    /// The instance is never used again (leaked).
    pub unsafe fn unregister_all_in_child(&self) {
        let sh = &*self.owner.sh;
        for r in sh.snapshot_regions() {
            if r.registered.load(Acquire) {
                let _ = sh.uffd.unregister(r.base as *mut _, r.len);
            }
        }
    }

    /// In a child forked after [`ForkGuard::sharable`] held, whose memory
    /// is not registered with any instance: every evicted page written into
    /// place from this (the parent's, given up) instance's cache, so the
    /// memory reads as the parent's did. Decompresses on the calling thread
    /// only (the instance's threads were the parent's).
    ///
    /// # Safety
    /// This is the instance the process inherited at the fork, given up
    /// ([`Uzswap::abandon_in_child`]), and nothing else uses it.
    pub unsafe fn materialize_in_child(&self) -> Result<(), RegionError> {
        let sh = &*self.owner.sh;
        let n = 1usize << sh.order;
        let mut page = vec![0u8; PAGE_SIZE];
        for r in sh.snapshot_regions() {
            if !r.evicted_once.load(Acquire) {
                continue;
            }
            for ci in 0..r.state.len() {
                let w = r.state[ci].load(Acquire);
                if !fault::unmapped(sh, w) {
                    continue;
                }
                let mapped = chunk::part_mask(w).unwrap_or(0);
                let first = sh.entry(&r, ci);
                let base = r.chunk_addr(ci, sh.chunk);
                for range in chunk::mask_ranges(!mapped, n) {
                    for i in range {
                        sh.zswap
                            .load(first.offset(i as u64), &mut page, LoadMode::KeepCopy)
                            .map_err(|e| RegionError::Os(format!("chunk {ci}: {e}")))?;
                        // SAFETY: a page of the region's mapping, plain
                        // memory in this process, which nothing else runs
                        // in yet.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                page.as_ptr(),
                                (base + i * PAGE_SIZE) as *mut u8,
                                PAGE_SIZE,
                            )
                        };
                    }
                }
            }
        }
        Ok(())
    }
}

impl ForkGuard<'_> {
    /// Bring in the chunks with a page not mapped and a page written back
    /// (a child could not take them over: [`ForkGuard::sharable`]).
    pub fn bring_in_written_back(&self) -> Result<(), RegionError> {
        let sh = self.sh;
        promote_written_back(sh);
        pin::bring_in(sh, |r, ci| written_back(sh, r, ci))
    }

    /// uzswap's threads at rest (each try waiting up to `timeout`) with
    /// every evicted chunk one a child can take over ([`Self::sharable`]),
    /// or `None` where they do not come to rest or the tries run out: the
    /// caller then brings every evicted page in ([`Self::bring_in_all`]).
    /// A writeback in flight when [`Uzswap::prepare_fork_sharing`] held it
    /// off may end after its bring-in, before the rest: such chunks are
    /// brought in with the gate open, and the rest taken again (in
    /// `fork_storm.c` one fork in four needed a second try, none a third).
    pub fn rest_for_sharing(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<quiesce::Closed>, RegionError> {
        for _ in 0..SHARE_TRIES {
            match quiesce::close(timeout) {
                Some(rest) if self.sharable() => return Ok(Some(rest)),
                Some(rest) => {
                    // Open again first: the bring-in may need the threads.
                    drop(rest);
                    self.bring_in_written_back()?;
                }
                None => return Ok(None),
            }
        }
        Ok(None)
    }

    /// With every other thread of uzswap's at rest: whether a child forked
    /// now can take every evicted chunk over ([`Uzswap::adopt_inheriting`]):
    /// no chunk is owned (BUSY, EVICTING: half changed) and none with a
    /// page not mapped has one written back. Reads every chunk word of
    /// every region ever evicted from.
    pub fn sharable(&self) -> bool {
        let sh = self.sh;
        sh.snapshot_regions().iter().all(|r| {
            !r.registered.load(Acquire)
                || !r.evicted_once.load(Acquire)
                || (0..r.state.len()).all(|ci| {
                    !matches!(chunk::state(r.state[ci].load(Acquire)), BUSY | EVICTING)
                        && !written_back(sh, r, ci)
                })
        })
    }
}

/// Before a sharing fork: move the written-back pages a child would take
/// over (every page of a STORED chunk, the unmapped groups' of a PARTIAL
/// one) back into the pool (`Zswap::promote_for_fork`), their objects as
/// the device holds them, so that the child takes them over with the rest
/// and the parent brings none of them in. Bringing them in took a Redis
/// parent under a 137 MiB budget 26 MiB past it at a `BGSAVE`, until its
/// evictor had stored them again and its shrinker written as much back,
/// into pool pages shared with the child (docs/BENCHMARKS.md, "A forked
/// child's share of the budget"); their objects cost a fraction of that.
/// A chunk whose move fails is left to the bring-in. Each chunk is owned
/// (BUSY, its other bits kept) while its entries change, so a fault on it
/// waits.
fn promote_written_back(sh: &Shared) {
    let mut scratch = Vec::new();
    for r in sh.snapshot_regions() {
        if !r.registered.load(Acquire) || !r.evicted_once.load(Acquire) {
            continue;
        }
        let live = r.live.read();
        if !*live {
            continue;
        }
        for ci in 0..r.state.len() {
            if !written_back(sh, &r, ci) {
                continue;
            }
            let from = chunk::state(r.state[ci].load(Acquire));
            let Ok(w) = chunk::own_if(&r.state[ci], from, |w| fault::unmapped(sh, w)) else {
                continue;
            };
            if scratch.is_empty() {
                scratch = vec![0u8; sh.chunk];
            }
            let first = sh.entry(&r, ci);
            for p in taken_pages(sh, w) {
                let at = first.offset(p.start as u64);
                if sh.zswap.any_written_back(at, p.len() as u64) {
                    // A failed read leaves the entries as they were: the
                    // bring-in reads them again and reports what fails.
                    let buf = &mut scratch[..p.len() * PAGE_SIZE];
                    let _ = sh.zswap.promote_for_fork(at, p.len(), buf);
                }
            }
            if chunk::release(&r.state[ci], from, 0, 0) {
                sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
            }
        }
    }
}

/// The pages of a chunk with word `w` whose entries a child takes over
/// (`adopt_inheriting`): every page of a STORED chunk, the unmapped
/// groups' of a PARTIAL one (a mapped group's copy is its parent's alone:
/// the child's page, writable since the fork, is not that copy).
fn taken_pages(sh: &Shared, w: u32) -> Vec<std::ops::Range<usize>> {
    let pages = 1usize << sh.order;
    match chunk::state(w) {
        STORED => std::iter::once(0..pages).collect(),
        _ => match chunk::part_mask(w) {
            Some(m) => chunk::mask_ranges(!m, pages),
            None => Vec::new(),
        },
    }
}

/// Whether chunk `ci` of `r` has a page the child would take over on the
/// device (which it could not take: the parent frees and reuses the slot).
fn written_back(sh: &Shared, r: &RegionInner, ci: usize) -> bool {
    let w = r.state[ci].load(Acquire);
    let first = sh.entry(r, ci);
    // The whole chunk first: a fork asks this of every evicted chunk three
    // times over, and nearly all have nothing on the device.
    if !fault::unmapped(sh, w) || !sh.zswap.any_written_back(first, 1 << sh.order) {
        return false;
    }
    chunk::state(w) == STORED
        || taken_pages(sh, w).iter().any(|p| {
            sh.zswap
                .any_written_back(first.offset(p.start as u64), p.len() as u64)
        })
}

/// mincore(2) of `len` bytes at `addr` into `vec` (a byte per page).
///
/// # Safety
/// `vec` holds at least a byte per page of the range.
unsafe fn resident(addr: usize, len: usize, vec: &mut [u8]) -> std::io::Result<()> {
    debug_assert!(vec.len() >= len / PAGE_SIZE);
    // SAFETY: the caller's.
    match unsafe { libc::mincore(addr as *mut _, len, vec.as_mut_ptr()) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// In a child, pages of evicted (unmapped) groups that are present once the
/// region is registered: code ran in the child between `fork(2)` and the
/// take-over and touched them while nothing was registered there, so the
/// kernel filled them with zeros — glibc's `fork` resets the locks of every
/// `FILE` (allocated in region memory under the preload library) before it
/// runs the child's fork handlers, where the preload library takes over
/// (it pins those first, but a caller may not). Such a page hides the
/// page's data, which is in the cache: a Redis
/// `BGSAVE` child read 15 values as empty strings from two such pages
/// (before, the first eviction of their chunks zapped them whole, unless
/// the program read them first). Each is put back under the cache: what
/// was written there (its bytes that are not zero; the rest of the page
/// was zeros) over the cached page, stored as that page's data, and the
/// page zapped, so the next touch faults it in. A write of zero bytes
/// there is lost, as the kernel gave no sign of it.
///
/// # Safety
/// `r` is registered with this (the child's) instance, and no other thread
/// of the process runs yet.
unsafe fn reconcile_touched(sh: &Shared, r: &RegionInner) -> std::io::Result<()> {
    let n = 1usize << sh.order;
    let taken: Vec<usize> = (0..r.state.len())
        .filter(|&ci| fault::unmapped(sh, r.state[ci].load(Acquire)))
        .collect();
    let (Some(&lo), Some(&hi)) = (taken.first(), taken.last()) else {
        return Ok(());
    };
    // Which pages are present, from mincore(2), a window of chunks at a
    // time from the first such chunk to the last: it needs no permission,
    // where `/proc/self/pagemap` is closed to a process that made itself
    // not dumpable (`PR_SET_DUMPABLE`, as ssh-agent does), and its child's
    // take-over failed there.
    let per = sh.chunk / PAGE_SIZE;
    let window = (MAP_WINDOW_PAGES / per).max(1);
    let mut map = vec![0u8; window * per];
    let mut at_window = usize::MAX;
    let mut cached = vec![0u8; PAGE_SIZE];
    for ci in taken {
        let w0 = (ci - lo) / window * window + lo;
        if w0 != at_window {
            let chunks = (hi + 1 - w0).min(window);
            // SAFETY: a query of this process's mappings into a buffer of
            // a byte per page.
            if unsafe { resident(r.chunk_addr(w0, sh.chunk), chunks * sh.chunk, &mut map) }.is_err()
            {
                // A hole in the window (a range the program left out of its
                // children): chunk by chunk, a hole's pages not present.
                for c in 0..chunks {
                    let part = &mut map[c * per..(c + 1) * per];
                    // SAFETY: as above.
                    if unsafe { resident(r.chunk_addr(w0 + c, sh.chunk), sh.chunk, part) }.is_err()
                    {
                        part.fill(0);
                    }
                }
            }
            at_window = w0;
        }
        let present = |i: usize| map[(ci - w0) * per + i] & 1 != 0;
        let mask = chunk::part_mask(r.state[ci].load(Acquire)).unwrap_or(0);
        for i in chunk::mask_ranges(!mask, n).into_iter().flatten() {
            if !present(i) {
                continue;
            }
            let at = r.chunk_addr(ci, sh.chunk) + i * PAGE_SIZE;
            let key = sh.entry(r, ci).offset(i as u64);
            sh.zswap
                .load(key, &mut cached, LoadMode::KeepCopy)
                .map_err(|e| std::io::Error::other(format!("page {at:#x}: {e}")))?;
            // SAFETY: a present page of the region, which nothing else
            // runs in (the caller's).
            let touched = unsafe { std::slice::from_raw_parts(at as *const u8, PAGE_SIZE) };
            if touched.iter().any(|&b| b != 0) {
                for (c, &t) in cached.iter_mut().zip(touched) {
                    if t != 0 {
                        *c = t;
                    }
                }
                sh.zswap
                    .restore(key, &cached)
                    .map_err(|e| std::io::Error::other(format!("page {at:#x}: {e}")))?;
            }
            // SAFETY: the page's data is in the cache (as it was, or with
            // what was written over it, just stored).
            if unsafe { libc::madvise(at as *mut _, PAGE_SIZE, libc::MADV_DONTNEED) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            sh.ctr.fork_touched_pages.fetch_add(1, Relaxed);
        }
    }
    Ok(())
}
