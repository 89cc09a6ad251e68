//! Pool figures, named as the kernel's zsmalloc debugfs `classes` file and
//! zswap's `pool_total_size`.

use crate::size_class::NR_FULLNESS_GROUPS;

/// Per-class and whole-pool figures.
///
/// Whole-pool fields come from atomics, per-class ones from each class under
/// its lock, one class at a time: while other threads work the two views may
/// disagree by the operations in flight; in a quiescent pool they add up.
#[derive(Clone, Debug, Default)]
pub struct PoolStats {
    /// Bytes of memory the pool holds from the OS, the figure zswap
    /// charges: pages of live spans plus `cached_bytes`. Arena address
    /// space never handed out, or given back, is not counted.
    pub pool_total_size: u64,
    /// Free page runs the pool keeps for reuse instead of giving them back
    /// at once (part of `pool_total_size`; at most about 1/16 of the live
    /// spans' bytes, and none after [`crate::ZsPool::compact`]).
    pub cached_bytes: u64,
    /// Arena mappings (of 2 MiB) the spans are carved from.
    pub arenas: u64,
    /// Of `arenas`, those backed by one transparent huge page (held whole)
    /// and not broken by a trim since.
    pub huge_arenas: u64,
    /// Pages of huge arenas no span has used yet: faulted in with their
    /// huge page, so part of `pool_total_size` (about one arena at most).
    pub reserve_bytes: u64,
    /// Bytes the pool's fill thread faulted in ahead of the spans that
    /// took them (a running total; `PoolConfig::fill_ahead`).
    pub filled_bytes: u64,
    /// Bytes handed out to live objects (their requested sizes).
    pub used_bytes: u64,
    pub objects: u64,
    pub spans: u64,
    /// Frees of handles that were not live (double or stale frees), ignored.
    pub invalid_frees: u64,
    /// Slots freed while a reader was in their span, not yet reusable.
    pub deferred_slots: u64,
    /// Out-of-line bookkeeping (handle table, per-span slot maps), which,
    /// like the kernel's handle cache and zspage structs, is not part of
    /// `pool_total_size`.
    pub metadata_bytes: u64,
    pub classes: Vec<ClassStats>,
}

impl PoolStats {
    /// `used_bytes / pool_total_size`: the fraction of the pool's memory that
    /// holds object bytes (1.0 when empty).
    pub fn space_efficiency(&self) -> f64 {
        if self.pool_total_size == 0 {
            1.0
        } else {
            self.used_bytes as f64 / self.pool_total_size as f64
        }
    }

    /// `1 - space_efficiency()`: memory lost to slot rounding, span tails and
    /// partly empty spans.
    pub fn fragmentation(&self) -> f64 {
        1.0 - self.space_efficiency()
    }
}

#[derive(Clone, Debug, Default)]
pub struct ClassStats {
    /// Slot size: the largest object the class holds.
    pub size: u32,
    pub pages_per_span: u32,
    pub objs_per_span: u32,
    pub objects: u64,
    pub spans: u64,
    pub used_bytes: u64,
    /// Spans per fullness group: `[0]` empty, `[1..=10]` 0-9% .. 90-99%
    /// occupied, `[11]` full.
    pub fullness: [u64; NR_FULLNESS_GROUPS],
}

impl ClassStats {
    /// Slots in this class's spans that hold no object: what compaction
    /// could recover, in units of `size`.
    pub fn free_slots(&self) -> u64 {
        self.spans * u64::from(self.objs_per_span) - self.objects
    }
}

/// Result of one compaction pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactStats {
    pub objects_moved: u64,
    pub spans_freed: u64,
    /// Bytes given back to the OS during the pass: emptied spans' pages
    /// and every cached free run (see [`PoolStats::cached_bytes`]).
    pub bytes_freed: u64,
}
