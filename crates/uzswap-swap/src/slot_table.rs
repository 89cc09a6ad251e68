//! slot_table: one record per swap slot, in an anonymous mapping reserved
//! (`MAP_NORESERVE`) and not committed up front, so a large, mostly idle
//! device costs memory only for the pages of records its written slots
//! touch. Used for the seal's per-slot versions and tags and the far
//! tier's per-slot write versions.
//!
//! Locking: none. A record is shared through atomics only, which is what
//! [`ZeroedRecord`] promises; the table owns its mapping.

use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8};

use crate::PAGE_SIZE;

/// A record a [`SlotTable`] can hold.
///
/// # Safety
/// All-zero bytes must be a valid value (a fresh mapping reads as zeros),
/// and every shared access must be safe through `&Self` (atomics only).
pub unsafe trait ZeroedRecord: Sync {}

// SAFETY: zero is a valid atomic, and an atomic is shared through `&`.
unsafe impl ZeroedRecord for AtomicU64 {}
// SAFETY: as for `AtomicU64`.
unsafe impl ZeroedRecord for AtomicU32 {}
// SAFETY: as for `AtomicU64`.
unsafe impl ZeroedRecord for AtomicU16 {}
// SAFETY: as for `AtomicU64`.
unsafe impl ZeroedRecord for AtomicU8 {}

/// `len` records, all zero, on the heap, for tables too small or too many
/// for a mapping each (per-chunk words of a region, a device's slot
/// counts). They come from `alloc_zeroed`, which glibc serves for large
/// sizes with fresh pages it does not write: only the pages of records
/// used become resident. Filling a table record by record instead (what
/// `(0..len).map(|_| AtomicU32::new(0)).collect()` does) makes every page
/// resident at once: 512 KiB for a 4 GiB region of 64 KiB chunks, 8 MiB
/// with 4 KiB chunks, outside any budget.
pub fn zeroed_records<T: ZeroedRecord>(len: usize) -> Box<[T]> {
    if len == 0 || std::mem::size_of::<T>() == 0 {
        return Vec::new().into_boxed_slice();
    }
    let layout = std::alloc::Layout::array::<T>(len).expect("table size overflows");
    // SAFETY: the layout has a non-zero size (checked above).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: `p` is a fresh allocation of `layout`, i.e. of `len` `T`s as
    // `Box<[T]>` frees it, and all-zero bytes are a valid `T`
    // (`ZeroedRecord`), so every element is initialised.
    unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) }
}

/// `len` records of `T`, all zero at first.
pub struct SlotTable<T: ZeroedRecord> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the records are `ZeroedRecord` (atomics); the mapping is owned
// by the table and freed only on drop.
unsafe impl<T: ZeroedRecord> Send for SlotTable<T> {}
// SAFETY: as above: shared access goes through atomics only.
unsafe impl<T: ZeroedRecord> Sync for SlotTable<T> {}

impl<T: ZeroedRecord> SlotTable<T> {
    fn bytes(len: usize) -> usize {
        (len * std::mem::size_of::<T>())
            .next_multiple_of(PAGE_SIZE)
            .max(PAGE_SIZE)
    }

    /// Reserves the mapping for `len` records.
    pub fn new(len: usize) -> io::Result<Self> {
        // SAFETY: a fresh private anonymous mapping; no memory is passed.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::bytes(len),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SlotTable {
            ptr: NonNull::new(p.cast()).expect("mmap returned a non-null address"),
            len,
        })
    }

    /// Records in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The record of `slot`.
    ///
    /// # Panics
    /// If `slot` is beyond the table.
    pub fn get(&self, slot: u64) -> &T {
        assert!(slot < self.len as u64, "slot {slot} beyond the device");
        // SAFETY: in bounds (checked); the mapping starts zero-filled, and
        // all-zero bytes are a valid `T` (`ZeroedRecord`).
        unsafe { &*self.ptr.as_ptr().add(slot as usize) }
    }
}

impl<T: ZeroedRecord> Drop for SlotTable<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no longer referenced.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), Self::bytes(self.len)) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn records_start_zero_and_keep_what_is_stored() {
        let t = SlotTable::<AtomicU64>::new(100_000).unwrap();
        assert_eq!(t.len(), 100_000);
        assert_eq!(t.get(99_999).load(Relaxed), 0);
        t.get(7).store(42, Relaxed);
        assert_eq!((t.get(7).load(Relaxed), t.get(8).load(Relaxed)), (42, 0));
        let empty = SlotTable::<AtomicU64>::new(0).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn zeroed_records_start_zero_and_large_ones_stay_untouched() {
        let t = zeroed_records::<AtomicU32>(3);
        assert!(t.iter().all(|r| r.load(Relaxed) == 0));
        assert!(zeroed_records::<AtomicU16>(0).is_empty());
        // 64 MiB of records: the allocator maps it fresh, so writing one
        // record makes one page resident, not the table.
        let before = resident_kib();
        let big = zeroed_records::<AtomicU64>(8 << 20);
        big[5 << 20].store(9, Relaxed);
        assert_eq!(big[5 << 20].load(Relaxed), 9);
        assert_eq!(big[(8 << 20) - 1].load(Relaxed), 0);
        let grew = resident_kib().saturating_sub(before);
        assert!(grew < 16 << 10, "a 64 MiB table made {grew} KiB resident");
    }

    /// This process's resident KiB (`/proc/self/statm`).
    fn resident_kib() -> u64 {
        let s = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
        pages * PAGE_SIZE as u64 / 1024
    }

    #[test]
    #[should_panic(expected = "beyond the device")]
    fn a_slot_past_the_end_panics() {
        SlotTable::<AtomicU64>::new(4).unwrap().get(4);
    }
}
