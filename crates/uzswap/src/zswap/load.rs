//! load: bring a page or folio back (kernel: zswap_load).
//!
//! Exclusive loads (the default) take the entries out of the tree under the
//! shard lock and decompress after dropping it: the caller now owns the only
//! copy, so nothing can free the objects under us. If any page fails to
//! verify or decompress, every entry goes back into the tree: a corrupt page
//! keeps failing loudly instead of reading as never stored (zero).
//! Keep-copy loads decompress pool objects under the shard lock so a
//! concurrent invalidate cannot free one mid-read; their device reads run
//! unlocked on pinned slots, and the entries are checked unchanged before
//! anything is decoded (`keep_copy_read`).

use super::entry::{checksum, Payload, SwapEntry, ZswapEntry};
use super::same_filled;
use super::stats::Counters;
use super::swap_map::DevicePlace;
use super::tree::ShardGuard;
use super::writeback::DevicePages;
use super::{folio_bytes, LoadError, LoadMode, Zswap};
use crate::compress::{self, CompressCtx};
use crate::{MAX_ORDER, PAGE_SIZE};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

/// Folios up to this many pages are decompressed on the calling thread: below
/// it, handing work to another CPU costs more than it saves (a cross-CPU
/// wake-up is 15-100 us on small VMs; a page decompresses in 1-3 us).
const INLINE_PAGES: usize = 16;

impl Zswap {
    /// Load one page into `out` (PAGE_SIZE bytes).
    pub fn load(&self, entry: SwapEntry, out: &mut [u8], mode: LoadMode) -> Result<(), LoadError> {
        self.load_folio(entry, 0, out, mode)
    }

    /// Load with the instance's default mode.
    pub fn load_default(&self, entry: SwapEntry, out: &mut [u8]) -> Result<(), LoadError> {
        self.load(entry, out, self.cfg.default_load)
    }

    /// Load a whole folio. Fails with `NotFound` (and changes nothing) unless
    /// every page of it is stored. After any error `out` holds unspecified
    /// bytes; the entries are as they were.
    pub fn load_folio(
        &self,
        first: SwapEntry,
        order: u32,
        out: &mut [u8],
        mode: LoadMode,
    ) -> Result<(), LoadError> {
        if order > MAX_ORDER {
            return Err(LoadError::BadOrder(order));
        }
        if out.len() != folio_bytes(order) {
            return Err(LoadError::BadSize {
                got: out.len(),
                expected: folio_bytes(order),
            });
        }
        self.load_span(first, 1 << order, out, mode, Some(order))
    }

    /// Load `n` consecutive pages starting at `first`, which need not form
    /// a folio (a caller holding some pages of a folio loads the others)
    /// but must lie in one aligned 2 MiB group, as a folio does. Fails with
    /// `NotFound` (and changes nothing) unless every page is stored.
    pub fn load_pages(
        &self,
        first: SwapEntry,
        n: usize,
        out: &mut [u8],
        mode: LoadMode,
    ) -> Result<(), LoadError> {
        let group = 1u64 << MAX_ORDER;
        if n == 0 || first.index() % group + n as u64 > group {
            return Err(LoadError::BadRange(first, n));
        }
        if out.len() != n * PAGE_SIZE {
            return Err(LoadError::BadSize {
                got: out.len(),
                expected: n * PAGE_SIZE,
            });
        }
        self.load_span(first, n, out, mode, None)
    }

    /// `n` pages inside one shard group; `order`: a whole folio of that
    /// order (counted in the per-order figures).
    fn load_span(
        &self,
        first: SwapEntry,
        n: usize,
        out: &mut [u8],
        mode: LoadMode,
        order: Option<u32>,
    ) -> Result<(), LoadError> {
        match mode {
            LoadMode::Exclusive => {
                let entries = {
                    let mut shard = self.tree.lock(first, n as u64);
                    if let Some(missing) = (0..n as u64)
                        .map(|i| first.offset(i))
                        .find(|&k| shard.get(k).is_none())
                    {
                        return Err(LoadError::NotFound(missing));
                    }
                    // The shrinker stops when it meets these keys (seed 003:
                    // an entry being loaded means it reached warm pages).
                    shard.begin_load(first, n as u64);
                    (0..n as u64)
                        .map(|i| shard.remove(first.offset(i)).unwrap())
                        .collect::<Vec<_>>()
                };
                match self.decompress_all(first, &entries, out) {
                    Ok(_) => {
                        self.tree.lock(first, n as u64).end_load(first, n as u64);
                        self.count_load(order, &entries);
                        for e in &entries {
                            self.account_remove(e);
                            self.release(e);
                        }
                    }
                    Err(err) => {
                        // Put every entry back unless a store raced in.
                        let mut shard = self.tree.lock(first, n as u64);
                        shard.end_load(first, n as u64);
                        let mut lost_race = Vec::new();
                        for (i, e) in entries.iter().enumerate() {
                            let k = first.offset(i as u64);
                            if shard.get(k).is_none() {
                                shard.insert(k, *e);
                            } else {
                                lost_race.push(*e);
                            }
                        }
                        drop(shard);
                        for e in &lost_race {
                            self.account_remove(e);
                            self.release(e);
                        }
                        return Err(err);
                    }
                }
            }
            LoadMode::KeepCopy | LoadMode::KeepPinned | LoadMode::KeepClean => {
                let CopyRead {
                    mut shard,
                    entries,
                    dev,
                    pins,
                } = self.keep_copy_read(first, n, out)?;
                let mut promoted = Vec::new();
                if mode == LoadMode::KeepPinned {
                    // All of the folio's written-back pages or none: a folio
                    // half in the pool and half on the device would cost
                    // its next faults more device reads, not fewer.
                    let want: u64 = entries
                        .iter()
                        .map(|e| match e.payload {
                            Payload::Device {
                                len, comp: Some(_), ..
                            } => len as u64,
                            Payload::Device { comp: None, .. } => u64::MAX / 4,
                            _ => 0,
                        })
                        .sum();
                    // Under the pool's share only: above it the shrinker
                    // would write back as much again (churn), and a pool
                    // grown to its limit takes memory from resident pages.
                    let room = self.pool_share_bytes().min(self.limit.max());
                    let pool = self.pool.total_size();
                    let promote = want > 0 && pool.saturating_add(want) <= room;
                    // Pinned copies cannot be written back: above the share
                    // they stay on the LRU, so the shrinker can always make
                    // room and the caller's budget holds.
                    let pin = pool <= room;
                    for (i, e) in entries.iter().enumerate() {
                        let key = first.offset(i as u64);
                        if promote {
                            if let Some(new) = self.promote(key, e, &dev, i, false) {
                                shard.set_promoted(key, new.payload);
                                promoted.push((*e, new));
                            }
                        }
                        if pin {
                            shard.pin(key);
                        }
                    }
                }
                if mode == LoadMode::KeepClean {
                    for i in 0..n as u64 {
                        shard.mark_clean(first.offset(i));
                    }
                }
                drop(shard);
                // After any promotion released the entries' own counts, so
                // a slot read goes back here if nothing else uses it.
                self.unpin(&pins);
                self.count_load(order, &entries);
                for (old, new) in &promoted {
                    self.account_remove(old);
                    self.release(old);
                    self.account_add(new);
                }
                if !promoted.is_empty() {
                    Counters::add(&self.counters.promoted_pages, promoted.len() as u64);
                    self.kick_share_shrink();
                }
            }
        }
        Ok(())
    }

    /// The read of a keep-copy load: the entries of `first .. first + n`
    /// (referenced now) decompressed into `out`, the device objects among
    /// them, and the slots pinned for the read. Returns with the shard
    /// locked, so the caller's changes apply to the entries read; the
    /// caller unpins after unlocking.
    ///
    /// Pool objects are decompressed under the lock (a concurrent
    /// invalidate must not free one mid-read, and it takes microseconds).
    /// A device read takes 100-400 us and would hold every store, load and
    /// writeback of the shard that long, so it runs unlocked on pinned
    /// slots: a count on each in the swap map keeps it from going back to
    /// the allocator (and being written over) whatever happens to the
    /// entries meanwhile. Under the lock again the entries must be the
    /// ones read (same payload and checksum); if one changed, the load reads
    /// again with the lock held throughout.
    fn keep_copy_read(
        &self,
        first: SwapEntry,
        n: usize,
        out: &mut [u8],
    ) -> Result<CopyRead<'_>, LoadError> {
        let snapshot = |shard: &mut ShardGuard<'_>| {
            let mut entries = Vec::with_capacity(n);
            for i in 0..n as u64 {
                match shard.get_mut(first.offset(i)) {
                    Some(e) => {
                        e.referenced = true;
                        entries.push(*e);
                    }
                    None => return Err(LoadError::NotFound(first.offset(i))),
                }
            }
            Ok(entries)
        };
        let mut shard = self.tree.lock(first, n as u64);
        let entries = snapshot(&mut shard)?;
        let pins: Vec<DevicePlace> = entries.iter().filter_map(|e| e.place()).collect();
        let Some(map) = self.swap_map.as_ref().filter(|_| !pins.is_empty()) else {
            let dev = self.decompress_all(first, &entries, out)?;
            return Ok(CopyRead {
                shard,
                entries,
                dev,
                pins: Vec::new(),
            });
        };
        map.hold(&pins);
        drop(shard);
        let read = self.read_device(first, &entries);
        let mut shard = self.tree.lock(first, n as u64);
        let unchanged = entries.iter().enumerate().all(|(i, was)| {
            shard
                .get(first.offset(i as u64))
                .is_some_and(|e| e.payload == was.payload && e.csum == was.csum)
        });
        let r = match read {
            Ok(dev) if unchanged => self
                .decode_all(first, &entries, &dev, out)
                .map(|()| (entries, dev)),
            Ok(_) => snapshot(&mut shard).and_then(|now| {
                let dev = self.decompress_all(first, &now, out)?;
                Ok((now, dev))
            }),
            Err(e) => Err(e),
        };
        match r {
            Ok((entries, dev)) => Ok(CopyRead {
                shard,
                entries,
                dev,
                pins,
            }),
            Err(e) => {
                drop(shard);
                self.unpin(&pins);
                Err(e)
            }
        }
    }

    /// Drop the counts `keep_copy_read` took on slots.
    fn unpin(&self, pins: &[DevicePlace]) {
        if let (Some(map), Some(dev)) = (self.swap_map.as_ref(), self.device.as_deref()) {
            for &p in pins {
                map.put(dev, p);
            }
        }
    }

    /// Move the written-back pages of `first .. first + n` (one aligned
    /// 2 MiB group at most) back into the pool, each object as the device
    /// holds it (no recompression), onto the LRU as the most recent: for a
    /// fork whose child takes the entries over (`region::fork`), since the
    /// parent frees and reuses its device slots after the fork while pool
    /// objects stay shared with the child copy-on-write. Regardless of the
    /// pool's share (its shrinker writes back again after the fork): what
    /// this costs is the objects' compressed bytes, where bringing the
    /// pages in cost them whole. Pages that compressed poorly move as the
    /// device holds them, raw. Returns whether no page of the range is on
    /// the device now (false where the pool could not take an object; the
    /// caller then brings the chunk in). The pages are decompressed into
    /// `scratch` on the way, as a load would, so every object moved has
    /// passed its checksum.
    pub fn promote_for_fork(
        &self,
        first: SwapEntry,
        n: usize,
        scratch: &mut [u8],
    ) -> Result<bool, LoadError> {
        let CopyRead {
            mut shard,
            entries,
            dev,
            pins,
        } = self.keep_copy_read(first, n, scratch)?;
        let mut promoted = Vec::new();
        let mut left = false;
        for (i, e) in entries.iter().enumerate() {
            if e.slot().is_none() {
                continue;
            }
            let key = first.offset(i as u64);
            match self.promote(key, e, &dev, i, true) {
                Some(new) => {
                    shard.set_promoted(key, new.payload);
                    shard.unpin(key);
                    promoted.push((*e, new));
                }
                None => left = true,
            }
        }
        drop(shard);
        self.unpin(&pins);
        for (old, new) in &promoted {
            self.account_remove(old);
            self.release(old);
            self.account_add(new);
        }
        Counters::add(&self.counters.promoted_pages, promoted.len() as u64);
        Ok(!left)
    }

    /// A pinned load of a written-back page brings its object back into the
    /// pool (no recompression: the device holds the object as stored), so
    /// the page a caller keeps faulting is served from memory next time and
    /// the shrinker writes a colder entry back instead. Only compressed
    /// objects (the caller checks the folio fits under the pool's share): a
    /// page that compressed poorly stays on the device, unless `raw` (a
    /// fork's move, which must take every page). Returns the entry's new
    /// form, pinned (off the LRU).
    fn promote(
        &self,
        key: SwapEntry,
        e: &ZswapEntry,
        dev: &DevicePages,
        i: usize,
        raw: bool,
    ) -> Option<ZswapEntry> {
        let Payload::Device { len, comp, .. } = e.payload else {
            return None;
        };
        if comp.is_none() && !raw {
            return None;
        }
        let o = dev.index[i]?;
        let obj = &dev.buf[o..o + len as usize];
        debug_assert_eq!(checksum(key, obj), e.csum);
        let handle = self.pool.store(obj).ok()?;
        Some(ZswapEntry {
            payload: Payload::Pool { handle, len, comp },
            pinned: true,
            lru_seq: 0,
            ..*e
        })
    }

    /// Counters of a successful load of `entries` (a folio of `order`, or
    /// a run of pages).
    fn count_load(&self, order: Option<u32>, entries: &[ZswapEntry]) {
        let n = entries.len() as u64;
        let dev = entries.iter().filter(|e| e.slot().is_some()).count() as u64;
        // zswpin counts pages from memory, pswpin pages from the device, as
        // the kernel's vmstat does.
        Counters::add(&self.counters.zswpin, n - dev);
        Counters::add(&self.counters.pswpin, dev);
        let tail = self.ghost_tail_seq.load(Relaxed);
        if dev == 0 && entries.iter().any(|e| e.on_lru() && e.lru_seq < tail) {
            self.ghost_tail.fetch_add(1, Relaxed);
        }
        // Seed 003: a refault is a sign of warm pages in zswap; widen the
        // region the shrinker leaves alone.
        self.tree.lru.protect(n);
        if let Some(order @ 1..) = order {
            Counters::add(&self.counters.order_zswpin[order as usize], 1);
        }
    }

    fn decompress_all(
        &self,
        first: SwapEntry,
        entries: &[ZswapEntry],
        out: &mut [u8],
    ) -> Result<DevicePages, LoadError> {
        // Pages on the device are read first, contiguous slots in one read.
        let dev = self.read_device(first, entries)?;
        self.decode_all(first, entries, &dev, out)?;
        Ok(dev)
    }

    /// Fill `out` from `entries`, the device's objects already in `dev`.
    fn decode_all(
        &self,
        first: SwapEntry,
        entries: &[ZswapEntry],
        dev: &DevicePages,
        out: &mut [u8],
    ) -> Result<(), LoadError> {
        let n = entries.len();
        let dev_page = |i: usize| -> &[u8] {
            match (dev.index[i], entries[i].place()) {
                (Some(o), Some(p)) => &dev.buf[o..o + p.len as usize],
                _ => &[],
            }
        };
        if n <= INLINE_PAGES {
            self.engine.with_ctx(|ctx| {
                for (i, (e, page)) in entries
                    .iter()
                    .zip(out.chunks_exact_mut(PAGE_SIZE))
                    .enumerate()
                {
                    // The next object's lines load while this one decodes:
                    // objects of one folio lie in as many spans as they
                    // have sizes, where the hardware's prefetcher, which
                    // follows a stream, does not find them (text pages:
                    // load/raw 0.84 -> 0.86 in `bench engine`).
                    if let Some(Payload::Pool { handle, .. }) =
                        entries.get(i + 1).map(|e| e.payload)
                    {
                        self.pool.prefetch(handle);
                    }
                    self.decompress_one(first.offset(i as u64), e, dev_page(i), page, ctx)?;
                }
                Ok::<(), LoadError>(())
            })?;
            return Ok(());
        }
        // Large folio: decompress in parallel. Each index writes only its own
        // page; the pages are handed out through a shared base pointer.
        let base = SendPtr(out.as_mut_ptr());
        let errors: Vec<OnceLock<LoadError>> = (0..n).map(|_| OnceLock::new()).collect();
        self.engine.for_each(n, |i, ctx| {
            let base = &base;
            // SAFETY: `out` is n * PAGE_SIZE bytes, exclusively borrowed for
            // this call, and for_each calls each i in 0..n exactly once and
            // returns only after every call has returned, so these page
            // slices are disjoint and live.
            let page =
                unsafe { std::slice::from_raw_parts_mut(base.0.add(i * PAGE_SIZE), PAGE_SIZE) };
            let key = first.offset(i as u64);
            if let Err(e) = self.decompress_one(key, &entries[i], dev_page(i), page, ctx) {
                let _ = errors[i].set(e);
            }
        });
        match errors.into_iter().find_map(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Fill `page` from entry `e`; `dev_page` is its slot's content when it
    /// is written back.
    fn decompress_one(
        &self,
        key: SwapEntry,
        e: &ZswapEntry,
        dev_page: &[u8],
        page: &mut [u8],
        ctx: &mut dyn CompressCtx,
    ) -> Result<(), LoadError> {
        match e.payload {
            Payload::SameFilled(v) => {
                same_filled::fill(page, v);
                Ok(())
            }
            Payload::Pool { handle, comp, .. } => self
                .pool
                .read(handle, |obj| self.decode(key, e.csum, comp, obj, page, ctx)),
            Payload::Device { comp, .. } => self.decode(key, e.csum, comp, dev_page, page, ctx),
            Payload::Inherited { addr, len, comp } => {
                // SAFETY: the object lies in the copy of the parent's pool,
                // mapped for the life of this process and never written
                // here (`Zswap::inherit`).
                let obj = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
                self.decode(key, e.csum, comp, obj, page, ctx)
            }
        }
    }

    /// Turn an object back into a page and verify it against its checksum.
    /// The checksum covers the object, and is checked after decompressing
    /// it: the decompressor's sequential reads bring the object into the
    /// cache while it works, and the check then reads it from there (first
    /// checking costs a stall on every cache line of a cold object). The
    /// decompressors are safe on any input, so a corrupt object costs
    /// only the wasted work, and `page` (unspecified after any error) is
    /// not handed out.
    pub(super) fn decode(
        &self,
        key: SwapEntry,
        csum: u32,
        comp: Option<compress::CompressorId>,
        obj: &[u8],
        page: &mut [u8],
        ctx: &mut dyn CompressCtx,
    ) -> Result<(), LoadError> {
        let r = match comp {
            None if obj.len() == PAGE_SIZE => {
                page.copy_from_slice(obj);
                Ok(())
            }
            None => Err(format!("raw object is {} bytes", obj.len())),
            Some(id) if id == self.engine.compressor().id() => {
                ctx.decompress(obj, page).map_err(|e| e.to_string())
            }
            // Recompressed (`recompress`), or written by another compressor
            // (the setting changed).
            Some(id) => match self.dense.as_ref().filter(|d| d.compressor().id() == id) {
                Some(dense) => dense.with_ctx(|c| c.decompress(obj, page)),
                None => compress::by_id(id).new_ctx().decompress(obj, page),
            }
            .map_err(|e| e.to_string()),
        };
        // A corrupt object is reported as such even where the damage also
        // made it undecodable.
        if checksum(key, obj) != csum {
            Counters::add(&self.counters.checksum_fail, 1);
            return Err(LoadError::Checksum(key));
        }
        r.map_err(|msg| {
            Counters::add(&self.counters.decompress_fail, 1);
            LoadError::Decompress(key, msg)
        })
    }
}

/// What `keep_copy_read` hands back: the shard, still locked; the entries
/// read; the device objects among them; the slots pinned for the read.
struct CopyRead<'a> {
    shard: ShardGuard<'a>,
    entries: Vec<ZswapEntry>,
    dev: DevicePages,
    pins: Vec<DevicePlace>,
}

struct SendPtr(*mut u8);
// SAFETY: used only to hand disjoint pages of one exclusively borrowed buffer
// to engine workers for the duration of a for_each call (see decompress_all).
unsafe impl Sync for SendPtr {}
