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
//! protects and compresses them) while that share is above
//! `WRITTEN_MAX`, one in eight. The evictor protects a run of contiguous
//! chunks with one call, so what an unwritten protected install saves is
//! small, and a write fault costs more than several of those: usemem's
//! random row (1 GiB under 758 MiB, 4 workers, signal handlers,
//! alternating) ran 513-633 k ops/s with reads protected up to a written
//! share of two in three, and 750-910 k with one in eight, its 38-42 k
//! write-protect faults down to the probes' 2.4-2.7 k. GNU sort, Python
//! and the threads program of `bench programs` were within noise either
//! way. One read in `PROBE` installs protected regardless, so the share
//! stays measured and the policy turns back when the program's pattern
//! does; counts halve every `WINDOW` protected installs, so the share
//! follows the recent past.
//!
//! What a protected install keeps of the copy. A whole chunk (`install`,
//! and a PARTIAL chunk completed by a read, `fill`) keeps none: it is
//! loaded exclusively and installed protected, CLEAN with no copy. The
//! evictor frees clean copies before it evicts anything (they hold no
//! chunk resident), so under pressure a whole chunk's copy was dropped
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
//! claimed about as rarely (1.0 k of 82-101 k). Why the copies steer its
//! evictions so is not yet understood; they stay where they were measured
//! to pay.
//!
//! Locking: none; relaxed atomics. Racing updates may lose a count or a
//! halving, which only blurs an estimate.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

/// Above this share of protected installs written, reads install writable:
/// a written install costs a round trip, an unwritten one saves the
/// evictor a share of one protection call, and the round trip costs
/// several of those.
const WRITTEN_MAX: (u64, u64) = (1, 8);
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
}

impl KeepCopy {
    /// Whether a read install keeps its copy (with `Config::keep_copy`);
    /// counts it if so.
    pub(super) fn keeps(&self) -> bool {
        if !self.pays() && !self.reads.fetch_add(1, Relaxed).is_multiple_of(PROBE) {
            return false;
        }
        self.kept();
        true
    }

    /// Count an install made protected with its copies kept (a read, or a
    /// prefetch, which always keeps them), so its writes weigh against it.
    pub(super) fn kept(&self) {
        if self.kept.fetch_add(1, Relaxed) + 1 >= WINDOW {
            for c in [&self.kept, &self.written] {
                c.store(c.load(Relaxed) / 2, Relaxed);
            }
        }
    }

    /// Whether installing protected has been paying lately: few enough of
    /// those installs were written (true until there is evidence; halving
    /// keeps at least `WINDOW / 2` counted).
    pub(super) fn pays(&self) -> bool {
        let kept = self.kept.load(Relaxed) as u64;
        let written = self.written.load(Relaxed) as u64;
        kept < EVIDENCE || written * WRITTEN_MAX.1 <= kept * WRITTEN_MAX.0
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
        assert!(k.pays(), "no evidence yet: keep, as before");
        // A scan that writes one page in sixteen of what it read.
        for i in 0..1000 {
            assert!(k.keeps());
            if i % 16 == 0 {
                k.written();
            }
        }
        assert!(k.pays());
        // usemem's random row: a quarter of the reads' pages written.
        let k = KeepCopy::default();
        for i in 0..200 {
            if k.keeps() && i % 4 == 0 {
                k.written();
            }
        }
        assert!(!k.pays());
        // Not paying: one read in PROBE still installs protected.
        let kept = (0..PROBE * 4).filter(|_| k.keeps()).count();
        assert_eq!(kept, 4);
    }

    #[test]
    fn the_policy_follows_a_change_of_pattern() {
        let k = KeepCopy::default();
        let mut written = 0;
        for _ in 0..WINDOW {
            if k.keeps() {
                k.written();
                written += 1;
            }
        }
        assert!(!k.pays());
        assert!(written < WINDOW / 4, "probes only: {written}");
        // The program turns to reading only: the probes' installs go
        // unwritten and protected installs resume.
        let mut reads = 0;
        while !k.pays() {
            k.keeps();
            reads += 1;
            assert!(reads < 64 * WINDOW, "never turned back");
        }
        assert!(k.keeps());
    }
}
