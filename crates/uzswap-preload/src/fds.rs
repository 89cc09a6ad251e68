//! The program's `close`, `close_range`, `closefrom`, `dup2` and `dup3`,
//! kept off the library's own descriptors (`uzswap::swap::fds`).
//!
//! A daemon's `closefrom(3)` or a shell's `exec 3>file` would otherwise
//! close the userfaultfd, and every evicted page would read back as zeros
//! (or, with the swap file's descriptor gone, fail to read back at all).
//! The library's descriptors are not the program's: a `close` of one fails
//! with EBADF, as for any number the program does not have; a range close
//! closes the rest of the range around them; a `dup2` onto one fails with
//! EBUSY (they sit near the top of the usual 1024 limit, far from the
//! numbers programs pick). The library disowns a descriptor before it
//! closes it, so its own closes pass through here untouched.
//!
//! Every call is a raw system call: these run before initialisation, in
//! forked children and in signal handlers, and take no locks.

use libc::{c_int, c_uint};
use uzswap::swap::fds;

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local; the pointer is valid for this thread.
    unsafe { *libc::__errno_location() = e };
}

/// # Safety
/// As close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fds::is_owned(fd) {
        set_errno(libc::EBADF);
        return -1;
    }
    // SAFETY: the caller's descriptor, passed on.
    unsafe { libc::syscall(libc::SYS_close, fd) as c_int }
}

/// # Safety
/// As close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    close_range_around(first, last, flags)
}

/// `close_range` on `first..=last` less the library's descriptors: one call
/// per gap between them.
fn close_range_around(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let raw = |a: c_uint, b: c_uint| {
        // SAFETY: close_range takes three integers.
        unsafe { libc::syscall(libc::SYS_close_range, a, b, flags) as c_int }
    };
    if first > last {
        set_errno(libc::EINVAL);
        return -1;
    }
    let (ours, n) = fds::owned_in(first, last);
    let mut from = first;
    for &fd in &ours[..n] {
        let fd = fd as c_uint;
        if fd > from {
            let r = raw(from, fd - 1);
            if r != 0 {
                return r;
            }
        }
        from = fd + 1;
    }
    // Past `last` only where the range ended on one of ours.
    if from > last {
        return 0;
    }
    raw(from, last)
}

/// # Safety
/// As closefrom(3).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    let low = low.max(0) as c_uint;
    if close_range_around(low, c_uint::MAX, 0) == 0 {
        return;
    }
    // No close_range (Linux < 5.9): one by one, up to the soft limit.
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `rl` is valid for the call to fill.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
        rl.rlim_cur.min(1 << 20) as c_uint
    } else {
        1024
    };
    for fd in low..top {
        // SAFETY: closing a number that may not be open is harmless.
        unsafe { close(fd as c_int) };
    }
}

/// # Safety
/// As dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // dup2 onto itself only checks that `old` is open.
        // SAFETY: F_GETFD reads flags only.
        if fds::is_owned(old) || unsafe { libc::fcntl(old, libc::F_GETFD) } < 0 {
            set_errno(libc::EBADF);
            return -1;
        }
        return new;
    }
    // SAFETY: `dup3` with no flags is `dup2` for distinct descriptors.
    unsafe { dup3(old, new, 0) }
}

/// # Safety
/// As dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if fds::is_owned(new) {
        set_errno(libc::EBUSY);
        return -1;
    }
    if fds::is_owned(old) {
        set_errno(libc::EBADF);
        return -1;
    }
    // SAFETY: the caller's descriptors and flags, passed on.
    unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) as c_int }
}
