//! target: where the pages of a swap device's slots are kept — the local
//! swap file ([`FileTarget`], in `device`) or a far tier on Redis
//! ([`RedisTarget`](crate::remote::RedisTarget), in `remote`).
//!
//! A [`SwapDevice`](crate::SwapDevice) owns the slot space (its cluster
//! allocator) and one target; the layers above address pages by slot only
//! and never learn which target holds them. A target owns the bytes of the
//! slots it was given, nothing else: which slots are in use is the
//! allocator's business, and every call names slots its caller allocated.
//!
//! Contract, the same for every target:
//! - `write` either stores every page of the run or returns an error; after
//!   an error the run's contents are unspecified and the caller keeps its
//!   copy of the data (the device's write-failure contract).
//! - `read` fills the whole buffer with exactly what the last successful
//!   `write` of each slot stored, or returns an error. A target that cannot
//!   tell (a remote value lost, stale, or damaged) returns an error: it
//!   never fills a page with zeros or with another page's bytes.
//!
//! Locking: a target is shared by every thread of the device (`Sync`);
//! each implementation documents its own locks.

use crate::entry::{SlotRange, SwapSlot};
use std::io;

/// The backing store of a swap device's slots.
pub trait WritebackTarget: Send + Sync {
    /// Short name for reports: "file", "redis", "redis-cluster".
    fn kind(&self) -> &'static str;
    /// Stores `pages` (each [`PAGE_SIZE`](crate::PAGE_SIZE) bytes) in the
    /// slots from `first` on.
    fn write(&self, first: SwapSlot, pages: &[&[u8]]) -> io::Result<()>;
    /// Reads the slots from `first` on into `buf` (a whole number of pages).
    fn read(&self, first: SwapSlot, buf: &mut [u8]) -> io::Result<()>;
    /// Reads several stretches into `buf`, back to back in the order
    /// given: one request where the target can batch them (a remote
    /// target's one round trip), else one read each.
    fn read_runs(&self, runs: &[SlotRange], buf: &mut [u8]) -> io::Result<()> {
        let mut at = 0;
        for r in runs {
            let len = r.npages as usize * crate::PAGE_SIZE;
            self.read(r.start, &mut buf[at..at + len])?;
            at += len;
        }
        Ok(())
    }
    /// A load will soon read `window`: start fetching it if the target can.
    fn readahead(&self, _window: SlotRange) {}
}
