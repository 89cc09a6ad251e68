//! Clean copies (kernel analogue: a clean swap-cache page, which reclaim
//! drops without I/O because the swap slot already holds its data).
//!
//! A `LoadMode::KeepClean` load leaves the pool entries of a folio the
//! caller keeps unchanged in the cache as *clean copies*: they save a
//! recompression when the caller evicts the folio again, but while the
//! caller holds the pages they are duplicates that earn nothing. So they
//! sit off the LRU (never written back: that would spend I/O on data that
//! is in memory) on per-shard rings in the order they became clean, and
//! every path that needs pool room frees them first, oldest first, before
//! it writes a single unique page back.
//!
//! ```text
//!   pool entry (LRU) --load(KeepClean)--> clean --claim_clean--> pool entry (LRU)
//!                                           |--drop_clean / pool pressure--> absent
//!                                           +--invalidate / replace / load--> as any entry
//! ```
//! The caller's side of the contract: claim before relying on the copy
//! (claim and drop both run under the shard lock, so a claimed copy can no
//! longer be dropped), store afresh when the claim fails, invalidate when
//! the page changes.
//!
//! Locking: one shard lock at a time (the tree's rule); objects are freed
//! after it is released.

use super::entry::{Payload, SwapEntry};
use super::stats::Counters;
use super::tree::Tree;
use super::Zswap;

impl Zswap {
    /// Take back the clean copy of the folio of `2^order` pages at `first`
    /// (`LoadMode::KeepClean`): true if every page of it is still stored,
    /// and then its clean pool entries are ordinary entries again, the most
    /// recent on the LRU, so the caller may drop its own copy. False if the
    /// cache dropped part of it: the caller stores the folio afresh (which
    /// replaces what is left).
    pub fn claim_clean(&self, first: SwapEntry, order: u32) -> bool {
        let n = 1u64 << order.min(crate::MAX_ORDER);
        let mut shard = self.tree.lock(first, n);
        let mut all = true;
        for i in 0..n {
            all &= shard.claim(first.offset(i));
        }
        all
    }

    /// Clean copies the cache holds now (pages).
    pub fn clean_pages(&self) -> u64 {
        self.tree.clean_len()
    }

    /// Free clean copies, oldest first, until `bytes` of compressed objects
    /// are gone or none is left, then compact the pool so the freed space
    /// leaves `pool_total_size`. No I/O: their pages are held by the caller.
    /// Returns the compressed bytes freed.
    pub fn drop_clean(&self, bytes: u64) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        /// Entries taken from one shard per lock: a folio's worth.
        const BATCH: usize = 16;
        let mut freed = 0u64;
        let mut idle = 0;
        let mut batch = Vec::with_capacity(BATCH);
        while freed < bytes && self.tree.clean_len() > 0 && idle < Tree::SHARDS {
            // Shards in turn from a shared cursor: clean copies are spread
            // over the shards by key, so this takes them in about the order
            // they became clean.
            let idx = self.clean_cursor.fetch_add(1, Relaxed) % Tree::SHARDS;
            {
                let mut shard = self.tree.lock_index(idx);
                while batch.len() < BATCH {
                    match shard.pop_clean() {
                        Some((_, e)) => batch.push(e),
                        None => break,
                    }
                }
            }
            if batch.is_empty() {
                idle += 1;
                continue;
            }
            idle = 0;
            for e in batch.drain(..) {
                if let Payload::Pool { len, .. } = e.payload {
                    freed += len as u64;
                }
                self.account_remove(&e);
                self.release(&e);
                Counters::add(&self.counters.clean_dropped, 1);
            }
        }
        if freed > 0 {
            // Freed objects leave holes in their spans; give those back.
            self.pool.compact();
        }
        freed
    }
}
