//! SIGBUS in signal mode (`--handler signal`): a fault is a SIGBUS that
//! uzswap's handler resolves in the faulting thread, so the program must
//! neither replace that handler nor block the signal.
//!
//! - `sigaction(SIGBUS, ...)` and the `signal` family on SIGBUS set and report the
//!   disposition uzswap chains to for every SIGBUS that is not a fault on
//!   its regions (`uzswap::region::swap_chained_sigbus`), never the
//!   kernel's: redis installs its crash reporter on SIGBUS as it starts,
//!   and its first access to an evicted page was reported as a crash;
//! - masks the program blocks (`sigprocmask`, `pthread_sigmask`, a
//!   handler's `sa_mask`) leave SIGBUS out: the kernel ends a process whose
//!   fault raises a SIGBUS that is blocked, and servers commonly block every
//!   signal in their worker threads;
//! - so do the masks a wait applies while it waits (`sigsuspend`, and
//!   `pselect`, `ppoll` and `epoll_pwait` in `buffers`): a handler that
//!   runs during the wait runs under that mask, and "everything but the one
//!   signal waited for" is the usual one.
//!
//! Where uzswap's handler is not installed (block mode, or before it is)
//! every call goes straight to libc. Calls made internally by glibc
//! (`posix_spawn`'s child, which blocks everything before it `exec`s, and
//! `pthread_create`, whose new thread starts with every signal blocked) are
//! not seen. What they touch while SIGBUS is blocked must not be region
//! memory: a new thread reads the global locale's data before it unblocks,
//! so `setlocale` allocates that data from glibc (`crate::setlocale`).

use crate::real;
use libc::{c_int, sigset_t};
type Sigaction = libc::sigaction;

/// `set` with SIGBUS taken out, where a mask that blocks it is being
/// applied while our handler is installed.
///
/// # Safety
/// `set` is null or a valid signal set.
unsafe fn without_sigbus(how: c_int, set: *const sigset_t) -> Option<sigset_t> {
    if set.is_null() || how == libc::SIG_UNBLOCK || !uzswap::region::sigbus_installed() {
        return None;
    }
    // SAFETY: the caller's set.
    let mut s = unsafe { *set };
    // SAFETY: a valid set.
    if unsafe { libc::sigismember(&s, libc::SIGBUS) } != 1 {
        return None;
    }
    // SAFETY: as above.
    unsafe { libc::sigdelset(&mut s, libc::SIGBUS) };
    Some(s)
}

/// # Safety
/// As sigaction(2).
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: c_int,
    act: *const Sigaction,
    old: *mut Sigaction,
) -> c_int {
    if sig == libc::SIGBUS && uzswap::region::sigbus_installed() {
        // SAFETY: the caller's structs, as the call requires.
        let new = (!act.is_null()).then(|| unsafe { *act });
        if let Some(prev) = uzswap::region::swap_chained_sigbus(new.as_ref()) {
            if !old.is_null() {
                // SAFETY: as above.
                unsafe { *old = prev };
            }
            return 0;
        }
    }
    let mut copy;
    let act = if act.is_null() || !uzswap::region::sigbus_installed() {
        act
    } else {
        // SAFETY: the caller's struct.
        copy = unsafe { *act };
        // SAFETY: a valid set.
        unsafe { libc::sigdelset(&mut copy.sa_mask, libc::SIGBUS) };
        &copy as *const Sigaction
    };
    match real::sigaction() {
        // SAFETY: the caller's arguments (the mask maybe without SIGBUS).
        Some(f) => unsafe { f(sig, act, old) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// The `signal` family on SIGBUS while our handler is installed: the
/// chained disposition gets `h` with `flags`; None where it is not ours.
fn chain_handler(sig: c_int, h: libc::sighandler_t, flags: c_int) -> Option<libc::sighandler_t> {
    if sig != libc::SIGBUS || !uzswap::region::sigbus_installed() {
        return None;
    }
    // SAFETY: zeroed is a valid sigaction; the handler and flags set.
    let mut sa: Sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = h;
    sa.sa_flags = flags;
    uzswap::region::swap_chained_sigbus(Some(&sa)).map(|prev| prev.sa_sigaction)
}

macro_rules! signal_fn {
    ($name:ident, $flags:expr, $what:literal) => {
        #[doc = $what]
        ///
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(sig: c_int, h: libc::sighandler_t) -> libc::sighandler_t {
            if let Some(prev) = chain_handler(sig, h, $flags) {
                return prev;
            }
            match real::$name() {
                // SAFETY: the caller's arguments.
                Some(f) => unsafe { f(sig, h) },
                None => libc::SIG_ERR,
            }
        }
    };
}

signal_fn!(
    signal,
    libc::SA_RESTART,
    "signal(2): glibc's, BSD semantics."
);
signal_fn!(bsd_signal, libc::SA_RESTART, "bsd_signal(3).");
// What `signal` compiles to under -std=c99/c11 (System V semantics:
// one-shot, not blocked while it runs).
signal_fn!(
    __sysv_signal,
    libc::SA_RESETHAND | libc::SA_NODEFER,
    "__sysv_signal: `signal` under strict ISO C."
);
signal_fn!(
    sysv_signal,
    libc::SA_RESETHAND | libc::SA_NODEFER,
    "sysv_signal(3)."
);

/// The mask a `sigprocmask`-like call applies: `set`, or its copy in
/// `copy` without SIGBUS.
///
/// # Safety
/// `set` is null or a valid signal set.
unsafe fn applied(
    how: c_int,
    set: *const sigset_t,
    copy: &mut Option<sigset_t>,
) -> *const sigset_t {
    // SAFETY: the caller's set.
    *copy = unsafe { without_sigbus(how, set) };
    copy.as_ref().map_or(set, |s| s as *const sigset_t)
}

/// The mask a wait applies while it waits (`sigsuspend`, `pselect`,
/// `ppoll`, `epoll_pwait`): `set`, or its copy in `copy` without SIGBUS.
///
/// # Safety
/// `set` is null or a valid signal set.
pub(crate) unsafe fn wait_mask(
    set: *const sigset_t,
    copy: &mut Option<sigset_t>,
) -> *const sigset_t {
    // SAFETY: the caller's set.
    unsafe { applied(libc::SIG_SETMASK, set, copy) }
}

/// # Safety
/// As sigsuspend(2).
#[no_mangle]
pub unsafe extern "C" fn sigsuspend(set: *const sigset_t) -> c_int {
    let mut copy = None;
    // SAFETY: the caller's set.
    let set = unsafe { wait_mask(set, &mut copy) };
    match real::sigsuspend() {
        // SAFETY: the caller's set, maybe without SIGBUS.
        Some(f) => unsafe { f(set) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// As sigprocmask(2).
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    let mut copy = None;
    // SAFETY: the caller's set.
    let set = unsafe { applied(how, set, &mut copy) };
    match real::sigprocmask() {
        // SAFETY: the caller's arguments (the set maybe without SIGBUS).
        Some(f) => unsafe { f(how, set, old) },
        None => {
            crate::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// # Safety
/// As pthread_sigmask(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: c_int,
    set: *const sigset_t,
    old: *mut sigset_t,
) -> c_int {
    let mut copy = None;
    // SAFETY: the caller's set.
    let set = unsafe { applied(how, set, &mut copy) };
    match real::pthread_sigmask() {
        // SAFETY: the caller's arguments (the set maybe without SIGBUS).
        Some(f) => unsafe { f(how, set, old) },
        None => libc::ENOSYS,
    }
}
