//! The evictor's batch, the watermarks it sets, and how long probation's
//! newest entries wait.
//!
//! The evictor wakes above the high watermark and evicts down to the low
//! one: high sits a batch (and the fault margin) under the budget, low a
//! batch under high. On average a batch and a half of the budget holds
//! nothing the program uses, and near a program's cliff that decides its
//! faults: GNU sort under 44 MiB took 29-46 k faults with the batch at
//! 1/64 of the budget, 23-29 k at 1/256. A large batch is what keeps the
//! evictor ahead of faults that come in fast: at 1/256 the threads
//! program's four threads spent 2-3 s at the backstop, against 0.2 s.
//!
//! So the batch follows the faults, as TCP's window follows its losses. It
//! starts at its largest, 1/64 of the budget (256 KiB to 8 MiB, the fixed
//! batch before), and each time the evictor wakes it reads the backstop's
//! count of faults that found usage at the limit: any since the last
//! wake-up grows the batch by a quarter (at most the largest), none
//! shrinks it by an eighth, down to 1/256 of the budget (or to what the
//! faults in flight may install plus a chunk, if that is more). Growing by
//! doubling held sort's batch at 320-512 KiB where a quarter let it settle
//! at 192-256 KiB, 8-22% faster; a fault at the backstop costs a single
//! faulting thread little, and the evictor ahead of it costs the budget.
//! The kernel's kswapd has no such loop (its watermarks scale with the
//! zone, `watermark_scale_factor`); it reclaims in the faulting thread
//! when kswapd falls behind, which costs it less than a userfault's wait.
//!
//! Probation's entries (chunks that came in as one random read) wait there
//! for a second read, and every batch takes probation's oldest first. A
//! smaller batch, run more often, took them younger: Python's `heap.py`
//! under 146 MiB evicted 14-15 k chunks from probation instead of 4 k,
//! took 20% more faults and ran 15% longer. So while the batch is short of
//! its largest, the evictor leaves the newest entries, as many pages as it
//! is short, to wait as long as the largest batch let them (the threads
//! program and Python evicted a quarter fewer chunks). Two exceptions
//! take them anyway. A fault at the backstop takes the cheapest room there
//! is; and after a wake-up that found faults at the backstop, so does the
//! evictor: a probation victim read and not written gives its page up with
//! no compression (its copy is in the pool), and usemem's text pages,
//! whose CLOCK victims compress slowest, ran 2-10% slower when the evictor
//! compressed chunks in probation's place while faults waited. No
//! eviction takes the newest few, the chunks faults in flight just
//! installed (`evict::in_flight_installs`).
//!
//! All fields are atomics read without locks, written by the evictor
//! thread alone: a reader that sees the batch before a change and a
//! watermark after it sees two settings each valid, and every use is a
//! heuristic that the next wake-up corrects.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::PAGE_SIZE;

/// The largest batch, as a share of the budget, and the smallest.
const MAX_DIVISOR: u64 = 64;
const MIN_DIVISOR: u64 = 256;
/// Bounds on the largest batch in bytes.
const MAX_FLOOR: u64 = 256 << 10;
const MAX_CEIL: u64 = 8 << 20;
/// A wake-up after a fault at the backstop grows the batch by 1/GROW; one
/// with none shrinks it by 1/SHRINK.
const GROW: u64 = 4;
const SHRINK: u64 = 8;

pub(super) struct Batch {
    budget: u64,
    /// The fault margin (`evict::fault_margin`) high keeps under the budget.
    margin: u64,
    chunk: u64,
    min: u64,
    max: u64,
    cur: AtomicU64,
    /// The backstop's count of faults at its limit (`Counters`) when the
    /// evictor last looked.
    seen: AtomicU64,
    /// A fault waited at the backstop between the evictor's last two looks.
    behind: AtomicBool,
}

impl Batch {
    /// `fixed`: a batch the configuration asks for (0: adapt). `incoming`:
    /// what the faults in flight may install at once as configured (a
    /// chunk per handler thread; the backstop's own count can be more in
    /// signal mode, where every faulting thread installs). Without a budget
    /// the watermarks are unbounded and the batch is 8 MiB.
    pub(super) fn new(budget: u64, fixed: u64, chunk: usize, incoming: u64, margin: u64) -> Self {
        let chunk = chunk as u64;
        let round = |b: u64| b.max(chunk).next_multiple_of(chunk);
        let largest = round((budget / MAX_DIVISOR).clamp(MAX_FLOOR, MAX_CEIL));
        // The backstop's limit is a batch above high, and it stops a fault
        // where what is in flight would pass it: a batch no larger than
        // that sends faults to the backstop the moment they wake the
        // evictor, which then never runs (a 16 MiB budget with two
        // handlers: 4.1 k of 4.3 k batches evicted by faults). So at least
        // a chunk more, where the largest batch leaves room for it.
        let floor = round(incoming + chunk).min(largest);
        let (min, max) = if budget == u64::MAX {
            let b = round(if fixed > 0 { fixed } else { MAX_CEIL });
            (b, b)
        } else if fixed > 0 {
            // A fixed batch under the floor starves the evictor as above:
            // it is raised to the floor.
            let b = round(fixed).max(floor);
            (b, b)
        } else {
            let min = round(budget / MIN_DIVISOR).max(floor);
            (min.min(largest), largest)
        };
        Batch {
            budget,
            margin,
            chunk,
            min,
            max,
            cur: AtomicU64::new(max),
            seen: AtomicU64::new(0),
            behind: AtomicBool::new(false),
        }
    }

    /// Bytes the evictor evicts per wake-up.
    pub(super) fn bytes(&self) -> u64 {
        self.cur.load(Relaxed)
    }

    /// The largest batch (what `PageOut` hints group by).
    pub(super) fn max(&self) -> u64 {
        self.max
    }

    /// Above this the evictor is woken.
    pub(super) fn high(&self) -> u64 {
        if self.budget == u64::MAX {
            return u64::MAX;
        }
        self.budget.saturating_sub(self.bytes() + self.margin)
    }

    /// The evictor evicts down to this.
    pub(super) fn low(&self) -> u64 {
        if self.budget == u64::MAX {
            return u64::MAX;
        }
        self.high().saturating_sub(self.bytes())
    }

    /// The evictor woke: `waits` is the backstop's count of faults at its
    /// limit. Grow the batch if any came since the last look, else shrink
    /// it.
    pub(super) fn adapt(&self, waits: u64) {
        if self.min == self.max {
            return;
        }
        let fell_behind = self.seen.swap(waits, Relaxed) != waits;
        self.behind.store(fell_behind, Relaxed);
        let b = self.bytes();
        let next = if fell_behind {
            (b + (b / GROW).max(self.chunk)).min(self.max)
        } else {
            (b - (b / SHRINK).max(self.chunk)).max(self.min)
        };
        let next = next.next_multiple_of(self.chunk).min(self.max);
        self.cur.store(next, Relaxed);
    }

    /// Probation entries, newest first, the evictor leaves now: the pages
    /// the batch is short of its largest, none while faults wait.
    pub(super) fn probation_keep(&self) -> usize {
        if self.behind.load(Relaxed) {
            return 0;
        }
        ((self.max - self.bytes()) / PAGE_SIZE as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(budget: u64) -> Batch {
        Batch::new(budget, 0, 64 << 10, 128 << 10, 1 << 20)
    }

    /// Wake-ups with no fault at the backstop until the batch stops moving.
    fn settle(b: &Batch) {
        for _ in 0..64 {
            b.adapt(b.seen.load(Relaxed));
        }
    }

    #[test]
    fn starts_at_its_largest_and_shrinks_while_no_fault_waits() {
        let b = batch(128 << 20);
        assert_eq!(b.bytes(), 2 << 20);
        assert_eq!(b.high(), (128 << 20) - (2 << 20) - (1 << 20));
        assert_eq!(b.low(), b.high() - (2 << 20));
        assert_eq!(b.probation_keep(), 0, "at its largest: nothing kept");
        b.adapt(0);
        assert_eq!(b.bytes(), (2 << 20) - (256 << 10), "an eighth less");
        settle(&b);
        assert_eq!(b.bytes(), 512 << 10, "down to 1/256 of the budget");
        assert_eq!(b.high(), (128 << 20) - (512 << 10) - (1 << 20));
        assert_eq!(b.low(), b.high() - (512 << 10));
        assert_eq!(
            b.probation_keep(),
            (3 << 19) / PAGE_SIZE,
            "what it is short"
        );
    }

    #[test]
    fn a_fault_at_the_backstop_grows_it_and_releases_probation() {
        let b = batch(128 << 20);
        settle(&b);
        b.adapt(3);
        assert_eq!(b.bytes(), 640 << 10, "a quarter more");
        assert_eq!(
            b.probation_keep(),
            0,
            "faults waited: probation's newest go too"
        );
        for w in 4..20 {
            b.adapt(w);
        }
        assert_eq!(b.bytes(), 2 << 20, "never above the largest");
        b.adapt(19);
        assert_eq!(b.bytes(), (2 << 20) - (256 << 10));
        assert_eq!(b.probation_keep(), (256 << 10) / PAGE_SIZE);
    }

    #[test]
    fn a_fixed_batch_is_at_least_what_faults_in_flight_install_and_a_chunk() {
        // One 64 KiB chunk with two handlers installing a chunk each: the
        // evictor would never run.
        let b = Batch::new(128 << 20, 64 << 10, 64 << 10, 128 << 10, 0);
        assert_eq!(b.bytes(), 192 << 10);
        // Above the floor, as asked (in whole chunks).
        let b = Batch::new(128 << 20, 300 << 10, 64 << 10, 128 << 10, 0);
        assert_eq!(b.bytes(), 320 << 10);
        // 2 MiB chunks under a 40 MiB budget: the floor is the largest
        // batch, one chunk, not the three the faults could install.
        let b = Batch::new(40 << 20, 2 << 20, 2 << 20, 4 << 20, 0);
        assert_eq!(b.bytes(), 2 << 20);
        // No budget: nothing to starve.
        let b = Batch::new(u64::MAX, 64 << 10, 64 << 10, 128 << 10, 0);
        assert_eq!(b.bytes(), 64 << 10);
    }

    #[test]
    fn fixed_and_unbounded_batches_do_not_move() {
        let b = Batch::new(128 << 20, 3 << 20, 64 << 10, 0, 0);
        b.adapt(1);
        b.adapt(1);
        assert_eq!(b.bytes(), 3 << 20);
        assert_eq!(b.probation_keep(), 0);
        let b = Batch::new(u64::MAX, 0, 4096, 0, 0);
        assert_eq!((b.high(), b.low()), (u64::MAX, u64::MAX));
        b.adapt(0);
        assert_eq!(b.bytes(), 8 << 20);
    }

    #[test]
    fn batches_are_whole_chunks_and_keep_moving() {
        // 2 MiB chunks: an eighth of the batch is less than a chunk.
        let b = Batch::new(1 << 30, 0, 2 << 20, 2 << 20, 0);
        assert_eq!(b.bytes(), 8 << 20);
        b.adapt(0);
        assert_eq!(
            b.bytes(),
            6 << 20,
            "a whole chunk less, not rounded back up"
        );
        settle(&b);
        assert_eq!(b.bytes(), 4 << 20);
        b.adapt(1);
        assert_eq!(b.bytes(), 6 << 20);
        // A budget under a chunk's 64 batches: one chunk each way.
        let b = Batch::new(40 << 20, 0, 2 << 20, 2 << 20, 0);
        assert_eq!(b.bytes(), 2 << 20);
        settle(&b);
        assert_eq!(b.bytes(), 2 << 20);
    }

    #[test]
    fn never_so_small_that_a_wake_up_finds_faults_at_the_backstop() {
        // 16 MiB, 64 KiB chunks, two handlers: budget/256 is one chunk,
        // less than the two installs the backstop allows for.
        let b = Batch::new(16 << 20, 0, 64 << 10, 128 << 10, 0);
        settle(&b);
        assert_eq!(b.bytes(), 192 << 10);
    }
}
