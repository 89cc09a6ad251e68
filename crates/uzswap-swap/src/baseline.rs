//! The global-lock baseline: one slot bitmap for the whole device behind one
//! mutex, allocating next-fit from a rotating cursor (the pre-cluster
//! `scan_swap_map` with `si->lock` held throughout). Kept only so the
//! benchmarks measure the cluster allocator against it in the same run: by
//! itself (`bench alloc`) and behind a device a benchmark asks for
//! (`SwapDeviceConfig::baseline_allocator`, `bench seeds`).
//!
//! Locking: every operation takes the one lock for its whole duration.

use parking_lot::Mutex;

use crate::bitmap;
use crate::entry::{check_one_cluster, check_range, SlotError, SwapSlot};
use crate::{AllocStats, SlotAllocator, MAX_ORDER, SWAPFILE_CLUSTER};

struct Inner {
    map: Vec<u64>,
    /// Where the next scan starts (slot).
    cursor: usize,
    stats: AllocStats,
}

/// One bitmap, one lock.
pub struct GlobalLockAllocator {
    inner: Mutex<Inner>,
    nslots: u64,
}

impl GlobalLockAllocator {
    /// `nclusters * 512` slots, all free (clusters only fix the size, so the
    /// two allocators can be built alike).
    pub fn new(nclusters: usize) -> Self {
        let nslots = nclusters * SWAPFILE_CLUSTER;
        Self {
            inner: Mutex::new(Inner {
                map: vec![0; nslots / 64],
                cursor: 0,
                stats: AllocStats {
                    capacity: nslots as u64,
                    ..AllocStats::default()
                },
            }),
            nslots: nslots as u64,
        }
    }

    pub fn free_range(&self, start: SwapSlot, npages: u64) -> Result<(), SlotError> {
        check_range(start.0, npages, self.nslots)?;
        check_one_cluster(start.0, npages)?;
        let mut g = self.inner.lock();
        let (off, n) = (start.0 as usize, npages as usize);
        if !bitmap::all_set(&g.map, off, n) {
            return Err(SlotError::NotAllocated {
                start: start.0,
                npages,
            });
        }
        bitmap::clear(&mut g.map, off, n);
        g.stats.used -= npages;
        g.stats.freed += npages;
        Ok(())
    }
}

impl GlobalLockAllocator {
    /// True if every slot of the range is allocated.
    pub fn is_allocated(&self, range: crate::SlotRange) -> Result<bool, SlotError> {
        check_range(range.start.0, range.npages, self.nslots)?;
        let g = self.inner.lock();
        Ok(bitmap::all_set(
            &g.map,
            range.start.0 as usize,
            range.npages as usize,
        ))
    }
}

impl SlotAllocator for GlobalLockAllocator {
    fn name(&self) -> &'static str {
        "baseline"
    }

    fn alloc(&self, order: u32) -> Option<SwapSlot> {
        if order > MAX_ORDER {
            return None;
        }
        let n = 1usize << order;
        let limit = self.nslots as usize;
        let mut g = self.inner.lock();
        let cursor = g.cursor;
        let found = bitmap::find_free(&g.map, cursor, limit, order)
            .or_else(|| bitmap::find_free(&g.map, 0, (cursor + n).min(limit), order));
        match found {
            Some(off) => {
                bitmap::set(&mut g.map, off, n);
                g.cursor = if off + n >= limit { 0 } else { off + n };
                g.stats.used += n as u64;
                g.stats.alloc[order as usize] += 1;
                Some(SwapSlot(off as u64))
            }
            None => {
                g.stats.alloc_fail[order as usize] += 1;
                None
            }
        }
    }

    fn free(&self, start: SwapSlot, order: u32) -> Result<(), SlotError> {
        let npages = crate::entry::check_order_run(start.0, order)?;
        self.free_range(start, npages)
    }

    fn capacity(&self) -> u64 {
        self.nslots
    }

    fn used(&self) -> u64 {
        self.inner.lock().stats.used
    }

    fn stats(&self) -> AllocStats {
        self.inner.lock().stats.clone()
    }
}
