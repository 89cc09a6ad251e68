//! zswap counters, named as the kernel's (vmstat: zswpout, zswpin, zswpwb;
//! debugfs: stored_pages, same_filled_pages, pool_total_size, pool_limit_hit,
//! reject_*; per-order sysfs: `hugepages-<N>kB/stats/zswpout`).

use crate::MAX_ORDER;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub(crate) struct Counters {
    pub zswpout: AtomicU64,
    pub zswpin: AtomicU64,
    pub zswpwb: AtomicU64,
    pub same_filled_pages: AtomicU64,
    pub incompressible_pages: AtomicU64,
    pub compressed_bytes: AtomicU64,
    pub pool_limit_hit: AtomicU64,
    pub reject_compress_poor: AtomicU64,
    pub reject_compress_fail: AtomicU64,
    pub reject_alloc_fail: AtomicU64,
    pub reject_reclaim_fail: AtomicU64,
    pub decompress_fail: AtomicU64,
    pub checksum_fail: AtomicU64,
    pub seal_fail: AtomicU64,
    pub invalidated_pages: AtomicU64,
    pub written_back_pages: AtomicU64,
    pub pswpout: AtomicU64,
    pub pswpin: AtomicU64,
    pub swap_reads: AtomicU64,
    pub promoted_pages: AtomicU64,
    pub clean_dropped: AtomicU64,
    pub device_pages: AtomicU64,
    pub inherited_pages: AtomicU64,
    pub shrink_scanned: AtomicU64,
    pub shrink_rotated: AtomicU64,
    pub shrink_stop_protected: AtomicU64,
    pub shrink_stop_loading: AtomicU64,
    pub shrink_runs: AtomicU64,
    pub recompressed_pages: AtomicU64,
    pub recompress_poor: AtomicU64,
    /// Per order: folios stored, folios loaded, folio stores that failed.
    pub order_zswpout: [AtomicU64; MAX_ORDER as usize + 1],
    pub order_zswpin: [AtomicU64; MAX_ORDER as usize + 1],
    pub order_store_fail: [AtomicU64; MAX_ORDER as usize + 1],
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
}

/// Per-order folio figures (`hugepages-<N>kB` in sysfs).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct OrderStats {
    /// Folios of this order stored whole.
    pub zswpout: u64,
    /// Folios of this order loaded whole.
    pub zswpin: u64,
    /// Folio stores of this order refused (the folio stayed with the caller).
    pub store_fail: u64,
}

/// A snapshot of an instance's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ZswapStats {
    /// Pages stored (vmstat zswpout).
    pub zswpout: u64,
    /// Pages loaded (vmstat zswpin).
    pub zswpin: u64,
    /// Pages written back to the swap device (vmstat zswpwb).
    pub zswpwb: u64,
    /// Entries stored now.
    pub stored_pages: u64,
    pub same_filled_pages: u64,
    /// Pages kept uncompressed because they compressed poorly.
    pub incompressible_pages: u64,
    /// Sum of the compressed lengths of stored objects.
    pub compressed_bytes: u64,
    /// Bytes of memory the pool occupies.
    pub pool_total_size: u64,
    pub max_pool_bytes: u64,
    pub pool_limit_hit: u64,
    pub reject_compress_poor: u64,
    pub reject_compress_fail: u64,
    pub reject_alloc_fail: u64,
    pub reject_reclaim_fail: u64,
    pub decompress_fail: u64,
    pub checksum_fail: u64,
    /// Pages read from the swap device that failed authentication (each
    /// also counted in `checksum_fail`: it is the same load error).
    pub seal_fail: u64,
    pub invalidated_pages: u64,
    /// Pages written back to the swap device (debugfs written_back_pages;
    /// equal to `zswpwb`, kept under both of the kernel's names).
    pub written_back_pages: u64,
    /// Pages this instance wrote to / read from the swap device.
    pub pswpout: u64,
    pub pswpin: u64,
    /// Device reads: one per run of contiguous slots a load needed, so
    /// `pswpin / swap_reads` is the pages per read.
    pub swap_reads: u64,
    /// Written-back pages a pinned load brought back into the pool.
    pub promoted_pages: u64,
    /// Clean copies now: pool entries of pages the caller holds unchanged
    /// (`LoadMode::KeepClean`), the first thing freed under pressure.
    pub clean_pages: u64,
    /// Clean copies freed to make room (no I/O: the caller holds the page).
    pub clean_dropped: u64,
    /// Entries whose page is on the swap device now (not in `stored_pages`).
    pub device_pages: u64,
    /// Of `device_pages` and `inherited_pages`, those kept as clean copies
    /// of pages the caller holds unchanged (`LoadMode::KeepClean` of pages
    /// whose objects hold no pool memory): its next eviction of them claims
    /// them instead of storing again.
    pub kept_pages: u64,
    /// Entries whose object is in the copy of a parent's pool this process
    /// inherited at a fork (not in `stored_pages`: memory it shares with
    /// its parent, charged to neither pool).
    pub inherited_pages: u64,
    /// Device slots those entries take: objects are packed, so a slot
    /// holds parts of several.
    pub swap_slots: u64,
    /// Entries on the LRU (pool entries).
    pub lru_pages: u64,
    /// LRU entries the shrinker examined, and those it rotated (second chance).
    pub shrink_scanned: u64,
    pub shrink_rotated: u64,
    /// The protected-region estimate now (seed 003).
    pub shrink_protected: u64,
    /// Shrinker runs that stopped at the protected region, and at an entry
    /// being loaded.
    pub shrink_stop_protected: u64,
    pub shrink_stop_loading: u64,
    /// Shrinker runs (any reason).
    pub shrink_runs: u64,
    /// Cold entries the shrinker recompressed with the dense compressor
    /// (zram: num_recompressed), and those it left as they were because
    /// the dense form would not have been at least 1/8 smaller.
    pub recompressed_pages: u64,
    pub recompress_poor: u64,
    /// Whether the memory-pressure (PSI) trigger is armed.
    pub psi_active: bool,
    /// Tree shard lock acquisitions so far (every operation that touches
    /// the tree, the shrinker's walks included): a folio
    /// store or load takes one for all its pages (seed 000).
    pub tree_locks: u64,
    /// Heap bytes of the tree's maps and rings (by capacity): the cache's
    /// own memory for its entries, outside the pool and the budget.
    pub tree_bytes: u64,
    /// Keyed `"hugepages-<N>kB"` for orders 1..=9 with any activity.
    pub mthp: BTreeMap<String, OrderStats>,
    /// Where written-back pages go: "none", "file", "redis", "redis-cluster".
    pub writeback_target: &'static str,
    /// Slots the device wrote and read (packed objects: a slot holds parts
    /// of several pages), for every instance sharing it.
    pub device_slots_written: u64,
    pub device_slots_read: u64,
    /// Service time of each load's device read (all its stretches of slots
    /// in one call), the tier's share of a fault served from it.
    pub swap_read_latency_us: crate::region::LatencySummary,
    /// The far tier's own figures (remote targets only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::swap::RemoteStats>,
}

impl ZswapStats {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("stats serialise")
    }
}

impl Counters {
    pub fn snapshot(&self) -> ZswapStats {
        let g = |c: &AtomicU64| c.load(Relaxed);
        let mut mthp = BTreeMap::new();
        for order in 1..=MAX_ORDER as usize {
            let o = OrderStats {
                zswpout: g(&self.order_zswpout[order]),
                zswpin: g(&self.order_zswpin[order]),
                store_fail: g(&self.order_store_fail[order]),
            };
            if o != OrderStats::default() {
                mthp.insert(format!("hugepages-{}kB", 4usize << order), o);
            }
        }
        ZswapStats {
            zswpout: g(&self.zswpout),
            zswpin: g(&self.zswpin),
            zswpwb: g(&self.zswpwb),
            same_filled_pages: g(&self.same_filled_pages),
            incompressible_pages: g(&self.incompressible_pages),
            compressed_bytes: g(&self.compressed_bytes),
            pool_limit_hit: g(&self.pool_limit_hit),
            reject_compress_poor: g(&self.reject_compress_poor),
            reject_compress_fail: g(&self.reject_compress_fail),
            reject_alloc_fail: g(&self.reject_alloc_fail),
            reject_reclaim_fail: g(&self.reject_reclaim_fail),
            decompress_fail: g(&self.decompress_fail),
            checksum_fail: g(&self.checksum_fail),
            seal_fail: g(&self.seal_fail),
            invalidated_pages: g(&self.invalidated_pages),
            written_back_pages: g(&self.written_back_pages),
            pswpout: g(&self.pswpout),
            pswpin: g(&self.pswpin),
            swap_reads: g(&self.swap_reads),
            promoted_pages: g(&self.promoted_pages),
            clean_dropped: g(&self.clean_dropped),
            device_pages: g(&self.device_pages),
            inherited_pages: g(&self.inherited_pages),
            shrink_scanned: g(&self.shrink_scanned),
            shrink_rotated: g(&self.shrink_rotated),
            shrink_stop_protected: g(&self.shrink_stop_protected),
            shrink_stop_loading: g(&self.shrink_stop_loading),
            shrink_runs: g(&self.shrink_runs),
            recompressed_pages: g(&self.recompressed_pages),
            recompress_poor: g(&self.recompress_poor),
            mthp,
            ..Default::default()
        }
    }
}

impl super::Zswap {
    pub fn stats(&self) -> ZswapStats {
        let mut s = self.counters.snapshot();
        s.stored_pages = self.stored_pages();
        s.pool_total_size = self.pool.total_size();
        s.max_pool_bytes = self.limit.max();
        s.lru_pages = self.tree.lru.len();
        s.clean_pages = self.tree.clean_len();
        s.kept_pages = self.tree.kept_len();
        s.swap_slots = self.swap_map.as_ref().map_or(0, |m| m.used());
        s.shrink_protected = self.tree.lru.protected();
        s.psi_active = self.shrinker_psi_active();
        s.tree_locks = self.tree.lock_count();
        s.tree_bytes = self.tree.heap_bytes();
        let dev = self.device.as_deref();
        s.writeback_target = dev.map_or("none", |d| d.target_kind());
        if let Some(st) = dev.map(|d| d.stats()) {
            s.device_slots_written = st.pswpout;
            s.device_slots_read = st.pswpin;
            s.remote = st.remote;
        }
        s.swap_read_latency_us = self.read_latency.summary();
        s
    }
}
