//! libc's generic `syscall(2)`: the door programs use for the calls glibc
//! has no wrapper for (io_uring, futex, getrandom in older code).
//!
//! Where the kernel's faults are not served (`pin_buffers`: user mode
//! only, signal mode), io_uring cannot work on region memory: the kernel
//! copies into and out of a request's buffers in kernel mode, inside
//! `io_uring_enter` or later on a worker, long after the call that named
//! them, so an evicted page fails the transfer with EFAULT in its
//! completion, and no pin can be placed around a transfer whose time the
//! program does not choose (a program reading a file into its heap through
//! io_uring under a 32 MiB budget: 521 of 586 reads failed). So there
//! `io_uring_setup` fails with ENOSYS, as on a kernel built without
//! io_uring, and a program takes its fallback (libuv, the Rust `io-uring`
//! crate's users and most others test for it, since container runtimes
//! refuse io_uring too). Where faults are served nothing is refused.
//! `getrandom` made through here has its buffer pinned, as the wrapper
//! does. liburing makes its system calls itself, without libc, and is not
//! seen: for it, `uzswap setup` (access to /dev/userfaultfd) is the way
//! (docs/ARCHITECTURE.md).
//!
//! The function is ours for every caller, this library's own raw calls
//! (`real.rs`) included, and may run before anything is set up: it passes
//! a call on with the `syscall` instruction itself (looking up libc's
//! would allocate) and looks at no state for other call numbers.
//! mimalloc seeds its heaps with `getrandom` through here while it sets a
//! thread's heap up: a buffer outside every region passes with the
//! lock-free range check alone, as in the `getrandom` wrapper. Built only
//! for the architectures whose instruction is written out below.

use libc::c_long;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// `io_uring_setup` calls refused (`io_uring_refused` in the figures).
static REFUSED: AtomicU64 = AtomicU64::new(0);

pub(crate) fn refused() -> u64 {
    REFUSED.load(Relaxed)
}

/// `syscall(nr, ...)`. Variadic in C; the arguments are all `long` and the
/// calling convention passes them as it passes these six, read whether
/// the caller passed them or not, as glibc's own `syscall` does.
///
/// # Safety
/// As syscall(2): the call's own requirements.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    nr: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    let _pins = match nr {
        libc::SYS_io_uring_setup if pinning() => {
            REFUSED.fetch_add(1, Relaxed);
            crate::set_errno(libc::ENOSYS);
            return -1;
        }
        libc::SYS_getrandom if crate::vma::in_regions(a as usize) => crate::buffers::Pins::new()
            .map(|mut p| {
                p.add(a as *const libc::c_void, b as usize, true);
                p
            }),
        _ => None,
    };
    // SAFETY: the caller's call, passed on unchanged.
    let r = unsafe { raw(nr, [a, b, c, d, e, f]) };
    if (-4095..0).contains(&r) {
        crate::set_errno(-r as i32);
        return -1;
    }
    r
}

fn pinning() -> bool {
    crate::active().is_some_and(|st| st.pin_buffers)
}

/// The system call `nr` with six arguments; the kernel's return (a
/// negative errno on failure).
///
/// # Safety
/// As the call's own.
#[cfg(target_arch = "x86_64")]
unsafe fn raw(nr: c_long, a: [c_long; 6]) -> c_long {
    let r;
    // SAFETY: the kernel's calling convention: rcx and r11 are clobbered,
    // memory may be read and written (no `nomem`), the stack is untouched.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => r,
            in("rdi") a[0],
            in("rsi") a[1],
            in("rdx") a[2],
            in("r10") a[3],
            in("r8") a[4],
            in("r9") a[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    r
}

#[cfg(target_arch = "aarch64")]
unsafe fn raw(nr: c_long, a: [c_long; 6]) -> c_long {
    let r;
    // SAFETY: the kernel's calling convention: x8 the number, x0-x5 the
    // arguments, x0 the result.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") a[0] => r,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            in("x5") a[5],
            options(nostack),
        );
    }
    r
}
