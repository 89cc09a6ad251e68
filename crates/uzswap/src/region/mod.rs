//! The front end: userfaultfd regions, the fault handler, the evictor and the
//! memory budget.
//!
//! A [`Uzswap`] instance owns one userfaultfd, one [`Zswap`] cache, one
//! budget and the figures. [`Region`]s are anonymous mappings registered with
//! that userfaultfd for missing and write-protect faults. Memory is handled
//! in *chunks* of one folio up to 64 KiB (`PAGE_SIZE << folio_order`, at
//! most [`MAX_CHUNK_ORDER`], aligned within the region; a larger folio is
//! the read-ahead window of forward scans): a fault installs its whole
//! chunk with one `UFFDIO_COPY`, and the evictor stores whole chunks with
//! one `store_folio`. A fault on
//! never-touched memory zero-fills untouched chunks of the aligned
//! `zero_fill_around` window (2 MiB) at once while the budget has room, as
//! many as the run of touched chunks beside it (a readahead ramp: one for
//! an isolated touch, doubling along a run), so a run of first touches
//! costs one round trip per window, not per chunk.
//!
//! # Per-chunk state machine (`chunk.rs`; one `AtomicU32` per chunk)
//!
//! ```text
//!   UNTOUCHED --missing fault: zero-fill (BUSY; in an adopted
//!               region around the parent's pages, EEXIST)------> RESIDENT
//!   UNTOUCHED --late registration finds every page there------> RESIDENT
//!   STORED    --missing write fault: load exclusive (BUSY)---> RESIDENT
//!   STORED    --missing read fault, keep_copy: load exclusive,
//!               install write-protected (BUSY)----------------> CLEAN
//!   STORED    --the same, every page written back: load keeping
//!               the device slots as clean copies, install
//!               write-protected (BUSY)-------------> PARTIAL(all)+KEPT
//!   STORED    --read ahead of a scan that installed the chunk
//!               before it whole (folio past the chunk), or a
//!               WillNeed hint: installed as that fault's chunk
//!               (a hint's as a read's) (BUSY)-----> CLEAN or RESIDENT
//!   STORED    --missing read fault, partial_faults, off the
//!               chunk's first page (or on it, the chunk before
//!               not ending mapped): load that page's group
//!               keeping clean copies (from the pool or the
//!               device), install it write-protected, no REF
//!               (BUSY)----------------------------------------> PARTIAL(m)
//!   STORED    --missing write fault, the same places: load the
//!               group exclusively, install it writable
//!               (BUSY)----------------------------------------> PARTIAL(m)+DIRTY
//!   PARTIAL   --missing fault in another group, not next after
//!               a group that faulted lately (a scan), nor the
//!               fourth within the resident distance (dense): load
//!               and install that group the same way, REF
//!               (BUSY)----------------------------------------> PARTIAL(m')
//!   PARTIAL   --write-protect fault on a mapped group: drop its
//!               copies, unprotect it, REF (BUSY)--------------> PARTIAL(m)+DIRTY
//!   PARTIAL   --a scan's (or dense) missing read fault, not DIRTY: load the
//!               rest exclusive, install it write-protected, drop
//!               the mapped pages' copies (BUSY)----------------> CLEAN
//!               (every page written back: keep every copy)---> PARTIAL(all)+KEPT
//!   PARTIAL+KEPT --write-protect fault: drop every copy,
//!               unprotect the chunk (BUSY)---------------------> RESIDENT
//!   PARTIAL   --a scan's write fault, or any scan of a DIRTY
//!               chunk: load the rest exclusively, install it
//!               protected, drop the mapped pages' copies,
//!               unprotect (BUSY)-------------------------------> RESIDENT
//!   CLEAN     --write-protect fault: unprotect (BUSY)-------> RESIDENT
//!   CLEAN     --unprotect refused: protect again (BUSY)------> CLEAN
//!               (that refused too: may hold protected pages)--> RESIDENT
//!   RESIDENT  --write-protect fault (after a refused
//!               unprotect, or stale): unprotect (BUSY)--------> RESIDENT
//!   STORED    --discard of part of it: those pages' entries
//!               made zero pages (BUSY)-------------------------> STORED
//!   UNTOUCHED in an adopted region, the parent's chunk touched
//!             (it may map the parent's pages: `Uzswap::adopt`)
//!             --discard of it or part of it: zap those bytes
//!               (BUSY; a run of such chunks in one call)------> UNTOUCHED
//!   RESIDENT  --evict: write-protect, store, zap (EVICTING)--> STORED
//!   CLEAN     --evict: store, zap (EVICTING)------------------> STORED
//!   PARTIAL   --evict: write-protect the mapped groups if DIRTY,
//!               claim their copies (or store them), zap them
//!               (EVICTING)------------------------------------> STORED
//!   PARTIAL   --the CLOCK hand's pass with REF, one group
//!               faulted in since its last pass and others
//!               mapped (`evict::trim`): write-protect the others
//!               if DIRTY, claim their copies (or store them),
//!               zap them (EVICTING)---------------------------> PARTIAL(that group)
//!   EVICTING  --store refused: unprotect + wake--------------> RESIDENT
//!   EVICTING  --a partial chunk's page store refused---------> PARTIAL
//!   EVICTING  --zap refused: drop its copies, unprotect------> RESIDENT
//!   EVICTING  --a partial chunk's zap refused: put back what
//!               was zapped before the refusal, drop the
//!               mapped pages' copies---------------------------> PARTIAL
//!   EVICTING  --a partial victim not yet evicted, with a read
//!               of its other pages waiting: handed back, REF---> PARTIAL
//!   EVICTING  (not ZAPPING) --a missing fault on a page its word
//!               says is mapped (the program dropped it behind
//!               our back; the faulting thread may be the evictor
//!               reading it): a zero page, protected, under
//!               FILLING; not owned-----------------------------> EVICTING
//!   EVICTING  --its mapped pages stored: ZAPPING, once no fill
//!               is in progress (`chunk::begin_zap`); cleared by
//!               any release--------------------------------------> EVICTING
//!   UNTOUCHED (unless it may map a parent's pages), STORED, CLEAN,
//!   PARTIAL without DIRTY, not PINNED
//!             --spanned by a write-protect call between two
//!               victims: held (BUSY) and given back----------> unchanged
//! ```
//! A chunk read in whole goes in PARTIAL with every group mapped and KEPT,
//! not CLEAN, where all its pages were on the swap device: their slots hold
//! no memory, so they are kept as clean copies, and its eviction before any
//! write claims them and zaps, as the kernel drops a clean swap-cache page
//! whose slot still holds it (`chunk::KEPT`). Such a chunk is not put on
//! probation. A chunk entering PARTIAL from STORED is queued on probation: the evictor
//! takes such chunks, oldest first, while they are still PARTIAL with no
//! second read, before it moves the CLOCK hand (`evict.rs`).
//! A stored chunk stays EVICTING until its zap, which is gathered with its
//! region's others and made many ranges per call (`evict.rs`).
//! BUSY and EVICTING are owned states: one thread (a fault resolver, a hint,
//! or the evictor) holds the chunk and is the only one to leave the state.
//! An eviction holds a chunk BUSY also for the one call that write-protects
//! the victims on both sides of it (`evict::protect_ahead`), only where that
//! call changes nothing of the chunk, and gives it back as it was.
//! A fault that finds a chunk owned sets WAITER and returns at once (handler
//! threads never block on a chunk); the owner, on leaving, wakes the chunk's
//! range. An install under handler threads is the exception to waking only
//! on leaving: its `UFFDIO_COPY` wakes the threads waiting on the pages it
//! placed while the chunk is still BUSY (as any thread could already read
//! them), and on leaving the owner wakes the rest of the chunk only if a
//! fault parked (`fault::wake_on_copy`); `Uzswap::stats` and
//! `Region::resident_bytes` wait for such installs to publish
//! (`fault::PublishSeqs`). A woken write on a chunk that became STORED retries, takes a
//! missing fault and is served from the pool: the write lands on the stored
//! copy, never in the gap between read-out and zap (DESIGN.md, eviction
//! protocol). A fault whose install or unprotect is refused leaves the
//! chunk as it was, wakes the faults that parked on it, and tries again,
//! 8 times, then sends its thread SIGBUS (`fault::try_again`).
//! Invariants: RESIDENT implies mapped and writable (but pages whose
//! unprotect was refused, which a write-protect fault lifts; its eviction
//! protects the whole chunk first either way); CLEAN
//! implies mapped and write-protected, with no copy kept (`keep.rs`: whole
//! chunks' copies were nearly never claimed); PARTIAL(m)
//! implies the pages of the groups in mask m mapped, each either
//! write-protected with its copy as CLEAN's (or none) or, only with DIRTY,
//! writable with no copy, and every other page unmapped and in the cache;
//! STORED implies unmapped and every page of the chunk in the cache.
//! A chunk is split into up to 16 groups (`chunk::group_pages`): one page
//! each, since a chunk is at most 16 pages ([`MAX_CHUNK_ORDER`]). A PARTIAL
//! chunk is charged its mapped pages; its word carries m (`chunk::PART`)
//! through BUSY and EVICTING, so teardown knows what an owned chunk holds.
//!
//! # Budget
//! `resident bytes + zswap.pool_total_size() <= budget`. A chunk is charged
//! when installed and uncharged right after its store succeeds, so the store
//! is charged by its delta (compressed size minus chunk size), never twice.
//! Above the high watermark the fault handler kicks the evictor thread, which
//! evicts batches until usage is under the low watermark. The handler evicts
//! inline when installing would leave less than the fault margin (one chunk
//! stored as is, one step of pool growth, and one more for what the store
//! before may have left, `evict::fault_margin`) under the budget, so the
//! store in flight never takes usage over the budget.
//!
//! With writeback (`Config::writeback`, on by default) the pool is limited
//! to `pool_share_percent` of the budget: a store that would pass the limit
//! writes the coldest pool entries back to the swap device first, and the
//! shrinker thread writes back ahead of the limit. Without it the pool of a
//! large working set fills the budget and resident memory starves.
//!
//! # Deferred registration
//! While the regions together fit the budget nothing can have to be
//! evicted, so a region stays plain memory, unregistered, until a new region
//! takes the total past the budget (or a `PageOut` hint needs it): then
//! every region is registered and the pages already there are charged
//! (`register`, `Config::defer_register`). Memory that fits costs nothing.
//!
//! # Lock order
//! `Shared::mapped` (making, registering and dropping regions) →
//! `RegionInner::live` (write, at teardown). An eviction slot (`evict.rs`:
//! a few evictions at once) → `clock` (the CLOCK hand, while victims are
//! taken) → `RegionInner::live` (read: the region's memory and state stay
//! valid while held). `mapped` is never taken under any of them; the
//! fault a registration raises on a hole is resolved by a handler thread,
//! which takes neither `mapped` nor a slot to zero-fill. In signal
//! mode (`HandlerMode::Signal`, `sigbus.rs`) the registering thread
//! resolves that fault itself, under `mapped`, and may take a slot
//! (the backstop): `mapped` → slot → `live`, still one order. The
//! `regions` map lock is held alone, to look up or snapshot regions, except
//! under `sigbus::INSTANCES` (read) when a signal looks up its address.
//! Chunk states are atomics, never locks.
//!
//! # Drop order
//! Regions and the instance may be dropped in any order: each [`Region`]
//! holds the instance's threads alive, and the threads stop (joined) when
//! the instance handle and every region are gone. Dropping a region
//! unregisters and unmaps it and invalidates every page it had stored.

mod batch;
mod chunk;
mod evict;
#[cfg(feature = "failpoints")]
pub mod failpoints;
#[cfg(not(feature = "failpoints"))]
mod failpoints;
mod fault;
mod fork;
mod keep;
pub(crate) mod latency;
mod locality;
#[cfg(test)]
mod model;
mod own;
mod pagemap;
mod pin;
mod share;
mod sigbus;
mod uffd_sys;
mod young;

pub use latency::LatencySummary;
pub use pin::{ForkGuard, KernelFaults, PinGuard};
pub use sigbus::{
    alt_stack, drop_alt_stack, installed as sigbus_installed,
    prepare_thread as prepare_signal_thread, swap_chained as swap_chained_sigbus, use_alt_stacks,
    ALT_STACK_BYTES,
};
pub use uffd_sys::OpenPath;

use crate::compress::quiesce::Event;
use crate::compress::thread::Handle as JoinHandle;
use crate::swap::{SwapDeviceConfig, SwapError};
use crate::zswap::{SwapEntry, Zswap, ZswapConfig, ZswapError, ZswapStats};
use crate::{MAX_ORDER, PAGE_SIZE};
use latency::Histogram;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Instant;
use userfaultfd::{IoctlFlags, RegisterMode, Uffd};

/// The largest chunk: 16 pages, one page per group of a partial chunk
/// (`chunk::GROUPS`). A larger chunk's groups are several pages, and its
/// whole is the unit of eviction: with 2 MiB chunks a random 4 KiB read
/// brought in 128 KiB, and an eviction stored whatever else was mapped,
/// its hot pages with it (usemem's skewed reads of 1 GiB under 740 MiB, 4
/// workers: 97 MB/s against 1036 with 64 KiB chunks, 41 pages decompressed
/// a fault; docs/BENCHMARKS.md). A larger folio is the read-ahead window of forward
/// scans instead, so the unit still grows where the access is sequential.
pub const MAX_CHUNK_ORDER: u32 = 4;

/// How a handler thread waits for the next fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HandlerMode {
    /// Sleep in `poll(2)` until a fault arrives.
    Block,
    /// Poll the descriptor without sleeping for this many microseconds after
    /// the last fault before sleeping: saves the wake-up on fault bursts at
    /// the cost of a busy CPU.
    Spin { micros: u32 },
    /// No handler threads: a fault raises SIGBUS in the thread that took
    /// it, which resolves it itself and retries the access (`sigbus.rs`).
    /// Saves the two cross-CPU wake-ups of every fault. Opt-in, because a
    /// system call that touches a region page not mapped then fails with
    /// EFAULT instead of being resolved, and SIGBUS is shared with the
    /// program (chained for every address outside uzswap's regions). The
    /// futex waits of glibc's mutexes, condition variables and semaphores
    /// are such calls, and glibc ends the process on their EFAULT: keep
    /// those objects outside the regions here, or pin them around a wait
    /// ([`Uzswap::pin`], as `uzswap run`'s library does).
    Signal,
    /// `Signal` where the kernel's faults cannot be served anyway (the
    /// userfaultfd was opened in user mode only: an unprivileged user
    /// without access to `/dev/userfaultfd`), `Block` where they can: on
    /// the first path the system-call guarantee is the same either way, and
    /// signal mode saves two wake-ups per fault. Resolved when the instance
    /// opens its userfaultfd; its stats name the mode it resolved to.
    Auto,
}

/// Instance settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Resident bytes plus pool bytes may not exceed this (`u64::MAX`: no
    /// budget, nothing is evicted unless hinted).
    pub budget: u64,
    /// The folio, `PAGE_SIZE << folio_order` (0..=9): the chunk, the unit
    /// of faults and eviction, up to 64 KiB ([`MAX_CHUNK_ORDER`]); a larger
    /// folio is the window a forward scan through stored memory reads ahead
    /// to (`fault::read_ahead`).
    pub folio_order: u32,
    /// The cache below (compressor, engine workers, pool limit...).
    pub zswap: ZswapConfig,
    pub handler: HandlerMode,
    /// Fault handler threads reading the one userfaultfd.
    pub handler_threads: usize,
    /// Bind handler thread `i` to the `i`-th CPU the process may run on,
    /// where there are exactly as many handler threads as such CPUs (see
    /// `fault::bind_handler`). A fault then finds a handler on the CPU it
    /// was taken on, which that CPU runs as soon as the faulting thread
    /// blocks: no wake-up of another CPU on the fault's path.
    pub bind_handlers: bool,
    /// Bytes per eviction batch, fixed (0: adapt between budget/256 and
    /// budget/64, the latter clamped to 256 KiB..8 MiB, at least a chunk;
    /// `batch.rs`). Whole chunks, and under a budget at least a chunk per
    /// handler thread plus one where budget/64 allows that much: a batch
    /// the faults in flight fill on their own keeps the evictor from ever
    /// running.
    pub evict_batch_bytes: u64,
    /// Evictions that may run at once: the evictor thread's and faults'
    /// at the backstop, each compressing on its own thread (0: one per
    /// handler thread plus the evictor's, or one where their headroom would
    /// pass 1/128 of the budget; at most 8). Each keeps one store's
    /// headroom under the budget.
    pub evictors: usize,
    /// Read faults on stored memory install it write-protected, so that
    /// evicting it unwritten costs no protection change, and a random
    /// read's group (`partial_faults`) keeps its pool copy, so that its
    /// eviction is a zap. Costs a write-protect fault on the first write;
    /// reads install writable while many of their installs are written
    /// (`keep.rs`). Off: reads install as writes do.
    pub keep_copy: bool,
    /// A fault on a stored chunk away from its first page installs only
    /// the faulting page's group (one page in chunks up to 64 KiB) and the
    /// chunk becomes PARTIAL: a read's write-protected with its copies
    /// kept clean (with `keep_copy`), a write's writable. Further random
    /// faults add their groups. A fault on the group after one that just
    /// faulted, or on the first page where the chunk before ends mapped
    /// (a forward scan), or `WillNeed`, brings the whole chunk. A random
    /// 4 KiB access then costs one page's decompression (or one page's
    /// device read, where it was written back) and charge, and eviction
    /// one page's zap or store, not a chunk's.
    pub partial_faults: bool,
    /// A fault on never-touched memory zero-fills untouched chunks of the
    /// aligned window of this many bytes around it (while under the high
    /// watermark) with one copy: as many as the run of touched chunks
    /// beside it, so a run ramps up to the whole window. 0: just the chunk.
    pub zero_fill_around: usize,
    /// Where the coldest compressed pages go when the pool outgrows its
    /// share of the budget. `None`: no writeback, the pool stays in memory
    /// (and may take the whole budget). Ignored when `zswap.swap_device` is
    /// set (that device is used) or there is no budget.
    pub writeback: Option<Writeback>,
    /// The pool's share of the budget, in percent (1..=100), when writing
    /// back: the pool is limited to it (stores make room by writing back),
    /// so the rest of the budget holds resident chunks.
    pub pool_share_percent: u32,
    /// Raise the pool's share above `pool_share_percent` while the pages
    /// not resident would then all fit in the pool compressed, with at least
    /// 30% of the budget left resident (see `region/share.rs`).
    pub adapt_pool_share: bool,
    /// With `adapt_pool_share`: plan the share for the regions' whole
    /// mappings, not only the memory touched so far (`share.rs`). False
    /// where regions are reservations far larger than what will ever be
    /// touched (the preload library's): planned for, they made every split
    /// look hopeless and held the share at its floor.
    pub plan_for_mapping: bool,
    /// Count the process's anonymous memory outside regions and the pool
    /// (uzswap's own heap and buffers, and whatever the program keeps
    /// outside regions) against the budget, as a memory cgroup would, so
    /// the budget bounds the process, not only its region data (`own.rs`;
    /// at most half the budget is given to it). Off by default: a library
    /// caller's other memory is its own business; `uzswap run --count-own`
    /// turns it on for a whole program.
    pub count_own_memory: bool,
    /// Give glibc's free arena pages back once a second (`malloc_trim`),
    /// whether or not they are counted (`count_own_memory` implies it).
    /// For a process whose glibc heap is uzswap's own: under the preload
    /// library the program allocates from mimalloc, and what uzswap's
    /// threads free in the middle of their arenas would otherwise stay
    /// resident, outside the budget. Off by default: a library caller's
    /// heap may be large, and a trim walks it under its arena locks.
    pub trim_own_heap: bool,
    /// The program may drop region pages behind uzswap's back, with
    /// `madvise` system calls made without libc (Go's runtime returns
    /// memory so): the evictor then asks `mincore(2)` which pages of a
    /// victim are there before it reads them, and fills a dropped one with
    /// zeros itself (`evict::fill_dropped`) rather than fault on it. Off by
    /// default (one call per victim run); the evictor checks anyway once
    /// a fault has found a page dropped (`faults_dropped`).
    pub foreign_drops: bool,
    /// Register a region with userfaultfd only once the instance's regions
    /// together are larger than the budget (or a `PageOut` hint needs it).
    /// Until then nothing can ever have to be evicted, so the memory stays
    /// plain: the kernel maps it as it likes, huge pages included, and no
    /// access costs a round trip through the handler. At registration the
    /// pages already there are found in `/proc/self/pagemap` and charged.
    /// False: every region is registered when it is made.
    pub defer_register: bool,
    /// Open the userfaultfd with `UFFD_USER_MODE_ONLY` even where
    /// `/dev/userfaultfd` could serve faults taken inside system calls: the
    /// path an unprivileged user without access to the device gets, for
    /// tests and for callers that bring buffers in themselves
    /// ([`Uzswap::pin`]).
    pub user_mode_only: bool,
    /// Read the kernel's accessed bits of resident memory (`young.rs`):
    /// resident parts of regions split into mappings of 256 KiB, and
    /// `/proc/self/smaps` sampled, paced by the CLOCK hand, for the ones
    /// read since the last sample, whose chunks then keep their REF. Costs
    /// the samples (milliseconds each, growing with resident memory), and
    /// pays where a read-mostly hot set sits apart from data streamed
    /// through (docs/BENCHMARKS.md, "Accessed bits from smaps"); `Auto`
    /// samples while the faults the marks save are judged worth more than
    /// the samples cost.
    pub sample_young: SampleYoung,
}

/// Whether the evictor samples the kernel's accessed bits (`young.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SampleYoung {
    /// Never: a chunk's only references are its faults.
    #[default]
    Off,
    /// In trials of a few samples, each holding an eighth of the memory
    /// out of its marks; sampling goes on while the faults the marks are
    /// measured to save cost more than the samples, and otherwise stops
    /// for a while that grows fourfold each time a trial does not pay.
    /// The default for a whole program (`SampleYoung::FOR_PROGRAMS`).
    Auto,
    /// Always, paced by the hand.
    On,
}

impl SampleYoung {
    /// The mode of a program run whole under uzswap (`uzswap run`, the
    /// preload library) where none is asked for: an unknown program may
    /// keep a read-mostly hot set beside data it streams (GNU sort: 20%
    /// faster), and a trial that does not pay costs a few samples
    /// (docs/BENCHMARKS.md, "Accessed bits by trial"). The library's own
    /// default stays `Off`: a caller of the API knows its pattern.
    pub const FOR_PROGRAMS: SampleYoung = SampleYoung::Auto;

    /// The mode's name, as `FromStr` reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            SampleYoung::Off => "off",
            SampleYoung::Auto => "auto",
            SampleYoung::On => "on",
        }
    }
}

impl std::str::FromStr for SampleYoung {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "0" | "false" | "no" => Ok(SampleYoung::Off),
            "auto" => Ok(SampleYoung::Auto),
            "on" | "1" | "true" | "yes" => Ok(SampleYoung::On),
            _ => Err(format!(
                "unknown accessed-bit sampling mode {s:?} (off, auto, on)"
            )),
        }
    }
}

/// The swap device the instance writes back to.
#[derive(Clone, Debug)]
pub struct Writeback {
    /// Directory of the unlinked backing file (`None`: `$TMPDIR`, else /tmp).
    pub dir: Option<std::path::PathBuf>,
    /// Device size (0: twice the budget, at least 64 MiB). Pages that do
    /// not fit stay in the pool; stores then fail at the pool limit and the
    /// chunk stays resident.
    pub size_bytes: u64,
    /// `O_DIRECT`, as the kernel's swap I/O bypasses the page cache: reads
    /// through the page cache would be both faster than the kernel's and
    /// memory outside the budget. Where the filesystem refuses it the
    /// device is opened buffered and a line on stderr says so.
    pub direct_io: bool,
    /// Device readahead window 2^page_cluster slots (`vm.page-cluster`).
    pub page_cluster: u32,
    /// The global-lock baseline slot allocator instead of the cluster
    /// allocator (`SwapDeviceConfig::baseline_allocator`): for benchmarks.
    pub baseline_allocator: bool,
    /// Write back to Redis (the far tier) instead of a local file; `dir`
    /// and `direct_io` then do not apply. Every value is sealed, so
    /// `zswap.writeback_encrypted` must stay on.
    pub remote: Option<crate::swap::RemoteConfig>,
    /// With `remote`: the tier order `pool → file → redis` (the file in
    /// `dir` first, Redis for what it cannot take) instead of
    /// `pool → redis`.
    pub file_first: bool,
    /// Size of the far tier behind the file (`file_first`); 0: as large as
    /// the file.
    pub far_size_bytes: u64,
}

impl Default for Writeback {
    fn default() -> Self {
        Writeback {
            dir: None,
            size_bytes: 0,
            direct_io: true,
            page_cluster: 3,
            baseline_allocator: false,
            remote: None,
            file_first: false,
            far_size_bytes: 0,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            budget: u64::MAX,
            folio_order: 4,
            zswap: ZswapConfig {
                store_incompressible: true,
                // Off: on usemem, where every page is written once and then
                // goes cold, the shrinker's zstd work slowed the write pass
                // by a third to a half and most recompressed pages were
                // written back all the same (docs/BENCHMARKS.md).
                recompress: None,
                // The budget is this instance's memory pressure; machine-wide
                // PSI would make its writeback depend on other programs.
                psi_trigger: None,
                // Off: the evictor stores off the faulting threads' path
                // already; with the fill thread too, usemem's skewed text
                // row at zram-lz4's memory ran 792 MB/s against 885 without
                // it (medians, 2 vCPUs; docs/BENCHMARKS.md, "The pool fills
                // ahead").
                fill_ahead: false,
                ..ZswapConfig::default()
            },
            // Measured with usemem (mixed, 1 GiB over 722 MiB, 2 workers,
            // 2 vCPUs; docs/BENCHMARKS.md): one handler thread per CPU,
            // sleeping in poll(2), beat one spinning thread by 10-20%
            // (seq 490 vs 439 MB/s, skew 298 vs 244): a second handler
            // overlaps the device reads of concurrent faults, and a
            // spinning one takes the CPU the workload and the evictor need.
            handler: HandlerMode::Block,
            handler_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(4),
            bind_handlers: true,
            evict_batch_bytes: 0,
            evictors: 0,
            keep_copy: true,
            partial_faults: true,
            zero_fill_around: 2 << 20,
            writeback: Some(Writeback::default()),
            // usemem skew, 2 vCPUs: 20% beat 40% by 15-60% on every
            // pattern at both 2x and 1.4x the budget: a bigger resident set
            // saves more faults than a bigger pool saves device reads.
            pool_share_percent: 20,
            adapt_pool_share: true,
            plan_for_mapping: true,
            count_own_memory: false,
            trim_own_heap: false,
            foreign_drops: false,
            defer_register: true,
            user_mode_only: false,
            sample_young: SampleYoung::default(),
        }
    }
}

/// A program's hint about a range of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// Make the chunks the first candidates for eviction.
    Cold,
    /// Evict the chunks now (they are stored and unmapped on return, unless
    /// the store is refused).
    PageOut,
    /// Bring stored chunks back now, ahead of the accesses.
    WillNeed,
}

#[derive(Debug, thiserror::Error)]
pub enum RegionError {
    #[error("userfaultfd unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Zswap(#[from] ZswapError),
    #[error("invalid setting: {0}")]
    Config(String),
    #[error("{0}")]
    Os(String),
}

/// The front end's figures plus the cache's (flattened, so `zswpout`,
/// `zswpin`, `hugepages-<N>kB`... sit at the top level).
#[derive(Clone, Debug, Serialize)]
pub struct UzswapStats {
    pub budget_bytes: u64,
    pub chunk_bytes: u64,
    /// The evictor's batch now, and the watermarks it sets (`batch.rs`).
    pub evict_batch_bytes: u64,
    /// Evictions that may run at once (`Config::evictors`).
    pub evictors: u64,
    pub high_wmark_bytes: u64,
    pub low_wmark_bytes: u64,
    pub resident_bytes: u64,
    /// Slots of the swap device written back to (0: no writeback).
    pub swap_capacity_pages: u64,
    /// Largest resident + pool seen at any charge point.
    pub peak_bytes: u64,
    /// Bytes of regions not registered yet (`Config::defer_register`): plain
    /// memory, not in `resident_bytes` or `peak_bytes`, at most the budget.
    pub unregistered_bytes: u64,
    /// With `Config::count_own_memory`: the process's memory outside
    /// regions and the pool, counted in usage and so in the budget (0
    /// without it).
    pub own_bytes: u64,
    pub uffd_open: OpenPath,
    /// Whether a system call that touches an evicted page of a region is
    /// served (the kernel hands its fault to the handler) or fails with
    /// EFAULT unless its buffers were brought in first ([`Uzswap::pin`]).
    pub kernel_faults: KernelFaults,
    pub handler: HandlerMode,
    /// Faults resolved by zero-filling a never-touched chunk.
    pub faults_zero: u64,
    /// Chunks those faults zero-filled (fault-around).
    pub zero_filled_chunks: u64,
    /// Faults served from the pool (vmstat pgmajfault).
    pub pgmajfault: u64,
    /// Write-protect faults that re-armed a clean chunk for writing.
    pub faults_wp: u64,
    /// Faults that installed one group (a page) of a chunk (PARTIAL).
    pub faults_partial: u64,
    /// Partial chunks completed by a fault, a write or a hint.
    pub partial_filled: u64,
    /// Chunks read in whole from the swap device keeping its slots as
    /// clean copies (`chunk::KEPT`): an eviction before any write claims
    /// them instead of storing the chunk again.
    pub kept_installs: u64,
    /// Chunks installed ahead of use by `Advice::WillNeed`.
    pub prefetched: u64,
    /// Faults that found their chunk owned and parked until it was released.
    pub faults_parked: u64,
    /// Microseconds faulting threads spent parked on an owned chunk (signal
    /// mode, where the faulting thread itself waits).
    pub parked_us: u64,
    /// Microseconds faults spent at the backstop: waiting for room under
    /// the budget, or evicting to make it.
    pub backstop_us: u64,
    /// Faults that found usage at the backstop's limit.
    pub backstop_waits: u64,
    /// Accessed-bit samples (`Config::sample_young`), the microseconds they
    /// took, the chunks they marked referenced, and the chunks split into
    /// mappings of their own.
    pub young_samples: u64,
    pub young_us: u64,
    pub young_marked: u64,
    pub young_splits: u64,
    /// The sampler's mode (`Config::sample_young`); of its trials judged
    /// (`young.rs`; the field keeps its first name, windows), those that
    /// did not pay (each stopped sampling for a while in `auto`); and the
    /// fault time its marks are estimated to have saved, in microseconds.
    pub young_mode: SampleYoung,
    pub young_windows: u64,
    pub young_windows_unpaid: u64,
    pub young_saved_us: u64,
    /// Figures of `auto`'s trials (`young.rs`; its judge counts faults
    /// per group instead): evictions of chunks held out of the marks
    /// while read, and the faults they took within a turn of the hand;
    /// the same of chunks not read.
    pub young_evicted_held: u64,
    pub young_faults_held: u64,
    pub young_evicted_idle: u64,
    pub young_faults_idle: u64,
    /// Fault events already resolved by the time they were read.
    pub faults_stale: u64,
    /// Faults a handler resolved for a registered thread on another CPU,
    /// and times a handler went on standby (`Uzswap::register_thread`).
    pub faults_remote: u64,
    pub handler_standbys: u64,
    /// Missing faults on pages the program had dropped itself
    /// (`MADV_DONTNEED` past [`Uzswap::discard`]): filled with zeros.
    pub faults_dropped: u64,
    /// Pages discarded in part of a stored chunk ([`Uzswap::discard`]):
    /// their entries made zero pages, the chunk left in the cache.
    pub discarded_stored_pages: u64,
    /// Pages the kernel zapped from a chunk before it refused the rest (a
    /// mapping locked behind uzswap's back), put back from the cache.
    pub zapped_restored: u64,
    pub fault_errors: u64,
    /// Chunks evicted (stored + zapped), and how many of them were clean
    /// drops (no compression).
    pub evicted_chunks: u64,
    pub evicted_clean: u64,
    /// Kept (clean) copies a write dropped: each cost a write-protect
    /// fault (`keep.rs`).
    pub copies_written: u64,
    /// Read faults installed writable, their copies not kept, because most
    /// of what reads installed protected was being written (`keep.rs`).
    pub reads_writable: u64,
    /// Chunks the evictor took from probation (a partial chunk read once,
    /// `evict.rs`) rather than by CLOCK.
    pub evicted_probation: u64,
    /// Groups the CLOCK hand trimmed from partial chunks it spared: mapped
    /// groups not faulted in since its last pass, evicted while the one
    /// group faulted in since stayed (`evict::trim`).
    pub evicted_trimmed: u64,
    /// Faults on a group trimmed from its chunk while the chunk stayed
    /// partial: the trims' mistakes.
    pub trim_refaults: u64,
    /// Partial chunks a batch had taken and then handed back, because a
    /// read of their unmapped pages was waiting on them.
    pub evict_yielded: u64,
    /// Stores refused (the chunk stayed resident).
    pub evict_aborts: u64,
    /// Write-protect calls the evictions made (each flushes the TLB of
    /// every CPU the program runs on); one call spans several victims
    /// where the chunks between allow (`evict::protect_ahead`).
    pub evict_protect_calls: u64,
    pub evict_batches: u64,
    /// Eviction steps (a probation step's worth, not a whole batch) the
    /// fault handler ran itself to hold the budget.
    pub evict_inline_batches: u64,
    /// Pages of evicted memory a forked child touched before its
    /// take-over registered them (`fork::reconcile_touched`): put back
    /// under the cache, what was written there kept.
    pub fork_touched_pages: u64,
    /// Charge points at which resident + pool was over the budget (0 when
    /// the budget held throughout).
    pub budget_overruns: u64,
    pub workingset_refault: u64,
    pub workingset_activate: u64,
    /// The pool share's ghosts (`share.rs`): faults on chunks evicted
    /// within a step of the budget's evictions, and device reads of pages
    /// written back within what a step holds compressed; the steps the
    /// share was moved up and down by them.
    pub share_ghost_resident: u64,
    pub share_ghost_device: u64,
    pub share_moves_up: u64,
    pub share_moves_down: u64,
    /// Service time (event read to install) of faults served from the pool.
    pub fault_latency_us: LatencySummary,
    pub zero_fill_latency_us: LatencySummary,
    #[serde(flatten)]
    pub zswap: ZswapStats,
}

#[derive(Default)]
struct Counters {
    faults_zero: AtomicU64,
    zero_filled_chunks: AtomicU64,
    pgmajfault: AtomicU64,
    faults_wp: AtomicU64,
    faults_partial: AtomicU64,
    partial_filled: AtomicU64,
    kept_installs: AtomicU64,
    prefetched: AtomicU64,
    faults_parked: AtomicU64,
    parked_ns: AtomicU64,
    backstop_ns: AtomicU64,
    backstop_waits: AtomicU64,
    faults_stale: AtomicU64,
    faults_dropped: AtomicU64,
    discarded_stored_pages: AtomicU64,
    zapped_restored: AtomicU64,
    fault_errors: AtomicU64,
    evicted_chunks: AtomicU64,
    evicted_clean: AtomicU64,
    copies_written: AtomicU64,
    reads_writable: AtomicU64,
    evicted_probation: AtomicU64,
    evicted_trimmed: AtomicU64,
    trim_refaults: AtomicU64,
    evict_yielded: AtomicU64,
    evict_aborts: AtomicU64,
    evict_protect_calls: AtomicU64,
    evict_batches: AtomicU64,
    fork_touched_pages: AtomicU64,
    evict_inline_batches: AtomicU64,
    budget_overruns: AtomicU64,
    workingset_refault: AtomicU64,
    workingset_activate: AtomicU64,
}

/// One registered mapping.
struct RegionInner {
    id: u32,
    base: usize,
    len: usize,
    /// Chunk states (`chunk.rs`).
    state: Box<[AtomicU32]>,
    /// Eviction time (low 32 bits of `Shared::evict_clock`) of each stored
    /// chunk: the workingset shadow. While a chunk is PARTIAL, when its
    /// first group came in (`fault::install_group`); the sampler reads a
    /// change as "evicted since" (`young.rs`).
    shadow: Box<[AtomicU32]>,
    /// The groups each stored chunk had mapped when it was evicted (all,
    /// for a whole chunk): a refault counts only on one of them. While a
    /// chunk is PARTIAL, the groups trimmed from it since its first group
    /// came in (`evict::trimmed_now`), which its eviction adds.
    evicted: Box<[std::sync::atomic::AtomicU16]>,
    /// The groups of each PARTIAL chunk faulted in (or written) since the
    /// CLOCK hand last passed it: the only reference a mapped page earns,
    /// per group (`evict::trim`). Racy by design, as `density`: it steers
    /// the choice of victims, never their correctness.
    fresh: Box<[std::sync::atomic::AtomicU16]>,
    /// What each chunk's last store kept of it, whether it came back
    /// within a turn since, and the CLOCK's extra passes spent on it
    /// (`evict::density`).
    density: Box<[std::sync::atomic::AtomicU16]>,
    /// False once teardown began. Read-held by anyone touching the memory
    /// or the chunk states with side effects.
    live: RwLock<bool>,
    /// Registered with the userfaultfd (see `Config::defer_register`); set
    /// once, under `Shared::mapped`.
    registered: AtomicBool,
    /// Pin counts of pinned chunks (`pin.rs`); the chunk word's PINNED flag
    /// mirrors "count > 0" and changes only under this lock.
    pins: Mutex<std::collections::HashMap<u32, u32>>,
    /// Taken over from a parent's instance in a forked child
    /// ([`Uzswap::adopt`]): one bit per chunk that may map pages the parent
    /// left (shared copy-on-write, charged to nobody here), the chunks the
    /// parent had touched. Such a chunk, while UNTOUCHED, is zapped by a
    /// discard, never spanned by a write-protect call, and not waited on
    /// by a pin; its bit is cleared once a discard has zapped it whole.
    inherited: Option<Box<[AtomicU64]>>,
    /// With `inherited`: per chunk, the mapped groups of a PARTIAL chunk
    /// taken over from the parent (`Uzswap::adopt_inheriting`), the
    /// parent's pages shared copy-on-write. As an inherited whole chunk's
    /// pages, they are charged to nobody here and no eviction takes them
    /// (a `keep` of every victim of the chunk): the child has no copy of
    /// them, and storing them would fill its pool with pages whose memory
    /// the parent still maps. Cleared (and charged) when the chunk is
    /// completed (`fault::fill`), and when a discard zaps it: both by the
    /// chunk's owner (BUSY), before the release that publishes its word,
    /// so whoever takes the chunk next (an eviction's compare-and-swap)
    /// reads the mask that goes with that word.
    shared: Option<Box<[std::sync::atomic::AtomicU16]>>,
    /// Set (never cleared) when an eviction first takes a chunk of this
    /// region (`evict::Victim::new`), before that chunk can be STORED or
    /// PARTIAL: no other path makes one, so a region without it has
    /// nothing a fork must bring in, and `prepare_fork` skips its scan
    /// (65 k chunk words twice per 4 GiB reservation, 0.3-0.4 ms of every
    /// shell's fork). Eviction holds a slot from the taking on, and the
    /// fork takes every slot before it reads this.
    evicted_once: AtomicBool,
}

impl RegionInner {
    fn new(
        id: u32,
        base: usize,
        nchunks: usize,
        chunk: usize,
        inherited: Option<Box<[AtomicU64]>>,
    ) -> Arc<Self> {
        Arc::new(RegionInner {
            id,
            base,
            len: nchunks * chunk,
            // Zero is UNTOUCHED and no shadow; only the words of chunks
            // used become resident.
            state: crate::swap::zeroed_records(nchunks),
            shadow: crate::swap::zeroed_records(nchunks),
            evicted: crate::swap::zeroed_records(nchunks),
            fresh: crate::swap::zeroed_records(nchunks),
            density: crate::swap::zeroed_records(nchunks),
            live: RwLock::new(true),
            registered: AtomicBool::new(false),
            pins: Mutex::new(std::collections::HashMap::new()),
            shared: inherited
                .as_ref()
                .map(|_| crate::swap::zeroed_records(nchunks)),
            inherited,
            evicted_once: AtomicBool::new(false),
        })
    }

    /// Whether chunk `ci` may map pages a parent left (`inherited`).
    fn may_map_inherited(&self, ci: usize) -> bool {
        self.inherited
            .as_ref()
            .is_some_and(|b| b[ci / 64].load(Relaxed) & (1 << (ci % 64)) != 0)
    }

    /// Chunk `ci` maps no page the parent left any more.
    fn clear_inherited(&self, ci: usize) {
        if let Some(b) = &self.inherited {
            b[ci / 64].fetch_and(!(1 << (ci % 64)), Relaxed);
        }
    }

    fn chunk_addr(&self, ci: usize, chunk: usize) -> usize {
        self.base + ci * chunk
    }

    /// The groups of chunk `ci` mapped from the parent and charged to
    /// nobody (`shared`).
    fn shared_mask(&self, ci: usize) -> u16 {
        self.shared.as_ref().map_or(0, |m| m[ci].load(Relaxed))
    }

    /// The bytes of those groups: what `chunk::charge` counts of chunk
    /// `ci` that resident does not.
    fn shared_bytes(&self, ci: usize, chunk: usize) -> u64 {
        let m = self.shared_mask(ci);
        if m == 0 {
            return 0;
        }
        let group = chunk::group_pages(chunk / PAGE_SIZE) * PAGE_SIZE;
        (m.count_ones() as usize * group) as u64
    }

    /// What chunk word `w` of chunk `ci` charges to resident (nothing for
    /// a word that maps nothing, BUSY included, whatever the mask says).
    fn charged(&self, ci: usize, w: u32, chunk: usize) -> u64 {
        chunk::charge(w, chunk).saturating_sub(self.shared_bytes(ci, chunk))
    }

    /// Chunk `ci`'s shared groups become its own (the caller charges
    /// them, or zaps them): their bytes.
    fn take_shared(&self, ci: usize, chunk: usize) -> u64 {
        let bytes = self.shared_bytes(ci, chunk);
        if bytes > 0 {
            if let Some(m) = &self.shared {
                m[ci].store(0, Relaxed);
            }
        }
        bytes
    }
}

/// State shared by the handles and the threads.
struct Shared {
    cfg: Config,
    chunk: usize,
    order: u32,
    /// The evictor's batch and the watermarks it sets (`batch.rs`).
    batch: batch::Batch,
    /// What one store can grow the pool by (`evict::Growth`).
    growth: evict::Growth,
    zswap: Arc<Zswap>,
    uffd: uzswap_swap::fds::Owned<Uffd>,
    open_path: OpenPath,
    /// Region start address → region.
    regions: RwLock<BTreeMap<usize, Arc<RegionInner>>>,
    /// Bytes of all live regions, registered or not. Held while a region is
    /// made, registered or dropped, so registration decisions see a stable
    /// total.
    mapped: Mutex<u64>,
    next_region: AtomicU32,
    resident: AtomicU64,
    peak: AtomicU64,
    /// The process's own memory counted in usage (`own.rs`).
    own: own::OwnMemory,
    /// Chunks evicted so far: the workingset clock.
    evict_clock: AtomicU64,
    /// The CLOCK hand, held only while an eviction takes its victims.
    clock: Mutex<evict::Clock>,
    /// Evictions running at once, each holding a slot (`evict.rs`).
    slots: evict::Slots,
    /// Set while a fork brings every chunk in (`pin.rs`): faults skip the
    /// backstop, since the forking thread holds every eviction slot.
    frozen: AtomicBool,
    /// Chunks that came in as one random read (a PARTIAL chunk's first
    /// group), oldest first, as (region id, chunk index): the evictor takes
    /// the ones still PARTIAL before it moves the CLOCK hand. Pushed, and
    /// bounded, by `evict::on_probation`.
    probation: Mutex<std::collections::VecDeque<(u32, u32)>>,
    kick: Mutex<bool>,
    /// The evictor's wait for work (`quiesce`: not a condition variable).
    kick_wake: Event,
    evictor_busy: AtomicBool,
    /// Eviction is futile until this many ns after `epoch` (see evict.rs).
    futile_until: AtomicU64,
    epoch: Instant,
    stop: AtomicBool,
    stop_fd: uzswap_swap::fds::Owned<std::os::fd::OwnedFd>,
    /// Which handler resolves faults taken on which CPU (`locality.rs`).
    locality: locality::Locality,
    ctr: Counters,
    /// `HandlerMode::Signal`: faults are resolved by the threads taking them.
    signal: bool,
    /// Signal mode: threads resolving a fault now (the backstop's count of
    /// installs that may land at once).
    faulting: std::sync::atomic::AtomicUsize,
    /// Per handler thread, odd while an install whose copy woke the
    /// faulting thread has not published the chunk's state yet
    /// (`fault::Publishing`): what `stats` and `resident_bytes` wait out.
    publishing: fault::PublishSeqs,
    /// The groups of the last faults resolved on stored memory
    /// (`fault::Recent`): what tells a scan from random access.
    recent: fault::Recent,
    /// Whether read faults keep clean copies (`keep.rs`).
    keep: keep::KeepCopy,
    lat_pool: Histogram,
    lat_zero: Histogram,
    /// Zeros, the source of zero-fill installs (one fault-around window).
    zeros: Vec<u8>,
    /// The configured pool share in bytes, when the evictor adapts it to
    /// the data's density (`share.rs`).
    base_share: Option<u64>,
    /// What steers that share (`share.rs`).
    ghosts: share::Ghosts,
    /// Accessed-bit sampling (`young.rs`).
    young: young::Young,
    young_ctr: young::YoungCounters,
}

impl Shared {
    fn usage(&self) -> u64 {
        self.resident.load(Relaxed) + self.zswap.pool_total_size() + self.own.bytes()
    }

    /// Bytes of regions not registered with userfaultfd yet: plain memory
    /// the budget does not govern.
    fn unregistered_bytes(&self) -> u64 {
        self.snapshot_regions()
            .iter()
            .filter(|r| !r.registered.load(Acquire))
            .map(|r| r.len as u64)
            .sum()
    }

    fn note_peak(&self) {
        let u = self.usage();
        if u > self.cfg.budget {
            self.ctr.budget_overruns.fetch_add(1, Relaxed);
        }
        self.peak.fetch_max(u, Relaxed);
    }

    fn lookup(&self, addr: usize) -> Option<Arc<RegionInner>> {
        let map = self.regions.read();
        let (_, r) = map.range(..=addr).next_back()?;
        (addr < r.base + r.len).then(|| r.clone())
    }

    fn snapshot_regions(&self) -> Vec<Arc<RegionInner>> {
        self.regions.read().values().cloned().collect()
    }

    fn entry(&self, r: &RegionInner, ci: usize) -> SwapEntry {
        SwapEntry::new(r.id, (ci as u64) << self.order)
    }

    /// Threads that may be installing a chunk at the same moment: the
    /// handler threads, or in signal mode the threads resolving a fault now
    /// (never counted below `handler_threads`, so both modes keep at least
    /// the same headroom under the budget).
    fn installers(&self) -> usize {
        if self.signal {
            self.faulting.load(Relaxed).max(self.cfg.handler_threads)
        } else {
            self.cfg.handler_threads
        }
    }

    fn wake(&self, addr: usize, len: usize) {
        if self.signal {
            // Nobody sleeps in the kernel on a fault: the faulting thread
            // resolves it, or waits on the chunk state itself.
            return;
        }
        // Nothing to do on failure: the range is gone (region torn down).
        let _ = self.uffd.wake(addr as *mut libc::c_void, len);
    }
}

/// Keeps the threads running; the last handle (instance or region) to go
/// stops and joins them.
struct Owner {
    sh: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if self.sh.signal {
            sigbus::detach(&self.sh);
        }
        self.sh.stop.store(true, SeqCst);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from `one` to our eventfd.
        let _ = unsafe {
            libc::write(
                self.sh.stop_fd.as_raw_fd(),
                &one as *const u64 as *const _,
                8,
            )
        };
        {
            let mut k = self.sh.kick.lock();
            *k = true;
            self.sh.kick_wake.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        // So the cache's own drop runs here, not in its shrinker thread.
        self.sh.zswap.stop_shrinker();
    }
}

/// A uzswap instance: the budget, the cache, the fault handler and evictor.
pub struct Uzswap {
    owner: Arc<Owner>,
}

impl Uzswap {
    pub fn new(cfg: Config) -> Result<Uzswap, RegionError> {
        // Its threads start side by side, waited for once, at the end.
        crate::compress::thread_hook::starting_together(|| Self::start(cfg))
    }

    fn start(mut cfg: Config) -> Result<Uzswap, RegionError> {
        if cfg.folio_order > MAX_ORDER {
            return Err(RegionError::Config(format!(
                "folio order {} out of range 0..={MAX_ORDER}",
                cfg.folio_order
            )));
        }
        if cfg.handler_threads == 0 || cfg.handler_threads > 64 {
            return Err(RegionError::Config("handler_threads must be 1..=64".into()));
        }
        if !(1..=100).contains(&cfg.pool_share_percent) {
            return Err(RegionError::Config(format!(
                "pool_share_percent {} out of range 1..=100",
                cfg.pool_share_percent
            )));
        }
        let order = cfg.folio_order.min(MAX_CHUNK_ORDER);
        let chunk = PAGE_SIZE << order;
        let min = min_budget(&cfg);
        if cfg.budget < min {
            return Err(RegionError::Config(format!(
                "budget of {} bytes is below the {} bytes ({} KiB) this configuration needs: \
                 headroom for the store and the faults in flight and two chunks of {} KiB",
                cfg.budget,
                min,
                min >> 10,
                chunk >> 10,
            )));
        }
        let sigbus = match cfg.handler {
            HandlerMode::Signal => Some(true),
            HandlerMode::Auto => None,
            HandlerMode::Block | HandlerMode::Spin { .. } => Some(false),
        };
        let (uffd, open_path, signal) = uffd_sys::open(sigbus, cfg.user_mode_only)?;
        if cfg.handler == HandlerMode::Auto {
            cfg.handler = if signal {
                HandlerMode::Signal
            } else {
                HandlerMode::Block
            };
        }
        cfg.zswap.pool_span_pages = evict::pool_span_pages(&cfg);
        let growth = evict::Growth::of(&cfg);
        let zswap = Arc::new(open_zswap(&cfg)?);
        if zswap.swap_device().is_some() {
            zswap.start_shrinker()?;
        }
        let huge = zswap.pool_may_map_huge();
        let evictors = match cfg.evictors {
            // One per thread that may fault at once, and the evictor
            // thread: then a fault at the backstop never waits for another
            // fault's eviction (docs/BENCHMARKS.md, "Several evictions at
            // once").
            0 => evict::evictors_for(cfg.budget, chunk, huge, cfg.handler_threads + 1, growth),
            n => n.min(evict::MAX_EVICTORS),
        };
        // The watermarks sit under the backstop's limit by a batch, so the
        // evictor normally keeps up and faults rarely evict (`batch.rs`).
        let batch = batch::Batch::new(
            cfg.budget,
            cfg.evict_batch_bytes,
            chunk,
            (chunk * cfg.handler_threads) as u64,
            evict::fault_margin(chunk, huge, evictors, growth),
        );
        let stop_fd = uzswap_swap::fds::eventfd(libc::EFD_NONBLOCK)
            .map_err(|e| RegionError::Os(format!("eventfd: {e}")))?;
        // The configured share, where there is one to adapt: a budget and
        // a swap device (as `open_zswap` limits the pool).
        let base_share = (cfg.adapt_pool_share && zswap.swap_device().is_some())
            .then(|| zswap.max_pool_bytes())
            .filter(|&b| b < u64::MAX);
        let handler_cpus = if signal {
            None
        } else {
            fault::handler_cpus(&cfg, cfg.handler_threads)
        };
        let sh = Arc::new(Shared {
            chunk,
            order,
            batch,
            growth,
            zswap,
            uffd,
            open_path,
            regions: RwLock::new(BTreeMap::new()),
            mapped: Mutex::new(0),
            next_region: AtomicU32::new(1),
            resident: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            own: Default::default(),
            evict_clock: AtomicU64::new(0),
            clock: Mutex::new(evict::Clock::default()),
            slots: evict::Slots::new(evictors),
            frozen: AtomicBool::new(false),
            probation: Mutex::new(std::collections::VecDeque::new()),
            young: young::Young::default(),
            young_ctr: young::YoungCounters::default(),
            kick: Mutex::new(false),
            kick_wake: Event::new(),
            evictor_busy: AtomicBool::new(false),
            futile_until: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            stop_fd,
            locality: locality::Locality::new(handler_cpus.as_deref()),
            ctr: Counters::default(),
            signal,
            faulting: std::sync::atomic::AtomicUsize::new(0),
            publishing: fault::PublishSeqs::new(if signal { 0 } else { cfg.handler_threads }),
            recent: Default::default(),
            keep: Default::default(),
            lat_pool: Histogram::default(),
            lat_zero: Histogram::default(),
            zeros: vec![0u8; chunk.max(cfg.zero_fill_around.next_multiple_of(chunk))],
            base_share,
            ghosts: Default::default(),
            cfg,
        });
        let owner = Arc::new(Owner {
            sh: sh.clone(),
            threads: Mutex::new(Vec::new()),
        });
        let mut threads = Vec::new();
        if signal {
            sigbus::attach(&sh)?;
        }
        let handlers = if signal { 0 } else { sh.cfg.handler_threads };
        for i in 0..handlers {
            let s = sh.clone();
            let cpu = handler_cpus.as_ref().map(|c| c[i]);
            threads.push(
                crate::compress::thread_hook::spawn(format!("uzswap-fault{i}"), move || {
                    if let Some(cpu) = cpu {
                        fault::bind_handler(cpu);
                    }
                    fault::handler_loop(&s, i)
                })
                .map_err(|e| RegionError::Os(format!("spawn: {e}")))?,
            );
        }
        if sh.cfg.budget != u64::MAX {
            let s = sh.clone();
            threads.push(
                crate::compress::thread_hook::spawn("uzswap-evict".into(), move || {
                    evict::evictor_loop(&s)
                })
                .map_err(|e| RegionError::Os(format!("spawn: {e}")))?,
            );
        }
        *owner.threads.lock() = threads;
        Ok(Uzswap { owner })
    }

    /// A new region of at least `len` bytes (rounded up to whole chunks),
    /// reading as zeros until written.
    pub fn region(&self, len: usize) -> Result<Region, RegionError> {
        self.region_near(0, len)
    }

    /// [`Uzswap::region`], placed at `hint` (rounded down to a chunk) where
    /// those addresses are free, as mmap(2) takes a hint; elsewhere if
    /// not. A zero hint leaves the place to the kernel.
    pub fn region_near(&self, hint: usize, len: usize) -> Result<Region, RegionError> {
        let sh = &self.owner.sh;
        let chunk = sh.chunk;
        if len == 0 {
            return Err(RegionError::Config("region length 0".into()));
        }
        let len = len
            .checked_next_multiple_of(chunk)
            .ok_or_else(|| RegionError::Config("region length overflows".into()))?;
        let npages = (len / PAGE_SIZE) as u64;
        if npages >= 1 << SwapEntry::INDEX_BITS {
            return Err(RegionError::Config(format!(
                "region of {len} bytes is too large"
            )));
        }
        let id = sh.next_region.fetch_add(1, Relaxed);
        if id >= 1 << 24 {
            return Err(RegionError::Config("out of region ids".into()));
        }
        // Over-map by one chunk so the region starts chunk-aligned.
        let map_len = len + chunk;
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                (hint - hint % chunk) as *mut libc::c_void,
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(RegionError::Os(format!(
                "mmap {len}: {}",
                std::io::Error::last_os_error()
            )));
        }
        let raw = p as usize;
        let base = raw.next_multiple_of(chunk);
        // SAFETY: both trims lie inside the mapping we just made and nothing
        // references them.
        unsafe {
            if base > raw {
                libc::munmap(raw as *mut _, base - raw);
            }
            let end = base + len;
            if raw + map_len > end {
                libc::munmap(end as *mut _, raw + map_len - end);
            }
        }
        let inner = RegionInner::new(id, base, len / chunk, chunk, None);
        let mut mapped = sh.mapped.lock();
        let total = *mapped + len as u64;
        if !sh.cfg.defer_register || total > sh.cfg.budget {
            // Nobody has this range's address yet: it holds no page.
            if let Err(e) = register(sh, &inner, Fresh::Yes) {
                // SAFETY: unmapping the region we mapped; nothing else uses it.
                unsafe { libc::munmap(base as *mut _, len) };
                return Err(e);
            }
            // The regions made so far fit the budget together; this one
            // does not, so from now on eviction may need any of them.
            for r in sh.snapshot_regions() {
                if !r.registered.load(Acquire) {
                    if let Err(e) = register(sh, &r, Fresh::No) {
                        let _ = sh.uffd.unregister(base as *mut _, len);
                        // SAFETY: as above.
                        unsafe { libc::munmap(base as *mut _, len) };
                        return Err(e);
                    }
                }
            }
        }
        *mapped = total;
        sh.regions.write().insert(base, inner.clone());
        drop(mapped);
        Ok(Region {
            owner: self.owner.clone(),
            inner,
        })
    }

    /// A region over the memory of `parent`, a region of the instance this
    /// process inherited at `fork` from its parent (the parent's instance,
    /// given up here with [`Uzswap::abandon_in_child`]; `parent` must then
    /// never be dropped: leak it). Its pages stay as
    /// they are and are charged to nobody here: the parent's, shared
    /// copy-on-write, so compressing them in the child would add a copy and
    /// free nothing while the parent maps them (the kernel's memory cgroup
    /// leaves them charged to the parent's group likewise). What the child
    /// faults in afresh is charged and evicted as in any region, a chunk
    /// with inherited pages included once a fault takes it in; a discard
    /// drops inherited pages as the kernel would.
    ///
    /// Which chunks may hold such pages is read from `parent`'s chunk
    /// states (those it had touched), so that a discard of memory the
    /// parent never touched costs no system call, as in any region.
    pub fn adopt(&self, parent: &Region) -> Result<Region, RegionError> {
        let chunk = self.owner.sh.chunk;
        let (base, len) = (parent.inner.base, parent.inner.len);
        // The parent's chunks are of `chunk` bytes (the same configuration)
        // or not: a chunk here may map pages where a parent chunk over any
        // of it was touched.
        let pc = parent.owner.sh.chunk;
        let p = &parent.inner;
        let touched = |pci: usize| {
            chunk::state(p.state[pci].load(Acquire)) != chunk::UNTOUCHED || p.may_map_inherited(pci)
        };
        if pc == chunk {
            // The usual case, and a fork's cost: no division per chunk.
            return self.adopt_with(base, len, touched, None, |_| Ok(()));
        }
        self.adopt_with(
            base,
            len,
            |ci| (ci * chunk / pc..((ci + 1) * chunk).div_ceil(pc).min(p.state.len())).any(touched),
            None,
            |_| Ok(()),
        )
    }

    /// [`Uzswap::adopt`] of any anonymous private mapping of whole chunks
    /// at `base..base + len`, not in a region of this instance: every
    /// chunk may map pages, which stay, charged to nobody.
    pub fn adopt_mapping(&self, base: usize, len: usize) -> Result<Region, RegionError> {
        self.adopt_with(base, len, |_| true, None, |_| Ok(()))
    }

    /// The region over `base..base + len` for [`Uzswap::adopt`]: chunks
    /// `may_map` names may map pages the parent left; its id is `id` where
    /// given (a parent's, whose keys the entries taken over carry), else a
    /// new one; `setup` runs on it before it is registered.
    fn adopt_with(
        &self,
        base: usize,
        len: usize,
        may_map: impl Fn(usize) -> bool,
        id: Option<u32>,
        setup: impl FnOnce(&RegionInner) -> Result<(), RegionError>,
    ) -> Result<Region, RegionError> {
        let sh = &self.owner.sh;
        let chunk = sh.chunk;
        if len == 0 || !base.is_multiple_of(chunk) || !len.is_multiple_of(chunk) {
            return Err(RegionError::Config(format!(
                "adopting {len} bytes at {base:#x}: not whole chunks of {chunk}"
            )));
        }
        if (len / PAGE_SIZE) as u64 >= 1 << SwapEntry::INDEX_BITS {
            return Err(RegionError::Config(format!(
                "region of {len} bytes is too large"
            )));
        }
        let overlaps = sh
            .regions
            .read()
            .range(..base + len)
            .next_back()
            .is_some_and(|(_, r)| r.base + r.len > base);
        if overlaps {
            return Err(RegionError::Config(format!(
                "adopting {base:#x}: already a region"
            )));
        }
        let id = match id {
            Some(id) => {
                if sh.regions.read().values().any(|r| r.id == id) {
                    return Err(RegionError::Config(format!(
                        "adopting {base:#x}: region id {id} is taken"
                    )));
                }
                sh.next_region.fetch_max(id + 1, Relaxed);
                id
            }
            None => sh.next_region.fetch_add(1, Relaxed),
        };
        if id >= 1 << 24 {
            return Err(RegionError::Config("out of region ids".into()));
        }
        let bits: Box<[AtomicU64]> = (0..(len / chunk).div_ceil(64))
            .map(|w| {
                let v = (w * 64..((w + 1) * 64).min(len / chunk))
                    .filter(|&ci| may_map(ci))
                    .fold(0u64, |v, ci| v | 1 << (ci % 64));
                AtomicU64::new(v)
            })
            .collect();
        let inner = RegionInner::new(id, base, len / chunk, chunk, Some(bits));
        setup(&inner)?;
        let mut mapped = sh.mapped.lock();
        // No scan of what is mapped (`Fresh::No` would charge it): the
        // inherited pages stay charged to nobody.
        register(sh, &inner, Fresh::Yes)?;
        *mapped += len as u64;
        sh.regions.write().insert(base, inner.clone());
        drop(mapped);
        Ok(Region {
            owner: self.owner.clone(),
            inner,
        })
    }

    /// Give up this instance in a forked child: its threads were the
    /// parent's, so nothing may call into it, wait on it or drop it (the
    /// caller leaks it and its regions, or takes them over with a new
    /// instance's [`Uzswap::adopt`]). Its descriptors are closed and, in
    /// signal mode, its faults no longer routed to it.
    ///
    /// # Safety
    /// Only in a child just forked from the process that made the
    /// instance, before anything else of uzswap's runs there; the instance
    /// and every region of it must then never be used or dropped.
    pub unsafe fn abandon_in_child(&self) {
        let sh = &self.owner.sh;
        if sh.signal {
            sigbus::detach(sh);
        }
        uzswap_swap::fds::close_all_in_child();
    }

    pub fn stats(&self) -> UzswapStats {
        stats_of(&self.owner.sh)
    }

    pub fn config(&self) -> &Config {
        &self.owner.sh.cfg
    }

    pub fn chunk_bytes(&self) -> usize {
        self.owner.sh.chunk
    }

    /// Resident plus pool bytes now.
    pub fn usage(&self) -> u64 {
        self.owner.sh.usage()
    }

    /// The cache below.
    pub fn zswap(&self) -> &Zswap {
        &self.owner.sh.zswap
    }
}

/// The smallest budget `cfg` can hold: the margin every fault leaves free
/// under it for the store in flight, and two chunks (one resident, one
/// coming in). Below it the watermarks sit at zero and every charge point
/// overruns: a budget that cannot be kept is refused, not ignored.
pub fn min_budget(cfg: &Config) -> u64 {
    let chunk = PAGE_SIZE << cfg.folio_order.min(MAX_CHUNK_ORDER);
    // One eviction at a time is enough to keep the budget; more run at
    // once only where the budget has room for their stores (`evictors`).
    let evictors = cfg.evictors.clamp(1, evict::MAX_EVICTORS);
    evict::fault_margin(
        chunk,
        cfg.zswap.huge_arenas,
        evictors,
        evict::Growth::of(cfg),
    ) + 2 * chunk as u64
}

/// Whether a region being registered was mapped just now (`register`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fresh {
    Yes,
    No,
}

/// Register `r` with the userfaultfd and take charge of the pages it has
/// already (see `Config::defer_register`). Called with `Shared::mapped` held.
///
/// Order matters: register first, then look. A page that appears after the
/// registration went through the handler (charged there); a page present
/// when we look cannot go away. A chunk whose every page is there (present,
/// or swapped out by the kernel) becomes RESIDENT here. A chunk with only
/// some pages is left UNTOUCHED and one of its holes is read: the missing
/// fault that raises has the handler zero-fill the holes (pages already
/// there answer EEXIST and are kept), so RESIDENT keeps meaning "every page
/// mapped" and the evictor never faults on a hole while it reads a chunk.
///
/// A `Fresh` region (registered as it is mapped, before its address is
/// handed out) has no page to take charge of, and its scan is skipped: the
/// pagemap of a reservation of gigabytes is megabytes of holes to read
/// (about 8 ms per 4 GiB), paid by every program start and every `exec`
/// under the runner.
fn register(sh: &Shared, r: &RegionInner, fresh: Fresh) -> Result<(), RegionError> {
    // Opened before anything changes: once the range is registered, a
    // failure here would leave pages nobody charged.
    let pagemap = match fresh {
        Fresh::Yes => None,
        Fresh::No => Some(
            pagemap::open()
                .map_err(|e| RegionError::Os(format!("opening /proc/self/pagemap: {e}")))?,
        ),
    };
    // SAFETY: madvise on the region's own mapping only changes its flags.
    // Faults are resolved by whole chunks of 4 KiB pages from now on;
    // khugepaged collapsing them would only copy memory behind our back.
    unsafe { libc::madvise(r.base as *mut _, r.len, libc::MADV_NOHUGEPAGE) };
    let ioctls = sh
        .uffd
        .register_with_mode(
            r.base as *mut _,
            r.len,
            RegisterMode::MISSING | RegisterMode::WRITE_PROTECT,
        )
        .map_err(|e| {
            RegionError::Unavailable(format!("UFFDIO_REGISTER (missing + write-protect): {e}"))
        })?;
    let need = IoctlFlags::COPY | IoctlFlags::WAKE | IoctlFlags::WRITE_PROTECT;
    if !ioctls.contains(need) {
        let _ = sh.uffd.unregister(r.base as *mut _, r.len);
        return Err(RegionError::Unavailable(format!(
            "registered range lacks ioctls {:?} (anonymous write-protect unsupported?)",
            need.difference(ioctls)
        )));
    }
    r.registered.store(true, Release);
    let Some(pagemap) = pagemap else {
        return Ok(());
    };
    let per = sh.chunk / PAGE_SIZE;
    let mut holes = Vec::new();
    let mut charged = 0u64;
    pagemap::for_each_chunk(&pagemap, r.base, r.len, per, |ci, touched, first_hole| {
        if touched == 0 {
            return;
        }
        if touched < per {
            holes.push(r.chunk_addr(ci, sh.chunk) + first_hole * PAGE_SIZE);
        } else if chunk::transition(
            &r.state[ci],
            chunk::UNTOUCHED,
            chunk::RESIDENT,
            0,
            chunk::REF,
        )
        .is_ok()
        {
            charged += sh.chunk as u64;
        }
    })
    .map_err(|e| RegionError::Os(format!("reading /proc/self/pagemap: {e}")))?;
    sh.resident.fetch_add(charged, Relaxed);
    for a in holes {
        // SAFETY: `a` is inside the live mapping of `r`; the read raises a
        // missing fault that is resolved with zeros (by a handler thread,
        // or in signal mode by this thread).
        unsafe { std::ptr::read_volatile(a as *const u8) };
    }
    sh.note_peak();
    evict::maybe_kick(sh);
    Ok(())
}

/// The cache below, with the swap device of `cfg.writeback` when there is
/// a budget to hold: the pool is then limited to its share of the budget,
/// and the shrinker thread writes back ahead of that limit.
fn open_zswap(cfg: &Config) -> Result<Zswap, RegionError> {
    let mut z = cfg.zswap.clone();
    if cfg.budget == u64::MAX {
        return Ok(Zswap::new(z)?);
    }
    if z.swap_device.is_none() {
        if let Some(wb) = &cfg.writeback {
            z.swap_device = Some(SwapDeviceConfig {
                dir: wb.dir.clone().unwrap_or_else(std::env::temp_dir),
                size_bytes: if wb.size_bytes > 0 {
                    wb.size_bytes
                } else {
                    cfg.budget.saturating_mul(2).max(64 << 20)
                },
                page_cluster: wb.page_cluster,
                direct_io: wb.direct_io && (wb.remote.is_none() || wb.file_first),
                discard: true,
                baseline_allocator: wb.baseline_allocator,
                remote: wb.remote.clone(),
                file_first: wb.file_first,
                far_size_bytes: wb.far_size_bytes,
            });
        }
    }
    if z.swap_device.is_some() && z.writeback_enabled {
        let share = cfg.budget / 100 * cfg.pool_share_percent as u64;
        z.max_pool_bytes = z.max_pool_bytes.min(share);
        // The shrinker thread starts a little below the limit, so stores
        // rarely have to write back themselves.
        z.pool_share_bytes = z.pool_share_bytes.min(share / 8 * 7);
    }
    if let Some(d) = z
        .swap_device
        .as_ref()
        .filter(|d| d.remote.is_none() || d.file_first)
    {
        warn_memory_backed(&d.dir);
    }
    match Zswap::new(z.clone()) {
        Err(ZswapError::Swap(SwapError::DirectIoUnsupported { dir, cause })) => {
            eprintln!(
                "uzswap: {} does not support O_DIRECT ({cause}); the swap device \
                 goes through the page cache",
                dir.display()
            );
            if let Some(d) = z.swap_device.as_mut() {
                d.direct_io = false;
            }
            Ok(Zswap::new(z)?)
        }
        r => Ok(r?),
    }
}

/// Say on stderr when the swap device would live in memory (tmpfs, as /tmp
/// often is, or ramfs): writeback there moves pages from the pool into RAM
/// (or the kernel's own swap) and frees nothing, which would otherwise go
/// unnoticed.
fn warn_memory_backed(dir: &std::path::Path) {
    if let Some(fs) = crate::swap::memory_backed_fs(dir) {
        eprintln!(
            "uzswap: warning: swap directory {} is on {fs}, which keeps files in memory: \
             pages written back there still take RAM; use a directory on a disk \
             filesystem",
            dir.display()
        );
    }
}

fn stats_of(sh: &Shared) -> UzswapStats {
    // A fault that returned to its thread is in these figures.
    sh.publishing.wait_published();
    let g = |c: &AtomicU64| c.load(Relaxed);
    let c = &sh.ctr;
    let ghosts = sh.ghosts.counts();
    UzswapStats {
        budget_bytes: sh.cfg.budget,
        chunk_bytes: sh.chunk as u64,
        evict_batch_bytes: sh.batch.bytes(),
        evictors: sh.slots.max() as u64,
        high_wmark_bytes: sh.batch.high(),
        low_wmark_bytes: sh.batch.low(),
        resident_bytes: g(&sh.resident),
        unregistered_bytes: sh.unregistered_bytes(),
        own_bytes: sh.own.bytes(),
        swap_capacity_pages: sh.zswap.swap_device().map_or(0, |d| d.capacity()),
        peak_bytes: g(&sh.peak),
        uffd_open: sh.open_path,
        kernel_faults: pin::kernel_faults(sh),
        handler: sh.cfg.handler,
        faults_zero: g(&c.faults_zero),
        zero_filled_chunks: g(&c.zero_filled_chunks),
        pgmajfault: g(&c.pgmajfault),
        faults_wp: g(&c.faults_wp),
        faults_partial: g(&c.faults_partial),
        partial_filled: g(&c.partial_filled),
        kept_installs: g(&c.kept_installs),
        prefetched: g(&c.prefetched),
        faults_parked: g(&c.faults_parked),
        parked_us: g(&c.parked_ns) / 1000,
        backstop_us: g(&c.backstop_ns) / 1000,
        backstop_waits: g(&c.backstop_waits),
        young_samples: g(&sh.young_ctr.samples),
        young_us: g(&sh.young_ctr.sample_ns) / 1000,
        young_marked: g(&sh.young_ctr.marked),
        young_splits: g(&sh.young_ctr.splits),
        young_mode: sh.cfg.sample_young,
        young_windows: g(&sh.young_ctr.windows),
        young_windows_unpaid: g(&sh.young_ctr.windows_unpaid),
        young_saved_us: g(&sh.young_ctr.saved_ns) / 1000,
        young_evicted_held: g(&sh.young_ctr.evicted_held),
        young_faults_held: g(&sh.young_ctr.faults_held),
        young_evicted_idle: g(&sh.young_ctr.evicted_idle),
        young_faults_idle: g(&sh.young_ctr.faults_idle),
        faults_stale: g(&c.faults_stale),
        faults_remote: sh.locality.remote(),
        handler_standbys: sh.locality.standbys(),
        faults_dropped: g(&c.faults_dropped),
        discarded_stored_pages: g(&c.discarded_stored_pages),
        zapped_restored: g(&c.zapped_restored),
        fault_errors: g(&c.fault_errors),
        evicted_chunks: g(&c.evicted_chunks),
        evicted_probation: g(&c.evicted_probation),
        evicted_trimmed: g(&c.evicted_trimmed),
        trim_refaults: g(&c.trim_refaults),
        evict_yielded: g(&c.evict_yielded),
        evicted_clean: g(&c.evicted_clean),
        copies_written: g(&c.copies_written),
        reads_writable: g(&c.reads_writable),
        evict_aborts: g(&c.evict_aborts),
        evict_protect_calls: g(&c.evict_protect_calls),
        evict_batches: g(&c.evict_batches),
        fork_touched_pages: g(&c.fork_touched_pages),
        evict_inline_batches: g(&c.evict_inline_batches),
        budget_overruns: g(&c.budget_overruns),
        workingset_refault: g(&c.workingset_refault),
        workingset_activate: g(&c.workingset_activate),
        share_ghost_resident: ghosts.0,
        share_ghost_device: sh.zswap.pool_ghost().near,
        share_moves_up: ghosts.1,
        share_moves_down: ghosts.2,
        fault_latency_us: sh.lat_pool.summary(),
        zero_fill_latency_us: sh.lat_zero.summary(),
        zswap: sh.zswap.stats(),
    }
}

/// Memory under uzswap. Reads as zeros until written; may be read and
/// written from any thread through [`Region::as_ptr`].
///
/// To keep part of it resident, pin it ([`Uzswap::pin_range`] and a touch,
/// or [`Uzswap::pin`]) rather than only `mlock(2)` it: the kernel refuses
/// to zap a locked mapping, so each eviction of such a chunk is undone
/// (the pages a refused zap had already taken put back from the cache),
/// work spent for nothing. `uzswap run` pins every range a program locks.
pub struct Region {
    owner: Arc<Owner>,
    inner: Arc<RegionInner>,
}

impl Region {
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.base as *mut u8
    }

    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    pub fn id(&self) -> u32 {
        self.inner.id
    }

    /// Whether the region is registered with the userfaultfd yet (see
    /// `Config::defer_register`): until it is, it is plain memory.
    pub fn is_registered(&self) -> bool {
        self.inner.registered.load(Acquire)
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is live for as long as `self`, readable, and
        // every access is resolved by the fault handler.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len()) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr(), self.len()) }
    }

    /// Bytes of this region mapped now (chunks RESIDENT, CLEAN, PARTIAL,
    /// or EVICTING from one of them): with the region quiescent, the
    /// instance's `resident_bytes` is the sum of this over its regions.
    pub fn resident_bytes(&self) -> u64 {
        self.owner.sh.publishing.wait_published();
        let chunk = self.owner.sh.chunk;
        let r = &self.inner;
        (0..r.state.len())
            .map(|ci| r.charged(ci, r.state[ci].load(Acquire), chunk))
            .sum()
    }

    /// Hint about the bytes `range` (widened to whole chunks).
    pub fn advise(&self, range: Range<usize>, advice: Advice) -> Result<(), RegionError> {
        if range.start > range.end || range.end > self.len() {
            return Err(RegionError::Config(format!(
                "range {range:?} outside region of {} bytes",
                self.len()
            )));
        }
        advise_in(&self.owner.sh, &self.inner, range, advice)
    }
}

/// [`Region::advise`] on region `r`, `range` in bytes from its start.
fn advise_in(
    sh: &Shared,
    r: &Arc<RegionInner>,
    range: Range<usize>,
    advice: Advice,
) -> Result<(), RegionError> {
    let chunks = range.start / sh.chunk..range.end.div_ceil(sh.chunk);
    match advice {
        Advice::Cold => {
            for ci in chunks {
                chunk::update_flags(&r.state[ci], chunk::REF | chunk::ACTIVE, 0);
            }
            Ok(())
        }
        Advice::PageOut => {
            {
                let _mapped = sh.mapped.lock();
                if !r.registered.load(Acquire) {
                    register(sh, r, Fresh::No)?;
                }
            }
            evict::page_out(sh, r, chunks);
            Ok(())
        }
        Advice::WillNeed => fault::will_need(sh, r, chunks),
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let sh = &self.owner.sh;
        let r = &self.inner;
        let mut mapped = sh.mapped.lock();
        // Wait for the evictor or a resolver working on this region, then
        // keep them out.
        *r.live.write() = false;
        sh.regions.write().remove(&r.base);
        *mapped -= r.len as u64;
        drop(mapped);
        let mut resident = 0u64;
        for (ci, s) in r.state.iter().enumerate() {
            // EVICTING: picked by an evictor that will see `live` false and
            // leave the chunk (and its charge) to us.
            resident += r.charged(ci, s.load(Acquire), sh.chunk);
        }
        sh.resident.fetch_sub(resident, Relaxed);
        if r.registered.load(Acquire) {
            let _ = sh.uffd.unregister(r.base as *mut _, r.len);
        }
        // SAFETY: the region's mapping; `self` was its only owner and no
        // thread of ours touches it any more (live is false).
        unsafe { libc::munmap(r.base as *mut _, r.len) };
        sh.zswap
            .invalidate_range(SwapEntry::new(r.id, 0), (r.len / PAGE_SIZE) as u64);
    }
}

/// The descriptor the handler polls, for `poll(2)`.
fn uffd_fd(sh: &Shared) -> i32 {
    sh.uffd.as_raw_fd()
}
