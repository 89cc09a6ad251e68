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
//! Counts are set when a run is laid out, before its write, while the
//! run's slots belong to the writer alone; after that each object holds one
//! count on every slot it touches and drops them exactly once, when its
//! entry is released, or when writeback does not switch it over. Atomic
//! decrements, so releases need no lock; the one that reaches zero frees.

use crate::swap::{SwapDevice, SwapSlot};
use crate::PAGE_SIZE;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

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
    /// Slots with a non-zero count.
    used: AtomicU64,
}

impl SwapMap {
    pub fn new(capacity: u64) -> Self {
        SwapMap {
            refs: (0..capacity).map(|_| AtomicU16::new(0)).collect(),
            used: AtomicU64::new(0),
        }
    }

    /// Slots this instance holds on the device.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Lay out a run: one count on every slot each of `places` touches.
    /// The slots are freshly allocated and not yet visible to anyone.
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
