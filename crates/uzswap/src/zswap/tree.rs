//! The tree: swap entry -> zswap entry (kernel: the per-swap-type xarrays).
//!
//! Sharded by 2 MiB-aligned key group, so every folio (order <= 9, naturally
//! aligned) lives in one shard and a folio store or load takes one lock once.
//! Each shard also holds its part of the LRU (see `lru`) and the key ranges
//! whose exclusive load is in flight (the shrinker stops when it meets one).
//! Lock rule: at most one shard lock held at a time; never call into the batch
//! engine while holding one except for keep-copy loads (see `load`).
//!
//! The guard keeps the LRU in step with the map: inserting a pool entry gives
//! it a fresh `lru_seq` and a node at the ring's tail; removing or replacing
//! one leaves its node stale (see `lru`); the count of LRU members and the
//! published ring head are updated here and nowhere else.
//!
//! Clean copies (`ZswapEntry::clean`) sit on a second ring per shard, in the
//! order they became clean, with the same lazy removal: a node is live while
//! its entry is still clean and carries its `seq`. `Tree::clean` counts them.
//!
//! Within a shard the map keeps entries in blocks of 16 consecutive keys
//! (`Map`), the xarray's idea at one level: one hash slot per block and the
//! block's entries packed in key order behind it.
//!
//! Pool entries stored as is (they did not compress) are also on a third
//! ring, `raw`, with the same node as on the LRU ring: writeback takes them
//! before anything else (`Zswap::writeback_walk`), because a plain page
//! holds a whole page of pool for what a compressed one holds in half or
//! less, and costs the same device read to bring back. `Tree::raw_shards`
//! has a bit per shard whose raw ring is not empty (published on unlock,
//! like the LRU heads).

use super::entry::{SwapEntry, ZswapEntry};
use super::lru::{Lru, Node, ShardLru};
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicU64, Ordering};

const SHARDS: usize = 64;
// `Tree::raw_shards` has a bit per shard.
const _: () = assert!(SHARDS <= 64);
/// log2 of the pages in one shard group (a 2 MiB folio).
const GROUP_SHIFT: u32 = crate::MAX_ORDER;
/// Stale nodes a ring may carry beyond twice its map before it is filtered.
const RING_SLACK: usize = 64;

/// log2 of the keys in one block of the map.
const BLOCK_SHIFT: u32 = 4;
const BLOCK_KEYS: u64 = 1 << BLOCK_SHIFT;

/// Up to 16 entries of consecutive keys, in key order: bit `i` of `mask`
/// says whether key `block * 16 + i` is present, and its entry is at the
/// number of lower bits set.
#[derive(Default)]
struct Block {
    mask: u16,
    entries: Vec<ZswapEntry>,
}

impl Block {
    /// Where key `off` of the block is or would go: the entries before it.
    fn rank(&self, off: u32) -> usize {
        (self.mask & ((1u16 << off) - 1)).count_ones() as usize
    }

    fn index(&self, off: u32) -> Option<usize> {
        (self.mask & (1 << off) != 0).then(|| self.rank(off))
    }
}

/// A shard's entries by key, in blocks of 16 consecutive keys (one hash
/// slot per block, the entries packed behind it), where one slot per key
/// held the key and the entry at about half occupancy: pages are stored a
/// folio at a time and come back a few at a time, so blocks are mostly
/// full, and a key costs its entry and a sixteenth of a slot instead of
/// about 86 bytes (`bench programs`' threads program: the map 4.7 MiB for
/// 56 k entries before). A folio of up to 16 pages is one lookup.
#[derive(Default)]
pub(crate) struct Map {
    blocks: FxHashMap<u64, Block>,
    len: usize,
    /// Entry slots the blocks' vectors hold (their capacity), for
    /// `heap_bytes` without a walk.
    cap: usize,
}

impl Map {
    fn split(key: u64) -> (u64, u32) {
        (key >> BLOCK_SHIFT, (key & (BLOCK_KEYS - 1)) as u32)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, key: u64) -> Option<&ZswapEntry> {
        let (b, off) = Self::split(key);
        let blk = self.blocks.get(&b)?;
        blk.index(off).map(|i| &blk.entries[i])
    }

    pub fn get_mut(&mut self, key: u64) -> Option<&mut ZswapEntry> {
        let (b, off) = Self::split(key);
        let blk = self.blocks.get_mut(&b)?;
        blk.index(off).map(|i| &mut blk.entries[i])
    }

    pub fn insert(&mut self, key: u64, e: ZswapEntry) -> Option<ZswapEntry> {
        let (b, off) = Self::split(key);
        let blk = self.blocks.entry(b).or_default();
        if let Some(i) = blk.index(off) {
            return Some(std::mem::replace(&mut blk.entries[i], e));
        }
        let i = blk.rank(off);
        let cap = blk.entries.capacity();
        blk.entries.insert(i, e);
        blk.mask |= 1 << off;
        self.cap = self.cap + blk.entries.capacity() - cap;
        self.len += 1;
        None
    }

    pub fn remove(&mut self, key: u64) -> Option<ZswapEntry> {
        let (b, off) = Self::split(key);
        let blk = self.blocks.get_mut(&b)?;
        let i = blk.index(off)?;
        let cap = blk.entries.capacity();
        let e = blk.entries.remove(i);
        blk.mask &= !(1 << off);
        self.len -= 1;
        if blk.mask == 0 {
            self.cap -= cap;
            self.blocks.remove(&b);
        } else {
            shrink_block(blk);
            self.cap = self.cap + blk.entries.capacity() - cap;
        }
        Some(e)
    }

    /// Keep the entries for which `f` says so, in key order per block.
    pub fn retain(&mut self, mut f: impl FnMut(u64, &mut ZswapEntry) -> bool) {
        let (mut len, mut cap) = (0, 0);
        self.blocks.retain(|&b, blk| {
            let mut bits = blk.mask;
            let mut mask = 0u16;
            blk.entries.retain_mut(|e| {
                let off = bits.trailing_zeros();
                bits &= bits - 1;
                let keep = f(b << BLOCK_SHIFT | u64::from(off), e);
                if keep {
                    mask |= 1 << off;
                }
                keep
            });
            blk.mask = mask;
            shrink_block(blk);
            len += blk.entries.len();
            cap += blk.entries.capacity();
            mask != 0
        });
        self.len = len;
        self.cap = cap;
    }

    /// Give the blocks' table back down to twice its use where it is used
    /// under a quarter (a hash table does not shrink by itself).
    fn maybe_shrink(&mut self) {
        if self.blocks.capacity() > 4 * self.blocks.len() + RING_SLACK {
            self.blocks.shrink_to(2 * self.blocks.len());
        }
    }

    /// Heap bytes by capacity: the table (a power of two of buckets, at
    /// most 7/8 used, each a slot and a control byte), the entries' slots,
    /// and an allocator header per block's vector.
    fn heap_bytes(&self) -> u64 {
        let slot = std::mem::size_of::<(u64, Block)>() + 1;
        let buckets = match self.blocks.capacity() {
            0 => 0,
            c => (c * 8 / 7).next_power_of_two(),
        };
        (buckets * slot + self.cap * std::mem::size_of::<ZswapEntry>() + self.blocks.len() * 16)
            as u64
    }
}

/// Whether `n` is the live LRU node of its entry in `map` (a node of the
/// raw ring is the same node).
fn live_on_lru(map: &Map, n: &Node) -> bool {
    matches!(map.get(n.key), Some(e) if e.lru_seq == n.seq && e.on_lru())
}

/// Give a block's vector back down to twice its length where it holds under
/// a quarter of its capacity.
fn shrink_block(blk: &mut Block) {
    if blk.entries.capacity() >= 4 && blk.entries.len() <= blk.entries.capacity() / 4 {
        blk.entries.shrink_to(2 * blk.entries.len());
    }
}

#[derive(Default)]
pub(crate) struct Shard {
    map: Map,
    lru: ShardLru,
    /// Clean copies, oldest first (nodes as in `lru`).
    clean: std::collections::VecDeque<Node>,
    /// LRU entries stored as is, oldest first (their LRU nodes again).
    raw: std::collections::VecDeque<Node>,
    /// (first key, pages) of exclusive loads in flight in this shard.
    loading: Vec<(u64, u64)>,
}

pub(crate) struct Tree {
    shards: Box<[Mutex<Shard>]>,
    /// Lock acquisitions per shard (`Tree::lock_count`), written only by the
    /// holder of that shard's lock, so a plain load and store suffice: no
    /// locked instruction is added to the path it counts. Counted because
    /// seed 000's point is how many tree operations a folio costs.
    locks: Box<[AtomicU64]>,
    len: AtomicU64,
    /// Clean copies in the tree (pool entries with `clean` set).
    clean: AtomicU64,
    /// Written-back entries kept as clean copies (device entries with
    /// `clean` set): on no ring, since freeing them makes no room.
    kept: AtomicU64,
    /// Bit i: shard i's raw ring has nodes (live or not).
    raw_shards: AtomicU64,
    pub lru: Lru,
}

impl Tree {
    pub fn new() -> Self {
        Tree {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            locks: (0..SHARDS).map(|_| AtomicU64::new(0)).collect(),
            len: AtomicU64::new(0),
            clean: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            raw_shards: AtomicU64::new(0),
            lru: Lru::new(SHARDS),
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
        self.lock_index(Self::shard_of(first))
    }

    /// Lock shard number `idx` (the shrinker walks shards by index).
    pub fn lock_index(&self, idx: usize) -> ShardGuard<'_> {
        let shard = self.shards[idx].lock();
        let c = &self.locks[idx];
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        ShardGuard {
            shard,
            tree: self,
            idx,
        }
    }

    /// Shard lock acquisitions so far, all shards (a snapshot).
    pub fn lock_count(&self) -> u64 {
        self.locks.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Entries in the tree (pool, same-filled and written back).
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    /// Clean copies in the tree.
    pub fn clean_len(&self) -> u64 {
        self.clean.load(Ordering::Relaxed)
    }

    /// Written-back entries kept as clean copies of pages the caller holds.
    pub fn kept_len(&self) -> u64 {
        self.kept.load(Ordering::Relaxed)
    }

    /// A shard at or after `from` (in turn) whose raw ring has nodes.
    pub fn raw_shard(&self, from: usize) -> Option<usize> {
        let bits = self.raw_shards.load(Ordering::Relaxed);
        if bits == 0 {
            return None;
        }
        let from = (from % SHARDS) as u32;
        let r = bits.rotate_right(from);
        Some(((r.trailing_zeros() + from) % SHARDS as u32) as usize)
    }

    /// Shards, for walks that visit them by index.
    pub const SHARDS: usize = SHARDS;

    /// Heap bytes the shards' maps and rings hold now, by their capacity
    /// (what the allocator gave them, not what they use): the cache's own
    /// memory for its entries, outside the pool and outside the budget.
    /// Takes each shard lock briefly.
    pub fn heap_bytes(&self) -> u64 {
        let node = std::mem::size_of::<Node>();
        let mut b = 0;
        for s in self.shards.iter() {
            let s = s.lock();
            b += s.map.heap_bytes();
            b += ((s.lru.ring.capacity() + s.clean.capacity() + s.raw.capacity()) * node) as u64;
        }
        b
    }

    /// Visit every shard in turn (stats, teardown). Takes each lock briefly.
    pub fn for_each_shard(&self, mut f: impl FnMut(&mut ShardGuard<'_>)) {
        for i in 0..self.shards.len() {
            let mut g = self.lock_index(i);
            f(&mut g);
        }
    }
}

/// The LRU and clean counts of an entry that left the map.
fn left(tree: &Tree, o: &ZswapEntry) {
    if o.on_lru() {
        tree.lru.removed(1);
    }
    if o.clean {
        clean_count(tree, o).fetch_sub(1, Ordering::Relaxed);
    }
}

/// The count a clean entry is in: a pool entry's `clean`, a written-back
/// or inherited one's `kept`.
fn clean_count<'t>(tree: &'t Tree, e: &ZswapEntry) -> &'t AtomicU64 {
    if e.holds_no_memory() {
        &tree.kept
    } else {
        &tree.clean
    }
}

/// One locked shard. Keeps the tree's entry count and the LRU in step with
/// the map.
pub(crate) struct ShardGuard<'a> {
    shard: MutexGuard<'a, Shard>,
    tree: &'a Tree,
    idx: usize,
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        self.tree
            .lru
            .publish_head(self.idx, self.shard.lru.ring.front());
        // Every unlock of every shard passes here: write the shared word
        // only when this shard's bit changes, so stores and loads on other
        // CPUs do not bounce its cache line. Bit `idx` is written only here,
        // under this shard's lock (still held: the guard field drops after
        // this body), so the check cannot race with another writer of it.
        let bit = 1u64 << self.idx;
        let has = !self.shard.raw.is_empty();
        let had = self.tree.raw_shards.load(Ordering::Relaxed) & bit != 0;
        if has && !had {
            self.tree.raw_shards.fetch_or(bit, Ordering::Relaxed);
        } else if had && !has {
            self.tree.raw_shards.fetch_and(!bit, Ordering::Relaxed);
        }
    }
}

impl ShardGuard<'_> {
    pub fn get(&self, key: SwapEntry) -> Option<&ZswapEntry> {
        self.shard.map.get(key.0)
    }
    /// Mutable access for fields that do not decide LRU membership (the
    /// referenced bit, a deliberate corruption); payload kind and `lru_seq`
    /// change only through the methods below.
    pub fn get_mut(&mut self, key: SwapEntry) -> Option<&mut ZswapEntry> {
        self.shard.map.get_mut(key.0)
    }
    pub fn insert(&mut self, key: SwapEntry, mut e: ZswapEntry) -> Option<ZswapEntry> {
        e.lru_seq = 0;
        e.pinned = false;
        e.clean = false;
        if e.on_lru() {
            e.lru_seq = self.tree.lru.next_seq();
            self.push_node(key, &e);
            self.tree.lru.added(1);
        }
        let old = self.shard.map.insert(key.0, e);
        match &old {
            None => {
                self.tree.len.fetch_add(1, Ordering::Relaxed);
            }
            Some(o) => left(self.tree, o),
        }
        self.maybe_filter_ring();
        old
    }
    pub fn remove(&mut self, key: SwapEntry) -> Option<ZswapEntry> {
        let old = self.shard.map.remove(key.0);
        if let Some(o) = &old {
            self.tree.len.fetch_sub(1, Ordering::Relaxed);
            left(self.tree, o);
            self.maybe_filter_ring();
        }
        old
    }

    /// Remove every key matching `pred`, handing each removed entry to `out`.
    pub fn drain_matching(
        &mut self,
        mut pred: impl FnMut(SwapEntry) -> bool,
        mut out: impl FnMut(SwapEntry, ZswapEntry),
    ) {
        let tree = self.tree;
        self.shard.map.retain(|k, e| {
            let key = SwapEntry(k);
            if pred(key) {
                out(key, *e);
                tree.len.fetch_sub(1, Ordering::Relaxed);
                left(tree, e);
                false
            } else {
                true
            }
        });
        self.maybe_filter_ring();
    }

    /// Put the LRU node of `e` (under `key`, its `lru_seq` set) at the
    /// ring's tail, and at the raw ring's if it is stored as is.
    fn push_node(&mut self, key: SwapEntry, e: &ZswapEntry) {
        let node = Node {
            key: key.0,
            seq: e.lru_seq,
        };
        let s = &mut *self.shard;
        // A full ring filters its stale nodes instead of doubling where a
        // quarter of it at least is stale (at most `map.len()` is live):
        // the ring is memory outside the budget, and doubling one that
        // is mostly stale held 1.7 nodes per live one under a random
        // workload (docs/BENCHMARKS.md, "uzswap's own memory").
        if s.lru.ring.len() == s.lru.ring.capacity()
            && s.lru.ring.len().saturating_sub(s.map.len()) >= s.lru.ring.len() / 4
        {
            let map = &s.map;
            s.lru.ring.retain(|n| live_on_lru(map, n));
        }
        s.lru.ring.push_back(node);
        if e.is_raw() {
            self.shard.raw.push_back(node);
        }
    }

    /// Take the raw ring's oldest live node (stale ones on the way are
    /// dropped). Its LRU node stays where it is: writeback that switches
    /// the entry leaves both stale.
    pub fn pop_raw(&mut self) -> Option<Node> {
        while let Some(n) = self.shard.raw.pop_front() {
            let live_raw = |e: &ZswapEntry| e.lru_seq == n.seq && e.on_lru() && e.is_raw();
            if self.shard.map.get(n.key).is_some_and(live_raw) {
                return Some(n);
            }
        }
        None
    }

    /// Take the ring's oldest node if its `seq` is at most `max_seq`.
    pub fn pop_lru(&mut self, max_seq: u64) -> Option<Node> {
        match self.shard.lru.ring.front() {
            Some(n) if n.seq <= max_seq => self.shard.lru.ring.pop_front(),
            _ => None,
        }
    }

    /// The ring's oldest node, left in place.
    pub fn peek_lru(&self) -> Option<Node> {
        self.shard.lru.ring.front().copied()
    }

    /// Is `node` the live node of the entry under its key?
    pub fn is_live(&self, node: Node) -> bool {
        live_on_lru(&self.shard.map, &node)
    }

    /// Give the (live, pool) entry under `key` a new node at the tail. Used
    /// for second chance and to put back an entry writeback gave up on.
    pub fn requeue(&mut self, key: SwapEntry) {
        let seq = self.tree.lru.next_seq();
        if let Some(e) = self.shard.map.get_mut(key.0) {
            debug_assert!(e.on_lru());
            e.lru_seq = seq;
            let e = *e;
            self.push_node(key, &e);
        }
    }

    /// Take a pool entry off the LRU while its page is held by the caller
    /// (its node goes stale). False if it is not on the LRU.
    pub fn pin(&mut self, key: SwapEntry) -> bool {
        match self.shard.map.get_mut(key.0) {
            Some(e) if e.on_lru() => {
                e.pinned = true;
                e.lru_seq = 0;
                self.tree.lru.removed(1);
                true
            }
            _ => false,
        }
    }

    /// Make the LRU entry under `key` a clean copy: off the LRU, at the tail
    /// of the clean ring; or a written-back or inherited entry a kept one (counted, on
    /// no ring: freeing it makes no room). False if it is neither
    /// (same-filled, pinned, already clean, absent).
    pub fn mark_clean(&mut self, key: SwapEntry) -> bool {
        let seq = self.tree.lru.next_seq();
        match self.shard.map.get_mut(key.0) {
            Some(e) if e.on_lru() => {
                e.clean = true;
                e.lru_seq = seq;
                self.shard.clean.push_back(Node { key: key.0, seq });
                self.tree.lru.removed(1);
                self.tree.clean.fetch_add(1, Ordering::Relaxed);
                true
            }
            Some(e) if e.holds_no_memory() && !e.clean => {
                e.clean = true;
                self.tree.kept.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Whether `key` is stored; a clean copy under it becomes an ordinary
    /// entry again, the most recent on the LRU.
    pub fn claim(&mut self, key: SwapEntry) -> bool {
        let seq = self.tree.lru.next_seq();
        let Some(e) = self.shard.map.get_mut(key.0) else {
            return false;
        };
        if e.clean && e.holds_no_memory() {
            e.clean = false;
            self.tree.kept.fetch_sub(1, Ordering::Relaxed);
        } else if e.clean {
            e.clean = false;
            e.lru_seq = seq;
            let e = *e;
            self.push_node(key, &e);
            self.tree.lru.added(1);
            self.tree.clean.fetch_sub(1, Ordering::Relaxed);
        }
        true
    }

    /// Take the oldest clean copy out of the map (stale nodes on the way
    /// are dropped).
    pub fn pop_clean(&mut self) -> Option<(SwapEntry, ZswapEntry)> {
        while let Some(n) = self.shard.clean.pop_front() {
            if matches!(self.shard.map.get(n.key), Some(e) if e.clean && e.lru_seq == n.seq) {
                let key = SwapEntry(n.key);
                return self.remove(key).map(|e| (key, e));
            }
        }
        None
    }

    /// Switch a written-back entry to the pool object a pinned load just
    /// made of it; it stays pinned (off the LRU).
    pub fn set_promoted(&mut self, key: SwapEntry, payload: super::entry::Payload) {
        let e = self
            .shard
            .map
            .get_mut(key.0)
            .expect("caller holds the entry");
        debug_assert!(e.slot().is_some() && matches!(payload, super::entry::Payload::Pool { .. }));
        if std::mem::take(&mut e.clean) {
            self.tree.kept.fetch_sub(1, Ordering::Relaxed);
        }
        e.payload = payload;
        e.pinned = true;
        e.lru_seq = 0;
    }

    /// Put a pinned entry back on the LRU as its most recent entry.
    pub fn unpin(&mut self, key: SwapEntry) {
        let seq = self.tree.lru.next_seq();
        if let Some(e) = self.shard.map.get_mut(key.0) {
            if e.pinned {
                e.pinned = false;
                e.lru_seq = seq;
                let e = *e;
                self.push_node(key, &e);
                self.tree.lru.added(1);
            }
        }
    }

    /// Switch a pool entry to its written-back form; it leaves the LRU.
    pub fn set_written_back(&mut self, key: SwapEntry, payload: super::entry::Payload, csum: u32) {
        let e = self
            .shard
            .map
            .get_mut(key.0)
            .expect("caller checked the entry");
        debug_assert!(e.on_lru() && matches!(payload, super::entry::Payload::Device { .. }));
        e.payload = payload;
        e.csum = csum;
        e.lru_seq = 0;
        self.tree.lru.removed(1);
    }

    /// Mark `first .. first + n` as being loaded exclusively (entries are out
    /// of the map meanwhile).
    pub fn begin_load(&mut self, first: SwapEntry, n: u64) {
        self.shard.loading.push((first.0, n));
    }
    pub fn end_load(&mut self, first: SwapEntry, n: u64) {
        if let Some(i) = self.shard.loading.iter().position(|&r| r == (first.0, n)) {
            self.shard.loading.swap_remove(i);
        }
    }
    pub fn is_loading(&self, key: u64) -> bool {
        self.shard
            .loading
            .iter()
            .any(|&(f, n)| key >= f && key < f + n)
    }

    /// Drop stale nodes once they outnumber the shard's entries: bounds the
    /// ring by the map, at O(1) amortised per insert or removal. The rings
    /// and the map also give memory back once they hold under a quarter
    /// of it (neither shrinks by itself): they are uzswap's own memory,
    /// outside the budget, and a shard whose pages were loaded back kept
    /// the capacity of its largest moment.
    fn maybe_filter_ring(&mut self) {
        let s = &mut *self.shard;
        if s.clean.len() > 2 * s.map.len() + RING_SLACK {
            let map = &s.map;
            s.clean
                .retain(|n| matches!(map.get(n.key), Some(e) if e.lru_seq == n.seq && e.clean));
            shrink_ring(&mut s.clean);
        }
        if s.raw.len() > 2 * s.map.len() + RING_SLACK {
            let map = &s.map;
            s.raw.retain(|n| live_on_lru(map, n));
            shrink_ring(&mut s.raw);
        }
        if s.lru.ring.len() > 2 * s.map.len() + RING_SLACK {
            let map = &s.map;
            s.lru.ring.retain(|n| live_on_lru(map, n));
            shrink_ring(&mut s.lru.ring);
        }
        s.map.maybe_shrink();
    }
}

/// Give a ring's memory back down to twice its length where it holds under
/// a quarter of it.
fn shrink_ring(ring: &mut std::collections::VecDeque<Node>) {
    if ring.capacity() > 4 * ring.len() + RING_SLACK {
        ring.shrink_to(2 * ring.len());
    }
}
