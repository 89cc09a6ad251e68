//! Grow-only chunked tables indexed by `u32`, readable without locks.
//!
//! Both the handle table and the span-slot table must be readable by `read`
//! while other threads append to them, and an element's address must never
//! change (readers hold `&T` across a spin on its lock word). So a table is a
//! fixed top-level array of chunk pointers; a chunk is allocated on first use,
//! published with a compare-and-swap, and freed only when the table drops.
//! Nothing here decides which indices are live: that is the owner's job.

use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

pub(crate) struct ChunkedTable<T> {
    chunks: Box<[AtomicPtr<T>]>,
    chunk_shift: u32,
}

impl<T: Default> ChunkedTable<T> {
    /// A table of at most `1 << max_log2` elements in chunks of `1 << chunk_shift`.
    pub(crate) fn new(max_log2: u32, chunk_shift: u32) -> Self {
        assert!(chunk_shift <= max_log2 && max_log2 <= 32);
        let n = 1usize << (max_log2 - chunk_shift);
        let chunks = (0..n).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        Self {
            chunks,
            chunk_shift,
        }
    }

    /// Largest index + 1 the table can ever hold.
    pub(crate) fn capacity(&self) -> u64 {
        (self.chunks.len() as u64) << self.chunk_shift
    }

    fn chunk_len(&self) -> usize {
        1usize << self.chunk_shift
    }

    fn split(&self, idx: u32) -> (usize, usize) {
        (
            (idx >> self.chunk_shift) as usize,
            idx as usize & (self.chunk_len() - 1),
        )
    }

    /// The element at `idx`, or `None` when its chunk was never allocated
    /// (an index no allocation ever handed out).
    pub(crate) fn get(&self, idx: u32) -> Option<&T> {
        let (c, off) = self.split(idx);
        let p = self.chunks.get(c)?.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null chunk pointer was published (Release, paired with
        // the Acquire above) after the chunk of `chunk_len()` initialised
        // elements was built; chunks are freed only in `drop`, which needs
        // `&mut self`, so the element outlives the returned borrow; off < chunk_len.
        Some(unsafe { &*p.add(off) })
    }

    /// The element at `idx`, allocating its chunk if needed. `None` when
    /// `idx` is beyond the table's capacity.
    pub(crate) fn get_or_alloc(&self, idx: u32) -> Option<&T> {
        let (c, _) = self.split(idx);
        let slot = self.chunks.get(c)?;
        if slot.load(Ordering::Acquire).is_null() {
            let fresh: Box<[T]> = (0..self.chunk_len()).map(|_| T::default()).collect();
            let fresh = Box::into_raw(fresh) as *mut T;
            if slot
                .compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `fresh` came from `Box::into_raw` of a slice of
                // `chunk_len()` elements just above and lost the race, so no
                // one else has seen it.
                drop(unsafe {
                    Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, self.chunk_len()))
                });
            }
        }
        self.get(idx)
    }
}

impl<T> Drop for ChunkedTable<T> {
    fn drop(&mut self) {
        let len = 1usize << self.chunk_shift;
        for c in self.chunks.iter_mut() {
            let p = *c.get_mut();
            if !p.is_null() {
                // SAFETY: every non-null chunk pointer came from `Box::into_raw`
                // of a `Box<[T]>` of `len` elements in `get_or_alloc`, and
                // `&mut self` means no borrow from `get` is alive.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, len)) });
            }
        }
    }
}
