//! Starting a new image: `execve` and its family.
//!
//! The kernel reads the path, the argument and environment vectors and
//! their strings inside the system call. Where it does not hand us the
//! faults it takes there (user mode only, signal mode: `buffers.rs`), one
//! of them in an evicted page failed the call with EFAULT, and the program
//! could not start another: `environ` and its strings are heap memory once
//! the program has called `setenv`, and a vector built long before the
//! call sits in pages the evictor took since (`exec_args.c`: 64 variables
//! set, then 64 MiB written under a 16 MiB budget; every `execve` failed,
//! in the process and in a forked child).
//!
//! A pin around the call, as the other wrappers place, would not do: in a
//! `vfork` child, which shares the parent's memory and instance until it
//! execs, a successful exec never returns to drop it, and the parent would
//! hold those chunks pinned for good. So the pieces that lie in region
//! memory are copied, by reads in the program (whose faults are served),
//! to memory outside the regions, which is never evicted, and the call is
//! given the copies; the kernel reads the same bytes. The copy goes in a
//! mapping of its own, unmapped when the call returns (it returns only on
//! failure; a success leaves the image it was in). In a `vfork` child such
//! a mapping would outlive a successful exec in the parent, so there the
//! copy goes on the stack, up to [`STACK_COPY`] bytes; past that (or where
//! no mapping can be made) the pieces are read in place just before the
//! call, which brings them in, and only an eviction in the microseconds
//! between could still fail it.
//!
//! Where the kernel's faults are served, or the process is not under
//! uzswap (a detached child), every call passes straight on.
//!
//! `execl`, `execlp` and `execle` take their arguments as C varargs, which
//! a Rust function cannot define: on x86-64 each is a naked entry that
//! saves the register arguments and hands them, with the caller's stack
//! arguments, to [`exec_list`], which collects them as glibc's own would
//! and calls the wrappers here. Elsewhere they are not interposed.
//!
//! Locking: none; region membership is the lock-free range check.

use crate::real;
use libc::{c_char, c_int};

type Str = *const c_char;
type Argv = *const Str;

extern "C" {
    static environ: Argv;
}

/// Most bytes copied on the stack of a `vfork` child.
const STACK_COPY: usize = 32 << 10;

/// An exec's path and vectors.
#[derive(Clone, Copy)]
struct Args {
    path: Str,
    argv: Argv,
    envp: Argv,
}

/// Entries of a NULL-terminated vector (0 for a NULL vector, which Linux
/// takes as empty).
///
/// # Safety
/// `v` is NULL or a NULL-terminated vector.
unsafe fn entries(v: Argv) -> usize {
    if v.is_null() {
        return 0;
    }
    let mut n = 0;
    // SAFETY: NULL-terminated, as the caller's call requires.
    while !unsafe { *v.add(n) }.is_null() {
        n += 1;
    }
    n
}

/// The length with its NUL of string `s` if it lies (in part) in region
/// memory; None for NULL or a string elsewhere.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn in_regions(s: Str) -> Option<usize> {
    if s.is_null() {
        return None;
    }
    // SAFETY: NUL-terminated, as the caller's call requires.
    let len = unsafe { libc::strlen(s) } + 1;
    crate::vma::overlaps_regions(s as usize, s as usize + len).then_some(len)
}

/// What copying an exec's arguments out of the regions takes: the vectors'
/// entries (read once: a copy never writes past what was counted) and the
/// bytes of the new vectors and of the strings in region memory.
#[derive(Clone, Copy)]
struct Plan {
    argc: usize,
    envc: usize,
    bytes: usize,
}

/// The copy `a` needs; None where nothing of it lies in region memory.
/// Reads every piece (a fault on one brings it in).
///
/// # Safety
/// As the exec call's own arguments.
unsafe fn plan(a: Args) -> Option<Plan> {
    // SAFETY: the caller's path and vectors, NULL-terminated, as the exec
    // call requires them.
    unsafe {
        let (argc, envc) = (entries(a.argv), entries(a.envp));
        let word = std::mem::size_of::<Str>();
        let vector = |v: Argv, n: usize| {
            !v.is_null() && crate::vma::overlaps_regions(v as usize, v as usize + (n + 1) * word)
        };
        let mut any = vector(a.argv, argc) || vector(a.envp, envc);
        let mut bytes = (argc + 1 + envc + 1) * word;
        let strings = (0..argc)
            .map(|i| *a.argv.add(i))
            .chain((0..envc).map(|i| *a.envp.add(i)))
            .chain(std::iter::once(a.path));
        for s in strings {
            if let Some(len) = in_regions(s) {
                any = true;
                bytes += len;
            }
        }
        any.then_some(Plan { argc, envc, bytes })
    }
}

/// `a` with its vectors rebuilt in `buf` (`p.bytes`, pointer-aligned) and
/// every string in region memory copied there. A string grown since `p`
/// was made (another thread writing it) is passed as it is rather than
/// copied past the buffer.
///
/// # Safety
/// As [`plan`]; `buf` is writable for `p.bytes` bytes.
unsafe fn copy_into(a: Args, p: Plan, buf: *mut u8) -> Args {
    // SAFETY: the caller's path and vectors, read no further than `p`
    // counted, and a buffer of `p.bytes`: the new vectors first, then the
    // strings, each copied only if it fits.
    unsafe {
        let end = buf.add(p.bytes);
        let argv = buf as *mut Str;
        let envp = argv.add(p.argc + 1);
        let mut next = envp.add(p.envc + 1) as *mut u8;
        let mut copy = |s: Str| -> Str {
            match in_regions(s) {
                Some(len) if len <= end.offset_from(next) as usize => {
                    std::ptr::copy_nonoverlapping(s as *const u8, next, len);
                    let c = next as Str;
                    next = next.add(len);
                    c
                }
                _ => s,
            }
        };
        for i in 0..p.argc {
            *argv.add(i) = copy(*a.argv.add(i));
        }
        *argv.add(p.argc) = std::ptr::null();
        for i in 0..p.envc {
            *envp.add(i) = copy(*a.envp.add(i));
        }
        *envp.add(p.envc) = std::ptr::null();
        Args {
            path: copy(a.path),
            argv: if a.argv.is_null() { a.argv } else { argv },
            envp: if a.envp.is_null() { a.envp } else { envp },
        }
    }
}

/// Call `exec` with `a`, or with a copy of it out of the regions where the
/// kernel's reads of region memory could fail. Returns what `exec` returns
/// (an exec returns only on failure), errno as it left it.
///
/// # Safety
/// As the exec call's own arguments.
unsafe fn with_args<R>(a: Args, exec: impl FnOnce(Args) -> R) -> R {
    let Some(st) = crate::active().filter(|st| st.pin_buffers) else {
        return exec(a);
    };
    // SAFETY: the caller's arguments; `plan` reads (and so brings in)
    // every piece, which is what the fallbacks below rely on.
    let Some(p) = (unsafe { plan(a) }) else {
        return exec(a);
    };
    // SAFETY: getpid has no preconditions.
    if st.pid != unsafe { libc::getpid() } {
        // A `vfork` child: nothing it maps may outlive its exec. Past the
        // stack's copy, the pieces were just read in place by `plan`.
        return if p.bytes <= STACK_COPY {
            on_stack(a, p, exec)
        } else {
            exec(a)
        };
    }
    let len = p.bytes.next_multiple_of(4096);
    // SAFETY: a new private anonymous mapping (a raw call: not a region).
    let m = unsafe {
        real::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if m == libc::MAP_FAILED {
        return exec(a);
    }
    // SAFETY: the mapping holds `p.bytes` bytes, page-aligned.
    let r = exec(unsafe { copy_into(a, p, m as *mut u8) });
    let e = crate::errno();
    // SAFETY: the mapping made above, unused once the call returned.
    unsafe { real::munmap(m, len) };
    crate::set_errno(e);
    r
}

/// [`with_args`]'s copy on this thread's stack (at most [`STACK_COPY`]).
#[inline(never)]
fn on_stack<R>(a: Args, p: Plan, exec: impl FnOnce(Args) -> R) -> R {
    let mut buf = [0u64; STACK_COPY / 8];
    // SAFETY: the caller checked that the copy fits; u64s are aligned for
    // pointers.
    exec(unsafe { copy_into(a, p, buf.as_mut_ptr() as *mut u8) })
}

/// errno ENOSYS and -1, where libc lacks the function.
fn missing() -> c_int {
    crate::set_errno(libc::ENOSYS);
    -1
}

/// # Safety
/// As execve(2).
#[no_mangle]
pub unsafe extern "C" fn execve(path: Str, argv: Argv, envp: Argv) -> c_int {
    let a = Args { path, argv, envp };
    // SAFETY: the caller's call, with its pieces copied where needed.
    unsafe {
        with_args(a, |a| match real::execve() {
            Some(f) => f(a.path, a.argv, a.envp),
            None => missing(),
        })
    }
}

/// # Safety
/// As execv(3).
#[no_mangle]
pub unsafe extern "C" fn execv(path: Str, argv: Argv) -> c_int {
    // SAFETY: glibc's execv is execve with the process's environment.
    unsafe { execve(path, argv, environ) }
}

/// # Safety
/// As execvpe(3).
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: Str, argv: Argv, envp: Argv) -> c_int {
    let a = Args {
        path: file,
        argv,
        envp,
    };
    // SAFETY: as `execve`; the search of PATH reads only the copies and
    // the environment's PATH (read by libc in the program).
    unsafe {
        with_args(a, |a| match real::execvpe() {
            Some(f) => f(a.path, a.argv, a.envp),
            None => missing(),
        })
    }
}

/// # Safety
/// As execvp(3).
#[no_mangle]
pub unsafe extern "C" fn execvp(file: Str, argv: Argv) -> c_int {
    // SAFETY: glibc's execvp is execvpe with the process's environment.
    unsafe { execvpe(file, argv, environ) }
}

/// # Safety
/// As fexecve(3).
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    let a = Args {
        path: std::ptr::null(),
        argv,
        envp,
    };
    // SAFETY: as `execve`.
    unsafe {
        with_args(a, |a| match real::fexecve() {
            Some(f) => f(fd, a.argv, a.envp),
            None => missing(),
        })
    }
}

/// # Safety
/// As execveat(2).
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: Str,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    let a = Args { path, argv, envp };
    // SAFETY: as `execve`.
    unsafe {
        with_args(a, |a| match real::execveat() {
            Some(f) => f(dirfd, a.path, a.argv, a.envp, flags),
            None => missing(),
        })
    }
}

/// `execve` or `execveat` made through `syscall(2)` (`nr`, its six
/// arguments): the kernel's return, a negative errno on failure.
pub(crate) fn by_syscall(
    nr: libc::c_long,
    args: [libc::c_long; 6],
    raw: impl Fn([libc::c_long; 6]) -> libc::c_long,
) -> libc::c_long {
    // execve(path, argv, envp); execveat(dirfd, path, argv, envp, flags).
    let at = usize::from(nr == libc::SYS_execveat);
    let a = Args {
        path: args[at] as Str,
        argv: args[at + 1] as Argv,
        envp: args[at + 2] as Argv,
    };
    // SAFETY: the caller's call, with its pieces copied where needed.
    unsafe {
        with_args(a, |a| {
            let mut v = args;
            v[at] = a.path as libc::c_long;
            v[at + 1] = a.argv as libc::c_long;
            v[at + 2] = a.envp as libc::c_long;
            raw(v)
        })
    }
}

// ---------------------------------------------------------------------------
// execl, execlp, execle
// ---------------------------------------------------------------------------

const EXECL: u32 = 0;
const EXECLP: u32 = 1;
const EXECLE: u32 = 2;

/// The list form's arguments after `path`: the first five passed in
/// registers (`regs`), the rest on the caller's stack (`stack`), up to and
/// including the NULL that ends them (and for `execle` the environment
/// after it), as C's varargs read them on x86-64.
///
/// # Safety
/// Called only by the entries below, with the caller's arguments.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn exec_list(path: Str, regs: *const Str, stack: *const Str, kind: u32) -> c_int {
    // SAFETY: the arguments the caller passed, read in order and no
    // further than its NULL (and `execle`'s environment after it).
    unsafe {
        let arg = |i: usize| {
            if i < 5 {
                *regs.add(i)
            } else {
                *stack.add(i - 5)
            }
        };
        let mut n = 0;
        while !arg(n).is_null() {
            n += 1;
        }
        let envp = if kind == EXECLE {
            arg(n + 1) as Argv
        } else {
            environ
        };
        // glibc's own list forms build the vector on the stack; a long one
        // here goes to the heap.
        let mut small = [std::ptr::null::<c_char>(); 64];
        let mut large = Vec::new();
        let argv: &mut [Str] = if n < small.len() {
            &mut small[..=n]
        } else {
            large.resize(n + 1, std::ptr::null());
            &mut large
        };
        for (i, p) in argv.iter_mut().take(n).enumerate() {
            *p = arg(i);
        }
        match kind {
            EXECLP => execvpe(path, argv.as_ptr(), envp),
            _ => execve(path, argv.as_ptr(), envp),
        }
    }
}

/// A naked entry for a list form: saves the five register arguments after
/// `path` and calls [`exec_list`] with them, the caller's stack arguments
/// and the form's kind.
#[cfg(target_arch = "x86_64")]
macro_rules! list_entry {
    ($name:ident, $kind:expr) => {
        /// # Safety
        /// As the C library's function of this name.
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name() {
            std::arch::naked_asm!(
                "push rbp",
                "mov rbp, rsp",
                "sub rsp, 48",
                "mov [rsp], rsi",
                "mov [rsp + 8], rdx",
                "mov [rsp + 16], rcx",
                "mov [rsp + 24], r8",
                "mov [rsp + 32], r9",
                "mov rsi, rsp",
                "lea rdx, [rbp + 16]",
                "mov ecx, {kind}",
                "call {list}",
                "leave",
                "ret",
                kind = const $kind,
                list = sym exec_list,
            )
        }
    };
}

#[cfg(target_arch = "x86_64")]
list_entry!(execl, EXECL);
#[cfg(target_arch = "x86_64")]
list_entry!(execlp, EXECLP);
#[cfg(target_arch = "x86_64")]
list_entry!(execle, EXECLE);
