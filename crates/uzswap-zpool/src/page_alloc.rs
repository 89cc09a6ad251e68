//! The page-run provider under the spans: the pool's buddy allocator
//! (mm/page_alloc.c), reduced to what spans need.
//!
//! Spans are 1..=[`MAX_RUN_PAGES`] contiguous pages. Mapping each one on its
//! own costs an `mmap` plus first-touch faults per span and a `munmap` (with a
//! TLB shootdown to every other CPU running the process) per emptied span,
//! and every mapping is a VMA that counts against `vm.max_map_count`. So
//! memory is taken from the OS in *arenas* of [`ARENA_BYTES`] (one `mmap`
//! each), carved into runs, and a run a span gives back is kept on a free
//! list of its length: getting a span is usually a pop, returning one a push.
//!
//! Page states inside an arena (two bitmaps, `free` and `dirty`):
//! ```text
//!  clean  free, not dirty: never touched or given back; holds no memory,
//!         except in a huge arena, whose clean pages are its reserve
//!  used   not free: part of a live span, or being filled (below)
//!  cached free and dirty: on a free list, or in `ahead`; may hold memory
//!  clean --alloc (fresh space)--> used --free--> cached --pop--> used
//!  cached --trim: MADV_DONTNEED, or munmap of a wholly free arena--> clean
//!  clean --fill thread reserves--> used (filling, no span; lock dropped)
//!  filling --faulted in--> cached (`ahead`) --an alloc takes its head--> used
//!  filling --a trim to nothing ran, or no live run left--> clean
//!  cached --the fill thread's trim--> used (releasing, no span; lock
//!         dropped) --MADV_DONTNEED done--> clean
//! ```
//! Every transition happens under the provider's mutex; the steps outside
//! it, faulting a filling range in and zapping a releasing one, touch pages
//! no one else may take, trim or unmap while they are marked used.
//! Allocation order: a cached run of exactly the length, else the shortest
//! longer cached run split (its tail stays cached), else the head of the
//! pages filled ahead (below), else clean pages of an arena (first fit),
//! else a new arena. Clean pages taken for a run are faulted in with up to
//! [`GROW_PAGES`] more after them in one call, cached as runs of the same
//! length (whole runs only: a shorter tail would sit where no allocation of
//! that length can use it, and hold the cap).
//!
//! # Filling ahead
//! Faulting pages in is a tenth of a store's cost (see "Huge arenas"), and
//! the store waits for it. Once a provider that may fill ahead holds 4 MiB,
//! a thread of its own keeps *ahead*, one range of faulted-in pages, stocked
//! up to the same cap the faults in an allocation keep (`GROW_PAGES`, 1/64
//! of the live pages), refilling when it falls to half: a store then takes
//! pages already faulted in (lz4 store / raw on a fresh pool of index pages
//! rose from 0.81-0.82 to 0.88-0.91; BENCHMARKS.md, "The pool fills
//! ahead"). The range is cached (free,
//! dirty, counted) but on no list, so every length takes its head: runs on
//! the lists serve only allocations no longer than they are. Only an
//! allocation the lists could not serve wakes the thread (the pool is
//! growing: a pool that takes as much as it gives back keeps its size and
//! its arenas), and it stands still while the lists hold a cap's worth
//! (frees stock them, and pages filled then would only be trimmed). A trim
//! first puts `ahead` on the lists. With huge arenas there is no thread: an
//! arena is faulted in whole.
//!
//! # Giving memory back
//! Lazily and in bulk. After a free, when cached bytes exceed 1/16 of the
//! bytes in live spans, *trim* brings them down to 1/32: first whole arenas
//! with no live span are `munmap`ed (one syscall and one shootdown for up to
//! 512 pages), then, in the arenas holding the most cached pages, each
//! maximal range of cached pages is given back with `MADV_DONTNEED` (adjacent
//! runs coalesce into one range), all ranges of a trim in one call
//! (`zap.rs`: one TLB shootdown, where a call per range paid one each). `MADV_DONTNEED` rather than `MADV_FREE`: memory
//! given back by `MADV_FREE` stays in the process's RSS until the kernel
//! happens to reclaim it, and a budget that charges `held_bytes` must not be
//! told memory is gone while RSS still shows it. The bound is relative so a
//! budget charging the pool overshoots by at most 1/16, and a pool with no
//! live span holds nothing. [`Core::trim`] with 0 releases all.
//!
//! Where the fill thread runs, a free that finds a trim due leaves it to
//! that thread (`Inner::trim_due`) while the cache is under twice the
//! bound: the frees come from loads, whose faulting thread then does not
//! wait for the kernel to unmap and free pages (a third of what an
//! exclusive load of a text page adds to its decompression while the pool
//! shrinks; BENCHMARKS.md). The thread unmaps the arenas outside the lock,
//! as any trim does, and zaps its ranges outside it too, their pages marked
//! used (*releasing*, counted as held) until the zap is done. The work is
//! moved, not saved: on a machine with no idle CPU it costs the same. Past
//! twice the bound, or with no live page left, the free trims itself; with
//! none left it first waits for a release in flight (`Core::released`),
//! as a trim to nothing does, so an empty pool holds nothing.
//!
//! # Huge arenas
//! Faulting pool memory in 4 KiB at a time costs a page allocation, a
//! clear, a cgroup charge and a page-table update per page, and giving it
//! back costs a zap and a free per page: together a tenth of what a store
//! and an exclusive load of a text page cost. Where the kernel offers
//! transparent huge pages for `MADV_HUGEPAGE` mappings, a new arena of a
//! pool that already has an arena's worth of live pages is instead mapped
//! 2 MiB-aligned with `MADV_HUGEPAGE` and faulted in whole on its first use:
//! one huge page, one clear, one charge, and one free when the arena is
//! unmapped. Its pages not yet handed out stay *clean* in the bitmaps (they
//! are taken in address order, as from any fresh arena, with no fault) but
//! are counted in `held_bytes` as the *reserve*: the memory is the kernel's
//! huge page, held whole. New arenas are mapped only when no arena has a
//! clean run of the length asked for, so the reserve is about one arena.
//!
//! Trim gives back small arenas' ranges before it touches a huge arena, and
//! then *breaks* the huge arena: `MADV_NOHUGEPAGE` first (so khugepaged never
//! collapses the holes it is about to make back into a huge page), then
//! `MADV_DONTNEED` on all its free pages, cached and reserve. The kernel
//! unmaps those pages at once (the process's RSS drops by them) and frees
//! them with the rest of the huge page's split, which it defers to its
//! shrinker: like memory given back by `MADV_FREE`, they are free to the
//! kernel on demand. A broken arena stays small. Arenas that are not huge
//! are marked `MADV_NOHUGEPAGE`, so no huge page backs them whatever the
//! system's THP mode, and every page they hold was counted when taken.
//!
//! # Accounting
//! `held_bytes` = pages in live spans + cached pages (`ahead` included) +
//! the reserve of huge arenas + pages being filled: every page the pool may
//! hold memory for. The clean pages of
//! small arenas (fresh space, or given back) are not counted, though their
//! address space stays reserved until the arena goes.
//! A span counts whole even where its tail was never touched.
//!
//! # Locking
//! One mutex, a leaf: nothing else is taken under it. `munmap` of released
//! arenas runs after it is dropped (they are unreachable by then), and so
//! do the `mmap` and the fault-in of a new huge arena (it is unreachable
//! until added; its pages are counted as `pending` meanwhile, and another
//! alloc that finds nothing waits on a condition variable for it);
//! `MADV_DONTNEED` runs under it, since the pages it zaps must not be handed
//! out before the call returns, except the fill thread's, which marks the
//! pages used first and zaps with the lock dropped (a free of the last live
//! page, or a trim to nothing, waits for it on a condition variable of the
//! same mutex; the fill thread takes no other lock). The fill thread
//! faults its range in with the lock dropped, its pages marked used (no
//! alloc, trim or unmap touches them), and waits for work on an `Event`
//! (`uzswap_compress::quiesce`: a futex, read under the mutex and waited
//! on with it dropped; a condition variable's wake-up would run inside
//! `parking_lot`, where a fork's rest cannot see it); an alloc the lists
//! could not serve wakes it
//! where the cache is short, the owner's drop stops and joins it. A fill
//! that ends after a trim to nothing, or after the last live run went, is
//! given back at once, so nothing stays cached after [`Core::trim`] with 0
//! or in an empty pool.
//! The mutex also orders reuse: everything a span's last users did to its
//! pages happens before the free that returns them (the pool frees a span
//! under its write lock, after all readers left), and the free's unlock
//! happens before the lock of the alloc that hands the pages to the next
//! span.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{AllocError, PAGE_SIZE};

/// Pages per arena.
pub(crate) const ARENA_PAGES: usize = 512;
/// Bytes per arena: one mapping, the unit of `munmap`.
pub const ARENA_BYTES: usize = ARENA_PAGES * PAGE_SIZE;
/// Longest run (span) in pages.
pub(crate) const MAX_RUN_PAGES: usize = crate::size_class::MAX_PAGES_PER_SPAN_LIMIT;
/// Cached bytes may reach `live / CACHE_DIVISOR` before a trim.
const CACHE_DIVISOR: u64 = 16;
/// Most pages faulted in at once when a span needs fresh pages (256 KiB).
pub(crate) const GROW_PAGES: usize = 64;
/// Pages kept faulted in ahead of need are at most the live pages over
/// this (`Core::fill_cap`): a quarter of the trim bound.
pub(crate) const FILL_DIVISOR: u64 = 4 * CACHE_DIVISOR;
/// Pages held before a provider that may fill ahead starts its fill thread
/// (4 MiB): below it the fill cap is a few pages, not worth a thread.
const FILL_FROM_PAGES: u64 = 1024;
/// Where the kernel says whether and at what size it offers transparent
/// huge pages.
const THP_SYSFS: &str = "/sys/kernel/mm/transparent_hugepage";

/// Whether the kernel backs `MADV_HUGEPAGE` mappings with huge pages of
/// exactly one arena (THP mode `always` or `madvise`, PMD size 2 MiB).
pub(crate) fn huge_pages_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let read = |f: &str| std::fs::read_to_string(format!("{THP_SYSFS}/{f}"));
        let mode = read("enabled").unwrap_or_default();
        let pmd = read("hpage_pmd_size")
            .ok()
            .and_then(|s| s.trim().parse().ok());
        (mode.contains("[always]") || mode.contains("[madvise]")) && pmd == Some(ARENA_BYTES)
    })
}

const WORDS: usize = ARENA_PAGES / 64;
type Bits = [u64; WORDS];

fn bit(bits: &Bits, p: usize) -> bool {
    bits[p / 64] >> (p % 64) & 1 != 0
}

fn set_range(bits: &mut Bits, start: usize, n: usize, on: bool) {
    for p in start..start + n {
        if on {
            bits[p / 64] |= 1 << (p % 64);
        } else {
            bits[p / 64] &= !(1 << (p % 64));
        }
    }
}

/// First run of `n` set bits, skipping empty words whole.
fn find_run(bits: &Bits, n: usize) -> Option<usize> {
    let (mut run, mut start, mut p) = (0, 0, 0);
    while p < ARENA_PAGES {
        if p % 64 == 0 && bits[p / 64] == 0 {
            run = 0;
            p += 64;
            continue;
        }
        if bit(bits, p) {
            if run == 0 {
                start = p;
            }
            run += 1;
            if run == n {
                return Some(start);
            }
        } else {
            run = 0;
        }
        p += 1;
    }
    None
}

/// Maximal ranges of set bits, as (start, len).
fn ranges(bits: &Bits) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < ARENA_PAGES {
        if bit(bits, p) {
            let s = p;
            while p < ARENA_PAGES && bit(bits, p) {
                p += 1;
            }
            out.push((s, p - s));
        } else {
            p += 1;
        }
    }
    out
}

/// Fault `pages` pages at `start` in with one `MADV_POPULATE_WRITE` (one
/// kernel entry instead of a fault per page). Populating changes no byte
/// anyone could observe (fresh pages read as zero either way); a failure
/// (an old kernel) only leaves them to fault in on first touch, and they
/// are counted either way.
///
/// # Safety
/// The range lies in one arena mapping, and no span owns its pages.
unsafe fn populate(start: *mut u8, pages: usize) {
    // SAFETY: the caller's range, in our mapping.
    unsafe {
        libc::madvise(start.cast(), pages * PAGE_SIZE, libc::MADV_POPULATE_WRITE);
    }
}

/// A run of whole pages handed to one span. Plain data: its memory goes back
/// only through [`Core::free`] (or with the whole provider).
pub(crate) struct PageRun {
    ptr: NonNull<u8>,
    pages: u32,
    arena: u32,
}

// SAFETY: a PageRun is an address range owned by one span; access to the
// bytes is arbitrated by the span lock and the class lock (crate comment).
unsafe impl Send for PageRun {}
// SAFETY: as above; `&PageRun` only exposes the address.
unsafe impl Sync for PageRun {}

impl PageRun {
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes in the run.
    pub(crate) fn len(&self) -> usize {
        self.pages as usize * PAGE_SIZE
    }
}

/// One arena mapping, unmapped on drop.
struct Mapping(NonNull<u8>);

// SAFETY: the mapping is only an address range; see `PageRun`.
unsafe impl Send for Mapping {}

impl Mapping {
    /// A small arena: an anonymous mapping of one arena, marked
    /// `MADV_NOHUGEPAGE`. Unaligned is not enough: the kernel merges
    /// adjacent anonymous mappings with equal flags, and two arenas side by
    /// side always contain an aligned 2 MiB a huge page could back, while a
    /// small arena must be charged page by page.
    fn new() -> Result<Self, AllocError> {
        let p = Self::map(ARENA_BYTES)?;
        // SAFETY: `p` is our fresh mapping of ARENA_BYTES.
        unsafe { libc::madvise(p, ARENA_BYTES, libc::MADV_NOHUGEPAGE) };
        Ok(Self::wrap(p))
    }

    /// A huge arena: 2 MiB-aligned (map twice the size, unmap the ends) and
    /// marked `MADV_HUGEPAGE`.
    fn new_huge() -> Result<Self, AllocError> {
        let p = Self::map(2 * ARENA_BYTES)? as usize;
        let start = p.next_multiple_of(ARENA_BYTES);
        let end = start + ARENA_BYTES;
        // SAFETY: [p, start) and [end, p + 2 * ARENA_BYTES) are the parts of
        // our fresh mapping outside the aligned arena; nothing refers to them.
        unsafe {
            if start > p {
                libc::munmap(p as *mut libc::c_void, start - p);
            }
            if p + 2 * ARENA_BYTES > end {
                libc::munmap(end as *mut libc::c_void, p + 2 * ARENA_BYTES - end);
            }
        }
        let m = Self::wrap(start as *mut libc::c_void);
        // SAFETY: the arena lies inside our mapping. A failure only means
        // the arena is backed by small pages, which the accounting (the
        // whole arena is held) covers as well.
        unsafe { libc::madvise(m.0.as_ptr().cast(), ARENA_BYTES, libc::MADV_HUGEPAGE) };
        Ok(m)
    }

    /// Fault a new huge arena in whole: one `MADV_POPULATE_WRITE`, one huge
    /// page where the kernel has one; its pages become reserve when added.
    fn populate(&self) {
        // SAFETY: the whole arena is ours, fresh and not yet handed to any
        // span.
        unsafe { populate(self.0.as_ptr(), ARENA_PAGES) };
    }

    fn map(len: usize) -> Result<*mut libc::c_void, AllocError> {
        // SAFETY: a fresh anonymous private mapping at an address of the
        // kernel's choosing; it aliases nothing and the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p.is_null() {
            return Err(AllocError::NoMemory);
        }
        Ok(p)
    }

    fn wrap(p: *mut libc::c_void) -> Self {
        Self(NonNull::new(p.cast::<u8>()).expect("checked by map"))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: created by `new` with this address and length, unmapped
        // once. A Mapping is dropped only when no page of it is in a live
        // span (its arena had no used page) or the provider itself drops.
        let rc = unsafe { libc::munmap(self.0.as_ptr().cast(), ARENA_BYTES) };
        debug_assert_eq!(rc, 0, "munmap of an arena failed");
    }
}

struct Arena {
    map: Mapping,
    free: Bits,
    dirty: Bits,
    used: u32,
    cached: u32,
    /// Shortest clean run a search of this arena failed to find since its
    /// clean pages last grew: skip it for requests that long or longer.
    fail_len: u32,
    /// Mapped for a huge page and not broken by a trim since.
    huge: bool,
}

impl Arena {
    fn base(&self) -> *mut u8 {
        self.map.0.as_ptr()
    }

    fn clean(&self) -> usize {
        ARENA_PAGES - self.used as usize - self.cached as usize
    }

    fn clean_bits(&self) -> Bits {
        std::array::from_fn(|w| self.free[w] & !self.dirty[w])
    }
}

struct Inner {
    arenas: Vec<Option<Arena>>,
    free_slots: Vec<u32>,
    /// Cached runs by length: (arena, first page).
    cached: [Vec<(u32, u32)>; MAX_RUN_PAGES + 1],
    /// Arena tried first for clean pages (the newest).
    current: Option<u32>,
    live_pages: u64,
    cached_pages: u64,
    huge_arenas: u64,
    /// Clean pages of huge arenas: faulted in with their huge page, held.
    reserve_pages: u64,
    /// A huge arena is being mapped and faulted in with the lock dropped:
    /// its pages, held already (counted before they appear, so the total
    /// never under-reports). Others that need a new arena meanwhile wait
    /// for it (`PageAlloc::grown`) instead of faulting in one of their own.
    pending_pages: u64,
    /// Pages the fill thread faulted in, not yet taken: cached (free,
    /// dirty, counted in `cached_pages`) but on no list, so that every
    /// allocation can take the head of it whatever its length, where runs
    /// on the lists serve only allocations no longer than they are.
    ahead: Option<Ahead>,
    /// Clean pages the fill thread is faulting in with the lock dropped,
    /// right after `ahead`: marked used (so no trim, unmap or alloc touches
    /// them) and counted as held; they join `ahead` when faulted in.
    filling_pages: u64,
    /// Cached pages the fill thread's trim is zapping with the lock
    /// dropped: marked used and counted as held until the zap returns.
    releasing_pages: u64,
    /// A free found a trim due and left it to the fill thread.
    trim_due: bool,
    /// A trim to nothing ran while pages were filling: they go back clean
    /// when the fill ends, so that nothing stays cached after it.
    drop_fill: bool,
    /// The fill thread waits for work (`Core::fill`) and no wake-up is
    /// pending: an alloc the lists could not serve, leaving the cache
    /// short, clears it and wakes the thread.
    filler_idle: bool,
}

/// A range of one arena's pages, `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ahead {
    arena: u32,
    start: u32,
    end: u32,
}

impl Ahead {
    fn len(&self) -> usize {
        (self.end - self.start) as usize
    }
}

/// The provider. `held_bytes` and friends are mirrored in atomics so readers
/// of the totals take no lock.
pub(crate) struct Core {
    inner: Mutex<Inner>,
    /// Signalled when a huge arena faulted in outside the lock is added
    /// (or failed).
    grown: parking_lot::Condvar,
    /// The fill thread waits here (with `inner`) while the cache is full
    /// enough (an `Event`: a wait `quiesce` sees, where a condition
    /// variable's wake-up would run inside `parking_lot`).
    fill: uzswap_compress::quiesce::Event,
    /// Signalled when the fill thread's release ends (`releasing_pages`
    /// back to 0 for it): a free of the last live page, or a trim to
    /// nothing, waits for it.
    released: parking_lot::Condvar,
    /// A fill thread was started for this provider (or failed to start).
    fill_on: AtomicBool,
    /// The fill thread runs: frees leave due trims to it.
    trim_ahead: AtomicBool,
    /// Trims the fill thread ran for frees, ever.
    deferred_trims: AtomicU64,
    /// The owner is dropping: the fill thread exits.
    fill_stop: AtomicBool,
    /// Pages the fill thread faulted in, ever.
    filled: AtomicU64,
    /// New arenas may be huge (the kernel offers huge pages and the owner
    /// asked for them); fixed at creation.
    huge_ok: bool,
    held: AtomicU64,
    cached: AtomicU64,
    arenas: AtomicU64,
    huge_arenas: AtomicU64,
    reserve: AtomicU64,
}

/// The provider as its owner holds it: the [`Core`], shared with the fill
/// thread where one runs.
pub(crate) struct PageAlloc {
    core: Arc<Core>,
    /// A fill thread may be started (the owner asked for one and new arenas
    /// are small: a huge arena is faulted in whole anyway).
    fill_ahead: bool,
    /// The fill thread, once started; joined on drop.
    filler: Mutex<Option<uzswap_compress::thread::Handle<()>>>,
}

impl std::ops::Deref for PageAlloc {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

impl PageAlloc {
    /// A provider with no fill thread; `huge` as [`Core::new`].
    #[cfg(test)]
    pub(crate) fn new(huge: bool) -> Self {
        Self::with_fill(huge, false)
    }

    /// A provider; with `fill_ahead`, once it holds [`FILL_FROM_PAGES`] it
    /// starts a thread that faults pages in ahead of allocations (module
    /// comment, "Filling ahead").
    pub(crate) fn with_fill(huge: bool, fill_ahead: bool) -> Self {
        let core = Arc::new(Core::new(huge));
        let fill_ahead = fill_ahead && !core.huge_ok;
        Self {
            core,
            fill_ahead,
            filler: Mutex::new(None),
        }
    }

    /// [`Core::alloc`], starting the fill thread when the pool has grown
    /// enough for one.
    pub(crate) fn alloc(&self, pages: usize) -> Result<PageRun, AllocError> {
        let r = self.core.alloc(pages)?;
        if self.fill_ahead
            && !self.core.fill_on.load(Ordering::Relaxed)
            && self.core.held_bytes() >= FILL_FROM_PAGES * PAGE_SIZE as u64
        {
            self.start_filler();
        }
        Ok(r)
    }

    #[cold]
    fn start_filler(&self) {
        let mut slot = self.filler.lock();
        if self.core.fill_on.swap(true, Ordering::Relaxed) {
            return;
        }
        let core = Arc::clone(&self.core);
        // Without a thread (a thread limit), allocations fault their pages
        // in themselves, as they do before the pool grows this far.
        // One of uzswap's threads (`thread_hook`): its allocations stay out
        // of the memory uzswap manages, and its stack is its own, so that a
        // forked child can start a filler of its own (`thread`).
        *slot = uzswap_compress::thread_hook::spawn("uzswap-pool-fill".into(), move || {
            core.fill_loop()
        })
        .ok();
        self.core
            .trim_ahead
            .store(slot.is_some(), Ordering::Relaxed);
    }
}

impl Drop for PageAlloc {
    fn drop(&mut self) {
        let Some(t) = self.filler.get_mut().take() else {
            return;
        };
        self.core.fill_stop.store(true, Ordering::Release);
        {
            // Under the lock: the thread checks `fill_stop` under it before
            // it waits, so the wake-up cannot fall between the two.
            let _g = self.core.inner.lock();
            self.core.fill.notify_all();
        }
        let _ = t.join();
    }
}

/// Result of giving memory back: bytes released and arenas to unmap once
/// the lock is dropped; for a trim that defers its zap, the ranges to zap
/// and, as (arena, first page, pages), what they hold marked releasing.
#[derive(Default)]
struct Released {
    bytes: u64,
    maps: Vec<Mapping>,
    zaps: Vec<std::ops::Range<usize>>,
    releasing: Vec<(u32, usize, usize)>,
}

impl Core {
    /// A provider; `huge` lets it map huge arenas where the kernel offers
    /// huge pages ([`huge_pages_available`]).
    pub(crate) fn new(huge: bool) -> Self {
        let huge_ok = huge && huge_pages_available();
        Self {
            inner: Mutex::new(Inner {
                arenas: Vec::new(),
                free_slots: Vec::new(),
                cached: std::array::from_fn(|_| Vec::new()),
                current: None,
                live_pages: 0,
                cached_pages: 0,
                huge_arenas: 0,
                reserve_pages: 0,
                pending_pages: 0,
                ahead: None,
                filling_pages: 0,
                releasing_pages: 0,
                trim_due: false,
                drop_fill: false,
                filler_idle: false,
            }),
            grown: parking_lot::Condvar::new(),
            fill: uzswap_compress::quiesce::Event::new(),
            released: parking_lot::Condvar::new(),
            fill_on: AtomicBool::new(false),
            trim_ahead: AtomicBool::new(false),
            deferred_trims: AtomicU64::new(0),
            fill_stop: AtomicBool::new(false),
            filled: AtomicU64::new(0),
            huge_ok,
            held: AtomicU64::new(0),
            cached: AtomicU64::new(0),
            arenas: AtomicU64::new(0),
            huge_arenas: AtomicU64::new(0),
            reserve: AtomicU64::new(0),
        }
    }

    /// Bytes in live runs, cached free runs and huge arenas' reserve.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Bytes of cached free runs (part of `held_bytes`).
    pub(crate) fn cached_bytes(&self) -> u64 {
        self.cached.load(Ordering::Relaxed)
    }

    /// Arena mappings the provider holds.
    pub(crate) fn arenas(&self) -> u64 {
        self.arenas.load(Ordering::Relaxed)
    }

    /// Whether new arenas may be huge (asked for, and the kernel offers
    /// huge pages of an arena's size).
    pub(crate) fn huge_ok(&self) -> bool {
        self.huge_ok
    }

    /// Of [`Self::arenas`], those mapped huge and not broken since.
    pub(crate) fn huge_arenas(&self) -> u64 {
        self.huge_arenas.load(Ordering::Relaxed)
    }

    /// Bytes of huge arenas' pages no run has taken yet (part of
    /// `held_bytes`).
    pub(crate) fn reserve_bytes(&self) -> u64 {
        self.reserve.load(Ordering::Relaxed)
    }

    /// A run of `pages` (1..=MAX_RUN_PAGES) contiguous pages. Its bytes are
    /// whatever they were: zero when fresh, stale when reused.
    ///
    /// A new huge arena is faulted in with the lock dropped: clearing its
    /// 2 MiB takes milliseconds (more where the host backs guest memory
    /// lazily), and every store and free of the pool would wait that long.
    pub(crate) fn alloc(&self, pages: usize) -> Result<PageRun, AllocError> {
        assert!((1..=MAX_RUN_PAGES).contains(&pages));
        let mut g = self.inner.lock();
        // Served by a run a free left cached: the pool is not growing.
        let mut reused = false;
        let r = loop {
            let inner = &mut *g;
            if let Some(run) = inner.take_cached(pages) {
                reused = true;
                break run;
            }
            if let Some(run) = inner.take_ahead(pages) {
                break run;
            }
            let grow = inner.grow_pages(pages);
            if let Some(run) = inner.take_clean(pages, grow) {
                break run;
            }
            if inner.pending_pages > 0 {
                // Another thread is faulting in a huge arena: take from it.
                self.grown.wait(&mut g);
                continue;
            }
            if self.huge_ok && inner.huge_fits() {
                inner.pending_pages = ARENA_PAGES as u64;
                self.publish(inner);
                let made = parking_lot::MutexGuard::unlocked(&mut g, || {
                    let m = Mapping::new_huge()?;
                    m.populate();
                    Ok::<_, AllocError>(m)
                });
                let inner = &mut *g;
                inner.pending_pages = 0;
                self.grown.notify_all();
                let m = match made {
                    Ok(m) => m,
                    Err(e) => {
                        self.publish(inner);
                        return Err(e);
                    }
                };
                let a = inner.add_arena(m, true);
                self.arenas.fetch_add(1, Ordering::Relaxed);
                inner.reserve_pages += ARENA_PAGES as u64;
                break inner
                    .take_clean_in(a, pages, pages)
                    .expect("a new arena is clean");
            }
            let a = inner.add_arena(Mapping::new()?, false);
            self.arenas.fetch_add(1, Ordering::Relaxed);
            break inner
                .take_clean_in(a, pages, grow)
                .expect("a new arena is clean");
        };
        let inner = &mut *g;
        inner.live_pages += pages as u64;
        self.publish(inner);
        if !reused && inner.filler_idle && inner.fill_want() > 0 {
            // Cleared here, not when the thread wakes: `filler_idle` then
            // means waiting with no wake-up pending, which tests wait for.
            inner.filler_idle = false;
            self.fill.notify_one();
        }
        Ok(r)
    }

    /// Bytes the fill thread has faulted in ahead of allocations, ever.
    pub(crate) fn filled_bytes(&self) -> u64 {
        self.filled.load(Ordering::Relaxed) * PAGE_SIZE as u64
    }

    /// The fill thread waits for an allocation to wake it (or the owner's
    /// drop).
    ///
    /// The stop flag is read here, under the lock, with the sequence the
    /// wait then sleeps on: `fill_loop` comes here after a fill that ran
    /// with the lock dropped, and a drop whose notification fell in that
    /// fill left the thread asleep for good (the sequence it read was
    /// already past the notification), and the drop waiting on its join
    /// (a test process hung so).
    fn idle(&self, g: &mut parking_lot::MutexGuard<'_, Inner>) {
        if self.fill_stop.load(Ordering::Acquire) {
            return;
        }
        g.filler_idle = true;
        self.fill.wait_unlocked(g, None);
        g.filler_idle = false;
    }

    /// The fill thread: keeps `ahead` stocked with faulted-in pages, up to
    /// the cap a fill in an allocation would have populated (`fill_want`),
    /// so that allocations take pages already faulted in instead of
    /// faulting them in themselves. Faulting runs with the lock dropped;
    /// the pages are marked used meanwhile. Exits when the owner sets
    /// `fill_stop`.
    fn fill_loop(&self) {
        let mut g = self.inner.lock();
        while !self.fill_stop.load(Ordering::Acquire) {
            if std::mem::take(&mut g.trim_due) {
                self.trim_deferred(&mut g);
                continue;
            }
            let want = g.fill_want();
            if want == 0 {
                self.idle(&mut g);
                continue;
            }
            let Some((a, p, n)) = g.reserve_fill(want) else {
                match Mapping::new() {
                    Ok(m) => {
                        g.add_arena(m, false);
                        self.arenas.fetch_add(1, Ordering::Relaxed);
                    }
                    // Out of address space or memory: allocations report
                    // it; wait for the next one.
                    Err(_) => self.idle(&mut g),
                }
                continue;
            };
            self.publish(&mut g);
            let ar = g.arenas[a as usize].as_ref().expect("arena with a fill");
            // SAFETY: p + n <= ARENA_PAGES: inside the arena's mapping.
            let start = unsafe { ar.base().add(p * PAGE_SIZE) };
            parking_lot::MutexGuard::unlocked(&mut g, || {
                // SAFETY: the range lies in an arena mapping that stays
                // mapped while any of its pages is used, and these are
                // marked used and handed to no span.
                unsafe { populate(start, n) };
            });
            let kept = g.finish_fill(a, p, n);
            self.publish(&mut g);
            if kept {
                self.filled.fetch_add(n as u64, Ordering::Relaxed);
            } else {
                // The owner gave everything back: wait for it to allocate.
                self.idle(&mut g);
            }
        }
    }

    /// Return a run from [`Self::alloc`]. No one may touch its bytes any
    /// more. Returns the bytes given back to the OS by a trim this triggered
    /// here: a due trim may be left to the fill thread instead (module
    /// comment, "Giving memory back"), unless `may_defer` is false (a
    /// caller that reports what it gave back).
    pub(crate) fn free(&self, run: PageRun, may_defer: bool) -> u64 {
        let mut g = self.inner.lock();
        let inner = &mut *g;
        let (a, p, n) = (run.arena, inner.page_of(&run), run.pages as usize);
        {
            let ar = inner.arenas[a as usize].as_mut().expect("run's arena");
            debug_assert!((p..p + n).all(|q| !bit(&ar.free, q)), "double free");
            set_range(&mut ar.free, p, n, true);
            set_range(&mut ar.dirty, p, n, true);
            ar.used -= n as u32;
            ar.cached += n as u32;
        }
        inner.cached[n].push((a, p as u32));
        inner.cached_pages += n as u64;
        inner.live_pages -= n as u64;
        let cache = inner.cached_pages * CACHE_DIVISOR;
        let rel = if cache <= inner.live_pages {
            Released::default()
        } else if may_defer
            && cache <= 2 * inner.live_pages
            && self.trim_ahead.load(Ordering::Relaxed)
        {
            // Left to the fill thread (module comment, "Giving memory
            // back"); woken once per trim.
            if !std::mem::replace(&mut inner.trim_due, true) && inner.filler_idle {
                inner.filler_idle = false;
                self.fill.notify_one();
            }
            Released::default()
        } else {
            // The last live page gone: a release the fill thread has in
            // flight ends first, so that an empty pool holds nothing once
            // this returns.
            while g.live_pages == 0 && g.releasing_pages > 0 {
                self.released.wait(&mut g);
            }
            g.trim_due = false;
            let target = g.live_pages / (2 * CACHE_DIVISOR);
            g.trim(target, false)
        };
        self.finish(g, rel)
    }

    /// The fill thread's trim of a due one: as a free's, but its zap runs
    /// with the lock dropped, the zapped pages marked releasing meanwhile.
    fn trim_deferred(&self, g: &mut parking_lot::MutexGuard<'_, Inner>) {
        let target = g.live_pages / (2 * CACHE_DIVISOR);
        let mut rel = g.trim(target, true);
        if !rel.maps.is_empty() {
            self.arenas
                .fetch_sub(rel.maps.len() as u64, Ordering::Relaxed);
        }
        self.publish(g);
        let (maps, zaps) = (std::mem::take(&mut rel.maps), std::mem::take(&mut rel.zaps));
        parking_lot::MutexGuard::unlocked(g, || {
            // The arenas left empty are unmapped here, as `finish` does.
            drop(maps);
            // SAFETY: each range lies inside an arena mapping (which stays
            // mapped while any of its pages is used) and holds only pages
            // marked used for this release: no span owns them and no alloc,
            // trim or unmap touches them until `finish_release`.
            let failed = unsafe { crate::zap::zapper().zap(&zaps) };
            debug_assert!(failed.is_empty(), "MADV_DONTNEED failed: {failed:?}");
        });
        g.finish_release(&rel.releasing);
        self.publish(g);
        self.released.notify_all();
        self.deferred_trims.fetch_add(1, Ordering::Relaxed);
    }

    /// Give cached memory back until at most `keep_bytes` stay cached.
    /// Returns the bytes given back.
    pub(crate) fn trim(&self, keep_bytes: u64) -> u64 {
        let mut g = self.inner.lock();
        g.drop_fill |= keep_bytes == 0 && g.filling_pages > 0;
        // As the last free: nothing held once a trim to nothing returns.
        while keep_bytes == 0 && g.releasing_pages > 0 {
            self.released.wait(&mut g);
        }
        let rel = g.trim(keep_bytes / PAGE_SIZE as u64, false);
        self.finish(g, rel)
    }

    fn finish(&self, mut g: parking_lot::MutexGuard<'_, Inner>, rel: Released) -> u64 {
        if !rel.maps.is_empty() {
            self.arenas
                .fetch_sub(rel.maps.len() as u64, Ordering::Relaxed);
        }
        self.publish(&mut g);
        drop(g);
        drop(rel.maps); // munmap, outside the lock
        rel.bytes
    }

    fn publish(&self, inner: &mut Inner) {
        let p = PAGE_SIZE as u64;
        let held = inner.live_pages
            + inner.cached_pages
            + inner.reserve_pages
            + inner.pending_pages
            + inner.filling_pages
            + inner.releasing_pages;
        self.held.store(held * p, Ordering::Relaxed);
        self.cached.store(inner.cached_pages * p, Ordering::Relaxed);
        self.reserve
            .store(inner.reserve_pages * p, Ordering::Relaxed);
        self.huge_arenas.store(inner.huge_arenas, Ordering::Relaxed);
    }
}

impl Inner {
    fn page_of(&self, run: &PageRun) -> usize {
        let ar = self.arenas[run.arena as usize]
            .as_ref()
            .expect("run's arena");
        (run.as_ptr() as usize - ar.base() as usize) / PAGE_SIZE
    }

    fn add_arena(&mut self, map: Mapping, huge: bool) -> u32 {
        let arena = Arena {
            map,
            free: [u64::MAX; WORDS],
            dirty: [0; WORDS],
            used: 0,
            cached: 0,
            fail_len: u32::MAX,
            huge,
        };
        self.huge_arenas += u64::from(huge);
        let a = match self.free_slots.pop() {
            Some(a) => {
                self.arenas[a as usize] = Some(arena);
                a
            }
            None => {
                self.arenas.push(Some(arena));
                (self.arenas.len() - 1) as u32
            }
        };
        self.current = Some(a);
        a
    }

    fn run(&mut self, a: u32, p: usize, n: usize) -> PageRun {
        let ar = self.arenas[a as usize].as_mut().expect("live arena");
        set_range(&mut ar.free, p, n, false);
        ar.used += n as u32;
        // SAFETY: p + n <= ARENA_PAGES, so the address is inside the arena.
        let ptr = unsafe { ar.base().add(p * PAGE_SIZE) };
        PageRun {
            ptr: NonNull::new(ptr).expect("arena addresses are not null"),
            pages: n as u32,
            arena: a,
        }
    }

    /// Pop a cached run of `n` pages, splitting a longer one if need be.
    fn take_cached(&mut self, n: usize) -> Option<PageRun> {
        let m = (n..=MAX_RUN_PAGES).find(|&m| !self.cached[m].is_empty())?;
        let (a, p) = self.cached[m].pop().expect("non-empty list");
        let p = p as usize;
        if m > n {
            self.cached[m - n].push((a, (p + n) as u32));
        }
        let ar = self.arenas[a as usize]
            .as_mut()
            .expect("cached run's arena");
        set_range(&mut ar.dirty, p, n, false);
        ar.cached -= n as u32;
        self.cached_pages -= n as u64;
        Some(self.run(a, p, n))
    }

    /// Pages to fault in at once when taking clean pages for a run of `n`:
    /// as many as keep the cache within [`GROW_PAGES`] and 1/64 of the live
    /// pages. The extra pages are cached and counted, so this keeps what a
    /// fill leaves cached small (a quarter of the trim bound), a small pool
    /// does not populate what its next free would give back, and no store
    /// grows the pool by more than its own runs plus `GROW_PAGES` (a
    /// caller's budget reserves that much for a store in flight).
    fn grow_pages(&self, n: usize) -> usize {
        let ahead = self.cached_pages + self.filling_pages;
        n.max(self.fill_cap().saturating_sub(ahead) as usize)
    }

    /// Most pages kept faulted in ahead of need, by a fill in an alloc or
    /// by the fill thread: [`GROW_PAGES`], and 1/64 of the live pages.
    fn fill_cap(&self) -> u64 {
        (self.live_pages / FILL_DIVISOR).min(GROW_PAGES as u64)
    }

    /// Pages the fill thread should fault in now: none while at least half
    /// the cap is ahead or being filled (hysteresis: one wake-up per half
    /// cap of allocations), else enough to reach the cap. None either while
    /// the lists hold a cap's worth: frees keep them stocked where the pool
    /// takes about as much as it gives back, and pages filled then would
    /// only be trimmed (each trim lists `ahead`, and a fill after it was
    /// zapped by the next: a read pass under a budget ran a third slower).
    /// Runs on the lists do not count towards the cap otherwise: tails of
    /// split runs, too short for the allocations that come, would hold it.
    fn fill_want(&self) -> usize {
        let cap = self.fill_cap();
        let ahead = self.ahead.map_or(0, |r| r.len() as u64);
        let have = ahead + self.filling_pages;
        if have * 2 >= cap || self.cached_pages - ahead >= cap {
            0
        } else {
            (cap - have) as usize
        }
    }

    /// The first `n` pages of `ahead`, if it has that many.
    fn take_ahead(&mut self, n: usize) -> Option<PageRun> {
        let r = self.ahead.as_mut().filter(|r| r.len() >= n)?;
        let (a, p) = (r.arena, r.start as usize);
        r.start += n as u32;
        let ar = self.arenas[a as usize].as_mut().expect("ahead's arena");
        set_range(&mut ar.dirty, p, n, false);
        ar.cached -= n as u32;
        self.cached_pages -= n as u64;
        Some(self.run(a, p, n))
    }

    /// Up to `want` clean pages for the fill thread, marked used and
    /// counted as filling: those right after `ahead` where they are clean,
    /// else a run of a small arena (the current one first), `ahead` then
    /// moving there (what it still holds goes on the lists). None when no
    /// small arena has a clean page.
    fn reserve_fill(&mut self, want: usize) -> Option<(u32, usize, usize)> {
        let extend = self.ahead.and_then(|r| {
            let ar = self.arenas[r.arena as usize].as_ref()?;
            let e = r.end as usize;
            (e < ARENA_PAGES && bit(&ar.clean_bits(), e)).then_some((r.arena, e))
        });
        let (a, p) = match extend {
            Some(at) => at,
            None => {
                let mut order = self.current.into_iter().chain(0..self.arenas.len() as u32);
                let at = order.find_map(|a| {
                    let ar = self.arenas[a as usize].as_ref()?;
                    if ar.huge || ar.clean() == 0 {
                        return None;
                    }
                    Some((a, find_run(&ar.clean_bits(), 1)?))
                })?;
                self.list_ahead();
                self.ahead = Some(Ahead {
                    arena: at.0,
                    start: at.1 as u32,
                    end: at.1 as u32,
                });
                at
            }
        };
        let ar = self.arenas[a as usize].as_mut().expect("found above");
        let clean = ar.clean_bits();
        let mut end = p + 1;
        while end < ARENA_PAGES && end < p + want && bit(&clean, end) {
            end += 1;
        }
        let n = end - p;
        set_range(&mut ar.free, p, n, false);
        ar.used += n as u32;
        self.filling_pages += n as u64;
        self.current = Some(a);
        Some((a, p, n))
    }

    /// The fill of [`Self::reserve_fill`] is faulted in: its pages join
    /// `ahead` (or become it, where a trim dropped `ahead` meanwhile).
    /// Where a trim to nothing ran meanwhile, or no live run is left, they
    /// go back instead, and this returns false.
    fn finish_fill(&mut self, a: u32, p: usize, n: usize) -> bool {
        let ar = self.arenas[a as usize].as_mut().expect("arena with a fill");
        self.filling_pages -= n as u64;
        if std::mem::take(&mut self.drop_fill) || self.live_pages == 0 {
            // SAFETY: the range lies in the arena and its pages are handed
            // to no span (marked used for the fill); nothing reads them.
            unsafe {
                libc::madvise(
                    ar.base().add(p * PAGE_SIZE).cast(),
                    n * PAGE_SIZE,
                    libc::MADV_DONTNEED,
                );
            }
            set_range(&mut ar.free, p, n, true);
            ar.used -= n as u32;
            ar.fail_len = u32::MAX;
            return false;
        }
        set_range(&mut ar.free, p, n, true);
        set_range(&mut ar.dirty, p, n, true);
        ar.used -= n as u32;
        ar.cached += n as u32;
        self.cached_pages += n as u64;
        let fill = Ahead {
            arena: a,
            start: p as u32,
            end: (p + n) as u32,
        };
        match &mut self.ahead {
            Some(r) if r.arena == a && r.end as usize == p => r.end = fill.end,
            _ => {
                self.list_ahead();
                self.ahead = Some(fill);
            }
        }
        true
    }

    /// Put what `ahead` holds on the lists, as runs of up to
    /// [`MAX_RUN_PAGES`], and drop it: before a trim, which works on the
    /// lists, and when the fill moves elsewhere.
    fn list_ahead(&mut self) {
        if let Some(r) = self.ahead.take() {
            self.list_range(r.arena, r.start as usize, r.end as usize, MAX_RUN_PAGES);
        }
    }

    /// List cached pages `[p, end)` of arena `a` as runs of `len` (a
    /// shorter one at the far end where `len` does not divide the range),
    /// pushed from the far end, so the pops that follow hand them out in
    /// ascending order, as a fill without growth would. The caller has
    /// counted them cached.
    fn list_range(&mut self, a: u32, p: usize, end: usize, len: usize) {
        let mut q = end;
        while q > p {
            let run = match (q - p) % len {
                0 => len,
                rem => rem,
            };
            q -= run;
            self.cached[run].push((a, q as u32));
        }
    }

    /// Whether a new arena may be huge where huge arenas are allowed: the
    /// pool already has an arena's worth of live pages, so a huge page is
    /// not held for a few objects.
    fn huge_fits(&self) -> bool {
        self.live_pages >= ARENA_PAGES as u64
    }

    /// Clean pages for a run of `n`: the current arena first, then any.
    fn take_clean(&mut self, n: usize, grow: usize) -> Option<PageRun> {
        if let Some(a) = self.current {
            if let Some(r) = self.take_clean_in(a, n, grow) {
                return Some(r);
            }
        }
        for a in 0..self.arenas.len() as u32 {
            if Some(a) != self.current {
                if let Some(r) = self.take_clean_in(a, n, grow) {
                    self.current = Some(a);
                    return Some(r);
                }
            }
        }
        None
    }

    /// A run of `n` clean pages of arena `a`. When `grow > n`, up to
    /// `grow - n` clean pages right after it are faulted in with it, by one
    /// `MADV_POPULATE_WRITE` (one kernel entry instead of one fault per
    /// page), and cached as runs of `n` for the next allocations.
    fn take_clean_in(&mut self, a: u32, n: usize, grow: usize) -> Option<PageRun> {
        let ar = self.arenas[a as usize].as_mut()?;
        if ar.clean() < n || n as u32 >= ar.fail_len {
            return None;
        }
        let clean = ar.clean_bits();
        let Some(p) = find_run(&clean, n) else {
            ar.fail_len = n as u32;
            return None;
        };
        if ar.huge {
            // Faulted in with the huge page: no populate, no growth.
            self.reserve_pages -= n as u64;
            return Some(self.run(a, p, n));
        }
        let mut end = p + n;
        while end < ARENA_PAGES && end < p + grow && bit(&clean, end) {
            end += 1;
        }
        // Whole runs of `n` only: a shorter tail would sit cached where no
        // allocation of this length can use it, and count against the cap.
        end -= (end - p) % n;
        if end - p > 1 {
            // SAFETY: [p, end) lies inside the arena and holds clean pages
            // only: no span owns them, and the lock is held.
            unsafe { populate(ar.base().add(p * PAGE_SIZE), end - p) };
        }
        let extra = end - (p + n);
        if extra > 0 {
            set_range(&mut ar.dirty, p + n, extra, true);
            ar.cached += extra as u32;
            self.cached_pages += extra as u64;
            self.list_range(a, p + n, end, n);
        }
        Some(self.run(a, p, n))
    }

    /// Give cached pages back until at most `keep` stay cached: arenas with
    /// no live page first (munmap), then ranges in the arenas caching the
    /// most (MADV_DONTNEED). Fully clean spare arenas go too. With `defer`,
    /// the ranges are not zapped here but returned in `zaps`, their pages
    /// marked used and counted releasing, for the caller to zap with the
    /// lock dropped and then hand to [`Self::finish_release`].
    fn trim(&mut self, keep: u64, defer: bool) -> Released {
        let mut rel = Released::default();
        // A trim to nothing also unmaps arenas that hold nothing at all (a
        // fill given back clean leaves one).
        let done = |cached: u64| cached <= keep && keep > 0;
        if done(self.cached_pages) {
            return rel;
        }
        self.list_ahead();
        let mut touched = false;
        for a in 0..self.arenas.len() {
            if done(self.cached_pages) {
                break;
            }
            let empty = self.arenas[a].as_ref().is_some_and(|ar| ar.used == 0);
            if empty {
                let ar = self.arenas[a].take().expect("checked above");
                let reserve = if ar.huge { ar.clean() as u64 } else { 0 };
                self.huge_arenas -= u64::from(ar.huge);
                self.reserve_pages -= reserve;
                self.free_slots.push(a as u32);
                if self.current == Some(a as u32) {
                    self.current = None;
                }
                self.cached_pages -= u64::from(ar.cached);
                rel.bytes += (u64::from(ar.cached) + reserve) * PAGE_SIZE as u64;
                touched |= ar.cached > 0;
                rel.maps.push(ar.map);
            }
        }
        let mut zaps = Vec::new();
        if self.cached_pages > keep {
            // Small arenas first, then huge ones (each broken by its trim);
            // within each, the arenas caching the most.
            let mut by_cached: Vec<(bool, std::cmp::Reverse<u32>, usize)> = self
                .arenas
                .iter()
                .enumerate()
                .filter_map(|(a, ar)| {
                    ar.as_ref()
                        .map(|ar| (ar.huge, std::cmp::Reverse(ar.cached), a))
                })
                .filter(|&(_, c, _)| c.0 > 0)
                .collect();
            by_cached.sort_unstable();
            for (huge, _, a) in by_cached {
                if self.cached_pages <= keep {
                    break;
                }
                let ar = self.arenas[a].as_mut().expect("listed arena");
                // A huge arena gives back its reserve with its cached pages.
                let (give, reserve) = if huge {
                    // SAFETY: the arena's own range; only its THP advice
                    // changes. Before the holes are made (see the module
                    // comment).
                    unsafe {
                        libc::madvise(ar.base().cast(), ARENA_BYTES, libc::MADV_NOHUGEPAGE);
                    }
                    ar.huge = false;
                    self.huge_arenas -= 1;
                    (ar.free, ar.clean() as u64)
                } else {
                    (ar.dirty, 0)
                };
                self.reserve_pages -= reserve;
                rel.bytes += reserve * PAGE_SIZE as u64;
                let base = ar.base() as usize;
                for (s, len) in ranges(&give) {
                    zaps.push(base + s * PAGE_SIZE..base + (s + len) * PAGE_SIZE);
                    if defer {
                        set_range(&mut ar.free, s, len, false);
                        ar.used += len as u32;
                        self.releasing_pages += len as u64;
                        rel.releasing.push((a as u32, s, len));
                    }
                }
                ar.dirty = [0; WORDS];
                ar.fail_len = u32::MAX;
                self.cached_pages -= u64::from(ar.cached);
                rel.bytes += u64::from(ar.cached) * PAGE_SIZE as u64;
                ar.cached = 0;
                touched = true;
            }
        }
        if defer {
            rel.zaps = zaps;
        } else {
            // One call for every range (one TLB shootdown, not one per
            // range).
            // SAFETY: each range lies inside an arena mapping and holds only
            // free pages (cached, or a huge arena's reserve): no span owns
            // them, and none is handed out before this returns (the lock is
            // held).
            let failed = unsafe { crate::zap::zapper().zap(&zaps) };
            debug_assert!(failed.is_empty(), "MADV_DONTNEED failed: {failed:?}");
        }
        if touched {
            // Drop list entries whose pages are no longer cached.
            let arenas = &self.arenas;
            for list in &mut self.cached {
                list.retain(|&(a, p)| {
                    arenas[a as usize]
                        .as_ref()
                        .is_some_and(|ar| bit(&ar.dirty, p as usize))
                });
            }
        }
        rel
    }

    /// The ranges a deferred trim marked releasing are zapped: their pages
    /// become clean.
    fn finish_release(&mut self, releasing: &[(u32, usize, usize)]) {
        for &(a, s, len) in releasing {
            let ar = self.arenas[a as usize]
                .as_mut()
                .expect("an arena with used pages stays");
            set_range(&mut ar.free, s, len, true);
            ar.used -= len as u32;
            ar.fail_len = u32::MAX;
            self.releasing_pages -= len as u64;
        }
    }
}

#[cfg(test)]
impl Core {
    /// Whether the fill thread is faulting pages in now.
    pub(crate) fn filling(&self) -> bool {
        self.inner.lock().filling_pages > 0
    }

    /// Wait until the fill thread (if any) waits with no wake-up pending,
    /// so the figures hold still until the next allocation.
    pub(crate) fn wait_fill_idle(&self) {
        while self.fill_on.load(Ordering::Relaxed) && !self.inner.lock().filler_idle {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Check the bitmaps, lists and counters against each other.
    pub(crate) fn assert_consistent(&self) {
        let g = self.inner.lock();
        let mut listed = vec![Vec::new(); g.arenas.len()];
        for (n, list) in g.cached.iter().enumerate() {
            for &(a, p) in list {
                listed[a as usize].push((p as usize, n));
            }
        }
        if let Some(r) = g.ahead {
            listed[r.arena as usize].push((r.start as usize, r.len()));
        }
        let (mut live, mut cached, mut arenas, mut huge, mut reserve) = (0, 0, 0, 0, 0);
        for (a, ar) in g.arenas.iter().enumerate() {
            let Some(ar) = ar else {
                assert!(listed[a].is_empty());
                continue;
            };
            arenas += 1;
            let mut marks = [false; ARENA_PAGES];
            for &(p, n) in &listed[a] {
                for (q, m) in marks.iter_mut().enumerate().skip(p).take(n) {
                    assert!(!*m, "cached runs overlap");
                    *m = true;
                    assert!(bit(&ar.free, q) && bit(&ar.dirty, q));
                }
            }
            let dirty = (0..ARENA_PAGES).filter(|&q| bit(&ar.dirty, q)).count();
            assert_eq!(dirty, marks.iter().filter(|&&m| m).count());
            assert!((0..ARENA_PAGES).all(|q| !bit(&ar.dirty, q) || bit(&ar.free, q)));
            let used = (0..ARENA_PAGES).filter(|&q| !bit(&ar.free, q)).count();
            assert_eq!((used, dirty), (ar.used as usize, ar.cached as usize));
            live += used as u64;
            cached += dirty as u64;
            if ar.huge {
                huge += 1;
                reserve += ar.clean() as u64;
            }
        }
        assert_eq!(
            (live, cached),
            (
                g.live_pages + g.filling_pages + g.releasing_pages,
                g.cached_pages
            )
        );
        assert_eq!((huge, reserve), (g.huge_arenas, g.reserve_pages));
        assert!(huge == 0 || self.huge_ok, "huge arenas only where allowed");
        // The cache bound holds between operations, or twice it while a
        // trim left to the fill thread is due.
        let bound = if g.trim_due { 2 } else { 1 };
        assert!(
            cached * CACHE_DIVISOR <= bound * live,
            "{cached} cached, {live} live"
        );
        let p = PAGE_SIZE as u64;
        assert_eq!(self.held_bytes(), (live + cached + reserve) * p);
        assert_eq!(self.huge_arenas(), huge);
        assert_eq!(self.reserve_bytes(), reserve * p);
        assert_eq!(self.cached_bytes(), cached * p);
        assert_eq!(self.arenas(), arenas);
    }

    /// Lengths of the runs on the cached lists.
    pub(crate) fn listed_lengths(&self) -> Vec<usize> {
        let g = self.inner.lock();
        (0..=MAX_RUN_PAGES)
            .flat_map(|n| std::iter::repeat_n(n, g.cached[n].len()))
            .collect()
    }

    /// The first page and length of `ahead`.
    pub(crate) fn ahead(&self) -> Option<(*const u8, usize)> {
        let g = self.inner.lock();
        let r = g.ahead?;
        let ar = g.arenas[r.arena as usize].as_ref()?;
        // SAFETY: start < ARENA_PAGES: inside the arena.
        Some((
            unsafe { ar.base().add(r.start as usize * PAGE_SIZE) }.cast_const(),
            r.len(),
        ))
    }

    /// Every clean page of every arena, by address.
    pub(crate) fn clean_pages(&self) -> Vec<*const u8> {
        let g = self.inner.lock();
        let mut out = Vec::new();
        for ar in g.arenas.iter().flatten() {
            let bits = ar.clean_bits();
            for q in 0..ARENA_PAGES {
                if bit(&bits, q) {
                    // SAFETY: q < ARENA_PAGES: inside the arena.
                    out.push(unsafe { ar.base().add(q * PAGE_SIZE) }.cast_const());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn fill(r: &PageRun, tag: u64) {
        // SAFETY: the run is ours and `pages` pages long.
        let b = unsafe { std::slice::from_raw_parts_mut(r.as_ptr(), r.pages as usize * PAGE_SIZE) };
        for (i, w) in b.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&(tag ^ i as u64).to_le_bytes());
        }
    }

    fn check(r: &PageRun, tag: u64) {
        // SAFETY: as in `fill`.
        let b = unsafe { std::slice::from_raw_parts(r.as_ptr(), r.pages as usize * PAGE_SIZE) };
        for (i, w) in b.chunks_exact(8).enumerate() {
            assert_eq!(
                w,
                (tag ^ i as u64).to_le_bytes(),
                "run {tag:#x} overwritten"
            );
        }
    }

    #[test]
    fn a_returned_run_is_reused() {
        let pa = PageAlloc::new(false);
        let keep: Vec<_> = (0..64).map(|_| pa.alloc(1).unwrap()).collect();
        let held = pa.held_bytes();
        let x = pa.alloc(1).unwrap();
        let addr = x.as_ptr();
        pa.free(x, true);
        pa.assert_consistent();
        assert!(pa.cached_bytes() > 0);
        let y = pa.alloc(1).unwrap();
        assert_eq!(y.as_ptr(), addr, "the cached run is popped");
        // A cached run is counted while cached; reusing it adds nothing.
        assert!(pa.held_bytes() <= held + PAGE_SIZE as u64);
        // A longer cached run is split: the head serves, the tail stays.
        let z = pa.alloc(8).unwrap();
        let base = z.as_ptr();
        pa.free(z, true);
        let h = pa.alloc(3).unwrap();
        let t = pa.alloc(5).unwrap();
        assert_eq!(h.as_ptr(), base);
        // SAFETY: address arithmetic inside the freed run, not dereferenced.
        assert_eq!(t.as_ptr(), unsafe { base.add(3 * PAGE_SIZE) });
        assert_eq!(pa.arenas(), 1);
        pa.assert_consistent();
        for r in keep.into_iter().chain([y, h, t]) {
            pa.free(r, true);
        }
        assert_eq!((pa.held_bytes(), pa.cached_bytes(), pa.arenas()), (0, 0, 0));
        pa.assert_consistent();
    }

    #[test]
    fn empty_arenas_are_unmapped_and_cached_pages_given_back() {
        let pa = PageAlloc::new(false);
        let runs: Vec<_> = (0..3 * ARENA_PAGES).map(|_| pa.alloc(1).unwrap()).collect();
        let arenas = pa.arenas();
        assert!((3..=4).contains(&arenas), "{arenas} arenas");
        for r in &runs {
            fill(r, 0xAAAA_AAAA_AAAA_AAAA);
        }
        // Keep one page in 16: every arena stays, most pages go back.
        let mut kept = Vec::new();
        for (i, r) in runs.into_iter().enumerate() {
            if i % 16 == 0 {
                kept.push(r);
            } else {
                pa.free(r, true);
                pa.assert_consistent();
            }
        }
        assert_eq!(pa.arenas(), arenas);
        assert!(pa.cached_bytes() * 16 <= pa.held_bytes());
        // Given-back pages read as zero: MADV_DONTNEED really dropped them.
        let clean = pa.clean_pages();
        assert!(clean.len() > 2 * ARENA_PAGES);
        for p in clean {
            // SAFETY: a clean page of a live arena mapping.
            assert_eq!(unsafe { p.read_volatile() }, 0);
        }
        // Clean pages are reused before any new arena is mapped.
        let again: Vec<_> = (0..ARENA_PAGES).map(|_| pa.alloc(1).unwrap()).collect();
        assert_eq!(pa.arenas(), arenas);
        pa.assert_consistent();
        // The last live page gone, everything goes back.
        for r in kept.into_iter().chain(again) {
            pa.free(r, true);
        }
        assert_eq!((pa.held_bytes(), pa.arenas()), (0, 0));
        pa.assert_consistent();
    }

    /// The arena a run lies in and whether it is huge.
    fn arena_of(pa: &PageAlloc, r: &PageRun) -> (u32, bool) {
        let g = pa.inner.lock();
        let huge = g.arenas[r.arena as usize]
            .as_ref()
            .expect("live arena")
            .huge;
        (r.arena, huge)
    }

    /// Whether the kernel backs the page at `p` with a huge page, from
    /// /proc/self/smaps (None if it cannot be read).
    fn backed_huge(p: *const u8) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let addr = p as usize;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = (lo..hi).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                    return Some(kb.trim().trim_end_matches(" kB").trim() != "0");
                }
            }
        }
        None
    }

    #[test]
    fn huge_arenas_hold_their_reserve_and_break_after_small_ones() {
        if !huge_pages_available() {
            eprintln!("skipped: the kernel offers no 2 MiB transparent huge pages");
            return;
        }
        let pa = PageAlloc::new(true);
        // Three arenas' worth and a bit: a small first arena (the pool had
        // no live arena's worth yet), then huge ones, the last mostly reserve.
        let runs: Vec<_> = (0..3 * ARENA_PAGES + 100)
            .map(|_| pa.alloc(1).unwrap())
            .collect();
        for (i, r) in runs.iter().enumerate() {
            fill(r, i as u64);
        }
        let arenas: Vec<_> = runs.iter().map(|r| arena_of(&pa, r)).collect();
        assert!(!arenas[0].1, "the first arena is small");
        assert!(
            arenas[ARENA_PAGES + 1].1,
            "an arena taken past 2 MiB live is huge"
        );
        assert_eq!(pa.huge_arenas(), 3);
        assert_eq!(pa.arenas(), 4);
        pa.assert_consistent();
        // The last arena's untouched pages are held: the whole huge page.
        let live = runs.len() as u64;
        assert_eq!(pa.cached_bytes(), 0);
        assert_eq!(pa.held_bytes(), 4 * ARENA_BYTES as u64);
        assert!(pa.held_bytes() > live * PAGE_SIZE as u64);
        match backed_huge(runs[ARENA_PAGES + 1].as_ptr()) {
            Some(true) => {}
            Some(false) => {
                eprintln!("note: the kernel had no huge page free; small pages back the arena")
            }
            None => eprintln!("note: /proc/self/smaps unreadable"),
        }

        // Cache 35 pages of the small arena and 55 of a huge one (below the
        // trim bound), then ask for 35 back: the small arena's go and every
        // huge arena stays whole, though the huge one caches more.
        let (a0, a1) = (arenas[0].0, arenas[ARENA_PAGES + 1].0);
        let (mut from0, mut from1) = (0, 0);
        let mut kept = Vec::new();
        let mut a1_runs = Vec::new();
        for (i, r) in runs.into_iter().enumerate() {
            let a = arenas[i].0;
            if a == a0 && from0 < 35 {
                from0 += 1;
                pa.free(r, true);
            } else if a == a1 && from1 < 55 {
                from1 += 1;
                pa.free(r, true);
            } else if a == a1 {
                a1_runs.push((i, r));
            } else {
                kept.push((i, r));
            }
        }
        assert_eq!(pa.cached_bytes(), 90 * PAGE_SIZE as u64, "no trim yet");
        assert_eq!(pa.trim(55 * PAGE_SIZE as u64), 35 * PAGE_SIZE as u64);
        pa.assert_consistent();
        assert_eq!(pa.huge_arenas(), 3, "small arenas are trimmed first");
        // Free most of the rest of that huge arena: the trims this starts
        // find nothing small to give back and break it.
        for (n, (i, r)) in a1_runs.into_iter().enumerate() {
            if n % 16 == 0 {
                kept.push((i, r));
            } else {
                pa.free(r, true);
            }
        }
        // Now only a huge arena can give enough back: it was broken.
        pa.assert_consistent();
        assert_eq!(pa.huge_arenas(), 2, "the sparse huge arena was broken");
        assert!(pa.cached_bytes() * 16 <= pa.held_bytes());
        for p in pa.clean_pages() {
            // SAFETY: a clean page of a live arena mapping.
            let first = unsafe { p.read_volatile() };
            assert_eq!(first, 0, "a given-back page reads zero");
        }
        for (i, r) in &kept {
            check(r, *i as u64);
        }
        for (_, r) in kept {
            pa.free(r, true);
        }
        assert_eq!((pa.held_bytes(), pa.arenas(), pa.huge_arenas()), (0, 0, 0));
        pa.assert_consistent();
    }

    #[test]
    fn trim_to_zero_releases_every_cached_run() {
        let pa = PageAlloc::new(false);
        let runs: Vec<_> = (0..400).map(|i| pa.alloc(1 + i % 16).unwrap()).collect();
        let live: u64 = runs.iter().map(|r| u64::from(r.pages)).sum();
        for r in runs.into_iter().skip(300) {
            pa.free(r, true);
        }
        let freed = pa.held_bytes() - pa.cached_bytes();
        let cached = pa.cached_bytes();
        assert_eq!(pa.trim(0), cached);
        assert_eq!((pa.cached_bytes(), pa.held_bytes()), (0, freed));
        assert!(freed < live * PAGE_SIZE as u64);
        pa.assert_consistent();
    }

    #[test]
    fn random_runs_never_overlap_and_the_books_balance() {
        random_runs(false);
    }

    /// The same with huge arenas (taken once live pages pass an arena's
    /// worth, broken by the trims of the shrinking phases).
    #[test]
    fn random_runs_with_huge_arenas() {
        if !huge_pages_available() {
            eprintln!("skipped: the kernel offers no 2 MiB transparent huge pages");
            return;
        }
        random_runs(true);
    }

    fn random_runs(huge: bool) {
        let pa = PageAlloc::new(huge);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut live: Vec<(PageRun, u64)> = Vec::new();
        for op in 0..20_000u64 {
            // Drift the live size up and down so trims and regrowth happen.
            let grow = (op / 4000) % 2 == 0;
            if live.is_empty() || rng.gen_ratio(if grow { 3 } else { 1 }, 4) {
                let r = pa.alloc(rng.gen_range(1..=MAX_RUN_PAGES)).unwrap();
                fill(&r, op);
                live.push((r, op));
            } else {
                let (r, tag) = live.swap_remove(rng.gen_range(0..live.len()));
                check(&r, tag);
                pa.free(r, true);
            }
            if op % 500 == 0 {
                pa.assert_consistent();
            }
        }
        for (r, tag) in &live {
            check(r, *tag);
        }
        pa.assert_consistent();
        for (r, _) in live {
            pa.free(r, true);
        }
        assert_eq!((pa.held_bytes(), pa.arenas()), (0, 0));
    }

    #[test]
    fn concurrent_alloc_free_keeps_runs_private() {
        concurrent_alloc_free(PageAlloc::new(true));
    }

    /// As above with the fill thread faulting pages in meanwhile (the
    /// threads grow the provider to ~80 MiB, past where it starts).
    #[test]
    fn concurrent_alloc_free_with_the_fill_thread() {
        let pa = PageAlloc::with_fill(false, true);
        concurrent_alloc_free(pa);
    }

    fn concurrent_alloc_free(pa: PageAlloc) {
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let pa = &pa;
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let mut live: Vec<(PageRun, u64)> = Vec::new();
                    for op in 0..20_000u64 {
                        let tag = t << 56 | op;
                        if live.len() < 64 || rng.gen_ratio(1, 2) && live.len() < 600 {
                            let r = pa.alloc(rng.gen_range(1..=MAX_RUN_PAGES)).unwrap();
                            fill(&r, tag);
                            live.push((r, tag));
                        } else {
                            let (r, tag) = live.swap_remove(rng.gen_range(0..live.len()));
                            check(&r, tag);
                            pa.free(r, true);
                        }
                    }
                    for (r, tag) in live {
                        check(&r, tag);
                        pa.free(r, true);
                    }
                });
            }
        });
        // A fill that ended after the last free is cached: give it back.
        pa.wait_fill_idle();
        pa.assert_consistent();
        pa.trim(0);
        assert_eq!((pa.held_bytes(), pa.arenas()), (0, 0));
    }

    /// Clean pages faulted in with a run are cached as whole runs of its
    /// length: a shorter tail could serve no allocation of that length and
    /// took the cap from it (a pool of 8-page runs held 56 single pages and
    /// faulted every run in by itself).
    #[test]
    fn a_fill_in_an_allocation_caches_whole_runs() {
        let pa = PageAlloc::new(false);
        let keep: Vec<_> = (0..2000).map(|_| pa.alloc(3).unwrap()).collect();
        let lens = pa.listed_lengths();
        assert!(!lens.is_empty(), "pages are faulted in ahead");
        assert!(lens.iter().all(|&n| n == 3), "cached runs {lens:?}");
        pa.assert_consistent();
        for r in keep {
            pa.free(r, true);
        }
        assert_eq!(pa.held_bytes(), 0);
    }

    /// Once the provider holds 4 MiB, its fill thread keeps a range of
    /// faulted-in pages, and an allocation no cached run can serve takes
    /// the head of it.
    #[test]
    fn allocations_take_the_pages_filled_ahead() {
        let pa = PageAlloc::with_fill(false, true);
        let mut keep: Vec<_> = (0..1100).map(|_| pa.alloc(1).unwrap()).collect();
        let t0 = std::time::Instant::now();
        while pa.filled_bytes() == 0 {
            assert!(
                t0.elapsed().as_secs() < 10,
                "the fill thread filled nothing"
            );
            keep.push(pa.alloc(1).unwrap());
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        pa.wait_fill_idle();
        pa.assert_consistent();
        let (head, len) = pa.ahead().expect("pages filled ahead");
        // Runs of one page on the lists (grown by allocations of one) serve
        // no allocation of three; the filled range does.
        assert!(len >= 3 && pa.listed_lengths().iter().all(|&n| n < 3));
        let r = pa.alloc(3).unwrap();
        assert_eq!(r.as_ptr().cast_const(), head, "the head of the range");
        keep.push(r);
        pa.wait_fill_idle();
        pa.assert_consistent();
        for r in keep {
            pa.free(r, true);
        }
        pa.wait_fill_idle();
        pa.trim(0);
        assert_eq!((pa.held_bytes(), pa.arenas()), (0, 0));
    }

    /// A drop that comes while the fill thread faults pages in, with the
    /// lock dropped, after the owner gave everything back (the fill is then
    /// not kept and the thread goes idle): the thread must see the stop and
    /// the drop's join return. It slept for good once, the drop's
    /// notification having come before the thread read the sequence it
    /// waited on. Each round races one drop against one fill; a watchdog
    /// fails the test where a drop does not return.
    #[test]
    fn a_drop_during_a_fill_stops_the_fill_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let rounds = 100;
        std::thread::spawn(move || {
            for round in 0..rounds {
                let pa = PageAlloc::with_fill(false, true);
                let runs: Vec<_> = (0..1100).map(|_| pa.alloc(1).unwrap()).collect();
                // Started past FILL_FROM_PAGES; wait until it fills.
                let t0 = std::time::Instant::now();
                while !pa.filling() && t0.elapsed().as_millis() < 200 {
                    std::hint::spin_loop();
                }
                for r in runs {
                    pa.free(r, true);
                }
                drop(pa);
                tx.send(round).unwrap();
            }
        });
        for round in 0..rounds {
            match rx.recv_timeout(std::time::Duration::from_secs(10)) {
                Ok(r) => assert_eq!(r, round),
                Err(e) => {
                    panic!("round {round}: a drop did not return ({e}): the fill thread slept on")
                }
            }
        }
    }

    /// Where the fill thread runs, frees leave a due trim to it: the cache
    /// may reach twice its bound meanwhile, never more, and once the
    /// thread is idle the bound holds and every page it gave back is clean
    /// (reads zero: zapped, not just unlisted).
    #[test]
    fn a_due_trim_is_left_to_the_fill_thread() {
        let pa = PageAlloc::with_fill(false, true);
        let mut runs: Vec<_> = (0..2048).map(|_| pa.alloc(1).unwrap()).collect();
        for (i, r) in runs.iter().enumerate() {
            fill(r, i as u64 + 1);
        }
        assert!(pa.trim_ahead.load(Ordering::Relaxed), "the thread runs");
        pa.wait_fill_idle();
        let clean_before = pa.clean_pages().len();
        let mut rng = SmallRng::seed_from_u64(3);
        let mut kept = Vec::new();
        for (i, r) in runs.drain(..).enumerate() {
            if rng.gen_ratio(3, 4) {
                pa.free(r, true);
                let (cached, held) = (pa.cached_bytes(), pa.held_bytes());
                assert!(cached * CACHE_DIVISOR <= 2 * (held - cached));
                // Frees as a program spreads them: a woken fill thread
                // takes the lock between two (back to back, this thread
                // may take it every time first and trim inline at twice
                // the bound, as it is allowed to). A trim left to the
                // thread gets the time to be taken: with only a yield the
                // thread missed every one of them once, in a suite run
                // whose other tests kept both CPUs busy.
                let t0 = std::time::Instant::now();
                while pa.inner.lock().trim_due
                    && t0.elapsed() < std::time::Duration::from_millis(100)
                {
                    std::thread::yield_now();
                }
            } else {
                kept.push((r, i as u64 + 1));
            }
        }
        pa.wait_fill_idle();
        pa.assert_consistent();
        assert!(pa.deferred_trims.load(Ordering::Relaxed) > 0);
        let clean = pa.clean_pages();
        assert!(clean.len() > clean_before, "the trims gave pages back");
        for &p in &clean {
            // SAFETY: a clean page of a live arena: mapped, owned by no run.
            let page = unsafe { std::slice::from_raw_parts(p, PAGE_SIZE) };
            assert!(page.iter().all(|&b| b == 0), "a clean page holds data");
        }
        for (r, tag) in kept {
            check(&r, tag);
            pa.free(r, true);
        }
        pa.wait_fill_idle();
        assert_eq!(pa.held_bytes(), 0, "no live page: the last free trims");
    }

    /// Threads that run out of room at once share the huge arena one of
    /// them faults in with the lock dropped: no run is handed out twice,
    /// the memory being faulted in is counted all along, and no thread maps
    /// an arena of its own while another is growing.
    #[test]
    fn concurrent_growth_shares_each_new_huge_arena() {
        if !huge_pages_available() {
            eprintln!("skipped: the kernel offers no 2 MiB transparent huge pages");
            return;
        }
        const THREADS: u64 = 4;
        const PER: usize = 2 * ARENA_PAGES;
        let pa = std::sync::Arc::new(PageAlloc::new(true));
        let start = std::sync::Arc::new(std::sync::Barrier::new(THREADS as usize));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pa, start) = (pa.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let mut runs = Vec::with_capacity(PER);
                    for i in 0..PER {
                        let r = pa.alloc(1).unwrap();
                        fill(&r, t << 32 | i as u64);
                        // Whatever is faulting in, the total covers every
                        // run handed out.
                        assert!(pa.held_bytes() >= PAGE_SIZE as u64);
                        runs.push(r);
                    }
                    runs
                })
            })
            .collect();
        let runs: Vec<Vec<PageRun>> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        for (t, rs) in runs.iter().enumerate() {
            for (i, r) in rs.iter().enumerate() {
                check(r, (t as u64) << 32 | i as u64);
            }
        }
        pa.assert_consistent();
        // 8 arenas' worth of pages: a small first arena, the rest huge, and
        // never more than one arena grown beyond what the runs need.
        let need = (THREADS as usize * PER).div_ceil(ARENA_PAGES) as u64;
        assert!(pa.arenas() <= need + 1, "{} arenas for {need}", pa.arenas());
        assert!(pa.huge_arenas() >= need - 2, "{} huge", pa.huge_arenas());
        for r in runs.into_iter().flatten() {
            pa.free(r, true);
        }
        pa.trim(0);
        pa.assert_consistent();
        assert_eq!((pa.held_bytes(), pa.arenas()), (0, 0));
    }
}
