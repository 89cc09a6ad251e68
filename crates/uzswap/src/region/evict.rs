//! The evictor: picks cold chunks by CLOCK and evicts them in batches with
//! the race-free protocol: write-protect → read → store (batch-compressed by
//! the cache's engine) → `MADV_DONTNEED` → STORED. A refused store puts the
//! chunk back to RESIDENT (unprotected, still charged).
//!
//! Probation, then CLOCK. A chunk that came in as one random read (a
//! PARTIAL chunk's first group) is queued on `Shared::probation`, and a
//! batch first takes the oldest of those that are still PARTIAL and have
//! not been read again (the kernel's inactive list, where a new page waits
//! for a second access before it competes with the working set). Only
//! when probation holds too little does the CLOCK hand move. Why: the fault
//! is the only reference signal userspace gets for free, so a mapped hot
//! chunk earns none while it is read; every turn of the hand that cold
//! reads forced cost the hot chunks their REF and ACTIVE bits, and each
//! was evicted and faulted back about twice per usemem read pass.
//! Probation victims are taken and evicted `PROBATION_STEP` at a time, not
//! a whole batch at once: they are single pages, so a batch of them is
//! thousands of chunks, each EVICTING until the batch gets to it, and a
//! read of one's other pages waited for that (~5 ms). One that a read
//! waits on all the same is handed back when its turn comes (it was read
//! again). The CLOCK's victims go `CLOCK_STEP` at a time for the same
//! reason, and a whole victim a write waits on is handed back unstored
//! (`hand_back`). A fault at the backstop evicts one step, not a batch,
//! and leaves the rest to the evictor thread.
//!
//! CLOCK: a chunk is REF when installed (but for a partial chunk's first
//! group: a single random read is taken for a use-once); the hand clears
//! REF, then ACTIVE (set by a workingset refault), then REJECTED (a refused
//! store), and takes a chunk that has none. Clean chunks (a clean copy kept in the cache) are taken like
//! any other and cost only a zap once their copy is claimed. Before the
//! CLOCK takes anything, the evictor frees clean copies (they keep no
//! chunk resident), but after probation's victims: a random read's page
//! whose copy is still in the cache is evicted by a claim and a zap, where
//! freeing its copy first made its eviction a store (`probation_first`).
//!
//! Zaps are gathered per region and made many ranges per call
//! (`uzswap_zpool::zap`):
//! a chunk stays EVICTING from its store until its zap. Write-protection
//! too: before a step stores anything, its victims that need protecting
//! are protected with as few calls as the chunks between them allow
//! (`protect_ahead`), since each call shoots down the TLB of every CPU
//! the program runs on.
//!
//! Several evictions at once. Each eviction (the evictor thread's batch, a
//! fault's step at the backstop, a `PageOut` hint) holds one of the
//! instance's eviction slots (`Slots`: one per handler thread, and one for
//! the evictor thread) while it runs. The CLOCK hand is locked only while
//! a step's victims are taken, not while they are stored: a victim is
//! EVICTING and ours from its taking, so two evictions never share a
//! chunk, and the stores of different evictions compress on their own
//! threads at once, as the kernel's direct reclaimers each compress beside
//! kswapd. Before, one
//! lock held the hand through the whole protocol: a fault at the backstop
//! waited for the evictor's batch while a CPU stood idle. Each eviction in
//! flight has at most one store in flight, so the headroom under the
//! budget keeps one store margin per slot (`fault_margin`), and small
//! budgets keep one slot (`evictors_for`).
//!
//! Locking: an eviction slot (waited for, not spun on) → `clock` (the
//! hand, held only while selecting) → a region's `live` lock (read-held
//! while its chunks are scanned or evicted). A fork takes every slot
//! (`Slots::take_all`): no eviction runs while it brings chunks in. The
//! probation queue's lock is a leaf: faults push under `live`, so an
//! eviction pops entries and drops the queue's lock before it takes any
//! `live`. Nothing here waits for a fault handler. A fault at the
//! backstop waits for a slot with a timeout and, between tries, only
//! reads the usage counters: it goes ahead once the evictions in flight
//! have made its room, holding nothing (faults never wait for a slot
//! under `live`).

use super::chunk::{self, *};
use super::{RegionInner, Shared};
use crate::compress::quiesce::Event;
use crate::zswap::SwapEntry;
use crate::PAGE_SIZE;
use parking_lot::Mutex;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Evictions that may run at once, at most: the evictor thread's and one
/// per thread that may fault at once (`Config::evictors`).
pub(super) const MAX_EVICTORS: usize = 8;

/// The eviction slots: at most `max` evictions run at once, each holding
/// a [`Slot`]. A fork closes them all (`take_all`).
pub(super) struct Slots {
    /// A fork is taking (or holds) every slot: no new eviction starts.
    /// Taking or giving back a slot holds this lock too.
    closed: Mutex<bool>,
    changed: Event,
    max: usize,
    /// Slots held now: changed under `closed`, read without it (the
    /// backstop's count of the stores that may be in flight).
    held: AtomicUsize,
}

/// One eviction slot, or (`all`) every slot, held until dropped.
pub(super) struct Slot<'a> {
    slots: &'a Slots,
    all: bool,
}

impl Slots {
    pub(super) fn new(max: usize) -> Slots {
        Slots {
            closed: Mutex::new(false),
            changed: Event::new(),
            max: max.max(1),
            held: AtomicUsize::new(0),
        }
    }

    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// Evictions running now.
    fn in_flight(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// Whether a slot may be taken now (`closed` is the held lock's value).
    fn free(&self, closed: bool) -> bool {
        !closed && self.held.load(Relaxed) < self.max
    }

    /// Called with `closed` locked and a slot free.
    fn grant(&self) -> Slot<'_> {
        self.held.fetch_add(1, Relaxed);
        Slot {
            slots: self,
            all: false,
        }
    }

    /// A slot, waiting as long as it takes.
    fn take(&self) -> Slot<'_> {
        let mut closed = self.closed.lock();
        while !self.free(*closed) {
            self.changed.wait_unlocked(&mut closed, None);
        }
        self.grant()
    }

    /// A slot, if one frees within `wait`.
    fn try_take_for(&self, wait: Duration) -> Option<Slot<'_>> {
        let mut closed = self.closed.lock();
        if !self.free(*closed) {
            self.changed.wait_unlocked(&mut closed, Some(wait));
            if !self.free(*closed) {
                return None;
            }
        }
        Some(self.grant())
    }

    /// Every slot: closes them to new evictions at once (so evictions that
    /// keep starting cannot starve it), then waits out those in flight.
    pub(super) fn take_all(&self) -> Slot<'_> {
        let mut closed = self.closed.lock();
        while *closed {
            self.changed.wait_unlocked(&mut closed, None);
        }
        *closed = true;
        while self.held.load(Relaxed) > 0 {
            self.changed.wait_unlocked(&mut closed, None);
        }
        Slot {
            slots: self,
            all: true,
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let s = self.slots;
        let mut closed = s.closed.lock();
        if self.all {
            *closed = false;
        } else {
            s.held.fetch_sub(1, Relaxed);
        }
        drop(closed);
        s.changed.notify_all();
    }
}

/// The CLOCK hand: region base address and chunk index.
#[derive(Default)]
pub(super) struct Clock {
    base: usize,
    ci: usize,
    /// Chunks the hand has visited, ever: what paces accessed-bit samples
    /// (`young.rs`).
    pub(super) visited: u64,
}

struct Victim {
    r: Arc<RegionInner>,
    ci: usize,
    /// The state it was taken from: RESIDENT, CLEAN or PARTIAL.
    from: u32,
    /// PARTIAL: its mapped groups.
    mask: u16,
    /// PARTIAL: the mapped groups that stay mapped (a trim, `select`); 0
    /// where the whole chunk goes.
    keep: u16,
    /// The word it was taken with (`chunk::must_protect` reads it).
    word: u32,
    /// Write-protected already by its step's [`protect_ahead`].
    protected: bool,
}

impl Victim {
    /// `w`: the chunk's word when it was taken (now EVICTING, ours).
    fn new(r: &Arc<RegionInner>, ci: usize, w: u32) -> Victim {
        if !r.evicted_once.load(Relaxed) {
            r.evicted_once.store(true, Release);
        }
        Victim {
            r: r.clone(),
            ci,
            from: chunk::state(w),
            mask: chunk::part_mask(w).unwrap_or(0),
            // A child's groups mapped from its parent stay (`shared`).
            keep: r.shared_mask(ci),
            word: w,
            protected: false,
        }
    }

    /// The groups this eviction takes: a partial victim's mapped ones but
    /// those it keeps.
    fn going(&self) -> u16 {
        self.mask & !self.keep
    }
}

/// States the evictor takes chunks from.
fn evictable(st: u32) -> bool {
    matches!(st, RESIDENT | CLEAN | PARTIAL)
}

/// A batch that frees less than this fraction of its size is futile (the
/// data does not compress, so storing it only moves bytes from resident to
/// pool): stop trying for a while instead of burning CPU on it.
const FUTILE_DIVISOR: i64 = 8;
/// Pool growth beyond the compressed chunk itself that one store may
/// cause, apart from a new huge arena (`uzswap_zpool`'s bound): the pages
/// a span's fault-in populates ahead of need (`Growth::ahead_bytes`, 256
/// KiB), and the unused parts of the spans it opens for objects of classes
/// with no free slot, one span (`Growth::span_bytes`, 32 KiB) per object:
/// 768 KiB for a 64 KiB folio's 16 objects, 288 KiB for a page's one.
/// Larger folios are not bounded so: their objects' open spans are at most
/// one per class they touch, which may be most of the classes. They get 32
/// spans (1.28 MiB, more than the flat 1 MiB they had), not a bound
/// either. Measured, the most one store grew the pool
/// beyond its objects: 260 KiB over GNU sort under 44 MiB, 274 KiB over
/// heap.py under 146 MiB. A flat 1 MiB before, counted twice in the
/// fault margin (the second term below): 2 MiB under a 44 MiB budget
/// that the data never got, and sort runs on a cliff there
/// (docs/BENCHMARKS.md, "The store margin from the pool's own bound").
fn store_surplus(chunk: usize, g: Growth) -> u64 {
    let spans = (chunk / PAGE_SIZE).clamp(1, 32) as u64;
    spans * g.span_bytes + g.ahead_bytes
}

/// What one store can grow the pool by beyond its objects, as this
/// instance's pool is built (`store_surplus`).
///
/// Small budgets: a fixed bound was about 1.1 MiB of headroom for a 64
/// KiB folio, and under a budget of a few MiB that is an eighth of it kept
/// from the program's data: mawk's 9 MiB heap under 8 MiB took 3.2 s and
/// 36 k faults, under 8.6 MiB 1.4-1.7 s and 17 k (docs/BENCHMARKS.md,
/// "Programs the bench does not run; small budgets"). So both parts
/// shrink with the budget. Pages faulted in ahead are at most a
/// sixty-fourth of the pool's, which the budget bounds
/// (`uzswap_zpool::grow_bytes_within`). And under
/// [`SMALL_BUDGET`] the pool's spans are half as long
/// ([`pool_span_pages`]): each class's open span is smaller too, which a
/// small pool feels more than the 5% its slots fill less.
#[derive(Clone, Copy, Debug)]
pub(super) struct Growth {
    /// The longest span's bytes.
    span_bytes: u64,
    /// Pages faulted in ahead of need, at most.
    ahead_bytes: u64,
}

/// Budgets under which the pool's spans are shorter ([`Growth`]).
pub(super) const SMALL_BUDGET: u64 = 32 << 20;
/// Their longest span, in pages.
const SMALL_SPAN_PAGES: usize = 4;

/// The pool's longest span in pages for `cfg`: the configured one, or
/// where it is left to the pool (0), a shorter one under [`SMALL_BUDGET`].
pub(super) fn pool_span_pages(cfg: &super::Config) -> usize {
    match cfg.zswap.pool_span_pages {
        0 if cfg.budget < SMALL_BUDGET => SMALL_SPAN_PAGES,
        0 => uzswap_zpool::size_class::DEFAULT_MAX_PAGES_PER_SPAN,
        n => n,
    }
}

impl Growth {
    pub(super) fn of(cfg: &super::Config) -> Self {
        Growth {
            span_bytes: (pool_span_pages(cfg) * PAGE_SIZE) as u64,
            ahead_bytes: uzswap_zpool::grow_bytes_within(cfg.budget),
        }
    }
}

/// A new huge arena is held whole from its first span on.
const ARENA_GROWTH: u64 = uzswap_zpool::ARENA_BYTES as u64;

/// Headroom under the budget for the store in flight, at most: its
/// compressed copy (at worst the whole chunk, stored as is) lands in the
/// pool, which grows by whole spans, or by a whole arena where it may map
/// huge ones (`huge`), a moment before the chunk's resident charge goes.
pub(super) fn store_margin(chunk: usize, huge: bool, g: Growth) -> u64 {
    chunk as u64 + store_surplus(chunk, g) + if huge { ARENA_GROWTH } else { 0 }
}

/// What faults leave free under the budget: the store margin, and room for
/// what the store before it may have left behind. A store can grow the
/// pool by more than the chunk it then uncharges (the spans it opened are
/// new pages, filled by later stores), and faults waiting at the backstop
/// take any room the moment it appears, so without this the next store of
/// the batch found itself short by that surplus (16-127 KiB, 125 times in
/// a 1 GiB mixed write under 512 MiB) and made room by writing back 0.4-0.9
/// MiB each time: 80 MiB of pages the pool had room for, read back from
/// the device in the read pass. That surplus is what the last store
/// populated ahead of need (at most `GROW_BYTES`) and the free tails of
/// the spans it opened, which the next stores fill first.
///
/// `evictors`: evictions that may run at once (`Slots`), each with a store
/// in flight.
pub(super) fn fault_margin(chunk: usize, huge: bool, evictors: usize, g: Growth) -> u64 {
    store_margin(chunk, huge, g) * evictors.max(1) as u64 + g.ahead_bytes
}

/// [`fault_margin`] for this instance's pool.
fn margin(sh: &Shared) -> u64 {
    fault_margin(
        sh.chunk,
        sh.zswap.pool_may_map_huge(),
        sh.slots.max(),
        sh.growth,
    )
}

/// How many evictions may run at once under `budget`: `want` (up to
/// [`MAX_EVICTORS`]) where the headroom their stores need takes at most
/// 1/128 of the budget from the working set, else one. Programs near a
/// cliff pay for every MiB: `bench programs`' sort under 47 MiB took twice
/// the faults with 2 MiB less, its threads program under 145 MiB 4% more.
/// Nothing in between: with fewer slots than the faulting threads and the
/// evictor, a fault waits for another fault's slot, and two slots for two
/// handlers ran no faster than one (docs/BENCHMARKS.md).
pub(super) fn evictors_for(budget: u64, chunk: usize, huge: bool, want: usize, g: Growth) -> usize {
    let n = want.clamp(1, MAX_EVICTORS);
    if (n as u64 - 1) * store_margin(chunk, huge, g) <= budget / 128 {
        n
    } else {
        1
    }
}

/// The headroom one store needs now. A huge arena's reserve is already
/// charged (it is in `pool_total_size`) and new spans take it before the
/// pool maps another arena, so only the part of an arena it does not cover
/// can still appear. Counting a whole arena on top of a reserve that is
/// already charged would find every store after a new arena 2 MiB short,
/// and make room by writing back cold pages the pool has room for.
fn store_need(sh: &Shared) -> u64 {
    let reserve = sh.zswap.pool_reserve_bytes().min(ARENA_GROWTH);
    store_margin(sh.chunk, sh.zswap.pool_may_map_huge(), sh.growth).saturating_sub(reserve)
}
/// Resident bytes of probation victims taken and evicted at a time (256
/// single-page chunks: one zap call's worth of ranges).
const PROBATION_STEP: u64 = 1 << 20;
/// Resident bytes of CLOCK victims taken and evicted at a time: 32 chunks
/// of 64 KiB, one run's write-protection and a few zaps' worth.
const CLOCK_STEP: u64 = 2 << 20;
const FUTILE_BACKOFF: Duration = Duration::from_millis(20);
/// How often a fault waiting behind a batch in flight looks again at the
/// room that batch has made. Each look wakes the thread: at 100 us the
/// waiters took CPU from the batch they waited on (2 vCPUs: lz4 index
/// pages wrote 15-25% slower); at 1 ms the write of lzo mixed pages still
/// ran 20% faster than waiting out the whole batch, lz4 index ~8% slower.
const BACKSTOP_POLL: Duration = Duration::from_millis(1);

fn futile(sh: &Shared) -> bool {
    (sh.epoch.elapsed().as_nanos() as u64) < sh.futile_until.load(Relaxed)
}

fn set_futile(sh: &Shared) {
    let until = (sh.epoch.elapsed() + FUTILE_BACKOFF).as_nanos() as u64;
    sh.futile_until.store(until, Relaxed);
}

/// Called after a chunk is installed: wake the evictor above the high
/// watermark.
pub(super) fn maybe_kick(sh: &Shared) {
    if sh.usage() > sh.batch.high() && !sh.evictor_busy.load(Relaxed) && !futile(sh) {
        let mut k = sh.kick.lock();
        if !*k {
            *k = true;
            sh.kick_wake.notify_one();
        }
    }
}

/// Whether `bytes` more may be installed now without evicting: under the
/// backstop's limit with room left for every installer's chunk, as a fault
/// that passes the backstop would find it. Read-ahead asks, and never
/// evicts for what it only guesses will be used.
pub(super) fn room_for(sh: &Shared, bytes: u64) -> bool {
    let incoming = (sh.chunk * sh.installers()) as u64;
    !sh.frozen.load(Acquire)
        && sh.usage() + incoming + bytes <= sh.cfg.budget.saturating_sub(margin(sh))
}

/// Called by the fault handler before installing a chunk: if that would
/// leave less than the fault margin under the budget, wait for the
/// evictions in flight to make the room, or take a slot and evict a step
/// itself, so resident + pool never exceeds the budget.
///
/// The limit keeps the whole fault margin free (the store margin and one
/// step of span growth, `fault_margin`), with no credit for a huge arena's
/// reserve (as `store_need` gives): when a store maps a new
/// arena, usage rises by the arena at once while the next store's need
/// falls by less (the old reserve was already credited), so a limit that
/// credited the reserve left the next stores of the batch short by up to
/// that reserve, and each made room by writing back cold pages (measured:
/// ~7k pages of a 1 GiB write under 512 MiB, read back from the device
/// later). With the full margin kept here, `room_for_store` rarely finds
/// a store short.
pub(super) fn backstop(sh: &Shared) {
    // Bringing everything in before a fork (`pin.rs`): the forking thread
    // holds every eviction slot and usage may pass the budget until it is
    // done.
    if sh.frozen.load(Acquire) {
        return;
    }
    let limit = || sh.cfg.budget.saturating_sub(margin(sh));
    // Every handler thread (or faulting thread, in signal mode) may be
    // about to install a chunk at once.
    let incoming = (sh.chunk * sh.installers()) as u64;
    if sh.usage() + incoming <= limit() {
        return;
    }
    let timed = BackstopTimer(sh, std::time::Instant::now());
    sh.ctr.backstop_waits.fetch_add(1, Relaxed);
    if sh.signal {
        // Here from the SIGBUS handler, where SIGBUS is blocked: an
        // eviction this thread runs reads its victims, and one whose page
        // the program dropped behind our back faults; that SIGBUS must
        // reach the handler again (`fault::fill_dropped_evicting`), not end
        // the process. The handler's return restores the mask.
        crate::compress::thread::unblock_sigbus();
    }
    // While eviction is futile (incompressible chunks: storing them frees
    // nothing until writeback moves their copies to the device), faults
    // install into the margin without trying; one that would pass the
    // budget itself makes room first, writing back before it evicts. Not
    // into the room the stores in flight need.
    let in_flight = store_need(sh) * sh.slots.in_flight() as u64;
    if futile(sh) && sh.usage() + incoming + in_flight <= sh.cfg.budget {
        return;
    }
    // Evict a step beside the evictions in flight, if a slot is free (a
    // CPU may be idle while this thread waits); else wait for their room,
    // not for a whole batch (an 8 MiB batch held faults for 20-30 ms; a
    // store takes tens of microseconds).
    let slot = loop {
        if let Some(g) = sh.slots.try_take_for(BACKSTOP_POLL) {
            break g;
        }
        super::fault::serve_dropped(sh, timed.1.elapsed());
        if sh.usage() + incoming <= limit() {
            return;
        }
    };
    // A step, not a whole batch: the room this fault (and the others at
    // the backstop) need, as the kernel's direct reclaim takes
    // SWAP_CLUSTER_MAX pages and leaves the rest to kswapd. The evictor
    // thread, kicked, makes the rest of the room. With whole batches a
    // fault that found the evictor behind evicted 8 MiB (2048 single-page
    // chunks under random access, ~10 ms) and every other fault waited on
    // it: usemem's random row spent 0.1% of its faults there, and 40% of
    // its threads' time.
    let step = backstop_step(sh, incoming);
    while sh.usage() + incoming > limit() {
        // A fork waits for this slot, and brings everything in anyway: a
        // backstop that kept evicting held it up for seconds.
        if sh.frozen.load(Acquire) {
            break;
        }
        if probation_first(sh, false) {
            continue;
        }
        if drop_clean_copies(sh, sh.usage() + incoming - limit()) {
            continue;
        }
        sh.ctr.evict_inline_batches.fetch_add(1, Relaxed);
        match evict_batch(sh, step, in_flight_installs(sh)) {
            // Nothing resident to take: the pool alone fills the budget
            // (no writeback); this fault's chunk is the next victim.
            None => break,
            Some(freed) if freed < step as i64 / FUTILE_DIVISOR => {
                // Incompressible chunks free nothing until their copies
                // reach the device: write back now before giving up, a
                // step's worth (a batch's was 8 MiB of I/O in one fault).
                if sh.zswap.reclaim(step) > 0 {
                    continue;
                }
                set_futile(sh);
                break;
            }
            Some(_) => {}
        }
    }
    drop(slot);
    maybe_kick(sh);
}

/// Adds the time a fault spent past the backstop's first look to
/// `backstop_us`, however it leaves.
struct BackstopTimer<'a>(&'a Shared, std::time::Instant);

impl Drop for BackstopTimer<'_> {
    fn drop(&mut self) {
        let ns = self.1.elapsed().as_nanos() as u64;
        self.0.ctr.backstop_ns.fetch_add(ns, Relaxed);
    }
}

/// What the backstop evicts at a time: a probation step, or twice what
/// the faults in flight may install, at most a batch.
fn backstop_step(sh: &Shared, incoming: u64) -> u64 {
    PROBATION_STEP
        .max(2 * incoming)
        .min(sh.batch.bytes())
        .next_multiple_of(sh.chunk as u64)
}

/// Before a store (pool first, resident after): if installs took the
/// margin under the budget while eviction was futile, make room for the
/// store's transient by freeing clean copies, then by writing back. Best
/// effort: where nothing can be freed (no pool to write back) the store
/// goes ahead, as eviction is then the only way down.
fn room_for_store(sh: &Shared) {
    // Every eviction in flight may be about to store, this one included.
    let need = store_need(sh) * sh.slots.in_flight().max(1) as u64;
    let short = || (sh.usage() + need).saturating_sub(sh.cfg.budget);
    if short() == 0 {
        return;
    }
    sh.zswap.drop_clean(short());
    if short() > 0 {
        sh.zswap.reclaim(short());
    }
}

/// While the cache holds clean copies, a probation step before any copy
/// is freed: a random read's page not read again since is the next victim
/// anyway, and where its copy is still in the cache its eviction claims
/// the copy and zaps, no compression, freeing a whole page of resident
/// memory; freeing the copy first frees half a page of pool (lz4's ratio
/// on a typical heap) and makes that same eviction, a moment later, a
/// store. The kernel's reclaim likewise takes clean swap-cache pages off
/// the inactive list before anything dirty. Freed copies are the ones
/// whose chunks were read again (left probation). The evictor thread
/// (`take_slot`) waits for an eviction slot first, as for its batches.
/// True if the caller should look at usage again: it went down, or, after
/// the wait for the slot, another eviction already took it under the low
/// watermark.
fn probation_first(sh: &Shared, take_slot: bool) -> bool {
    if sh.zswap.clean_pages() == 0 {
        return false;
    }
    let _slot = take_slot.then(|| sh.slots.take());
    // A backstop or a `PageOut` hint may have freed enough while we waited
    // for the slot (the same check as before the evictor's batch).
    if take_slot && sh.usage() <= sh.batch.low() {
        return true;
    }
    // The evictor leaves probation's newest entries to wait out a small
    // batch; a fault at the backstop takes the cheapest room there is.
    let keep = if take_slot {
        probation_keep(sh)
    } else {
        in_flight_installs(sh)
    };
    evict_from(sh, PROBATION_STEP, false, keep).is_some_and(|f| f > 0)
}

/// Probation entries a fault at the backstop leaves: the newest, as many
/// as faults may be installing at once. They are the chunks those faults
/// just installed, and the instruction that faulted on one may need it
/// again with this fault's own (a `memmove` whose source and destination
/// were both evicted). Taken, that is a livelock: the two faults evict
/// each other's chunk forever. Measured with the batch at one chunk (a
/// 16 MiB budget, `batch.rs` without its floor): `heap.py 100000` in user
/// mode spun for minutes in 10 of 80 runs, in none of 40 with these
/// entries left.
fn in_flight_installs(sh: &Shared) -> usize {
    sh.installers()
}

/// Probation entries the evictor thread leaves (`batch.rs`), never fewer
/// than a fault at the backstop does.
fn probation_keep(sh: &Shared) -> usize {
    sh.batch.probation_keep().max(in_flight_installs(sh))
}

/// Free clean copies in the cache before the CLOCK evicts anything (after
/// `probation_first`): they duplicate chunks that are mapped, so freeing
/// them keeps every chunk resident and costs no I/O, only a recompression
/// if such a chunk is evicted later. True if usage went down.
fn drop_clean_copies(sh: &Shared, want: u64) -> bool {
    let before = sh.usage();
    sh.zswap.drop_clean(want) > 0 && sh.usage() < before
}

pub(super) fn evictor_loop(sh: &Shared) {
    loop {
        {
            let mut k = sh.kick.lock();
            while !*k && !sh.stop.load(Acquire) {
                // The timeout catches usage that rose without a kick (a
                // kick skipped while futile).
                let timed_out = sh
                    .kick_wake
                    .wait_unlocked(&mut k, Some(Duration::from_millis(50)));
                if timed_out {
                    super::own::refresh(sh);
                    if sh.usage() > sh.batch.high() && !futile(sh) {
                        break;
                    }
                }
            }
            *k = false;
        }
        if sh.stop.load(Acquire) {
            return;
        }
        super::own::refresh(sh);
        sh.batch.adapt(sh.ctr.backstop_waits.load(Relaxed));
        sh.evictor_busy.store(true, Relaxed);
        while sh.usage() > sh.batch.low() && !sh.stop.load(Acquire) {
            if probation_first(sh, true) {
                continue;
            }
            // Usage may have fallen under low since the loop's check (a
            // fault at the backstop evicting, a discard): then there is
            // nothing to free, not a wrapped-around amount of it.
            if drop_clean_copies(sh, sh.usage().saturating_sub(sh.batch.low())) {
                continue;
            }
            let batch = sh.batch.bytes();
            let freed = {
                let _slot = sh.slots.take();
                // A backstop or a `PageOut` hint may have freed enough
                // while we waited for the slot: a batch now would evict
                // chunks in use for nothing.
                if sh.usage() <= sh.batch.low() {
                    break;
                }
                super::young::maybe_sample(sh);
                evict_batch(sh, batch, probation_keep(sh))
            };
            if let Some(base) = sh.base_share {
                super::share::adapt(sh, base);
            }
            super::own::refresh(sh);
            match freed {
                None => break,
                Some(f) if f < batch as i64 / FUTILE_DIVISOR => {
                    if sh.zswap.reclaim(batch) > 0 {
                        continue;
                    }
                    set_futile(sh);
                    break;
                }
                Some(_) => {}
            }
        }
        sh.evictor_busy.store(false, Relaxed);
    }
}

/// Pick one batch of `size` resident bytes, from the probation queue first
/// and then by CLOCK, and evict it (the caller holds an eviction slot).
/// Returns the bytes of usage it freed (see [`run_protocol`]), or None if
/// no chunk could be taken.
fn evict_batch(sh: &Shared, size: u64, keep: usize) -> Option<i64> {
    evict_from(sh, size, true, keep)
}

/// `evict_batch`, or only its probation part where `clock` is false.
fn evict_from(sh: &Shared, size: u64, clock: bool, keep: usize) -> Option<i64> {
    let regions = sh.snapshot_regions();
    let mut victims = Vec::new();
    let (mut got, mut freed) = (0, None::<i64>);
    // Probation a step at a time: its chunks are single pages, so a whole
    // batch of them is thousands of chunks, each EVICTING (and a read of
    // its other pages waiting) until the batch reaches it: ~5 ms per wait
    // in usemem's mixed read pass, 1.1-1.4 s of it per run.
    while got < size {
        let want = (size - got).min(PROBATION_STEP);
        let step = take_probation(sh, &regions, want, keep, &mut victims);
        if victims.is_empty() {
            break;
        }
        got += step;
        *freed.get_or_insert(0) += run_protocol(sh, std::mem::take(&mut victims));
        if step < want {
            break;
        }
    }
    // The CLOCK's victims a step at a time too: each is EVICTING from its
    // selection to its zap, and a fault on it waits all that time. Taken
    // a whole batch at once, a fault parked on one waited 11 ms on average
    // (usemem's random row: 285 parks, 3.2 s of its threads' time).
    while clock && got < size {
        let want = (size - got).min(CLOCK_STEP.max(sh.chunk as u64));
        // The hand is ours only while taking: other evictions' steps take
        // their victims while this one stores its own.
        let step = select(&mut sh.clock.lock(), &regions, want, sh.chunk, &mut victims);
        if victims.is_empty() {
            break;
        }
        got += step;
        *freed.get_or_insert(0) += run_protocol(sh, std::mem::take(&mut victims));
        if step < want {
            break;
        }
    }
    if freed.is_some() {
        sh.ctr.evict_batches.fetch_add(1, Relaxed);
    }
    freed
}

/// Take victims by CLOCK until they hold `want` resident bytes (a PARTIAL
/// chunk holds its mapped groups) or every chunk was visited as often as it
/// can need. Returns the bytes taken.
fn select(
    clock: &mut Clock,
    regions: &[Arc<RegionInner>],
    want: u64,
    chunk: usize,
    out: &mut Vec<Victim>,
) -> u64 {
    let mut got = 0u64;
    let total: usize = regions.iter().map(|r| r.state.len()).sum();
    if total == 0 || want == 0 {
        return 0;
    }
    // Each chunk can need this many visits: REF, ACTIVE, REJECTED, a poor
    // compressor's extra passes, then taken. A whole turn that found
    // nothing to age or take (every chunk unmapped, owned or pinned) ends
    // the walk at once: the passes' visits are for chunks that spend them,
    // not a bound on a scan of nothing.
    let mut budget = (4 + density::MAX_PASSES) * total + 1;
    let mut idle = 0usize;
    let mut ri = regions
        .iter()
        .position(|r| r.base >= clock.base)
        .unwrap_or(0);
    if regions[ri].base != clock.base {
        clock.ci = 0;
    }
    while budget > 0 && idle < total && got < want {
        let r = &regions[ri];
        let live = r.live.read();
        if *live {
            while clock.ci < r.state.len() && budget > 0 && idle < total && got < want {
                budget -= 1;
                let ci = clock.ci;
                clock.ci += 1;
                clock.visited += 1;
                let s = &r.state[ci];
                let w = s.load(Acquire);
                let st = chunk::state(w);
                // A child's PARTIAL chunk with only groups mapped from its
                // parent (`shared`) holds nothing of its own to evict.
                if !evictable(st) || w & PINNED != 0 || r.charged(ci, w, chunk) == 0 {
                    idle += 1;
                    continue;
                }
                idle = 0;
                let clear = if w & REF != 0 {
                    REF
                } else if w & ACTIVE != 0 {
                    ACTIVE
                } else if w & REJECTED != 0 {
                    REJECTED
                } else {
                    0
                };
                if clear != 0 {
                    if clear == REF {
                        density::renew(&r.density[ci]);
                        if st == PARTIAL {
                            if let Some(v) = trim(r, ci, w, chunk) {
                                got += v.1;
                                out.push(v.0);
                                continue;
                            }
                        }
                    }
                    let _ = chunk::transition(s, st, st, clear, 0);
                    continue;
                }
                if density::spend_extra_pass(&r.density[ci]) {
                    continue;
                }
                if let Ok(w) = chunk::take_for_evict(s, st) {
                    got += r.charged(ci, w, chunk);
                    out.push(Victim::new(r, ci, w));
                }
            }
        } else {
            budget = budget.saturating_sub(r.state.len());
            idle += r.state.len();
        }
        drop(live);
        if clock.ci >= r.state.len() {
            ri = (ri + 1) % regions.len();
            clock.ci = 0;
        }
        clock.base = regions[ri].base;
    }
    got
}

/// The hand spares PARTIAL chunk `ci` of `r` (word `w`, REF): where one
/// of its mapped groups was faulted in since the hand's last pass and the
/// others were not, take those others for eviction, the chunk staying
/// PARTIAL with the one (a trim). The victim and the bytes it holds; None
/// where there is nothing to trim, the fresh groups then turning old.
///
/// Why: a fault is the only reference a mapped page earns, and a chunk
/// earns it for any of its groups. A chunk read page by page at one place
/// at a time (a match finder's table of positions, xz's and zstd's) kept
/// the pages read once long ago resident under the REF of the one read
/// lately, and its eviction at the next quiet pass took that page with
/// them. One fresh group only: where several came in since the last pass
/// the chunk is used at many places at once, its pages hot together (the
/// threads program's blocks; usemem's skewed rows), and its unfaulted
/// pages are as likely read as its faulted ones. Trimming to every fresh
/// group cost the threads program 14% more faults and the skewed text row
/// 4% (xz 10% fewer); one group leaves both as they were and keeps most of
/// xz's gain (docs/BENCHMARKS.md, "Trimming a partial chunk"). A KEPT
/// chunk came in whole and is used whole: not trimmed.
fn trim(r: &Arc<RegionInner>, ci: usize, w: u32, chunk: usize) -> Option<(Victim, u64)> {
    let fresh = &r.fresh[ci];
    let seen = fresh.load(Relaxed);
    let mask = chunk::part_mask(w)?;
    let shared = r.shared_mask(ci);
    if w & KEPT != 0 || (seen & mask).count_ones() != 1 || mask & !seen & !shared == 0 {
        fresh.fetch_and(!seen, Relaxed);
        return None;
    }
    let s = &r.state[ci];
    // Taken only from the very word judged: a fault since may have added
    // a group, which is fresh.
    s.compare_exchange(w, (w & !STATE_MASK) | EVICTING, AcqRel, Acquire)
        .ok()?;
    fresh.store(0, Relaxed);
    let mut v = Victim::new(r, ci, w);
    v.keep |= mask & seen;
    let group = chunk::group_pages(chunk / PAGE_SIZE) * PAGE_SIZE;
    let bytes = (v.going().count_ones() as usize * group) as u64;
    Some((v, bytes))
}

/// A chunk's density: what its last store kept of it, and the CLOCK's
/// extra pass for chunks that compress poorly (seed 003: eviction scaled
/// by the compression ratio). At equal memory, evicting a chunk frees
/// what compression saves of it, not its size: a page stored at 3:1
/// frees two thirds of a page, one at 1.3:1 under a quarter, so freeing
/// the same memory from the second kind takes 2.7 times the evictions,
/// and as many faults if the two are equally hot. The kernel's reclaim
/// ignores the ratio but sees the accessed bit; uzswap sees only faults,
/// so where hot and cold data differ in density (GNU sort: its text,
/// read at random, 1.4:1; its line records, streamed, 2.1:1) the ratio
/// is the signal it has. A chunk whose last store kept more than
/// `POOR_PERCENT` of its bytes is passed over once more by the hand
/// after its REF is cleared; a fault renews that pass.
///
/// A chunk stored as is (nothing compressed: random data, a hash table of
/// positions; `RAW_PERCENT` of it or more) that came back within a turn of
/// the hand of its eviction (a workingset refault) gets `RAW_PASSES`. Its
/// eviction freed nothing at all: the batch reads as futile and the
/// evictor writes the pool's raw entries back to make its room, so the
/// chunk costs a store, a write and, when it is read again, a device read
/// (~100 us here) where a compressible one costs a decompression. xz's match finder keeps its
/// tables so (most of its 52 MB compresses below 1.1:1 and is read at
/// random): under 45 MiB, one pass gave 103 k raw stores, 188 k pages
/// written back and 148 k read back; seven 53 k, 113 k and 94 k; fifteen
/// 37 k, 77 k and 66 k, and a third less time. A hundred: under 30 MiB,
/// against fifteen, 47 k raw stores against 164 k, 106 k device reads
/// against 358 k, 45 s against 76 s (60 passes 49 s, 200 passes 39 s;
/// marking every chunk read since an accessed-bit sample, 35 s); under
/// 40 MiB 9.2 s against 14.1, and `zstd -19` under 44 MiB 15.2 s against
/// 21.3. usemem's rows, whose random pages are as raw, and the other
/// programs of `bench programs` did not move.
/// Only after a refault: a raw chunk that stays away once evicted is cold,
/// and holding every raw chunk resident seven turns longer cost Python's
/// heap program (a few thousand raw chunks among 17 k evictions) 20% more
/// faults in three runs of four (the build before: one of eight). Raw
/// from 90%, not only at 100%: a chunk that came back page by page holds a
/// zero page or a text page among its raw ones (under 41 MiB: 176-187 k
/// device reads at 100%, 74-77 k at 90%). Still a delay, not a
/// preference: a raw chunk not read again goes after its passes.
///
/// Two bytes per chunk: bits 0-6 the stored share in percent (0: never
/// stored), bit 7 a workingset refault since the store, bits 8-15 the
/// passes spent since the last reference. Racy by design
/// (relaxed loads and stores): it steers the choice of victims, never
/// their correctness.
pub(super) mod density {
    use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

    /// Stored share above which a chunk is a poor victim.
    pub const POOR_PERCENT: u16 = 67;
    /// Stored share at which a chunk counts as stored as is: its eviction
    /// frees at most a tenth of it (zswap stores a page that compresses
    /// worse than `max_compressed_percent`, 90%, as is; a chunk of such
    /// pages with a zero page or two among them is as raw).
    pub const RAW_PERCENT: u16 = 90;
    /// Extra passes of a raw chunk that came back within a turn. Each is a
    /// visit of the hand, so the hand visits a chunk at most this many
    /// times more per eviction: a few microseconds, against the store, the
    /// write and the device read a raw chunk's eviction costs.
    pub const RAW_PASSES: u16 = 100;
    /// Most passes a chunk gets over the hand's plain two (REF, then taken).
    pub const MAX_PASSES: usize = RAW_PASSES as usize;
    /// Bits 0-6: the stored share in percent (0: never stored); bit 7: a
    /// workingset refault since; bits 8-15: passes spent since the last
    /// reference.
    const SHARE: u16 = 0x7f;
    const REFAULTED: u16 = 1 << 7;
    const SPENT_SHIFT: u32 = 8;
    const _: () = assert!(RAW_PASSES < 1 << (16 - SPENT_SHIFT));

    /// A store kept `stored` bytes of `raw`.
    pub fn note(d: &AtomicU16, stored: u64, raw: usize) {
        let pct = (stored * 100).div_ceil(raw.max(1) as u64).clamp(1, 100) as u16;
        d.store(pct, Relaxed);
    }

    /// The chunk came back within a turn of the hand of its eviction.
    pub fn refaulted(d: &AtomicU16) {
        let v = d.load(Relaxed);
        if v & REFAULTED == 0 {
            d.store(v | REFAULTED, Relaxed);
        }
    }

    /// Extra passes a chunk of this value gets.
    fn passes(v: u16) -> u16 {
        match v & SHARE {
            p if p >= RAW_PERCENT && v & REFAULTED != 0 => RAW_PASSES,
            p if p > POOR_PERCENT => 1,
            _ => 0,
        }
    }

    /// The chunk was referenced: a poor one has its extra passes again.
    pub fn renew(d: &AtomicU16) {
        let v = d.load(Relaxed);
        if v >> SPENT_SHIFT != 0 {
            d.store(v & (SHARE | REFAULTED), Relaxed);
        }
    }

    /// The hand is at a chunk it would take: true where the chunk
    /// compresses poorly and has an extra pass left (now spent).
    pub fn spend_extra_pass(d: &AtomicU16) -> bool {
        let v = d.load(Relaxed);
        let spent = v >> SPENT_SHIFT;
        if spent < passes(v) {
            d.store(
                (v & (SHARE | REFAULTED)) | (spent + 1) << SPENT_SHIFT,
                Relaxed,
            );
            return true;
        }
        false
    }
}

/// Most entries the probation queue keeps. A live entry is a PARTIAL
/// chunk, charged at least a page, so no more than the budget's pages can
/// be live at once; the rest are stale (chunks completed, or pushed while no
/// batch ran to pop them, as with `PageOut` hints under the budget).
const PROBATION_MAX: u64 = 1 << 20;

/// Queue chunk `ci` of `r`, just made PARTIAL by its first random read, on
/// probation. Past the cap the oldest entry goes: it is left to the CLOCK.
pub(super) fn on_probation(sh: &Shared, r: &RegionInner, ci: usize) {
    let cap = (sh.cfg.budget / PAGE_SIZE as u64).clamp(64, PROBATION_MAX) as usize;
    let mut q = sh.probation.lock();
    if q.len() >= cap {
        q.pop_front();
    }
    q.push_back((r.id, ci as u32));
}

/// Take the oldest chunks of the probation queue that are still PARTIAL
/// with no second read (no REF), until they hold `want` resident bytes,
/// leaving the newest `keep` entries to wait for theirs (`batch.rs`).
/// Returns the bytes taken. An entry whose chunk moved on (completed,
/// read again, evicted, its region gone) is dropped: the CLOCK has it.
/// Entries are hints, never trusted: the chunk's word decides.
fn take_probation(
    sh: &Shared,
    regions: &[Arc<RegionInner>],
    want: u64,
    keep: usize,
    out: &mut Vec<Victim>,
) -> u64 {
    let mut got = 0u64;
    let mut popped = Vec::with_capacity(64);
    // Region ids are never reused, so an entry of a dropped region finds
    // nothing. Few regions are searched in place; many, through a map.
    let by_id: Option<std::collections::HashMap<u32, &Arc<RegionInner>>> =
        (regions.len() > 16).then(|| regions.iter().map(|r| (r.id, r)).collect());
    let find = |id: u32| match &by_id {
        Some(m) => m.get(&id).copied(),
        None => regions.iter().find(|r| r.id == id),
    };
    while got < want {
        // Popped under the queue's lock, examined without it: the fault
        // path pushes while holding a region's `live` lock.
        popped.clear();
        {
            let mut q = sh.probation.lock();
            let n = q.len().saturating_sub(keep).min(64);
            popped.extend(q.drain(..n));
        }
        if popped.is_empty() {
            break;
        }
        let mut i = 0;
        while i < popped.len() && got < want {
            let (id, ci) = popped[i];
            i += 1;
            let Some(r) = find(id) else {
                continue;
            };
            let live = r.live.read();
            if !*live {
                continue;
            }
            let s = &r.state[ci as usize];
            let w = s.load(Acquire);
            // Read again (REF), or a refault within the resident size
            // (ACTIVE): in use, the CLOCK's to judge. Taking refaulted
            // chunks here evicted them again at once: heap.py with 16 KiB
            // chunks, where a second read rarely lands in the same chunk,
            // refaulted 311 k times in 313 k evictions (docs/BENCHMARKS.md).
            if chunk::state(w) != PARTIAL
                || w & (REF | ACTIVE) != 0
                || r.charged(ci as usize, w, sh.chunk) == 0
            {
                continue;
            }
            if let Ok(w) = chunk::take_for_evict(s, PARTIAL) {
                got += r.charged(ci as usize, w, sh.chunk);
                out.push(Victim::new(r, ci as usize, w));
                sh.ctr.evicted_probation.fetch_add(1, Relaxed);
            }
        }
        if i < popped.len() {
            let mut q = sh.probation.lock();
            for &e in popped[i..].iter().rev() {
                q.push_front(e);
            }
        }
    }
    got
}

/// `Advice::PageOut`: evict the resident chunks of `chunks` now.
pub(super) fn page_out(sh: &Shared, r: &Arc<RegionInner>, chunks: Range<usize>) {
    let want = (sh.batch.max() / sh.chunk as u64).max(1) as usize;
    let _slot = sh.slots.take();
    let mut victims = Vec::new();
    for ci in chunks {
        {
            let live = r.live.read();
            if !*live {
                return;
            }
            let s = &r.state[ci];
            // A resolver may still be finishing this chunk after its thread
            // already ran on (a woken fault need not wait for our wake).
            let mut st = chunk::state(s.load(Acquire));
            while st == BUSY {
                std::thread::yield_now();
                st = chunk::state(s.load(Acquire));
            }
            let w = s.load(Acquire);
            if evictable(st) && r.charged(ci, w, sh.chunk) > 0 {
                if let Ok(w) = chunk::take_for_evict(s, st) {
                    victims.push(Victim::new(r, ci, w));
                }
            }
        }
        if victims.len() >= want {
            run_protocol(sh, std::mem::take(&mut victims));
        }
    }
    if !victims.is_empty() {
        run_protocol(sh, victims);
    }
}

/// Evict `victims` (all EVICTING, owned by us), run by run of contiguous
/// whole chunks so each run costs at most one write-protect; a partial
/// chunk's mapped pages are claimed (or stored). The stored chunks of a
/// region are zapped together (`Zaps`), so the batch pays a TLB shootdown
/// per up to `ZAP_RANGES` ranges, not one per chunk.
///
/// Returns the usage it freed: resident bytes uncharged minus the
/// compressed bytes its own stores put in the pool. Not the pool's growth:
/// other evictions store at the same time, and a huge arena mapped
/// meanwhile is charged whole though its reserve is room for the stores
/// after it (counted, a compressible batch that happened to open an arena
/// would read as futile and be answered by writing back).
fn run_protocol(sh: &Shared, mut victims: Vec<Victim>) -> i64 {
    // Compressed bytes this eviction's stores put in the pool.
    let mut cost = 0u64;
    let mut uncharged = 0i64;
    let mut zaps = Zaps::default();
    let mut i = 0;
    while i < victims.len() {
        // The victims of one region, held live from store to zap: its drop
        // uncharges what its words say is mapped, and ours already went
        // at the store.
        let r = victims[i].r.clone();
        let end = i + victims[i..]
            .iter()
            .take_while(|v| Arc::ptr_eq(&v.r, &r))
            .count();
        let live = r.live.read();
        if !*live {
            // Torn down between selection and now: the region's drop
            // counted these chunks as resident and uncharged them.
            i = end;
            continue;
        }
        victims[i..end].sort_unstable_by_key(|v| v.ci);
        protect_ahead(sh, &r, &mut victims[i..end]);
        let r = &r;
        while i < end {
            if victims[i].from == PARTIAL {
                uncharged += evict_partial(sh, &victims[i], &mut zaps, &mut cost);
                i += 1;
            } else {
                let mut j = i + 1;
                while j < end
                    && victims[j].from != PARTIAL
                    && victims[j].ci == victims[j - 1].ci + 1
                {
                    j += 1;
                }
                uncharged += evict_run(sh, &victims[i..j], &mut zaps, &mut cost);
                i = j;
            }
            if zaps.full() {
                uncharged -= zaps.flush(sh, r);
            }
        }
        uncharged -= zaps.flush(sh, r);
        drop(live);
    }
    sh.note_peak();
    uncharged - cost as i64
}

/// Ranges a batch's zaps gather before one call makes them: bounds how
/// long a chunk stays stored but still mapped (uncharged, and any thread
/// faulting on it parked) to about what one run of whole chunks was.
const ZAP_RANGES: usize = 256;
const ZAP_BYTES: usize = 4 << 20;

/// Stored victims of one region waiting for their zap: their content is
/// in the cache and their resident charge gone; they stay EVICTING until
/// zapped, then become STORED.
#[derive(Default)]
struct Zaps {
    ranges: Vec<Range<usize>>,
    /// Per range, the index in `what` of the victim it zaps (a trimmed
    /// chunk's groups are several ranges).
    owner: Vec<usize>,
    what: Vec<Zapped>,
    bytes: usize,
}

enum Zapped {
    /// A stretch of whole chunks (indexes `cis`).
    Run { cis: Range<usize> },
    /// A partial chunk, with the keys of the copies its evicted pages now
    /// own (claimed or stored) and the bytes it was charged for them.
    Partial {
        ci: usize,
        /// Its mapped groups.
        mask: u16,
        /// Those that stay mapped (a trim), or 0.
        keep: u16,
        taken: Vec<SwapEntry>,
        bytes: u64,
    },
}

impl Zaps {
    fn push(&mut self, ranges: impl IntoIterator<Item = Range<usize>>, what: Zapped) {
        for range in ranges {
            self.bytes += range.len();
            self.ranges.push(range);
            self.owner.push(self.what.len());
        }
        self.what.push(what);
    }

    fn full(&self) -> bool {
        self.ranges.len() >= ZAP_RANGES || self.bytes >= ZAP_BYTES
    }

    /// Zap the gathered chunks of `r` (whose `live` lock the caller holds)
    /// and settle each: STORED once zapped; where a zap failed, mapped as
    /// before with its copies dropped (they are no longer the only
    /// copies). Returns the bytes charged back for those.
    fn flush(&mut self, sh: &Shared, r: &RegionInner) -> i64 {
        if self.ranges.is_empty() {
            return 0;
        }
        // Failure injection: the first range is left out, as refused (after
        // the first half of its first chunk went, where asked so).
        let inject = super::failpoints::take_zap();
        let skip = usize::from(inject != 0);
        if inject == 2 {
            let a = self.ranges[0].start;
            let half = a..(a + sh.chunk / 2).min(self.ranges[0].end);
            // SAFETY: half of one of these chunks, as the flush would zap.
            let _ = unsafe { uzswap_zpool::zap::zapper().zap(std::slice::from_ref(&half)) };
        }
        // SAFETY: these chunks are ours (EVICTING) under the caller's
        // `live`, their mapped pages' content is in the cache, and any
        // writer is parked on their write-protection.
        let mut failed = unsafe { uzswap_zpool::zap::zapper().zap(&self.ranges[skip..]) };
        for f in &mut failed {
            f.0 += skip;
        }
        if skip == 1 {
            failed.insert(0, (0, std::io::Error::from_raw_os_error(libc::EAGAIN)));
        }
        // A victim failed if any of its ranges did.
        let mut errs: Vec<Option<std::io::Error>> = self.what.iter().map(|_| None).collect();
        for (i, e) in failed {
            errs[self.owner[i]].get_or_insert(e);
        }
        let mut recharged = 0i64;
        for (k, (what, err)) in self.what.drain(..).zip(errs).enumerate() {
            match (what, err) {
                (Zapped::Run { cis }, None) => {
                    for ci in cis {
                        stored_now(sh, r, ci, u16::MAX);
                    }
                }
                (Zapped::Partial { ci, mask, keep, .. }, None) if keep != 0 => {
                    trimmed_now(sh, r, ci, mask, keep)
                }
                (Zapped::Partial { ci, mask, .. }, None) => stored_now(sh, r, ci, mask),
                (Zapped::Run { cis }, Some(e)) => {
                    // Not expected on a live anonymous mapping (a range the
                    // caller locked with mlock(2) behind uzswap's back is
                    // one cause); undo instead of leaving mapped pages
                    // marked STORED. The kernel stops at the first mapping
                    // it refuses, having zapped those before it: each chunk
                    // is zapped again on its own, and only those refused
                    // are undone (a refused chunk is one whole mapping or
                    // none, unless a mapping boundary cuts it).
                    eprintln!("uzswap: evictor: MADV_DONTNEED: {e}");
                    let mut refused = Vec::new();
                    for ci in cis.clone() {
                        let a = r.chunk_addr(ci, sh.chunk);
                        // The injected failure refuses the first chunk again.
                        let injected = k == 0 && inject != 0 && ci == cis.start;
                        let range = a..a + sh.chunk;
                        let one = std::slice::from_ref(&range);
                        // SAFETY: as above, for one of those chunks.
                        let zapped =
                            !injected && unsafe { uzswap_zpool::zap::zapper().zap(one) }.is_empty();
                        if zapped {
                            stored_now(sh, r, ci, u16::MAX);
                        } else {
                            refused.push(ci);
                        }
                    }
                    let bytes = (refused.len() * sh.chunk) as u64;
                    sh.resident.fetch_add(bytes, Relaxed);
                    recharged += bytes as i64;
                    for ci in refused {
                        restore_zapped(sh, r, ci, u16::MAX, false);
                        sh.zswap.invalidate_range(sh.entry(r, ci), 1 << sh.order);
                        let a = r.chunk_addr(ci, sh.chunk);
                        let _ = sh
                            .uffd
                            .remove_write_protection(a as *mut _, sh.chunk, false);
                        chunk::release(&r.state[ci], RESIDENT, 0, REJECTED);
                        sh.wake(a, sh.chunk);
                    }
                }
                (
                    Zapped::Partial {
                        ci,
                        mask,
                        keep,
                        taken,
                        bytes,
                    },
                    Some(e),
                ) => {
                    eprintln!("uzswap: evictor: MADV_DONTNEED: {e}");
                    // Still mapped and protected, so PARTIAL again: what
                    // the kernel zapped before it refused goes back from
                    // the cache, protected (a PARTIAL group may be mapped
                    // so without a copy); then the copies claimed or
                    // stored just now are no longer clean copies, so they
                    // are dropped.
                    restore_zapped(sh, r, ci, mask & !keep, true);
                    sh.resident.fetch_add(bytes, Relaxed);
                    recharged += bytes as i64;
                    for k in taken {
                        sh.zswap.invalidate(k);
                    }
                    if chunk::release(&r.state[ci], PARTIAL, 0, REJECTED) {
                        sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
                    }
                }
            }
        }
        self.ranges.clear();
        self.owner.clear();
        self.bytes = 0;
        recharged
    }
}

/// Chunk `ci` (EVICTING, its evicted groups' content in the cache) had a
/// zap refused, but the kernel may have zapped pages before the mapping it
/// refused (a lock that begins inside the chunk): put those of the groups
/// of `groups` back from the cache (write-protected with `wp`), where
/// their only copies are, before the chunk is undone and the copies
/// dropped. Pages the kernel did not reach are still mapped and skipped
/// (`mincore`); an install that finds one mapped after all is skipped too.
fn restore_zapped(sh: &Shared, r: &RegionInner, ci: usize, groups: u16, wp: bool) {
    let base = r.chunk_addr(ci, sh.chunk);
    let n = sh.chunk / PAGE_SIZE;
    let mut present = vec![0u8; n];
    // SAFETY: the chunk's range, page-aligned, and a vector of one byte
    // per page.
    if unsafe { libc::mincore(base as *mut _, sh.chunk, present.as_mut_ptr()) } != 0 {
        return;
    }
    let first = sh.entry(r, ci);
    let mut page = vec![0u8; PAGE_SIZE];
    let wanted = |p: usize| chunk::group_bit(p, n) & groups != 0;
    for p in (0..n).filter(|&p| present[p] & 1 == 0 && wanted(p)) {
        let at = base + p * PAGE_SIZE;
        match sh.zswap.load(
            first.offset(p as u64),
            &mut page,
            crate::zswap::LoadMode::KeepCopy,
        ) {
            // SAFETY: one page of a registered region's chunk we own
            // (EVICTING) under the caller's `live`; `page` is readable.
            Ok(()) => match unsafe {
                super::uffd_sys::copy(super::uffd_fd(sh), at, page.as_ptr(), PAGE_SIZE, wp, false)
            } {
                Ok(_) => sh.ctr.zapped_restored.fetch_add(1, Relaxed),
                Err((e, _)) => {
                    eprintln!("uzswap: evictor: restoring a zapped page at {at:#x}: {e}");
                    0
                }
            },
            Err(e) => {
                eprintln!("uzswap: evictor: a zapped page at {at:#x} is not in the cache: {e}");
                0
            }
        };
    }
}

/// Whether the evictor asks which pages of a victim are there before it
/// reads them (`Config::foreign_drops`, or once a page was found dropped).
fn checks_present(sh: &Shared) -> bool {
    sh.cfg.foreign_drops || sh.ctr.faults_dropped.load(Relaxed) != 0
}

/// Fill with zeros, write-protected, the pages of `range` (of victims we
/// own, EVICTING and not yet ZAPPING, under their region's `live`) that
/// `want` says are mapped but `mincore(2)` finds missing: the program
/// dropped them behind our back, and a dropped anonymous page reads as
/// zeros. The evictor's read of such a page would fault, and wait for a
/// handler thread that may itself be waiting for this eviction's room at
/// the backstop. A page dropped after this look is filled by the handler
/// that reads the evictor's fault (`fault::fill_dropped_evicting`).
fn fill_dropped(sh: &Shared, range: Range<usize>, want: impl Fn(usize) -> bool) {
    let mut present = vec![0u8; range.len() / PAGE_SIZE];
    // SAFETY: a page-aligned range of the live region, and a vector of
    // one byte per page.
    if unsafe { libc::mincore(range.start as *mut _, range.len(), present.as_mut_ptr()) } != 0 {
        return;
    }
    for (k, _) in present.iter().enumerate().filter(|(_, &p)| p & 1 == 0) {
        let at = range.start + k * PAGE_SIZE;
        if !want(at) {
            continue;
        }
        // SAFETY: one page of a registered region's chunk we own
        // (EVICTING) under the caller's `live`.
        match unsafe { super::fault::copy_zero_page(sh, at, true, true) } {
            Ok(super::uffd_sys::Copy::Done) => {
                sh.ctr.faults_dropped.fetch_add(1, Relaxed);
            }
            Ok(_) => {}
            Err((e, _)) => eprintln!("uzswap: evictor: filling a dropped page at {at:#x}: {e}"),
        }
    }
}

/// The address range of the mapped pages victim `v` evicts: the whole
/// chunk, or a partial chunk's first such group to its last (a trimmed
/// chunk's kept groups between them are protected with them: they stay
/// DIRTY, and a write lifts it again).
fn mapped_span(sh: &Shared, v: &Victim) -> Range<usize> {
    let base = v.r.chunk_addr(v.ci, sh.chunk);
    if v.from != PARTIAL {
        return base..base + sh.chunk;
    }
    let ranges = chunk::mask_ranges(v.going(), 1 << sh.order);
    match (ranges.first(), ranges.last()) {
        (Some(a), Some(b)) => base + a.start * PAGE_SIZE..base + b.end * PAGE_SIZE,
        _ => base..base + sh.chunk,
    }
}

/// Most chunks between two victims that one write-protect call may span.
const PROTECT_GAP: usize = 64;
/// Most bytes one write-protect call spans: the kernel walks every page
/// table entry of the range, and the chunks between stay held until the
/// call returns.
const PROTECT_SPAN: usize = 8 << 20;

/// Write-protect the victims of one region (sorted by chunk, its `live`
/// lock held) that need it with as few calls as it can: each call flushes
/// the TLB of every CPU the program runs on (an inter-processor interrupt
/// each; per victim, with random access scattering them, that was 8% of
/// the CPU of usemem's random row, and 14% of awk's), so one call spans
/// several victims and the chunks between them.
///
/// A chunk between two victims may be spanned only if the call changes
/// nothing of it: no page mapped (UNTOUCHED, STORED) or every mapped page
/// protected already (CLEAN, a PARTIAL chunk without DIRTY), and not
/// pinned (a system call may be writing it). It is held BUSY for the call
/// (taken with a compare-and-swap of the very word checked, so no fault
/// installs a writable page into it, and no pin is taken, while the call
/// runs) and given back as it was; a fault on it meanwhile parks and is
/// woken. Where a chunk between may not be spanned, the call ends before
/// it. A victim left unprotected (a failed call) protects itself, as
/// before.
fn protect_ahead(sh: &Shared, r: &RegionInner, victims: &mut [Victim]) {
    let mut held: Vec<(usize, u32)> = Vec::new();
    // The call being gathered: its range and its victims.
    let mut span: Option<(Range<usize>, Vec<usize>)> = None;
    let mut last_ci = 0;
    for k in 0..victims.len() {
        let v = &victims[k];
        if !chunk::must_protect(v.word) {
            continue;
        }
        let range = mapped_span(sh, v);
        if let Some((cur, ks)) = span.as_mut() {
            let mark = held.len();
            let spannable = v.ci - last_ci <= PROTECT_GAP
                && range.end - cur.start <= PROTECT_SPAN
                && (last_ci + 1..v.ci).all(|ci| {
                    victims.binary_search_by_key(&ci, |x| x.ci).is_ok() || hold(r, ci, &mut held)
                });
            if spannable {
                cur.end = range.end;
                ks.push(k);
                last_ci = v.ci;
                continue;
            }
            for (ci, w) in held.drain(mark..).rev() {
                give_back(sh, r, ci, w);
            }
            let (cur, ks) = span.take().expect("checked above");
            protect_span(sh, r, cur, &ks, victims, &mut held);
        }
        span = Some((range, vec![k]));
        last_ci = victims[k].ci;
    }
    if let Some((cur, ks)) = span {
        protect_span(sh, r, cur, &ks, victims, &mut held);
    }
}

/// Hold chunk `ci` of `r` BUSY for a write-protect call spanning it, if
/// the call would change nothing of it (see [`protect_ahead`]).
fn hold(r: &RegionInner, ci: usize, held: &mut Vec<(usize, u32)>) -> bool {
    let w = r.state[ci].load(Acquire);
    // An inherited region's UNTOUCHED chunk may map the parent's pages,
    // which the call would protect.
    let inherited = chunk::state(w) == chunk::UNTOUCHED && r.may_map_inherited(ci);
    if inherited || !chunk::spannable(w) || !chunk::hold(&r.state[ci], w) {
        return false;
    }
    held.push((ci, w));
    true
}

/// Give chunk `ci` back in the state of word `w` it was held from.
fn give_back(sh: &Shared, r: &RegionInner, ci: usize, w: u32) {
    if chunk::release(&r.state[ci], chunk::state(w), 0, 0) {
        sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
    }
}

/// One write-protect call over `range`; on success the victims `ks` are
/// protected. The chunks held for it go back either way.
fn protect_span(
    sh: &Shared,
    r: &RegionInner,
    range: Range<usize>,
    ks: &[usize],
    victims: &mut [Victim],
    held: &mut Vec<(usize, u32)>,
) {
    sh.ctr.evict_protect_calls.fetch_add(1, Relaxed);
    let ok = sh
        .uffd
        .write_protect(range.start as *mut _, range.len())
        .is_ok();
    for (ci, w) in held.drain(..) {
        give_back(sh, r, ci, w);
    }
    if ok {
        for &k in ks {
            victims[k].protected = true;
        }
    }
}

/// Evict one run of contiguous chunks of one region (its `live` lock held
/// by the caller): store each and gather the stored ones' zaps. A clean
/// chunk keeps no copy in the cache (`keep.rs`): it is stored like a
/// resident one, but needs no write-protection. Returns bytes uncharged
/// from resident.
fn evict_run(sh: &Shared, run: &[Victim], zaps: &mut Zaps, cost: &mut u64) -> i64 {
    let r = &run[0].r;
    let chunk = sh.chunk;
    let start = r.chunk_addr(run[0].ci, chunk);
    let len = run.len() * chunk;
    // 1. Write-protect: from here on a write traps to the handler, which
    // parks it on the chunk; reads go on. Clean chunks are protected since
    // they were installed, so a run of them needs no call (nor the TLB
    // shootdown that comes with one).
    if run
        .iter()
        .any(|v| chunk::must_protect(v.word) && !v.protected)
    {
        sh.ctr.evict_protect_calls.fetch_add(1, Relaxed);
        if let Err(e) = sh.uffd.write_protect(start as *mut _, len) {
            eprintln!("uzswap: evictor: write-protect failed: {e}");
            for v in run {
                if chunk::release(&r.state[v.ci], v.from, 0, REJECTED) {
                    sh.wake(r.chunk_addr(v.ci, chunk), chunk);
                }
            }
            return 0;
        }
    }
    if checks_present(sh) {
        fill_dropped(sh, start..start + len, |_| true);
    }
    // 2-3. Read and store each chunk; the memory is stable under the
    // write-protection, so the store reads it in place.
    let mut stored = vec![false; run.len()];
    for (k, v) in run.iter().enumerate() {
        let addr = r.chunk_addr(v.ci, chunk);
        super::failpoints::take_hold(|| r.state[v.ci].load(Acquire) & WAITER != 0);
        // A write has trapped on it since the run was protected (or, for a
        // clean chunk, since it was taken): it is in use, and the writer
        // would wait for the step to end. Hand it back unstored, as a
        // refused store does. usemem's random row (20% writes) parked ~300
        // writes this way for 4.5 ms each.
        if r.state[v.ci].load(Acquire) & WAITER != 0 && hand_back(sh, r, v, addr) {
            continue;
        }
        let first = sh.entry(r, v.ci);
        // SAFETY: the chunk is mapped (RESIDENT/CLEAN before we took it),
        // stays mapped while we hold `live`, and is write-protected, so
        // nothing changes it while the slice lives. (A page the program
        // drops behind our back reads as zeros: `fill_dropped` above, or
        // the handler, `fault::fill_dropped_evicting`.)
        let data = unsafe { std::slice::from_raw_parts(addr as *const u8, chunk) };
        room_for_store(sh);
        match sh.zswap.store_folio_sized(first, sh.order, data) {
            Ok(bytes) => {
                *cost += bytes;
                density::note(&r.density[v.ci], bytes, chunk);
                // Charge the store by its delta: the pool just grew by the
                // compressed size, resident goes down by the chunk now,
                // before the zap, so the chunk is never counted twice.
                stored[k] = true;
                sh.resident.fetch_sub(chunk as u64, Relaxed);
            }
            Err(_) => {
                // All-or-nothing: the cache kept nothing of this chunk. It
                // stays resident, charged, and writable.
                sh.ctr.evict_aborts.fetch_add(1, Relaxed);
                if let Err(e) = sh
                    .uffd
                    .remove_write_protection(addr as *mut _, chunk, false)
                {
                    eprintln!("uzswap: evictor: unprotect after a refused store: {e}");
                }
                chunk::release(&r.state[v.ci], RESIDENT, REF, REJECTED);
                sh.wake(addr, chunk);
            }
        }
    }
    let uncharged = (stored.iter().filter(|&&s| s).count() * chunk) as u64;
    // 4. Gather the zaps, one range per contiguous stretch of stored chunks.
    let mut k = 0;
    while k < run.len() {
        if !stored[k] {
            k += 1;
            continue;
        }
        let mut m = k + 1;
        while m < run.len() && stored[m] {
            m += 1;
        }
        for v in &run[k..m] {
            chunk::begin_zap(&r.state[v.ci]);
        }
        let a = r.chunk_addr(run[k].ci, chunk);
        zaps.push(
            std::iter::once(a..a + (m - k) * chunk),
            Zapped::Run {
                cis: run[k].ci..run[m - 1].ci + 1,
            },
        );
        k = m;
    }
    uncharged as i64
}

/// Give whole victim `v` (EVICTING, ours, at `addr`, nothing of it
/// stored) back to the faults waiting on it, as it was but referenced: a
/// resident chunk's protection, taken by its run, is lifted first (a clean
/// chunk keeps its own). False where that fails: the chunk is still ours
/// and the caller evicts it.
fn hand_back(sh: &Shared, r: &RegionInner, v: &Victim, addr: usize) -> bool {
    if v.from == RESIDENT {
        if let Err(e) = sh
            .uffd
            .remove_write_protection(addr as *mut _, sh.chunk, false)
        {
            eprintln!("uzswap: evictor: unprotect a chunk in use: {e}");
            return false;
        }
    }
    if chunk::release(&r.state[v.ci], v.from, 0, REF) {
        sh.wake(addr, sh.chunk);
    }
    sh.ctr.evict_yielded.fetch_add(1, Relaxed);
    true
}

/// Chunk `ci` of `r` (EVICTING, ours) has all its pages in the cache and
/// none mapped: it is STORED now. `mask`: the groups it had mapped (all,
/// for a whole chunk), which a refault must hit to count as one
/// (`fault::workingset_refault`).
fn stored_now(sh: &Shared, r: &RegionInner, ci: usize, mask: u16) {
    let now = sh.evict_clock.fetch_add(1, Relaxed);
    r.shadow[ci].store(now as u32, Relaxed);
    // A partial chunk's groups trimmed before count as mapped too.
    let trimmed = if mask == u16::MAX {
        0
    } else {
        r.evicted[ci].load(Relaxed)
    };
    r.evicted[ci].store(mask | trimmed, Relaxed);
    sh.ctr.evicted_chunks.fetch_add(1, Relaxed);
    super::young::evicted(sh, r.state[ci].load(Relaxed));
    // A parked writer retries, takes a missing fault and is served from
    // the copy just stored.
    let clear = REF | ACTIVE | REJECTED | PART_BITS;
    if chunk::release(&r.state[ci], STORED, clear, 0) {
        sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
    }
}

/// Partial chunk `ci` of `r` (EVICTING, ours; the groups of `mask`
/// mapped) had those it does not keep trimmed (stored and zapped): PARTIAL
/// again with the groups of `keep`, its REF spent on the pass that
/// trimmed it.
fn trimmed_now(sh: &Shared, r: &RegionInner, ci: usize, mask: u16, keep: u16) {
    let going = mask & !keep;
    r.evicted[ci].fetch_or(going, Relaxed);
    sh.ctr
        .evicted_trimmed
        .fetch_add(u64::from(going.count_ones()), Relaxed);
    if chunk::release(
        &r.state[ci],
        PARTIAL,
        REF | MASK_BITS,
        chunk::part_bits(keep),
    ) {
        sh.wake(r.chunk_addr(ci, sh.chunk), sh.chunk);
    }
}

/// Evict partial chunk `v`: its mapped pages are write-protected (since
/// they were installed, or, for a DIRTY chunk's, here first), so their
/// clean copies are claimed (or, where there is none, the page is stored
/// afresh) and the chunk's zap gathered (its region's `live` lock is held
/// by the caller). Returns bytes uncharged from resident.
fn evict_partial(sh: &Shared, v: &Victim, zaps: &mut Zaps, cost: &mut u64) -> i64 {
    let r = &v.r;
    let base = r.chunk_addr(v.ci, sh.chunk);
    super::failpoints::take_hold(|| r.state[v.ci].load(Acquire) & WAITER != 0);
    // A read of its unmapped pages has been waiting on it since the batch
    // took it: it was read again after all, not used once. Hand it back,
    // in use, rather than make the reader wait for the batch to get here
    // and then load what it would have had to give up.
    if r.state[v.ci].load(Acquire) & WAITER != 0 {
        if chunk::release(&r.state[v.ci], PARTIAL, 0, REF) {
            sh.wake(base, sh.chunk);
        }
        sh.ctr.evict_yielded.fetch_add(1, Relaxed);
        return 0;
    }
    let first = sh.entry(r, v.ci);
    let ranges = chunk::mask_ranges(v.going(), 1 << sh.order);
    if chunk::must_protect(v.word) && !v.protected {
        // From here a write to a mapped group traps and parks on the
        // chunk (EVICTING), as for a whole chunk in `evict_run`. One call
        // from the first mapped group to the last: the pages between are
        // unmapped or protected already, which it leaves as they are.
        let span = mapped_span(sh, v);
        sh.ctr.evict_protect_calls.fetch_add(1, Relaxed);
        if let Err(e) = sh.uffd.write_protect(span.start as *mut _, span.len()) {
            eprintln!("uzswap: evictor: write-protect failed: {e}");
            // Nothing of it has a copy yet: still a valid PARTIAL chunk,
            // which a write unprotects again.
            if chunk::release(&r.state[v.ci], PARTIAL, 0, REJECTED) {
                sh.wake(base, sh.chunk);
            }
            return 0;
        }
    }
    if checks_present(sh) {
        let n = 1 << sh.order;
        let going = v.going();
        fill_dropped(sh, mapped_span(sh, v), |at| {
            chunk::group_bit((at - base) / PAGE_SIZE, n) & going != 0
        });
    }
    let mut taken = Vec::new();
    let mut stored = false;
    // Counted once the chunk is evicted: an abort drops what it stored.
    let mut stored_bytes_total = 0u64;
    let mut stored_pages = 0usize;
    // A KEPT chunk claims its copies under one shard lock. Where one is
    // gone (not expected: written-back copies are on no ring to be freed
    // for room) the loop claims again, a claim of an entry already claimed
    // holding, and stores what is missing; an abort then leaves the pages
    // it did not reach with ordinary copies, equal to them, which PARTIAL
    // allows as it allows none. The claims are not counted for the keep
    // policy (`keep.rs`): it weighs whether pool copies live to be claimed
    // or are freed for room, and written-back copies are never freed for
    // room (counted, they turned GNU sort's reads protected: 4-7 k
    // write-protect faults against 1.5 k).
    let ranges = if v.word & KEPT != 0 && v.keep == 0 && sh.zswap.claim_clean(first, sh.order) {
        taken.extend((0..1u64 << sh.order).map(|i| first.offset(i)));
        Vec::new()
    } else {
        ranges
    };
    let zap: Vec<Range<usize>> = if v.keep == 0 {
        // One range for the chunk: its other pages are not mapped.
        std::iter::once(base..base + sh.chunk).collect()
    } else {
        ranges
            .iter()
            .map(|p| base + p.start * PAGE_SIZE..base + p.end * PAGE_SIZE)
            .collect()
    };
    for i in ranges.into_iter().flatten() {
        let key = first.offset(i as u64);
        if sh.zswap.claim_clean(key, 0) {
            sh.keep.claimed(1);
        } else {
            // SAFETY: the page is mapped (PARTIAL before we took it) and
            // write-protected, and stays so while we hold `live`.
            let data = unsafe {
                std::slice::from_raw_parts((base + i * PAGE_SIZE) as *const u8, PAGE_SIZE)
            };
            room_for_store(sh);
            let stored_bytes = if super::failpoints::take_partial_store() {
                None
            } else {
                sh.zswap.store_folio_sized(key, 0, data).ok()
            };
            let Some(bytes) = stored_bytes else {
                sh.ctr.evict_aborts.fetch_add(1, Relaxed);
                // Still a valid PARTIAL chunk: mapped and protected; the
                // copies taken so far are no longer clean copies, so they
                // are dropped (PARTIAL allows a mapped page's copy to be
                // gone).
                for k in taken {
                    sh.zswap.invalidate(k);
                }
                if chunk::release(&r.state[v.ci], PARTIAL, REF, REJECTED) {
                    sh.wake(base, sh.chunk);
                }
                return 0;
            };
            stored_bytes_total += bytes;
            stored_pages += 1;
            stored = true;
        }
        taken.push(key);
    }
    *cost += stored_bytes_total;
    if stored_pages > 0 {
        density::note(
            &r.density[v.ci],
            stored_bytes_total,
            stored_pages * PAGE_SIZE,
        );
    }
    if !stored {
        sh.ctr.evicted_clean.fetch_add(1, Relaxed);
    }
    let bytes = (taken.len() * PAGE_SIZE) as u64;
    sh.resident.fetch_sub(bytes, Relaxed);
    chunk::begin_zap(&r.state[v.ci]);
    zaps.push(
        zap,
        Zapped::Partial {
            ci: v.ci,
            mask: v.mask,
            keep: v.keep,
            taken,
            bytes,
        },
    );
    bytes as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    /// A poor chunk gets one extra pass per reference, a chunk stored as
    /// is and refaulted `RAW_PASSES`; a dense one, or one never stored, none.
    #[test]
    fn density_gives_poor_chunks_extra_passes_per_reference() {
        use std::sync::atomic::AtomicU16;
        let d = AtomicU16::new(0);
        assert!(!density::spend_extra_pass(&d), "never stored");
        density::note(&d, 3500, 4096);
        assert!(density::spend_extra_pass(&d));
        assert!(!density::spend_extra_pass(&d), "spent");
        density::renew(&d);
        assert!(density::spend_extra_pass(&d), "renewed by a reference");
        density::note(&d, 1500, 4096);
        assert!(!density::spend_extra_pass(&d), "dense");
        // Same-filled pages cost nothing: as dense as it gets.
        density::note(&d, 0, 65536);
        assert!(!density::spend_extra_pass(&d));
        // Just over the line, and just under it.
        density::note(&d, 2800, 4096);
        assert!(density::spend_extra_pass(&d), "68% is poor");
        density::note(&d, 2700, 4096);
        assert!(!density::spend_extra_pass(&d), "66% is not");
        // Stored as is and not back within a turn: a poor chunk.
        density::note(&d, 65536, 65536);
        assert!(density::spend_extra_pass(&d));
        assert!(!density::spend_extra_pass(&d));
        // Back within a turn: every pass, then taken; a reference renews
        // them all, and the next store forgets the refault.
        for _ in 0..2 {
            density::note(&d, 65536, 65536);
            density::refaulted(&d);
            for i in 0..density::RAW_PASSES {
                assert!(density::spend_extra_pass(&d), "raw pass {i}");
            }
            assert!(!density::spend_extra_pass(&d), "raw passes spent");
            density::renew(&d);
            for _ in 0..density::RAW_PASSES {
                assert!(density::spend_extra_pass(&d));
            }
            assert!(!density::spend_extra_pass(&d));
        }
        density::note(&d, 65536, 65536);
        assert!(density::spend_extra_pass(&d));
        assert!(!density::spend_extra_pass(&d), "a store clears the refault");
        // Raw from 90%: a chunk back a page at a time with a zero page
        // among its raw ones.
        density::note(&d, 65536 - 4096, 65536);
        density::refaulted(&d);
        for _ in 0..density::RAW_PASSES {
            assert!(density::spend_extra_pass(&d));
        }
        assert!(!density::spend_extra_pass(&d));
        // Below it, poor.
        density::note(&d, 65536 * 88 / 100, 65536);
        density::refaulted(&d);
        assert!(density::spend_extra_pass(&d));
        assert!(!density::spend_extra_pass(&d));
    }

    /// The hand at a referenced partial chunk that one fault reached since
    /// its last pass takes the groups not faulted in since and leaves that
    /// one mapped; where every mapped group is fresh, or none is (REF from
    /// a sample, not a fault), or several are (used at many places), or the
    /// chunk came in whole (KEPT), it only spends the REF, and the fresh
    /// groups turn old. At the next pass without a fault a chunk goes whole.
    #[test]
    fn the_hand_trims_a_partial_chunk_used_at_one_place_to_that_group() {
        let chunk = 16 * PAGE_SIZE;
        let r = RegionInner::new(1, 1 << 30, 6, chunk, None);
        let partial = |mask: u16| PARTIAL | REF | chunk::part_bits(mask);
        let words = [
            (partial(0b1010), 0b1010),
            (partial(0b0100), 0),
            (partial(0xffff) | KEPT, 0b1),
            (partial(0b1111), 0b0011),
            (partial(0b11_1111) | DIRTY, 0b10_0000),
            (RESIDENT | REF, 0),
        ];
        for (ci, (w, fresh)) in words.into_iter().enumerate() {
            r.state[ci].store(w, Relaxed);
            r.fresh[ci].store(fresh, Relaxed);
        }
        let regions = [r.clone()];
        let mut clock = Clock::default();
        let mut out = Vec::new();
        // One byte wanted: the walk ends at the first victim.
        let got = select(&mut clock, &regions, 1, chunk, &mut out);
        assert_eq!(out.len(), 1);
        let v = &out[0];
        assert_eq!((v.ci, v.mask, v.keep), (4, 0b11_1111, 0b10_0000));
        assert_eq!(v.going(), 0b1_1111);
        assert_eq!(got, 5 * PAGE_SIZE as u64, "the five old groups");
        let w4 = r.state[4].load(Relaxed);
        assert_eq!(chunk::state(w4), EVICTING);
        assert_eq!(chunk::part_mask(w4), Some(0b11_1111), "mapped until zapped");
        assert_eq!(r.fresh[4].load(Relaxed), 0, "the kept group is old now");
        for (ci, (was, _)) in words.into_iter().enumerate().take(4) {
            let w = r.state[ci].load(Relaxed);
            assert_eq!((chunk::state(w), w & REF), (PARTIAL, 0), "chunk {ci}");
            assert_eq!(chunk::part_mask(w), chunk::part_mask(was));
            assert_eq!(r.fresh[ci].load(Relaxed), 0, "chunk {ci}");
        }
        assert_eq!(r.state[5].load(Relaxed), RESIDENT | REF, "not reached");
        // The next pass: the hand spends chunk 5's REF, and takes 0 to 3
        // whole (no fault since), then 5 at its second visit.
        out.clear();
        select(&mut clock, &regions, 3 * chunk as u64, chunk, &mut out);
        let taken: Vec<_> = out.iter().map(|v| (v.ci, v.keep)).collect();
        assert_eq!(taken, [(0, 0), (1, 0), (2, 0), (3, 0), (5, 0)]);
    }

    #[test]
    fn slots_bound_the_evictions_in_flight() {
        let s = Slots::new(2);
        let a = s.take();
        let b = s.try_take_for(Duration::ZERO).expect("a second slot");
        assert_eq!(s.in_flight(), 2);
        let t = Instant::now();
        assert!(s.try_take_for(Duration::from_millis(20)).is_none());
        assert!(t.elapsed() >= Duration::from_millis(20));
        drop(a);
        assert_eq!(s.in_flight(), 1);
        assert!(s.try_take_for(Duration::ZERO).is_some());
        drop(b);
        assert_eq!(s.in_flight(), 0);
    }

    /// A fork's `take_all` waits out the evictions in flight and lets no
    /// new one start until it is dropped, however often others try.
    #[test]
    fn take_all_waits_for_every_slot_and_closes_them() {
        let s = Slots::new(3);
        let held = s.take();
        let all_taken = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let all = s.take_all();
                all_taken.store(true, SeqCst);
                // Closed: nobody else holds or gets a slot.
                assert_eq!(s.in_flight(), 0);
                assert!(s.try_take_for(Duration::from_millis(10)).is_none());
                std::thread::sleep(Duration::from_millis(20));
                all_taken.store(false, SeqCst);
                drop(all);
            });
            // Once the fork waits, a new eviction may not start.
            while !*s.closed.lock() {
                std::thread::yield_now();
            }
            assert!(s.try_take_for(Duration::from_millis(10)).is_none());
            assert!(!all_taken.load(SeqCst), "take_all passed a held slot");
            drop(held);
            // Blocks until the fork is done with every slot.
            let again = s.take();
            assert!(!all_taken.load(SeqCst), "a slot granted during the fork");
            drop(again);
        });
        assert_eq!(s.in_flight(), 0);
    }
}
