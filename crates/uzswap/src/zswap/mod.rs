//! zswap: the compressed cache of pages (mirrors mm/zswap.c).
//!
//! A page handed to [`Zswap::store`] / [`Zswap::store_folio`] is checked for
//! same-filled content, otherwise compressed on the batch engine and copied
//! into the zsmalloc-style pool; the tree maps its [`SwapEntry`] to a
//! `ZswapEntry` (`entry.rs`). [`Zswap::load`] finds, verifies and
//! decompresses it; [`Zswap::invalidate`] drops it.
//!
//! Unlike the kernel's zswap, an entry holds no swap-device slot: a slot is
//! taken only when the shrinker writes an entry back (seed 000's complaint
//! that compressed pages pin swap space). A written-back entry stays in the
//! tree, pointing at its slot, so the tree remains the single authority for
//! a key and `load` serves pool and device alike.
//!
//! # Sections
//! - `entry`: the key and the per-page record.
//! - `tree`: the sharded map from key to entry (with each shard's LRU ring).
//! - `lru`: the LRU of pool entries, second chance, the protected region.
//! - `same_filled`: detection and fill of zero / repeated-word pages (seed 004).
//! - `limits`: the pool limit with accept hysteresis.
//! - `store`, `load`, `invalidate`: the operations.
//! - `inherit`: the entries a forked child takes from its copy of the
//!   parent's cache.
//! - `writeback`: pool -> device, and device reads on load.
//! - `swap_map`: per-slot counts of the packed objects on the device.
//! - `seal`: encryption and authentication of the pages on the device;
//!   `secret`: never-dumped memory for its key and the write staging.
//! - `shrinker`: when and how much to write back (seed 003), its thread.
//! - `stats`: counters with the kernel's names.
//!
//! # Lock order
//! 1. the shrinker's control mutex (`shrinker::Control`), never held while
//!    taking any other lock;
//! 2. a tree shard lock (`tree::Shard`, which also guards that shard's LRU
//!    ring and in-flight loads), at most one at a time;
//! 3. the pool's internal locks (class / span), taken inside `ZsPool` calls,
//!    and the swap device's allocator locks, taken inside `SwapDevice` calls
//!    (a slot free under a shard lock never happens: slots and objects are
//!    freed after the shard lock is released).
//!
//! The store path compresses and allocates with no tree lock held and only
//! then inserts; the exclusive load path removes entries under the shard lock
//! (marking the range as being loaded) and decompresses or reads the device
//! after dropping it; a keep-copy load decompresses pool objects under the
//! shard lock so a concurrent invalidate cannot free one under it, and reads
//! the device with the lock dropped, its slots pinned by a count in the swap
//! map, then checks under the lock that the entries are the ones read. Pool
//! objects and slots of removed or replaced entries are
//! freed after the shard lock is released. Writeback copies objects out under
//! the shard lock, writes with no lock held, and re-checks under the lock
//! (protocol in `writeback`). No lock is held across a call into the batch
//! engine except (keep-copy loads of large folios) the shard lock, which the
//! engine's workers never take.
//!
//! # Entry life cycle (per key)
//! ```text
//!             +-------- store (same key): old object/slot freed --------+
//!             v                                                         |
//!   absent --store--> pool (on LRU) --writeback--> device (off LRU) ----+
//!     ^  ^              | |  ^  \                    |  \
//!     |  |              | |  +--+ second chance       |   load(keep-copy) -> device
//!     |  |              | |  (referenced: rotate)     |
//!     |  +--load(excl)--+ +--load(keep-copy)--> pool  +--load(excl)--> absent (slot freed)
//!     +------------------invalidate (pool, same-filled or device)--------+
//! ```
//! Same-filled entries are stored like pool entries but never join the LRU.
//! Inherited entries (a forked child's, taken by `inherit` from its copy of
//! the parent's cache) load like pool entries, are never on the LRU or
//! written back, and free nothing when they leave; kept clean, they count
//! as kept, as written-back ones do.
//! A `KeepPinned` load takes the folio's pool entries off the LRU (pinned:
//! the caller holds the pages unchanged) and brings its written-back pages
//! into the pool (device -> pool, the object as read, no recompression) when
//! the whole folio fits under the pool's share; `unpin_folio` puts them back
//! on the LRU as the most recent. Invalidate, replacement and exclusive
//! loads treat pinned entries like any pool entry.
//! An entry being written back stays a pool entry until the switch; if it
//! was loaded, invalidated or replaced meanwhile, the switch does not happen
//! and the slot is freed. A failed write or a full device leaves it a pool
//! entry, back on the LRU.
//! A failed store of a folio leaves none of the folio's keys stored (stale
//! copies are invalidated as in the kernel: the caller keeps the page).
//! A failed load (checksum, decompression, device read) leaves the entries
//! stored so a corrupt page is reported again rather than mistaken for a
//! never-stored one.

mod clean;
mod entry;
mod inherit;
mod invalidate;
mod limits;
mod load;
mod lru;
mod recompress;
mod same_filled;
mod seal;
mod secret;
mod shrinker;
mod stats;
mod store;
mod swap_map;
mod tree;
mod writeback;

pub use entry::SwapEntry;
pub use shrinker::{ShrinkResult, ShrinkStop};
pub use stats::{OrderStats, ZswapStats};

use crate::compress::{self, BatchEngine, EngineConfig};
use crate::swap::{SwapDevice, SwapDeviceConfig};
use crate::zpool::{PoolConfig, ZsPool};
use crate::{MAX_ORDER, PAGE_SIZE};
use limits::PoolLimit;
use stats::Counters;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tree::Tree;

/// Create the calling thread's thread-locals that a store or a load may use
/// (`region::sigbus::prepare_thread`).
pub(crate) fn prepare_thread() {
    store::prepare_scratch();
    secret::prepare_staging();
}

/// Whether a load frees the entry (exclusive, the default: the page becomes
/// resident and authoritative) or keeps a clean copy in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadMode {
    Exclusive,
    KeepCopy,
    /// Keep the copy and take its pool entries off the LRU while the caller
    /// holds the page unchanged: writing back a copy of a resident page
    /// would only put the page on the device for its next fault. The caller
    /// ends the hold with [`Zswap::unpin_folio`] (the copy becomes the most
    /// recent LRU entry) or by invalidating or replacing the copy.
    KeepPinned,
    /// Keep the copy as a *clean copy*: off the LRU, never written back,
    /// and freed (oldest first, no I/O) whenever the pool needs room, before
    /// anything is written back. For a caller that holds the page unchanged
    /// and can store it again if the copy is gone: it calls
    /// [`Zswap::claim_clean`] before relying on the copy (on success the
    /// copy is an ordinary entry again), and invalidates it when the page
    /// changes.
    KeepClean,
}

/// Instance settings. Defaults mirror the kernel's zswap defaults where one
/// exists (accept_threshold_percent 90, same-filled handling on).
#[derive(Clone, Debug)]
pub struct ZswapConfig {
    /// `"lz4"` (default), `"zstd[:level]"`, `"lzo"`, `"deflate[:level]"`.
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
    /// Keep non-zero repeated-word pages as a value too (zero pages are,
    /// while `same_filled` is on).
    pub same_filled_nonzero: bool,
    /// Detect same-filled pages at all (default on). Off, every page is
    /// compressed and stored in the pool, zero pages included: the ablation
    /// seed 004 argues about (`uzswap bench seeds`).
    pub same_filled: bool,
    /// A page whose compressed size exceeds this percentage of a page
    /// compressed poorly.
    pub max_compressed_percent: u32,
    /// Store poorly-compressing pages uncompressed instead of rejecting them
    /// (the front end, which has nowhere else to put a page without a swap
    /// device, turns this on). Either way `reject_compress_poor` counts them.
    pub store_incompressible: bool,
    /// The load mode of [`Zswap::load_default`].
    pub default_load: LoadMode,
    /// Write cold entries back to the swap device (memory.zswap.writeback).
    /// Off (or no device): the pool limit is enforced only by refusing
    /// stores, and every stored page stays in memory.
    pub writeback_enabled: bool,
    /// Let the shrinker write back on memory pressure, not only when the
    /// pool limit is hit (memory.zswap.shrinker.enabled, seed 003).
    pub shrinker_enabled: bool,
    /// Keep the shrinker out of the protected (recently stored or loaded)
    /// part of the LRU, seed 003's estimate of the warm pages (default on).
    /// Off only to measure what the protection does (`uzswap bench seeds`).
    pub shrinker_protect: bool,
    /// The swap device to write back to; `None`: no writeback. See also
    /// [`Zswap::with_device`] to share one device between instances.
    pub swap_device: Option<SwapDeviceConfig>,
    /// Keep written-back pages compressed on the device (default) or write
    /// them as plain pages. docs/ARCHITECTURE.md has the measurements.
    pub writeback_compressed: bool,
    /// Seal every page written to the swap device with AES-256-GCM under a
    /// key only this instance holds (default), so the file never holds
    /// program data in clear and a page changed on disk fails its load
    /// (`LoadError::Checksum`) instead of loading wrong. Off: pages go to
    /// the file as they are (`--writeback-plain`). docs/BENCHMARKS.md has
    /// the cost.
    pub writeback_encrypted: bool,
    /// The pool's share of the memory budget: above it, the shrinker thread
    /// writes back proactively (with seed 003's heuristics) before the hard
    /// limit refuses stores. `u64::MAX`: none.
    pub pool_share_bytes: u64,
    /// A denser compressor ("zstd:1") the shrinker recompresses cold entries
    /// with before it writes any back (zram: recomp_algorithm): an entry
    /// meets it at the LRU's cold end, and is written back only when it
    /// gets there again (`recompress`). `None`: cold entries go straight to
    /// the device. Must differ from `compressor` (another level of the
    /// same algorithm will do: "zstd:-1" stores, "zstd:3" recompresses).
    pub recompress: Option<String>,
    /// PSI trigger written to /proc/pressure/memory by the shrinker thread
    /// (`"some <stall us> <window us>"`); `None`: do not watch PSI.
    pub psi_trigger: Option<String>,
    /// Back the pool with transparent huge pages once it holds an arena
    /// (`zpool::PoolConfig::huge_arenas`). Off by default: where the host
    /// reclaims the guest's free 2 MiB blocks (free page reporting), each
    /// new huge page costs milliseconds of host faults to clear, more than
    /// the 4 KiB faults it saves (docs/BENCHMARKS.md, "Huge arenas off").
    pub huge_arenas: bool,
    /// Let a thread of the pool fault its pages in ahead of the stores that
    /// take them, once it holds 4 MiB (`zpool::PoolConfig::fill_ahead`), so
    /// a growing pool's stores do not wait for page faults (default on). The
    /// front end turns it off: its stores run in its evictor, off the
    /// faulting threads' path already, and a second thread only took CPU
    /// from them (docs/BENCHMARKS.md, "The pool fills ahead").
    pub fill_ahead: bool,
    /// Longest span of the pool in pages, `1..=16`
    /// (`zpool::PoolConfig::max_pages_per_span`); 0: the pool's default
    /// (8). Shorter spans fill a little less of their pages (0.93 of them
    /// at 4 pages, 0.98 at 8, for objects of 300..3600 bytes) but bound how
    /// much one store can grow the pool by, which the front end keeps free
    /// under its budget: under a small budget it asks for 4 (the store
    /// margin in docs/ARCHITECTURE.md).
    pub pool_span_pages: usize,
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
            same_filled: true,
            max_compressed_percent: 90,
            store_incompressible: false,
            default_load: LoadMode::Exclusive,
            writeback_enabled: true,
            shrinker_enabled: true,
            shrinker_protect: true,
            swap_device: None,
            writeback_compressed: true,
            writeback_encrypted: true,
            pool_share_bytes: u64::MAX,
            recompress: None,
            psi_trigger: Some("some 150000 1000000".into()),
            huge_arenas: false,
            fill_ahead: true,
            pool_span_pages: 0,
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
    #[error(transparent)]
    Swap(#[from] crate::swap::SwapError),
    #[error("cannot start the shrinker thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot set up writeback encryption: {0}")]
    Seal(std::io::Error),
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
    #[error("{1} pages from {0:?} are not within one aligned 2 MiB group")]
    BadRange(SwapEntry, usize),
    #[error("checksum mismatch for {0:?}: stored object is corrupt")]
    Checksum(SwapEntry),
    #[error("decompression of {0:?} failed: {1}")]
    Decompress(SwapEntry, String),
    #[error("reading {0:?} from the swap device failed: {1}")]
    Device(SwapEntry, String),
}

impl LoadError {
    /// The page the error is about, where it is about one.
    pub fn entry(&self) -> Option<SwapEntry> {
        match self {
            LoadError::NotFound(k)
            | LoadError::Checksum(k)
            | LoadError::Decompress(k, _)
            | LoadError::Device(k, _) => Some(*k),
            LoadError::BadSize { .. } | LoadError::BadOrder(_) | LoadError::BadRange(..) => None,
        }
    }
}

/// The compressed cache. `Send + Sync`: every operation takes `&self`.
pub struct Zswap {
    cfg: ZswapConfig,
    engine: BatchEngine,
    /// Contexts of the dense compressor (`ZswapConfig::recompress`): it
    /// compresses on the shrinker thread only, so no helper threads.
    dense: Option<BatchEngine>,
    pool: ZsPool,
    tree: Tree,
    limit: PoolLimit,
    counters: Counters,
    device: Option<Arc<SwapDevice>>,
    writeback_on: AtomicBool,
    shrinker_on: AtomicBool,
    shrink: Arc<shrinker::Control>,
    /// Next shard `drop_clean` takes clean copies from.
    clean_cursor: std::sync::atomic::AtomicUsize,
    /// Users of each device slot (with a device).
    swap_map: Option<swap_map::SwapMap>,
    /// The key and tags of sealed writeback (with a device, unless
    /// `writeback_encrypted` is off).
    sealer: Option<seal::Sealer>,
    /// Time of each load's device read (all its stretches in one call).
    read_latency: crate::region::latency::Histogram,
    /// The pool's ghost (`PoolGhost`): a load's device read of an object
    /// written back within this many pages of writeback would have been
    /// served from memory by a pool that much larger; such reads are
    /// counted in `ghost_near`. Loads from
    /// the pool of entries older than `ghost_tail_seq` on its LRU, which a
    /// smaller pool would have written back, are counted in `ghost_tail`.
    ghost_window: AtomicU64,
    ghost_near: AtomicU64,
    ghost_tail_seq: AtomicU64,
    ghost_tail: AtomicU64,
    /// Where the shrinker thread starts writing back (`pool_share_bytes`,
    /// adjustable while running).
    share_bytes: AtomicU64,
    /// Run after each batch a writeback walk writes (`debug_after_writeback`).
    #[cfg(feature = "failpoints")]
    wb_hook: WritebackHook,
}

#[cfg(feature = "failpoints")]
type WritebackHook = parking_lot::Mutex<Option<Arc<dyn Fn(&Zswap) + Send + Sync>>>;

/// Cumulative counts of the loads' device reads: a pool larger by the
/// ghost window ([`Zswap::set_ghost_windows`]) would have served `near`
/// of the `read_count` reads from memory, and one smaller by it would
/// have read the `tail` loads served from memory from the device.
/// `read_ns` over `read_count` is what a device read takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolGhost {
    pub near: u64,
    pub tail: u64,
    pub read_count: u64,
    pub read_ns: u64,
}

/// What the cache holds, from its counters (relaxed loads, no locks): for
/// a caller sizing the pool against how densely its pages compress.
#[derive(Clone, Copy, Debug, Default)]
pub struct Occupancy {
    /// Pages with a pool object (clean copies included).
    pub pool_pages: u64,
    /// Bytes of those objects.
    pub compressed_bytes: u64,
    /// Same-filled pages (no pool object).
    pub same_filled_pages: u64,
    /// Pages on the swap device.
    pub device_pages: u64,
    /// Clean copies: pool objects of pages the caller also holds.
    pub clean_pages: u64,
    /// Of `device_pages` and `inherited_pages`, those kept as clean copies
    /// of pages the caller also holds (`LoadMode::KeepClean` of pages
    /// whose objects hold no pool memory).
    pub kept_pages: u64,
    /// Pages whose objects are in the copy of a parent's pool
    /// (`Zswap::inherit`): no memory of this pool's.
    pub inherited_pages: u64,
}

impl Zswap {
    /// A new instance; creates the swap device of `cfg.swap_device` if any.
    pub fn new(cfg: ZswapConfig) -> Result<Zswap, ZswapError> {
        let device = match &cfg.swap_device {
            Some(d) => Some(Arc::new(SwapDevice::create(d.clone())?)),
            None => None,
        };
        Self::build(cfg, device)
    }

    /// A new instance writing back to `device` (which other instances may
    /// share: each frees only the slots it allocated). Overrides
    /// `cfg.swap_device`.
    pub fn with_device(cfg: ZswapConfig, device: Arc<SwapDevice>) -> Result<Zswap, ZswapError> {
        Self::build(cfg, Some(device))
    }

    fn build(cfg: ZswapConfig, device: Option<Arc<SwapDevice>>) -> Result<Zswap, ZswapError> {
        if !(1..=100).contains(&cfg.accept_threshold_percent) {
            return Err(ZswapError::Config(format!(
                "accept_threshold_percent {} out of range 1..=100",
                cfg.accept_threshold_percent
            )));
        }
        if cfg.pool_span_pages > crate::zpool::size_class::MAX_PAGES_PER_SPAN_LIMIT {
            return Err(ZswapError::Config(format!(
                "pool_span_pages {} out of range 0..={}",
                cfg.pool_span_pages,
                crate::zpool::size_class::MAX_PAGES_PER_SPAN_LIMIT
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
                ..EngineConfig::default()
            },
        )?;
        let dense = match &cfg.recompress {
            None => None,
            Some(name) => {
                let c = compress::by_name(name)?;
                let store = engine.compressor();
                if c.id() == store.id() && c.level() == store.level() {
                    return Err(ZswapError::Config(format!(
                        "recompress compressor {name} is the store compressor {}: \
                         it cannot make objects denser",
                        cfg.compressor
                    )));
                }
                Some(BatchEngine::new(
                    c,
                    EngineConfig {
                        workers: 1,
                        batch_size: 1,
                        ..EngineConfig::default()
                    },
                )?)
            }
        };
        if device.as_ref().is_some_and(|d| d.remote().is_some()) && !cfg.writeback_encrypted {
            return Err(ZswapError::Config(
                "a remote writeback target is always sealed: plain writeback \
                 (writeback_encrypted = false) is for the local file only"
                    .into(),
            ));
        }
        let swap_map = device
            .as_ref()
            .map(|d| swap_map::SwapMap::new(d.capacity()));
        let sealer = match &device {
            Some(d) if cfg.writeback_encrypted => {
                Some(seal::Sealer::new(d.capacity()).map_err(ZswapError::Seal)?)
            }
            _ => None,
        };
        Ok(Zswap {
            limit: PoolLimit::new(cfg.max_pool_bytes, cfg.accept_threshold_percent),
            engine,
            dense,
            pool: ZsPool::with_config(PoolConfig {
                huge_arenas: cfg.huge_arenas,
                fill_ahead: cfg.fill_ahead,
                max_pages_per_span: match cfg.pool_span_pages {
                    0 => PoolConfig::default().max_pages_per_span,
                    n => n,
                },
            }),
            tree: Tree::new(),
            counters: Counters::default(),
            device,
            writeback_on: AtomicBool::new(cfg.writeback_enabled),
            shrinker_on: AtomicBool::new(cfg.shrinker_enabled),
            shrink: Arc::default(),
            clean_cursor: Default::default(),
            swap_map,
            sealer,
            read_latency: Default::default(),
            ghost_window: AtomicU64::new(0),
            ghost_near: AtomicU64::new(0),
            ghost_tail_seq: AtomicU64::new(0),
            ghost_tail: AtomicU64::new(0),
            share_bytes: AtomicU64::new(cfg.pool_share_bytes),
            #[cfg(feature = "failpoints")]
            wb_hook: Default::default(),
            cfg,
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

    /// Bytes of [`Self::pool_total_size`] the pool holds but has not handed
    /// out yet (a huge arena's untouched pages): stores fill them first.
    pub fn pool_reserve_bytes(&self) -> u64 {
        self.pool.reserve_bytes()
    }

    /// Whether the pool may grow by a whole huge arena at once
    /// ([`ZswapConfig::huge_arenas`], where the kernel offers huge pages).
    pub fn pool_may_map_huge(&self) -> bool {
        self.pool.may_map_huge()
    }

    /// Change the pool limit (e.g. when the budget changes).
    pub fn set_max_pool_bytes(&self, bytes: u64) {
        self.limit.set_max(bytes);
    }

    /// The pool limit (kernel: max_pool_percent of memory).
    pub fn max_pool_bytes(&self) -> u64 {
        self.limit.max()
    }

    /// Where the shrinker thread starts writing back
    /// ([`ZswapConfig::pool_share_bytes`]).
    pub fn pool_share_bytes(&self) -> u64 {
        self.share_bytes.load(Ordering::Relaxed)
    }

    /// Move the shrinker's start; a pool now above it is shrunk by the
    /// thread.
    pub fn set_pool_share_bytes(&self, bytes: u64) {
        self.share_bytes.store(bytes, Ordering::Relaxed);
        self.kick_share_shrink();
    }

    /// Count device reads of objects written back within the last `near`
    /// pages of writeback as near, and loads of the pool's oldest `tail`
    /// pages as its tail (see [`Self::pool_ghost`]). The tail is placed
    /// now: call again as the LRU moves.
    pub fn set_ghost_windows(&self, near: u64, tail: u64) {
        self.ghost_window.store(near, Ordering::Relaxed);
        let seq = if tail == 0 {
            0
        } else {
            self.tree.lru.tail_seq(tail)
        };
        self.ghost_tail_seq.store(seq, Ordering::Relaxed);
    }

    /// The device reads of loads so far, and what they cost (see
    /// [`PoolGhost`]).
    pub fn pool_ghost(&self) -> PoolGhost {
        let (count, sum_ns) = self.read_latency.totals();
        PoolGhost {
            near: self.ghost_near.load(Ordering::Relaxed),
            tail: self.ghost_tail.load(Ordering::Relaxed),
            read_count: count,
            read_ns: sum_ns,
        }
    }

    /// What the cache holds now (see [`Occupancy`]).
    pub fn occupancy(&self) -> Occupancy {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (same, dev) = (g(&c.same_filled_pages), g(&c.device_pages));
        let inherited = g(&c.inherited_pages);
        Occupancy {
            pool_pages: self.tree.len().saturating_sub(same + dev + inherited),
            compressed_bytes: g(&c.compressed_bytes),
            same_filled_pages: same,
            device_pages: dev,
            clean_pages: self.tree.clean_len(),
            kept_pages: self.tree.kept_len(),
            inherited_pages: inherited,
        }
    }

    /// Whether every page of `first .. first + n` (in one aligned 2 MiB
    /// group, as a folio) is stored with an object in no memory of this
    /// pool's: written back, or inherited at a fork. A `KeepClean` load of
    /// them keeps device slots or inherited objects only, no pool memory.
    pub fn holds_no_memory(&self, first: SwapEntry, n: u64) -> bool {
        let shard = self.tree.lock(first, n);
        (0..n).all(|i| {
            shard
                .get(first.offset(i))
                .is_some_and(|e| e.holds_no_memory())
        })
    }

    /// Clean copies freed for room since the instance began (a relaxed
    /// load: for a caller weighing whether the copies it keeps are claimed).
    pub fn clean_dropped(&self) -> u64 {
        self.counters.clean_dropped.load(Ordering::Relaxed)
    }

    /// Entries currently stored in memory (pool and same-filled); pages
    /// written back to the device are counted in `stats().device_pages`,
    /// pages inherited at a fork in `stats().inherited_pages`.
    pub fn stored_pages(&self) -> u64 {
        let c = &self.counters;
        self.tree.len().saturating_sub(
            c.device_pages.load(Ordering::Relaxed) + c.inherited_pages.load(Ordering::Relaxed),
        )
    }

    /// The swap device written back to, if any.
    pub fn swap_device(&self) -> Option<&Arc<SwapDevice>> {
        self.device.as_ref()
    }

    /// Turn writeback on or off (memory.zswap.writeback). Off: pages already
    /// on the device stay there and load as before; nothing new is written.
    pub fn set_writeback_enabled(&self, on: bool) {
        self.writeback_on.store(on, Ordering::Relaxed);
    }

    /// Whether writeback is on (see [`Self::set_writeback_enabled`]).
    pub fn writeback_enabled(&self) -> bool {
        self.writeback_on.load(Ordering::Relaxed)
    }

    /// Whether any page of `first .. first + n` (in one aligned 2 MiB
    /// group) is written back.
    pub fn any_written_back(&self, first: SwapEntry, n: u64) -> bool {
        // A fork asks this of every evicted chunk, three times over: most
        // caches have nothing on the device at all.
        if self.counters.device_pages.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let shard = self.tree.lock(first, n);
        (0..n).any(|i| {
            shard
                .get(first.offset(i))
                .is_some_and(|e| e.slot().is_some())
        })
    }

    /// Turn the memory-pressure shrinker on or off
    /// (memory.zswap.shrinker.enabled). Limit-driven writeback is not
    /// affected.
    pub fn set_shrinker_enabled(&self, on: bool) {
        self.shrinker_on.store(on, Ordering::Relaxed);
    }

    /// Can this instance write back now?
    fn writeback_possible(&self) -> bool {
        self.device.is_some() && self.writeback_on.load(Ordering::Relaxed)
    }

    /// Whether pages written back are sealed
    /// ([`ZswapConfig::writeback_encrypted`], with a device).
    pub fn writeback_encrypted(&self) -> bool {
        self.sealer.is_some()
    }

    /// Move objects out of sparse pool spans and give emptied spans back.
    pub fn compact(&self) -> crate::zpool::CompactStats {
        self.pool.compact()
    }
}

fn folio_bytes(order: u32) -> usize {
    PAGE_SIZE << order
}

/// Deliberate damage, for tests that show corruption is caught (feature
/// `failpoints`: not in a build that serves programs).
#[cfg(feature = "failpoints")]
#[derive(Clone, Copy, Debug)]
pub enum Corruption {
    /// Flip a bit of the entry's stored checksum (as a flipped bit in the
    /// object would read).
    Checksum,
    /// Point the entry at another entry's object (a misdirected handle).
    SwapObjectWith(SwapEntry),
}

#[cfg(feature = "failpoints")]
impl Zswap {
    /// Run `f` on the walking thread after each batch of LRU entries a
    /// writeback walk writes: a test's way to change the cache's settings
    /// at a known point of a walk.
    pub fn debug_after_writeback(&self, f: impl Fn(&Zswap) + Send + Sync + 'static) {
        *self.wb_hook.lock() = Some(Arc::new(f));
    }

    /// Taken out of its lock first: a hook that holds its walk must not
    /// hold other threads' walks with it.
    pub(super) fn run_writeback_hook(&self) {
        let f = self.wb_hook.lock().clone();
        if let Some(f) = f {
            f(self);
        }
    }

    /// Damage a stored entry on purpose. Returns false if it is not stored
    /// (or, for `SwapObjectWith`, either entry is same-filled).
    pub fn debug_corrupt(&self, entry: SwapEntry, how: Corruption) -> bool {
        match how {
            Corruption::Checksum => match self.tree.lock(entry, 1).get_mut(entry) {
                Some(e) if e.handle().is_some() => {
                    e.csum ^= 1;
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
