//! invalidate: drop stored pages (kernel: zswap_invalidate), e.g. when the
//! owner frees or overwrites the memory.

use super::entry::SwapEntry;
use super::stats::Counters;
use super::Zswap;
use crate::MAX_ORDER;

impl Zswap {
    /// Whether `entry` is stored and its data is on the swap device (a load
    /// of it reads the device). A hint: it may change right after.
    pub fn is_written_back(&self, entry: SwapEntry) -> bool {
        let shard = self.tree.lock(entry, 1);
        shard.get(entry).is_some_and(|e| e.slot().is_some())
    }

    /// Drop one page; true if it was stored.
    pub fn invalidate(&self, entry: SwapEntry) -> bool {
        let old = self.tree.lock(entry, 1).remove(entry);
        match old {
            Some(e) => {
                self.account_remove(&e);
                self.release(&e);
                Counters::add(&self.counters.invalidated_pages, 1);
                true
            }
            None => false,
        }
    }

    /// Drop `npages` pages from `first`; returns how many were stored.
    pub fn invalidate_range(&self, first: SwapEntry, npages: u64) -> u64 {
        let group = 1u64 << MAX_ORDER;
        let mut removed = Vec::new();
        let mut k = first.index();
        let end = first.index() + npages;
        while k < end {
            // One shard lock per 2 MiB group.
            let stop = ((k / group) + 1) * group;
            let stop = stop.min(end);
            let start = SwapEntry::new(first.region(), k);
            let mut shard = self.tree.lock(start, stop - k);
            for i in 0..stop - k {
                if let Some(e) = shard.remove(start.offset(i)) {
                    removed.push(e);
                }
            }
            drop(shard);
            k = stop;
        }
        for e in &removed {
            self.account_remove(e);
            self.release(e);
        }
        Counters::add(&self.counters.invalidated_pages, removed.len() as u64);
        removed.len() as u64
    }

    /// Drop every page of a region (the region is going away).
    pub fn invalidate_region(&self, region: u32) -> u64 {
        let mut removed = Vec::new();
        self.tree.for_each_shard(|shard| {
            shard.drain_matching(|k| k.region() == region, |_, e| removed.push(e));
        });
        for e in &removed {
            self.account_remove(e);
            self.release(e);
        }
        Counters::add(&self.counters.invalidated_pages, removed.len() as u64);
        removed.len() as u64
    }

    /// Is `entry` stored?
    pub fn contains(&self, entry: SwapEntry) -> bool {
        self.tree.lock(entry, 1).get(entry).is_some()
    }

    /// End a `LoadMode::KeepPinned` hold on the folio of `2^order` pages at
    /// `first`: its pool entries go back on the LRU as the most recent.
    /// True if every page of the folio is still stored (pool, same-filled
    /// or device), so the caller may drop its own copy; false (nothing
    /// changed) if a page is missing.
    pub fn unpin_folio(&self, first: SwapEntry, order: u32) -> bool {
        let n = 1u64 << order.min(crate::MAX_ORDER);
        let mut shard = self.tree.lock(first, n);
        if !(0..n).all(|i| shard.get(first.offset(i)).is_some()) {
            return false;
        }
        for i in 0..n {
            shard.unpin(first.offset(i));
        }
        true
    }

    /// Whether every page of the folio of `2^order` pages at `first` is
    /// stored in memory (pool or same-filled), none of it written back: a
    /// caller holding a clean copy of the folio can drop its own copy and
    /// fault it back without device I/O.
    pub fn in_memory(&self, first: SwapEntry, order: u32) -> bool {
        let n = 1u64 << order.min(crate::MAX_ORDER);
        let shard = self.tree.lock(first, n);
        (0..n).all(|i| {
            shard
                .get(first.offset(i))
                .is_some_and(|e| e.slot().is_none())
        })
    }
}

impl Drop for Zswap {
    fn drop(&mut self) {
        // The shrinker thread first: it must not walk a tree being emptied.
        self.stop_shrinker();
        // Free every pool object (the pool then unmaps its spans) and every
        // device slot (the device may be shared with other instances).
        let mut removed = Vec::new();
        self.tree.for_each_shard(|shard| {
            shard.drain_matching(|_| true, |_, e| removed.push(e));
        });
        for e in &removed {
            self.release(e);
        }
    }
}
