//! libc's generic `syscall(2)`: the door programs use for the calls glibc
//! has no wrapper for (io_uring, Linux AIO, futex, getrandom in older
//! code).
//!
//! io_uring and Linux AIO are refused (`io_uring_setup`, `io_setup` fail
//! with ENOSYS, as on a kernel built without them): the kernel transfers a
//! request's data at a time the program does not choose, after the call
//! that named the buffers returned, and no pin can be placed around it.
//! Where the kernel's faults are not served (user mode only, signal mode)
//! its copies into an evicted buffer fail with EFAULT in the completion (a
//! program reading a file into its heap through a ring under a 32 MiB
//! budget: 521 of 586 reads failed). Where they are served, an `O_DIRECT`
//! request has the device write the buffer's pages by DMA, bypassing the
//! page tables: an eviction meanwhile stored the page's old bytes and
//! unmapped it, and the data went to a page no longer mapped (0.7% of 64
//! KiB direct reads through a ring into a heap under pressure came back
//! with the buffer's old bytes, silently); the kernel's own reclaim passes
//! over such pinned pages, and userspace cannot see the pin. Registered
//! (fixed) buffers are copied the same way. Programs take their fallback
//! (libuv, the Rust `io-uring` crate's users, InnoDB's simulated AIO and
//! most others test for it, since container runtimes refuse io_uring
//! too), whose calls the library sees and pins (`buffers.rs`).
//! `getrandom` made through here has its buffer pinned, as the wrapper
//! does, and a `futex` call its words in region memory (`waits.rs`: the
//! kernel reads them inside the call, and EFAULT from a wait is fatal to
//! some of its callers). `madvise`, `munmap`, `mprotect`, `mremap` and a `MAP_FIXED`
//! `mmap` that touch region memory go to their wrappers (`vma.rs`), as
//! the same calls made through libc do; the library's own calls to the
//! kernel go past this function (`direct`).
//!
//! liburing makes its system calls itself, without libc, and passes no
//! wrapper. So where the process may (it has `CAP_SYS_ADMIN`: root, the
//! runner's default) the same refusal is also put in the kernel, as a
//! seccomp filter on every thread ([`refuse_in_kernel`]): two comparisons
//! per system call. An unprivileged process could only install one after
//! `PR_SET_NO_NEW_PRIVS`, which would take setuid from every program it
//! starts, and does not: there liburing is not seen (docs/ARCHITECTURE.md).
//! The filter outlives `exec`, also into a program started with
//! `--no-inherit`, which then sees a kernel without io_uring too.
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

/// `io_uring_setup` and `io_setup` calls refused (`io_uring_refused` in
/// the figures).
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
    // The words a futex call has the kernel read or write (`waits.rs`, and
    // its cap: a parked thread sleeps here): Rust's std, abseil and
    // libstdc++ wait through here, and some of them take EFAULT for a
    // fatal error.
    let _words = (nr == libc::SYS_futex)
        .then(|| futex_words(a, b as i32, e))
        .flatten();
    let _pins = match nr {
        // A fork made by system call runs no fork handler, and its child
        // read every evicted page as zeros: glibc's fork instead, which
        // runs uzswap's (and the program's: they are meant for every fork).
        // clone(2) with only SIGCHLD and no new stack is that fork too.
        #[cfg(target_arch = "x86_64")]
        libc::SYS_fork if crate::active().is_some() => {
            // SAFETY: as fork(2).
            return unsafe { crate::fork::fork() }.into();
        }
        libc::SYS_clone if a == libc::SIGCHLD as c_long && b == 0 && crate::active().is_some() => {
            // SAFETY: as fork(2).
            return unsafe { crate::fork::fork() }.into();
        }
        // Other copies of the address space whose child goes on from the
        // call (no new stack: a child on one could not return through
        // this function): every evicted page brought in first, the child
        // detached (`fork.rs`, "Copies of the process").
        libc::SYS_clone if b == 0 => {
            return finish(crate::fork::by_syscall(a as u64, || {
                // SAFETY: the caller's call, passed on unchanged.
                unsafe { raw(nr, [a, b, c, d, e, f]) }
            }));
        }
        libc::SYS_clone3 => {
            // SAFETY: the caller's pointer and size, read only if readable.
            if let Some(flags) = unsafe { clone3_flags_without_stack(a, b) } {
                return finish(crate::fork::by_syscall(flags, || {
                    // SAFETY: the caller's call, passed on unchanged.
                    unsafe { raw(nr, [a, b, c, d, e, f]) }
                }));
            }
            None
        }
        // The kernel reads the path and vectors inside the call: the pieces
        // in region memory go in copies (`exec.rs`).
        libc::SYS_execve | libc::SYS_execveat => {
            return finish(crate::exec::by_syscall(nr, [a, b, c, d, e, f], |v| {
                // SAFETY: the caller's call, its pieces copied where needed.
                unsafe { raw(nr, v) }
            }));
        }
        libc::SYS_io_uring_setup | libc::SYS_io_setup if crate::active().is_some() => {
            REFUSED.fetch_add(1, Relaxed);
            crate::set_errno(libc::ENOSYS);
            return -1;
        }
        // The memory calls, where they touch region memory: the wrappers,
        // as for the same calls made through libc. Made past them, an
        // unmap or a fixed mapping left the regions' bookkeeping behind
        // the kernel's, and a drop read back old data. New mappings made
        // here stay outside the regions, as before: this door is also the
        // library's own for its threads' stacks, which must never be
        // region memory.
        libc::SYS_madvise | libc::SYS_munmap | libc::SYS_mprotect if touches_regions(a, b) => {
            let (p, len) = (a as *mut libc::c_void, b as usize);
            // SAFETY: the caller's call, made through the wrapper of the
            // same name.
            return unsafe {
                match nr {
                    libc::SYS_madvise => crate::vma::madvise(p, len, c as i32),
                    libc::SYS_munmap => crate::vma::munmap(p, len),
                    _ => crate::vma::mprotect(p, len, c as i32),
                }
            }
            .into();
        }
        libc::SYS_mremap
            if touches_regions(a, b)
                || (d as i32 & libc::MREMAP_FIXED != 0 && touches_regions(e, c)) =>
        {
            // SAFETY: as above.
            return unsafe {
                crate::vma::mremap(
                    a as *mut libc::c_void,
                    b as usize,
                    c as usize,
                    d as i32,
                    e as *mut libc::c_void,
                )
            } as c_long;
        }
        libc::SYS_mmap if d as i32 & libc::MAP_FIXED != 0 && touches_regions(a, b) => {
            // SAFETY: as above.
            return unsafe {
                crate::vma::mmap(
                    a as *mut libc::c_void,
                    b as usize,
                    c as i32,
                    d as i32,
                    e as i32,
                    f as libc::off_t,
                )
            } as c_long;
        }
        libc::SYS_getrandom if crate::vma::in_regions(a as usize) => crate::buffers::Pins::new()
            .map(|mut p| {
                p.add(a as *const libc::c_void, b as usize, true);
                p
            }),
        _ => None,
    };
    // SAFETY: the caller's call, passed on unchanged.
    finish(unsafe { raw(nr, [a, b, c, d, e, f]) })
}

/// Pins for the futex words of `futex(uaddr, op, _, _, uaddr2)` in region
/// memory, where the call has the kernel read or write them: every
/// operation but a plain wake (which only hashes the address) reads
/// `uaddr`; the requeues and `FUTEX_WAKE_OP` touch `uaddr2` too.
fn futex_words(uaddr: c_long, op: i32, uaddr2: c_long) -> Option<crate::waits::Held> {
    const WORD: usize = std::mem::size_of::<u32>();
    let cmd = op & libc::FUTEX_CMD_MASK;
    if matches!(cmd, libc::FUTEX_WAKE | libc::FUTEX_WAKE_BITSET) {
        return None;
    }
    let second = matches!(
        cmd,
        libc::FUTEX_REQUEUE
            | libc::FUTEX_CMP_REQUEUE
            | libc::FUTEX_WAKE_OP
            | libc::FUTEX_WAIT_REQUEUE_PI
            | libc::FUTEX_CMP_REQUEUE_PI
    );
    let words = [
        (uaddr as *const libc::c_void, WORD),
        (uaddr2 as *const libc::c_void, WORD),
    ];
    crate::waits::hold(&words[..1 + second as usize])
}

/// Whether `len` bytes at `addr` overlap region memory.
fn touches_regions(addr: c_long, len: c_long) -> bool {
    let s = addr as usize;
    len > 0 && crate::vma::overlaps_regions(s, s.saturating_add(len as usize))
}

/// A system call made by this library itself, past the exported
/// `syscall`, which sends the memory calls on region memory to their
/// wrappers: the wrappers' own calls to the kernel (`real.rs`) must not
/// come back to them. libc's convention: -1 with errno set for an error.
///
/// # Safety
/// As the call `nr`.
pub(crate) unsafe fn direct(nr: c_long, a: [c_long; 6]) -> c_long {
    // SAFETY: the caller's.
    finish(unsafe { raw(nr, a) })
}

/// The kernel's return `r` as `syscall(2)` returns it: -1 with errno set
/// for an error.
fn finish(r: c_long) -> c_long {
    if (-4095..0).contains(&r) {
        crate::set_errno(-r as i32);
        return -1;
    }
    r
}

/// The flags of `clone3(args, size)` where its child goes on from the call
/// (`args.stack` 0); None where it gets a stack of its own, or the
/// arguments cannot be read here (the kernel then says why).
///
/// # Safety
/// `args` is the caller's pointer; it is read only if mapped readable.
unsafe fn clone3_flags_without_stack(args: c_long, size: c_long) -> Option<u64> {
    // `struct clone_args` as of Linux 5.3: flags, pidfd, child_tid,
    // parent_tid, exit_signal, stack, stack_size, tls.
    let mut words = [0u64; 8];
    if (size as usize) < std::mem::size_of_val(&words) || args == 0 || args % 8 != 0 {
        return None;
    }
    let at = args as usize;
    if crate::vma::overlaps_regions(at, at + std::mem::size_of_val(&words)) {
        // Region memory is mapped (an evicted page is brought in by the
        // load), where a read by the kernel would fail with EFAULT on an
        // evicted page in user mode only. The preparation then brings every
        // evicted page in before the call reads the arguments again.
        // SAFETY: mapped and aligned, as checked.
        words = unsafe { std::ptr::read_volatile(args as *const [u64; 8]) };
        return (words[5] == 0).then_some(words[0]);
    }
    // Elsewhere read through the kernel, which fails cleanly on a bad
    // pointer where a load would end the process.
    let local = libc::iovec {
        iov_base: words.as_mut_ptr().cast(),
        iov_len: std::mem::size_of_val(&words),
    };
    let remote = libc::iovec {
        iov_base: args as *mut libc::c_void,
        iov_len: local.iov_len,
    };
    // SAFETY: one local buffer of the length given; the remote range is
    // only read, by the kernel.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (n == local.iov_len as isize && words[5] == 0).then_some(words[0])
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

/// The architecture seccomp reports for this process's system calls.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// Whether the kernel already refuses `nr` (a filter of an ancestor's, or
/// a kernel without it): asked with arguments it would reject anyway.
fn refused_already(nr: c_long) -> bool {
    // SAFETY: both calls with zero arguments fail without touching memory
    // (io_uring_setup: no entries; io_setup: no events).
    unsafe { raw(nr, [0; 6]) == -(libc::ENOSYS as c_long) }
}

/// Refuse io_uring and Linux AIO in the kernel too, for every thread of the
/// process and what it starts, where the process may install a seccomp
/// filter without `PR_SET_NO_NEW_PRIVS`. Whether it is in place.
pub(crate) fn refuse_in_kernel() -> bool {
    let nrs = [libc::SYS_io_uring_setup, libc::SYS_io_setup];
    if nrs.iter().all(|&nr| refused_already(nr)) {
        return true;
    }
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    // struct seccomp_data: nr at 0, arch at 4.
    let mut prog = [
        stmt(ld, 4),
        jeq(AUDIT_ARCH, 0, 3),
        stmt(ld, 0),
        jeq(nrs[0] as u32, 2, 0),
        jeq(nrs[1] as u32, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: a filter of our own, read by the kernel during the call.
    let r = unsafe {
        raw(
            libc::SYS_seccomp,
            [
                libc::SECCOMP_SET_MODE_FILTER as c_long,
                // Every thread; and leave the program's speculation
                // mitigations as they were (a filter turns on the store
                // bypass one where the kernel's default is `seccomp`).
                (libc::SECCOMP_FILTER_FLAG_TSYNC | libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW) as c_long,
                &fprog as *const libc::sock_fprog as c_long,
                0,
                0,
                0,
            ],
        )
    };
    r == 0
}
