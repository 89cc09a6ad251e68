//! The pool: store / read / free over size classes, spans and the handle
//! table (mm/zsmalloc.c `zs_malloc` + `zs_obj_write`, `zs_map_object`,
//! `zs_free`). The lock order and span life cycle are in the crate comment.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::handle::{decode, encode, free_word, next_gen, HandleTable, Loc};
use crate::page_alloc::PageAlloc;
use crate::size_class::{
    ClassInner, ClassTable, SizeClass, DEFAULT_MAX_PAGES_PER_SPAN, MAX_PAGES_PER_SPAN_LIMIT,
};
use crate::span::{SpanData, SpanSlot, SpanTable};
use crate::stats::{ClassStats, PoolStats};
use crate::{AllocError, Handle, InvalidHandle, PAGE_SIZE};

/// Pool construction options.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Longest span in pages, `1..=16` (the kernel's chain size). Longer
    /// spans leave smaller tails but take longer to drain for compaction.
    pub max_pages_per_span: usize,
    /// Map arenas as transparent huge pages once the pool is large enough,
    /// where the kernel offers them (see `page_alloc`): cheaper to fault in
    /// and to give back, where a fresh huge page is cheap to clear. Off
    /// (the default): every arena is faulted 4 KiB at a time.
    pub huge_arenas: bool,
    /// Once the pool holds 4 MiB, a thread faults in the pages the next
    /// spans will take, ahead of the stores that take them (see
    /// `page_alloc`, "Filling ahead"): a store then pops pages already
    /// faulted in. On (the default) unless huge arenas are.
    pub fill_ahead: bool,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_pages_per_span: DEFAULT_MAX_PAGES_PER_SPAN,
            huge_arenas: false,
            fill_ahead: true,
        }
    }
}

/// The pool. `Send + Sync`: all methods take `&self`.
pub struct ZsPool {
    pub(crate) map: ClassTable,
    pub(crate) classes: Vec<SizeClass>,
    pub(crate) handles: HandleTable,
    pub(crate) spans: SpanTable,
    pub(crate) pages: PageAlloc,
    pub(crate) counters: Counters,
}

/// Whole-pool totals, kept as atomics so stats take no lock. The bytes held
/// from the OS are the page provider's count.
#[derive(Default)]
pub(crate) struct Counters {
    pub used_bytes: AtomicU64,
    pub objects: AtomicU64,
    pub spans: AtomicU64,
    pub invalid_frees: AtomicU64,
}

impl ZsPool {
    pub fn new() -> Self {
        Self::with_config(PoolConfig::default())
    }

    /// A pool with explicit options. Panics if `max_pages_per_span` is not in
    /// `1..=16` (a programming error, not a runtime condition).
    pub fn with_config(config: PoolConfig) -> Self {
        assert!(
            (1..=MAX_PAGES_PER_SPAN_LIMIT).contains(&config.max_pages_per_span),
            "max_pages_per_span must be 1..={MAX_PAGES_PER_SPAN_LIMIT}"
        );
        let map = ClassTable::new(config.max_pages_per_span);
        let classes = map.layouts.iter().map(|&l| SizeClass::new(l)).collect();
        Self {
            map,
            classes,
            handles: HandleTable::new(),
            spans: SpanTable::new(),
            pages: PageAlloc::with_fill(config.huge_arenas, config.fill_ahead),
            counters: Counters::default(),
        }
    }

    /// Allocate an object of `data.len()` bytes (1..=PAGE_SIZE) and copy
    /// `data` into it.
    pub fn store(&self, data: &[u8]) -> Result<Handle, AllocError> {
        let size = data.len();
        if size == 0 || size > PAGE_SIZE {
            return Err(AllocError::BadSize(size));
        }
        let class = &self.classes[self.map.class_of(size)];
        let layout = class.layout;
        let mut inner = class.inner.lock();
        let index = self
            .handles
            .alloc_index(&mut inner.handle_cache)
            .ok_or(AllocError::NoMemory)?;
        let local = match inner.alloc_candidate() {
            Some(local) => local,
            None => match self.new_span(class, &mut inner) {
                Ok(local) => local,
                Err(e) => {
                    self.handles.release_index(&mut inner.handle_cache, index);
                    return Err(e);
                }
            },
        };
        let (span_id, slot) = {
            let span = inner.span_mut(local);
            let slot = span.take_slot().expect("a span below full has a free slot");
            // SAFETY: slot < objs_per_span, so the destination lies inside
            // the span's page run (objs * size <= span bytes). The slot came
            // from the free list or was never used: no entry names it and no
            // reader that validated an earlier object there remains (deferred
            // slots reach the free list only after the span was seen without
            // readers), so nothing reads these bytes concurrently; the class
            // lock excludes other writers.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    span.mem.as_ptr().add(slot as usize * layout.size as usize),
                    size,
                );
            }
            span.fill_slot(slot, index);
            if let Some(next) = span.next_slot() {
                // SAFETY: next < objs_per_span: inside the span's run.
                let at = unsafe { span.mem.as_ptr().add(next as usize * layout.size as usize) };
                prefetch_lines(at, layout.size as usize, Level::L2);
            }
            (span.id, slot)
        };
        inner.occupied += 1;
        inner.objects += 1;
        inner.used_bytes += size as u64;
        inner.regroup(local, layout.objs_per_span);
        let entry = self
            .handles
            .entry(index)
            .expect("allocated handle index has an entry");
        let gen = next_gen(entry.load(Ordering::Relaxed));
        let loc = Loc {
            span: span_id,
            slot,
            size: size as u32,
        };
        // Release: the bytes above are visible to whoever sees the entry.
        entry.store(encode(gen, loc), Ordering::Release);
        drop(inner);
        self.counters.objects.fetch_add(1, Ordering::Relaxed);
        self.counters
            .used_bytes
            .fetch_add(size as u64, Ordering::Relaxed);
        Ok(Handle::new(index, gen))
    }

    /// Take a page run for a fresh span of `class` and adopt it (attached
    /// once its first object lands).
    fn new_span(&self, class: &SizeClass, inner: &mut ClassInner) -> Result<u32, AllocError> {
        let layout = class.layout;
        let mem = self.pages.alloc(layout.pages_per_span as usize)?;
        let Some(id) = self.spans.alloc_id() else {
            self.pages.free(mem, true);
            return Err(AllocError::NoMemory);
        };
        let slot = self.span_slot(id);
        // Release, and the entry store that later names this span is Release
        // too: a reader that sees the entry sees this base. The run may have
        // been another span's; the provider's lock orders that span's last
        // accesses before this one's first (see `page_alloc`).
        slot.base.store(mem.as_ptr(), Ordering::Release);
        let local = inner.insert_span(SpanData::new(id, mem, layout.objs_per_span));
        slot.local.store(local, Ordering::Relaxed);
        inner.attach(local, layout.objs_per_span);
        self.counters.spans.fetch_add(1, Ordering::Relaxed);
        Ok(local)
    }

    pub(crate) fn span_slot(&self, id: u32) -> &SpanSlot {
        self.spans
            .slot(id)
            .expect("span id in use has a table slot")
    }

    /// Run `f` on the object's bytes (exactly the stored length).
    ///
    /// Panics if `h` is not a live handle of this pool; see [`Self::try_read`].
    /// `f` runs with the object's span read-locked: it must not free `h`
    /// (that would wait for itself), and a long `f` delays compaction of that
    /// one span, nothing else.
    pub fn read<R>(&self, h: Handle, f: impl FnOnce(&[u8]) -> R) -> R {
        match self.try_read(h, f) {
            Ok(r) => r,
            Err(e) => panic!("ZsPool::read: {e}"),
        }
    }

    /// As [`Self::read`], but an invalid handle is an error, not a panic.
    pub fn try_read<R>(&self, h: Handle, f: impl FnOnce(&[u8]) -> R) -> Result<R, InvalidHandle> {
        let (index, gen) = h.parts().ok_or(InvalidHandle(h))?;
        let entry = self.handles.entry(index).ok_or(InvalidHandle(h))?;
        loop {
            let word = entry.load(Ordering::SeqCst);
            let (g, loc) = decode(word).ok_or(InvalidHandle(h))?;
            if g != gen {
                return Err(InvalidHandle(h));
            }
            let slot = self.span_slot(loc.span);
            let guard = slot.lock.read();
            // Revalidate under the read lock: compaction may have moved the
            // object (and even released the span, its pages now another
            // span's, and reused the span id) between the load above and the
            // lock. If the entry still names this span, the object is there
            // and stays until the guard drops: moving it or returning the
            // span's pages needs the write lock, and a concurrent free of
            // this handle defers the slot (see `free`).
            if entry.load(Ordering::SeqCst) != word {
                drop(guard);
                std::hint::spin_loop();
                continue;
            }
            let base = slot.base.load(Ordering::Acquire);
            let stride = self.classes[self.map.class_of(loc.size as usize)]
                .layout
                .size;
            // SAFETY: the entry (acquired after the span got its pages and
            // the object was written, both published with Release) names this
            // span, slot and length; slot * stride + size lies inside the
            // span; the read guard keeps the pages the span's and the bytes
            // unchanged until it drops after `f` returns (see above).
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    base.add(loc.slot as usize * stride as usize),
                    loc.size as usize,
                )
            };
            let r = f(bytes);
            drop(guard);
            return Ok(r);
        }
    }

    /// Hint that `h`'s object will be read soon: start the loads of its
    /// cache lines (and the page walks behind them) so a read that comes
    /// one decompression later finds them in cache. No lock: the address is
    /// computed from a racy snapshot, and a stale one only wastes the hint
    /// (a prefetch never faults).
    pub fn prefetch(&self, h: Handle) {
        let Some((index, gen)) = h.parts() else {
            return;
        };
        let Some(entry) = self.handles.entry(index) else {
            return;
        };
        let Some((g, loc)) = decode(entry.load(Ordering::Relaxed)) else {
            return;
        };
        if g != gen {
            return;
        }
        let Some(slot) = self.spans.slot(loc.span) else {
            return;
        };
        let base = slot.base.load(Ordering::Relaxed);
        if base.is_null() {
            return;
        }
        let stride = self.classes[self.map.class_of(loc.size as usize)]
            .layout
            .size as usize;
        let start = base.wrapping_add(loc.slot as usize * stride);
        // The first lines only: the page walk is the long wait, and once
        // the reader's sequential loads begin, the hardware's stream
        // prefetcher runs ahead of them. Whole objects (2-3 KiB of text)
        // cost more hints than they saved (`bench engine`, text load/raw
        // 0.86 against 0.87-0.88 with 128-512 bytes).
        prefetch_lines(start, (loc.size as usize).min(PREFETCH_BYTES), Level::L1);
    }

    /// Free an object. The handle must be live; freeing a handle that is not
    /// (double free, stale or foreign handle) leaves the pool untouched,
    /// counts it in [`PoolStats::invalid_frees`], and trips a debug
    /// assertion in debug builds. [`Self::try_free`] reports it instead.
    pub fn free(&self, h: Handle) {
        let r = self.try_free(h);
        debug_assert!(r.is_ok(), "ZsPool::free: {}", r.unwrap_err());
    }

    /// Free an object, or report that `h` is not live (nothing is changed).
    pub fn try_free(&self, h: Handle) -> Result<(), InvalidHandle> {
        let r = self.free_inner(h);
        if r.is_err() {
            self.counters.invalid_frees.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    fn free_inner(&self, h: Handle) -> Result<(), InvalidHandle> {
        let (index, gen) = h.parts().ok_or(InvalidHandle(h))?;
        let entry = self.handles.entry(index).ok_or(InvalidHandle(h))?;
        let decode_live = |word| match decode(word) {
            Some((g, loc)) if g == gen => Ok(loc),
            _ => Err(InvalidHandle(h)),
        };
        // The size (hence the class) of a live generation never changes, so
        // the class found without the lock is the one to lock; the location
        // may change (compaction) until we hold it.
        let ci = self
            .map
            .class_of(decode_live(entry.load(Ordering::Acquire))?.size as usize);
        let class = &self.classes[ci];
        let layout = class.layout;
        let mut inner = class.inner.lock();
        // Two racing frees of one handle serialise here; the loser sees the
        // free word (or a later generation) and changes nothing.
        let loc = decode_live(entry.load(Ordering::Acquire))?;
        let slot = self.span_slot(loc.span);
        let local = slot.local.load(Ordering::Relaxed);
        // SeqCst store, then SeqCst load of the reader count: a reader bumps
        // the count (SeqCst) and then re-loads the entry (SeqCst). Either this
        // load sees that reader, or the reader sees the free word and backs
        // off. A reader we see may be reading this very object, so its slot
        // is deferred rather than handed to the next store.
        entry.store(free_word(gen), Ordering::SeqCst);
        let readers = slot.lock.readers() != 0;
        let live = {
            let span = inner.span_mut(local);
            debug_assert_eq!(span.owner(loc.slot), Some(index));
            span.release_slot(loc.slot, readers);
            span.live
        };
        if !readers {
            inner.occupied -= 1;
        }
        inner.objects -= 1;
        inner.used_bytes -= u64::from(loc.size);
        self.handles.release_index(&mut inner.handle_cache, index);
        self.counters.objects.fetch_sub(1, Ordering::Relaxed);
        self.counters
            .used_bytes
            .fetch_sub(u64::from(loc.size), Ordering::Relaxed);
        if live > 0 {
            if !readers {
                inner.reclaim(local, layout.objs_per_span);
            }
            inner.regroup(local, layout.objs_per_span);
            return Ok(());
        }
        // Last object gone: take the span out of the class so no store or
        // compaction can find it, then return its pages outside the class
        // lock once stale readers have left.
        inner.detach(local);
        let data = inner.remove_span(local);
        drop(inner);
        self.release_span(slot, data);
        Ok(())
    }

    /// Return the pages of a span already removed from its class and
    /// recycle its id. Takes the span write lock, waiting out readers that
    /// still probe it.
    pub(crate) fn release_span(&self, slot: &SpanSlot, data: SpanData) {
        slot.lock.write_lock();
        let (id, _) = self.release_locked(slot, data, true);
        slot.lock.write_unlock();
        self.spans.free_id(id);
    }

    /// Return the pages of a removed span whose write lock the caller holds:
    /// no reader is in it, and none that comes later can validate an object
    /// in it (no entry names it). Returns its id, for the caller to recycle
    /// after dropping the write lock (a new span under that id must not start
    /// out write-locked), and the bytes the provider gave back to the OS:
    /// all it gave back for this free unless `may_defer` left a due trim to
    /// its fill thread.
    #[must_use]
    pub(crate) fn release_locked(
        &self,
        slot: &SpanSlot,
        data: SpanData,
        may_defer: bool,
    ) -> (u32, u64) {
        slot.base.store(std::ptr::null_mut(), Ordering::Relaxed);
        let id = data.id;
        // The pages held program data (compressed objects) and go to a
        // cache that serves the next span, of any class and for any of the
        // instance's regions: wipe them first, once per span's life, so
        // freed data does not linger in memory that stays mapped.
        // SAFETY: the run is this span's, no reader is in it (the caller
        // holds its write lock) and no entry names it any more.
        unsafe { std::ptr::write_bytes(data.mem.as_ptr(), 0, data.mem.len()) };
        let released = self.pages.free(data.mem, may_defer);
        self.counters.spans.fetch_sub(1, Ordering::Relaxed);
        (id, released)
    }

    /// Bytes of memory the pool holds from the OS: pages of live spans,
    /// cached free page runs not yet given back ([`PoolStats::cached_bytes`]),
    /// and the untouched reserve of huge arenas ([`Self::reserve_bytes`]).
    /// What a memory budget charges. One relaxed atomic load.
    pub fn total_size(&self) -> u64 {
        self.pages.held_bytes()
    }

    /// Bytes of `total_size` that no span holds yet: the untouched part of
    /// huge arenas, already faulted in ([`PoolStats::reserve_bytes`]). New
    /// spans take it before the pool maps more, so a budget can count it as
    /// room the next stores fill without growing the pool. One relaxed load.
    pub fn reserve_bytes(&self) -> u64 {
        self.pages.reserve_bytes()
    }

    /// Whether the pool may map a huge arena when it grows: a store can
    /// then hold 2 MiB more at once ([`PoolConfig::huge_arenas`], where the
    /// kernel offers huge pages).
    pub fn may_map_huge(&self) -> bool {
        self.pages.huge_ok()
    }

    pub fn stats(&self) -> PoolStats {
        let mut s = PoolStats {
            pool_total_size: self.total_size(),
            used_bytes: self.counters.used_bytes.load(Ordering::Relaxed),
            objects: self.counters.objects.load(Ordering::Relaxed),
            spans: self.counters.spans.load(Ordering::Relaxed),
            invalid_frees: self.counters.invalid_frees.load(Ordering::Relaxed),
            cached_bytes: self.pages.cached_bytes(),
            arenas: self.pages.arenas(),
            huge_arenas: self.pages.huge_arenas(),
            reserve_bytes: self.pages.reserve_bytes(),
            filled_bytes: self.pages.filled_bytes(),
            metadata_bytes: self.handles.table_bytes(),
            ..Default::default()
        };
        for class in &self.classes {
            let inner = class.inner.lock();
            s.deferred_slots += inner.deferred_slots();
            s.metadata_bytes += inner.meta_bytes();
            s.classes.push(ClassStats {
                size: class.layout.size,
                pages_per_span: class.layout.pages_per_span,
                objs_per_span: class.layout.objs_per_span,
                objects: inner.objects,
                spans: inner.nspans,
                used_bytes: inner.used_bytes,
                fullness: inner.fullness_histogram(),
            });
        }
        s
    }
}

impl Default for ZsPool {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ZsPool {
    fn drop(&mut self) {
        // `&mut self`: no reader or writer is left. Spans hold plain
        // addresses; the provider unmaps every arena when it drops.
        for class in &self.classes {
            class.inner.lock().drain_spans().for_each(drop);
        }
    }
}

/// Bytes at the start of an object that [`ZsPool::prefetch`] asks for.
const PREFETCH_BYTES: usize = 256;

/// Which cache [`prefetch_lines`] fills.
#[derive(Clone, Copy)]
enum Level {
    /// A load about to copy the object out.
    L1,
    /// The slot the class's next store will likely take (its span's next
    /// free slot), asked for while that store's page is still being
    /// compressed. The copy into a slot writes lines nobody has read since
    /// the provider faulted the page in, and the class lock's release waits
    /// for every one of those writes to own its line: 82% of the store's
    /// own samples fell on the release (`bench engine`, lz4 index pages).
    /// Fetched ahead into L2 (exclusive where no other core has them, so
    /// the write needs no further request; L1, with the `ET0` hint, is left
    /// to the compressor's tables), index pages stored at 0.87-0.89 of raw
    /// lz4's speed, not 0.82-0.84, and `bench compare`'s uzswap cells did
    /// not move (docs/BENCHMARKS.md, "The next slot fetched ahead"). A slot
    /// another store takes first, or a store of another class, wastes a few
    /// lines of bandwidth.
    L2,
}

/// Hint the cache lines of `len` bytes from `p` into `level`.
#[inline(always)]
fn prefetch_lines(p: *const u8, len: usize, level: Level) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..len).step_by(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let at = p.wrapping_add(off) as *const i8;
        // SAFETY: a prefetch is a hint; it never faults, whatever the
        // address.
        unsafe {
            match level {
                Level::L1 => _mm_prefetch::<_MM_HINT_T0>(at),
                Level::L2 => _mm_prefetch::<_MM_HINT_T1>(at),
            }
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len, level);
}
