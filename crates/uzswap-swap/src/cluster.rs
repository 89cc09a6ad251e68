//! The cluster slot allocator (mm/swapfile.c after seed 001, "rework of swap
//! allocator locks").
//!
//! The device is cut into clusters of [`SWAPFILE_CLUSTER`] (512) slots. Each
//! cluster (`ci`, [`ClusterInfo`]) has its own lock guarding its slot bitmap,
//! its `count` of allocated slots, its `flags` and its `order` (a cluster
//! serves one allocation order while it is in use, so large runs stay
//! aligned and available). The device lock (`si->lock`, [`Lists`]) guards
//! only the cluster lists:
//!
//! ```text
//!   free            count == 0, ready to serve any order
//!   nonfull[order]  0 < count < 512, was full and had slots freed
//!   frag[order]     0 < count < 512, is (or was) some thread's current
//!                   cluster, or failed a scan of its order
//!   full            count == 512
//!   discard         count == 0, waiting for its slots to be punched out of
//!                   the backing file before it goes back to free
//! ```
//!
//! Unlike the kernel's, the free list is LIFO: a cluster that empties goes
//! back at its head and is the next one taken. The kernel rotates through
//! the device to spread SSD wear; here the device is a file (wear is the
//! filesystem's business) or Redis, and what rotating would cost is memory:
//! the per-slot records of sealing and of the far tier (`slot_table`) and
//! the file's blocks are touched for every cluster ever used, so with LIFO
//! they stay as large as the most clusters in use at once (sqlite at a
//! 25 MiB budget on a 1 GiB device: the seal's records held 3.2 MiB of
//! touched pages with FIFO).
//!
//! # Lock order
//!
//! ```text
//!   ci->lock  ->  si->lock           (cluster_move: list moves)
//!   si->lock  ->  trylock(ci->lock)  (cluster_isolate_lock: never blocks)
//! ```
//!
//! The fast path (allocate from this thread's current cluster, or free into
//! any cluster that does not change list) takes only `ci->lock`. The
//! allocation fast path ([`ClusterAllocator::alloc`]'s `alloc_fast`) only
//! serves a cluster already on nonfull/frag of the order that stays there
//! after the allocation; in every other case it declines without changing
//! anything and the slow path retakes the cluster lock and does the list
//! moves. When a
//! cluster must change list, its owner takes `si->lock` *inside* `ci->lock`
//! for the O(1) relink and drops it at once. Taking a cluster off a list
//! goes the other way, so it uses `try_lock` and skips clusters someone else
//! holds: it can never wait on a cluster lock while holding the device lock.
//! No path holds two cluster locks, except [`ClusterAllocator::check_invariants`]
//! which takes them all in index order before `si->lock`.
//!
//! # Cluster state machine
//!
//! `flags` always names the list the cluster is on; both change together
//! under `ci->lock` + `si->lock`, so a holder of `ci->lock` knows the list
//! without touching `si->lock`.
//!
//! ```text
//!   FREE/NONFULL/FRAG ──isolate──> NONE ──scan, relocate──> FRAG | FULL
//!   FREE ──fast-path alloc (a stale hint)──> FRAG | FULL
//!   NONFULL/FRAG ──fast-path alloc──> unchanged | FULL
//!   NONFULL ──fast-path scan fails──> FRAG
//!   FULL ──free, count stays > 0──> NONFULL
//!   FRAG ──free, count stays > 0──> FRAG (no move, see `free_range`)
//!   NONFULL/FRAG/FULL ──free, count hits 0──> DISCARD (discard hook) | FREE
//!   DISCARD ──taken by the discarder (off-list, flag stays DISCARD)──>
//!           punch hole ──> NONE ──> FREE
//! ```
//!
//! `NONE` means "isolated": off every list and held under `ci->lock` by the
//! isolating thread until it relocates it, so no other thread ever observes
//! `NONE`. A `DISCARD` cluster is either on the discard list or being
//! discarded; it never serves allocations (its count is 0, so no free can
//! reach it either).
//!
//! # Per-thread current cluster
//!
//! Each thread keeps, per order, the slot where its next scan should start
//! (`percpu_cluster->next[order]`). Userspace has no per-CPU data, so the
//! hints live in [`HINT_SLOTS`] cache-line-padded slots indexed by a small
//! per-thread number handed out on each thread's first allocation and kept
//! in a const-initialized thread-local (one TLS load). Compared with a
//! thread-local keyed by allocator id, this costs no map lookup per
//! allocation, nothing leaks when one of many allocators is dropped, and the
//! same slot carries that thread's sharded statistics counters. A hint is
//! only advice: it is read without locks, and a stale or shared one merely
//! leads to a cluster whose state is rechecked under its lock.

use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};

use crate::bitmap;
use crate::entry::{check_one_cluster, check_range, SlotError, SlotRange, SwapSlot};
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};
use crate::{AllocStats, SlotAllocator, MAX_ORDER, NR_ORDERS, SWAPFILE_CLUSTER};

const WORDS: usize = SWAPFILE_CLUSTER / 64;
/// Number of per-thread hint slots (a power of two).
pub const HINT_SLOTS: usize = 64;

/// Which list a cluster is on (`ci->flags`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ClusterFlag {
    /// Isolated: off-list, held by the isolating thread.
    None,
    Free,
    Nonfull,
    Frag,
    Full,
    Discard,
}

/// Per-cluster state, guarded by the cluster's own lock (`ci->lock`).
/// `repr(C)` keeps what the fast path touches (bitmap, count, flags, order,
/// the order-0 counter) on the lock's cache line.
#[derive(Debug)]
#[repr(C)]
struct ClusterInfo {
    map: [u64; WORDS],
    count: u16,
    flags: ClusterFlag,
    order: u8,
    /// Allocations served here, per order: counted under the lock this path
    /// holds anyway, so statistics cost no shared atomic on the fast path.
    allocs: [u64; NR_ORDERS],
}

impl ClusterInfo {
    /// `cluster_is_usable`: can the fast path allocate `order` here?
    fn usable(&self, order: u32) -> bool {
        matches!(
            self.flags,
            ClusterFlag::Free | ClusterFlag::Nonfull | ClusterFlag::Frag
        ) && (self.count == 0 || u32::from(self.order) == order)
    }
}

/// Keeps each cluster lock (and each hint slot) on its own cache line.
#[repr(align(128))]
struct Padded<T>(T);

/// A cluster: its lock, and a copy of its count that `used()` can sum
/// without taking every lock (stored, never read-modify-written, under the
/// lock, so it costs a plain store on the cache line the lock already owns).
#[repr(C)]
struct Cluster {
    count: StdAtomicU64,
    ci: Mutex<ClusterInfo>,
}

// List ids in `Lists`.
const LIST_FREE: usize = 0;
const LIST_NONFULL: usize = 1; // + order
const LIST_FRAG: usize = LIST_NONFULL + NR_ORDERS; // + order
const LIST_FULL: usize = LIST_FRAG + NR_ORDERS;
const LIST_DISCARD: usize = LIST_FULL + 1;
const NR_LISTS: usize = LIST_DISCARD + 1;
const NO_LIST: u8 = u8::MAX;
const NIL: u32 = u32::MAX;

fn list_of(flag: ClusterFlag, order: u8) -> usize {
    match flag {
        ClusterFlag::Free => LIST_FREE,
        ClusterFlag::Nonfull => LIST_NONFULL + order as usize,
        ClusterFlag::Frag => LIST_FRAG + order as usize,
        ClusterFlag::Full => LIST_FULL,
        ClusterFlag::Discard => LIST_DISCARD,
        ClusterFlag::None => unreachable!("NONE is off-list"),
    }
}

/// The cluster lists, guarded by the device lock (`si->lock`): intrusive
/// doubly linked lists over cluster indices, so every move is O(1).
#[derive(Debug)]
struct Lists {
    head: [u32; NR_LISTS],
    tail: [u32; NR_LISTS],
    len: [u32; NR_LISTS],
    next: Vec<u32>,
    prev: Vec<u32>,
    on: Vec<u8>,
    /// Clusters taken off the discard list and not yet back on free.
    discarding: u32,
}

impl Lists {
    fn unlink(&mut self, c: u32) {
        let ci = c as usize;
        let list = self.on[ci] as usize;
        debug_assert!(list < NR_LISTS);
        let (p, n) = (self.prev[ci], self.next[ci]);
        if p == NIL {
            self.head[list] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[list] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.len[list] -= 1;
        self.on[ci] = NO_LIST;
        self.next[ci] = NIL;
        self.prev[ci] = NIL;
    }

    fn push_head(&mut self, list: usize, c: u32) {
        let ci = c as usize;
        debug_assert_eq!(self.on[ci], NO_LIST);
        let h = self.head[list];
        self.next[ci] = h;
        self.prev[ci] = NIL;
        if h == NIL {
            self.tail[list] = c;
        } else {
            self.prev[h as usize] = c;
        }
        self.head[list] = c;
        self.len[list] += 1;
        self.on[ci] = list as u8;
    }

    /// Where a cluster goes on `list`: a freed cluster at the head of the
    /// free list (reused first, see the module comment), others at the tail.
    fn push(&mut self, list: usize, c: u32) {
        if list == LIST_FREE {
            self.push_head(list, c);
        } else {
            self.push_tail(list, c);
        }
    }

    fn push_tail(&mut self, list: usize, c: u32) {
        let ci = c as usize;
        debug_assert_eq!(self.on[ci], NO_LIST);
        let t = self.tail[list];
        self.prev[ci] = t;
        self.next[ci] = NIL;
        if t == NIL {
            self.head[list] = c;
        } else {
            self.next[t as usize] = c;
        }
        self.tail[list] = c;
        self.len[list] += 1;
        self.on[ci] = list as u8;
    }
}

/// One thread's current clusters (`next[order]`, slot + 1, 0 = none) and its
/// shard of the failure counters (failures take the slow path anyway).
struct HintSlot {
    next: [AtomicU64; NR_ORDERS],
    fail: [StdAtomicU64; NR_ORDERS],
}

impl HintSlot {
    fn new() -> Self {
        Self {
            next: std::array::from_fn(|_| AtomicU64::new(0)),
            fail: std::array::from_fn(|_| StdAtomicU64::new(0)),
        }
    }
}

/// This thread's hint slot. The index is assigned on the thread's first
/// allocation; the thread-local has a const initializer and no destructor,
/// so reading it is a single TLS load with no lazy-init check.
#[inline]
fn this_thread_slot() -> usize {
    use std::cell::Cell;
    thread_local!(static SLOT: Cell<usize> = const { Cell::new(usize::MAX) });
    let s = SLOT.with(Cell::get);
    if s < HINT_SLOTS {
        s
    } else {
        assign_thread_slot(&SLOT)
    }
}

#[cold]
fn assign_thread_slot(key: &'static std::thread::LocalKey<std::cell::Cell<usize>>) -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT_ID: AtomicUsize = AtomicUsize::new(0);
    let s = NEXT_ID.fetch_add(1, StdOrdering::Relaxed) % HINT_SLOTS;
    key.with(|c| c.set(s));
    s
}

/// Called with each emptied cluster's slot range before it returns to the
/// free list (the device punches a hole there). Runs with no lock held.
pub type DiscardHook = Box<dyn Fn(SlotRange) + Send + Sync>;

/// What to do with the thread's hint after a scan.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Hint {
    Update,
    /// Order-0 steal from another order's cluster: do not make it current.
    Clear,
}

/// The cluster allocator. See the module comment for the design.
pub struct ClusterAllocator {
    clusters: Box<[Padded<Cluster>]>,
    /// The device lock.
    lists: Mutex<Lists>,
    hints: Box<[Padded<HintSlot>; HINT_SLOTS]>,
    nslots: u64,
    discard: Option<DiscardHook>,
    discards: StdAtomicU64,
}

impl std::fmt::Debug for ClusterAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAllocator")
            .field("nslots", &self.nslots)
            .field("clusters", &self.clusters.len())
            .finish_non_exhaustive()
    }
}

impl ClusterAllocator {
    /// An allocator over `nclusters` clusters (`nclusters * 512` slots), all
    /// free. Emptied clusters go straight back to the free list.
    pub fn new(nclusters: usize) -> Self {
        Self::build(nclusters, None)
    }

    /// Like [`new`](Self::new), but an emptied cluster passes through the
    /// discard list and `hook` is called for it (outside every lock) before
    /// it is free again.
    pub fn with_discard(nclusters: usize, hook: DiscardHook) -> Self {
        Self::build(nclusters, Some(hook))
    }

    fn build(nclusters: usize, discard: Option<DiscardHook>) -> Self {
        assert!(nclusters < NIL as usize, "too many clusters");
        let mut lists = Lists {
            head: [NIL; NR_LISTS],
            tail: [NIL; NR_LISTS],
            len: [0; NR_LISTS],
            next: vec![NIL; nclusters],
            prev: vec![NIL; nclusters],
            on: vec![NO_LIST; nclusters],
            discarding: 0,
        };
        for c in 0..nclusters {
            lists.push_tail(LIST_FREE, c as u32);
        }
        let clusters = (0..nclusters)
            .map(|_| {
                Padded(Cluster {
                    ci: Mutex::new(ClusterInfo {
                        map: [0; WORDS],
                        count: 0,
                        flags: ClusterFlag::Free,
                        order: 0,
                        allocs: [0; NR_ORDERS],
                    }),
                    count: StdAtomicU64::new(0),
                })
            })
            .collect();
        Self {
            clusters,
            lists: Mutex::new(lists),
            // Built on the heap: the array is too large for a small stack
            // (loom's model threads), and a fixed length lets the per-thread
            // index (always < HINT_SLOTS) skip the bounds check.
            hints: (0..HINT_SLOTS)
                .map(|_| Padded(HintSlot::new()))
                .collect::<Box<[_]>>()
                .try_into()
                .unwrap_or_else(|_| unreachable!("HINT_SLOTS hint slots")),
            nslots: (nclusters * SWAPFILE_CLUSTER) as u64,
            discard,
            discards: StdAtomicU64::new(0),
        }
    }

    pub fn nr_clusters(&self) -> usize {
        self.clusters.len()
    }

    /// `alloc_swap_entry`: `2^order` naturally aligned slots, or `None`.
    /// Order 0 may take a slot from another order's clusters; larger orders
    /// fail instead so the caller can fall back to a smaller order.
    #[inline]
    pub fn alloc(&self, order: u32) -> Option<SwapSlot> {
        if order > MAX_ORDER {
            return None;
        }
        let hs = &self.hints[this_thread_slot()].0;
        // Order 0 gets its own copy of the fast path, with the run length a
        // constant (a single bit to find and set).
        let fast = if order == 0 {
            self.alloc_fast(0, hs)
        } else {
            self.alloc_fast(order, hs)
        };
        if let Some(s) = fast {
            return Some(SwapSlot(s));
        }
        let got = self.alloc_slow(order, hs);
        if got.is_none() {
            hs.fail[order as usize].fetch_add(1, StdOrdering::Relaxed);
        }
        got.map(SwapSlot)
    }

    /// The fast path: this thread's current cluster, still on nonfull/frag
    /// for `order`, has a free run at or after the hint and stays off the
    /// full list after taking it. Only `ci->lock` is taken, and nothing is
    /// relocated. Anything else (no hint, a cluster that changed state, a
    /// failed scan, the allocation that fills the cluster) returns `None`
    /// *before touching the cluster*, and the slow path redoes it with the
    /// list moves it needs.
    #[inline(always)]
    fn alloc_fast(&self, order: u32, hs: &HintSlot) -> Option<u64> {
        let o = order as usize;
        let hint = hs.next[o].load(Ordering::Relaxed);
        let slot = hint.checked_sub(1)?;
        let c = (slot / SWAPFILE_CLUSTER as u64) as usize;
        let cl = &self.clusters.get(c)?.0;
        let n = 1usize << order;
        let mut ci = cl.ci.lock();
        // Nonfull/frag of this order implies 0 < count < 512: no relocation
        // unless this allocation fills the cluster.
        if !matches!(ci.flags, ClusterFlag::Nonfull | ClusterFlag::Frag)
            || u32::from(ci.order) != order
            || ci.count as usize + n >= SWAPFILE_CLUSTER
        {
            return None;
        }
        let from = (slot % SWAPFILE_CLUSTER as u64) as usize;
        let off = bitmap::find_free(&ci.map, from, SWAPFILE_CLUSTER, order)?;
        bitmap::set(&mut ci.map, off, n);
        ci.count += n as u16;
        ci.allocs[o] += 1;
        cl.count.store(u64::from(ci.count), StdOrdering::Relaxed);
        drop(ci);
        let base = (c * SWAPFILE_CLUSTER) as u64;
        let next = if off + 2 * n <= SWAPFILE_CLUSTER {
            base + (off + n) as u64 + 1
        } else {
            0
        };
        hs.next[o].store(next, Ordering::Relaxed);
        Some(base + off as u64)
    }

    /// Everything the fast path declined: the hinted cluster with the list
    /// moves it needs, then isolation from the lists.
    #[inline(never)]
    fn alloc_slow(&self, order: u32, hs: &HintSlot) -> Option<u64> {
        let o = order as usize;
        // This thread's current cluster again, now free to relocate it.
        let hint = hs.next[o].load(Ordering::Relaxed);
        if hint != 0 {
            let slot = hint - 1;
            let c = (slot / SWAPFILE_CLUSTER as u64) as usize;
            if let Some(cl) = self.clusters.get(c) {
                let ci = cl.0.ci.lock();
                if ci.usable(order) {
                    let from = if ci.count == 0 {
                        0
                    } else {
                        (slot % SWAPFILE_CLUSTER as u64) as usize
                    };
                    if let Some(s) = self.alloc_in_cluster(c, ci, from, order, hs, Hint::Update) {
                        return Some(s);
                    }
                }
            }
        }

        // Clusters that recently had slots freed keep this order's
        // allocations compact, so they go before a fresh free cluster.
        let bound = self.clusters.len();
        for _ in 0..bound {
            let Some((c, ci)) = self.isolate(LIST_NONFULL + o) else {
                break;
            };
            // A failed scan relocates it to frag[order].
            if let Some(s) = self.alloc_in_cluster(c, ci, 0, order, hs, Hint::Update) {
                return Some(s);
            }
        }

        loop {
            if let Some((c, ci)) = self.isolate(LIST_FREE) {
                if let Some(s) = self.alloc_in_cluster(c, ci, 0, order, hs, Hint::Update) {
                    return Some(s);
                }
            }
            // Rotate through frag[order] once: clusters that failed an
            // earlier scan may have had slots freed since.
            if order < MAX_ORDER {
                if let Some(s) = self.scan_list_once(LIST_FRAG + o, order, hs, Hint::Update) {
                    return Some(s);
                }
            }
            // Clusters waiting for discard become free once discarded.
            if !self.do_scheduled_discard() {
                break;
            }
        }

        if order > 0 {
            return None;
        }
        // Order 0 steals from the other orders' partly used clusters.
        for other in 1..NR_ORDERS {
            if let Some(s) = self.scan_list_once(LIST_FRAG + other, 0, hs, Hint::Clear) {
                return Some(s);
            }
            if let Some(s) = self.scan_list_once(LIST_NONFULL + other, 0, hs, Hint::Clear) {
                return Some(s);
            }
        }
        None
    }

    /// Tries each cluster on `list` at most once (by the list's length when
    /// we start), rotating failed ones to the tail of their frag list.
    fn scan_list_once(&self, list: usize, order: u32, hs: &HintSlot, hint: Hint) -> Option<u64> {
        let n = self.lists.lock().len[list];
        for _ in 0..n {
            let (c, ci) = self.isolate(list)?;
            if let Some(s) = self.alloc_in_cluster(c, ci, 0, order, hs, hint) {
                return Some(s);
            }
        }
        None
    }

    /// `cluster_isolate_lock`: takes the first cluster on `list` whose lock
    /// is free, off the list, flag NONE, and returns it locked. Contended
    /// clusters are skipped, so this may fail on a non-empty list.
    fn isolate(&self, list: usize) -> Option<(usize, MutexGuard<'_, ClusterInfo>)> {
        let mut l = self.lists.lock();
        let mut c = l.head[list];
        while c != NIL {
            if let Some(mut ci) = self.clusters[c as usize].0.ci.try_lock() {
                debug_assert_eq!(list_of(ci.flags, ci.order), list);
                l.unlink(c);
                ci.flags = ClusterFlag::None;
                return Some((c as usize, ci));
            }
            c = l.next[c as usize];
        }
        None
    }

    /// `alloc_swap_scan_cluster`: scans `ci` from `from` for an aligned free
    /// run of `order`, takes it, relocates the cluster and unlocks it.
    fn alloc_in_cluster(
        &self,
        c: usize,
        mut ci: MutexGuard<'_, ClusterInfo>,
        from: usize,
        order: u32,
        hs: &HintSlot,
        hint: Hint,
    ) -> Option<u64> {
        let n = 1usize << order;
        let base = (c * SWAPFILE_CLUSTER) as u64;
        let mut found = None;
        let mut next = 0;
        if ci.count as usize + n <= SWAPFILE_CLUSTER {
            if let Some(off) = bitmap::find_free(&ci.map, from, SWAPFILE_CLUSTER, order) {
                if ci.count == 0 {
                    ci.order = order as u8;
                }
                bitmap::set(&mut ci.map, off, n);
                ci.count += n as u16;
                ci.allocs[order as usize] += 1;
                self.clusters[c]
                    .0
                    .count
                    .store(u64::from(ci.count), StdOrdering::Relaxed);
                found = Some(base + off as u64);
                if (ci.count as usize) < SWAPFILE_CLUSTER && off + 2 * n <= SWAPFILE_CLUSTER {
                    next = base + (off + n) as u64 + 1;
                }
            }
        }
        self.relocate(c, &mut ci, found.is_some());
        drop(ci);
        if hint == Hint::Update {
            hs.next[order as usize].store(next, Ordering::Relaxed);
        }
        found
    }

    /// `relocate_cluster`: after a scan, put the cluster on the list its
    /// state calls for. A cluster that served an allocation and is already on
    /// nonfull/frag stays put, so the fast path does not touch `si->lock`.
    fn relocate(&self, c: usize, ci: &mut ClusterInfo, success: bool) {
        let want = match ci.flags {
            // Stays on the discard list or with its discarder.
            ClusterFlag::Discard => return,
            _ if ci.count == 0 => ClusterFlag::Free,
            _ if ci.count as usize == SWAPFILE_CLUSTER => ClusterFlag::Full,
            ClusterFlag::Nonfull | ClusterFlag::Frag if success => return,
            _ => ClusterFlag::Frag,
        };
        if want == ClusterFlag::Free {
            ci.order = 0;
        }
        if ci.flags != want {
            self.move_cluster(c, ci, want);
        }
    }

    /// `move_cluster`: relink under the device lock, taken inside `ci->lock`.
    fn move_cluster(&self, c: usize, ci: &mut ClusterInfo, flag: ClusterFlag) {
        debug_assert_ne!(ci.flags, flag);
        let mut l = self.lists.lock();
        if l.on[c] != NO_LIST {
            l.unlink(c as u32);
        }
        l.push(list_of(flag, ci.order), c as u32);
        ci.flags = flag;
    }

    /// `swap_do_scheduled_discard`: discards every cluster on the discard
    /// list and returns it to free. True if it discarded any.
    fn do_scheduled_discard(&self) -> bool {
        let Some(hook) = &self.discard else {
            return false;
        };
        let mut did = false;
        loop {
            let c = {
                let mut l = self.lists.lock();
                let c = l.head[LIST_DISCARD];
                if c == NIL {
                    break;
                }
                // Off-list with its flag kept at DISCARD: nothing allocates
                // from it or frees into it meanwhile.
                l.unlink(c);
                l.discarding += 1;
                c as usize
            };
            let start = (c * SWAPFILE_CLUSTER) as u64;
            hook(SlotRange::new(SwapSlot(start), SWAPFILE_CLUSTER as u64));
            self.discards.fetch_add(1, StdOrdering::Relaxed);
            let mut ci = self.clusters[c].0.ci.lock();
            debug_assert_eq!((ci.flags, ci.count), (ClusterFlag::Discard, 0));
            ci.order = 0;
            let mut l = self.lists.lock();
            l.push(LIST_FREE, c as u32);
            l.discarding -= 1;
            ci.flags = ClusterFlag::Free;
            did = true;
        }
        did
    }

    /// `swap_entries_free`: returns `start..start+npages` (inside one cluster,
    /// all allocated). Any sub-run of an allocation may be freed on its own.
    #[inline]
    pub fn free_range(&self, start: SwapSlot, npages: u64) -> Result<(), SlotError> {
        check_range(start.0, npages, self.nslots)?;
        check_one_cluster(start.0, npages)?;
        self.free_checked(start, npages)
    }

    /// The free itself, on a range already checked to lie inside one cluster
    /// of the device. Only `ci->lock` is taken unless the cluster changes
    /// list (it empties, or it was full).
    #[inline(always)]
    fn free_checked(&self, start: SwapSlot, npages: u64) -> Result<(), SlotError> {
        let c = start.cluster();
        let off = (start.0 % SWAPFILE_CLUSTER as u64) as usize;
        let n = npages as usize;
        let cl = &self.clusters[c].0;
        let mut ci = cl.ci.lock();
        if !bitmap::all_set(&ci.map, off, n) {
            return Err(SlotError::NotAllocated {
                start: start.0,
                npages,
            });
        }
        bitmap::clear(&mut ci.map, off, n);
        ci.count -= n as u16;
        cl.count.store(u64::from(ci.count), StdOrdering::Relaxed);
        // A FRAG or NONFULL cluster that keeps slots stays where it is. A
        // FRAG one is typically some thread's current cluster, and putting
        // it on nonfull would send other threads into it (the cluster lock
        // would then bounce between them) and cost a device lock per free.
        if ci.count == 0 || ci.flags == ClusterFlag::Full {
            self.free_relocate(c, ci);
        }
        Ok(())
    }

    /// The list move after a free: `free_cluster` when the cluster emptied,
    /// `partial_free_cluster` when it was full.
    #[cold]
    fn free_relocate(&self, c: usize, mut ci: MutexGuard<'_, ClusterInfo>) {
        if ci.count != 0 {
            self.move_cluster(c, &mut ci, ClusterFlag::Nonfull);
            return;
        }
        if self.discard.is_some() {
            self.move_cluster(c, &mut ci, ClusterFlag::Discard);
            drop(ci);
            self.do_scheduled_discard();
        } else {
            self.move_cluster(c, &mut ci, ClusterFlag::Free);
            ci.order = 0;
        }
    }

    /// True if every slot of the range is allocated.
    pub fn is_allocated(&self, range: SlotRange) -> Result<bool, SlotError> {
        check_range(range.start.0, range.npages, self.nslots)?;
        let mut pos = range.start.0;
        while pos < range.end() {
            let c = (pos / SWAPFILE_CLUSTER as u64) as usize;
            let cend = ((c + 1) * SWAPFILE_CLUSTER) as u64;
            let n = cend.min(range.end()) - pos;
            let ci = self.clusters[c].0.ci.lock();
            let off = (pos % SWAPFILE_CLUSTER as u64) as usize;
            if !bitmap::all_set(&ci.map, off, n as usize) {
                return Ok(false);
            }
            pos += n;
        }
        Ok(true)
    }

    /// Runs any pending discards now (normally done by the freeing thread).
    pub fn flush_discards(&self) -> bool {
        self.do_scheduled_discard()
    }

    /// The flag and count of cluster `c` (for tests and reports).
    pub fn cluster_state(&self, c: usize) -> Option<(ClusterFlag, u32, u32)> {
        let ci = self.clusters.get(c)?.0.ci.lock();
        Some((ci.flags, u32::from(ci.count), u32::from(ci.order)))
    }

    /// Number of clusters on each list: (free, nonfull per order, frag per
    /// order, full, discard).
    pub fn list_lengths(&self) -> ListLengths {
        let l = self.lists.lock();
        ListLengths {
            free: l.len[LIST_FREE],
            nonfull: std::array::from_fn(|o| l.len[LIST_NONFULL + o]),
            frag: std::array::from_fn(|o| l.len[LIST_FRAG + o]),
            full: l.len[LIST_FULL],
            discard: l.len[LIST_DISCARD],
        }
    }

    /// Verifies every invariant of the module comment: flags match list
    /// membership (and the list's order), counts match bitmaps and flags,
    /// list links and lengths are consistent, and the sum of counts equals
    /// `used()`. Meant for tests: call it while no other operation is in
    /// flight. It takes every cluster lock in index order, then the device
    /// lock, which respects the lock order.
    pub fn check_invariants(&self) -> Result<(), String> {
        let cis: Vec<_> = self.clusters.iter().map(|c| c.0.ci.lock()).collect();
        let l = self.lists.lock();
        if l.discarding != 0 {
            return Err(format!("{} clusters mid-discard", l.discarding));
        }
        let mut total = 0u64;
        for (c, ci) in cis.iter().enumerate() {
            let count = bitmap::count_ones(&ci.map);
            if count != u64::from(ci.count) {
                return Err(format!(
                    "cluster {c}: count {} but {count} bits set",
                    ci.count
                ));
            }
            total += count;
            let ok = match ci.flags {
                ClusterFlag::None => false,
                ClusterFlag::Free | ClusterFlag::Discard => ci.count == 0,
                ClusterFlag::Full => ci.count as usize == SWAPFILE_CLUSTER,
                ClusterFlag::Nonfull | ClusterFlag::Frag => {
                    ci.count > 0 && (ci.count as usize) < SWAPFILE_CLUSTER
                }
            };
            if !ok {
                return Err(format!(
                    "cluster {c}: flag {:?} with count {}",
                    ci.flags, ci.count
                ));
            }
            if ci.flags == ClusterFlag::Free && ci.order != 0 {
                return Err(format!("free cluster {c} keeps order {}", ci.order));
            }
            let want = list_of(ci.flags, ci.order) as u8;
            if l.on[c] != want {
                return Err(format!(
                    "cluster {c}: flag {:?} order {} but on list {}",
                    ci.flags, ci.order, l.on[c]
                ));
            }
        }
        for list in 0..NR_LISTS {
            let (mut c, mut prev, mut n) = (l.head[list], NIL, 0u32);
            while c != NIL {
                if l.on[c as usize] as usize != list || l.prev[c as usize] != prev {
                    return Err(format!("list {list}: broken link at cluster {c}"));
                }
                n += 1;
                if n as usize > cis.len() {
                    return Err(format!("list {list}: cycle"));
                }
                prev = c;
                c = l.next[c as usize];
            }
            if l.tail[list] != prev || l.len[list] != n {
                return Err(format!(
                    "list {list}: tail/len mismatch ({} vs {n})",
                    l.len[list]
                ));
            }
        }
        let used = self.used();
        if used != total {
            return Err(format!("used() is {used} but clusters hold {total}"));
        }
        Ok(())
    }
}

/// Cluster counts per list, from [`ClusterAllocator::list_lengths`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListLengths {
    pub free: u32,
    pub nonfull: [u32; NR_ORDERS],
    pub frag: [u32; NR_ORDERS],
    pub full: u32,
    pub discard: u32,
}

impl SlotAllocator for ClusterAllocator {
    fn name(&self) -> &'static str {
        "cluster"
    }

    fn alloc(&self, order: u32) -> Option<SwapSlot> {
        ClusterAllocator::alloc(self, order)
    }

    fn free(&self, start: SwapSlot, order: u32) -> Result<(), SlotError> {
        crate::entry::check_order_run(start.0, order)?;
        // An aligned run of at most one cluster never crosses one, so only
        // the range check is left (order 0 gets its own constant-length copy).
        check_range(start.0, 1 << order, self.nslots)?;
        if order == 0 {
            self.free_checked(start, 1)
        } else {
            self.free_checked(start, 1 << order)
        }
    }

    fn capacity(&self) -> u64 {
        self.nslots
    }

    fn used(&self) -> u64 {
        self.clusters
            .iter()
            .map(|c| c.0.count.load(StdOrdering::Relaxed))
            .sum()
    }

    fn stats(&self) -> AllocStats {
        let mut st = AllocStats {
            capacity: self.nslots,
            used: self.used(),
            discards: self.discards.load(StdOrdering::Relaxed),
            ..AllocStats::default()
        };
        for h in self.hints.iter() {
            for o in 0..NR_ORDERS {
                st.alloc_fail[o] += h.0.fail[o].load(StdOrdering::Relaxed);
            }
        }
        for c in self.clusters.iter() {
            let ci = c.0.ci.lock();
            for o in 0..NR_ORDERS {
                st.alloc[o] += ci.allocs[o];
            }
        }
        // Every slot handed out is either still used or was freed.
        let handed: u64 = (0..NR_ORDERS).map(|o| st.alloc[o] << o).sum();
        st.freed = handed.saturating_sub(st.used);
        st
    }
}
