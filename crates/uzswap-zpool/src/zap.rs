//! Giving memory back in bulk: `MADV_DONTNEED` over many ranges in one
//! `process_madvise(2)` call on our own pidfd, for the pool's trim and the
//! front end's evictor. Each zap of a mapping that
//! another CPU is running must shoot down that CPU's TLB; one call per
//! range pays an inter-processor interrupt per range (about 20 µs each on
//! a 2-vCPU VM, measured with a second thread running), while the vector
//! call flushes once for all of its ranges (about 1 µs per range on the
//! 6.18 kernel measured). Where the kernel refuses `MADV_DONTNEED` in
//! `process_madvise` (older kernels do), every range falls back to its own
//! `madvise`.
//!
//! Whether the kernel takes the vector call is probed once, on a page of
//! our own, when the zapper is made: a failure later (a range the kernel
//! refuses) only sends that call's ranges to the fallback.
//!
//! No locking: one zapper per process ([`zapper`]), made once and only read.

use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// `UIO_MAXIOV`: the most ranges one call takes.
const MAX_IOV: usize = 1024;

/// The process's zapper.
pub fn zapper() -> &'static Zapper {
    static Z: OnceLock<Zapper> = OnceLock::new();
    Z.get_or_init(Zapper::new)
}

pub struct Zapper {
    /// Our pidfd, where the kernel takes `MADV_DONTNEED` through it.
    pidfd: Option<OwnedFd>,
}

impl Zapper {
    fn new() -> Zapper {
        // SAFETY: pidfd_open(2) takes a pid and flags and returns a new
        // descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
        let pidfd = (fd >= 0).then(|| {
            // SAFETY: the descriptor was just returned to us and is ours.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        });
        let pidfd = pidfd.filter(probe);
        Zapper { pidfd }
    }

    /// Zap `ranges` (page-aligned, in our anonymous mappings). Returns the
    /// ranges that failed, by index, with their error; a range not listed
    /// is zapped.
    ///
    /// # Safety
    /// Every page in `ranges` must be the caller's to discard: its content
    /// saved elsewhere, and nothing reading it through a reference.
    pub unsafe fn zap(&self, ranges: &[Range<usize>]) -> Vec<(usize, io::Error)> {
        let mut failed = Vec::new();
        let mut from = 0;
        while from < ranges.len() {
            let to = (from + MAX_IOV).min(ranges.len());
            // SAFETY: forwarded from our caller.
            let done = unsafe { self.zap_vector(&ranges[from..to]) };
            for (i, r) in ranges[from + done..to].iter().enumerate() {
                // SAFETY: forwarded from our caller.
                if let Err(e) = unsafe { madvise_dontneed(r) } {
                    failed.push((from + done + i, e));
                }
            }
            from = to;
        }
        failed
    }

    /// One vector call for `ranges` (at most `MAX_IOV`): returns how many
    /// leading ranges it zapped whole (the rest, from the first it did not
    /// finish, are left to the fallback).
    unsafe fn zap_vector(&self, ranges: &[Range<usize>]) -> usize {
        let Some(fd) = self.pidfd.as_ref() else {
            return 0;
        };
        // SAFETY: forwarded from our caller.
        let rc = unsafe { process_dontneed(fd, ranges) };
        if rc < 0 {
            return 0;
        }
        // The bytes done cover a prefix of the ranges, in order.
        let mut left = rc as usize;
        let mut whole = 0;
        for r in ranges {
            if left < r.len() {
                break;
            }
            left -= r.len();
            whole += 1;
        }
        whole
    }
}

/// `process_madvise(fd, ranges, MADV_DONTNEED)`: the bytes advised, or -1.
///
/// # Safety
/// As for [`Zapper::zap`].
unsafe fn process_dontneed(fd: &OwnedFd, ranges: &[Range<usize>]) -> isize {
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|r| libc::iovec {
            iov_base: r.start as *mut libc::c_void,
            iov_len: r.len(),
        })
        .collect();
    // SAFETY: `iov` describes `ranges`, which our caller vouches for; the
    // kernel reads the vector and advises each range in order.
    unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            fd.as_raw_fd(),
            iov.as_ptr(),
            iov.len(),
            libc::MADV_DONTNEED,
            0u32,
        ) as isize
    }
}

/// Whether this kernel takes `MADV_DONTNEED` through `process_madvise` on
/// `fd` (our own pidfd): tried on a fresh page of our own.
fn probe(fd: &OwnedFd) -> bool {
    let len = crate::PAGE_SIZE;
    // SAFETY: a fresh private anonymous page at an address of the kernel's
    // choosing, unmapped below; nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
        let page = p as usize..p as usize + len;
        let ok = process_dontneed(fd, std::slice::from_ref(&page)) == len as isize;
        libc::munmap(p, len);
        ok
    }
}

/// # Safety
/// As for [`Zapper::zap`].
unsafe fn madvise_dontneed(r: &Range<usize>) -> io::Result<()> {
    // SAFETY: forwarded from our caller.
    let rc = unsafe { libc::madvise(r.start as *mut _, r.len(), libc::MADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PAGE_SIZE;

    /// Every other page of a mapping, zapped in one call, reads as zero
    /// afterwards, and the pages between keep their data (whether or not
    /// this kernel takes the vector call).
    #[test]
    fn zaps_exactly_the_ranges_given() {
        let pages = 2 * MAX_IOV + 6;
        let len = pages * PAGE_SIZE;
        // Page-aligned heap memory: anonymous and private, like a mapping.
        let layout = std::alloc::Layout::from_size_align(len, PAGE_SIZE).unwrap();
        // SAFETY: a non-zero size; the result is checked.
        let p = unsafe { std::alloc::alloc(layout) };
        assert!(!p.is_null());
        // SAFETY: the allocation is ours, `len` bytes, and nothing else uses it.
        let m = unsafe { std::slice::from_raw_parts_mut(p, len) };
        m.fill(7);
        let base = p as usize;
        let ranges: Vec<Range<usize>> = (0..pages)
            .step_by(2)
            .map(|i| base + i * PAGE_SIZE..base + (i + 1) * PAGE_SIZE)
            .collect();
        let z = Zapper::new();
        // SAFETY: the pages are ours and no reference into them is live
        // across the call (`m` is not used until after it).
        let failed = unsafe { z.zap(&ranges) };
        assert!(failed.is_empty(), "{failed:?}");
        // SAFETY: as above; the zap is done.
        let m = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
        for i in 0..pages {
            let want = if i % 2 == 0 { 0 } else { 7 };
            assert!(
                m[i * PAGE_SIZE..(i + 1) * PAGE_SIZE]
                    .iter()
                    .all(|&b| b == want),
                "page {i}"
            );
        }
        // SAFETY: freeing what we allocated, with its layout; no reference
        // outlives it.
        unsafe { std::alloc::dealloc(p, layout) };
    }
}
