//! writeback: move cold entries from the pool to the swap device, and read
//! written-back pages on load (kernel: zswap_writeback_entry and the swapin
//! side of mm/page_io.c).
//!
//! # Protocol (one step of an LRU walk, one shard)
//! 1. Under the shard lock: pop nodes from the shard's ring (oldest first,
//!    no younger than the next shard's head, so the walk follows the global
//!    LRU). A stale node is dropped; if its key is being loaded and the walk
//!    is proactive, the walk stops (seed 003). A live, referenced entry gets
//!    its second chance: the bit is cleared and it gets a new node at the
//!    tail. A live, unreferenced entry is *isolated*: it keeps its `lru_seq`
//!    but has no node any more, and its object is copied out.
//! 2. With no lock held: verify each copy against its checksum (a corrupt
//!    object is not written; it stays in the pool so a load reports it),
//!    decompress it when the device holds plain pages, then lay each run
//!    of consecutive keys (a folio) out back to back, objects straddling
//!    slot boundaries, in as few contiguous slots as hold it (falling back
//!    to smaller orders, then the run goes out in parts), count each
//!    slot's users in the swap map (`swap_map`), seal each page of the run
//!    (`seal`, unless writeback is plain) in the thread's staging buffer
//!    (`secret`), and write the run with one write.
//! 3. Under the shard lock again: an isolated entry that still has the same
//!    `lru_seq` and handle is switched to its device form (it leaves the
//!    LRU); one that was loaded, invalidated or replaced meanwhile is left
//!    alone and its slot freed. After unlocking, the pool objects of the
//!    switched entries are freed.
//! 4. If the device is full or a write fails, the slots of that run are
//!    released, every entry not yet switched is put back at the LRU tail, the
//!    pages are counted in `reject_reclaim_fail`, and the walk stops:
//!    nothing leaves the pool unless its copy is on the device.
//!
//! Entries stored as is go first: a walk takes from the raw rings (see
//! `tree`) while any has nodes, then from the LRU. They take the same steps
//! (their LRU node stays behind and goes stale when they switch; a second
//! walker that isolates the same entry from it loses the check of step 3
//! and frees its slot).
//!
//! `lru_seq` is the identity check of step 3: it is unique for the life of
//! the instance, whereas a handle can be freed and handed to a new entry of
//! the same key in between.
//!
//! Loads of written-back pages read each stretch of adjacent or shared
//! slots their objects touch with one read (all of a load's stretches in
//! one device call: a remote target sends them as one round trip), and open (authenticate and
//! decrypt) every page of it before any object in it is used: a page that
//! fails is a `LoadError::Checksum` of the entry whose object it holds,
//! the same error as a corrupt pool object, and the entries stay stored (after hinting the device's
//! readahead window, page-cluster, to the kernel when it goes through the
//! page cache); an exclusive load that succeeds drops its objects' slot
//! counts, and a slot goes back with its last user.
//!
//! Why packed: at a budget the working set does not fit, device reads are
//! most of every fault, and the disk is shared by those reads and the
//! writeback's writes. A slot per object moved a whole page per page;
//! packed, a 64 KiB folio that compresses 1.7-2:1 is 8-10 slots, read and
//! written (docs/BENCHMARKS.md).

use super::entry::{checksum, Payload, SwapEntry, ZswapEntry};
use super::lru::Node;
use super::seal::SealError;
use super::secret::with_staging;
use super::stats::Counters;
use super::swap_map::DevicePlace;
use super::tree::ShardGuard;
use super::{LoadError, Zswap};
use crate::compress::{CompressCtx, CompressorId};
use crate::swap::{SlotRange, SwapDevice, SwapSlot};
use crate::zpool::Handle;
use crate::{MAX_ORDER, PAGE_SIZE};
use std::sync::atomic::Ordering::Relaxed;
use zeroize::Zeroizing;

/// Nodes taken from one ring per step (kernel reclaim's SWAP_CLUSTER_MAX).
const WB_BATCH: usize = 32;
/// Keys at most this far apart (within one max-order block) share a run of
/// contiguous slots; the holes are same-filled or absent pages.
const RUN_GAP: u64 = 8;
/// One device write covers at most `PAGE_SIZE << order` where `order` is
/// this pool limit's share, in whole orders, between `MIN_WRITE_ORDER`
/// and `MAX_ORDER` (a pool limit of 32 MiB and up: whole 2 MiB runs).
/// The bound is on memory, not speed: a write is staged whole (packed,
/// sealed) in its thread's buffer, which is kept for the next one, so
/// each thread that writes back holds a buffer as large as its largest
/// write, outside the budget. At small budgets whole runs cost more of
/// it than they save: three threads kept ~1.5 MiB each under a 33 MiB
/// budget (a 7 MiB pool).
const WRITE_SHARE: u64 = 16;
/// 64 slots, 256 KiB.
const MIN_WRITE_ORDER: u32 = 6;
/// Compact the pool whenever a walk has freed (written back) or shrunk
/// (recompressed) objects by this many bytes.
const COMPACT_EVERY: u64 = 1 << 20;
/// Most bytes of a run staged and written at once: what a staging buffer
/// keeps resident between uses (`secret`), so writing back never grows one.
const STAGE_PIECE: usize = super::secret::STAGING_RESIDENT;

/// Why a walk ended before its scan budget or goal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum ShrinkStop {
    /// The shrinker or writeback is off, or there is no device.
    Disabled,
    /// Only the protected (warm) region is left (seed 003).
    Protected,
    /// The LRU is empty.
    Empty,
    /// Met an entry being loaded (proactive walks only).
    Loading,
    /// The device has no free slot.
    DeviceFull,
    /// A device write failed.
    DeviceError,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WalkResult {
    pub scanned: u64,
    pub rotated: u64,
    pub written: u64,
    pub recompressed: u64,
    pub stop: Option<ShrinkStop>,
}

/// How a walk treats what it meets.
#[derive(Clone, Copy, Debug)]
pub(super) struct WalkMode {
    /// Stop at an entry being loaded (seed 003; the shrinker's own runs).
    pub proactive: bool,
    /// Recompress entries that have not had their pass through the dense
    /// compressor instead of writing them back (`recompress`). Off where a
    /// store waits for the room: a write frees a whole object at once.
    pub recompress: bool,
}

pub(super) struct Candidate {
    pub key: SwapEntry,
    pub seq: u64,
    pub handle: Handle,
    /// The object as it goes on the device (packed with its run), or the
    /// plain page; `len` bytes of it count. Program data: wiped on drop.
    pub data: Zeroizing<Box<[u8]>>,
    pub len: u16,
    pub comp: Option<CompressorId>,
    pub csum: u32,
}

/// Does the ring head `next` continue the run of the batch's last isolated
/// key (a folio's next page, past same-filled holes)? The pages of a folio
/// are stored together, so they sit next to each other in the ring; taking
/// them all makes the folio one run of contiguous slots and its fault one
/// device read.
///
/// Up to `max_bytes` of objects: what one device write takes
/// (`write_order`). A longer run goes out in several writes anyway, and
/// every object of a batch is held as a copy until it is written: runs of
/// 512 pages held 1.5 MiB of copies per walking thread, outside the
/// budget, under GNU sort's 46 MiB budget, whose writes are 512 KiB.
fn continues_run(batch: &[Candidate], next: Option<Node>, max_bytes: usize) -> bool {
    let (Some(last), Some(next)) = (batch.last(), next) else {
        return false;
    };
    let (pages, bytes) = batch
        .iter()
        .rev()
        .take_while(|c| c.key.0 >> MAX_ORDER == last.key.0 >> MAX_ORDER)
        .fold((0usize, 0usize), |(n, b), c| (n + 1, b + c.len as usize));
    next.key > last.key.0
        && next.key - last.key.0 <= RUN_GAP
        && next.key >> MAX_ORDER == last.key.0 >> MAX_ORDER
        && pages < 1 << MAX_ORDER
        && bytes < max_bytes
}

/// Objects a load read from the device: `index[i]` is the byte offset of
/// entry i's object in `buf` (program data once opened: wiped on drop).
pub(super) struct DevicePages {
    pub buf: Zeroizing<Vec<u8>>,
    pub index: Vec<Option<usize>>,
}

impl Zswap {
    /// Walk the LRU from its cold end, writing back (or recompressing, see
    /// [`WalkMode`]) unreferenced entries, until `done()` holds, `max_scan`
    /// live entries were examined, or a stop condition.
    pub(super) fn writeback_walk(
        &self,
        max_scan: u64,
        mode: WalkMode,
        ctx: &mut dyn CompressCtx,
        mut done: impl FnMut(&Zswap) -> bool,
    ) -> WalkResult {
        let mut res = WalkResult::default();
        let Some(dev) = self.device.as_deref() else {
            return res;
        };
        let mut unreturned = 0u64;
        let mut raw_from = 0;
        let max_run = PAGE_SIZE << write_order(self.max_pool_bytes());
        while res.scanned < max_scan && res.stop.is_none() && !done(self) {
            if !self.writeback_possible() {
                break;
            }
            if let Some(idx) = self.tree.raw_shard(raw_from) {
                raw_from = idx + 1;
                unreturned += self.writeback_raw(dev, idx, max_scan, ctx, &mut res);
                self.compact_every(&mut unreturned);
                continue;
            }
            let Some((idx, second)) = self.tree.lru.oldest_shard() else {
                res.stop = Some(ShrinkStop::Empty);
                break;
            };
            let mut batch = Vec::with_capacity(WB_BATCH);
            let mut dense = Vec::new();
            {
                let mut g = self.tree.lock_index(idx);
                let mut popped = false;
                loop {
                    // A run in progress is finished past the batch size and
                    // whatever the other shards' heads say: splitting a
                    // folio between batches would cost its fault two
                    // device reads.
                    let cont = continues_run(&batch, g.peek_lru(), max_run);
                    let full = batch.len() + dense.len() >= WB_BATCH;
                    if (full || res.scanned >= max_scan) && !cont {
                        break;
                    }
                    let limit = if popped && !cont { second } else { u64::MAX };
                    let Some(node) = g.pop_lru(limit) else { break };
                    popped = true;
                    if !g.is_live(node) {
                        if mode.proactive && g.is_loading(node.key) {
                            res.stop = Some(ShrinkStop::Loading);
                            break;
                        }
                        continue;
                    }
                    let Some(e) = self.second_chance(&mut g, node, &mut res) else {
                        continue;
                    };
                    if mode.recompress && self.wants_recompress(e) {
                        dense.push(self.isolate(node, e));
                    } else {
                        batch.push(self.isolate(node, e));
                    }
                }
            }
            if !dense.is_empty() {
                let (n, saved) = self.recompress_batch(idx, dense, ctx);
                res.recompressed += n;
                unreturned += saved;
            }
            unreturned += self.write_counted(dev, idx, batch, ctx, &mut res);
            self.compact_every(&mut unreturned);
            #[cfg(feature = "failpoints")]
            self.run_writeback_hook();
        }
        if unreturned > 0 {
            self.pool.compact();
        }
        Counters::add(&self.counters.shrink_scanned, res.scanned);
        Counters::add(&self.counters.shrink_rotated, res.rotated);
        res
    }

    /// Compact once a walk has freed or shrunk `unreturned` bytes of
    /// objects, at least `COMPACT_EVERY`. Objects written back, and the
    /// larger objects recompression replaced, leave holes in their spans
    /// (and emptied spans stay cached): only compaction turns them into the
    /// smaller pool that a walk's `done` looks for. Without it as the walk
    /// goes, a walk to a target writes back many times what it needed
    /// (measured: 22k pages written back to bring a 277 MiB pool to 272).
    fn compact_every(&self, unreturned: &mut u64) {
        if *unreturned >= COMPACT_EVERY {
            self.pool.compact();
            *unreturned = 0;
        }
    }

    /// One step of a walk on shard `idx`'s raw ring: entries stored as is
    /// go before the LRU's order, with their second chance (a referenced
    /// one is rotated on both rings), since writing one back frees a whole
    /// page of pool. Returns the pool bytes written back (`write_counted`).
    fn writeback_raw(
        &self,
        dev: &SwapDevice,
        idx: usize,
        max_scan: u64,
        ctx: &mut dyn CompressCtx,
        res: &mut WalkResult,
    ) -> u64 {
        let mut batch = Vec::with_capacity(WB_BATCH);
        {
            let mut g = self.tree.lock_index(idx);
            while batch.len() < WB_BATCH && res.scanned < max_scan {
                let Some(node) = g.pop_raw() else { break };
                if let Some(e) = self.second_chance(&mut g, node, res) {
                    batch.push(self.isolate(node, e));
                }
            }
        }
        self.write_counted(dev, idx, batch, ctx, res)
    }

    /// A walk meets the live entry of `node`: if it is referenced it loses
    /// the bit and goes to the tail (second chance; the kernel widens the
    /// protected region by it), else it is returned for the taking.
    fn second_chance<'g>(
        &self,
        g: &'g mut ShardGuard<'_>,
        node: Node,
        res: &mut WalkResult,
    ) -> Option<&'g mut ZswapEntry> {
        res.scanned += 1;
        let key = SwapEntry(node.key);
        let e = g.get_mut(key).expect("live node has an entry");
        if !e.referenced {
            return g.get_mut(key);
        }
        e.referenced = false;
        g.requeue(key);
        res.rotated += 1;
        self.tree.lru.protect(1);
        None
    }

    /// Write `batch` (isolated from shard `idx`) back and count it in `res`.
    /// Returns about the pool bytes its objects held, for the pages written
    /// (the batch's mean object size times those pages).
    fn write_counted(
        &self,
        dev: &SwapDevice,
        idx: usize,
        batch: Vec<Candidate>,
        ctx: &mut dyn CompressCtx,
        res: &mut WalkResult,
    ) -> u64 {
        if batch.is_empty() {
            return 0;
        }
        let n = batch.len() as u64;
        let bytes: u64 = batch.iter().map(|c| c.len as u64).sum();
        let (written, stop) = self.write_batch(dev, idx, batch, ctx);
        res.written += written;
        if stop.is_some() {
            res.stop = stop;
        }
        bytes * written / n
    }

    /// Copy an unreferenced entry's object out (under the shard lock).
    pub(super) fn isolate(&self, node: Node, e: &ZswapEntry) -> Candidate {
        let Payload::Pool { handle, len, comp } = e.payload else {
            unreachable!("only pool entries are on the LRU")
        };
        // The object's own length, not a page: a walk isolates a batch and
        // finishes a folio's run past it (up to 512 pages), and the
        // shrinker thread and a store's direct walk may each hold one.
        // Page-sized copies held ~1000 pages (4 MiB of glibc arenas,
        // outside the budget) at once under GNU sort's 46 MiB budget.
        let data = Zeroizing::new(self.pool.read(handle, |obj| Box::<[u8]>::from(obj)));
        Candidate {
            key: SwapEntry(node.key),
            seq: node.seq,
            handle,
            data,
            len,
            comp,
            csum: e.csum,
        }
    }

    /// Steps 2-4 of the protocol for candidates isolated from shard `idx`.
    /// Returns the pages written back and why it stopped early, if it did.
    fn write_batch(
        &self,
        dev: &SwapDevice,
        idx: usize,
        mut batch: Vec<Candidate>,
        ctx: &mut dyn CompressCtx,
    ) -> (u64, Option<ShrinkStop>) {
        let mut keep = Vec::new();
        batch.retain_mut(|c| {
            let ok = self.prepare(c, ctx);
            if !ok {
                keep.push((c.key, c.seq));
            }
            ok
        });
        if !keep.is_empty() {
            self.requeue(idx, &keep);
        }
        // Oldest first in the ring means store order; sort by key so the
        // pages of a folio (stored together) form one run. Same-filled pages
        // never reach the LRU, so a folio's pages may have small gaps in
        // their keys: they still get contiguous slots, so loading the folio
        // back is one device read.
        batch.sort_unstable_by_key(|c| c.key);
        let write_order = write_order(self.max_pool_bytes());
        let mut written = 0;
        let mut i = 0;
        while i < batch.len() {
            let mut j = i + 1;
            while j < batch.len()
                && batch[j].key.0 - batch[j - 1].key.0 <= RUN_GAP
                && batch[j].key.0 >> MAX_ORDER == batch[i].key.0 >> MAX_ORDER
                && j - i < 1 << MAX_ORDER
            {
                j += 1;
            }
            while i < j {
                // Pack the run's objects back to back into as few slots as
                // hold them, rounded up to an order; the tail slots go
                // back. If only a smaller order is free, the run goes out
                // in parts.
                let bytes: usize = batch[i..j].iter().map(|c| c.len as usize).sum();
                let want = bytes.div_ceil(PAGE_SIZE);
                let order = want.next_power_of_two().trailing_zeros().min(write_order);
                let Some((slot, got)) = dev.alloc_fallback(order) else {
                    self.give_up(idx, &batch[i..]);
                    return (written, Some(ShrinkStop::DeviceFull));
                };
                let room = PAGE_SIZE << got;
                let mut places = Vec::new();
                let mut at = 0usize;
                for c in &batch[i..j] {
                    if at + c.len as usize > room {
                        break;
                    }
                    places.push(DevicePlace {
                        slot: SwapSlot(slot.0 + (at / PAGE_SIZE) as u64),
                        off: (at % PAGE_SIZE) as u16,
                        len: c.len,
                    });
                    at += c.len as usize;
                }
                let n = places.len();
                let used = at.div_ceil(PAGE_SIZE);
                if used < 1 << got {
                    let r = dev.free(SwapSlot(slot.0 + used as u64), (1u64 << got) - used as u64);
                    debug_assert!(r.is_ok(), "{r:?}");
                }
                let map = self.swap_map.as_ref().expect("a device has a swap map");
                map.hold(&places);
                map.stamp(&places, self.counters.written_back_pages.load(Relaxed));
                // The packed image goes out in pieces of at most
                // `STAGE_PIECE`, each staged, sealed and written in turn:
                // staged whole, a run of 256 slots held a 1 MiB buffer per
                // writing thread, outside the budget. Any piece failing
                // fails the run, as a short write of the whole did.
                let objs = &batch[i..i + n];
                // Where object `k` starts in the run: packed back to back.
                let start = |k: usize| {
                    (places[k].slot.0 - slot.0) as usize * PAGE_SIZE + places[k].off as usize
                };
                let mut wrote = Ok(());
                // The first object not wholly in an earlier piece.
                let mut k0 = 0;
                for p0 in (0..used * PAGE_SIZE).step_by(STAGE_PIECE) {
                    let p1 = (p0 + STAGE_PIECE).min(used * PAGE_SIZE);
                    let first = SwapSlot(slot.0 + (p0 / PAGE_SIZE) as u64);
                    while k0 < n && start(k0) + objs[k0].len as usize <= p0 {
                        k0 += 1;
                    }
                    wrote = with_staging(p1 - p0, |buf| {
                        for (k, c) in objs.iter().enumerate().skip(k0) {
                            let o = start(k);
                            if o >= p1 {
                                break;
                            }
                            let (a, b) = (o.max(p0), (o + c.len as usize).min(p1));
                            buf[a - p0..b - p0].copy_from_slice(&c.data[a - o..b - o]);
                        }
                        if let Some(s) = &self.sealer {
                            // Exhausted nonces (2^56 seals of a slot) fail
                            // the write like an I/O error: the pages stay
                            // pooled.
                            s.seal(first, buf).map_err(|_| ())?;
                        }
                        let pages: Vec<&[u8]> = buf.chunks_exact(PAGE_SIZE).collect();
                        dev.write(first, &pages).map_err(|_| ())
                    });
                    if wrote.is_err() {
                        break;
                    }
                }
                if wrote.is_err() {
                    for &p in &places {
                        map.put(dev, p);
                    }
                    self.give_up(idx, &batch[i..]);
                    return (written, Some(ShrinkStop::DeviceError));
                }
                Counters::add(&self.counters.pswpout, n as u64);
                written += self.commit(dev, idx, &batch[i..i + n], &places);
                i += n;
            }
        }
        (written, None)
    }

    /// Verify a copy and put it in the device's format. False: corrupt, do
    /// not write it (it stays in the pool and its load reports the damage).
    fn prepare(&self, c: &mut Candidate, ctx: &mut dyn CompressCtx) -> bool {
        let obj = &c.data[..c.len as usize];
        if self.cfg.writeback_compressed || c.comp.is_none() {
            if checksum(c.key, obj) != c.csum {
                Counters::add(&self.counters.checksum_fail, 1);
                return false;
            }
            return true;
        }
        let mut page = Zeroizing::new(vec![0u8; PAGE_SIZE].into_boxed_slice());
        if self
            .decode(c.key, c.csum, c.comp, obj, &mut page, ctx)
            .is_err()
        {
            return false;
        }
        c.csum = checksum(c.key, &page);
        c.data = page;
        c.len = PAGE_SIZE as u16;
        c.comp = None;
        true
    }

    /// Step 3: switch the entries still unchanged to their device form.
    fn commit(
        &self,
        dev: &SwapDevice,
        idx: usize,
        run: &[Candidate],
        places: &[DevicePlace],
    ) -> u64 {
        let mut freed = Vec::with_capacity(run.len());
        let mut unused = Vec::new();
        {
            let mut g = self.tree.lock_index(idx);
            for (c, &p) in run.iter().zip(places) {
                match g.get(c.key) {
                    Some(e) if e.lru_seq == c.seq && e.handle() == Some(c.handle) => {
                        let old = *e;
                        let payload = Payload::Device {
                            slot: p.slot,
                            off: p.off,
                            len: c.len,
                            comp: c.comp,
                        };
                        g.set_written_back(c.key, payload, c.csum);
                        let new = *g.get(c.key).expect("just set");
                        freed.push((old, new));
                    }
                    _ => unused.push(p),
                }
            }
        }
        let map = self.swap_map.as_ref().expect("a device has a swap map");
        for p in unused {
            map.put(dev, p);
        }
        for (old, new) in &freed {
            self.account_remove(old);
            self.release(old);
            self.account_add(new);
        }
        let n = freed.len() as u64;
        Counters::add(&self.counters.written_back_pages, n);
        Counters::add(&self.counters.zswpwb, n);
        n
    }

    /// Step 4: the rest of the batch goes back on the LRU, counted as failed.
    fn give_up(&self, idx: usize, rest: &[Candidate]) {
        Counters::add(&self.counters.reject_reclaim_fail, rest.len() as u64);
        let nodes: Vec<(SwapEntry, u64)> = rest.iter().map(|c| (c.key, c.seq)).collect();
        self.requeue(idx, &nodes);
    }

    fn requeue(&self, idx: usize, nodes: &[(SwapEntry, u64)]) {
        let mut g = self.tree.lock_index(idx);
        for &(key, seq) in nodes {
            // Only if still isolated by us: loaded, invalidated or replaced
            // entries have no (or another) sequence number now.
            if g.is_live(Node { key: key.0, seq }) {
                g.requeue(key);
            }
        }
    }

    /// Read the written-back objects among `entries` (the folio from
    /// `first`), one read per stretch of adjacent or shared slots, all in
    /// one device call (one round trip on a remote device).
    pub(super) fn read_device(
        &self,
        first: SwapEntry,
        entries: &[ZswapEntry],
    ) -> Result<DevicePages, LoadError> {
        let mut out = DevicePages {
            buf: Zeroizing::new(Vec::new()),
            index: vec![None; entries.len()],
        };
        let mut places: Vec<(usize, DevicePlace)> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.place().map(|p| (i, p)))
            .collect();
        if places.is_empty() {
            return Ok(out);
        }
        let dev = self
            .device
            .as_deref()
            .expect("device entry without a device");
        places.sort_unstable_by_key(|&(_, p)| (p.slot, p.off));
        if let Some(map) = &self.swap_map {
            let now = self.counters.written_back_pages.load(Relaxed);
            let window = self.ghost_window.load(Relaxed);
            if places.iter().any(|&(_, p)| map.age(p, now) < window) {
                self.ghost_near.fetch_add(1, Relaxed);
            }
        }
        // Through the page cache, hint the readahead window so neighbours a
        // fault wants next are read meanwhile. With O_DIRECT the hint would
        // only fill the page cache with copies nobody reads.
        if !self.cfg.swap_device.as_ref().is_some_and(|d| d.direct_io) {
            dev.readahead(places[0].1.slot);
        }
        // The stretches of adjacent or shared slots: (places a..b, slots
        // start..end).
        let stretch = |a: usize| {
            let start = places[a].1.slots().start;
            let mut end = places[a].1.slots().end;
            let mut b = a + 1;
            while b < places.len() && places[b].1.slots().start <= end {
                end = end.max(places[b].1.slots().end);
                b += 1;
            }
            (b, start, end)
        };
        if dev.remote().is_some() {
            // All stretches in one call: one round trip to the far tier.
            let mut stretches = Vec::new();
            let mut runs = Vec::new();
            let mut a = 0;
            while a < places.len() {
                let (b, start, end) = stretch(a);
                let base = out.buf.len();
                stretches.push((a, b, start, base));
                runs.push(SlotRange::new(SwapSlot(start), end - start));
                out.buf.resize(base + (end - start) as usize * PAGE_SIZE, 0);
                a = b;
            }
            let t0 = std::time::Instant::now();
            dev.read_runs(&runs, &mut out.buf)
                .map_err(|e| LoadError::Device(first.offset(places[0].0 as u64), e.to_string()))?;
            self.read_latency.record(t0.elapsed().as_nanos() as u64);
            Counters::add(&self.counters.swap_reads, runs.len() as u64);
            for &(a, b, start, base) in &stretches {
                self.open_stretch(first, &places[a..b], start, base, &mut out)?;
            }
            return Ok(out);
        }
        // A file: one read per stretch, each opened as it arrives.
        let mut a = 0;
        while a < places.len() {
            let (b, start, end) = stretch(a);
            let base = out.buf.len();
            out.buf.resize(base + (end - start) as usize * PAGE_SIZE, 0);
            let t0 = std::time::Instant::now();
            dev.read(SwapSlot(start), end - start, &mut out.buf[base..])
                .map_err(|e| LoadError::Device(first.offset(places[a].0 as u64), e.to_string()))?;
            self.read_latency.record(t0.elapsed().as_nanos() as u64);
            Counters::add(&self.counters.swap_reads, 1);
            self.open_stretch(first, &places[a..b], start, base, &mut out)?;
            a = b;
        }
        Ok(out)
    }

    /// Open (unseal) the pages of one stretch read at `base` of `out.buf`,
    /// from slot `start`, and index the objects `places` of it.
    fn open_stretch(
        &self,
        first: SwapEntry,
        places: &[(usize, DevicePlace)],
        start: u64,
        base: usize,
        out: &mut DevicePages,
    ) -> Result<(), LoadError> {
        let end = places
            .iter()
            .map(|(_, p)| p.slots().end)
            .max()
            .unwrap_or(start);
        if let Some(s) = &self.sealer {
            let pages = &mut out.buf[base..base + (end - start) as usize * PAGE_SIZE];
            if let Err(SealError::Auth(bad) | SealError::Exhausted(bad)) =
                s.open(SwapSlot(start), pages)
            {
                // Name the first entry whose object touches the page.
                let (i, _) = places
                    .iter()
                    .find(|(_, p)| p.slots().contains(&bad.0))
                    .expect("a page read holds an object");
                Counters::add(&self.counters.seal_fail, 1);
                Counters::add(&self.counters.checksum_fail, 1);
                return Err(LoadError::Checksum(first.offset(*i as u64)));
            }
        }
        for &(i, p) in places {
            out.index[i] = Some(base + (p.slot.0 - start) as usize * PAGE_SIZE + p.off as usize);
        }
        Ok(())
    }
}

/// The largest device write, as an order, for a pool limit of `max_pool`
/// bytes (see `WRITE_SHARE`).
fn write_order(max_pool: u64) -> u32 {
    let pages = max_pool / WRITE_SHARE / PAGE_SIZE as u64;
    pages
        .checked_ilog2()
        .unwrap_or(0)
        .clamp(MIN_WRITE_ORDER, MAX_ORDER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_continues_up_to_one_writes_bytes() {
        let cand = |key: u64, len: u16| Candidate {
            key: SwapEntry(key),
            seq: 0,
            handle: Handle(0),
            data: Zeroizing::new(Box::from(&[][..])),
            len,
            comp: None,
            csum: 0,
        };
        let next = |key: u64| Some(Node { key, seq: 0 });
        let batch: Vec<Candidate> = (0..4).map(|k| cand(k, 1000)).collect();
        // The next key, under the byte bound: taken.
        assert!(continues_run(&batch, next(4), 8192));
        // Past a gap, or into the next 2 MiB block: not a run.
        assert!(!continues_run(&batch, next(4 + RUN_GAP), 8192));
        let end: Vec<Candidate> = (508..512).map(|k| cand(k, 10)).collect();
        assert!(!continues_run(&end, next(512), 8192));
        // The run already holds a write's worth of objects: stop.
        assert!(!continues_run(&batch, next(4), 4000));
        // Only the run's own objects count: those of an earlier 2 MiB
        // block do not.
        let mut split: Vec<Candidate> = vec![cand(600, 4000)];
        split.extend((1024..1026).map(|k| cand(k, 1000)));
        assert!(continues_run(&split, next(1026), 4000));
        assert!(!continues_run(&[], next(0), 8192));
    }

    #[test]
    fn writes_are_bounded_by_the_pool_limit() {
        const MIB: u64 = 1 << 20;
        // A 33 MiB budget's 20% pool: 256 KiB writes.
        assert_eq!(write_order(7 * MIB), MIN_WRITE_ORDER);
        assert_eq!(write_order(0), MIN_WRITE_ORDER);
        assert_eq!(write_order(16 * MIB), 8);
        // From 32 MiB of pool up: whole 2 MiB runs, as without a bound.
        assert_eq!(write_order(32 * MIB), MAX_ORDER);
        assert_eq!(write_order(u64::MAX), MAX_ORDER);
    }
}
