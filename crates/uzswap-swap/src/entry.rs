//! Slot and slot-range types: a slot is one page on the swap device,
//! addressed by its page offset from the start of the backing file.

use crate::{MAX_ORDER, PAGE_SIZE, SWAPFILE_CLUSTER};

/// One page-sized slot on a swap device (its page offset).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SwapSlot(pub u64);

impl SwapSlot {
    /// Page offset on the device.
    pub fn offset(self) -> u64 {
        self.0
    }

    /// Byte offset in the backing file.
    pub fn byte_offset(self) -> u64 {
        self.0 * PAGE_SIZE as u64
    }

    /// Index of the cluster holding this slot.
    pub fn cluster(self) -> usize {
        (self.0 / SWAPFILE_CLUSTER as u64) as usize
    }
}

/// A run of `npages` slots starting at `start`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SlotRange {
    pub start: SwapSlot,
    pub npages: u64,
}

impl SlotRange {
    pub fn new(start: SwapSlot, npages: u64) -> Self {
        Self { start, npages }
    }

    /// One past the last slot.
    pub fn end(self) -> u64 {
        self.start.0 + self.npages
    }

    pub fn contains(self, slot: SwapSlot) -> bool {
        slot.0 >= self.start.0 && slot.0 < self.end()
    }
}

/// Why an allocator refused a `free` (or a device refused a range).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    #[error("slot range {start}+{npages} is outside the device ({capacity} slots)")]
    OutOfRange {
        start: u64,
        npages: u64,
        capacity: u64,
    },
    #[error("slot range {start}+{npages} is empty")]
    Empty { start: u64, npages: u64 },
    #[error("slot range {start}+{npages} crosses a cluster boundary")]
    CrossesCluster { start: u64, npages: u64 },
    #[error(
        "slot range {start}+{npages} is not (entirely) allocated: double free or a foreign slot"
    )]
    NotAllocated { start: u64, npages: u64 },
    #[error("order {0} is above the largest order {MAX_ORDER}")]
    BadOrder(u32),
}

/// Checks `start..start+npages` lies inside `capacity` and is non-empty.
/// A `SlotAllocator::free(start, order)` names a naturally aligned run of
/// `2^order` slots; anything else was never handed out by `alloc(order)`.
pub(crate) fn check_order_run(start: u64, order: u32) -> Result<u64, SlotError> {
    if order > crate::MAX_ORDER {
        return Err(SlotError::BadOrder(order));
    }
    let npages = 1u64 << order;
    if start & (npages - 1) != 0 {
        return Err(SlotError::NotAllocated { start, npages });
    }
    Ok(npages)
}

pub(crate) fn check_range(start: u64, npages: u64, capacity: u64) -> Result<(), SlotError> {
    if npages == 0 {
        return Err(SlotError::Empty { start, npages });
    }
    match start.checked_add(npages) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(SlotError::OutOfRange {
            start,
            npages,
            capacity,
        }),
    }
}

/// Checks a run stays inside one cluster (allocations never cross one).
pub(crate) fn check_one_cluster(start: u64, npages: u64) -> Result<(), SlotError> {
    let c = SWAPFILE_CLUSTER as u64;
    if start / c != (start + npages - 1) / c {
        return Err(SlotError::CrossesCluster { start, npages });
    }
    Ok(())
}
