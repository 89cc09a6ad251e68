//! store: put a page or a whole folio into the cache (kernel: zswap_store).
//!
//! A folio is stored all-or-nothing (seed 000): its pages are compressed in
//! parallel on the batch engine (seed 002), each worker also allocating its
//! page's pool object, with no tree lock held; only when every page has
//! succeeded are the entries inserted, under one shard lock. If any page fails,
//! the objects already allocated for the folio are freed, stale entries of the
//! folio's keys are invalidated (the caller keeps the newer data), and the
//! error says why.

use super::entry::{checksum, Payload, SwapEntry, ZswapEntry};
use super::same_filled::same_filled_value;
use super::stats::Counters;
use super::{folio_bytes, StoreError, Zswap};
use crate::{MAX_ORDER, PAGE_SIZE};
use std::sync::OnceLock;

/// Scratch for one compression: the worst case of every backend for a page.
const SCRATCH: usize = 2 * PAGE_SIZE;

thread_local! {
    /// One compression scratch per thread. A stack array would be zeroed on
    /// every page (8 KiB of memset, measurable next to lz4 on 4 KiB).
    static SCRATCH_BUF: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; SCRATCH].into_boxed_slice());
}

/// Make this thread's compression scratch now rather than at its first
/// store (`region::sigbus::prepare_thread`).
pub(crate) fn prepare_scratch() {
    let _ = SCRATCH_BUF.try_with(|_| ());
}

impl Zswap {
    /// Store one page. Replaces what `entry` held before.
    pub fn store(&self, entry: SwapEntry, page: &[u8]) -> Result<(), StoreError> {
        self.store_folio(entry, 0, page)
    }

    /// Put back one page the caller took out of the cache (an exclusive
    /// load) or relied on its copy of, and could not keep after all (an
    /// install that failed). The page was in the cache a moment ago, so the
    /// pool limit does not refuse it: refusing would lose the only copy.
    /// The pool may pass its limit by this page until the shrinker catches
    /// up. Only a compression or allocation failure is an error.
    pub fn restore(&self, entry: SwapEntry, page: &[u8]) -> Result<(), StoreError> {
        self.store_checked(entry, 0, page, false).map(drop)
    }

    /// Store a folio of `2^order` pages starting at `first` (naturally
    /// aligned), all or nothing.
    pub fn store_folio(&self, first: SwapEntry, order: u32, data: &[u8]) -> Result<(), StoreError> {
        self.store_checked(first, order, data, true).map(drop)
    }

    /// [`Zswap::store_folio`], returning the compressed bytes it put in the
    /// pool (0 for same-filled pages). A caller that stores while others do
    /// too learns what its own stores cost, which the pool's size, moved by
    /// every store at once, cannot tell it.
    pub fn store_folio_sized(
        &self,
        first: SwapEntry,
        order: u32,
        data: &[u8],
    ) -> Result<u64, StoreError> {
        self.store_checked(first, order, data, true)
    }

    /// `store_folio_sized`; `admit`: whether the pool limit may refuse it.
    fn store_checked(
        &self,
        first: SwapEntry,
        order: u32,
        data: &[u8],
        admit: bool,
    ) -> Result<u64, StoreError> {
        if order > MAX_ORDER {
            return Err(StoreError::BadOrder(order));
        }
        if data.len() != folio_bytes(order) {
            return Err(StoreError::BadSize {
                got: data.len(),
                expected: folio_bytes(order),
                order,
            });
        }
        let n = 1u64 << order;
        if first.index() & (n - 1) != 0 {
            return Err(StoreError::Misaligned {
                index: first.index(),
                order,
            });
        }
        let r = if admit && !self.admit(data.len()) {
            Err(StoreError::PoolLimit)
        } else {
            self.store_pages(first, order, data)
        };
        if r.is_err() {
            Counters::add(&self.counters.order_store_fail[order as usize], 1);
            // Kernel zswap_store(): the folio goes elsewhere, so copies of
            // these pages stored earlier are stale now.
            self.invalidate_range(first, n);
        }
        r
    }

    /// The pool limit's check of a store of `bytes`: one per folio, before
    /// any work (as the kernel does). The estimate assumes 2:1; the pool may
    /// overshoot by one folio.
    fn admit(&self, bytes: usize) -> bool {
        let incoming = (bytes / 2) as u64;
        if !self.limit.admit(self.pool.total_size(), incoming) {
            Counters::add(&self.counters.pool_limit_hit, 1);
            // Kernel: queue shrink_work to get back under the accept
            // threshold. Unlike the kernel, whose rejected page goes to swap
            // by itself, the caller here has nowhere else to put it, so make
            // room for this folio now (direct reclaim, bounded to what it
            // needs): clean copies first, then writeback when it can.
            self.kick_limit_shrink();
            return self.direct_reclaim(incoming);
        }
        true
    }

    /// Returns the compressed bytes the folio's pool objects hold.
    fn store_pages(&self, first: SwapEntry, order: u32, data: &[u8]) -> Result<u64, StoreError> {
        let n = 1usize << order;
        let results: Vec<OnceLock<Result<ZswapEntry, StoreError>>> =
            (0..n).map(|_| OnceLock::new()).collect();
        let store_one = |i: usize, ctx: &mut dyn crate::compress::CompressCtx| {
            let page = &data[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
            let r = self.store_one(first.offset(i as u64), page, ctx);
            let _ = results[i].set(r);
        };
        if n == 1 {
            self.engine.with_ctx(|ctx| store_one(0, ctx));
        } else {
            self.engine.for_each(n, store_one);
        }

        let mut entries = Vec::with_capacity(n);
        let mut failure = None;
        for r in results
            .into_iter()
            .map(|c| c.into_inner().expect("every page visited"))
        {
            match r {
                Ok(e) => entries.push(e),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(err) = failure {
            for e in &entries {
                self.release(e);
            }
            return Err(err);
        }

        let mut replaced = Vec::new();
        {
            let mut shard = self.tree.lock(first, n as u64);
            for (i, e) in entries.iter().enumerate() {
                if let Some(old) = shard.insert(first.offset(i as u64), *e) {
                    replaced.push(old);
                }
            }
        }
        for old in &replaced {
            self.account_remove(old);
            self.release(old);
        }
        let mut bytes = 0u64;
        for e in &entries {
            self.account_add(e);
            if let Payload::Pool { len, .. } = e.payload {
                bytes += u64::from(len);
            }
        }
        Counters::add(&self.counters.zswpout, n as u64);
        self.kick_share_shrink();
        if order > 0 {
            Counters::add(&self.counters.order_zswpout[order as usize], 1);
        }
        Ok(bytes)
    }

    /// Same-filled check, compression, pool allocation for one page. Runs on
    /// an engine worker. On error nothing is left allocated.
    fn store_one(
        &self,
        key: SwapEntry,
        page: &[u8],
        ctx: &mut dyn crate::compress::CompressCtx,
    ) -> Result<ZswapEntry, StoreError> {
        if let Some(v) = self
            .cfg
            .same_filled
            .then(|| same_filled_value(page))
            .flatten()
        {
            if v == 0 || self.cfg.same_filled_nonzero {
                return Ok(ZswapEntry {
                    payload: Payload::SameFilled(v),
                    csum: 0,
                    referenced: true,
                    lru_seq: 0,
                    pinned: false,
                    clean: false,
                    recompressed: false,
                });
            }
        }
        // A thread whose locals are gone can still store: a fault taken in
        // a thread's exit code (an allocator's thread-exit hook reading
        // region memory) resolves in signal mode in that thread, and its
        // backstop may evict. It gets a scratch of its own.
        let mut ctx = Some(ctx);
        SCRATCH_BUF
            .try_with(|b| {
                b.try_borrow_mut().ok().map(|mut buf| {
                    let ctx = ctx.take().expect("one call");
                    self.compress_and_alloc(key, page, &mut buf, ctx)
                })
            })
            .ok()
            .flatten()
            .unwrap_or_else(|| {
                let ctx = ctx.take().expect("one call");
                self.compress_and_alloc(key, page, &mut vec![0u8; SCRATCH], ctx)
            })
    }

    fn compress_and_alloc(
        &self,
        key: SwapEntry,
        page: &[u8],
        buf: &mut [u8],
        ctx: &mut dyn crate::compress::CompressCtx,
    ) -> Result<ZswapEntry, StoreError> {
        let len = match ctx.compress(page, buf) {
            Ok(len) => len,
            Err(e) => {
                Counters::add(&self.counters.reject_compress_fail, 1);
                return Err(StoreError::CompressFail(e.to_string()));
            }
        };
        let poor = len * 100 > PAGE_SIZE * self.cfg.max_compressed_percent as usize;
        let (object, comp) = if poor {
            Counters::add(&self.counters.reject_compress_poor, 1);
            if !self.cfg.store_incompressible {
                return Err(StoreError::CompressPoor);
            }
            (page, None)
        } else {
            (&buf[..len], Some(self.engine.compressor().id()))
        };
        let handle = self.pool.store(object).map_err(|_| {
            Counters::add(&self.counters.reject_alloc_fail, 1);
            StoreError::AllocFail
        })?;
        Ok(ZswapEntry {
            payload: Payload::Pool {
                handle,
                len: object.len() as u16,
                comp,
            },
            csum: checksum(key, object),
            referenced: true,
            lru_seq: 0,
            pinned: false,
            clean: false,
            recompressed: false,
        })
    }

    /// Gauges that follow the stored set.
    pub(super) fn account_add(&self, e: &ZswapEntry) {
        let c = &self.counters;
        match e.payload {
            Payload::Device { .. } => Counters::add(&c.device_pages, 1),
            Payload::Inherited { .. } => Counters::add(&c.inherited_pages, 1),
            Payload::SameFilled(_) => Counters::add(&c.same_filled_pages, 1),
            Payload::Pool { len, comp, .. } => {
                Counters::add(&c.compressed_bytes, len as u64);
                if comp.is_none() {
                    Counters::add(&c.incompressible_pages, 1);
                }
            }
        }
    }

    /// Free what an entry that left the tree held, and undo its gauges.
    /// (Entries that never entered the tree only own their pool object.)
    pub(super) fn release(&self, e: &ZswapEntry) {
        if let Some(h) = e.handle() {
            self.pool.free(h);
        }
        if let Some(place) = e.place() {
            let dev = self.device.as_ref().expect("device entry without a device");
            let map = self.swap_map.as_ref().expect("a device has a swap map");
            map.put(dev, place);
        }
    }

    pub(super) fn account_remove(&self, e: &ZswapEntry) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.counters;
        match e.payload {
            Payload::Device { .. } => {
                c.device_pages.fetch_sub(1, Relaxed);
            }
            Payload::Inherited { .. } => {
                c.inherited_pages.fetch_sub(1, Relaxed);
            }
            Payload::SameFilled(_) => {
                c.same_filled_pages.fetch_sub(1, Relaxed);
            }
            Payload::Pool { len, comp, .. } => {
                c.compressed_bytes.fetch_sub(len as u64, Relaxed);
                if comp.is_none() {
                    c.incompressible_pages.fetch_sub(1, Relaxed);
                }
            }
        }
    }
}
