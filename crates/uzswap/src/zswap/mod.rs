//! zswap: the compressed cache of pages (mirrors mm/zswap.c).
//!
//! A page handed to [`Zswap::store`] / [`Zswap::store_folio`] is checked for
//! same-filled content, otherwise compressed on the batch engine and copied
//! into the zsmalloc-style pool; the tree maps its [`SwapEntry`] to a
//! [`ZswapEntry`](entry::ZswapEntry). [`Zswap::load`] finds, verifies and
//! decompresses it; [`Zswap::invalidate`] drops it.
//!
//! Unlike the kernel's zswap, an entry holds no swap-device slot: a slot is
//! taken only when the shrinker writes an entry back (seed 000's complaint
//! that compressed pages pin swap space).
//!
//! # Sections
//! - `entry`: the key and the per-page record.
//! - `tree`: the sharded map from key to entry.
//! - `same_filled`: detection and fill of zero / repeated-word pages (seed 004).
//! - `limits`: the pool limit with accept hysteresis.
//! - `store`, `load`, `invalidate`: the operations.
//! - `stats`: counters with the kernel's names.
//!
//! # Lock order
//! 1. a tree shard lock (`tree::Shard`), at most one at a time;
//! 2. the pool's internal locks (class / span), taken inside `ZsPool` calls.
//!
//! The store path compresses and allocates with no tree lock held and only
//! then inserts; the exclusive load path removes entries under the shard lock
//! and decompresses after dropping it; a keep-copy load decompresses under the
//! shard lock so a concurrent invalidate cannot free the object under it.
//! Pool objects of removed or replaced entries are freed after the shard lock
//! is released. No lock is held across a call into the batch engine except
//! (keep-copy loads of large folios) the shard lock, which the engine's workers
//! never take.
//!
//! # Entry life cycle (per key)
//! ```text
//!   absent --store--> stored --load(exclusive)--> absent
//!     ^                 |  \--load(keep-copy)--> stored
//!     |                 |--store (same key)--> stored (old object freed)
//!     +--invalidate-----+
//! ```
//! A failed store of a folio leaves none of the folio's keys stored (stale
//! copies are invalidated as in the kernel: the caller keeps the page).
//! A failed load (checksum, decompression) leaves the entries stored so a
//! corrupt page is reported again rather than mistaken for a never-stored one.

mod entry;
mod invalidate;
mod limits;
mod load;
mod same_filled;
mod stats;
mod store;
mod tree;

pub use entry::SwapEntry;
pub use stats::{OrderStats, ZswapStats};

use crate::compress::{self, BatchEngine, EngineConfig};
use crate::zpool::ZsPool;
use crate::{MAX_ORDER, PAGE_SIZE};
use limits::PoolLimit;
use stats::Counters;
use tree::Tree;

/// Whether a load frees the entry (exclusive, the default: the page becomes
/// resident and authoritative) or keeps a clean copy in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    Exclusive,
    KeepCopy,
}

/// Instance settings. Defaults mirror the kernel's zswap defaults where one
/// exists (accept_threshold_percent 90, same-filled handling on).
#[derive(Clone, Debug)]
pub struct ZswapConfig {
    /// "lz4" (default), "zstd[:level]", "lzo", "deflate[:level]".
    pub compressor: String,
    /// Engine worker threads; 0 means one per online CPU.
    pub workers: usize,
    /// Pages per engine batch, 1..=32.
    pub batch_size: usize,
    /// Pool limit in bytes of pool memory (`u64::MAX`: none). See
    /// [`ZswapConfig::pool_percent_of`] for the kernel's max_pool_percent.
    pub max_pool_bytes: u64,
    /// After hitting the limit, accept stores again only once the pool is
    /// below this percentage of the limit (kernel: accept_threshold_percent).
    pub accept_threshold_percent: u32,
    /// Keep non-zero repeated-word pages as a value too (zero pages always are).
    pub same_filled_nonzero: bool,
    /// A page whose compressed size exceeds this percentage of a page
    /// compressed poorly.
    pub max_compressed_percent: u32,
    /// Store poorly-compressing pages uncompressed instead of rejecting them
    /// (the front end, which has nowhere else to put a page without a swap
    /// device, turns this on). Either way `reject_compress_poor` counts them.
    pub store_incompressible: bool,
    /// The load mode of [`Zswap::load_default`].
    pub default_load: LoadMode,
}

impl Default for ZswapConfig {
    fn default() -> Self {
        ZswapConfig {
            compressor: "lz4".into(),
            workers: 0,
            batch_size: compress::MAX_BATCH,
            max_pool_bytes: u64::MAX,
            accept_threshold_percent: 90,
            same_filled_nonzero: true,
            max_compressed_percent: 90,
            store_incompressible: false,
            default_load: LoadMode::Exclusive,
        }
    }
}

impl ZswapConfig {
    /// The kernel's max_pool_percent: the pool may take `percent` of `budget`.
    pub fn pool_percent_of(mut self, budget: u64, percent: u32) -> Self {
        self.max_pool_bytes = budget / 100 * percent as u64;
        self
    }
}

/// A configuration or setup error.
#[derive(Debug, thiserror::Error)]
pub enum ZswapError {
    #[error(transparent)]
    Compressor(#[from] compress::UnknownCompressor),
    #[error(transparent)]
    Engine(#[from] compress::BatchError),
    #[error("invalid setting: {0}")]
    Config(String),
}

/// Why a store did not happen. The page (or folio) stays with the caller.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("data is {got} bytes, expected {expected} for order {order}")]
    BadSize {
        got: usize,
        expected: usize,
        order: u32,
    },
    #[error("order {0} out of range 0..={MAX_ORDER}")]
    BadOrder(u32),
    #[error("page index {index} is not aligned to order {order}")]
    Misaligned { index: u64, order: u32 },
    #[error("pool limit reached")]
    PoolLimit,
    #[error("page compressed poorly")]
    CompressPoor,
    #[error("compression failed: {0}")]
    CompressFail(String),
    #[error("pool allocation failed")]
    AllocFail,
}

/// Why a load failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LoadError {
    #[error("{0:?} is not stored")]
    NotFound(SwapEntry),
    #[error("output is {got} bytes, expected {expected}")]
    BadSize { got: usize, expected: usize },
    #[error("order {0} out of range 0..={MAX_ORDER}")]
    BadOrder(u32),
    #[error("checksum mismatch for {0:?}: stored object is corrupt")]
    Checksum(SwapEntry),
    #[error("decompression of {0:?} failed: {1}")]
    Decompress(SwapEntry, String),
}

/// The compressed cache. `Send + Sync`: every operation takes `&self`.
pub struct Zswap {
    cfg: ZswapConfig,
    engine: BatchEngine,
    pool: ZsPool,
    tree: Tree,
    limit: PoolLimit,
    counters: Counters,
}

impl Zswap {
    pub fn new(cfg: ZswapConfig) -> Result<Zswap, ZswapError> {
        if !(1..=100).contains(&cfg.accept_threshold_percent) {
            return Err(ZswapError::Config(format!(
                "accept_threshold_percent {} out of range 1..=100",
                cfg.accept_threshold_percent
            )));
        }
        if !(1..=100).contains(&cfg.max_compressed_percent) {
            return Err(ZswapError::Config(format!(
                "max_compressed_percent {} out of range 1..=100",
                cfg.max_compressed_percent
            )));
        }
        let compressor = compress::by_name(&cfg.compressor)?;
        let engine = BatchEngine::new(
            compressor,
            EngineConfig {
                workers: cfg.workers,
                batch_size: cfg.batch_size,
            },
        )?;
        Ok(Zswap {
            limit: PoolLimit::new(cfg.max_pool_bytes, cfg.accept_threshold_percent),
            cfg,
            engine,
            pool: ZsPool::new(),
            tree: Tree::new(),
            counters: Counters::default(),
        })
    }

    pub fn config(&self) -> &ZswapConfig {
        &self.cfg
    }

    /// The batch engine, shared with callers that want to compress or
    /// decompress in parallel themselves.
    pub fn engine(&self) -> &BatchEngine {
        &self.engine
    }

    /// Bytes of memory the pool occupies: what a budget charges for zswap.
    pub fn pool_total_size(&self) -> u64 {
        self.pool.total_size()
    }

    /// Change the pool limit (e.g. when the budget changes).
    pub fn set_max_pool_bytes(&self, bytes: u64) {
        self.limit.set_max(bytes);
    }

    /// Entries currently stored.
    pub fn stored_pages(&self) -> u64 {
        self.tree.len()
    }

    /// Move objects out of sparse pool spans and give emptied spans back.
    pub fn compact(&self) -> crate::zpool::CompactStats {
        self.pool.compact()
    }
}

fn folio_bytes(order: u32) -> usize {
    PAGE_SIZE << order
}

/// Deliberate damage, for tests that show corruption is caught.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum Corruption {
    /// Flip a bit of the entry's stored checksum (as a flipped bit in the
    /// object would read).
    Checksum,
    /// Point the entry at another entry's object (a misdirected handle).
    SwapObjectWith(SwapEntry),
}

impl Zswap {
    /// Damage a stored entry on purpose. Returns false if it is not stored
    /// (or, for `SwapObjectWith`, either entry is same-filled).
    #[doc(hidden)]
    pub fn debug_corrupt(&self, entry: SwapEntry, how: Corruption) -> bool {
        match how {
            Corruption::Checksum => match self.tree.lock(entry, 1).get_mut(entry) {
                Some(e) if e.handle().is_some() => {
                    e.crc ^= 1;
                    true
                }
                _ => false,
            },
            Corruption::SwapObjectWith(other) => {
                // Two shard locks are never held at once: copy out, then in.
                let a = self.tree.lock(entry, 1).get(entry).copied();
                let b = self.tree.lock(other, 1).get(other).copied();
                match (a, b) {
                    (Some(a), Some(b)) if a.handle().is_some() && b.handle().is_some() => {
                        if let Some(e) = self.tree.lock(entry, 1).get_mut(entry) {
                            e.payload = b.payload;
                        }
                        if let Some(e) = self.tree.lock(other, 1).get_mut(other) {
                            e.payload = a.payload;
                        }
                        true
                    }
                    _ => false,
                }
            }
        }
    }
}
