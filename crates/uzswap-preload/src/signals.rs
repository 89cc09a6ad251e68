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
//! - the SIGBUS handler runs on an alternate stack of uzswap's in every
//!   program thread (`uzswap::region::use_alt_stacks`): a fault taken on a
//!   stack the program carved from its heap (a coroutine's) could not have
//!   its frame written there. The program's `sigaltstack` is kept apart
//!   (`sigaltstack` below): it sees and sets its own, and its handlers run
//!   on ours, which is larger than any it would set;
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

/// Run `wait` with the mask a wait applies while it waits (`sigsuspend`,
/// `pselect`, `ppoll`, `epoll_pwait`): `set`, or a copy without SIGBUS.
///
/// # Safety
/// `set` is null or a valid signal set.
pub(crate) unsafe fn with_wait_mask<R>(
    set: *const sigset_t,
    wait: impl FnOnce(*const sigset_t) -> R,
) -> R {
    let mut copy = None;
    // SAFETY: the caller's set.
    wait(unsafe { applied(libc::SIG_SETMASK, set, &mut copy) })
}

/// The masks the kernel reads (`set`) and writes (`old`) inside the call,
/// pinned where its faults are not served (a mask in the heap, evicted,
/// failed the call with EFAULT).
fn pin_masks(set: *const sigset_t, old: *mut sigset_t) -> Option<crate::buffers::Pins> {
    let mut p = crate::buffers::Pins::new()?;
    let n = std::mem::size_of::<sigset_t>();
    p.add(set.cast(), n, false);
    p.add(old.cast_const().cast(), n, true);
    Some(p)
}

/// # Safety
/// As sigsuspend(2).
#[no_mangle]
pub unsafe extern "C" fn sigsuspend(set: *const sigset_t) -> c_int {
    let _pins = pin_masks(set, std::ptr::null_mut());
    match real::sigsuspend() {
        // SAFETY: the caller's set, maybe without SIGBUS.
        Some(f) => unsafe { with_wait_mask(set, |m| f(m)) },
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
    let _pins = pin_masks(set, old);
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
    let _pins = pin_masks(set, old);
    let mut copy = None;
    // SAFETY: the caller's set.
    let set = unsafe { applied(how, set, &mut copy) };
    match real::pthread_sigmask() {
        // SAFETY: the caller's arguments (the set maybe without SIGBUS).
        Some(f) => unsafe { f(how, set, old) },
        None => libc::ENOSYS,
    }
}

/// Linux's `SS_AUTODISARM` (`<asm/signal.h>`; the libc crate lacks it).
const SS_AUTODISARM: c_int = 1 << 31;

/// The program thread's alternate signal stacks: uzswap's (mapped by
/// `give_alt_stack`, the one the kernel uses) and the one the program
/// believes it set (`sigaltstack`).
struct AltStacks {
    /// uzswap's mapping (base, length); zero length: none on this thread.
    ours: std::cell::Cell<(usize, usize)>,
    /// The program's stack: (sp, size, flags); `SS_DISABLE` when unset.
    program: std::cell::Cell<(usize, usize, c_int)>,
}

thread_local! {
    static ALT: AltStacks = const {
        AltStacks {
            ours: std::cell::Cell::new((0, 0)),
            program: std::cell::Cell::new((0, 0, libc::SS_DISABLE)),
        }
    };
}

/// Give the calling program thread an alternate stack of uzswap's, where
/// SIGBUS is uzswap's; the key's destructor takes it back as the thread
/// exits (`take_alt_stack`).
pub(crate) fn give_alt_stack() {
    if ALT.with(|a| a.ours.get().1 != 0) {
        return;
    }
    // What the thread had (a program linked with Rust's runtime sets one up
    // before main) becomes the program's own.
    // SAFETY: zeroed is a valid stack_t (null, disabled flags aside).
    let mut had: libc::stack_t = unsafe { std::mem::zeroed() };
    if let Some(f) = real::sigaltstack() {
        // SAFETY: a query into our own stack_t.
        let queried = unsafe { f(std::ptr::null(), &mut had) } == 0;
        if queried && had.ss_flags & libc::SS_DISABLE == 0 {
            ALT.with(|a| a.program.set((had.ss_sp as usize, had.ss_size, 0)));
        }
    }
    match uzswap::region::alt_stack() {
        Ok(m) => ALT.with(|a| a.ours.set(m)),
        Err(e) => {
            let line = format!("uzswap: no alternate signal stack for a thread: {e}\n");
            // SAFETY: our own buffer to stderr.
            unsafe { libc::write(2, line.as_ptr() as *const _, line.len()) };
        }
    }
}

/// Take back the calling thread's stack of uzswap's (thread exit).
pub(crate) fn take_alt_stack() {
    let Ok((base, len)) = ALT.try_with(|a| a.ours.replace((0, 0))) else {
        return;
    };
    if len != 0 {
        uzswap::region::drop_alt_stack(base, len);
    }
}

/// # Safety
/// As sigaltstack(2).
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> c_int {
    let Some(f) = real::sigaltstack() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    let ours = ALT.try_with(|a| a.ours.get().1 != 0).unwrap_or(false);
    if !ours {
        // SAFETY: the caller's arguments.
        return unsafe { f(ss, old) };
    }
    // Whether the thread runs on an alternate stack now (ours, where the
    // program's handlers run): the kernel's answer.
    // SAFETY: zeroed is a valid stack_t.
    let mut now: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: a query into our own stack_t.
    let on_it =
        unsafe { f(std::ptr::null(), &mut now) } == 0 && now.ss_flags & libc::SS_ONSTACK != 0;
    if !ss.is_null() && on_it {
        crate::set_errno(libc::EPERM);
        return -1;
    }
    let (sp, size, flags) = ALT.with(|a| a.program.get());
    if !ss.is_null() {
        // SAFETY: the caller's stack_t.
        let new = unsafe { *ss };
        if new.ss_flags & !(libc::SS_DISABLE | SS_AUTODISARM) != 0 {
            crate::set_errno(libc::EINVAL);
            return -1;
        }
        if new.ss_flags & libc::SS_DISABLE != 0 {
            ALT.with(|a| a.program.set((0, 0, libc::SS_DISABLE)));
        } else if new.ss_size < libc::MINSIGSTKSZ {
            crate::set_errno(libc::ENOMEM);
            return -1;
        } else {
            ALT.with(|a| {
                a.program
                    .set((new.ss_sp as usize, new.ss_size, new.ss_flags))
            });
        }
    }
    if !old.is_null() {
        // SAFETY: the caller's stack_t.
        unsafe {
            (*old).ss_sp = sp as *mut _;
            (*old).ss_size = size;
            (*old).ss_flags = flags | if on_it { libc::SS_ONSTACK } else { 0 };
        }
    }
    0
}
