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
use std::ops::Range;
use std::sync::OnceLock;

/// Scratch for one compression: the worst case of every backend for a page.
const SCRATCH: usize = 2 * PAGE_SIZE;

/// Scratch of a thread that stores runs of pages (`store_run`): about
/// sixteen pages at 2:1, with a worst case's room after them. Taken the
/// first time the thread stores more than one page at once.
const RUN_SCRATCH: usize = 64 * 1024;

thread_local! {
    /// One compression scratch per thread, `SCRATCH` bytes until the thread
    /// stores a run of pages (`RUN_SCRATCH`). A stack array would be zeroed
    /// on every page (8 KiB of memset, measurable next to lz4 on 4 KiB).
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
        let store_run = |run: Range<usize>, ctx: &mut dyn crate::compress::CompressCtx| {
            self.store_run(first, data, run, ctx, &results);
        };
        if n == 1 {
            self.engine.with_ctx(|ctx| store_run(0..1, ctx));
        } else {
            self.engine.for_each_run(n, store_run);
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

    /// Same-filled check, compression and pool allocation for the pages of
    /// `run`, on this thread; each page's outcome goes to its `results`
    /// cell. On error a page leaves nothing allocated.
    ///
    /// The pages are compressed back to back into this thread's scratch,
    /// and only then given their pool objects and checksums: interleaving
    /// the two cost the index store 8% inside lz4 alone (`for_each_run`).
    fn store_run(
        &self,
        first: SwapEntry,
        data: &[u8],
        run: Range<usize>,
        ctx: &mut dyn crate::compress::CompressCtx,
        results: &[OnceLock<Result<ZswapEntry, StoreError>>],
    ) {
        let want = if run.len() > 1 { RUN_SCRATCH } else { SCRATCH };
        // A thread whose locals are gone can still store: a fault taken in
        // a thread's exit code (an allocator's thread-exit hook reading
        // region memory) resolves in signal mode in that thread, and its
        // backstop may evict. It gets a scratch of its own, one page long.
        let mut run = Some(run);
        let mut ctx = Some(ctx);
        let _ = SCRATCH_BUF.try_with(|b| {
            if let Ok(mut buf) = b.try_borrow_mut() {
                if buf.len() < want {
                    *buf = vec![0u8; want].into_boxed_slice();
                }
                let (run, ctx) = (run.take().expect("one call"), ctx.take().expect("one call"));
                self.stage_run(first, data, run, ctx, &mut buf, results);
            }
        });
        if let (Some(run), Some(ctx)) = (run, ctx) {
            self.stage_run(first, data, run, ctx, &mut vec![0u8; SCRATCH], results);
        }
    }

    /// `store_run` with `buf` for scratch: compressed pages are packed into
    /// it until the next might not fit, then given their objects.
    fn stage_run(
        &self,
        first: SwapEntry,
        data: &[u8],
        run: Range<usize>,
        ctx: &mut dyn crate::compress::CompressCtx,
        buf: &mut [u8],
        results: &[OnceLock<Result<ZswapEntry, StoreError>>],
    ) {
        debug_assert!(run.len() <= crate::compress::MAX_BATCH && buf.len() >= SCRATCH);
        let page = |i: usize| &data[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
        // (page, offset in `buf`, compressed length) of the pages compressed
        // and not yet allocated.
        let mut staged = [(0usize, 0usize, 0usize); crate::compress::MAX_BATCH];
        let mut count = 0;
        let mut at = 0;
        let alloc = |staged: &[(usize, usize, usize)], buf: &[u8]| {
            for &(i, off, len) in staged {
                let r = self.alloc_object(first.offset(i as u64), page(i), &buf[off..off + len]);
                let _ = results[i].set(r);
            }
        };
        for i in run {
            if let Some(e) = self.same_filled_entry(page(i)) {
                let _ = results[i].set(Ok(e));
                continue;
            }
            if at + SCRATCH > buf.len() {
                alloc(&staged[..count], buf);
                (count, at) = (0, 0);
            }
            match ctx.compress(page(i), &mut buf[at..at + SCRATCH]) {
                Ok(len) => {
                    staged[count] = (i, at, len);
                    count += 1;
                    // Each output on lines of its own. A page that saves
                    // too little is kept as it is, so the next page may
                    // overwrite its output (keeping the scratch that much
                    // smaller and warmer).
                    if !self.poor(len) {
                        at += len.next_multiple_of(64);
                    }
                }
                Err(e) => {
                    Counters::add(&self.counters.reject_compress_fail, 1);
                    let _ = results[i].set(Err(StoreError::CompressFail(e.to_string())));
                }
            }
        }
        alloc(&staged[..count], buf);
    }

    /// The entry of a same-filled page (seed 004), which needs neither
    /// compression nor an object; `None` for any other page.
    fn same_filled_entry(&self, page: &[u8]) -> Option<ZswapEntry> {
        let v = self
            .cfg
            .same_filled
            .then(|| same_filled_value(page))
            .flatten()?;
        (v == 0 || self.cfg.same_filled_nonzero).then_some(ZswapEntry {
            payload: Payload::SameFilled(v),
            csum: 0,
            referenced: true,
            lru_seq: 0,
            pinned: false,
            clean: false,
            recompressed: false,
        })
    }

    /// Whether a page compressed to `len` bytes saves too little to keep
    /// compressed.
    fn poor(&self, len: usize) -> bool {
        len * 100 > PAGE_SIZE * self.cfg.max_compressed_percent as usize
    }

    /// The pool object of a page compressed to `compressed` (the page
    /// itself where that saves too little, and then `compressed`'s bytes
    /// are not read), and its entry.
    fn alloc_object(
        &self,
        key: SwapEntry,
        page: &[u8],
        compressed: &[u8],
    ) -> Result<ZswapEntry, StoreError> {
        let (object, comp) = if self.poor(compressed.len()) {
            Counters::add(&self.counters.reject_compress_poor, 1);
            if !self.cfg.store_incompressible {
                return Err(StoreError::CompressPoor);
            }
            (page, None)
        } else {
            (compressed, Some(self.engine.compressor().id()))
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
