//! Anonymous private memory out of uzswap regions: `mmap`, `munmap`,
//! `mremap`, `madvise` and `mprotect` as a program (and mimalloc) sees
//! them.
//!
//! Regions are reservations of [`RESERVE`] bytes (more for a bigger
//! request), registered once; mappings are carved out of them first-fit
//! and given back on `munmap`. Registrations are a scarce kernel resource
//! and each costs a VMA split: one per reservation, never one per mmap.
//!
//! Semantics kept (the kernel's, for anonymous private memory):
//! - a new mapping, and memory after `MADV_DONTNEED`/`MADV_FREE`/
//!   `MADV_REMOVE` or `munmap`, reads as zeros (`Uzswap::discard`);
//! - `mprotect` to anything but read+write pins the chunks it covers, so the
//!   evictor never reads or write-protects memory the program made
//!   inaccessible; read+write again unpins them;
//! - `mremap` shrinks in place, grows in place where the addresses after
//!   the mapping are free, and otherwise moves by copying (the kernel moves
//!   page tables; a region cannot, and a copy faults evicted pages in once);
//!   the mapping keeps its protection, grown part included;
//! - `MADV_DONTNEED` on memory the program protected reads zeros once it
//!   is accessible again, even where it was evicted before it was
//!   protected;
//! - fork flags (`MADV_WIPEONFORK`, `MADV_DONTFORK`) hold for evicted
//!   memory too: the kernel applies them to what is resident, a child that
//!   takes the evicted memory over applies them to the rest
//!   (`Vmas::adopt_in_child`); a mapping moved or grown keeps them, and
//!   one given back loses them (the kernel keeps them on the addresses,
//!   which the next mapping there reuses).
//!
//! Reservations: a managed runtime (the JVM's heap, V8's pages, Go-style
//! arenas in C) reserves address space with `PROT_NONE`, commits parts of
//! it with `mprotect` to read+write or with `mmap(MAP_FIXED)` over it, and
//! gives them back with `mmap(MAP_FIXED, PROT_NONE)`. Such a reservation
//! (anonymous, private, at most [`MAX_NONE`]) is carved from a region like
//! any mapping and protected there, so what the runtime commits is
//! uzswap's memory: before, every byte of a JVM or Node heap passed
//! through, outside the budget. `MAP_FIXED` over our memory with
//! read+write or `PROT_NONE` stays ours: the range reads zeros, with that
//! protection.
//!
//! An address hint is taken as the kernel takes one: the mapping goes
//! there where those addresses are free, in a region made there when they
//! lie outside every region (`Vmas::alloc_near`). A JIT that wants its code
//! within a jump of its binary retried its `mmap` for ever when every
//! answer came from a region far off: LuaJIT ran 347 k `mmap`/`munmap`
//! pairs for one script, and never compiled it.
//!
//! Passed through untouched: file-backed, shared, hugetlb, `MAP_32BIT`,
//! stack and grows-down mappings, and any other mapping not read+write at creation
//! (executable code, read-only memory). A mapping placed with `MAP_FIXED`
//! over region memory that is not an anonymous read+write or `PROT_NONE`
//! mapping takes that range out of uzswap's hands for good: it is
//! discarded, pinned (the evictor never touches it) and never reused.
//! Deviation: region memory stays mapped after `munmap` (it reads zeros),
//! where the kernel would fault.
//!
//! Locking: `State::vmas` is held for each call, and across the uzswap
//! calls it makes. The re-entry guard (`Internal`) is up for the whole
//! call, so uzswap's own `mmap`/`madvise` calls pass straight through.

use crate::{real, Internal, State};
use libc::c_void;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use uzswap::region::Advice;
use uzswap::PAGE_SIZE;

/// Bytes of address space a region reserves (only what is touched costs
/// memory; the region's chunk table costs 8 bytes per chunk).
const RESERVE: usize = 4 << 30;
/// Largest alignment given to a mapping: mimalloc asks for segment-aligned
/// arenas and otherwise over-allocates and trims.
const MAX_ALIGN: usize = 32 << 20;
/// Largest `PROT_NONE` reservation taken into a region. Protected memory
/// is pinned chunk by chunk (8-10 bytes of the region's pin table per
/// chunk while it stays protected), so a reservation of terabytes (a
/// sanitizer's shadow, a wasm runtime's guard zones) passes through; the
/// JVM reserves its largest heap (a quarter of the machine's memory by
/// default) and V8 far less.
const MAX_NONE: usize = 64 << 30;

/// Most regions made at a program's address hints; past them hints are
/// taken only inside the regions there are.
const MAX_HINTED: usize = 64;
/// mimalloc's hints for segment-aligned memory (`_mi_os_get_aligned_hint`:
/// from 2 TiB, wrapping after 30 TiB plus a request).
const MI_HINT_BASE: usize = 2 << 40;
const MI_HINT_END: usize = 32 << 40;
/// The largest request mimalloc gives a hint (`_mi_os_get_aligned_hint`:
/// 1 GiB, plus a segment of gap).
const MI_HINT_MAX_LEN: usize = (1 << 30) + (64 << 20);

/// Most regions whose ranges `in_regions` knows. Regions are reservations
/// of at least [`RESERVE`] bytes, so this covers terabytes of address space.
const MAX_RANGES: usize = 256;

/// Every region's address range, readable without `State::vmas`: `free`
/// asks it whether a pointer is mimalloc's (alloc.rs), and may be called
/// by a thread that holds that lock. Regions are never given back, so
/// ranges are only added, by one writer at a time (under the lock).
static RANGES: [(AtomicUsize, AtomicUsize); MAX_RANGES] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_RANGES];
static RANGES_LEN: AtomicUsize = AtomicUsize::new(0);

fn record_range(base: usize, end: usize) {
    let n = RANGES_LEN.load(Relaxed);
    if n < MAX_RANGES {
        RANGES[n].0.store(base, Relaxed);
        RANGES[n].1.store(end, Relaxed);
        // Publishes the entry's two halves.
        RANGES_LEN.store(n + 1, Release);
    }
}

/// Whether `a` lies in one of the regions (memory uzswap holds).
pub fn in_regions(a: usize) -> bool {
    let n = RANGES_LEN.load(Acquire);
    RANGES[..n]
        .iter()
        .any(|(b, e)| b.load(Relaxed) <= a && a < e.load(Relaxed))
}

/// Whether `s..e` overlaps one of the regions.
pub fn overlaps_regions(s: usize, e: usize) -> bool {
    let n = RANGES_LEN.load(Acquire);
    RANGES[..n]
        .iter()
        .any(|(b, end)| s < end.load(Relaxed) && b.load(Relaxed) < e)
}

#[derive(Default)]
pub struct Vmas {
    /// (base, end, region), by base.
    regions: Vec<(usize, usize, uzswap::Region)>,
    /// Free address ranges inside regions: start → end.
    free: BTreeMap<usize, usize>,
    /// Ranges the program protected (not read+write).
    protected: Pins,
    /// Ranges the program locked (`mlock`): brought in, and locked in the
    /// kernel too, so the kernel's own swap leaves them alone as well.
    locked: Pins,
    /// The protection the program gave each range of ours that is not
    /// read+write: start → (end, prot), disjoint, neighbours with the same
    /// protection merged (as the kernel merges VMAs). Kept apart from
    /// `protected`, whose ranges match pins one to one: this map is what
    /// is restored after uzswap makes protected memory writable for a
    /// moment (a discard, a move).
    prots: RangeMap<i32>,
    /// The fork flags the program gave ranges of ours (`MADV_WIPEONFORK`,
    /// `MADV_DONTFORK`: [`WIPE`], [`DONT_FORK`]). Passed to the kernel too,
    /// which wipes or leaves out what is resident; a forked child that
    /// takes the evicted memory over must do the same to what is evicted
    /// ([`Vmas::adopt_in_child`]), and a range given back must lose them
    /// (the kernel keeps them on the addresses, which a later mapping
    /// reuses).
    on_fork: RangeMap<u8>,
    /// Regions made at a program's address hint ([`Vmas::alloc_near`]).
    hinted: usize,
    /// Ranges something else was mapped over (`MAP_FIXED`): start → end.
    foreign: BTreeMap<usize, usize>,
}

/// Ranges that hold one pin each on every chunk they touch (the evictor
/// leaves those chunks alone): start → end, never merged, so each unpin
/// matches its pin.
#[derive(Default)]
struct Pins(BTreeMap<usize, usize>);

impl Pins {
    fn any(&self, s: usize, e: usize) -> bool {
        self.0.range(..e).any(|(_, &pe)| pe > s)
    }

    /// Bytes of `s..e` in the ranges.
    fn overlap(&self, s: usize, e: usize) -> usize {
        self.0
            .range(..e)
            .filter(|(_, &pe)| pe > s)
            .map(|(&x, &y)| y.min(e) - x.max(s))
            .sum()
    }

    /// Whether every byte of `s..e` is in one of the ranges.
    fn covers(&self, s: usize, e: usize) -> bool {
        let mut a = s;
        for (&x, &y) in self.0.range(..e).filter(|(_, &pe)| pe > s) {
            if x > a {
                return false;
            }
            a = a.max(y);
        }
        a >= e
    }

    /// Pin what of `s..e` no range holds yet; returns those new ranges.
    fn add(&mut self, st: &State, s: usize, e: usize) -> Vec<(usize, usize)> {
        let mut a = s;
        let covered: Vec<(usize, usize)> = self
            .0
            .range(..e)
            .filter(|(_, &pe)| pe > s)
            .map(|(&x, &y)| (x.max(s), y.min(e)))
            .collect();
        let mut gaps = Vec::new();
        for (x, y) in covered {
            if a < x {
                gaps.push((a, x));
            }
            a = a.max(y);
        }
        if a < e {
            gaps.push((a, e));
        }
        for &(x, y) in &gaps {
            st.uz.pin_range(x, y - x);
            self.0.insert(x, y);
        }
        gaps
    }

    fn remove(&mut self, st: &State, s: usize, e: usize) {
        let hits: Vec<(usize, usize)> = self
            .0
            .range(..e)
            .filter(|(_, &pe)| pe > s)
            .map(|(&x, &y)| (x, y))
            .collect();
        let chunk = st.uz.chunk_bytes();
        for (x, y) in hits {
            self.0.remove(&x);
            // Each range holds one pin on every chunk it
            // touches. The leftovers keep the pins of their chunks (a
            // reservation of gigabytes is split by every commit, and
            // re-pinning what stays protected made each split cost the
            // whole reservation's chunks); only chunks left with no
            // byte of this range lose theirs. A chunk both
            // leftovers share (the part lifted lies inside one chunk)
            // needs a second pin.
            let left = (x < s).then_some((x, s));
            let right = (e < y).then_some((e, y));
            let (mut a, mut b) = (x.max(s), y.min(e));
            if let Some((l, r)) = left {
                self.0.insert(l, r);
                a = a.next_multiple_of(chunk);
            }
            if let Some((l, r)) = right {
                self.0.insert(l, r);
                b -= b % chunk;
            }
            if left.is_some() && right.is_some() && (s - 1) / chunk == e / chunk {
                st.uz.pin_range(e, 1);
            }
            if a < b {
                st.uz.unpin(a, b - a);
            }
        }
    }
}

/// Disjoint ranges with a value each: start → (end, value), neighbours
/// with the same value merged (as the kernel merges VMAs).
struct RangeMap<T>(BTreeMap<usize, (usize, T)>);

impl<T> Default for RangeMap<T> {
    fn default() -> Self {
        RangeMap(BTreeMap::new())
    }
}

impl<T: Copy + Eq> RangeMap<T> {
    /// The ranges that meet `s..e`, cut to it.
    fn within(&self, s: usize, e: usize) -> Vec<(usize, usize, T)> {
        self.0
            .range(..e)
            .filter(|(_, &(y, _))| y > s)
            .map(|(&x, &(y, v))| (x.max(s), y.min(e), v))
            .collect()
    }

    /// The one value of `s..e`: None where none of it has one, Err where
    /// parts differ.
    fn one_of(&self, s: usize, e: usize) -> Result<Option<T>, ()> {
        let mut hits = self.0.range(..e).filter(|(_, &(y, _))| y > s);
        match (hits.next(), hits.next()) {
            (None, _) => Ok(None),
            (Some((&x, &(y, v))), None) if x <= s && e <= y => Ok(Some(v)),
            _ => Err(()),
        }
    }

    /// Give `s..e` the value `v` (None: no value).
    fn set(&mut self, mut s: usize, mut e: usize, v: Option<T>) {
        for (x, y, w) in self.within(s, e) {
            let (x0, y0) = self
                .0
                .range(..=x)
                .next_back()
                .map(|(&a, &(b, _))| (a, b))
                .expect("a range found above");
            self.0.remove(&x0);
            if x0 < x {
                self.0.insert(x0, (x, w));
            }
            if y < y0 {
                self.0.insert(y, (y0, w));
            }
        }
        let Some(v) = v else { return };
        if let Some((&x, &(y, w))) = self.0.range(..s).next_back() {
            if y == s && w == v {
                self.0.remove(&x);
                s = x;
            }
        }
        if let Some(&(y, w)) = self.0.get(&e) {
            if w == v {
                self.0.remove(&e);
                e = y;
            }
        }
        self.0.insert(s, (e, v));
    }

    /// Change the value of every part of `s..e` (gaps included) by `f`.
    fn update(&mut self, s: usize, e: usize, f: impl Fn(Option<T>) -> Option<T>) {
        let mut parts = Vec::new();
        let mut at = s;
        for (x, y, v) in self.within(s, e) {
            if at < x {
                parts.push((at, x, None));
            }
            parts.push((x, y, Some(v)));
            at = y;
        }
        if at < e {
            parts.push((at, e, None));
        }
        for (x, y, v) in parts {
            self.set(x, y, f(v));
        }
    }
}

/// `on_fork` bits.
pub(crate) const WIPE: u8 = 1;
pub(crate) const DONT_FORK: u8 = 2;

fn page_up(n: usize) -> Option<usize> {
    n.checked_next_multiple_of(PAGE_SIZE)
}

/// The parts of `s..e` in (`true`) and out of region memory that is ours.
type Parts = Vec<(usize, usize, bool)>;

impl Vmas {
    fn region_of(&self, a: usize) -> Option<(usize, usize)> {
        self.regions
            .iter()
            .find(|(b, e, _)| *b <= a && a < *e)
            .map(|(b, e, _)| (*b, *e))
    }

    fn overlaps(&self, s: usize, e: usize) -> bool {
        self.regions.iter().any(|(b, end, _)| s < *end && *b < e)
    }

    fn in_foreign(&self, a: usize) -> Option<usize> {
        let (&fs, &fe) = self.foreign.range(..=a).next_back()?;
        (fs <= a && a < fe).then_some(fe)
    }

    /// Split `s..e` into runs that are ours (in a region, not foreign) and
    /// runs that are not.
    pub(crate) fn parts(&self, s: usize, e: usize) -> Parts {
        let mut out: Parts = Vec::new();
        let mut a = s;
        while a < e {
            let (next, ours) = if let Some(fe) = self.in_foreign(a) {
                (fe.min(e), false)
            } else if let Some((_, re)) = self.region_of(a) {
                let f = self
                    .foreign
                    .range(a..re.min(e))
                    .next()
                    .map_or(re.min(e), |(&fs, _)| fs);
                (f, true)
            } else {
                let nb = self
                    .regions
                    .iter()
                    .map(|(b, _, _)| *b)
                    .filter(|&b| b > a)
                    .min()
                    .unwrap_or(e);
                (nb.min(e), false)
            };
            match out.last_mut() {
                Some(l) if l.2 == ours && l.1 == a => l.1 = next,
                _ => out.push((a, next, ours)),
            }
            a = next;
        }
        out
    }

    fn remove_free(&mut self, s: usize, e: usize) {
        let hits: Vec<(usize, usize)> = self
            .free
            .range(..e)
            .filter(|(_, &fe)| fe > s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in hits {
            self.free.remove(&a);
            if a < s {
                self.free.insert(a, s);
            }
            if e < b {
                self.free.insert(e, b);
            }
        }
    }

    fn all_free(&self, s: usize, e: usize) -> bool {
        self.free
            .range(..=s)
            .next_back()
            .is_some_and(|(&a, &b)| a <= s && e <= b)
    }

    fn insert_free(&mut self, mut s: usize, mut e: usize) {
        let reg = self.region_of(s);
        if let Some((&a, &b)) = self.free.range(..=s).next_back() {
            if b == s && self.region_of(a) == reg {
                self.free.remove(&a);
                s = a;
            }
        }
        if let Some(&b) = self.free.get(&e) {
            if self.region_of(e) == reg {
                self.free.remove(&e);
                e = b;
            }
        }
        self.free.insert(s, e);
    }

    /// A free range of `len` bytes (page-rounded), aligned for its size;
    /// a new region when none is left.
    fn alloc(&mut self, st: &State, len: usize) -> Option<usize> {
        let align = if len >= 2 << 20 {
            (1usize << (usize::BITS - 1 - len.leading_zeros())).min(MAX_ALIGN)
        } else {
            PAGE_SIZE
        };
        for _ in 0..2 {
            let hit = self.free.iter().find_map(|(&s, &e)| {
                let a = s.checked_next_multiple_of(align)?;
                (a.checked_add(len)? <= e).then_some((s, e, a))
            });
            if let Some((s, e, a)) = hit {
                self.free.remove(&s);
                if s < a {
                    self.free.insert(s, a);
                }
                if a + len < e {
                    self.free.insert(a + len, e);
                }
                return Some(a);
            }
            let size = len.checked_add(align)?.max(RESERVE);
            self.add_region(st.uz.region(size).ok()?);
        }
        None
    }

    fn add_region(&mut self, r: uzswap::Region) {
        let base = r.as_ptr() as usize;
        let end = base + r.len();
        let at = self.regions.partition_point(|(b, _, _)| *b < base);
        self.regions.insert(at, (base, end, r));
        record_range(base, end);
        self.free.insert(base, end);
    }

    /// In a forked child: every region taken over by `uz`, the child's own
    /// instance (`Uzswap::adopt`: what the parent left mapped stays, charged
    /// to nobody), with the parent's handles leaked (they belong to its
    /// threads), protected ranges pinned again, and locks dropped (fork(2):
    /// memory locks are not inherited). On failure the handles taken over
    /// so far are leaked too, and the child runs detached.
    ///
    /// With `inheriting`, each region's evicted chunks are taken over too
    /// (`Uzswap::adopt_inheriting`): only in a child forked after the
    /// parent's `ForkGuard::sharable` held, its instance given up.
    pub(crate) fn adopt_in_child(
        &mut self,
        uz: &uzswap::Uzswap,
        inheriting: bool,
    ) -> Result<(), String> {
        for (base, end, r) in self.regions.iter_mut() {
            let new = if inheriting {
                // SAFETY: the caller's (above).
                unsafe { uz.adopt_inheriting(r) }
            } else {
                uz.adopt(r)
            }
            .map_err(|e| format!("taking over {base:#x}..{end:#x}: {e}"))?;
            std::mem::forget(std::mem::replace(r, new));
        }
        for (&s, &e) in &self.protected.0 {
            uz.pin_range(s, e - s);
        }
        self.locked = Pins::default();
        // The program's fork flags, as the kernel applied them to what was
        // resident: a range to wipe reads zeros here, what was evicted too
        // (taken over, it read the parent's bytes: a generator's state
        // kept apart from its children's was theirs again); a range left
        // out is not mapped here at all, and not uzswap's any more (pinned:
        // no eviction reads it).
        for (a, b, f) in self.fork_flagged() {
            if f & DONT_FORK != 0 {
                uz.pin_range(a, b - a);
                self.foreign.insert(a, b);
                self.on_fork.set(a, b, None);
            } else if self.writable(a, b).is_ok() {
                let _ = uz.discard(a, b - a);
                let _ = self.restore_prots(a, b);
            }
        }
        Ok(())
    }

    /// [`Self::alloc`] at `hint`, as mmap(2) takes one: exactly there where
    /// those addresses are free region memory, and in a new region placed
    /// there where they lie outside every region, so the memory stays
    /// uzswap's and where the program wanted it (LuaJIT places its machine
    /// code within a jump of its binary and retries until it is; the JVM
    /// asks for its heap under 32 GiB for compressed pointers). First-fit
    /// otherwise, and past [`MAX_HINTED`] such regions.
    fn alloc_near(&mut self, st: &State, hint: usize, len: usize) -> Option<usize> {
        let hint = hint & !(PAGE_SIZE - 1);
        let Some(end) = hint.checked_add(len).filter(|_| hint != 0) else {
            return self.alloc(st, len);
        };
        // mimalloc's own hints for its aligned segments (never over 1 GiB):
        // first-fit in the regions, as before (a region per segment would
        // spend them). ZGC's heap views lie in the same window, larger.
        let allocators = MI_HINT_BASE..MI_HINT_END;
        let mimalloc = allocators.contains(&hint) && len <= MI_HINT_MAX_LEN;
        if !self.all_free(hint, end)
            && !self.overlaps(hint, end)
            && !mimalloc
            && self.hinted < MAX_HINTED
        {
            let at = hint - hint % st.uz.chunk_bytes();
            if let Ok(r) = st.uz.region_near(at, end - at) {
                self.hinted += 1;
                self.add_region(r);
            }
        }
        if self.all_free(hint, end) {
            self.remove_free(hint, end);
            return Some(hint);
        }
        self.alloc(st, len)
    }

    /// Give `s..e` (ours) back: its protection pins go, its memory is
    /// discarded, and the addresses are free again.
    fn give_back(&mut self, st: &State, s: usize, e: usize) {
        let _ = self.discard(st, s, e);
        self.remove_free(s, e);
        self.insert_free(s, e);
    }

    /// `s..e` (ours) as a new anonymous mapping has it: zeros, read+write,
    /// unlocked, no fork flags, its protection and lock pins gone. What the program
    /// protected is made writable first, while still pinned (no eviction
    /// reads it), since the discard writes zeros into chunks it covers in
    /// part; where that fails nothing else is done.
    fn discard(&mut self, st: &State, s: usize, e: usize) -> Result<(), i32> {
        self.writable(s, e)?;
        self.unprotect(st, s, e);
        self.set_prot(s, e, None);
        self.unlock(st, s, e);
        self.clear_fork_flags(s, e);
        let _ = st.uz.discard(s, e - s);
        Ok(())
    }

    /// Make what the program protected in `s..e` (ours) read+write again,
    /// without unpinning it: before a discard, which writes zeros.
    fn writable(&self, s: usize, e: usize) -> Result<(), i32> {
        if !self.protected.any(s, e) {
            return Ok(());
        }
        // SAFETY: region memory, ours.
        match unsafe { real::mprotect(s as *mut c_void, e - s, RW) } {
            0 => Ok(()),
            _ => Err(crate::errno()),
        }
    }

    /// Record that `s..e` (ours) has protection `prot` (None: read+write).
    fn set_prot(&mut self, s: usize, e: usize, prot: Option<i32>) {
        self.prots.set(s, e, prot);
    }

    /// The one protection of `s..e`: None where it is all read+write, or
    /// Err where parts differ (the kernel's mremap answers EFAULT for a
    /// range over more than one mapping).
    fn prot_of(&self, s: usize, e: usize) -> Result<Option<i32>, ()> {
        self.prots.one_of(s, e)
    }

    /// Give the program's protection back to `s..e` after [`Self::writable`].
    fn restore_prots(&self, s: usize, e: usize) -> Result<(), i32> {
        for (a, b, p) in self.prots.within(s, e) {
            // SAFETY: region memory, ours, given the program's protection.
            if unsafe { real::mprotect(a as *mut c_void, b - a, p) } != 0 {
                return Err(crate::errno());
            }
        }
        Ok(())
    }

    /// Record the fork flag `advice` (`MADV_WIPEONFORK`, `MADV_KEEPONFORK`,
    /// `MADV_DONTFORK`, `MADV_DOFORK`) on `s..e` (ours), which the kernel
    /// took.
    fn fork_advice(&mut self, s: usize, e: usize, advice: i32) {
        let (set, clear) = match advice {
            libc::MADV_WIPEONFORK => (WIPE, 0),
            libc::MADV_KEEPONFORK => (0, WIPE),
            libc::MADV_DONTFORK => (DONT_FORK, 0),
            libc::MADV_DOFORK => (0, DONT_FORK),
            _ => return,
        };
        self.on_fork.update(s, e, |f| {
            let f = (f.unwrap_or(0) | set) & !clear;
            (f != 0).then_some(f)
        });
    }

    /// Give `s..e` (ours, without fork flags) the flags `f`, as a mapping
    /// moved or grown keeps its own.
    fn set_fork_flags(&mut self, s: usize, e: usize, f: u8) -> Result<(), i32> {
        for (bit, advice) in [
            (WIPE, libc::MADV_WIPEONFORK),
            (DONT_FORK, libc::MADV_DONTFORK),
        ] {
            // SAFETY: region memory, ours.
            if f & bit != 0 && unsafe { real::madvise(s as *mut c_void, e - s, advice) } != 0 {
                return Err(crate::errno());
            }
        }
        self.on_fork.set(s, e, (f != 0).then_some(f));
        Ok(())
    }

    /// Take every fork flag off `s..e` (ours), in the kernel too.
    fn clear_fork_flags(&mut self, s: usize, e: usize) {
        for (a, b, f) in self.on_fork.within(s, e) {
            for (bit, advice) in [
                (WIPE, libc::MADV_KEEPONFORK),
                (DONT_FORK, libc::MADV_DOFORK),
            ] {
                if f & bit != 0 {
                    // SAFETY: region memory, ours; undoes the program's flag.
                    unsafe { real::madvise(a as *mut c_void, b - a, advice) };
                }
            }
        }
        self.on_fork.set(s, e, None);
    }

    /// For a fork that leaves evicted memory to its child: the parts of
    /// chunks that a range flagged `MADV_DONTFORK` cuts, outside it,
    /// brought in and held so until the fork is done. The kernel copies
    /// them and leaves the range out; the child could not install such a
    /// chunk whole (a page of it is not mapped there) and must never evict
    /// it (`adopt_in_child` pins it). Evicted at the fork, the child lost
    /// its neighbours' bytes there (a free that failed, SIGBUS, SIGSEGV:
    /// one child in ten).
    pub(crate) fn pin_fork_edges(
        &self,
        st: &'static State,
    ) -> Vec<uzswap::region::PinGuard<'static>> {
        let c = st.uz.chunk_bytes();
        let mut pins = Vec::new();
        for (a, b, f) in self.fork_flagged() {
            if f & DONT_FORK == 0 {
                continue;
            }
            let edges = [(a - a % c, a), (b, b.next_multiple_of(c))];
            for (x, y) in edges.into_iter().filter(|(x, y)| x < y) {
                for (p, q, ours) in self.parts(x, y) {
                    if ours
                        && !self
                            .on_fork
                            .within(p, q)
                            .iter()
                            .any(|r| r.2 & DONT_FORK != 0)
                    {
                        pins.push(st.uz.pin(p, q - p, false));
                    }
                }
            }
        }
        pins
    }

    /// In a child just forked: hold every range left out of it
    /// (`MADV_DONTFORK`) with an inaccessible mapping, before anything
    /// else is mapped. The kernel left those addresses free here, inside
    /// what this map says is region memory: the child instance's thread
    /// stacks were mapped there, its regions' registration then took them
    /// in, and a stack's first touch faulted in the parent's evicted bytes
    /// (a free that failed, SIGSEGV, SIGBUS: one child in ten). An access
    /// still ends the program with SIGSEGV, as in the hole.
    pub(crate) fn hold_fork_holes(&self) {
        for (a, b) in self.fork_ranges(DONT_FORK) {
            hold_hole(a, b);
        }
    }

    /// The ranges with fork flags, and their flags.
    fn fork_flagged(&self) -> Vec<(usize, usize, u8)> {
        self.on_fork.within(0, usize::MAX)
    }

    /// The ranges with the fork flag `bit` ([`WIPE`], [`DONT_FORK`]).
    pub(crate) fn fork_ranges(&self, bit: u8) -> Vec<(usize, usize)> {
        let flagged = self.fork_flagged().into_iter();
        flagged
            .filter(|r| r.2 & bit != 0)
            .map(|r| (r.0, r.1))
            .collect()
    }

    /// Protect `s..e` (ours, read+write) with `prot` as the program asked:
    /// pinned first, so no eviction reads it from then on.
    fn protect_as(&mut self, st: &State, s: usize, e: usize, prot: i32) -> Result<(), i32> {
        self.protect(st, s, e);
        // SAFETY: region memory, ours.
        if unsafe { real::mprotect(s as *mut c_void, e - s, prot) } != 0 {
            return Err(crate::errno());
        }
        self.set_prot(s, e, Some(prot));
        Ok(())
    }

    fn protect(&mut self, st: &State, s: usize, e: usize) {
        self.protected.add(st, s, e);
    }

    /// Lock `s..e` (ours) as mlock(2) does: pinned first (the evictor's
    /// zap of a mapping the kernel has locked is refused), brought in
    /// unless `on_fault` (by us: in user mode the kernel's own populate
    /// could not fault evicted memory in), then locked in the kernel, so
    /// the machine's swap leaves it alone too. Undone where the kernel
    /// refuses (`RLIMIT_MEMLOCK`).
    ///
    /// Locked memory of ours is limited to half the budget, as
    /// `RLIMIT_MEMLOCK` limits it: past that the lock fails with ENOMEM
    /// (pinned memory cannot be evicted, so a budget all locked would be
    /// no budget).
    pub(crate) fn lock(
        &mut self,
        st: &State,
        s: usize,
        e: usize,
        on_fault: bool,
    ) -> Result<(), i32> {
        let held: usize = self.locked.0.iter().map(|(a, b)| b - a).sum();
        let more = (e - s) - self.locked.overlap(s, e);
        if (held + more) as u64 > st.cfg.budget / 2 {
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                crate::say(&format!(
                    "mlock: {} MiB locked would pass half the budget; refused (ENOMEM)",
                    (held + more) >> 20
                ))
            });
            return Err(libc::ENOMEM);
        }
        let added = self.locked.add(st, s, e);
        if !on_fault {
            self.bring_in(st, s, e);
        }
        let flags = if on_fault {
            crate::mlock::MLOCK_ONFAULT
        } else {
            0
        };
        // SAFETY: region memory, ours.
        if unsafe { real::mlock2(s as *const c_void, e - s, flags) } != 0 {
            let err = crate::errno();
            for (x, y) in added {
                self.locked.remove(st, x, y);
            }
            return Err(err);
        }
        Ok(())
    }

    /// Undo [`Self::lock`] over `s..e` (ours).
    pub(crate) fn unlock(&mut self, st: &State, s: usize, e: usize) {
        if self.locked.any(s, e) {
            // SAFETY: region memory, ours.
            unsafe { real::munlock(s as *const c_void, e - s) };
            self.locked.remove(st, s, e);
        }
    }

    /// Bring `s..e` (ours) in as the kernel's populate would: written where
    /// the program may write, read where it may only read, and left alone
    /// where it may not read (a touch there would fault in our hands).
    fn bring_in(&self, st: &State, s: usize, e: usize) {
        let mut a = s;
        let prots: Vec<(usize, usize, i32)> = self
            .prots
            .within(s, e)
            .into_iter()
            .chain(std::iter::once((e, e, RW)))
            .collect();
        for (x, y, p) in prots {
            if a < x {
                drop(st.uz.pin(a, x - a, true));
            }
            if x < y && p & libc::PROT_READ != 0 {
                drop(st.uz.pin(x, y - x, p & libc::PROT_WRITE != 0));
            }
            a = a.max(y);
        }
    }

    /// Whether `s..e` is locked: all of it, none of it, or Err for parts
    /// (more than one mapping, to the kernel).
    fn locked_of(&self, s: usize, e: usize) -> Result<bool, ()> {
        match (self.locked.covers(s, e), self.locked.any(s, e)) {
            (true, _) => Ok(true),
            (false, false) => Ok(false),
            (false, true) => Err(()),
        }
    }

    /// Every range [`Self::lock`] holds.
    pub(crate) fn locked_ranges(&self) -> Vec<(usize, usize)> {
        self.locked.0.iter().map(|(&a, &b)| (a, b)).collect()
    }

    fn unprotect(&mut self, st: &State, s: usize, e: usize) {
        self.protected.remove(st, s, e);
    }

    /// Something other than our anonymous memory is mapped over `s..e`:
    /// from now on it is not uzswap's.
    fn forget(&mut self, st: &State, s: usize, e: usize) {
        for (a, b, ours) in self.parts(s, e) {
            if ours {
                let _ = self.discard(st, a, b);
                st.uz.pin_range(a, b - a);
                self.remove_free(a, b);
                self.foreign.insert(a, b);
            }
        }
    }
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;
const MAP_FIXED_NOREPLACE: i32 = 0x100000;

/// `a..b` mapped inaccessible, whatever was there.
pub(crate) fn hold_hole(a: usize, b: usize) {
    let flags = libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a range of ours that this process does not have.
    unsafe { real::mmap(a as *mut c_void, b - a, libc::PROT_NONE, flags, -1, 0) };
}

fn failed(e: i32) -> *mut c_void {
    crate::set_errno(e);
    libc::MAP_FAILED
}

fn failed_rc(e: i32) -> i32 {
    crate::set_errno(e);
    -1
}

/// # Safety
/// As mmap(2).
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    off: libc::off_t,
) -> *mut c_void {
    let Some(st) = crate::active_for_memory() else {
        // SAFETY: the caller's arguments.
        return unsafe { real::mmap(addr, len, prot, flags, fd, off) };
    };
    let _g = Internal::enter();
    // MAP_32BIT (memory under 2 GiB, for code that keeps 32-bit pointers)
    // passes through: regions lie higher.
    let private = flags & libc::MAP_ANONYMOUS != 0
        && flags & 0x0f == libc::MAP_PRIVATE
        && flags & (libc::MAP_HUGETLB | libc::MAP_GROWSDOWN | libc::MAP_STACK | libc::MAP_32BIT)
            == 0;
    let anon = private && prot == RW;
    // Address space reserved, or given back (`MAP_FIXED`), inaccessible.
    let none = private && prot == libc::PROT_NONE;
    let Some(len) = page_up(len).filter(|&l| l > 0) else {
        // SAFETY: as above (the kernel answers EINVAL).
        return unsafe { real::mmap(addr, len, prot, flags, fd, off) };
    };
    let mut v = st.vmas.lock();
    if flags & (libc::MAP_FIXED | MAP_FIXED_NOREPLACE) != 0 {
        let s = addr as usize;
        let Some(e) = s.checked_add(len) else {
            return failed(libc::EINVAL);
        };
        if v.overlaps(s, e) {
            let whole = matches!(v.parts(s, e).as_slice(), [(_, _, true)]);
            if (anon || none) && whole {
                if flags & MAP_FIXED_NOREPLACE != 0 && !v.all_free(s, e) {
                    return failed(libc::EEXIST);
                }
                // A new mapping reads zeros: what was protected is made
                // writable (still pinned, so no eviction reads it) for the
                // discard, which writes zeros into chunks it covers in
                // part, and then given the new protection.
                if let Err(e) = v.discard(st, s, e) {
                    return failed(e);
                }
                v.remove_free(s, e);
                if none {
                    if let Err(e) = v.protect_as(st, s, e, libc::PROT_NONE) {
                        return failed(e);
                    }
                }
                return addr;
            }
            v.forget(st, s, e);
        }
        drop(v);
        // SAFETY: as above.
        return unsafe { real::mmap(addr, len, prot, flags, fd, off) };
    }
    if !(anon || (none && len <= MAX_NONE)) {
        drop(v);
        // SAFETY: as above.
        return unsafe { real::mmap(addr, len, prot, flags, fd, off) };
    }
    match v.alloc_near(st, addr as usize, len) {
        Some(a) if none => {
            // Fresh memory is never evicted anyway.
            if let Err(e) = v.protect_as(st, a, a + len, libc::PROT_NONE) {
                v.give_back(st, a, a + len);
                return failed(e);
            }
            a as *mut c_void
        }
        Some(a) => {
            drop(v);
            if flags & libc::MAP_POPULATE != 0 {
                drop(st.uz.pin(a, len, true));
            }
            a as *mut c_void
        }
        None => {
            drop(v);
            // No region to be had: plain memory, outside the budget.
            // SAFETY: as above.
            unsafe { real::mmap(addr, len, prot, flags, fd, off) }
        }
    }
}

/// # Safety
/// As munmap(2).
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> i32 {
    let s = addr as usize;
    let e = page_up(len).and_then(|l| s.checked_add(l));
    let (Some(st), Some(e)) = (crate::active_for_memory(), e) else {
        // SAFETY: the caller's arguments.
        return unsafe { real::munmap(addr, len) };
    };
    let _g = Internal::enter();
    let mut v = st.vmas.lock();
    if s & (PAGE_SIZE - 1) != 0 || !v.overlaps(s, e) {
        drop(v);
        // SAFETY: as above.
        return unsafe { real::munmap(addr, len) };
    }
    let mut rc = 0;
    for (a, b, ours) in v.parts(s, e) {
        if ours {
            v.give_back(st, a, b);
        } else {
            // SAFETY: a part of the caller's range that is not ours.
            rc |= unsafe { real::munmap(a as *mut _, b - a) };
        }
    }
    rc
}

/// # Safety
/// As mremap(2); `new_addr` is read only with `MREMAP_FIXED`.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: usize,
    new_len: usize,
    flags: i32,
    new_addr: *mut c_void,
) -> *mut c_void {
    let s = old as usize;
    let lens = page_up(old_len).zip(page_up(new_len));
    let ours = crate::active_for_memory()
        .zip(lens)
        .filter(|(st, (ol, _))| {
            *ol > 0 && s & (PAGE_SIZE - 1) == 0 && {
                let _g = Internal::enter();
                let v = st.vmas.lock();
                matches!(v.parts(s, s + ol).as_slice(), [(_, _, true)])
            }
        });
    let Some((st, (old_len, new_len))) = ours else {
        // SAFETY: the caller's arguments.
        return unsafe { real::mremap(old, old_len, new_len, flags, new_addr) };
    };
    let _g = Internal::enter();
    if new_len == 0 || flags & !libc::MREMAP_MAYMOVE != 0 {
        // MREMAP_FIXED / MREMAP_DONTUNMAP on region memory: not offered.
        return failed(libc::EINVAL);
    }
    let mut v = st.vmas.lock();
    // The kernel moves or grows one mapping with its protection, and
    // answers EFAULT for a range over mappings that differ.
    let (Ok(prot), Ok(locked), Ok(fork_flags)) = (
        v.prot_of(s, s + old_len),
        v.locked_of(s, s + old_len),
        v.on_fork.one_of(s, s + old_len),
    ) else {
        return failed(libc::EFAULT);
    };
    let fork_flags = fork_flags.unwrap_or(0);
    if new_len <= old_len {
        if new_len < old_len {
            v.give_back(st, s + new_len, s + old_len);
        }
        return old;
    }
    let (grow_s, grow_e) = (s + old_len, s + new_len);
    if v.region_of(grow_e - 1) == v.region_of(s) && v.all_free(grow_s, grow_e) {
        v.remove_free(grow_s, grow_e);
        // Locked (brought in while still writable), then protected.
        let grown = match locked {
            true => v.lock(st, grow_s, grow_e, false),
            false => Ok(()),
        };
        let grown = grown.and_then(|()| match prot {
            Some(p) => v.protect_as(st, grow_s, grow_e, p),
            None => Ok(()),
        });
        let grown = grown.and_then(|()| v.set_fork_flags(grow_s, grow_e, fork_flags));
        if let Err(e) = grown {
            v.give_back(st, grow_s, grow_e);
            return failed(e);
        }
        return old;
    }
    if flags & libc::MREMAP_MAYMOVE == 0 {
        return failed(libc::ENOMEM);
    }
    let Some(new) = v.alloc(st, new_len) else {
        return failed(libc::ENOMEM);
    };
    // Protected memory is read through for the copy (it stays pinned).
    if let Err(e) = v.writable(s, s + old_len) {
        v.give_back(st, new, new + new_len);
        return failed(e);
    }
    // SAFETY: two live ranges of region memory that do not overlap (the
    // new one was free); the copy faults evicted pages in.
    unsafe { std::ptr::copy_nonoverlapping(old as *const u8, new as *mut u8, old_len) };
    let moved = match locked {
        true => v.lock(st, new, new + new_len, false),
        false => Ok(()),
    };
    let moved = moved.and_then(|()| match prot {
        Some(p) => v.protect_as(st, new, new + new_len, p),
        None => Ok(()),
    });
    let moved = moved.and_then(|()| v.set_fork_flags(new, new + new_len, fork_flags));
    if let Err(e) = moved {
        let _ = v.restore_prots(s, s + old_len);
        v.give_back(st, new, new + new_len);
        return failed(e);
    }
    v.give_back(st, s, s + old_len);
    new as *mut c_void
}

/// # Safety
/// As madvise(2).
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: usize, advice: i32) -> i32 {
    let s = addr as usize;
    let e = page_up(len).and_then(|l| s.checked_add(l));
    let (Some(st), Some(e)) = (crate::active_for_memory(), e) else {
        // SAFETY: the caller's arguments.
        return unsafe { real::madvise(addr, len, advice) };
    };
    let _g = Internal::enter();
    let v = st.vmas.lock();
    if s & (PAGE_SIZE - 1) != 0 || !v.overlaps(s, e) {
        drop(v);
        // SAFETY: as above.
        return unsafe { real::madvise(addr, len, advice) };
    }
    let parts = v.parts(s, e);
    let dropping = matches!(
        advice,
        libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE
    );
    if dropping && v.locked.any(s, e) {
        // The kernel refuses to drop locked memory.
        return failed_rc(libc::EINVAL);
    }
    let protected: Vec<(usize, usize)> = v
        .protected
        .0
        .range(..e)
        .filter(|(_, &pe)| pe > s)
        .map(|(&a, &b)| (a, b))
        .collect();
    drop(v);
    let mut rc = 0;
    for (a, b, ours) in parts {
        let n = b - a;
        if !ours {
            // SAFETY: a part of the caller's range that is not ours.
            rc |= unsafe { real::madvise(a as *mut _, n, advice) };
            continue;
        }
        let hint = |h| st.uz.advise_range(a, n, h).map_or(-1, |_| 0);
        rc |= match advice {
            libc::MADV_DONTNEED | libc::MADV_FREE | libc::MADV_REMOVE => {
                if protected.iter().any(|&(x, y)| x < b && a < y) {
                    // Memory the program protected (PartitionAlloc
                    // decommits with mprotect(PROT_NONE) then DONTNEED) is
                    // pinned, perhaps unwritable, and perhaps stored before
                    // it was protected: the kernel's DONTNEED alone would
                    // leave that copy to come back after the program made
                    // it accessible again. Writable for the discard (it
                    // writes zeros into chunks it covers in part; the pin
                    // keeps the evictor off), then protected again.
                    let v = st.vmas.lock();
                    match v.writable(a, b) {
                        Ok(()) => {
                            let d = st.uz.discard(a, n);
                            match v.restore_prots(a, b) {
                                Err(e) => {
                                    crate::set_errno(e);
                                    -1
                                }
                                Ok(()) => d.map_or(-1, |_| 0),
                            }
                        }
                        Err(e) => {
                            crate::set_errno(e);
                            -1
                        }
                    }
                } else {
                    st.uz.discard(a, n).map_or(-1, |_| 0)
                }
            }
            libc::MADV_WILLNEED => hint(Advice::WillNeed),
            libc::MADV_COLD => hint(Advice::Cold),
            libc::MADV_PAGEOUT => hint(Advice::PageOut),
            libc::MADV_POPULATE_READ | libc::MADV_POPULATE_WRITE => {
                drop(st.uz.pin(a, n, advice == libc::MADV_POPULATE_WRITE));
                0
            }
            // Huge pages and merging do not apply to memory served by
            // whole chunks through userfaultfd.
            libc::MADV_HUGEPAGE
            | libc::MADV_NOHUGEPAGE
            | libc::MADV_MERGEABLE
            | libc::MADV_UNMERGEABLE
            | 25 => 0,
            libc::MADV_WIPEONFORK
            | libc::MADV_KEEPONFORK
            | libc::MADV_DONTFORK
            | libc::MADV_DOFORK => {
                // The kernel's flag and our record change under one hold
                // of the map: a concurrent munmap clears both or neither.
                let mut v = st.vmas.lock();
                // SAFETY: as above.
                let r = unsafe { real::madvise(a as *mut _, n, advice) };
                if r == 0 {
                    v.fork_advice(a, b, advice);
                }
                r
            }
            // The sampler's splits must not undo it (`program_dont_dump`).
            // SAFETY: as above.
            libc::MADV_DONTDUMP => st
                .uz
                .program_dont_dump(|| unsafe { real::madvise(a as *mut _, n, advice) }),
            // SAFETY: as above (the other dump flag, and the rest).
            _ => unsafe { real::madvise(a as *mut _, n, advice) },
        };
    }
    rc
}

/// # Safety
/// As mprotect(2).
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: usize, prot: i32) -> i32 {
    let s = addr as usize;
    let e = page_up(len).and_then(|l| s.checked_add(l));
    let (Some(st), Some(e)) = (crate::active_for_memory(), e) else {
        // SAFETY: the caller's arguments.
        return unsafe { real::mprotect(addr, len, prot) };
    };
    let _g = Internal::enter();
    let mut v = st.vmas.lock();
    if s & (PAGE_SIZE - 1) != 0 || !v.overlaps(s, e) {
        drop(v);
        // SAFETY: as above.
        return unsafe { real::mprotect(addr, len, prot) };
    }
    let ours: Vec<(usize, usize)> = v
        .parts(s, e)
        .into_iter()
        .filter(|p| p.2)
        .map(|p| (p.0, p.1))
        .collect();
    if prot != RW {
        for &(a, b) in &ours {
            v.protect(st, a, b);
        }
    }
    // SAFETY: as above.
    let rc = unsafe { real::mprotect(addr, len, prot) };
    if rc == 0 {
        for &(a, b) in &ours {
            if prot == RW {
                v.unprotect(st, a, b);
                v.set_prot(a, b, None);
            } else {
                v.set_prot(a, b, Some(prot));
            }
        }
    }
    rc
}

/// The same function under its large-file name (programs built with
/// `_FILE_OFFSET_BITS=64`, such as CPython, call this one).
///
/// # Safety
/// As mmap(2).
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: the same function.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

#[cfg(test)]
mod tests {
    use super::RangeMap;
    use proptest::prelude::*;

    /// The map against a value per unit: after any sequence of sets and
    /// updates it holds the same values, as disjoint ranges with no two
    /// neighbours of one value (the kernel's VMAs merged).
    fn check(m: &RangeMap<u8>, model: &[Option<u8>]) {
        let mut prev: Option<(usize, u8)> = None;
        for (&x, &(y, v)) in &m.0 {
            assert!(x < y, "an empty range at {x}");
            if let Some((pe, pv)) = prev {
                assert!(pe <= x, "overlap at {x}");
                assert!(!(pe == x && pv == v), "unmerged neighbours at {x}");
            }
            prev = Some((y, v));
        }
        for (i, &want) in model.iter().enumerate() {
            let got = m.one_of(i, i + 1).expect("one range per unit");
            assert_eq!(got, want, "unit {i}");
        }
    }

    proptest! {
        #[test]
        fn sets_and_updates_match_a_value_per_unit(
            ops in proptest::collection::vec((0usize..64, 1usize..24, 0u8..4, any::<bool>()), 1..40)
        ) {
            let mut m = RangeMap::default();
            let mut model = vec![None; 96];
            for (s, n, v, update) in ops {
                let e = s + n;
                if update {
                    // Set bit v, or clear it where v is 0.
                    let f = |o: Option<u8>| {
                        let o = o.unwrap_or(0);
                        let n = if v == 0 { o & !1 } else { o | v };
                        (n != 0).then_some(n)
                    };
                    m.update(s, e, f);
                    for u in &mut model[s..e] {
                        *u = f(*u);
                    }
                } else {
                    let v = (v != 0).then_some(v);
                    m.set(s, e, v);
                    model[s..e].fill(v);
                }
                check(&m, &model);
            }
            // A range that spans parts of different values has none.
            let parts = m.within(0, 96);
            if parts.len() > 1 {
                let (a, _, _) = parts[0];
                let (_, b, _) = parts[parts.len() - 1];
                prop_assert!(m.one_of(a, b).is_err());
            }
        }
    }
}
