//! uzswap: the Linux compressed-swap stack as a userspace memory tier.
//!
//! Layers, top to bottom (a lower layer never calls an upper one):
//! - [`region`]: userfaultfd-registered memory, the fault handler, the evictor
//!   and the memory budget (the front end).
//! - [`zswap`]: the compressed cache: tree of swap entries, store / load /
//!   invalidate / writeback, same-filled pages, large folios, limits, stats.
//! - [`compress`], [`zpool`], [`swap`]: the compressors and batch engine, the
//!   zsmalloc-style pool, the swap device with its cluster allocator. These are
//!   separate crates so the layering is enforced by the build.

pub use uzswap_compress as compress;
pub use uzswap_swap as swap;
pub use uzswap_zpool as zpool;

pub mod pattern;
pub mod region;
pub mod zswap;

pub use pattern::Pattern;
pub use region::{
    Advice, Config as UzswapConfig, HandlerMode, Region, RegionError, SampleYoung, Uzswap,
    UzswapStats,
};
pub use zswap::{LoadMode, SwapEntry, Zswap, ZswapConfig, ZswapStats};

/// 4 KiB, the unit of every layer.
pub const PAGE_SIZE: usize = 4096;
/// Largest folio order (2 MiB).
pub const MAX_ORDER: u32 = 9;
