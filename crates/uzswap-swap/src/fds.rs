//! The library's own file descriptors, kept out of the program's way.
//!
//! Under `uzswap run` the library lives inside a program it did not write,
//! and its descriptors (the userfaultfd, the swap file, eventfds, the PSI
//! trigger, pagemap) sit in the program's table. Programs close what they
//! did not open: a daemon's `closefrom(3)`, Python's `os.closerange`, a loop
//! of `close` up to the limit; and shells `dup2` onto small numbers
//! (`exec 3>file`). Closing the userfaultfd unregisters every region, and
//! every evicted page then reads back as zeros; closing the swap file loses
//! what was written back. So:
//!
//! - [`Owned`] (and [`eventfd`], which makes one) moves a new descriptor
//!   of ours high (`high_base`: near the top of the usual 1024 soft limit,
//!   clear of the small numbers shells and daemons pick) and records it,
//!   with the identity (device, inode) of what it refers to.
//! - [`is_owned`] answers the preload library's `close`, `close_range`,
//!   `closefrom`, `dup2` and `dup3`, which leave our descriptors open (a
//!   close of one fails with EBADF, as for any descriptor the program does
//!   not have; a `dup2` onto one fails with EBUSY).
//! - Dropping an `Owned` forgets the record, then closes the descriptor.
//!   Every descriptor of ours is held in one, so none is closed while
//!   still recorded: the identity alone would not do (every eventfd shares
//!   one anonymous inode, so a program's eventfd that took a forgotten
//!   record's number would look like ours).
//!
//! Locking: none. A fixed table of atomics; a slot is claimed by a CAS from
//! `FREE` to `CLAIMING`, filled, then published with the descriptor's
//! number. Readers (async-signal-safe: no allocation, no locks) see either
//! the number with its identity or not the number.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::*};

/// Descriptors of ours at once; the library has about ten.
const SLOTS: usize = 64;
const FREE: i32 = -1;
const CLAIMING: i32 = -2;

static FD: [AtomicI32; SLOTS] = [const { AtomicI32::new(FREE) }; SLOTS];
static DEV: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static INO: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

/// Where our descriptors go: 64 below the soft limit, at most 960 (a table
/// sized for a million descriptors would cost the kernel megabytes), and
/// not at all where the limit is below 128.
fn high_base() -> Option<i32> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 || rl.rlim_cur < 128 {
        return None;
    }
    Some((rl.rlim_cur.min(1024) - 64) as i32)
}

fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writes; a bad `fd` is an error, not UB.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Take `fd` (a descriptor the library just made) as ours: move it high and
/// record it. Returns the number to use from now on (`fd` itself where it
/// could not be moved). The old number is closed.
fn own(fd: RawFd) -> RawFd {
    let fd = match high_base() {
        Some(base) if fd < base => {
            // SAFETY: F_DUPFD_CLOEXEC takes a lower bound; the result is
            // checked. Our descriptors are all close-on-exec.
            let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, base) };
            if high >= 0 {
                // SAFETY: `fd` is ours and now duplicated at `high`.
                unsafe { libc::close(fd) };
                high
            } else {
                fd
            }
        }
        _ => fd,
    };
    let Some((dev, ino)) = identity(fd) else {
        return fd;
    };
    for i in 0..SLOTS {
        if FD[i]
            .compare_exchange(FREE, CLAIMING, Acquire, Relaxed)
            .is_ok()
        {
            DEV[i].store(dev, Relaxed);
            INO[i].store(ino, Relaxed);
            FD[i].store(fd, Release);
            return fd;
        }
    }
    // Full: the descriptor works, unshielded.
    fd
}

/// A descriptor of the library's (a `File`, an `OwnedFd`), moved high and
/// shielded while it lives; dropping it disowns, then closes it.
pub struct Owned<T: AsRawFd>(T);

impl<T: AsRawFd + IntoRawFd + FromRawFd> Owned<T> {
    pub fn new(t: T) -> Self {
        let fd = own(t.into_raw_fd());
        // SAFETY: `own` returned the descriptor `t` gave up, possibly moved
        // to a new number; nothing else owns it.
        Owned(unsafe { T::from_raw_fd(fd) })
    }
}

impl<T: AsRawFd + FromRawFd> FromRawFd for Owned<T> {
    /// Straight from a raw descriptor, for types whose `into_raw_fd` cannot
    /// be trusted (userfaultfd's `Uffd` closes the descriptor it returns).
    unsafe fn from_raw_fd(fd: RawFd) -> Self {
        // SAFETY: the caller hands over `fd`; `own` returns it, possibly
        // moved to a new number, still owned by nothing else.
        Owned(unsafe { T::from_raw_fd(own(fd)) })
    }
}

impl<T: AsRawFd> std::ops::Deref for Owned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: AsRawFd> AsRawFd for Owned<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl<T: AsRawFd> Drop for Owned<T> {
    fn drop(&mut self) {
        // `self.0` closes after this.
        disown(self.0.as_raw_fd());
    }
}

/// A close-on-exec eventfd of the library's (`flags` besides
/// `EFD_CLOEXEC`, e.g. `EFD_NONBLOCK`).
pub fn eventfd(flags: libc::c_int) -> std::io::Result<Owned<std::os::fd::OwnedFd>> {
    // SAFETY: eventfd takes only an initial value and flags.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { Owned::from_raw_fd(fd) })
}

/// Forget `fd` before the library closes it.
fn disown(fd: RawFd) {
    for slot in &FD {
        if slot.compare_exchange(fd, FREE, AcqRel, Relaxed).is_ok() {
            return;
        }
    }
}

/// Whether `fd` is one of the library's own descriptors.
pub fn is_owned(fd: RawFd) -> bool {
    if fd < 0 {
        return false;
    }
    for i in 0..SLOTS {
        if FD[i].load(Acquire) == fd {
            let want = (DEV[i].load(Relaxed), INO[i].load(Relaxed));
            return identity(fd) == Some(want);
        }
    }
    false
}

/// In a forked child whose instance is abandoned (its threads were the
/// parent's): disown and close every descriptor of the library's. Its
/// `Owned` values are leaked with the instance and never drop, so nothing
/// closes them twice; the parent's copies are not affected (a userfaultfd
/// registers ranges of the process that registered them, and the child's
/// are not among them).
pub fn close_all_in_child() {
    for slot in &FD {
        let fd = slot.load(Acquire);
        if fd >= 0 && slot.compare_exchange(fd, FREE, AcqRel, Relaxed).is_ok() {
            // SAFETY: a descriptor the library owned and no longer records;
            // nothing in this process uses it after the fork.
            unsafe { libc::close(fd) };
        }
    }
}

/// The library's descriptors in `first..=last`, ascending (for splitting a
/// `close_range` around them). No allocation: at most `SLOTS` of them.
pub fn owned_in(first: u32, last: u32) -> ([i32; SLOTS], usize) {
    let mut out = [0i32; SLOTS];
    let mut n = 0;
    for slot in &FD {
        let fd = slot.load(Acquire);
        if fd >= 0 && (first..=last).contains(&(fd as u32)) && is_owned(fd) {
            out[n] = fd;
            n += 1;
        }
    }
    out[..n].sort_unstable();
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_descriptors_move_high_and_are_known_by_identity() {
        let e = eventfd(0).unwrap();
        let fd = e.as_raw_fd();
        if let Some(base) = high_base() {
            assert!(fd >= base, "{fd} moved to at least {base}");
        }
        assert!(is_owned(fd));
        let (list, n) = owned_in(0, u32::MAX);
        assert!(list[..n].contains(&fd));
        let (_, none) = owned_in(0, 2);
        assert_eq!(none, 0);
        // Dropped: forgotten, then closed.
        drop(e);
        assert!(!is_owned(fd));
        // SAFETY: F_GETFD only reads flags.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0, "closed");

        // Another file takes the number of one of ours behind our back:
        // not ours. (Every eventfd shares one anonymous inode, so only a
        // file of another identity shows this.)
        let path = std::env::temp_dir().join(format!("uzswap-fds-{}", std::process::id()));
        let mine = Owned::new(std::fs::File::create(&path).unwrap());
        let other = std::fs::File::open("/dev/null").unwrap();
        let fd = mine.as_raw_fd();
        assert!(is_owned(fd));
        // SAFETY: both are open; dup2 replaces `fd` with `other`'s file.
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
        assert!(!is_owned(fd), "a different file at our number");
        drop(mine);
        let _ = std::fs::remove_file(&path);
        assert!(!is_owned(-1));
    }
}
