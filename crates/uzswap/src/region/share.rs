//! The pool's share of the budget, following how densely the data
//! compresses.
//!
//! With writeback the budget is split: the pool may take its share, the
//! rest holds resident chunks. The best split depends on the data. Where
//! the pages not resident fit in the pool compressed, with room left for a
//! resident working set, every fault is served from memory (a page's
//! decompression, microseconds); where the pool is smaller than that, cold
//! reads go to the device (100-400 us each on a virtual disk). A fixed
//! share is right for one density only: measured on usemem's skewed reads
//! (1 GiB under 512 MiB), index pages with lzo (2.6:1) ran fastest with the
//! pool at ~60% of the budget and text with lz4 (1.7:1) at 20%, each
//! 1.3-1.6x its speed at the other's share.
//!
//! So the evictor re-derives the share as data comes in. With ρ the pool's
//! density (bytes of pages per byte of pool memory, clean copies
//! included) and W the bytes of pages in use but not same-filled (resident
//! or stored, or the regions' whole mapping less its share of same-filled
//! pages, whichever is more), the resident part R that leaves every other
//! page in the pool solves `R + (W - R) / ρ = budget`. If R is at least
//! `MIN_RESIDENT` of the budget the share becomes `budget - R` plus
//! headroom out of what R holds above `MIN_RESIDENT` (at most `HEADROOM`
//! of the budget); if it is at least half that, the pool gets its largest
//! share, `1 - MIN_RESIDENT`; below that the share falls in proportion to
//! R, reaching the configured one at R = 0 (no cliff an estimate could flip
//! across). At R ≤ 0 no split
//! keeps the cold set in memory, and the configured share stands: the
//! device takes the coldest pages and resident memory keeps the hot ones.
//! The configured share is also the floor.
//!
//! ρ counts the pool's own bytes (`pool_total_size`, what the budget is
//! charged), not the objects' lengths: objects fill their spans to 0.93-0.97
//! and emptied runs stay cached until a trim, so a plan made from the
//! objects ran the pool into its share a few percent before the data was
//! all in. The headroom is there for the same reason: a plan that fits
//! exactly leaves no room for the estimate's error, the shrinker's start
//! below the share or the clean copies read faults add, and what the pool
//! then writes back is its LRU's cold end, the pages written first.
//! usemem writes its hot fifth first, and its read pass then read the hot
//! pages back from the device. With both (usemem skew, 1 GiB, A/B
//! alternating): lz4 index pages under 713 MiB went from 29-34k pages read
//! back and 737-834 MB/s to none and 1073-1108; lzo index pages under
//! 512 MiB from 23-41k pages read back to none; lzo mixed pages read back
//! 8-10k → 3.6k.
//!
//! The proactive shrinker starts at 31/32 of a derived share (7/8 of the
//! configured one, before there is a plan): the plan already counts every
//! page, so a pool held at 7/8 of it wrote back the 1/8 it had planned to
//! keep (1 GiB of lzo index pages under 512 MiB: 20k pages written back
//! while the data was first written, 13k of them read back from the
//! device; with 31/32, 8-11k device reads and +10-25% on the run).
//!
//! # Steering the plan by two ghosts
//! The plan counts what fits, not what is read. GNU sort under 36M: its
//! pages fit in the pool at 70% of the budget, so the plan gave the pool
//! that, and the 30% left resident did not hold the text every comparison
//! reads; 550 k faults against 105 k at the configured 20%, while the
//! pages the larger pool kept were never read again. usemem's skewed rows
//! are the other way round: at 20% their cold set goes to the device and
//! is read back from it, a third slower. Which side a step of the budget
//! is worth more to shows in two ghosts, as mm/workingset.c's shadow
//! entries show what more memory would have kept:
//! - resident: a fault on a chunk evicted within a step's worth of
//!   evictions (`Ghosts::refault`, from the workingset shadow) would not
//!   have been one with the resident part a step larger;
//! - pool: a device read of a page written back within what a step holds
//!   compressed (`Zswap::pool_ghost`, a writeback stamp per slot) would
//!   have been a load from memory with the pool a step larger, and a load
//!   of the step a smaller share would write back (the LRU's oldest) would
//!   have been a device read.
//!
//! Each epoch (at least 0.2 s and 64 hits) weighs the hits by what they
//! cost as timed in that epoch (a fault's service time less its device
//! read, a device read) and moves the share a sixteenth of the budget
//! toward the side that gains at least twice what the other loses
//! (`verdict`). The move is kept as an offset to the plan, within the
//! configured share and `1 - MIN_RESIDENT` of the budget, so the plan
//! still follows the data and the ghosts correct it. Only a pool near its
//! share is moved up: below it, more share holds nothing more.
//!
//! Measured in turn against the plan alone (docs/BENCHMARKS.md, "Steering
//! the pool share by two ghosts"): sort under 33-44M 1.1-2.6x faster;
//! on usemem's skewed, random and sequential rows, Python, xz and the
//! threads program the share did not move.
//!
//! Locking: none but the controller's own mutex (`Ghosts::ctl`, taken only
//! by the evictor thread). Reads the cache's counters and sets its limit
//! and share (atomics); called by the evictor thread after each batch.

use super::Shared;
use crate::PAGE_SIZE;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

/// Least resident part worth keeping the cold set in memory for.
const MIN_RESIDENT: f64 = 0.3;
/// A plan leaving at least this fraction of `MIN_RESIDENT` resident still
/// gets the largest share.
const NEAR: f64 = 0.5;
/// Most headroom the pool gets above an exact plan, as a fraction of the
/// budget (taken only from resident memory above `MIN_RESIDENT`).
const HEADROOM: f64 = 1.0 / 16.0;
/// Pool pages needed before the density is trusted: a sixteenth of the
/// budget, and at least this many (1 MiB of pages). Not a fixed 16 MiB:
/// under a small budget the share's floor holds fewer pages than that, so
/// a share once cut to the floor was never planned again (`uzswap run
/// --budget 33M -- sort`: the pool stayed at its 7 MiB floor for the rest
/// of the run whatever the data's density became).
const MIN_POOL_PAGES: u64 = 256;

/// The share (bytes) for a budget of `budget` bytes with `base` the
/// configured share, `used` bytes of pages in use and not same-filled, and
/// a pool density of `rho`.
pub(super) fn target(budget: u64, base: u64, used: u64, rho: f64) -> u64 {
    let b = budget as f64;
    if rho <= 1.0 {
        return base;
    }
    // The whole budget, no margin: where the pool then falls a little
    // short (the evictor works below the budget, clean copies take room),
    // the few pages it writes back cost less than the resident memory a
    // margin would take from the hot set (a 10% margin kept lzo index
    // pages at 512 MiB from ever raising the share).
    let r = (b - used as f64 / rho) / (1.0 - 1.0 / rho);
    let cap = (1.0 - MIN_RESIDENT) * b;
    let near = NEAR * MIN_RESIDENT * b;
    let share = if r >= MIN_RESIDENT * b {
        // Continuous at the lower bound: there the headroom is 0 and
        // `b - r` is the cap.
        b - r + (r - MIN_RESIDENT * b).min(HEADROOM * b)
    } else if r >= near {
        // Nearly fits: the pool at its cap still keeps most cold reads off
        // the device.
        cap
    } else if r > 0.0 {
        // Less and less of the cold set fits: back toward the floor in
        // proportion, so that an estimate moving a little never flips the
        // share between the cap and the floor.
        let base = base as f64;
        base + (cap - base).max(0.0) * r / near
    } else {
        return base;
    };
    (share as u64).max(base)
}

/// The two ghosts the share is steered by, each a step of the budget wide:
/// faults on chunks evicted within `window_chunks` evictions (a resident
/// part that much larger would have kept them) and the pool's, device
/// reads of objects written back within as many pages as that step holds
/// compressed (`Zswap::pool_ghost`).
#[derive(Default)]
pub(super) struct Ghosts {
    window_chunks: AtomicU64,
    resident_near: AtomicU64,
    moves_up: AtomicU64,
    moves_down: AtomicU64,
    ctl: Mutex<Control>,
}

#[derive(Default)]
struct Control {
    /// Bytes added to the plan's share, by what the ghosts showed.
    offset: i64,
    /// The counters at the epoch's start.
    at: Option<Snapshot>,
}

#[derive(Clone, Copy)]
struct Snapshot {
    t: Instant,
    resident_near: u64,
    pool: crate::zswap::PoolGhost,
    faults: u64,
    fault_ns: u64,
}

impl Ghosts {
    /// A fault on a chunk evicted `distance` evictions ago.
    pub(super) fn refault(&self, distance: u64) {
        if distance <= self.window_chunks.load(Relaxed) {
            self.resident_near.fetch_add(1, Relaxed);
        }
    }

    /// (faults within the resident ghost, moves of the share up, down).
    pub(super) fn counts(&self) -> (u64, u64, u64) {
        (
            self.resident_near.load(Relaxed),
            self.moves_up.load(Relaxed),
            self.moves_down.load(Relaxed),
        )
    }
}

/// Re-derive the share from what the cache holds now; `base` is the
/// configured share in bytes.
pub(super) fn adapt(sh: &Shared, base: u64) {
    let o = sh.zswap.occupancy();
    let min = (sh.cfg.budget / 16 / PAGE_SIZE as u64).max(MIN_POOL_PAGES);
    if o.pool_pages < min || o.compressed_bytes == 0 {
        return;
    }
    let page = PAGE_SIZE as u64;
    // Per byte of pool memory: span tails and cached runs cost the budget
    // as much as the objects do.
    let pool_bytes = o.compressed_bytes.max(sh.zswap.pool_total_size());
    let rho = (o.pool_pages * page) as f64 / pool_bytes as f64;
    // Pages stored but not resident (clean copies, and written-back or
    // inherited pages kept, are of resident pages).
    let stored = (o.pool_pages + o.device_pages + o.inherited_pages)
        .saturating_sub(o.clean_pages + o.kept_pages);
    let touched = sh.resident.load(Relaxed) + stored * page;
    // Plan for the regions as mapped, not just what was touched so far: a
    // program filling its memory would otherwise get a share raised for
    // the part it has written and cut back when it writes the rest, and
    // each move makes the shrinker write back in a burst. Same-filled pages
    // cost nothing; the rest of the mapping is taken to have as many.
    let sized = o.pool_pages + o.device_pages + o.inherited_pages;
    let mapped = *sh.mapped.lock() as f64 * sized as f64 / (sized + o.same_filled_pages) as f64;
    let used = if sh.cfg.plan_for_mapping {
        touched.max(mapped as u64)
    } else {
        touched
    };
    // The budget left to the data: the process's own memory, where it is
    // counted (`own.rs`), is not there for the pool or the resident part.
    let budget = sh.cfg.budget.saturating_sub(sh.own.bytes());
    let step = budget / 16;
    sh.ghosts
        .window_chunks
        .store(step / sh.chunk as u64, Relaxed);
    // The pool's ghost and its tail are a step wide each. The tail is a
    // step whether or not the pool has filled its share yet: one still
    // filling would write it back once it does (heap.py under 146M, the
    // tail taken as what a step less would write back now: 1 MiB of a 28
    // MiB pool below its 36 MiB share, a step down, and 2.6 k device reads
    // once the heap had grown, 4.2 s against 3.7).
    let pages = (step as f64 * rho / page as f64) as u64;
    sh.zswap.set_ghost_windows(pages, pages);
    let now = sh.zswap.max_pool_bytes();
    let cap = (((1.0 - MIN_RESIDENT) * budget as f64) as u64).max(base);
    let plan = target(budget, base, used, rho).min(cap);
    let full = sh.zswap.pool_total_size() + step / 2 >= now;
    let share = steer(sh, step, plan, base..=cap, full);
    // Move in steps of at least 1/64 of the budget: each move makes the
    // shrinker and the evictor rebalance.
    if share.abs_diff(now) >= sh.cfg.budget / 64 {
        sh.zswap.set_max_pool_bytes(share);
        sh.zswap.set_pool_share_bytes(share / 32 * 31);
    }
}

/// What a device read is taken to cost before one was timed.
const READ_PRIOR_NS: f64 = 100_000.0;
/// Least ghost hits an epoch needs before it may move the share.
const EPOCH_HITS: u64 = 64;
/// Shortest epoch: time for the evictor and the shrinker to carry out the
/// last move before its effect is judged.
const EPOCH_MIN_SECS: f64 = 0.2;
/// Longest epoch: hits fewer than `EPOCH_HITS` by then are too few to act
/// on, and a new epoch starts.
const EPOCH_SECS: f64 = 2.0;

/// The share: `plan`, moved by a step for each epoch whose ghosts showed
/// one side would gain more from it (`verdict`), within `range`; `full`:
/// the pool is near its share (within half a step).
fn steer(
    sh: &Shared,
    step: u64,
    plan: u64,
    range: std::ops::RangeInclusive<u64>,
    full: bool,
) -> u64 {
    let g = &sh.ghosts;
    let (faults, fault_ns) = sh.lat_pool.totals();
    let now = Snapshot {
        t: Instant::now(),
        resident_near: g.resident_near.load(Relaxed),
        pool: sh.zswap.pool_ghost(),
        faults,
        fault_ns,
    };
    let mut ctl = g.ctl.lock();
    // Within the range whatever the plan does meanwhile: an offset past it
    // would take steps back that move nothing.
    let (lo, hi) = (*range.start() as i64, *range.end() as i64);
    ctl.offset = ctl.offset.clamp(lo - plan as i64, hi - plan as i64);
    let share = |o: i64| (plan as i64 + o) as u64;
    let Some(at) = ctl.at else {
        ctl.at = Some(now);
        return share(ctl.offset);
    };
    let res = now.resident_near - at.resident_near;
    let dev = now.pool.near - at.pool.near;
    let tail = now.pool.tail - at.pool.tail;
    let secs = now.t.duration_since(at.t).as_secs_f64();
    if secs < EPOCH_MIN_SECS || res + dev + tail < EPOCH_HITS {
        if secs > EPOCH_SECS {
            ctl.at = Some(now);
        }
        return share(ctl.offset);
    }
    // What each kind of hit costs: a fault's service time less its device
    // read, and a device read. Few reads this epoch: the mean of all so
    // far, or before any, a prior.
    let dr = now.pool.read_count - at.pool.read_count;
    let dr_ns = now.pool.read_ns - at.pool.read_ns;
    let read_ns = if dr >= 8 {
        dr_ns as f64 / dr as f64
    } else if now.pool.read_count >= 8 {
        now.pool.read_ns as f64 / now.pool.read_count as f64
    } else {
        READ_PRIOR_NS
    };
    let df = (now.faults - at.faults).max(1);
    let fault_ns = (now.fault_ns - at.fault_ns).saturating_sub(dr_ns) as f64 / df as f64;
    let epoch = Epoch {
        resident: res,
        device: dev,
        tail,
        fault_ns,
        read_ns,
    };
    let step = step as i64;
    match verdict(&epoch, full) {
        Move::Down if share(ctl.offset) > lo as u64 => {
            ctl.offset = (ctl.offset - step).max(lo - plan as i64);
            g.moves_down.fetch_add(1, Relaxed);
        }
        Move::Up if share(ctl.offset) < hi as u64 => {
            ctl.offset = (ctl.offset + step).min(hi - plan as i64);
            g.moves_up.fetch_add(1, Relaxed);
        }
        _ => {}
    }
    ctl.at = Some(now);
    share(ctl.offset)
}

/// One epoch's ghost hits and what each kind costs.
#[derive(Clone, Copy, Debug)]
struct Epoch {
    /// Faults on chunks evicted within a step's evictions.
    resident: u64,
    /// Device reads of pages written back within a step's pages.
    device: u64,
    /// Loads of the pool's oldest step, which a step less share would
    /// write back.
    tail: u64,
    fault_ns: f64,
    read_ns: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Up,
    Down,
    Stay,
}

/// Which way a step of the share would gain at least twice what it
/// costs. A step from the pool to the resident part gains the resident
/// ghost's faults and loses the tail's loads to the device (or as many
/// reads as the pool's ghost shows, where more: the marginal step costs
/// about what the next one gains); a step back gains the pool ghost's
/// reads and loses about as many faults as the resident ghost shows. Up
/// only while the pool is `full`: below its share, more share holds
/// nothing more, and the reads then are of pages stored as is or written
/// back before.
fn verdict(e: &Epoch, full: bool) -> Move {
    let resident = e.resident as f64 * e.fault_ns;
    let up = e.device as f64 * e.read_ns;
    let down = e.device.max(e.tail) as f64 * e.read_ns;
    if resident > 2.0 * down {
        Move::Down
    } else if full && up > 2.0 * resident {
        Move::Up
    } else {
        Move::Stay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_cold_set_that_fits_gets_the_pool_it_needs() {
        // 1 GiB at 2.6:1 under 512 MiB: resident ~195 MiB, the pool the
        // rest (~317 MiB) and 1/16 of the budget of headroom.
        let s = target(512 * MIB, 102 * MIB, 1024 * MIB, 2.6);
        assert!((340 * MIB..360 * MIB).contains(&s), "{}", s / MIB);
    }

    #[test]
    fn a_plan_with_resident_memory_to_spare_gives_the_pool_headroom() {
        // 1 GiB at 1.85:1 under 713 MiB fits exactly with ~347 MiB
        // resident and a 366 MiB pool; the pool gets 1/16 of the budget
        // more, out of the resident part.
        let s = target(713 * MIB, 142 * MIB, 1024 * MIB, 1.85) as f64 / MIB as f64;
        let exact = 713.0 - (713.0 - 1024.0 / 1.85) / (1.0 - 1.0 / 1.85);
        assert!((s - exact - 713.0 / 16.0).abs() < 1.0, "{s} vs {exact}");
        // Just above the resident floor the headroom is what lies above
        // it: the resident part left is the floor.
        let s = target(512 * MIB, 102 * MIB, 1059 * MIB, 2.6) as f64 / MIB as f64;
        assert!((512.0 - s - 0.3 * 512.0).abs() < 1.0, "{s}");
    }

    #[test]
    fn a_cold_set_that_cannot_fit_keeps_the_configured_share() {
        // 1.7:1: 1 GiB needs 600 MiB of pool alone.
        assert_eq!(target(512 * MIB, 102 * MIB, 1024 * MIB, 1.7), 102 * MIB);
        // Incompressible.
        assert_eq!(target(512 * MIB, 102 * MIB, 1024 * MIB, 1.0), 102 * MIB);
    }

    #[test]
    fn a_cold_set_that_nearly_fits_gets_the_largest_share() {
        let s = target(512 * MIB, 102 * MIB, 1090 * MIB, 2.6);
        assert_eq!(s, (0.7 * (512 * MIB) as f64) as u64);
    }

    #[test]
    fn a_cold_set_that_fits_with_too_little_resident_memory_gets_some_more() {
        let s = target(512 * MIB, 102 * MIB, 1024 * MIB, 2.1);
        assert!((103 * MIB..358 * MIB).contains(&s), "{}", s / MIB);
    }

    #[test]
    fn the_share_moves_continuously() {
        let mut last = 0;
        for used in (600..1300).step_by(5) {
            let s = target(512 * MIB, 102 * MIB, used * MIB, 2.6);
            assert!(
                s.abs_diff(last) < 16 * MIB || last == 0,
                "{used}: {last} -> {s}"
            );
            last = s;
        }
    }

    #[test]
    fn the_configured_share_is_the_floor() {
        // Dense data: the plan asks for a small pool; the floor holds.
        assert_eq!(target(512 * MIB, 102 * MIB, 1024 * MIB, 20.0), 102 * MIB);
        // Denser than 2.6:1 needs less pool than above.
        let s = target(512 * MIB, 102 * MIB, 1024 * MIB, 4.0);
        assert!((170 * MIB..240 * MIB).contains(&s), "{}", s / MIB);
    }

    fn epoch(resident: u64, device: u64, tail: u64) -> Epoch {
        Epoch {
            resident,
            device,
            tail,
            fault_ns: 25_000.0,
            read_ns: 150_000.0,
        }
    }

    #[test]
    fn faults_just_out_of_resident_reach_move_the_share_down() {
        // GNU sort under 36M: its text refaulting within a step of
        // evictions, the pool's writeback read back from far away.
        // Also while the pool is below its share: sort's pool is that
        // most of the time, its evictions and faults moving chunks in and
        // out of it, and the steps down take it below its size.
        assert_eq!(verdict(&epoch(350, 5, 0), true), Move::Down);
        assert_eq!(verdict(&epoch(350, 5, 0), false), Move::Down);
    }

    #[test]
    fn a_pool_whose_oldest_pages_are_read_keeps_its_share() {
        // usemem's skewed reads of a cold set that fits: few resident
        // ghost hits, thousands of loads of what a smaller pool would have
        // written back. Nothing written back, so no pool ghost.
        assert_eq!(verdict(&epoch(90, 0, 2000), true), Move::Stay);
        // Nor is a pool with nothing to lose at its tail taken down for
        // a handful of faults when its ghost shows reads.
        assert_eq!(verdict(&epoch(90, 20, 0), true), Move::Stay);
    }

    #[test]
    fn device_reads_just_out_of_pool_reach_move_the_share_up_while_it_is_full() {
        assert_eq!(verdict(&epoch(40, 300, 0), true), Move::Up);
        // Below its share the pool already holds all it is given: the
        // reads are of pages written back for another reason (stored as
        // is, or before a rise).
        assert_eq!(verdict(&epoch(40, 300, 0), false), Move::Stay);
    }

    #[test]
    fn hits_are_weighed_by_what_each_costs() {
        // 5 device reads cost as much as 30 faults here: 100 faults
        // against 10 reads gains 2.5 k us against 1.5 k, short of twice.
        assert_eq!(verdict(&epoch(100, 10, 0), true), Move::Stay);
        let fast = Epoch {
            read_ns: 30_000.0,
            ..epoch(100, 10, 0)
        };
        assert_eq!(verdict(&fast, true), Move::Down);
    }
}
