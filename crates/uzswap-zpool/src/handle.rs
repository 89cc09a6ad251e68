//! The handle table: the indirection that keeps handles stable while
//! compaction moves objects (the kernel's handle cache, `obj_to_location` /
//! `record_obj`).
//!
//! A [`Handle`] is `generation << 32 | index`. `index` names one 64-bit entry
//! word in a grow-only [`ChunkedTable`]; the word packs the object's current
//! location and the generation it was allocated with:
//!
//! ```text
//!  63  | 62..52 | 51..24  | 23..12 | 11..0
//!  A   | gen    | span id | slot   | size - 1
//! ```
//!
//! `A` (allocated) clear means the index is free; the generation stays in
//! the word so the next allocation of the index bumps it, and a stale or
//! double-freed handle (old generation) is recognised instead of freeing
//! someone else's object. The 11-bit generation wraps after 2048 reuses of one
//! index; a handle that stale is a caller bug this check no longer catches.
//!
//! Locking: an entry word is written only by the holder of the lock of the
//! class its object lives in (store, free, compaction), and read lock-free.
//! Free indices are cached per class (under that class's lock) and spill to
//! a shared list (its own mutex, taken last) when a class holds too many.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::table::ChunkedTable;
use crate::Handle;

const SIZE_BITS: u32 = 12;
const SLOT_BITS: u32 = 12;
const SPAN_BITS: u32 = 28;
const GEN_BITS: u32 = 11;
const SLOT_SHIFT: u32 = SIZE_BITS;
const SPAN_SHIFT: u32 = SLOT_SHIFT + SLOT_BITS;
const GEN_SHIFT: u32 = SPAN_SHIFT + SPAN_BITS;
const ALLOCATED: u64 = 1 << 63;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
const _: () = assert!(GEN_SHIFT + GEN_BITS == 63);

/// Largest number of span ids an entry can name.
pub(crate) const MAX_SPAN_ID_BITS: u32 = SPAN_BITS;
/// Largest number of handle indices (2^28: hundreds of GiB of objects).
const INDEX_BITS: u32 = 28;
const CHUNK_SHIFT: u32 = 14;
/// A class keeps at most this many free indices before spilling half to
/// the shared list, and refills this many at once from it. Small, because
/// an index parked in one class's cache is table space no other class can
/// use (about 150 classes).
const CLASS_CACHE_MAX: usize = 64;
const CLASS_CACHE_BATCH: usize = CLASS_CACHE_MAX / 2;

/// Where an object lives now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub span: u32,
    pub slot: u32,
    /// The stored length, `1..=PAGE_SIZE`.
    pub size: u32,
}

pub(crate) fn encode(gen: u32, loc: Loc) -> u64 {
    debug_assert!(loc.size >= 1 && loc.size <= 1 << SIZE_BITS);
    debug_assert!(loc.slot < 1 << SLOT_BITS && loc.span < 1 << SPAN_BITS);
    ALLOCATED
        | (u64::from(gen & GEN_MASK) << GEN_SHIFT)
        | (u64::from(loc.span) << SPAN_SHIFT)
        | (u64::from(loc.slot) << SLOT_SHIFT)
        | u64::from(loc.size - 1)
}

fn gen_of(word: u64) -> u32 {
    (word >> GEN_SHIFT) as u32 & GEN_MASK
}

/// The generation and location of an allocated entry word.
pub(crate) fn decode(word: u64) -> Option<(u32, Loc)> {
    if word & ALLOCATED == 0 {
        return None;
    }
    let loc = Loc {
        span: (word >> SPAN_SHIFT) as u32 & ((1 << SPAN_BITS) - 1),
        slot: (word >> SLOT_SHIFT) as u32 & ((1 << SLOT_BITS) - 1),
        size: (word as u32 & ((1 << SIZE_BITS) - 1)) + 1,
    };
    Some((gen_of(word), loc))
}

/// The word a freed entry holds: its generation, not allocated.
pub(crate) fn free_word(gen: u32) -> u64 {
    u64::from(gen & GEN_MASK) << GEN_SHIFT
}

/// The generation the next allocation of an entry currently `word` gets.
pub(crate) fn next_gen(word: u64) -> u32 {
    (gen_of(word) + 1) & GEN_MASK
}

impl Handle {
    pub(crate) fn new(index: u32, gen: u32) -> Self {
        Handle(u64::from(gen) << 32 | u64::from(index))
    }

    /// `(index, generation)`, or `None` for bits no pool ever hands out.
    pub(crate) fn parts(self) -> Option<(u32, u32)> {
        let index = self.0 as u32;
        let gen = (self.0 >> 32) as u32;
        (gen <= GEN_MASK && index < 1 << INDEX_BITS).then_some((index, gen))
    }
}

pub(crate) struct HandleTable {
    entries: ChunkedTable<AtomicU64>,
    next: AtomicU32,
    spill: Mutex<Vec<u32>>,
}

impl HandleTable {
    pub(crate) fn new() -> Self {
        Self {
            entries: ChunkedTable::new(INDEX_BITS, CHUNK_SHIFT),
            next: AtomicU32::new(0),
            spill: Mutex::new(Vec::new()),
        }
    }

    /// The entry word of `index`, if that index was ever handed out.
    pub(crate) fn entry(&self, index: u32) -> Option<&AtomicU64> {
        self.entries.get(index)
    }

    /// A free index: from the caller's class cache, the shared spill list, or
    /// a never-used one. `None` when the table is exhausted.
    pub(crate) fn alloc_index(&self, cache: &mut Vec<u32>) -> Option<u32> {
        if let Some(i) = cache.pop() {
            return Some(i);
        }
        {
            let mut spill = self.spill.lock();
            let n = spill.len().min(CLASS_CACHE_BATCH);
            let from = spill.len() - n;
            cache.extend(spill.drain(from..));
        }
        if let Some(i) = cache.pop() {
            return Some(i);
        }
        let cap = self.entries.capacity();
        let i = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (u64::from(n) < cap).then_some(n + 1)
            })
            .ok()?;
        self.entries.get_or_alloc(i)?;
        Some(i)
    }

    /// Return a freed index to the caller's class cache.
    pub(crate) fn release_index(&self, cache: &mut Vec<u32>, index: u32) {
        cache.push(index);
        if cache.len() > CLASS_CACHE_MAX {
            self.spill.lock().extend(cache.drain(CLASS_CACHE_BATCH..));
        }
    }

    /// Bytes of handle table allocated (out-of-line metadata, not counted in
    /// `pool_total_size`, as the kernel's handle cache is not).
    pub(crate) fn table_bytes(&self) -> u64 {
        let used = u64::from(self.next.load(Ordering::Relaxed));
        let chunk = 1u64 << CHUNK_SHIFT;
        used.div_ceil(chunk) * chunk * std::mem::size_of::<AtomicU64>() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_roundtrip() {
        for (gen, span, slot, size) in [
            (0, 0, 0, 1),
            (GEN_MASK, (1 << SPAN_BITS) - 1, (1 << SLOT_BITS) - 1, 4096),
            (7, 12345, 77, 1500),
        ] {
            let loc = Loc { span, slot, size };
            assert_eq!(decode(encode(gen, loc)), Some((gen, loc)));
        }
        assert_eq!(decode(free_word(5)), None);
        assert_eq!(next_gen(free_word(GEN_MASK)), 0);
    }

    #[test]
    fn handle_parts_reject_foreign_bits() {
        assert_eq!(Handle::new(3, 9).parts(), Some((3, 9)));
        assert_eq!(Handle(u64::MAX).parts(), None);
        assert_eq!(Handle(1 << 30).parts(), None);
    }
}
