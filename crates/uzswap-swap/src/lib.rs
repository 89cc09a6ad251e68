//! The swap device (a backing file) and its cluster slot allocator (seed 001).
//!
//! (Module layout, lock order and cluster state machine: swap helper.)

/// Slots are pages.
pub const PAGE_SIZE: usize = 4096;
