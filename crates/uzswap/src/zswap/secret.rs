//! secret: memory for what must not outlive its use or leave the process —
//! the writeback key, and the staging buffers that carry program data to
//! the swap device.
//!
//! Owns anonymous mappings of its own (never the heap's, which other code
//! reuses and which a core dump includes): each is marked `MADV_DONTDUMP`
//! so a core dump leaves it out, the key's is also `mlock`ed (best effort:
//! `RLIMIT_MEMLOCK` may refuse, and the key then relies on DONTDUMP alone
//! while the kernel's own swap could write it out), and every one is wiped
//! (`zeroize`) before it is unmapped or handed to its next user. A thread
//! keeps its staging buffer for the next use only up to `STAGING_RESIDENT`:
//! it is uzswap's own memory, outside the budget.
//!
//! Locking: none. A [`SecretPage`] is owned by one value; a staging buffer
//! belongs to one thread (thread-local) and is lent to one closure at a
//! time.

use crate::PAGE_SIZE;
use std::cell::RefCell;
use std::io;
use std::ptr::NonNull;
use zeroize::Zeroize;

/// An anonymous, never-dumped mapping of `len` bytes (a page multiple).
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value alone.
unsafe impl Send for Mapping {}
// SAFETY: shared access only reads through `&self` (see `SecretPage`).
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize, lock: bool) -> io::Result<Mapping> {
        let len = len.max(1).next_multiple_of(PAGE_SIZE);
        // SAFETY: a fresh private anonymous mapping; no memory is passed.
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
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let m = Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned a non-null address"),
            len,
        };
        // SAFETY: advice on our own, just-made mapping.
        if unsafe { libc::madvise(p, len, libc::MADV_DONTDUMP) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if lock {
            // SAFETY: as above. Failure (RLIMIT_MEMLOCK) is tolerated: see
            // the module comment.
            unsafe { libc::mlock(p, len) };
        }
        Ok(m)
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes mapped read-write, owned by `self`, uniquely
        // borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        self.bytes().zeroize();
        // SAFETY: our own mapping, no longer referenced. munlock of an
        // unlocked range is harmless.
        unsafe {
            libc::munlock(self.ptr.as_ptr().cast(), self.len);
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// A `T` that lives in a mapping of its own: locked in memory where the
/// limit allows, left out of core dumps, dropped and then wiped whole.
pub(super) struct SecretPage<T> {
    map: Mapping,
    _t: std::marker::PhantomData<T>,
}

// SAFETY: a `SecretPage<T>` owns its `T` as a `Box<T>` would.
unsafe impl<T: Send> Send for SecretPage<T> {}
// SAFETY: as above; `&SecretPage<T>` gives only `&T`.
unsafe impl<T: Sync> Sync for SecretPage<T> {}

impl<T> SecretPage<T> {
    /// Builds the value from `SEED` bytes that `seed` fills inside the
    /// mapping (so the seed itself, a key, never sits on the stack), then
    /// wipes the seed.
    pub fn new<const SEED: usize>(
        seed: impl FnOnce(&mut [u8; SEED]) -> io::Result<()>,
        build: impl FnOnce(&[u8; SEED]) -> T,
    ) -> io::Result<SecretPage<T>> {
        let size = std::mem::size_of::<T>().next_multiple_of(64);
        assert!(std::mem::align_of::<T>() <= 64, "over-aligned secret");
        let mut map = Mapping::new(size + SEED, true)?;
        let seed_bytes: &mut [u8; SEED] = (&mut map.bytes()[size..size + SEED])
            .try_into()
            .expect("seed length");
        seed(seed_bytes)?;
        let value = build(seed_bytes);
        seed_bytes.zeroize();
        // SAFETY: the mapping is page-aligned (so aligned for `T`, checked
        // above) and at least `size_of::<T>()` bytes; nothing is there yet.
        unsafe { map.ptr.as_ptr().cast::<T>().write(value) };
        Ok(SecretPage {
            map,
            _t: std::marker::PhantomData,
        })
    }
}

impl<T> std::ops::Deref for SecretPage<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: written in `new`, dropped only in `drop`.
        unsafe { &*self.map.ptr.as_ptr().cast::<T>() }
    }
}

impl<T> Drop for SecretPage<T> {
    fn drop(&mut self) {
        // SAFETY: the value written in `new`, dropped once; the mapping
        // (wiped and unmapped by its own drop, after this) outlives it.
        unsafe { std::ptr::drop_in_place(self.map.ptr.as_ptr().cast::<T>()) };
    }
}

/// Fills `buf` from the kernel's random number generator.
pub(super) fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: writes at most `buf.len() - done` bytes into `buf`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// A thread's staging buffer is kept for its next use up to this size; a
/// larger one is unmapped after its use. Writeback stages its runs in
/// pieces of this size, so it never needs more. Kept at the size of the
/// largest run (up to a 2 MiB folio), the buffers of the threads that
/// write back held 1.25 MiB under `uzswap run --budget 38M -- sort`,
/// outside the budget, where every MiB more for the program took 2 s off
/// its 14 (docs/BENCHMARKS.md).
pub(super) const STAGING_RESIDENT: usize = 64 << 10;

thread_local! {
    static STAGING: RefCell<Option<Mapping>> = const { RefCell::new(None) };
}

/// Register this thread's staging slot now rather than at its first use
/// (`region::sigbus::prepare_thread`).
pub(crate) fn prepare_staging() {
    let _ = STAGING.try_with(|_| ());
}

/// Lends `f` a zeroed, never-dumped buffer of `len` bytes, and wipes it
/// afterwards. The thread's buffer is reused, so staging costs no system
/// call once it is big enough; a nested call (none today) gets a mapping
/// of its own.
pub(super) fn with_staging<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let taken = STAGING
        .try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.take()))
        .ok()
        .flatten();
    let mut map = match taken {
        Some(m) if m.len >= len => m,
        _ => match Mapping::new(len, false) {
            Ok(m) => m,
            // No mapping to be had (ENOMEM, map count): stage on the heap,
            // wiped all the same, rather than fail the write.
            Err(_) => {
                let mut v = zeroize::Zeroizing::new(vec![0u8; len]);
                return f(&mut v);
            }
        },
    };
    let r = f(&mut map.bytes()[..len]);
    map.bytes()[..len].zeroize();
    if map.len <= STAGING_RESIDENT {
        let _ = STAGING.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                *s = Some(map);
            }
        });
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_page_holds_the_value_and_the_seed_is_wiped() {
        let p = SecretPage::new::<8>(
            |s| {
                s.copy_from_slice(b"abcdefgh");
                Ok(())
            },
            |s| u64::from_le_bytes(*s),
        )
        .unwrap();
        assert_eq!(*p, u64::from_le_bytes(*b"abcdefgh"));
        let size = std::mem::size_of::<u64>().next_multiple_of(64);
        // SAFETY: the seed lies inside the page `p` maps.
        let seed = unsafe { std::slice::from_raw_parts(p.map.ptr.as_ptr().add(size), 8) };
        assert_eq!(seed, &[0u8; 8]);
    }

    #[test]
    fn staging_is_zeroed_for_each_user() {
        with_staging(3 * PAGE_SIZE, |b| {
            assert!(b.iter().all(|&x| x == 0));
            b.fill(0xa5);
        });
        with_staging(2 * PAGE_SIZE, |b| assert!(b.iter().all(|&x| x == 0)));
        // Nested: a buffer of its own, not the one lent outside.
        with_staging(PAGE_SIZE, |outer| {
            outer.fill(1);
            with_staging(PAGE_SIZE, |inner| {
                assert!(inner.iter().all(|&x| x == 0));
                inner.fill(2);
            });
            assert!(outer.iter().all(|&x| x == 1));
        });
    }

    #[test]
    fn staging_keeps_little_resident_between_uses() {
        let kept = || STAGING.with(|s| s.borrow().as_ref().map_or(0, |m| m.len));
        let pages = 64;
        with_staging(pages * PAGE_SIZE, |b| b.fill(0x5a));
        assert!(
            kept() <= STAGING_RESIDENT,
            "{} KiB kept resident after a {pages}-page use",
            kept() >> 10
        );
        // The next user still gets zeros, all of them.
        with_staging(pages * PAGE_SIZE, |b| assert!(b.iter().all(|&x| x == 0)));
        with_staging(STAGING_RESIDENT, |b| b.fill(1));
        assert_eq!(kept(), STAGING_RESIDENT, "a buffer of the kept size stays");
    }

    #[test]
    fn random_fills_differ() {
        let (mut a, mut b) = ([0u8; 32], [0u8; 32]);
        fill_random(&mut a).unwrap();
        fill_random(&mut b).unwrap();
        assert_ne!(a, b);
    }
}
