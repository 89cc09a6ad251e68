//! A zsmalloc-style allocator for compressed objects (mm/zsmalloc.c, in
//! userspace).
//!
//! # Layout
//! Objects of 1..=[`PAGE_SIZE`] bytes are rounded up to a multiple of 16
//! ([`size_class::ZS_SIZE_CLASS_DELTA`]) and served by a *size class*. A
//! class owns *spans* (zspages): `pages_per_span` contiguous pages, cut
//! into `objs_per_span` equal slots. The span length (1..=8 pages by default,
//! up to 16) is chosen per class to waste the smallest fraction of the span;
//! sizes with identical span geometry share a class. Objects never straddle
//! spans.
//!
//! Spans get their pages from the *page provider* (`page_alloc`, the buddy
//! allocator's part): 2 MiB arenas, one `mmap` each, carved into runs; an
//! emptied span's run goes on a free list of its length, so the next span of
//! that length pops it. Cached runs are given back to the OS lazily and in
//! bulk (whole empty arenas `munmap`ed, other ranges `MADV_DONTNEED`) once
//! they exceed 1/16 of the live spans' bytes, and all of them by
//! [`ZsPool::compact`]. With [`PoolConfig::huge_arenas`], once the pool
//! has an arena's worth of live pages, new arenas are transparent huge
//! pages where the kernel offers them, faulted in whole (cheaper to fault
//! in and to give back where huge pages are cheap to clear; see
//! `page_alloc`). `pool_total_size` is the pages of live spans plus the
//! cached runs ([`PoolStats::cached_bytes`]) plus the huge arenas' pages not
//! yet handed out: all the pool holds.
//!
//! Each class keeps its spans on *fullness lists* (empty, 0-9% .. 90-99%,
//! full). A store goes to the fullest non-full span so spans fill densely;
//! [`ZsPool::compact`] drains the sparsest spans into the fullest.
//!
//! A [`Handle`] indexes the *handle table*; its entry word holds the object's
//! current (span, slot, length) and a generation, so compaction can move an
//! object without the caller noticing, and a stale or double-freed handle is
//! recognised (see `handle`).
//!
//! # Locks and their order
//! 1. `class lock` (one mutex per class): the class's spans, fullness lists,
//!    slot maps, counters, and every write to the entries of its objects.
//!    Store, free and compaction of a class take it; readers never do.
//! 2. `span lock` (a reader count plus a writer bit per span): `read` holds it
//!    shared while it looks at an object; the writer bit is taken to move
//!    objects out of a span (compaction, under the class lock, *try* only:
//!    a busy span is skipped, never waited for) and to unmap a span (after it
//!    was removed from its class and the class lock dropped: waits for
//!    readers, who by then can only be stale probes that back off) to give
//!    its pages back to the provider.
//! 3. leaf mutexes: the shared spill list of free handle indices, the span id
//!    allocator, the page provider. Nothing is taken while holding them.
//!
//! Order: class lock -> span write (try) -> leaf. A reader holds only its span
//! read lock; its callback may call into the pool (store, read), but must not
//! free the handle it is reading (that free would wait for the reader).
//!
//! # Read protocol
//! `read` loads the entry, read-locks the span it names, and loads the entry
//! again. If it changed, the object moved or was freed: unlock and retry.
//! If not, the object is at that place and stays there until the read lock is
//! dropped: moving it or returning its span's pages needs the span's write
//! lock. Span ids are recycled but the span table's memory never is, so
//! probing a stale span id is harmless (it fails revalidation), and a reader
//! touches object bytes only after revalidating.
//!
//! Pages are reused, not unmapped: a span's run may become another span's
//! (of any class) right after it is returned. That changes nothing above:
//! - A validated reader of span S holds S's read lock, and S's run goes back
//!   to the provider only under S's write lock (with `base` cleared first),
//!   so while the reader is inside, the run is S's and no other span can own
//!   those pages.
//! - A stale reader that read-locks S after S gave its run away (or after
//!   the id became a new span's) re-loads the entry; the entry it loaded
//!   first named the old location, and a word naming S again with the same
//!   generation and slot means the object *is* at that slot of S now (moved
//!   there, with `base` published before the entry), so the bytes it reads
//!   are the object's either way. It never reads through a `base` it has not
//!   revalidated.
//! - Happens-before for the bytes: a departing reader's Release decrement
//!   precedes the Acquire write lock of the span's release, which precedes
//!   the provider's mutex unlock in `free`, which precedes the mutex lock of
//!   the `alloc` that hands the run to the next span, which precedes that
//!   span's writes. So the next owner's writes never race the old readers.
//!
//! A free does not wait for readers. It stores the free entry word (SeqCst)
//! and then loads the span's reader count (SeqCst); a reader increments the
//! count (SeqCst) before its revalidating load (SeqCst). In the single total
//! order of SeqCst operations either the free sees the reader, or the reader
//! sees the free word and never touches the bytes. If the free sees any
//! reader, the slot is *deferred*: not reused until the span is observed with
//! no readers (by a later free, store or compaction under the class lock).
//! So a slot's bytes are only ever rewritten when no reader can be reading
//! them, even if a caller races `read` and `free` on one handle.
//!
//! # Span life cycle (under the class lock unless noted)
//! ```text
//!  new (run from the provider) --attach--> listed (fullness group)
//!  listed --store/free--> listed (regrouped)
//!  listed --compaction: try write lock + detach--> isolated
//!  isolated --objects moved, live == 0--> released (write lock held)
//!  isolated --no destination left--> listed (write lock dropped)
//!  listed --free of the last object: detach + remove--> dying
//!  dying --(class lock dropped) write lock, run back to provider--> released
//!  released --id recycled after the write lock is dropped--> (free id)
//! ```
//!
//! # Errors
//! A size of 0 or over `PAGE_SIZE` is [`AllocError::BadSize`]; a failed
//! arena `mmap` (or an exhausted handle/span table) is
//! [`AllocError::NoMemory`].
//! [`ZsPool::free`] of a handle that is not live changes nothing, is counted
//! ([`PoolStats::invalid_frees`]) and trips a `debug_assert!`;
//! [`ZsPool::try_free`] and [`ZsPool::try_read`] return [`InvalidHandle`].
//!
//! # Memory outside `pool_total_size`
//! The handle table (8 bytes per handle ever live at once) and per-span slot
//! maps (4 bytes per slot) live on the heap, as the kernel's handle cache and
//! zspage structs do; [`PoolStats::metadata_bytes`] reports them.

mod compaction;
mod handle;
mod page_alloc;
mod pool;
pub mod size_class;
mod span;
mod stats;
mod table;
pub mod zap;

pub use pool::{PoolConfig, ZsPool};
pub use stats::{ClassStats, CompactStats, PoolStats};

/// The page size the pool's spans are built from.
pub const PAGE_SIZE: usize = 4096;

/// Bytes of one arena: the most one allocation can grow `pool_total_size`
/// by beyond its own span (a huge arena is held whole from its first use).
pub const ARENA_BYTES: usize = page_alloc::ARENA_BYTES;

/// Most bytes a small arena's pages are faulted in ahead of need, at one
/// allocation's fault-in or by the fill thread: with the spans it opens,
/// what one allocation can grow `pool_total_size` by beyond its object.
pub const GROW_BYTES: usize = page_alloc::GROW_PAGES * PAGE_SIZE;

/// [`GROW_BYTES`] for a pool that holds at most `held` bytes: pages are
/// faulted in ahead of need only up to a sixty-fourth of the live ones, so
/// a pool kept under a small budget grows by less than the flat bound.
pub fn grow_bytes_within(held: u64) -> u64 {
    let pages = held / PAGE_SIZE as u64 / page_alloc::FILL_DIVISOR;
    (pages * PAGE_SIZE as u64).min(GROW_BYTES as u64)
}

/// Bytes of the longest span a pool with the default options opens.
pub const MAX_SPAN_BYTES: usize = size_class::DEFAULT_MAX_PAGES_PER_SPAN * PAGE_SIZE;

/// An opaque handle to one object. Stable across compaction (the pool moves
/// objects, never handles).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AllocError {
    #[error("object size {0} out of range 1..={PAGE_SIZE}")]
    BadSize(usize),
    #[error("out of memory")]
    NoMemory,
}

/// A handle that is not live in this pool (freed, never issued, or from a
/// generation since reused).
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
#[error("handle {0:?} is not a live object of this pool")]
pub struct InvalidHandle(pub Handle);

// The zswap layer shares one pool between engine workers and fault handlers.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<ZsPool>();
};

#[cfg(test)]
mod tests;
