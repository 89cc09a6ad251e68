//! The swap device (a backing file) and its cluster slot allocator (seed 001).
//!
//! - [`entry`]: slot and slot-range types, allocator errors.
//! - [`cluster`]: the cluster allocator. Every cluster has its own lock; the
//!   device lock is taken only to move a cluster between lists or to isolate
//!   one. Lock order and the cluster state machine are at the top of that
//!   module.
//! - [`baseline`]: one bitmap behind one global lock, with the same
//!   [`SlotAllocator`] interface. It is kept only so `uzswap bench alloc` can
//!   measure the cluster allocator against it in the same run.
//! - [`device`]: the swap device: the slot space and its target, page I/O,
//!   the readahead window and discard (hole punching) of freed clusters.
//! - [`slot_table`]: per-slot records in a reserved, uncommitted mapping.
//! - [`target`]: the [`WritebackTarget`] trait, what keeps the slots' pages:
//!   the local file (`FileTarget`, in `device`) or [`remote`]: the far tier
//!   on Redis or Redis Cluster, every value versioned and checksummed.
//!
//! - [`fds`]: the library's own file descriptors, moved out of the way of
//!   the program it runs in and shielded from its closes.
//!
//! The crate is the bottom layer: it knows nothing of zswap or regions.

pub mod baseline;
mod bitmap;
pub mod cluster;
pub mod device;
pub mod entry;
pub mod fds;
pub mod remote;
pub mod slot_table;
mod sync;
pub mod target;

pub use baseline::GlobalLockAllocator;
pub use cluster::{ClusterAllocator, ClusterFlag};
pub use device::{
    memory_backed_fs, FileTarget, SwapDevice, SwapDeviceConfig, SwapError, SwapStats,
};
pub use entry::{SlotError, SlotRange, SwapSlot};
pub use remote::{RedisTarget, RemoteConfig, RemoteStats};
pub use slot_table::{zeroed_records, SlotTable, ZeroedRecord};
pub use target::WritebackTarget;

/// Slots are pages.
pub const PAGE_SIZE: usize = 4096;
/// Slots per cluster (`SWAPFILE_CLUSTER`): 512 pages, 2 MiB.
pub const SWAPFILE_CLUSTER: usize = 512;
/// Largest allocation order: one whole cluster.
pub const MAX_ORDER: u32 = 9;
/// Orders 0..=MAX_ORDER.
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;

/// Counters of a slot allocator. Per-order arrays are indexed by order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Slots the allocator manages.
    pub capacity: u64,
    /// Slots handed out and not yet freed.
    pub used: u64,
    /// Successful allocations, per order.
    pub alloc: [u64; NR_ORDERS],
    /// Failed allocations, per order. For order > 0 the caller is expected to
    /// fall back to a smaller order (the kernel's `swpout_fallback`).
    pub alloc_fail: [u64; NR_ORDERS],
    /// Slots returned by `free`.
    pub freed: u64,
    /// Clusters discarded after they emptied (cluster allocator with a discard
    /// hook only).
    pub discards: u64,
}

/// What both allocators offer, so the benchmark and the tests drive either.
///
/// Allocations are naturally aligned runs of `2^order` slots that never cross
/// a cluster boundary. `alloc` never falls back to a smaller order itself.
pub trait SlotAllocator: Send + Sync {
    /// Short name for reports ("cluster", "baseline").
    fn name(&self) -> &'static str;
    /// `2^order` contiguous, naturally aligned free slots, or `None` when the
    /// allocator has no such run (or `order > MAX_ORDER`).
    fn alloc(&self, order: u32) -> Option<SwapSlot>;
    /// Return `2^order` slots starting at `start`. Every slot of the run must
    /// be allocated; otherwise nothing changes and an error says why.
    fn free(&self, start: SwapSlot, order: u32) -> Result<(), SlotError>;
    /// Slots managed.
    fn capacity(&self) -> u64;
    /// Slots allocated (a snapshot; exact when no operation is in flight).
    fn used(&self) -> u64;
    /// Counters (a snapshot).
    fn stats(&self) -> AllocStats;
}
