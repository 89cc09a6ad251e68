//! swap_map: how many written-back objects use each swap slot (kernel:
//! `si->swap_map`, the per-slot usage count).
//!
//! Writeback packs a run's compressed objects back to back (`writeback`), so
//! a slot holds parts of several objects and an object may straddle two
//! slots: a 64 KiB folio that compresses 2:1 takes 8 slots on the device,
//! not 16, which halves both the writes and the device reads of its fault.
//! A slot goes back to the device allocator when the last object touching
//! it is released.
//!
//! Who holds counts:
//! - each written-back object, one on every slot it touches: taken when its
//!   run is laid out, before the write, while the run's slots belong to the
//!   writer alone; dropped once, when its entry is released, or when
//!   writeback does not switch the entry over;
//! - a keep-copy load reading the device unlocked (`load`), on the slots it
//!   reads: taken under the shard lock while the entries' own counts are
//!   still there, dropped after the read, so a slot cannot go back to the
//!   allocator (and be written over) mid-read.
//!
//! Each slot also carries the writeback clock its object was written at
//! (`stamps`): a device read tells from it how much larger a pool would
//! have kept the page (the pool's ghost, `Zswap::pool_ghost`).
//!
//! Atomic increments and decrements, so no lock; the decrement that reaches
//! zero frees the slot. A slot holds at most a page of objects (each one at
//! least a few bytes) plus one count per load in flight: far below u16.

use crate::swap::{SwapDevice, SwapSlot};
use crate::PAGE_SIZE;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};

/// Where a written-back object lies: `len` bytes from byte `off` of `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevicePlace {
    pub slot: SwapSlot,
    pub off: u16,
    pub len: u16,
}

impl DevicePlace {
    /// The slots the object touches.
    pub fn slots(self) -> std::ops::Range<u64> {
        let first = self.slot.0;
        let last = first + (self.off as u64 + self.len.max(1) as u64 - 1) / PAGE_SIZE as u64;
        first..last + 1
    }
}

pub(crate) struct SwapMap {
    refs: Box<[AtomicU16]>,
    /// The writeback clock (pages written back before it, low 32 bits)
    /// when an object starting at the slot was written: the pool's
    /// shadow, from which a device read learns how much more pool would
    /// have kept the page (`Zswap::set_ghost_windows`). Relaxed: a stale stamp
    /// misjudges one read's distance, nothing else.
    stamps: Box<[AtomicU32]>,
    /// Slots with a non-zero count.
    used: AtomicU64,
}

impl SwapMap {
    pub fn new(capacity: u64) -> Self {
        SwapMap {
            refs: crate::swap::zeroed_records(capacity as usize),
            stamps: crate::swap::zeroed_records(capacity as usize),
            used: AtomicU64::new(0),
        }
    }

    /// Stamp the objects at `places`, a run written in this order, as
    /// written from writeback clock `now` on: one tick each, so a run of
    /// hundreds of pages is not all of one age. Objects sharing a slot
    /// take the last one's stamp.
    pub fn stamp(&self, places: &[DevicePlace], now: u64) {
        for (k, p) in places.iter().enumerate() {
            self.stamps[p.slot.0 as usize].store((now + k as u64) as u32, Ordering::Relaxed);
        }
    }

    /// Pages written back since the object at `p` was, with the clock at
    /// `now`.
    pub fn age(&self, p: DevicePlace, now: u64) -> u64 {
        (now as u32).wrapping_sub(self.stamps[p.slot.0 as usize].load(Ordering::Relaxed)) as u64
    }

    /// Slots this instance holds on the device.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// One count on every slot each of `places` touches: laying out a run
    /// (fresh slots), or pinning slots that entries hold for a read.
    pub fn hold(&self, places: &[DevicePlace]) {
        for p in places {
            for s in p.slots() {
                if self.refs[s as usize].fetch_add(1, Ordering::Relaxed) == 0 {
                    self.used.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Drop the object at `p`; slots it was the last user of go back to
    /// `dev`.
    pub fn put(&self, dev: &SwapDevice, p: DevicePlace) {
        for s in p.slots() {
            let before = self.refs[s as usize].fetch_sub(1, Ordering::AcqRel);
            debug_assert!(before > 0, "slot {s} released more often than held");
            if before == 1 {
                self.used.fetch_sub(1, Ordering::Relaxed);
                // A refused free means the slot accounting is broken: say
                // so loudly in debug builds; in release the slot is leaked,
                // which loses no data.
                let r = dev.free(SwapSlot(s), 1);
                debug_assert!(r.is_ok(), "freeing slot {s}: {r:?}");
            }
        }
    }
}
