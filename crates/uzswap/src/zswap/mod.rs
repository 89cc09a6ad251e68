//! zswap: the compressed cache (mirrors mm/zswap.c). API under construction.

use serde::Serialize;

/// The key of a stored page: (region id, page index). Packed in a u64:
/// region in the top 24 bits, page index in the low 40 (4 PiB per region).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwapEntry(pub u64);

impl SwapEntry {
    pub const INDEX_BITS: u32 = 40;
    pub fn new(region: u32, index: u64) -> Self {
        debug_assert!(index < 1 << Self::INDEX_BITS && region < 1 << 24);
        SwapEntry(((region as u64) << Self::INDEX_BITS) | index)
    }
    pub fn region(self) -> u32 {
        (self.0 >> Self::INDEX_BITS) as u32
    }
    pub fn index(self) -> u64 {
        self.0 & ((1 << Self::INDEX_BITS) - 1)
    }
    /// The entry `n` pages after this one (same region).
    pub fn offset(self, n: u64) -> Self {
        SwapEntry(self.0 + n)
    }
}

/// Whether a load frees the entry (exclusive, the default: the page becomes
/// resident and authoritative) or keeps a clean copy in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    Exclusive,
    KeepCopy,
}

#[derive(Clone, Debug)]
pub struct ZswapConfig {}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ZswapStats {}

pub struct Zswap {}
