//! The tree: swap entry -> zswap entry (kernel: the per-swap-type xarrays).
//!
//! Sharded by 2 MiB-aligned key group, so every folio (order <= 9, naturally
//! aligned) lives in one shard and a folio store or load takes one lock once.
//! Lock rule: at most one shard lock held at a time; never call into the batch
//! engine while holding one except for keep-copy loads (see `load`).

use super::entry::{SwapEntry, ZswapEntry};
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 64;
/// log2 of the pages in one shard group (a 2 MiB folio).
const GROUP_SHIFT: u32 = crate::MAX_ORDER;

pub(crate) type Map = FxHashMap<u64, ZswapEntry>;

pub(crate) struct Tree {
    shards: Box<[Mutex<Map>]>,
    len: AtomicU64,
}

impl Tree {
    pub fn new() -> Self {
        Tree {
            shards: (0..SHARDS).map(|_| Mutex::new(Map::default())).collect(),
            len: AtomicU64::new(0),
        }
    }

    fn shard_of(key: SwapEntry) -> usize {
        // Fibonacci hashing of the group number spreads regions and groups.
        let g = (key.0 >> GROUP_SHIFT).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (g >> 58) as usize % SHARDS
    }

    /// Lock the shard holding `first .. first + n` (one folio: same shard).
    pub fn lock(&self, first: SwapEntry, n: u64) -> ShardGuard<'_> {
        debug_assert!(n >= 1);
        debug_assert_eq!(Self::shard_of(first), Self::shard_of(first.offset(n - 1)));
        ShardGuard {
            map: self.shards[Self::shard_of(first)].lock(),
            len: &self.len,
        }
    }

    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    /// Visit every shard in turn (stats, teardown). Takes each lock briefly.
    pub fn for_each_shard(&self, mut f: impl FnMut(&mut ShardGuard<'_>)) {
        for s in self.shards.iter() {
            let mut g = ShardGuard {
                map: s.lock(),
                len: &self.len,
            };
            f(&mut g);
        }
    }
}

/// One locked shard. Keeps the tree's entry count in step with the map.
pub(crate) struct ShardGuard<'a> {
    map: MutexGuard<'a, Map>,
    len: &'a AtomicU64,
}

impl ShardGuard<'_> {
    pub fn get(&self, key: SwapEntry) -> Option<&ZswapEntry> {
        self.map.get(&key.0)
    }
    pub fn get_mut(&mut self, key: SwapEntry) -> Option<&mut ZswapEntry> {
        self.map.get_mut(&key.0)
    }
    pub fn insert(&mut self, key: SwapEntry, e: ZswapEntry) -> Option<ZswapEntry> {
        let old = self.map.insert(key.0, e);
        if old.is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        old
    }
    pub fn remove(&mut self, key: SwapEntry) -> Option<ZswapEntry> {
        let old = self.map.remove(&key.0);
        if old.is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        old
    }
    /// Remove every key matching `pred`, handing each removed entry to `out`.
    pub fn drain_matching(
        &mut self,
        mut pred: impl FnMut(SwapEntry) -> bool,
        mut out: impl FnMut(SwapEntry, ZswapEntry),
    ) {
        let len = self.len;
        self.map.retain(|&k, e| {
            let key = SwapEntry(k);
            if pred(key) {
                out(key, *e);
                len.fetch_sub(1, Ordering::Relaxed);
                false
            } else {
                true
            }
        });
    }
}
