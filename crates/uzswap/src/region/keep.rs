//! Whether a read fault installs write-protected, and what it keeps of
//! the pool's copy (`Config::keep_copy`); the kernel analogue is the swap
//! cache page that reclaim drops without writing because the slot still
//! holds it.
//!
//! Installed protected, memory that is evicted unchanged costs the evictor
//! no write-protection (a TLB shootdown of every CPU the program runs on)
//! and, where its copy is still in the pool, no compression. Memory that
//! is written first costs a second fault: a full userfaultfd round trip
//! (25-75 µs with handler threads, ~10 µs in the faulting thread), where
//! the kernel's own write to a swapped-in page is a minor fault of a
//! microsecond. Which one a program does is its access pattern. usemem's
//! read passes write nothing they read; its random row writes a quarter of
//! the pages reads bring in; GNU sort reads its buffer and then moves the
//! lines in it, and 92% of its protected installs were written (131 k
//! write-protect faults of 185 k faults).
//!
//! So the instance measures the share of protected installs that a write
//! reaches, and reads install writable (as writes do; the evictor then
//! protects and compresses them) while that share is above a bound. What
//! an unwritten protected install saves decides the bound. The evictor
//! protects a run of contiguous chunks with one call, so where nothing
//! else is saved a write fault costs more than several of those, and the
//! bound is `WRITTEN_MAX`, one in eight. Where the copies reads keep live
//! to be claimed by an eviction (at least `CLAIMED_MIN` of the copies
//! leaving the cache, claimed rather than freed for room), each unwritten
//! install also saves a store, and under a tight budget that store's pool
//! growth is a writeback too: the bound is `WRITTEN_MAX_CLAIMED`, two in
//! three. usemem's random row writes a quarter of what its reads bring
//! in. At 758 MiB (1 GiB, 4 workers, signal handlers, alternating) its
//! copies were nearly all freed (0.5 k claimed, 71 k freed), and it ran
//! 513-633 k ops/s with reads protected, 750-910 k writable, its 38-42 k
//! write-protect faults down to the probes' 2.4-2.7 k. At 512 MiB a fifth
//! of them were claimed (33 k claimed, 127 k freed), and writable reads
//! ran 158-178 k ops/s against 188-195 k protected, storing 15% more
//! pages and writing 40% more back. GNU sort, Python and the threads
//! program of `bench programs` were within noise at one in eight. One
//! read in `PROBE` installs protected regardless, so the shares stay
//! measured and the policy turns back when the program's pattern does;
//! counts halve every `WINDOW` protected installs, so they follow the
//! recent past.
//!
//! What a protected install keeps of the copy. A whole chunk (`install`,
//! and a PARTIAL chunk completed by a read, `fill`) keeps none: it is
//! loaded exclusively and installed protected, CLEAN with no copy. The
//! evictor frees clean copies before the CLOCK takes anything (they hold
//! no chunk resident; only probation's victims go first, and a whole
//! chunk is never on probation), so under pressure a whole chunk's copy was dropped
//! before its chunk came up for eviction: 1-2 claimed of 262 k dropped in
//! usemem's sequential index row, none of 262 k in its text row. Keeping
//! them cost the keeping load (decompressed under the shard lock), the
//! clean ring and the drop, and nothing came of it: without them the read
//! pass of the index row (1 GiB under 788 MiB) took 1.36-1.56 s, not
//! 1.83-2.02, and of the text row (under 820 MiB) 1.78-1.87, not
//! 2.40-2.48. A random read's group (`install_group`) keeps its copies:
//! measured without them, GNU sort under `bench programs` took 13.2-14.6 s
//! against 9.9-11.9, with 15-25% more faults, twice the probation
//! evictions and 50% more workingset refaults, though its copies were
//! claimed about as rarely (1.0 k of 82-101 k). The lead: without them
//! its pool held 10-15% more memory than its objects' bytes all run, the
//! holes exclusive loads leave, which only writeback walks and the freeing
//! of clean copies compact (docs/BENCHMARKS.md, "Whole chunks keep no
//! copy"). They stay where they were measured to pay.
//!
//! A whole chunk whose every page was written back is the exception: its
//! copies are device slots, which hold no memory and which nothing frees
//! for room, so they are kept (`chunk::KEPT`). Without them a chunk read
//! back from the device and evicted unwritten was stored in the pool again,
//! and under a pool at its share that store wrote back another page: the
//! threads program of `bench programs` under 120 MiB wrote back 26-28 k
//! pages, 7-13 k with them kept (docs/BENCHMARKS.md, "Written-back
//! chunks keep their slots").
//!
//! Locking: none; relaxed atomics. Racing updates may lose a count or a
//! halving, which only blurs an estimate.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Above this share of protected installs written, reads install writable:
/// a written install costs a round trip, an unwritten one saves the
/// evictor a share of one protection call, and the round trip costs
/// several of those.
const WRITTEN_MAX: (u64, u64) = (1, 8);
/// The bound while kept copies are claimed: an unwritten install then
/// saves a store as well.
const WRITTEN_MAX_CLAIMED: (u64, u64) = (2, 3);
/// Kept copies count as claimed while at least this share of those leaving
/// the cache were claimed by an eviction (the rest freed for room).
const CLAIMED_MIN: (u64, u64) = (1, 8);
/// Protected installs counted before the share decides anything.
const EVIDENCE: u64 = 64;
/// Protected installs after which both counts halve.
const WINDOW: u32 = 4096;
/// One read install in this many keeps its copy even when copies do not
/// pay, so that the share goes on being measured.
const PROBE: u32 = 16;

#[derive(Default)]
pub(super) struct KeepCopy {
    /// Installs made write-protected with their copies kept.
    kept: AtomicU32,
    /// Writes that then reached one of them (write-protect faults).
    written: AtomicU32,
    /// Read installs while copies do not pay, for the probe.
    reads: AtomicU32,
    /// Kept copies claimed by an eviction (pages).
    claimed: AtomicU32,
    /// The cache's count of clean copies freed for room
    /// (`Zswap::clean_dropped`) less those freed within the window:
    /// what that count less this is, is the window's.
    dropped_base: AtomicU64,
}

impl KeepCopy {
    /// Whether a read installs protected, keeping its group's copies (with
    /// `Config::keep_copy`); counts it if so. `dropped_total` is the
    /// cache's count of clean copies freed for room
    /// (`Zswap::clean_dropped`).
    pub(super) fn keeps(&self, dropped_total: u64) -> bool {
        if !self.pays(dropped_total) && !self.reads.fetch_add(1, Relaxed).is_multiple_of(PROBE) {
            return false;
        }
        self.kept(dropped_total);
        true
    }

    /// Count an install made protected (a read, or a prefetch, which always
    /// is), so its writes weigh against it.
    pub(super) fn kept(&self, dropped_total: u64) {
        if self.kept.fetch_add(1, Relaxed) + 1 >= WINDOW {
            for c in [&self.kept, &self.written, &self.claimed] {
                c.store(c.load(Relaxed) / 2, Relaxed);
            }
            let base = self.dropped_base.load(Relaxed);
            let window = dropped_total.saturating_sub(base);
            self.dropped_base.store(dropped_total - window / 2, Relaxed);
        }
    }

    /// Whether installing protected has been paying lately: few enough of
    /// those installs were written (true until there is evidence; halving
    /// keeps at least `WINDOW / 2` counted), the bound depending on whether
    /// the copies leaving the cache were claimed. Reads only.
    pub(super) fn pays(&self, dropped_total: u64) -> bool {
        let dropped = dropped_total.saturating_sub(self.dropped_base.load(Relaxed));
        let claimed = self.claimed.load(Relaxed) as u64;
        let kept = self.kept.load(Relaxed) as u64;
        let written = self.written.load(Relaxed) as u64;
        let (a, b) =
            if claimed > 0 && claimed * CLAIMED_MIN.1 >= (claimed + dropped) * CLAIMED_MIN.0 {
                WRITTEN_MAX_CLAIMED
            } else {
                WRITTEN_MAX
            };
        kept < EVIDENCE || written * b <= kept * a
    }

    /// An eviction claimed `pages` kept copies (no store needed).
    pub(super) fn claimed(&self, pages: u32) {
        self.claimed.fetch_add(pages, Relaxed);
    }

    /// A write reached memory installed protected (a write-protect fault).
    pub(super) fn written(&self) {
        self.written.fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_install_writable_while_an_eighth_of_installs_are_written() {
        let k = KeepCopy::default();
        assert!(k.pays(0), "no evidence yet: keep, as before");
        // A scan that writes one page in sixteen of what it read.
        for i in 0..1000 {
            assert!(k.keeps(0));
            if i % 16 == 0 {
                k.written();
            }
        }
        assert!(k.pays(0));
        // usemem's random row: a quarter of the reads' pages written.
        let k = KeepCopy::default();
        for i in 0..200 {
            if k.keeps(0) && i % 4 == 0 {
                k.written();
            }
        }
        assert!(!k.pays(0));
        // Not paying: one read in PROBE still installs protected.
        let kept = (0..PROBE * 4).filter(|_| k.keeps(0)).count();
        assert_eq!(kept, 4);
    }

    #[test]
    fn the_policy_follows_a_change_of_pattern() {
        let k = KeepCopy::default();
        let mut written = 0;
        for _ in 0..WINDOW {
            if k.keeps(0) {
                k.written();
                written += 1;
            }
        }
        assert!(!k.pays(0));
        assert!(written < WINDOW / 4, "probes only: {written}");
        // The program turns to reading only: the probes' installs go
        // unwritten and protected installs resume.
        let mut reads = 0;
        while !k.pays(0) {
            k.keeps(0);
            reads += 1;
            assert!(reads < 64 * WINDOW, "never turned back");
        }
        assert!(k.keeps(0));
    }

    #[test]
    fn claimed_copies_allow_more_writes_before_reads_go_writable() {
        // A quarter of the reads' pages written (usemem's random row), and
        // of every `per` copies leaving the cache one claimed by an
        // eviction, the rest freed for room. Returns the cache's count of
        // freed copies at the end.
        let run = |k: &KeepCopy, per: u32| {
            let mut dropped = 0u64;
            for i in 0..400u32 {
                if i % per == 0 {
                    k.claimed(1);
                } else {
                    dropped += 1;
                }
                if k.keeps(dropped) && i % 4 == 0 {
                    k.written();
                }
            }
            dropped
        };
        // Under a tight budget a fifth are claimed: an unwritten install
        // saves a store, so reads stay protected.
        let k = KeepCopy::default();
        let dropped = run(&k, 5);
        assert!(k.pays(dropped));
        // Under a roomy one nearly every copy is freed: reads go writable.
        let k = KeepCopy::default();
        let dropped = run(&k, 100);
        assert!(!k.pays(dropped));
    }
}
