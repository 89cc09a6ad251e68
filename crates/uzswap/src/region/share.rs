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
//! Locking: none. Reads the cache's counters and sets its limit and share
//! (atomics); called by the evictor thread after each batch.

use super::Shared;
use crate::PAGE_SIZE;
use std::sync::atomic::Ordering::Relaxed;

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
    // Pages stored but not resident (clean copies, and written-back pages
    // kept, are of resident pages).
    let stored = (o.pool_pages + o.device_pages).saturating_sub(o.clean_pages + o.kept_pages);
    let touched = sh.resident.load(Relaxed) + stored * page;
    // Plan for the regions as mapped, not just what was touched so far: a
    // program filling its memory would otherwise get a share raised for
    // the part it has written and cut back when it writes the rest, and
    // each move makes the shrinker write back in a burst. Same-filled pages
    // cost nothing; the rest of the mapping is taken to have as many.
    let sized = o.pool_pages + o.device_pages;
    let mapped = *sh.mapped.lock() as f64 * sized as f64 / (sized + o.same_filled_pages) as f64;
    let used = if sh.cfg.plan_for_mapping {
        touched.max(mapped as u64)
    } else {
        touched
    };
    // The budget left to the data: the process's own memory, where it is
    // counted (`own.rs`), is not there for the pool or the resident part.
    let budget = sh.cfg.budget.saturating_sub(sh.own.bytes());
    let share = target(budget, base, used, rho);
    let now = sh.zswap.max_pool_bytes();
    // Move in steps of at least 1/64 of the budget: each move makes the
    // shrinker and the evictor rebalance.
    if share.abs_diff(now) >= sh.cfg.budget / 64 {
        sh.zswap.set_max_pool_bytes(share);
        sh.zswap.set_pool_share_bytes(share / 32 * 31);
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
}
