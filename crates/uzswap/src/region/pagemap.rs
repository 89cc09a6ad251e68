//! Which pages of a range the process already has, from
//! `/proc/self/pagemap` (one little-endian u64 per page: bit 63 present,
//! bit 62 swapped out). Used when a region is registered late
//! (`Config::defer_register`) to take charge of the memory the program
//! touched before. Owns no state and takes no locks.

use crate::PAGE_SIZE;
use std::fs::File;
use std::os::unix::fs::FileExt;

const PRESENT: u64 = 1 << 63;
const SWAPPED: u64 = 1 << 62;
/// Entries read per `pread`: 512 KiB of pagemap, 256 MiB of memory.
const BATCH: usize = 64 << 10;

/// Open the process's pagemap. Separate from the scan so a caller can fail
/// before it changes anything (registration opens first, registers, then
/// scans).
pub(super) fn open() -> std::io::Result<uzswap_swap::fds::Owned<File>> {
    // Shielded like the library's other descriptors: a program thread's
    // close-everything would otherwise cut a registration's scan short.
    File::open("/proc/self/pagemap").map(uzswap_swap::fds::Owned::new)
}

/// Call `f(chunk index, pages of it present or swapped, first page index
/// within the chunk that is neither)` for every chunk of `per` pages of the
/// `len` bytes at `base` (both chunk-aligned). `first_hole` is `per` when
/// the chunk has no hole.
pub(super) fn for_each_chunk(
    file: &File,
    base: usize,
    len: usize,
    per: usize,
    mut f: impl FnMut(usize, usize, usize),
) -> std::io::Result<()> {
    let first = base / PAGE_SIZE;
    let npages = len / PAGE_SIZE;
    // Whole chunks per read, so a chunk never straddles two reads.
    let step = (BATCH / per).max(1) * per;
    let mut buf = vec![0u8; step * 8];
    let mut done = 0;
    while done < npages {
        let n = step.min(npages - done);
        let bytes = &mut buf[..n * 8];
        file.read_exact_at(bytes, ((first + done) * 8) as u64)?;
        for (k, c) in bytes.chunks_exact(per * 8).enumerate() {
            let mut touched = 0;
            let mut hole = per;
            for (i, e) in c.chunks_exact(8).enumerate() {
                let e = u64::from_le_bytes(e.try_into().unwrap());
                if e & (PRESENT | SWAPPED) != 0 {
                    touched += 1;
                } else if hole == per {
                    hole = i;
                }
            }
            f(done / per + k, touched, hole);
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_touched_pages_and_holes() {
        let per = 4;
        let len = 16 * PAGE_SIZE;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as usize;
        // SAFETY: no huge pages, so touched pages are exactly those written.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        // Chunk 0: all four pages; chunk 1: pages 1 and 3; chunks 2, 3: none.
        for page in [0, 1, 2, 3, 5, 7] {
            // SAFETY: inside the mapping.
            unsafe { *((base + page * PAGE_SIZE) as *mut u8) = 1 };
        }
        let mut seen = Vec::new();
        for_each_chunk(&open().unwrap(), base, len, per, |ci, t, h| {
            seen.push((ci, t, h))
        })
        .unwrap();
        // SAFETY: our mapping.
        unsafe { libc::munmap(p, len) };
        assert_eq!(seen, vec![(0, 4, 4), (1, 2, 0), (2, 0, 0), (3, 0, 0)]);
    }
}
