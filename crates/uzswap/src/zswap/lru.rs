//! The LRU of compressed entries (kernel: the zswap list_lru) and the
//! protected-region estimate of the shrinker (seed 003).
//!
//! # Shape: a per-shard CLOCK ring, merged by a global sequence
//! Every tree shard keeps, next to its map and under the same lock, a ring
//! of `(key, seq)` nodes in insertion order. `seq` comes from one counter
//! per instance, so the rings together are one LRU: the globally oldest
//! node is at the head of the ring whose head has the smallest `seq`, and
//! each shard publishes its head's `seq` in an atomic (`heads`) so the
//! shrinker finds that ring without taking 64 locks.
//!
//! Removal is lazy. A node is live only while the entry under its key
//! carries the same `seq` (`ZswapEntry::lru_seq`); a load, invalidate,
//! replacement or writeback simply leaves a stale node behind, which the
//! shrinker drops when it reaches it, and a ring that grows past twice its
//! shard's map is filtered in place. Rotation (second chance) gives the
//! entry a new `seq` and pushes a new node at the tail. So every LRU
//! operation is O(1) amortised and needs only the shard lock the caller
//! already holds: no second lock on the store and load paths, no intrusive
//! list, no node pointers that could dangle.
//!
//! Why not one global `Mutex<List>` of keys: every store would take a second,
//! instance-wide lock; stale-node filtering would need the shard locks under
//! the list lock (a lock-order inversion with the store path) or a copy of
//! the tree's knowledge. Folios live in one shard, so their pages also sit
//! next to each other in one ring, which is what writeback wants for
//! contiguous slots.
//!
//! # Locking
//! Ring: the shard lock (it lives in the shard). `heads` and the counters
//! here: atomics, updated under the shard lock, read without it (a stale
//! head only makes the shrinker pick a slightly younger ring for one step).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// One LRU node: the key and the `lru_seq` of the entry it was made for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    pub key: u64,
    pub seq: u64,
}

/// One shard's ring, oldest first.
#[derive(Default)]
pub(crate) struct ShardLru {
    pub ring: VecDeque<Node>,
}

/// No node: the head value of an empty ring.
pub(crate) const EMPTY: u64 = u64::MAX;

/// Instance-wide LRU figures.
pub(crate) struct Lru {
    next_seq: AtomicU64,
    /// Entries on the LRU (pool entries in the tree), the list_lru count.
    nr: AtomicU64,
    /// Estimate of warm entries the shrinker should leave alone
    /// (kernel: lruvec->nr_zswap_protected).
    protected: AtomicU64,
    heads: Box<[AtomicU64]>,
}

impl Lru {
    pub fn new(shards: usize) -> Self {
        Lru {
            next_seq: AtomicU64::new(1),
            nr: AtomicU64::new(0),
            protected: AtomicU64::new(0),
            heads: (0..shards).map(|_| AtomicU64::new(EMPTY)).collect(),
        }
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Relaxed)
    }

    pub fn len(&self) -> u64 {
        self.nr.load(Relaxed)
    }

    pub fn protected(&self) -> u64 {
        self.protected.load(Relaxed)
    }

    pub fn publish_head(&self, shard: usize, head: Option<&Node>) {
        self.heads[shard].store(head.map_or(EMPTY, |n| n.seq), Relaxed);
    }

    /// The `seq` below which an entry is among the oldest `n` on the LRU,
    /// taking seqs to be spread evenly from the oldest head to the next
    /// (stale nodes make the oldest head older: a bound a little wide).
    pub fn tail_seq(&self, n: u64) -> u64 {
        let oldest = self
            .heads
            .iter()
            .map(|h| h.load(Relaxed))
            .min()
            .unwrap_or(EMPTY);
        let (next, len) = (self.next_seq.load(Relaxed), self.len());
        if oldest == EMPTY || len == 0 {
            return 0;
        }
        let span = next.saturating_sub(oldest) as u128;
        oldest + (span * n.min(len) as u128 / len as u128) as u64
    }

    /// The shard whose ring holds the oldest node, and the oldest head of
    /// the other shards (nodes up to it may be taken from this ring in one
    /// go without breaking global LRU order).
    pub fn oldest_shard(&self) -> Option<(usize, u64)> {
        let (mut best, mut best_seq, mut second) = (usize::MAX, EMPTY, EMPTY);
        for (i, h) in self.heads.iter().enumerate() {
            let s = h.load(Relaxed);
            if s < best_seq {
                second = best_seq;
                best_seq = s;
                best = i;
            } else if s < second {
                second = s;
            }
        }
        (best_seq != EMPTY).then_some((best, second))
    }

    /// An entry joined the LRU (`n` of them).
    pub fn added(&self, n: u64) {
        self.nr.fetch_add(n, Relaxed);
        self.protect(n);
    }

    pub fn removed(&self, n: u64) {
        self.nr.fetch_sub(n, Relaxed);
    }

    /// Seed 003: recent stores, rotations and refaults are warm; the
    /// estimate decays (halves) once it exceeds a quarter of the LRU, so it
    /// follows the workload instead of growing without bound.
    pub fn protect(&self, n: u64) {
        let p = self.protected.fetch_add(n, Relaxed) + n;
        if p > self.len() / 4 {
            // Racy halving is fine: this is an estimate.
            let _ = self
                .protected
                .fetch_update(Relaxed, Relaxed, |v| (v > self.len() / 4).then_some(v / 2));
        }
    }
}
