//! System calls that take user memory: buffers, the arrays of the waits
//! (epoll, poll, select), paths and stat buffers. Where the kernel does not
//! hand us the faults it takes inside a system call (`UFFD_USER_MODE_ONLY`:
//! an unprivileged user without access to `/dev/userfaultfd`; signal mode),
//! memory in an evicted page would fail the call with EFAULT. Each wrapper
//! pins that memory resident (writable where the kernel writes it) for the
//! call (`Uzswap::pin`), then calls libc's function; memory outside the
//! regions (the stack, static data) costs a lock-free range check. Where
//! faults are served (`KernelFaults::Served`) the wrappers cost one load
//! and a branch.
//!
//! Only calls made through the dynamic symbol are seen: glibc's own
//! internal calls are not (stdio's and `readdir`'s are covered by keeping
//! their buffers out of the regions, `streams`); `uzswap setup` grants the
//! device and removes every gap (docs/ARCHITECTURE.md).

use crate::{real, Internal};
use libc::{c_void, iovec, msghdr, sockaddr, socklen_t};

type Ssize = isize;

/// Pins held for one call.
pub(crate) struct Pins {
    held: Vec<uzswap::region::PinGuard<'static>>,
    /// Where the kernel's faults are served, a read pins only if its
    /// descriptor reads by DMA (`O_DIRECT`): the descriptor, and whether
    /// it does once asked.
    direct: Option<(i32, Option<bool>)>,
}

impl Drop for Pins {
    fn drop(&mut self) {
        if !self.held.is_empty() {
            // Unpinning takes the instance's locks: inside, for a fork.
            let _g = Internal::enter();
            self.held.clear();
        }
    }
}

/// Whether `fd` was opened (or set) `O_DIRECT`; an error says no (the call
/// itself will fail on a bad descriptor).
fn reads_by_dma(fd: i32) -> bool {
    // SAFETY: F_GETFL reads the descriptor's flags, no memory.
    let fl = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_DIRECT as libc::c_long != 0
}

impl Pins {
    pub(crate) fn new() -> Option<Pins> {
        crate::active().filter(|st| st.pin_buffers).map(|_| Pins {
            held: Vec::new(),
            direct: None,
        })
    }

    /// For a read from `fd`. Where faults are not served, as [`Pins::new`].
    /// Where they are, the kernel's copies go through the page tables and
    /// need no pin, but an `O_DIRECT` read has the device write the pages
    /// the kernel looked up when the call began, by DMA: an eviction in
    /// between stored the page's old bytes and unmapped it, and the read's
    /// data went to a page no longer mapped (0.7% of 64 KiB direct reads
    /// into a heap under pressure came back with the buffer's old bytes).
    /// The kernel's reclaim passes over such pages (they are pinned); here
    /// the call pins its buffers, asking the descriptor's flags once, and
    /// only for a buffer in the regions.
    pub(crate) fn for_read(fd: i32) -> Option<Pins> {
        crate::active().map(|st| Pins {
            held: Vec::new(),
            direct: (!st.pin_buffers).then_some((fd, None)),
        })
    }

    pub(crate) fn add(&mut self, p: *const c_void, len: usize, write: bool) {
        if p.is_null() || len == 0 {
            return;
        }
        // Most buffers (the stack's, static ones) are not region memory:
        // a lock-free range check, and nothing more.
        if !crate::vma::overlaps_regions(p as usize, (p as usize).saturating_add(len)) {
            return;
        }
        if let Some((fd, dma)) = &mut self.direct {
            if !*dma.get_or_insert_with(|| reads_by_dma(*fd)) {
                return;
            }
        }
        let st = crate::active().expect("pins are made only while active");
        let _g = Internal::enter();
        self.held.push(st.uz.pin(p as usize, len, write));
    }

    /// A `struct stat` the kernel fills.
    fn stat(&mut self, b: *mut libc::stat) {
        self.add(b as *const c_void, std::mem::size_of::<libc::stat>(), true);
    }

    /// A NUL-terminated string the kernel reads (a path), if it is one.
    ///
    /// # Safety
    /// `s` is null or a NUL-terminated string.
    pub(crate) unsafe fn path(&mut self, s: *const libc::c_char) {
        if s.is_null() || !crate::vma::in_regions(s as usize) {
            return;
        }
        // SAFETY: the caller's string; reading it brings it in.
        let n = unsafe { libc::strlen(s) };
        self.add(s as *const c_void, n + 1, false);
    }

    /// A null-terminated array of strings (`argv`, `envp`) and its
    /// strings.
    ///
    /// # Safety
    /// `v` is null or a null-terminated array of NUL-terminated strings.
    unsafe fn strv(&mut self, v: *const *const libc::c_char) {
        if v.is_null() {
            return;
        }
        let mut n = 0;
        loop {
            // SAFETY: the caller's array, read up to its terminating null.
            let s = unsafe { *v.add(n) };
            if s.is_null() {
                break;
            }
            // SAFETY: an entry of the array: a string.
            unsafe { self.path(s) };
            n += 1;
        }
        self.add(
            v as *const c_void,
            (n + 1) * std::mem::size_of::<usize>(),
            false,
        );
    }

    /// An iovec array (read by the kernel) and the buffers it names.
    ///
    /// # Safety
    /// `iov` points to `n` readable iovecs, as the call requires.
    unsafe fn iov(&mut self, iov: *const iovec, n: i32, write: bool) {
        if iov.is_null() || n <= 0 {
            return;
        }
        self.add(
            iov as *const _,
            n as usize * std::mem::size_of::<iovec>(),
            false,
        );
        for k in 0..n as usize {
            // SAFETY: the caller's array of `n` entries.
            let v = unsafe { &*iov.add(k) };
            self.add(v.iov_base, v.iov_len, write);
        }
    }

    /// A msghdr, its name, iovecs and control data.
    ///
    /// # Safety
    /// `m` points to a valid msghdr, as the call requires.
    unsafe fn msg(&mut self, m: *const msghdr, write: bool) {
        if m.is_null() {
            return;
        }
        // recvmsg writes the header's lengths and flags back.
        self.add(m as *const _, std::mem::size_of::<msghdr>(), write);
        // SAFETY: the caller's header.
        let h = unsafe { &*m };
        self.add(h.msg_name, h.msg_namelen as usize, write);
        self.add(h.msg_control, h.msg_controllen, write);
        // SAFETY: the header's own iovec array.
        unsafe { self.iov(h.msg_iov, h.msg_iovlen as i32, write) };
    }
}

fn errno_enosys() -> Ssize {
    crate::set_errno(libc::ENOSYS);
    -1
}

macro_rules! wrap {
    ($name:ident($($a:ident: $t:ty),*) pins |$p:ident| $pin:block => $call:expr) => {
        wrap!($name($($a: $t),*) -> [Ssize] pins |$p| $pin => $call);
    };
    ($name:ident($($a:ident: $t:ty),*) -> [$r:ty] pins |$p:ident| $pin:block => $call:expr) => {
        wrap!($name($($a: $t),*) -> [$r] pins (Pins::new()) |$p| $pin => $call);
    };
    // A read from descriptor `$fd`: pinned where faults are served too, if
    // the descriptor reads by DMA (`Pins::for_read`).
    ($name:ident($($a:ident: $t:ty),*) reads $fd:ident pins |$p:ident| $pin:block => $call:expr) => {
        wrap!($name($($a: $t),*) -> [Ssize] pins (Pins::for_read($fd)) |$p| $pin => $call);
    };
    ($name:ident($($a:ident: $t:ty),*) -> [$r:ty] pins ($new:expr) |$p:ident| $pin:block => $call:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            let _pins = $new.map(|mut $p| {
                // SAFETY: the caller's buffers, as the call requires them.
                #[allow(unused_unsafe)]
                unsafe {
                    $pin;
                }
                $p
            });
            match real::$name() {
                // SAFETY: the caller's arguments, to the function we stand
                // in front of.
                Some(f) => unsafe { $call(f) },
                None => errno_enosys() as $r,
            }
        }
    };
}

wrap!(read(fd: i32, buf: *mut c_void, n: usize) reads fd pins |p| { p.add(buf, n, true) }
    => |f: unsafe extern "C" fn(i32, *mut c_void, usize) -> Ssize| f(fd, buf, n));
wrap!(write(fd: i32, buf: *const c_void, n: usize) pins |p| { p.add(buf, n, false) }
    => |f: unsafe extern "C" fn(i32, *const c_void, usize) -> Ssize| f(fd, buf, n));
wrap!(pread64(fd: i32, buf: *mut c_void, n: usize, off: i64) reads fd pins |p| { p.add(buf, n, true) }
    => |f: unsafe extern "C" fn(i32, *mut c_void, usize, i64) -> Ssize| f(fd, buf, n, off));
wrap!(pwrite64(fd: i32, buf: *const c_void, n: usize, off: i64) pins |p| { p.add(buf, n, false) }
    => |f: unsafe extern "C" fn(i32, *const c_void, usize, i64) -> Ssize| f(fd, buf, n, off));
wrap!(readv(fd: i32, iov: *const iovec, n: i32) reads fd pins |p| { p.iov(iov, n, true) }
    => |f: unsafe extern "C" fn(i32, *const iovec, i32) -> Ssize| f(fd, iov, n));
wrap!(writev(fd: i32, iov: *const iovec, n: i32) pins |p| { p.iov(iov, n, false) }
    => |f: unsafe extern "C" fn(i32, *const iovec, i32) -> Ssize| f(fd, iov, n));
wrap!(preadv64(fd: i32, iov: *const iovec, n: i32, off: i64) reads fd pins |p| { p.iov(iov, n, true) }
    => |f: unsafe extern "C" fn(i32, *const iovec, i32, i64) -> Ssize| f(fd, iov, n, off));
wrap!(pwritev64(fd: i32, iov: *const iovec, n: i32, off: i64) pins |p| { p.iov(iov, n, false) }
    => |f: unsafe extern "C" fn(i32, *const iovec, i32, i64) -> Ssize| f(fd, iov, n, off));
// CPython's os.preadv/os.pwritev call these (glibc has them), whatever
// the flags: without them an evicted buffer failed the call with EFAULT.
wrap!(preadv64v2(fd: i32, iov: *const iovec, n: i32, off: i64, fl: i32) reads fd pins |p| { p.iov(iov, n, true) }
    => |f: unsafe extern "C" fn(i32, *const iovec, i32, i64, i32) -> Ssize| f(fd, iov, n, off, fl));
wrap!(pwritev64v2(fd: i32, iov: *const iovec, n: i32, off: i64, fl: i32) pins |p| { p.iov(iov, n, false) }
    => |f: unsafe extern "C" fn(i32, *const iovec, i32, i64, i32) -> Ssize| f(fd, iov, n, off, fl));
wrap!(recv(fd: i32, buf: *mut c_void, n: usize, fl: i32) pins |p| { p.add(buf, n, true) }
    => |f: unsafe extern "C" fn(i32, *mut c_void, usize, i32) -> Ssize| f(fd, buf, n, fl));
wrap!(recvfrom(fd: i32, buf: *mut c_void, n: usize, fl: i32, sa: *mut sockaddr, sl: *mut socklen_t)
    pins |p| {
        p.add(buf, n, true);
        p.add(sl as *const _, std::mem::size_of::<socklen_t>(), true);
        if !sl.is_null() {
            // SAFETY: the caller's length word.
            p.add(sa as *const _, unsafe { *sl } as usize, true);
        }
    }
    => |f: unsafe extern "C" fn(i32, *mut c_void, usize, i32, *mut sockaddr, *mut socklen_t) -> Ssize|
        f(fd, buf, n, fl, sa, sl));
wrap!(recvmsg(fd: i32, m: *mut msghdr, fl: i32) pins |p| { p.msg(m, true) }
    => |f: unsafe extern "C" fn(i32, *mut msghdr, i32) -> Ssize| f(fd, m, fl));
wrap!(send(fd: i32, buf: *const c_void, n: usize, fl: i32) pins |p| { p.add(buf, n, false) }
    => |f: unsafe extern "C" fn(i32, *const c_void, usize, i32) -> Ssize| f(fd, buf, n, fl));
wrap!(sendto(fd: i32, buf: *const c_void, n: usize, fl: i32, sa: *const sockaddr, sl: socklen_t)
    pins |p| { p.add(buf, n, false); p.add(sa as *const _, sl as usize, false) }
    => |f: unsafe extern "C" fn(i32, *const c_void, usize, i32, *const sockaddr, socklen_t) -> Ssize|
        f(fd, buf, n, fl, sa, sl));
wrap!(sendmsg(fd: i32, m: *const msghdr, fl: i32) pins |p| { p.msg(m, false) }
    => |f: unsafe extern "C" fn(i32, *const msghdr, i32) -> Ssize| f(fd, m, fl));
// Waiting for descriptors: the kernel writes the events (epoll; redis
// keeps its array on the heap), reads and writes the pollfd array and the
// fd sets, and writes back select's remaining time. Blocking calls keep
// their arrays pinned while they wait.
wrap!(epoll_wait(ep: i32, ev: *mut libc::epoll_event, n: i32, t: i32) -> [i32]
    pins |p| { p.add(ev as *const _, n.max(0) as usize * std::mem::size_of::<libc::epoll_event>(), true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::epoll_event, i32, i32) -> i32| f(ep, ev, n, t));
wrap!(epoll_pwait(ep: i32, ev: *mut libc::epoll_event, n: i32, t: i32, m: *const libc::sigset_t) -> [i32]
    pins |p| {
        p.add(ev as *const _, n.max(0) as usize * std::mem::size_of::<libc::epoll_event>(), true);
        p.add(m as *const _, std::mem::size_of::<libc::sigset_t>(), false);
    }
    => |f: unsafe extern "C" fn(i32, *mut libc::epoll_event, i32, i32, *const libc::sigset_t) -> i32|
        crate::signals::with_wait_mask(m, |m| f(ep, ev, n, t, m)));
wrap!(epoll_pwait2(ep: i32, ev: *mut libc::epoll_event, n: i32, t: Ts, m: *const libc::sigset_t) -> [i32]
    pins |p| {
        p.add(ev as *const _, n.max(0) as usize * std::mem::size_of::<libc::epoll_event>(), true);
        p.one(t, false);
        p.add(m as *const _, std::mem::size_of::<libc::sigset_t>(), false);
    }
    => |f: unsafe extern "C" fn(i32, *mut libc::epoll_event, i32, Ts, *const libc::sigset_t) -> i32|
        crate::signals::with_wait_mask(m, |m| f(ep, ev, n, t, m)));
wrap!(poll(fds: *mut libc::pollfd, n: libc::nfds_t, t: i32) -> [i32]
    pins |p| { p.add(fds as *const _, (n as usize).saturating_mul(std::mem::size_of::<libc::pollfd>()), true) }
    => |f: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, i32) -> i32| f(fds, n, t));
wrap!(ppoll(fds: *mut libc::pollfd, n: libc::nfds_t, t: *const libc::timespec, m: *const libc::sigset_t) -> [i32]
    pins |p| {
        p.add(fds as *const _, (n as usize).saturating_mul(std::mem::size_of::<libc::pollfd>()), true);
        p.add(t as *const _, std::mem::size_of::<libc::timespec>(), false);
        p.add(m as *const _, std::mem::size_of::<libc::sigset_t>(), false);
    }
    => |f: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> i32|
        crate::signals::with_wait_mask(m, |m| f(fds, n, t, m)));
wrap!(select(n: i32, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set, t: *mut libc::timeval) -> [i32]
    pins |p| {
        pin_fd_sets(&mut p, n, [r, w, e]);
        p.add(t as *const _, std::mem::size_of::<libc::timeval>(), true);
    }
    => |f: unsafe extern "C" fn(i32, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> i32|
        f(n, r, w, e, t));
wrap!(pselect(n: i32, r: *mut libc::fd_set, w: *mut libc::fd_set, e: *mut libc::fd_set,
        t: *const libc::timespec, m: *const libc::sigset_t) -> [i32]
    pins |p| {
        pin_fd_sets(&mut p, n, [r, w, e]);
        p.add(t as *const _, std::mem::size_of::<libc::timespec>(), false);
        p.add(m as *const _, std::mem::size_of::<libc::sigset_t>(), false);
    }
    => |f: unsafe extern "C" fn(i32, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set,
            *const libc::timespec, *const libc::sigset_t) -> i32|
        crate::signals::with_wait_mask(m, |m| f(n, r, w, e, t, m)));

/// The fd sets of a select: the kernel reads and writes the words that
/// hold descriptors below `n`.
fn pin_fd_sets(p: &mut Pins, n: i32, sets: [*mut libc::fd_set; 3]) {
    // Programs past FD_SETSIZE pass larger sets; the kernel reads n bits.
    let bytes = (n.max(0) as usize).div_ceil(64) * 8;
    for s in sets {
        p.add(s as *const _, bytes, true);
    }
}

// Paths the kernel reads (a program's strings live on its heap, and a
// long-lived one may be evicted by the time it is used: CPython's
// `os.stat(path)` failed with EFAULT) and the stat buffers it writes.
// `open` is variadic in C; its mode is read as the third argument, as the
// calling convention passes it.
type Cs = *const libc::c_char;
type St = *mut libc::stat;
wrap!(open(pa: Cs, fl: i32, mo: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, i32, u32) -> i32| f(pa, fl, mo));
wrap!(open64(pa: Cs, fl: i32, mo: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, i32, u32) -> i32| f(pa, fl, mo));
wrap!(openat(d: i32, pa: Cs, fl: i32, mo: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, u32) -> i32| f(d, pa, fl, mo));
wrap!(openat64(d: i32, pa: Cs, fl: i32, mo: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, u32) -> i32| f(d, pa, fl, mo));
wrap!(creat(pa: Cs, mo: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32) -> i32| f(pa, mo));
wrap!(stat(pa: Cs, b: St) -> [i32]
    pins |p| { p.path(pa); p.stat(b) }
    => |f: unsafe extern "C" fn(Cs, St) -> i32| f(pa, b));
wrap!(lstat(pa: Cs, b: St) -> [i32]
    pins |p| { p.path(pa); p.stat(b) }
    => |f: unsafe extern "C" fn(Cs, St) -> i32| f(pa, b));
wrap!(fstat(fd: i32, b: St) -> [i32]
    pins |p| { p.stat(b) }
    => |f: unsafe extern "C" fn(i32, St) -> i32| f(fd, b));
wrap!(fstatat(d: i32, pa: Cs, b: St, fl: i32) -> [i32]
    pins |p| { p.path(pa); p.stat(b) }
    => |f: unsafe extern "C" fn(i32, Cs, St, i32) -> i32| f(d, pa, b, fl));
wrap!(statx(d: i32, pa: Cs, fl: i32, m: u32, b: *mut libc::statx) -> [i32]
    pins |p| { p.path(pa); p.add(b as *const _, std::mem::size_of::<libc::statx>(), true) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, u32, *mut libc::statx) -> i32| f(d, pa, fl, m, b));
// The 64-bit names programs built with `_FILE_OFFSET_BITS=64` call
// (CPython's `os.stat` is `stat64`): the same calls on 64-bit targets.
wrap!(stat64(pa: Cs, b: St) -> [i32]
    pins |p| { p.path(pa); p.stat(b) }
    => |f: unsafe extern "C" fn(Cs, St) -> i32| f(pa, b));
wrap!(lstat64(pa: Cs, b: St) -> [i32]
    pins |p| { p.path(pa); p.stat(b) }
    => |f: unsafe extern "C" fn(Cs, St) -> i32| f(pa, b));
wrap!(fstat64(fd: i32, b: St) -> [i32]
    pins |p| { p.stat(b) }
    => |f: unsafe extern "C" fn(i32, St) -> i32| f(fd, b));
wrap!(fstatat64(d: i32, pa: Cs, b: St, fl: i32) -> [i32]
    pins |p| { p.path(pa); p.stat(b) }
    => |f: unsafe extern "C" fn(i32, Cs, St, i32) -> i32| f(d, pa, b, fl));
wrap!(creat64(pa: Cs, mo: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32) -> i32| f(pa, mo));
wrap!(truncate64(pa: Cs, n: i64) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, i64) -> i32| f(pa, n));
wrap!(access(pa: Cs, m: i32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, i32) -> i32| f(pa, m));
wrap!(faccessat(d: i32, pa: Cs, m: i32, fl: i32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, i32) -> i32| f(d, pa, m, fl));
wrap!(unlink(pa: Cs) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs) -> i32| f(pa));
wrap!(unlinkat(d: i32, pa: Cs, fl: i32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, i32) -> i32| f(d, pa, fl));
wrap!(rmdir(pa: Cs) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs) -> i32| f(pa));
wrap!(mkdir(pa: Cs, m: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32) -> i32| f(pa, m));
wrap!(mkdirat(d: i32, pa: Cs, m: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, u32) -> i32| f(d, pa, m));
wrap!(rename(a: Cs, b: Cs) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(Cs, Cs) -> i32| f(a, b));
wrap!(renameat(da: i32, a: Cs, db: i32, b: Cs) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, Cs) -> i32| f(da, a, db, b));
wrap!(renameat2(da: i32, a: Cs, db: i32, b: Cs, fl: u32) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, Cs, u32) -> i32| f(da, a, db, b, fl));
wrap!(link(a: Cs, b: Cs) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(Cs, Cs) -> i32| f(a, b));
wrap!(symlink(a: Cs, b: Cs) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(Cs, Cs) -> i32| f(a, b));
wrap!(readlink(pa: Cs, b: *mut libc::c_char, n: usize) pins |p| { p.path(pa); p.add(b as *const _, n, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::c_char, usize) -> Ssize| f(pa, b, n));
wrap!(readlinkat(d: i32, pa: Cs, b: *mut libc::c_char, n: usize) pins |p| { p.path(pa); p.add(b as *const _, n, true) }
    => |f: unsafe extern "C" fn(i32, Cs, *mut libc::c_char, usize) -> Ssize| f(d, pa, b, n));
wrap!(chdir(pa: Cs) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs) -> i32| f(pa));
wrap!(chmod(pa: Cs, m: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32) -> i32| f(pa, m));
wrap!(truncate(pa: Cs, n: i64) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, i64) -> i32| f(pa, n));
wrap!(getdents64(fd: i32, b: *mut c_void, n: usize) pins |p| { p.add(b, n, true) }
    => |f: unsafe extern "C" fn(i32, *mut c_void, usize) -> Ssize| f(fd, b, n));
// The rest of the calls CPython's `os` module makes with a path (`os.chown`,
// `os.link` (linkat), `os.mkfifo`, `os.utime` without a descriptor,
// `os.getxattr`...), and the extended attributes' names and values.
type Cv = *const c_void;
type Mv = *mut c_void;
wrap!(chown(pa: Cs, u: u32, g: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32, u32) -> i32| f(pa, u, g));
wrap!(lchown(pa: Cs, u: u32, g: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32, u32) -> i32| f(pa, u, g));
wrap!(fchownat(d: i32, pa: Cs, u: u32, g: u32, fl: i32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, u32, u32, i32) -> i32| f(d, pa, u, g, fl));
wrap!(fchmodat(d: i32, pa: Cs, m: u32, fl: i32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, u32, i32) -> i32| f(d, pa, m, fl));
wrap!(linkat(da: i32, a: Cs, db: i32, b: Cs, fl: i32) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(i32, Cs, i32, Cs, i32) -> i32| f(da, a, db, b, fl));
wrap!(symlinkat(a: Cs, d: i32, b: Cs) -> [i32] pins |p| { p.path(a); p.path(b) }
    => |f: unsafe extern "C" fn(Cs, i32, Cs) -> i32| f(a, d, b));
wrap!(mkfifo(pa: Cs, m: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32) -> i32| f(pa, m));
wrap!(mkfifoat(d: i32, pa: Cs, m: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, u32) -> i32| f(d, pa, m));
wrap!(mknod(pa: Cs, m: u32, dev: u64) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, u32, u64) -> i32| f(pa, m, dev));
wrap!(mknodat(d: i32, pa: Cs, m: u32, dev: u64) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, u32, u64) -> i32| f(d, pa, m, dev));
wrap!(utime(pa: Cs, t: *const libc::utimbuf) -> [i32] pins |p| { p.path(pa); p.one(t, false) }
    => |f: unsafe extern "C" fn(Cs, *const libc::utimbuf) -> i32| f(pa, t));
wrap!(utimes(pa: Cs, t: *const libc::timeval) -> [i32]
    pins |p| { p.path(pa); p.one(t as *const [libc::timeval; 2], false) }
    => |f: unsafe extern "C" fn(Cs, *const libc::timeval) -> i32| f(pa, t));
// glibc converts the times into a copy of its own (read in user space)
// and passes the path on: the path is what the kernel reads here.
wrap!(lutimes(pa: Cs, t: *const libc::timeval) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs, *const libc::timeval) -> i32| f(pa, t));
wrap!(futimesat(d: i32, pa: Cs, t: *const libc::timeval) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, *const libc::timeval) -> i32| f(d, pa, t));
wrap!(chroot(pa: Cs) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(Cs) -> i32| f(pa));
wrap!(inotify_add_watch(fd: i32, pa: Cs, m: u32) -> [i32] pins |p| { p.path(pa) }
    => |f: unsafe extern "C" fn(i32, Cs, u32) -> i32| f(fd, pa, m));
wrap!(getxattr(pa: Cs, nm: Cs, v: Mv, n: usize) pins |p| { p.path(pa); p.path(nm); p.add(v, n, true) }
    => |f: unsafe extern "C" fn(Cs, Cs, Mv, usize) -> Ssize| f(pa, nm, v, n));
wrap!(lgetxattr(pa: Cs, nm: Cs, v: Mv, n: usize) pins |p| { p.path(pa); p.path(nm); p.add(v, n, true) }
    => |f: unsafe extern "C" fn(Cs, Cs, Mv, usize) -> Ssize| f(pa, nm, v, n));
wrap!(fgetxattr(fd: i32, nm: Cs, v: Mv, n: usize) pins |p| { p.path(nm); p.add(v, n, true) }
    => |f: unsafe extern "C" fn(i32, Cs, Mv, usize) -> Ssize| f(fd, nm, v, n));
wrap!(setxattr(pa: Cs, nm: Cs, v: Cv, n: usize, fl: i32) -> [i32]
    pins |p| { p.path(pa); p.path(nm); p.add(v, n, false) }
    => |f: unsafe extern "C" fn(Cs, Cs, Cv, usize, i32) -> i32| f(pa, nm, v, n, fl));
wrap!(lsetxattr(pa: Cs, nm: Cs, v: Cv, n: usize, fl: i32) -> [i32]
    pins |p| { p.path(pa); p.path(nm); p.add(v, n, false) }
    => |f: unsafe extern "C" fn(Cs, Cs, Cv, usize, i32) -> i32| f(pa, nm, v, n, fl));
wrap!(fsetxattr(fd: i32, nm: Cs, v: Cv, n: usize, fl: i32) -> [i32]
    pins |p| { p.path(nm); p.add(v, n, false) }
    => |f: unsafe extern "C" fn(i32, Cs, Cv, usize, i32) -> i32| f(fd, nm, v, n, fl));
wrap!(listxattr(pa: Cs, l: *mut libc::c_char, n: usize) pins |p| { p.path(pa); p.add(l as *const _, n, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::c_char, usize) -> Ssize| f(pa, l, n));
wrap!(llistxattr(pa: Cs, l: *mut libc::c_char, n: usize) pins |p| { p.path(pa); p.add(l as *const _, n, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::c_char, usize) -> Ssize| f(pa, l, n));
wrap!(flistxattr(fd: i32, l: *mut libc::c_char, n: usize) pins |p| { p.add(l as *const _, n, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::c_char, usize) -> Ssize| f(fd, l, n));
wrap!(removexattr(pa: Cs, nm: Cs) -> [i32] pins |p| { p.path(pa); p.path(nm) }
    => |f: unsafe extern "C" fn(Cs, Cs) -> i32| f(pa, nm));
wrap!(lremovexattr(pa: Cs, nm: Cs) -> [i32] pins |p| { p.path(pa); p.path(nm) }
    => |f: unsafe extern "C" fn(Cs, Cs) -> i32| f(pa, nm));
wrap!(fremovexattr(fd: i32, nm: Cs) -> [i32] pins |p| { p.path(nm) }
    => |f: unsafe extern "C" fn(i32, Cs) -> i32| f(fd, nm));
// glibc's getentropy calls its getrandom internally.
wrap!(getentropy(b: Mv, n: usize) -> [i32] pins |p| { p.add(b, n, true) }
    => |f: unsafe extern "C" fn(Mv, usize) -> i32| f(b, n));

// ioctl(2) and fcntl(2): an argument that is region memory is a structure
// the call reads or writes (or an int, which a range check tells from a
// pointer: region addresses are far above any flag or count). Its size is
// in the request where the request is encoded (`_IOC`); the common legacy
// requests (terminals, sockets, block devices) have their sizes below. A
// structure with pointers inside (but for SIOCGIFCONF's buffer) is pinned
// only itself.
wrap!(ioctl(fd: i32, req: libc::c_ulong, arg: Mv) -> [i32] pins |p| { p.ioctl(req, arg) }
    => |f: unsafe extern "C" fn(i32, libc::c_ulong, Mv) -> i32| f(fd, req, arg));
wrap!(fcntl(fd: i32, cmd: i32, arg: Mv) -> [i32] pins |p| { p.fcntl(cmd, arg) }
    => |f: unsafe extern "C" fn(i32, i32, Mv) -> i32| f(fd, cmd, arg));
wrap!(fcntl64(fd: i32, cmd: i32, arg: Mv) -> [i32] pins |p| { p.fcntl(cmd, arg) }
    => |f: unsafe extern "C" fn(i32, i32, Mv) -> i32| f(fd, cmd, arg));
// prctl is variadic in C; on x86-64 its integer arguments arrive in the
// registers of a prototype with four more words.
type Ul = libc::c_ulong;
wrap!(prctl(op: i32, a2: Ul, a3: Ul, a4: Ul, a5: Ul) -> [i32] pins |p| { p.prctl(op, a2, a3) }
    => |f: unsafe extern "C" fn(i32, Ul, Ul, Ul, Ul) -> i32| f(op, a2, a3, a4, a5));
// glibc names another thread through /proc with its internal write and
// reads the name back with its internal read, and its own with prctl.
wrap!(pthread_setname_np(t: libc::pthread_t, name: Cs) -> [i32] pins |p| { p.path(name) }
    => |f: unsafe extern "C" fn(libc::pthread_t, Cs) -> i32| f(t, name));
wrap!(pthread_getname_np(t: libc::pthread_t, buf: *mut libc::c_char, n: usize) -> [i32]
    pins |p| { p.add(buf as Cv, n, true) }
    => |f: unsafe extern "C" fn(libc::pthread_t, *mut libc::c_char, usize) -> i32| f(t, buf, n));

/// The bytes a legacy (unencoded) ioctl request reads or writes at its
/// argument, and whether the kernel writes them; `None`: not known.
fn legacy_ioctl(req: libc::c_ulong) -> Option<(usize, bool)> {
    use libc::*;
    // The kernel's struct termios (no speeds: glibc's is larger) and
    // struct termio; struct serial_struct, struct rtentry, struct arpreq
    // and struct ifreq as x86-64 lays them out.
    const TERMIOS: usize = 36;
    const TERMIO: usize = 18;
    const SERIAL: usize = 72;
    const RTENTRY: usize = 120;
    const ARPREQ: usize = 68;
    const IFREQ: usize = 40;
    const INT: usize = 4;
    Some(match req {
        TCGETS => (TERMIOS, true),
        TCSETS | TCSETSW | TCSETSF => (TERMIOS, false),
        TCGETA => (TERMIO, true),
        TCSETA | TCSETAW | TCSETAF => (TERMIO, false),
        TIOCGPGRP | TIOCOUTQ | TIOCMGET | TIOCGSOFTCAR | FIONREAD | TIOCGETD | TIOCGSID => {
            (INT, true)
        }
        TIOCSPGRP | TIOCMBIS | TIOCMBIC | TIOCMSET | TIOCSSOFTCAR | FIONBIO | TIOCSETD
        | FIOASYNC => (INT, false),
        TIOCSTI => (1, false),
        TIOCGWINSZ => (size_of::<winsize>(), true),
        TIOCSWINSZ => (size_of::<winsize>(), false),
        TIOCGSERIAL => (SERIAL, true),
        TIOCSSERIAL => (SERIAL, false),
        BLKSSZGET | BLKPBSZGET => (INT, true),
        SIOCGIFCONF => (size_of::<ifconf>(), true),
        SIOCADDRT | SIOCDELRT => (RTENTRY, false),
        SIOCDARP | SIOCGARP | SIOCSARP | SIOCDRARP | SIOCGRARP | SIOCSRARP => (ARPREQ, true),
        // SIOCATMARK: an int; SIOCGSTAMP(NS): a timeval, a timespec.
        0x8905 => (INT, true),
        0x8906 | 0x8907 => (16, true),
        // The interface requests: a struct ifreq.
        0x8910..=0x89FF => (IFREQ, true),
        // BLKGETSIZE: an unsigned long.
        0x1260 => (8, true),
        _ => return None,
    })
}

impl Pins {
    /// An ioctl's argument (`ioctl` above).
    ///
    /// # Safety
    /// `arg` is what the request takes.
    unsafe fn ioctl(&mut self, req: libc::c_ulong, arg: Mv) {
        let a = arg as usize;
        if !crate::vma::in_regions(a) {
            return;
        }
        let (dir, size) = ((req >> 30) & 3, ((req >> 16) & 0x3fff) as usize);
        let (len, write) = match legacy_ioctl(req) {
            _ if dir != 0 && size != 0 => (size, dir & 2 != 0),
            Some(known) => known,
            // Not known: its page, up to a small structure's size. Never
            // past the page, which may be one the program protected (and
            // pinning brings pages in by touching them).
            None => (64.min(PAGE - a % PAGE), true),
        };
        self.add(arg, len, write);
        if req == libc::SIOCGIFCONF {
            // SAFETY: SIOCGIFCONF's argument, a struct ifconf, pinned above.
            let c = unsafe { &*(arg as *const libc::ifconf) };
            // SAFETY: the union's buffer member, as the request uses it.
            let buf = unsafe { c.ifc_ifcu.ifcu_buf };
            self.add(buf as *const c_void, c.ifc_len.max(0) as usize, true);
        }
    }

    /// A prctl's memory: a thread's name (the kernel copies up to 16
    /// bytes in or out), an int or a pointer it reports, a seccomp filter.
    ///
    /// # Safety
    /// The arguments are what the option takes.
    unsafe fn prctl(&mut self, op: i32, a2: libc::c_ulong, a3: libc::c_ulong) {
        /// TASK_COMM_LEN.
        const COMM: usize = 16;
        let p = a2 as *const c_void;
        match op {
            libc::PR_SET_NAME if !p.is_null() && crate::vma::in_regions(a2 as usize) => {
                // SAFETY: the caller's name; reading it brings it in.
                let n = unsafe { libc::strnlen(p.cast(), COMM) };
                self.add(p, (n + 1).min(COMM), false);
            }
            libc::PR_GET_NAME => self.add(p, COMM, true),
            libc::PR_GET_PDEATHSIG
            | libc::PR_GET_TSC
            | libc::PR_GET_UNALIGN
            | libc::PR_GET_FPEXC
            | libc::PR_GET_FPEMU
            | libc::PR_GET_ENDIAN => self.add(p, std::mem::size_of::<i32>(), true),
            libc::PR_GET_TID_ADDRESS => self.add(p, std::mem::size_of::<usize>(), true),
            libc::PR_SET_SECCOMP if a2 == libc::SECCOMP_MODE_FILTER as libc::c_ulong => {
                let prog = a3 as *const libc::sock_fprog;
                self.add(prog.cast(), std::mem::size_of::<libc::sock_fprog>(), false);
                if crate::vma::in_regions(prog as usize) {
                    // SAFETY: the caller's program, in a region, pinned
                    // above (a bad pointer elsewhere is the kernel's to
                    // refuse).
                    let (len, filter) = unsafe { ((*prog).len as usize, (*prog).filter) };
                    self.add(
                        filter.cast(),
                        len * std::mem::size_of::<libc::sock_filter>(),
                        false,
                    );
                }
            }
            _ => {}
        }
    }

    /// An fcntl's argument, for the commands that take a pointer.
    fn fcntl(&mut self, cmd: i32, arg: Mv) {
        let (len, write) = match cmd {
            libc::F_GETLK | libc::F_OFD_GETLK => (std::mem::size_of::<libc::flock>(), true),
            libc::F_SETLK | libc::F_SETLKW | libc::F_OFD_SETLK | libc::F_OFD_SETLKW => {
                (std::mem::size_of::<libc::flock>(), false)
            }
            F_GETOWN_EX => (F_OWNER_EX, true),
            F_SETOWN_EX => (F_OWNER_EX, false),
            F_GET_RW_HINT | F_GET_FILE_RW_HINT => (8, true),
            F_SET_RW_HINT | F_SET_FILE_RW_HINT => (8, false),
            _ => return,
        };
        self.add(arg, len, write);
    }
}

const PAGE: usize = 4096;
// <asm-generic/fcntl.h>, not in the libc crate: struct f_owner_ex is an
// int and a pid.
const F_SETOWN_EX: i32 = 15;
const F_GETOWN_EX: i32 = 16;
const F_OWNER_EX: usize = 8;
// <linux/fcntl.h>: F_LINUX_SPECIFIC_BASE (1024) + 11..14.
const F_GET_RW_HINT: i32 = 1035;
const F_SET_RW_HINT: i32 = 1036;
const F_GET_FILE_RW_HINT: i32 = 1037;
const F_SET_FILE_RW_HINT: i32 = 1038;

// Addresses, socket options and the descriptors a call returns in memory;
// what waits and the information calls write back; times the kernel reads.
// The kernel reads and writes each through the page tables as the calls
// above: a connect to an address from `getaddrinfo` (heap memory, kept for
// reconnects), a `pipe` into a freshly allocated structure (never touched:
// the allocator's fresh memory reads as zeros without a page) or a
// `waitpid` status in a process table failed with EFAULT (`syscall_structs.c`).
type Sa = *mut sockaddr;
type Csa = *const sockaddr;
type Sl = *mut socklen_t;
type Ts = *const libc::timespec;
type Tsm = *mut libc::timespec;
type Ru = *mut libc::rusage;

impl Pins {
    /// `n` bytes at `p` the kernel writes, `n` read from `*len` (an address
    /// and its length, an option and its length), and the length word,
    /// which it reads and writes back.
    ///
    /// # Safety
    /// `len` is null or the caller's length word.
    unsafe fn with_len(&mut self, p: *const c_void, len: Sl) {
        self.add(len as *const _, std::mem::size_of::<socklen_t>(), true);
        if !len.is_null() {
            // SAFETY: the caller's length word, pinned above.
            self.add(p, unsafe { *len } as usize, true);
        }
    }

    /// A `T` the kernel writes (or, with `write` false, reads).
    fn one<T>(&mut self, p: *const T, write: bool) {
        self.add(p as *const c_void, std::mem::size_of::<T>(), write);
    }
}

wrap!(accept(fd: i32, sa: Sa, sl: Sl) -> [i32] pins |p| { p.with_len(sa as *const _, sl) }
    => |f: unsafe extern "C" fn(i32, Sa, Sl) -> i32| f(fd, sa, sl));
wrap!(accept4(fd: i32, sa: Sa, sl: Sl, fl: i32) -> [i32] pins |p| { p.with_len(sa as *const _, sl) }
    => |f: unsafe extern "C" fn(i32, Sa, Sl, i32) -> i32| f(fd, sa, sl, fl));
wrap!(connect(fd: i32, sa: Csa, sl: socklen_t) -> [i32] pins |p| { p.add(sa as *const _, sl as usize, false) }
    => |f: unsafe extern "C" fn(i32, Csa, socklen_t) -> i32| f(fd, sa, sl));
wrap!(bind(fd: i32, sa: Csa, sl: socklen_t) -> [i32] pins |p| { p.add(sa as *const _, sl as usize, false) }
    => |f: unsafe extern "C" fn(i32, Csa, socklen_t) -> i32| f(fd, sa, sl));
wrap!(getsockname(fd: i32, sa: Sa, sl: Sl) -> [i32] pins |p| { p.with_len(sa as *const _, sl) }
    => |f: unsafe extern "C" fn(i32, Sa, Sl) -> i32| f(fd, sa, sl));
wrap!(getpeername(fd: i32, sa: Sa, sl: Sl) -> [i32] pins |p| { p.with_len(sa as *const _, sl) }
    => |f: unsafe extern "C" fn(i32, Sa, Sl) -> i32| f(fd, sa, sl));
wrap!(getsockopt(fd: i32, lv: i32, nm: i32, v: *mut c_void, vl: Sl) -> [i32] pins |p| { p.with_len(v, vl) }
    => |f: unsafe extern "C" fn(i32, i32, i32, *mut c_void, Sl) -> i32| f(fd, lv, nm, v, vl));
wrap!(setsockopt(fd: i32, lv: i32, nm: i32, v: *const c_void, vl: socklen_t) -> [i32]
    pins |p| { p.add(v, vl as usize, false) }
    => |f: unsafe extern "C" fn(i32, i32, i32, *const c_void, socklen_t) -> i32| f(fd, lv, nm, v, vl));
wrap!(socketpair(d: i32, t: i32, pr: i32, sv: *mut i32) -> [i32] pins |p| { p.one(sv as *const [i32; 2], true) }
    => |f: unsafe extern "C" fn(i32, i32, i32, *mut i32) -> i32| f(d, t, pr, sv));
wrap!(pipe(fds: *mut i32) -> [i32] pins |p| { p.one(fds as *const [i32; 2], true) }
    => |f: unsafe extern "C" fn(*mut i32) -> i32| f(fds));
wrap!(pipe2(fds: *mut i32, fl: i32) -> [i32] pins |p| { p.one(fds as *const [i32; 2], true) }
    => |f: unsafe extern "C" fn(*mut i32, i32) -> i32| f(fds, fl));
wrap!(wait(st: *mut i32) -> [i32] pins |p| { p.one(st, true) }
    => |f: unsafe extern "C" fn(*mut i32) -> i32| f(st));
wrap!(waitpid(pid: i32, st: *mut i32, o: i32) -> [i32] pins |p| { p.one(st, true) }
    => |f: unsafe extern "C" fn(i32, *mut i32, i32) -> i32| f(pid, st, o));
wrap!(wait3(st: *mut i32, o: i32, ru: Ru) -> [i32] pins |p| { p.one(st, true); p.one(ru, true) }
    => |f: unsafe extern "C" fn(*mut i32, i32, Ru) -> i32| f(st, o, ru));
wrap!(wait4(pid: i32, st: *mut i32, o: i32, ru: Ru) -> [i32] pins |p| { p.one(st, true); p.one(ru, true) }
    => |f: unsafe extern "C" fn(i32, *mut i32, i32, Ru) -> i32| f(pid, st, o, ru));
wrap!(waitid(t: u32, id: u32, si: *mut libc::siginfo_t, o: i32) -> [i32] pins |p| { p.one(si, true) }
    => |f: unsafe extern "C" fn(u32, u32, *mut libc::siginfo_t, i32) -> i32| f(t, id, si, o));
wrap!(getrusage(who: i32, ru: Ru) -> [i32] pins |p| { p.one(ru, true) }
    => |f: unsafe extern "C" fn(i32, Ru) -> i32| f(who, ru));
wrap!(uname(u: *mut libc::utsname) -> [i32] pins |p| { p.one(u, true) }
    => |f: unsafe extern "C" fn(*mut libc::utsname) -> i32| f(u));
wrap!(sysinfo(i: *mut libc::sysinfo) -> [i32] pins |p| { p.one(i, true) }
    => |f: unsafe extern "C" fn(*mut libc::sysinfo) -> i32| f(i));
wrap!(statfs(pa: Cs, b: *mut libc::statfs) -> [i32] pins |p| { p.path(pa); p.one(b, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::statfs) -> i32| f(pa, b));
wrap!(fstatfs(fd: i32, b: *mut libc::statfs) -> [i32] pins |p| { p.one(b, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::statfs) -> i32| f(fd, b));
wrap!(statfs64(pa: Cs, b: *mut libc::statfs64) -> [i32] pins |p| { p.path(pa); p.one(b, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::statfs64) -> i32| f(pa, b));
wrap!(fstatfs64(fd: i32, b: *mut libc::statfs64) -> [i32] pins |p| { p.one(b, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::statfs64) -> i32| f(fd, b));
// glibc's statvfs calls its statfs internally: no wrapper above sees it.
wrap!(statvfs(pa: Cs, b: *mut libc::statvfs) -> [i32] pins |p| { p.path(pa); p.one(b, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::statvfs) -> i32| f(pa, b));
wrap!(fstatvfs(fd: i32, b: *mut libc::statvfs) -> [i32] pins |p| { p.one(b, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::statvfs) -> i32| f(fd, b));
wrap!(statvfs64(pa: Cs, b: *mut libc::statvfs64) -> [i32] pins |p| { p.path(pa); p.one(b, true) }
    => |f: unsafe extern "C" fn(Cs, *mut libc::statvfs64) -> i32| f(pa, b));
wrap!(fstatvfs64(fd: i32, b: *mut libc::statvfs64) -> [i32] pins |p| { p.one(b, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::statvfs64) -> i32| f(fd, b));
wrap!(getrlimit(r: u32, l: *mut libc::rlimit) -> [i32] pins |p| { p.one(l, true) }
    => |f: unsafe extern "C" fn(u32, *mut libc::rlimit) -> i32| f(r, l));
wrap!(getrlimit64(r: u32, l: *mut libc::rlimit64) -> [i32] pins |p| { p.one(l, true) }
    => |f: unsafe extern "C" fn(u32, *mut libc::rlimit64) -> i32| f(r, l));
wrap!(setrlimit(r: u32, l: *const libc::rlimit) -> [i32] pins |p| { p.one(l, false) }
    => |f: unsafe extern "C" fn(u32, *const libc::rlimit) -> i32| f(r, l));
wrap!(setrlimit64(r: u32, l: *const libc::rlimit64) -> [i32] pins |p| { p.one(l, false) }
    => |f: unsafe extern "C" fn(u32, *const libc::rlimit64) -> i32| f(r, l));
wrap!(prlimit(pid: i32, r: u32, n: *const libc::rlimit, o: *mut libc::rlimit) -> [i32]
    pins |p| { p.one(n, false); p.one(o, true) }
    => |f: unsafe extern "C" fn(i32, u32, *const libc::rlimit, *mut libc::rlimit) -> i32| f(pid, r, n, o));
wrap!(prlimit64(pid: i32, r: u32, n: *const libc::rlimit64, o: *mut libc::rlimit64) -> [i32]
    pins |p| { p.one(n, false); p.one(o, true) }
    => |f: unsafe extern "C" fn(i32, u32, *const libc::rlimit64, *mut libc::rlimit64) -> i32| f(pid, r, n, o));
wrap!(getgroups(n: i32, l: *mut libc::gid_t) -> [i32]
    pins |p| { p.add(l as *const _, n.max(0) as usize * std::mem::size_of::<libc::gid_t>(), true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::gid_t) -> i32| f(n, l));
wrap!(nanosleep(t: Ts, rem: Tsm) -> [i32] pins |p| { p.one(t, false); p.one(rem, true) }
    => |f: unsafe extern "C" fn(Ts, Tsm) -> i32| f(t, rem));
wrap!(clock_nanosleep(c: i32, fl: i32, t: Ts, rem: Tsm) -> [i32] pins |p| { p.one(t, false); p.one(rem, true) }
    => |f: unsafe extern "C" fn(i32, i32, Ts, Tsm) -> i32| f(c, fl, t, rem));
wrap!(utimensat(d: i32, pa: Cs, t: Ts, fl: i32) -> [i32]
    pins |p| { p.path(pa); p.one(t as *const [libc::timespec; 2], false) }
    => |f: unsafe extern "C" fn(i32, Cs, Ts, i32) -> i32| f(d, pa, t, fl));
wrap!(futimens(fd: i32, t: Ts) -> [i32] pins |p| { p.one(t as *const [libc::timespec; 2], false) }
    => |f: unsafe extern "C" fn(i32, Ts) -> i32| f(fd, t));
wrap!(epoll_ctl(ep: i32, op: i32, fd: i32, ev: *mut libc::epoll_event) -> [i32] pins |p| { p.one(ev, false) }
    => |f: unsafe extern "C" fn(i32, i32, i32, *mut libc::epoll_event) -> i32| f(ep, op, fd, ev));
wrap!(sched_getaffinity(pid: i32, n: usize, m: *mut libc::cpu_set_t) -> [i32] pins |p| { p.add(m as *const _, n, true) }
    => |f: unsafe extern "C" fn(i32, usize, *mut libc::cpu_set_t) -> i32| f(pid, n, m));
wrap!(sched_setaffinity(pid: i32, n: usize, m: *const libc::cpu_set_t) -> [i32] pins |p| { p.add(m as *const _, n, false) }
    => |f: unsafe extern "C" fn(i32, usize, *const libc::cpu_set_t) -> i32| f(pid, n, m));
wrap!(pthread_getaffinity_np(t: libc::pthread_t, n: usize, m: *mut libc::cpu_set_t) -> [i32] pins |p| { p.add(m as Cv, n, true) }
    => |f: unsafe extern "C" fn(libc::pthread_t, usize, *mut libc::cpu_set_t) -> i32| f(t, n, m));
wrap!(pthread_setaffinity_np(t: libc::pthread_t, n: usize, m: *const libc::cpu_set_t) -> [i32] pins |p| { p.add(m as Cv, n, false) }
    => |f: unsafe extern "C" fn(libc::pthread_t, usize, *const libc::cpu_set_t) -> i32| f(t, n, m));
wrap!(sched_setparam(pid: libc::pid_t, sp: Sp) -> [i32] pins |p| { p.one(sp, false) }
    => |f: unsafe extern "C" fn(libc::pid_t, Sp) -> i32| f(pid, sp));
wrap!(sched_getparam(pid: libc::pid_t, sp: *mut libc::sched_param) -> [i32] pins |p| { p.one(sp, true) }
    => |f: unsafe extern "C" fn(libc::pid_t, *mut libc::sched_param) -> i32| f(pid, sp));
wrap!(sched_setscheduler(pid: libc::pid_t, pol: i32, sp: Sp) -> [i32] pins |p| { p.one(sp, false) }
    => |f: unsafe extern "C" fn(libc::pid_t, i32, Sp) -> i32| f(pid, pol, sp));
// The local side of a transfer between address spaces, and the remote
// side too where the process names itself.
wrap!(process_vm_readv(pid: libc::pid_t, l: *const iovec, ln: Ul, r: *const iovec, rn: Ul, fl: Ul)
    pins |p| { p.iov(l, ln as i32, true); p.vm_remote(pid, r, rn, false) }
    => |f: unsafe extern "C" fn(libc::pid_t, *const iovec, Ul, *const iovec, Ul, Ul) -> Ssize| f(pid, l, ln, r, rn, fl));
wrap!(process_vm_writev(pid: libc::pid_t, l: *const iovec, ln: Ul, r: *const iovec, rn: Ul, fl: Ul)
    pins |p| { p.iov(l, ln as i32, false); p.vm_remote(pid, r, rn, true) }
    => |f: unsafe extern "C" fn(libc::pid_t, *const iovec, Ul, *const iovec, Ul, Ul) -> Ssize| f(pid, l, ln, r, rn, fl));
wrap!(vmsplice(fd: i32, v: *const iovec, n: usize, fl: u32) pins |p| { p.iov(v, n as i32, false) }
    => |f: unsafe extern "C" fn(i32, *const iovec, usize, u32) -> Ssize| f(fd, v, n, fl));

type Sp = *const libc::sched_param;

impl Pins {
    /// The remote vector of `process_vm_readv`/`writev` (always read by
    /// the kernel) and, where `pid` is this process, its buffers (written
    /// when `write`): another process's memory is its own.
    ///
    /// # Safety
    /// `r` points to `n` readable iovecs, as the call requires.
    unsafe fn vm_remote(&mut self, pid: libc::pid_t, r: *const iovec, n: Ul, write: bool) {
        // SAFETY: no arguments.
        if pid == unsafe { libc::getpid() } {
            // SAFETY: the caller's vector.
            unsafe { self.iov(r, n as i32, write) };
        } else if !r.is_null() {
            self.add(r as Cv, n as usize * std::mem::size_of::<iovec>(), false);
        }
    }
}

/// A clock read into region memory, where the kernel's faults are not
/// served: into a copy on the stack, then copied in user space, where a
/// fault is the program's own. The CPU-time clocks
/// (and every clock, where the clock source cannot be read in user space)
/// are read by a system call, whose write into an evicted `timespec`
/// failed with EFAULT where the kernel's faults are not served. A copy
/// costs less than a pin, and a clock read into the heap is common: a
/// request's start time kept in its structure.
///
/// # Safety
/// `t` is null or a writable `timespec`.
unsafe fn clock_into(t: Tsm, read: impl FnOnce(Tsm) -> i32) -> i32 {
    if t.is_null()
        || !crate::vma::in_regions(t as usize)
        || !crate::active().is_some_and(|st| st.pin_buffers)
    {
        return read(t);
    }
    let mut copy = std::mem::MaybeUninit::<libc::timespec>::uninit();
    let r = read(copy.as_mut_ptr());
    if r == 0 {
        // SAFETY: written by the successful call; `t` is the caller's.
        unsafe { t.write(copy.assume_init()) };
    }
    r
}

/// # Safety
/// As clock_gettime(2).
#[no_mangle]
pub unsafe extern "C" fn clock_gettime(c: libc::clockid_t, t: Tsm) -> i32 {
    match real::clock_gettime() {
        // SAFETY: the caller's clock and pointer.
        Some(f) => unsafe { clock_into(t, |t| f(c, t)) },
        None => errno_enosys() as i32,
    }
}

/// # Safety
/// As clock_getres(2).
#[no_mangle]
pub unsafe extern "C" fn clock_getres(c: libc::clockid_t, t: Tsm) -> i32 {
    match real::clock_getres() {
        // SAFETY: as above.
        Some(f) => unsafe { clock_into(t, |t| f(c, t)) },
        None => errno_enosys() as i32,
    }
}

// Timers, signals waited for, offsets of a splice, System V and POSIX
// messages and semaphores: each a structure or a message the kernel reads
// or writes inside the call.
wrap!(times(t: *mut libc::tms) -> [libc::clock_t] pins |p| { p.one(t, true) }
    => |f: unsafe extern "C" fn(*mut libc::tms) -> libc::clock_t| f(t));
wrap!(getitimer(w: i32, cur: *mut libc::itimerval) -> [i32] pins |p| { p.one(cur, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::itimerval) -> i32| f(w, cur));
wrap!(setitimer(w: i32, new: *const libc::itimerval, old: *mut libc::itimerval) -> [i32]
    pins |p| { p.one(new, false); p.one(old, true) }
    => |f: unsafe extern "C" fn(i32, *const libc::itimerval, *mut libc::itimerval) -> i32| f(w, new, old));
type Its = *const libc::itimerspec;
type Itsm = *mut libc::itimerspec;
wrap!(timerfd_settime(fd: i32, fl: i32, new: Its, old: Itsm) -> [i32] pins |p| { p.one(new, false); p.one(old, true) }
    => |f: unsafe extern "C" fn(i32, i32, Its, Itsm) -> i32| f(fd, fl, new, old));
wrap!(timerfd_gettime(fd: i32, cur: Itsm) -> [i32] pins |p| { p.one(cur, true) }
    => |f: unsafe extern "C" fn(i32, Itsm) -> i32| f(fd, cur));
wrap!(timer_settime(t: libc::timer_t, fl: i32, new: Its, old: Itsm) -> [i32] pins |p| { p.one(new, false); p.one(old, true) }
    => |f: unsafe extern "C" fn(libc::timer_t, i32, Its, Itsm) -> i32| f(t, fl, new, old));
wrap!(timer_gettime(t: libc::timer_t, cur: Itsm) -> [i32] pins |p| { p.one(cur, true) }
    => |f: unsafe extern "C" fn(libc::timer_t, Itsm) -> i32| f(t, cur));
wrap!(splice(fi: i32, oi: *mut i64, fo: i32, oo: *mut i64, n: usize, fl: u32) pins |p| { p.one(oi, true); p.one(oo, true) }
    => |f: unsafe extern "C" fn(i32, *mut i64, i32, *mut i64, usize, u32) -> Ssize| f(fi, oi, fo, oo, n, fl));
type Set = *const libc::sigset_t;
type Info = *mut libc::siginfo_t;
wrap!(sigtimedwait(s: Set, i: Info, t: Ts) -> [i32] pins |p| { p.one(s, false); p.one(i, true); p.one(t, false) }
    => |f: unsafe extern "C" fn(Set, Info, Ts) -> i32| f(s, i, t));
wrap!(sigwaitinfo(s: Set, i: Info) -> [i32] pins |p| { p.one(s, false); p.one(i, true) }
    => |f: unsafe extern "C" fn(Set, Info) -> i32| f(s, i));
wrap!(sigwait(s: Set, sig: *mut i32) -> [i32] pins |p| { p.one(s, false); p.one(sig, true) }
    => |f: unsafe extern "C" fn(Set, *mut i32) -> i32| f(s, sig));
wrap!(sigpending(s: *mut libc::sigset_t) -> [i32] pins |p| { p.one(s, true) }
    => |f: unsafe extern "C" fn(*mut libc::sigset_t) -> i32| f(s));
// Capabilities (libcap's `cap_get_proc` asks into a block it allocates):
// the header (version, pid; the kernel writes the version it takes back)
// and, for versions 2 and 3, two 12-byte data words (one for version 1).
const CAP_HEADER: usize = 8;
const CAP_DATA: usize = 12;
/// `_LINUX_CAPABILITY_VERSION_1`: one data word; later versions two.
const CAP_V1: u32 = 0x1998_0330;
fn cap_words(hdr: *const c_void) -> usize {
    // Read only region memory, pinned (so brought in) before this: a bad
    // pointer elsewhere is the kernel's to refuse, not ours to fault on.
    if !crate::vma::in_regions(hdr as usize) {
        return 2;
    }
    // SAFETY: the caller's header, in a region and pinned.
    let v = unsafe { (hdr as *const u32).read_unaligned() };
    if v == CAP_V1 {
        1
    } else {
        2
    }
}
wrap!(capget(h: Mv, d: Mv) -> [i32]
    pins |p| { p.add(h, CAP_HEADER, true); p.add(d, cap_words(h) * CAP_DATA, true) }
    => |f: unsafe extern "C" fn(Mv, Mv) -> i32| f(h, d));
wrap!(capset(h: Mv, d: Cv) -> [i32]
    pins |p| { p.add(h, CAP_HEADER, true); p.add(d, cap_words(h) * CAP_DATA, false) }
    => |f: unsafe extern "C" fn(Mv, Cv) -> i32| f(h, d));
wrap!(mincore(a: Mv, n: usize, v: *mut u8) -> [i32] pins |p| { p.add(v as Cv, n.div_ceil(PAGE), true) }
    => |f: unsafe extern "C" fn(Mv, usize, *mut u8) -> i32| f(a, n, v));
wrap!(copy_file_range(fi: i32, oi: *mut i64, fo: i32, oo: *mut i64, n: usize, fl: u32)
    pins |p| { p.one(oi, true); p.one(oo, true) }
    => |f: unsafe extern "C" fn(i32, *mut i64, i32, *mut i64, usize, u32) -> Ssize| f(fi, oi, fo, oo, n, fl));
wrap!(signalfd(fd: i32, m: *const libc::sigset_t, fl: i32) -> [i32] pins |p| { p.one(m, false) }
    => |f: unsafe extern "C" fn(i32, *const libc::sigset_t, i32) -> i32| f(fd, m, fl));
// glibc reads and writes the counter with its own read and write.
wrap!(eventfd_read(fd: i32, v: *mut u64) -> [i32] pins |p| { p.one(v, true) }
    => |f: unsafe extern "C" fn(i32, *mut u64) -> i32| f(fd, v));
// glibc's own readlink of /proc/self/fd/N writes the caller's buffer.
wrap!(ttyname_r(fd: i32, buf: *mut libc::c_char, n: usize) -> [i32] pins |p| { p.add(buf as Cv, n, true) }
    => |f: unsafe extern "C" fn(i32, *mut libc::c_char, usize) -> i32| f(fd, buf, n));
/// # Safety
/// As setgroups(2). glibc makes the call in every thread of the process
/// (its set-ID broadcast, so that the threads agree), uzswap's too: a
/// list in region memory had uzswap's own fault handlers read it inside
/// the kernel, each wait on a fault only they could resolve, and the
/// process hung, on every path. A list in the regions is copied out of
/// them for the call, whatever the path.
#[no_mangle]
pub unsafe extern "C" fn setgroups(n: usize, g: *const libc::gid_t) -> i32 {
    let Some(f) = real::setgroups() else {
        return errno_enosys() as i32;
    };
    let bytes = n.saturating_mul(std::mem::size_of::<libc::gid_t>());
    if g.is_null()
        || n == 0
        || !crate::vma::overlaps_regions(g as usize, (g as usize).saturating_add(bytes))
    {
        // SAFETY: the caller's arguments.
        return unsafe { f(n, g) };
    }
    // The copy's memory is glibc's; the list is read by the program's own
    // loads (region memory: faults resolve as any of the program's).
    let mut copy: Vec<libc::gid_t> = {
        let _g = Internal::enter();
        Vec::with_capacity(n)
    };
    // SAFETY: `n` gids at `g`, in region memory, which always reads.
    copy.extend_from_slice(unsafe { std::slice::from_raw_parts(g, n) });
    // SAFETY: the caller's count, a list outside every region.
    let r = unsafe { f(n, copy.as_ptr()) };
    let _g = Internal::enter();
    drop(copy);
    r
}
type Uid = *mut libc::uid_t;
type Gid = *mut libc::gid_t;
wrap!(getresuid(r: Uid, e: Uid, s: Uid) -> [i32] pins |p| { p.one(r, true); p.one(e, true); p.one(s, true) }
    => |f: unsafe extern "C" fn(Uid, Uid, Uid) -> i32| f(r, e, s));
wrap!(getresgid(r: Gid, e: Gid, s: Gid) -> [i32] pins |p| { p.one(r, true); p.one(e, true); p.one(s, true) }
    => |f: unsafe extern "C" fn(Gid, Gid, Gid) -> i32| f(r, e, s));
wrap!(sched_rr_get_interval(pid: libc::pid_t, t: Tsm) -> [i32] pins |p| { p.one(t, true) }
    => |f: unsafe extern "C" fn(libc::pid_t, Tsm) -> i32| f(pid, t));
// The control calls' structure: read by IPC_SET, written by the rest that
// take one (IPC_STAT, the INFO and STAT requests); pinned writable either way.
wrap!(msgctl(id: i32, cmd: i32, b: *mut libc::msqid_ds) -> [i32] pins |p| { if cmd != libc::IPC_RMID { p.one(b, true) } }
    => |f: unsafe extern "C" fn(i32, i32, *mut libc::msqid_ds) -> i32| f(id, cmd, b));
wrap!(shmctl(id: i32, cmd: i32, b: *mut libc::shmid_ds) -> [i32]
    pins |p| { if !matches!(cmd, libc::IPC_RMID | libc::SHM_LOCK | libc::SHM_UNLOCK) { p.one(b, true) } }
    => |f: unsafe extern "C" fn(i32, i32, *mut libc::shmid_ds) -> i32| f(id, cmd, b));
wrap!(memfd_create(name: Cs, fl: u32) -> [i32] pins |p| { p.path(name) }
    => |f: unsafe extern "C" fn(Cs, u32) -> i32| f(name, fl));
wrap!(timer_create(c: libc::clockid_t, ev: *mut libc::sigevent, t: *mut libc::timer_t) -> [i32]
    pins |p| { p.one(ev, false); p.one(t, true) }
    => |f: unsafe extern "C" fn(libc::clockid_t, *mut libc::sigevent, *mut libc::timer_t) -> i32| f(c, ev, t));
// mq_open is variadic (the mode and attributes only with O_CREAT); on
// x86-64 both arrive in registers whether passed or not, and are read
// only with O_CREAT.
type Mqa = *mut libc::mq_attr;
wrap!(mq_open(name: Cs, fl: i32, mode: libc::mode_t, at: Mqa) -> [libc::mqd_t]
    pins |p| { p.path(name); if fl & libc::O_CREAT != 0 { p.one(at, false) } }
    => |f: unsafe extern "C" fn(Cs, i32, libc::mode_t, Mqa) -> libc::mqd_t| f(name, fl, mode, at));
wrap!(mq_notify(q: libc::mqd_t, ev: *const libc::sigevent) -> [i32] pins |p| { p.one(ev, false) }
    => |f: unsafe extern "C" fn(libc::mqd_t, *const libc::sigevent) -> i32| f(q, ev));
wrap!(mq_getattr(q: libc::mqd_t, at: Mqa) -> [i32] pins |p| { p.one(at, true) }
    => |f: unsafe extern "C" fn(libc::mqd_t, Mqa) -> i32| f(q, at));
wrap!(mq_setattr(q: libc::mqd_t, new: *const libc::mq_attr, old: Mqa) -> [i32]
    pins |p| { p.one(new, false); p.one(old, true) }
    => |f: unsafe extern "C" fn(libc::mqd_t, *const libc::mq_attr, Mqa) -> i32| f(q, new, old));
/// A System V message: its type (a long) and then `n` bytes.
const MTYPE: usize = std::mem::size_of::<libc::c_long>();
wrap!(msgsnd(id: i32, m: Cv, n: usize, fl: i32) -> [i32] pins |p| { p.add(m, MTYPE + n, false) }
    => |f: unsafe extern "C" fn(i32, Cv, usize, i32) -> i32| f(id, m, n, fl));
wrap!(msgrcv(id: i32, m: Mv, n: usize, ty: libc::c_long, fl: i32) pins |p| { p.add(m, MTYPE + n, true) }
    => |f: unsafe extern "C" fn(i32, Mv, usize, libc::c_long, i32) -> Ssize| f(id, m, n, ty, fl));
type Sops = *mut libc::sembuf;
wrap!(semop(id: i32, s: Sops, n: usize) -> [i32]
    pins |p| { p.add(s as Cv, n.saturating_mul(std::mem::size_of::<libc::sembuf>()), false) }
    => |f: unsafe extern "C" fn(i32, Sops, usize) -> i32| f(id, s, n));
wrap!(semtimedop(id: i32, s: Sops, n: usize, t: Ts) -> [i32]
    pins |p| { p.add(s as Cv, n.saturating_mul(std::mem::size_of::<libc::sembuf>()), false); p.one(t, false) }
    => |f: unsafe extern "C" fn(i32, Sops, usize, Ts) -> i32| f(id, s, n, t));
wrap!(mq_send(q: libc::mqd_t, m: Cs, n: usize, pr: u32) -> [i32] pins |p| { p.add(m as Cv, n, false) }
    => |f: unsafe extern "C" fn(libc::mqd_t, Cs, usize, u32) -> i32| f(q, m, n, pr));
wrap!(mq_timedsend(q: libc::mqd_t, m: Cs, n: usize, pr: u32, t: Ts) -> [i32] pins |p| { p.add(m as Cv, n, false); p.one(t, false) }
    => |f: unsafe extern "C" fn(libc::mqd_t, Cs, usize, u32, Ts) -> i32| f(q, m, n, pr, t));
wrap!(mq_receive(q: libc::mqd_t, m: *mut libc::c_char, n: usize, pr: *mut u32) pins |p| { p.add(m as Cv, n, true); p.one(pr, true) }
    => |f: unsafe extern "C" fn(libc::mqd_t, *mut libc::c_char, usize, *mut u32) -> Ssize| f(q, m, n, pr));
wrap!(mq_timedreceive(q: libc::mqd_t, m: *mut libc::c_char, n: usize, pr: *mut u32, t: Ts)
    pins |p| { p.add(m as Cv, n, true); p.one(pr, true); p.one(t, false) }
    => |f: unsafe extern "C" fn(libc::mqd_t, *mut libc::c_char, usize, *mut u32, Ts) -> Ssize| f(q, m, n, pr, t));

wrap!(sendfile(o: i32, i: i32, off: *mut i64, n: usize) pins |p| { p.one(off, true) }
    => |f: unsafe extern "C" fn(i32, i32, *mut i64, usize) -> Ssize| f(o, i, off, n));
wrap!(sendfile64(o: i32, i: i32, off: *mut i64, n: usize) pins |p| { p.one(off, true) }
    => |f: unsafe extern "C" fn(i32, i32, *mut i64, usize) -> Ssize| f(o, i, off, n));

// Starting a program: the kernel reads the path, the argument and
// environment vectors and their strings when the child `exec`s, and the
// child of `posix_spawn` shares our memory until then (`environ` is heap
// memory once the program has called `setenv`). The calls return once the
// child has `exec`ed or failed, so the pins cover it. `execve` and its
// family take no pins (called in a `vfork` child, a pin would never be
// dropped): they are given copies outside the regions (`exec.rs`).
extern "C" {
    static environ: *const *const libc::c_char;
}
type Argv = *const *const libc::c_char;
type Pid = *mut libc::pid_t;
type Fa = *const libc::posix_spawn_file_actions_t;
type Attr = *const libc::posix_spawnattr_t;
wrap!(posix_spawn(pid: Pid, pa: Cs, fa: Fa, at: Attr, av: Argv, ev: Argv) -> [i32]
    pins |p| { p.path(pa); p.strv(av); p.strv(ev) }
    => |f: unsafe extern "C" fn(Pid, Cs, Fa, Attr, Argv, Argv) -> i32| f(pid, pa, fa, at, av, ev));
// The child searches PATH in `environ`, not in `ev`.
wrap!(posix_spawnp(pid: Pid, pa: Cs, fa: Fa, at: Attr, av: Argv, ev: Argv) -> [i32]
    pins |p| { p.path(pa); p.strv(av); p.strv(ev); p.strv(environ) }
    => |f: unsafe extern "C" fn(Pid, Cs, Fa, Attr, Argv, Argv) -> i32| f(pid, pa, fa, at, av, ev));
wrap!(system(cmd: Cs) -> [i32]
    pins |p| { p.path(cmd); p.strv(environ) }
    => |f: unsafe extern "C" fn(Cs) -> i32| f(cmd));

// The file actions a spawn child carries out (paths to open, a directory)
// are glibc's copies in an array glibc grows: made with the re-entry guard
// up they are glibc's memory, never evicted, so the child, which runs with
// every signal blocked, reads them without a fault.
macro_rules! actions {
    ($name:ident($($a:ident: $t:ty),*)) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> i32 {
            let _g = crate::active()
                .filter(|st| st.pin_buffers)
                .map(|_| crate::Internal::enter());
            match real::$name() {
                // SAFETY: the caller's arguments.
                Some(f) => unsafe { f($($a),*) },
                None => libc::ENOSYS,
            }
        }
    };
}
type FaMut = *mut libc::posix_spawn_file_actions_t;
actions!(posix_spawn_file_actions_addopen(fa: FaMut, fd: i32, pa: Cs, fl: i32, mo: u32));
actions!(posix_spawn_file_actions_addclose(fa: FaMut, fd: i32));
actions!(posix_spawn_file_actions_adddup2(fa: FaMut, fd: i32, to: i32));
actions!(posix_spawn_file_actions_addchdir_np(fa: FaMut, pa: Cs));
actions!(posix_spawn_file_actions_addfchdir_np(fa: FaMut, fd: i32));

/// `popen`'s command and the environment its child gets, pinned for the
/// call (`streams::popen`).
///
/// # Safety
/// `cmd` is a NUL-terminated string.
pub(crate) unsafe fn pin_spawn(cmd: Cs) -> Option<Pins> {
    let mut p = Pins::new()?;
    // SAFETY: the caller's command; glibc's environment.
    unsafe {
        p.path(cmd);
        p.strv(environ);
    }
    Some(p)
}

/// Random bytes straight into region memory (Python's `os.urandom`, a
/// `bytearray` of them): without the pin, EFAULT where the kernel's faults
/// are not served. mimalloc seeds each thread's heap with this call while it
/// sets the heap up, before any thread-local of ours may be touched (the
/// first touch allocates, which would re-enter mimalloc half-initialised):
/// a buffer outside every region, which its seed is, goes straight through
/// with nothing but the lock-free range check.
///
/// # Safety
/// As getrandom(2).
#[no_mangle]
pub unsafe extern "C" fn getrandom(buf: *mut c_void, n: usize, fl: u32) -> Ssize {
    let _pins = if crate::vma::in_regions(buf as usize) {
        Pins::new().map(|mut p| {
            p.add(buf, n, true);
            p
        })
    } else {
        None
    };
    match real::getrandom() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(buf, n, fl) },
        None => errno_enosys(),
    }
}

/// Several messages at once: each header and what it names, and the
/// lengths the kernel writes back (`msg_len`).
///
/// # Safety
/// `v` points to `n` valid headers, as the call requires.
unsafe fn pin_mmsg(p: &mut Pins, v: *mut libc::mmsghdr, n: u32, write: bool) {
    if v.is_null() {
        return;
    }
    // The kernel writes every entry's `msg_len`, on send too.
    p.add(
        v as *const _,
        n as usize * std::mem::size_of::<libc::mmsghdr>(),
        true,
    );
    for k in 0..n as usize {
        // SAFETY: the caller's array of `n` headers.
        unsafe { p.msg(&(*v.add(k)).msg_hdr, write) };
    }
}

/// # Safety
/// As recvmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: i32,
    v: *mut libc::mmsghdr,
    n: u32,
    fl: i32,
    t: *mut libc::timespec,
) -> i32 {
    let _pins = Pins::new().map(|mut p| {
        // SAFETY: the caller's headers and timeout, as the call requires.
        unsafe { pin_mmsg(&mut p, v, n, true) };
        p.add(t as *const _, std::mem::size_of::<libc::timespec>(), true);
        p
    });
    match real::recvmmsg() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(fd, v, n, fl, t) },
        None => errno_enosys() as i32,
    }
}

/// # Safety
/// As sendmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: i32, v: *mut libc::mmsghdr, n: u32, fl: i32) -> i32 {
    let _pins = Pins::new().map(|mut p| {
        // SAFETY: the caller's headers, as the call requires.
        unsafe { pin_mmsg(&mut p, v, n, false) };
        p
    });
    match real::sendmmsg() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(fd, v, n, fl) },
        None => errno_enosys() as i32,
    }
}

/// # Safety
/// As preadv2(2).
#[no_mangle]
pub unsafe extern "C" fn preadv2(fd: i32, iov: *const iovec, n: i32, off: i64, fl: i32) -> Ssize {
    // SAFETY: the same function.
    unsafe { preadv64v2(fd, iov, n, off, fl) }
}

/// # Safety
/// As pwritev2(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev2(fd: i32, iov: *const iovec, n: i32, off: i64, fl: i32) -> Ssize {
    // SAFETY: the same function.
    unsafe { pwritev64v2(fd, iov, n, off, fl) }
}

/// glibc names the 64-bit-offset calls both ways on 64-bit targets.
///
/// # Safety
/// As pread(2).
#[no_mangle]
pub unsafe extern "C" fn pread(fd: i32, buf: *mut c_void, n: usize, off: i64) -> Ssize {
    // SAFETY: the same function.
    unsafe { pread64(fd, buf, n, off) }
}

/// # Safety
/// As pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn pwrite(fd: i32, buf: *const c_void, n: usize, off: i64) -> Ssize {
    // SAFETY: the same function.
    unsafe { pwrite64(fd, buf, n, off) }
}

/// # Safety
/// As preadv(2).
#[no_mangle]
pub unsafe extern "C" fn preadv(fd: i32, iov: *const iovec, n: i32, off: i64) -> Ssize {
    // SAFETY: the same function.
    unsafe { preadv64(fd, iov, n, off) }
}

/// # Safety
/// As pwritev(2).
#[no_mangle]
pub unsafe extern "C" fn pwritev(fd: i32, iov: *const iovec, n: i32, off: i64) -> Ssize {
    // SAFETY: the same function.
    unsafe { pwritev64(fd, iov, n, off) }
}
