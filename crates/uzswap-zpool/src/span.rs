//! Spans, the kernel's zspages: `pages_per_span` contiguous pages mapped as
//! one anonymous mapping and carved into equal slots of one class.
//!
//! Unlike a zspage a span is virtually contiguous, so no object straddles a
//! page boundary that needs stitching, and an emptied span goes back to the
//! OS with one `munmap`.
//!
//! Each span has two halves:
//! - [`SpanSlot`], in the pool-wide span table, indexed by span id: the
//!   reader lock word, the base address, and the span's index in its class.
//!   Lock-free readers reach it from a handle entry; the table never frees a
//!   slot's memory, so a reader holding a stale span id still touches valid
//!   memory (it then fails validation and retries).
//! - [`SpanData`], owned by its class under the class lock: the mapping,
//!   which slot holds which handle, the free and deferred slots.
//!
//! A slot freed while some reader holds the span's read lock is *deferred*:
//! that reader may have validated the object just before the free and still be
//! reading it, so the slot is not reused until the span is seen with no
//! readers (see the crate comment for the ordering argument).

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use parking_lot::Mutex;

use crate::handle::MAX_SPAN_ID_BITS;
use crate::table::ChunkedTable;
use crate::AllocError;

/// Owner value of a slot that holds no object.
pub(crate) const NO_HANDLE: u32 = u32::MAX;

/// One anonymous private mapping of whole pages, unmapped on drop.
pub(crate) struct SpanMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: SpanMem exclusively owns its mapping; the raw pointer is only an
// address. Concurrent access to the bytes is arbitrated by the span lock and
// the class lock (see the crate comment), not by this type.
unsafe impl Send for SpanMem {}
// SAFETY: as above; `&SpanMem` only exposes the address.
unsafe impl Sync for SpanMem {}

impl SpanMem {
    pub(crate) fn map(len: usize) -> Result<Self, AllocError> {
        // SAFETY: a fresh anonymous private mapping at an address of the
        // kernel's choosing; it aliases nothing and the result is checked.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AllocError::NoMemory);
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or(AllocError::NoMemory)?;
        Ok(Self { ptr, len })
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for SpanMem {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `map` with this address and
        // length and is unmapped exactly once, here. Callers drop a span's
        // memory only with its span write lock held or when the pool itself
        // drops, so no reader can be inside it.
        let rc = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        debug_assert_eq!(rc, 0, "munmap of a span failed");
    }
}

/// Reader/writer word of a span: low bits count readers, the top bit is the
/// writer (compaction moving objects out, or the span being unmapped).
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
    /// Base address while the span is mapped; written under the class lock
    /// before any entry names the span, cleared under the write lock.
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

    /// Give back an id whose span is unmapped.
    pub(crate) fn free_id(&self, id: u32) {
        self.ids.lock().1.push(id);
    }
}

/// The class-locked half of a span.
pub(crate) struct SpanData {
    pub id: u32,
    pub mem: SpanMem,
    /// Objects stored.
    pub live: u32,
    /// Handle index per slot, `NO_HANDLE` when empty or deferred.
    pub owner: Box<[u32]>,
    /// Free slots, reusable now.
    free: Vec<u16>,
    /// Freed while a reader was present; reusable once the span has no readers.
    pub deferred: Vec<u16>,
    /// Slots never used yet, `next_unused..objs_per_span`.
    next_unused: u32,
    /// Fullness group and position in it (`group == NO_GROUP`: detached).
    pub group: u8,
    pub pos: u32,
}

pub(crate) const NO_GROUP: u8 = u8::MAX;

impl SpanData {
    pub(crate) fn new(id: u32, mem: SpanMem, objs_per_span: u32) -> Self {
        Self {
            id,
            mem,
            live: 0,
            owner: vec![NO_HANDLE; objs_per_span as usize].into_boxed_slice(),
            free: Vec::new(),
            deferred: Vec::new(),
            next_unused: 0,
            group: NO_GROUP,
            pos: 0,
        }
    }

    /// Slots holding an object or waiting out a reader.
    pub(crate) fn occupied(&self) -> u32 {
        self.live + self.deferred.len() as u32
    }

    /// Take a reusable slot for a new object (`live` is the caller's to bump).
    pub(crate) fn take_slot(&mut self) -> Option<u32> {
        if let Some(s) = self.free.pop() {
            return Some(u32::from(s));
        }
        if (self.next_unused as usize) < self.owner.len() {
            self.next_unused += 1;
            return Some(self.next_unused - 1);
        }
        None
    }

    /// Mark `slot` empty: reusable now, or deferred if a reader may still be
    /// looking at it.
    pub(crate) fn release_slot(&mut self, slot: u32, readers_present: bool) {
        self.owner[slot as usize] = NO_HANDLE;
        self.live -= 1;
        if readers_present {
            self.deferred.push(slot as u16);
        } else {
            self.free.push(slot as u16);
        }
    }

    /// Make deferred slots reusable; the caller has seen the span with no
    /// readers after the frees. Returns how many.
    pub(crate) fn reclaim_deferred(&mut self) -> u32 {
        let n = self.deferred.len() as u32;
        self.free.append(&mut self.deferred);
        n
    }

    /// Out-of-line bookkeeping bytes of this span.
    pub(crate) fn meta_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.owner.len() * 4
            + (self.free.capacity() + self.deferred.capacity()) * 2
    }
}
