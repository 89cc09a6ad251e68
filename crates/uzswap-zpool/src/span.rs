//! Spans, the kernel's zspages: a run of `pages_per_span` contiguous pages
//! from the page provider (`page_alloc`), carved into equal slots of one
//! class.
//!
//! Unlike a zspage a span is virtually contiguous, so no object straddles a
//! page boundary that needs stitching, and an emptied span goes back to the
//! provider as one run.
//!
//! Each span has two halves:
//! - [`SpanSlot`], in the pool-wide span table, indexed by span id: the
//!   reader lock word, the base address, and the span's index in its class.
//!   Lock-free readers reach it from a handle entry; the table never frees a
//!   slot's memory, so a reader holding a stale span id still touches valid
//!   memory (it then fails validation and retries).
//! - [`SpanData`], owned by its class under the class lock: the page run,
//!   which slot holds which handle, the free and deferred slots.
//!
//! A slot freed while some reader holds the span's read lock is *deferred*:
//! that reader may have validated the object just before the free and still be
//! reading it, so the slot is not reused until the span is seen with no
//! readers (see the crate comment for the ordering argument).

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use parking_lot::Mutex;

use crate::handle::MAX_SPAN_ID_BITS;
use crate::page_alloc::PageRun;
use crate::table::ChunkedTable;

/// Reader/writer word of a span: low bits count readers, the top bit is the
/// writer (compaction moving objects out, or the span's pages going back to
/// the provider).
/// Readers never block writers that use `try_write_lock`; a reader that finds
/// the writer bit backs off and waits for it to clear.
#[derive(Default)]
pub(crate) struct SpanLock(AtomicU32);

const WRITER: u32 = 1 << 31;

fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl SpanLock {
    /// Take a read reference. SeqCst: pairs with the SeqCst entry store and
    /// reader-count load in `free` (a store-load handshake).
    pub(crate) fn read(&self) -> ReadGuard<'_> {
        let mut spins = 0;
        loop {
            let v = self.0.fetch_add(1, Ordering::SeqCst);
            if v & WRITER == 0 {
                return ReadGuard(self);
            }
            self.0.fetch_sub(1, Ordering::Release);
            while self.0.load(Ordering::Relaxed) & WRITER != 0 {
                backoff(&mut spins);
            }
        }
    }

    /// Readers currently holding (or transiently probing) the lock.
    pub(crate) fn readers(&self) -> u32 {
        self.0.load(Ordering::SeqCst) & !WRITER
    }

    pub(crate) fn try_write_lock(&self) -> bool {
        self.0
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Wait for all readers to leave. Used only for spans already detached
    /// from their class, which only stale readers (about to back off) or a
    /// reader racing a free of its own handle can still hold.
    pub(crate) fn write_lock(&self) {
        let mut spins = 0;
        while !self.try_write_lock() {
            backoff(&mut spins);
        }
    }

    pub(crate) fn write_unlock(&self) {
        // fetch_and, not store(0): probing readers may have bumped the count.
        self.0.fetch_and(!WRITER, Ordering::Release);
    }
}

pub(crate) struct ReadGuard<'a>(&'a SpanLock);

impl Drop for ReadGuard<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, Ordering::Release);
    }
}

/// The lock-free half of a span, in the pool-wide span table.
#[derive(Default)]
pub(crate) struct SpanSlot {
    pub lock: SpanLock,
    /// Base address while the span holds its pages; written under the class
    /// lock before any entry names the span, cleared under the write lock.
    pub base: AtomicPtr<u8>,
    /// Index of the span's `SpanData` in its class; read under the class lock.
    pub local: AtomicU32,
}

/// Span ids and their slots.
pub(crate) struct SpanTable {
    slots: ChunkedTable<SpanSlot>,
    /// (next never-used id, freed ids)
    ids: Mutex<(u32, Vec<u32>)>,
}

const SPAN_ID_BITS: u32 = 24;
const _: () = assert!(SPAN_ID_BITS <= MAX_SPAN_ID_BITS);

impl SpanTable {
    pub(crate) fn new() -> Self {
        Self {
            slots: ChunkedTable::new(SPAN_ID_BITS, 12),
            ids: Mutex::new((0, Vec::new())),
        }
    }

    pub(crate) fn slot(&self, id: u32) -> Option<&SpanSlot> {
        self.slots.get(id)
    }

    pub(crate) fn alloc_id(&self) -> Option<u32> {
        let mut ids = self.ids.lock();
        if let Some(id) = ids.1.pop() {
            return Some(id);
        }
        let id = ids.0;
        self.slots.get_or_alloc(id)?;
        ids.0 += 1;
        Some(id)
    }

    /// Give back an id whose span returned its pages.
    pub(crate) fn free_id(&self, id: u32) {
        self.ids.lock().1.push(id);
    }
}

/// The class-locked half of a span, kept small (it is per span, outside
/// `pool_total_size`): the page run, and one word per slot that is either the
/// handle index of the object there, a link in the span's free-slot list, or
/// a deferred mark.
pub(crate) struct SpanData {
    pub id: u32,
    /// Position in its fullness list (`group == NO_GROUP`: detached).
    pub pos: u32,
    pub mem: PageRun,
    owner: Box<[u32]>,
    /// Objects stored.
    pub live: u16,
    /// Slots freed while a reader was present; reusable once the span has
    /// been seen with no readers.
    deferred: u16,
    free_head: u16,
    pub group: u8,
}

pub(crate) const NO_GROUP: u8 = u8::MAX;
/// Slot word tags. Handle indices are below 2^28, so the top bits are free.
const FREE: u32 = 1 << 31;
const DEFERRED: u32 = 1 << 30;
const TAGS: u32 = FREE | DEFERRED;
const NIL: u16 = u16::MAX;

impl SpanData {
    pub(crate) fn new(id: u32, mem: PageRun, objs_per_span: u32) -> Self {
        debug_assert!(objs_per_span >= 1 && objs_per_span < u32::from(NIL));
        let owner = (0..objs_per_span)
            .map(|s| {
                FREE | if s + 1 < objs_per_span {
                    s + 1
                } else {
                    u32::from(NIL)
                }
            })
            .collect();
        Self {
            id,
            pos: 0,
            mem,
            owner,
            live: 0,
            deferred: 0,
            free_head: 0,
            group: NO_GROUP,
        }
    }

    /// Slots holding an object or waiting out a reader.
    pub(crate) fn occupied(&self) -> u32 {
        u32::from(self.live) + u32::from(self.deferred)
    }

    pub(crate) fn deferred(&self) -> u32 {
        u32::from(self.deferred)
    }

    pub(crate) fn slots(&self) -> u32 {
        self.owner.len() as u32
    }

    /// Handle index of the object in `slot`, if any.
    pub(crate) fn owner(&self, slot: u32) -> Option<u32> {
        let w = self.owner[slot as usize];
        (w & TAGS == 0).then_some(w)
    }

    /// Take a reusable slot for a new object.
    pub(crate) fn take_slot(&mut self) -> Option<u32> {
        if self.free_head == NIL {
            return None;
        }
        let slot = u32::from(self.free_head);
        let w = self.owner[slot as usize];
        debug_assert_eq!(w & TAGS, FREE);
        self.free_head = w as u16;
        Some(slot)
    }

    /// The slot [`Self::take_slot`] would take next, if any.
    pub(crate) fn next_slot(&self) -> Option<u32> {
        (self.free_head != NIL).then_some(u32::from(self.free_head))
    }

    /// Record the object (handle `index`) now stored in a taken slot.
    pub(crate) fn fill_slot(&mut self, slot: u32, index: u32) {
        debug_assert_eq!(index & TAGS, 0);
        self.owner[slot as usize] = index;
        self.live += 1;
    }

    fn push_free(&mut self, slot: u32) {
        self.owner[slot as usize] = FREE | u32::from(self.free_head);
        self.free_head = slot as u16;
    }

    /// Mark `slot` empty: reusable now, or deferred if a reader may still be
    /// looking at it.
    pub(crate) fn release_slot(&mut self, slot: u32, readers_present: bool) {
        debug_assert!(self.owner(slot).is_some());
        self.live -= 1;
        if readers_present {
            self.owner[slot as usize] = DEFERRED;
            self.deferred += 1;
        } else {
            self.push_free(slot);
        }
    }

    /// Make deferred slots reusable; the caller has seen the span with no
    /// readers after the frees. Returns how many.
    pub(crate) fn reclaim_deferred(&mut self) -> u32 {
        let n = u32::from(self.deferred);
        if n > 0 {
            for slot in 0..self.slots() {
                if self.owner[slot as usize] == DEFERRED {
                    self.push_free(slot);
                }
            }
            self.deferred = 0;
        }
        n
    }

    /// Heap bytes this span's bookkeeping holds besides the struct itself.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.owner.len() * std::mem::size_of::<u32>()
    }
}
