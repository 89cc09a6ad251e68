//! The functions this library stands in front of. The mmap family is called
//! as raw system calls (they need no libc state and must work before
//! anything is resolved); the rest are looked up with `dlsym(RTLD_NEXT)`
//! once, at initialisation, with the re-entry guard up (dlsym allocates).

use libc::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering::*};

extern "C" {
    pub fn __libc_malloc(size: usize) -> *mut libc::c_void;
    pub fn __libc_calloc(n: usize, size: usize) -> *mut libc::c_void;
    pub fn __libc_realloc(p: *mut libc::c_void, size: usize) -> *mut libc::c_void;
    pub fn __libc_memalign(align: usize, size: usize) -> *mut libc::c_void;
    pub fn __libc_free(p: *mut libc::c_void);
    /// glibc's fork (the `fork` symbol is ours): runs the atfork handlers.
    pub fn __fork() -> libc::pid_t;
}

/// The system call `nr` with `args`, past the exported `syscall`
/// (`syscall::direct`) where this library has one of its own.
///
/// # Safety
/// As the call.
unsafe fn sys(nr: libc::c_long, args: &[libc::c_long]) -> libc::c_long {
    let mut a = [0; 6];
    a[..args.len()].copy_from_slice(args);
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: the caller's.
    return unsafe { crate::syscall::direct(nr, a) };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: the caller's.
    return unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) };
}

pub unsafe fn mmap(
    addr: *mut libc::c_void,
    len: usize,
    prot: i32,
    flags: i32,
    fd: i32,
    off: libc::off_t,
) -> *mut libc::c_void {
    // SAFETY: the caller's arguments, passed on unchanged.
    let r = unsafe {
        sys(
            libc::SYS_mmap,
            &[
                addr as _, len as _, prot as _, flags as _, fd as _, off as _,
            ],
        )
    };
    r as *mut libc::c_void
}

pub unsafe fn munmap(addr: *mut libc::c_void, len: usize) -> i32 {
    // SAFETY: as above.
    unsafe { sys(libc::SYS_munmap, &[addr as _, len as _]) as i32 }
}

pub unsafe fn mremap(
    old: *mut libc::c_void,
    old_len: usize,
    new_len: usize,
    flags: i32,
    new_addr: *mut libc::c_void,
) -> *mut libc::c_void {
    // SAFETY: as above.
    unsafe {
        sys(
            libc::SYS_mremap,
            &[
                old as _,
                old_len as _,
                new_len as _,
                flags as _,
                new_addr as _,
            ],
        ) as *mut _
    }
}

pub unsafe fn madvise(addr: *mut libc::c_void, len: usize, advice: i32) -> i32 {
    // SAFETY: as above.
    unsafe { sys(libc::SYS_madvise, &[addr as _, len as _, advice as _]) as i32 }
}

pub unsafe fn mprotect(addr: *mut libc::c_void, len: usize, prot: i32) -> i32 {
    // SAFETY: as above.
    unsafe { sys(libc::SYS_mprotect, &[addr as _, len as _, prot as _]) as i32 }
}

pub unsafe fn mlock2(addr: *const libc::c_void, len: usize, flags: u32) -> i32 {
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_mlock2, addr, len, flags) as i32 }
}

pub unsafe fn munlock(addr: *const libc::c_void, len: usize) -> i32 {
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_munlock, addr, len) as i32 }
}

pub unsafe fn munlockall() -> i32 {
    // SAFETY: takes no arguments.
    unsafe { libc::syscall(libc::SYS_munlockall) as i32 }
}

macro_rules! real_fns {
    ($($name:ident: $ty:ty;)*) => {
        #[allow(non_upper_case_globals)]
        mod slots {
            use super::AtomicUsize;
            $(pub static $name: AtomicUsize = AtomicUsize::new(0);)*
        }
        /// Look every function up (once, at initialisation).
        pub fn resolve() {
            resolve_libc();
            $(
                let name = concat!(stringify!($name), "\0");
                // SAFETY: a NUL-terminated name; RTLD_NEXT finds the
                // definition after ours.
                let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const _) };
                slots::$name.store(p as usize, Release);
            )*
        }
        $(
            /// The next definition of this function, if the lookup found one.
            /// Looked up here if it was not yet: another library's
            /// constructor may call it before ours has run.
            pub fn $name() -> Option<$ty> {
                let mut p = slots::$name.load(Acquire);
                if p == 0 {
                    let name = concat!(stringify!($name), "\0");
                    // SAFETY: as in `resolve`.
                    p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const _) } as usize;
                    slots::$name.store(p, Release);
                }
                // SAFETY: a non-null pointer dlsym returned for this
                // symbol, whose C prototype is `$ty`.
                (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
            }
        )*
    };
}

/// glibc's `malloc_usable_size`, for blocks glibc's allocator made.
/// Not `dlsym(RTLD_NEXT)`: the next definition after ours is another
/// allocator's where the program links one (redis links jemalloc), and
/// that one crashes on glibc's blocks.
static LIBC_MALLOC_USABLE_SIZE: AtomicUsize = AtomicUsize::new(0);

fn resolve_libc() {
    // SAFETY: NUL-terminated names; RTLD_NOLOAD only finds libc, which
    // every dynamically linked program has loaded.
    let p = unsafe {
        let h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if h.is_null() {
            return;
        }
        libc::dlsym(h, c"malloc_usable_size".as_ptr())
    };
    LIBC_MALLOC_USABLE_SIZE.store(p as usize, Release);
}

/// glibc's `malloc_usable_size`, if it was found.
pub fn libc_malloc_usable_size() -> Option<unsafe extern "C" fn(*mut libc::c_void) -> usize> {
    let p = LIBC_MALLOC_USABLE_SIZE.load(Acquire);
    // SAFETY: a non-null pointer dlsym returned for glibc's
    // malloc_usable_size, whose C prototype this is.
    (p != 0).then(|| unsafe {
        std::mem::transmute::<usize, unsafe extern "C" fn(*mut libc::c_void) -> usize>(p)
    })
}

type Ssize = isize;
type Iov = *const libc::iovec;

pub type StartFn = extern "C" fn(*mut libc::c_void) -> *mut libc::c_void;
pub type GlobErr = Option<unsafe extern "C" fn(*const c_char, c_int) -> c_int>;
pub type FtsCmp = Option<unsafe extern "C" fn(*const *const c_void, *const *const c_void) -> c_int>;
type Str = *const c_char;
type File = *mut libc::FILE;
/// scandir's filter and comparison (of `struct dirent` or `dirent64`).
pub type DirFilter = Option<unsafe extern "C" fn(*const c_void) -> c_int>;
pub type DirCmp = Option<unsafe extern "C" fn(*const *const c_void, *const *const c_void) -> c_int>;
/// ftw's and nftw's callbacks (of `struct stat` or `stat64`).
pub type FtwFn = Option<unsafe extern "C" fn(Str, *const c_void, c_int) -> c_int>;
pub type NftwFn = Option<unsafe extern "C" fn(Str, *const c_void, c_int, *mut c_void) -> c_int>;
type List = *mut *mut *mut c_void;
type Mutex = *mut libc::pthread_mutex_t;
type Cond = *mut libc::pthread_cond_t;
type Sem = *mut libc::sem_t;
type RwLock = *mut libc::pthread_rwlock_t;
type Ts = *const libc::timespec;
type Init = Option<unsafe extern "C" fn()>;

real_fns! {
    setlocale: unsafe extern "C" fn(c_int, Str) -> *mut c_char;
    sigsuspend: unsafe extern "C" fn(*const libc::sigset_t) -> c_int;
    sigaltstack: unsafe extern "C" fn(*const libc::stack_t, *mut libc::stack_t) -> c_int;
    pthread_create: unsafe extern "C" fn(*mut libc::pthread_t, *const libc::pthread_attr_t, StartFn, *mut libc::c_void) -> i32;
    read: unsafe extern "C" fn(i32, *mut libc::c_void, usize) -> Ssize;
    write: unsafe extern "C" fn(i32, *const libc::c_void, usize) -> Ssize;
    pread64: unsafe extern "C" fn(i32, *mut libc::c_void, usize, i64) -> Ssize;
    pwrite64: unsafe extern "C" fn(i32, *const libc::c_void, usize, i64) -> Ssize;
    readv: unsafe extern "C" fn(i32, Iov, i32) -> Ssize;
    writev: unsafe extern "C" fn(i32, Iov, i32) -> Ssize;
    preadv64: unsafe extern "C" fn(i32, Iov, i32, i64) -> Ssize;
    pwritev64: unsafe extern "C" fn(i32, Iov, i32, i64) -> Ssize;
    preadv64v2: unsafe extern "C" fn(i32, Iov, i32, i64, i32) -> Ssize;
    pwritev64v2: unsafe extern "C" fn(i32, Iov, i32, i64, i32) -> Ssize;
    recvmmsg: unsafe extern "C" fn(i32, *mut libc::mmsghdr, u32, i32, *mut libc::timespec) -> i32;
    sendmmsg: unsafe extern "C" fn(i32, *mut libc::mmsghdr, u32, i32) -> i32;
    recv: unsafe extern "C" fn(i32, *mut libc::c_void, usize, i32) -> Ssize;
    recvfrom: unsafe extern "C" fn(i32, *mut libc::c_void, usize, i32, *mut libc::sockaddr, *mut libc::socklen_t) -> Ssize;
    recvmsg: unsafe extern "C" fn(i32, *mut libc::msghdr, i32) -> Ssize;
    send: unsafe extern "C" fn(i32, *const libc::c_void, usize, i32) -> Ssize;
    sendto: unsafe extern "C" fn(i32, *const libc::c_void, usize, i32, *const libc::sockaddr, libc::socklen_t) -> Ssize;
    sendmsg: unsafe extern "C" fn(i32, *const libc::msghdr, i32) -> Ssize;
    getrandom: unsafe extern "C" fn(*mut libc::c_void, usize, u32) -> Ssize;
    epoll_wait: unsafe extern "C" fn(i32, *mut libc::epoll_event, i32, i32) -> i32;
    epoll_pwait: unsafe extern "C" fn(i32, *mut libc::epoll_event, i32, i32, *const libc::sigset_t) -> i32;
    epoll_pwait2: unsafe extern "C" fn(i32, *mut libc::epoll_event, i32, *const libc::timespec, *const libc::sigset_t) -> i32;
    poll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, i32) -> i32;
    ppoll: unsafe extern "C" fn(*mut libc::pollfd, libc::nfds_t, *const libc::timespec, *const libc::sigset_t) -> i32;
    select: unsafe extern "C" fn(i32, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> i32;
    pselect: unsafe extern "C" fn(i32, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const libc::sigset_t) -> i32;
    open: unsafe extern "C" fn(Str, c_int, u32) -> c_int;
    open64: unsafe extern "C" fn(Str, c_int, u32) -> c_int;
    openat: unsafe extern "C" fn(c_int, Str, c_int, u32) -> c_int;
    openat64: unsafe extern "C" fn(c_int, Str, c_int, u32) -> c_int;
    creat: unsafe extern "C" fn(Str, u32) -> c_int;
    creat64: unsafe extern "C" fn(Str, u32) -> c_int;
    stat64: unsafe extern "C" fn(Str, *mut libc::stat) -> c_int;
    lstat64: unsafe extern "C" fn(Str, *mut libc::stat) -> c_int;
    fstat64: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;
    fstatat64: unsafe extern "C" fn(c_int, Str, *mut libc::stat, c_int) -> c_int;
    truncate64: unsafe extern "C" fn(Str, i64) -> c_int;
    stat: unsafe extern "C" fn(Str, *mut libc::stat) -> c_int;
    lstat: unsafe extern "C" fn(Str, *mut libc::stat) -> c_int;
    fstat: unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;
    fstatat: unsafe extern "C" fn(c_int, Str, *mut libc::stat, c_int) -> c_int;
    statx: unsafe extern "C" fn(c_int, Str, c_int, u32, *mut libc::statx) -> c_int;
    access: unsafe extern "C" fn(Str, c_int) -> c_int;
    faccessat: unsafe extern "C" fn(c_int, Str, c_int, c_int) -> c_int;
    unlink: unsafe extern "C" fn(Str) -> c_int;
    unlinkat: unsafe extern "C" fn(c_int, Str, c_int) -> c_int;
    rmdir: unsafe extern "C" fn(Str) -> c_int;
    mkdir: unsafe extern "C" fn(Str, u32) -> c_int;
    mkdirat: unsafe extern "C" fn(c_int, Str, u32) -> c_int;
    rename: unsafe extern "C" fn(Str, Str) -> c_int;
    renameat: unsafe extern "C" fn(c_int, Str, c_int, Str) -> c_int;
    renameat2: unsafe extern "C" fn(c_int, Str, c_int, Str, u32) -> c_int;
    link: unsafe extern "C" fn(Str, Str) -> c_int;
    symlink: unsafe extern "C" fn(Str, Str) -> c_int;
    readlink: unsafe extern "C" fn(Str, *mut c_char, usize) -> Ssize;
    readlinkat: unsafe extern "C" fn(c_int, Str, *mut c_char, usize) -> Ssize;
    chdir: unsafe extern "C" fn(Str) -> c_int;
    chmod: unsafe extern "C" fn(Str, u32) -> c_int;
    truncate: unsafe extern "C" fn(Str, i64) -> c_int;
    getdents64: unsafe extern "C" fn(c_int, *mut c_void, usize) -> Ssize;
    posix_spawn: unsafe extern "C" fn(*mut libc::pid_t, Str, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const Str, *const Str) -> c_int;
    posix_spawnp: unsafe extern "C" fn(*mut libc::pid_t, Str, *const libc::posix_spawn_file_actions_t, *const libc::posix_spawnattr_t, *const Str, *const Str) -> c_int;
    system: unsafe extern "C" fn(Str) -> c_int;
    accept: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;
    accept4: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t, c_int) -> c_int;
    connect: unsafe extern "C" fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int;
    bind: unsafe extern "C" fn(c_int, *const libc::sockaddr, libc::socklen_t) -> c_int;
    getsockname: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;
    getpeername: unsafe extern "C" fn(c_int, *mut libc::sockaddr, *mut libc::socklen_t) -> c_int;
    getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut libc::socklen_t) -> c_int;
    setsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, libc::socklen_t) -> c_int;
    socketpair: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_int) -> c_int;
    pipe: unsafe extern "C" fn(*mut c_int) -> c_int;
    pipe2: unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    wait: unsafe extern "C" fn(*mut c_int) -> c_int;
    waitpid: unsafe extern "C" fn(c_int, *mut c_int, c_int) -> c_int;
    wait3: unsafe extern "C" fn(*mut c_int, c_int, *mut libc::rusage) -> c_int;
    wait4: unsafe extern "C" fn(c_int, *mut c_int, c_int, *mut libc::rusage) -> c_int;
    waitid: unsafe extern "C" fn(u32, u32, *mut libc::siginfo_t, c_int) -> c_int;
    getrusage: unsafe extern "C" fn(c_int, *mut libc::rusage) -> c_int;
    uname: unsafe extern "C" fn(*mut libc::utsname) -> c_int;
    sysinfo: unsafe extern "C" fn(*mut libc::sysinfo) -> c_int;
    statfs: unsafe extern "C" fn(Str, *mut libc::statfs) -> c_int;
    fstatfs: unsafe extern "C" fn(c_int, *mut libc::statfs) -> c_int;
    statfs64: unsafe extern "C" fn(Str, *mut libc::statfs64) -> c_int;
    fstatfs64: unsafe extern "C" fn(c_int, *mut libc::statfs64) -> c_int;
    statvfs: unsafe extern "C" fn(Str, *mut libc::statvfs) -> c_int;
    fstatvfs: unsafe extern "C" fn(c_int, *mut libc::statvfs) -> c_int;
    statvfs64: unsafe extern "C" fn(Str, *mut libc::statvfs64) -> c_int;
    fstatvfs64: unsafe extern "C" fn(c_int, *mut libc::statvfs64) -> c_int;
    getrlimit: unsafe extern "C" fn(u32, *mut libc::rlimit) -> c_int;
    getrlimit64: unsafe extern "C" fn(u32, *mut libc::rlimit64) -> c_int;
    setrlimit: unsafe extern "C" fn(u32, *const libc::rlimit) -> c_int;
    setrlimit64: unsafe extern "C" fn(u32, *const libc::rlimit64) -> c_int;
    prlimit: unsafe extern "C" fn(c_int, u32, *const libc::rlimit, *mut libc::rlimit) -> c_int;
    prlimit64: unsafe extern "C" fn(c_int, u32, *const libc::rlimit64, *mut libc::rlimit64) -> c_int;
    getgroups: unsafe extern "C" fn(c_int, *mut libc::gid_t) -> c_int;
    nanosleep: unsafe extern "C" fn(*const libc::timespec, *mut libc::timespec) -> c_int;
    clock_nanosleep: unsafe extern "C" fn(c_int, c_int, *const libc::timespec, *mut libc::timespec) -> c_int;
    utimensat: unsafe extern "C" fn(c_int, Str, *const libc::timespec, c_int) -> c_int;
    futimens: unsafe extern "C" fn(c_int, *const libc::timespec) -> c_int;
    times: unsafe extern "C" fn(*mut libc::tms) -> libc::clock_t;
    memfd_create: unsafe extern "C" fn(Str, u32) -> c_int;
    setgroups: unsafe extern "C" fn(usize, *const libc::gid_t) -> c_int;
    initgroups: unsafe extern "C" fn(Str, libc::gid_t) -> c_int;
    getresuid: unsafe extern "C" fn(*mut libc::uid_t, *mut libc::uid_t, *mut libc::uid_t) -> c_int;
    getresgid: unsafe extern "C" fn(*mut libc::gid_t, *mut libc::gid_t, *mut libc::gid_t) -> c_int;
    sched_rr_get_interval: unsafe extern "C" fn(libc::pid_t, *mut libc::timespec) -> c_int;
    msgctl: unsafe extern "C" fn(c_int, c_int, *mut libc::msqid_ds) -> c_int;
    shmctl: unsafe extern "C" fn(c_int, c_int, *mut libc::shmid_ds) -> c_int;
    pthread_getattr_np: unsafe extern "C" fn(libc::pthread_t, *mut libc::pthread_attr_t) -> c_int;
    ttyname_r: unsafe extern "C" fn(c_int, *mut c_char, usize) -> c_int;
    mincore: unsafe extern "C" fn(*mut c_void, usize, *mut u8) -> c_int;
    copy_file_range: unsafe extern "C" fn(c_int, *mut i64, c_int, *mut i64, usize, u32) -> Ssize;
    signalfd: unsafe extern "C" fn(c_int, *const libc::sigset_t, c_int) -> c_int;
    eventfd_read: unsafe extern "C" fn(c_int, *mut u64) -> c_int;
    capget: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
    capset: unsafe extern "C" fn(*mut c_void, *const c_void) -> c_int;
    timer_create: unsafe extern "C" fn(libc::clockid_t, *mut libc::sigevent, *mut libc::timer_t) -> c_int;
    mq_open: unsafe extern "C" fn(Str, c_int, libc::mode_t, *mut libc::mq_attr) -> libc::mqd_t;
    mq_getattr: unsafe extern "C" fn(libc::mqd_t, *mut libc::mq_attr) -> c_int;
    mq_setattr: unsafe extern "C" fn(libc::mqd_t, *const libc::mq_attr, *mut libc::mq_attr) -> c_int;
    prctl: unsafe extern "C" fn(c_int, libc::c_ulong, libc::c_ulong, libc::c_ulong, libc::c_ulong) -> c_int;
    pthread_setname_np: unsafe extern "C" fn(libc::pthread_t, Str) -> c_int;
    pthread_getname_np: unsafe extern "C" fn(libc::pthread_t, *mut c_char, usize) -> c_int;
    getitimer: unsafe extern "C" fn(c_int, *mut libc::itimerval) -> c_int;
    setitimer: unsafe extern "C" fn(c_int, *const libc::itimerval, *mut libc::itimerval) -> c_int;
    timerfd_settime: unsafe extern "C" fn(c_int, c_int, *const libc::itimerspec, *mut libc::itimerspec) -> c_int;
    timerfd_gettime: unsafe extern "C" fn(c_int, *mut libc::itimerspec) -> c_int;
    timer_settime: unsafe extern "C" fn(libc::timer_t, c_int, *const libc::itimerspec, *mut libc::itimerspec) -> c_int;
    timer_gettime: unsafe extern "C" fn(libc::timer_t, *mut libc::itimerspec) -> c_int;
    splice: unsafe extern "C" fn(c_int, *mut i64, c_int, *mut i64, usize, u32) -> Ssize;
    sigtimedwait: unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t, *const libc::timespec) -> c_int;
    sigwaitinfo: unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t) -> c_int;
    sigwait: unsafe extern "C" fn(*const libc::sigset_t, *mut c_int) -> c_int;
    sigpending: unsafe extern "C" fn(*mut libc::sigset_t) -> c_int;
    msgsnd: unsafe extern "C" fn(c_int, *const c_void, usize, c_int) -> c_int;
    msgrcv: unsafe extern "C" fn(c_int, *mut c_void, usize, libc::c_long, c_int) -> Ssize;
    semop: unsafe extern "C" fn(c_int, *mut libc::sembuf, usize) -> c_int;
    semtimedop: unsafe extern "C" fn(c_int, *mut libc::sembuf, usize, *const libc::timespec) -> c_int;
    mq_send: unsafe extern "C" fn(libc::mqd_t, Str, usize, u32) -> c_int;
    mq_timedsend: unsafe extern "C" fn(libc::mqd_t, Str, usize, u32, *const libc::timespec) -> c_int;
    mq_receive: unsafe extern "C" fn(libc::mqd_t, *mut c_char, usize, *mut u32) -> Ssize;
    mq_timedreceive: unsafe extern "C" fn(libc::mqd_t, *mut c_char, usize, *mut u32, *const libc::timespec) -> Ssize;
    epoll_ctl: unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    sched_getaffinity: unsafe extern "C" fn(c_int, usize, *mut libc::cpu_set_t) -> c_int;
    sched_setaffinity: unsafe extern "C" fn(c_int, usize, *const libc::cpu_set_t) -> c_int;
    pthread_getaffinity_np: unsafe extern "C" fn(libc::pthread_t, usize, *mut libc::cpu_set_t) -> c_int;
    pthread_setaffinity_np: unsafe extern "C" fn(libc::pthread_t, usize, *const libc::cpu_set_t) -> c_int;
    sched_setparam: unsafe extern "C" fn(libc::pid_t, *const libc::sched_param) -> c_int;
    sched_getparam: unsafe extern "C" fn(libc::pid_t, *mut libc::sched_param) -> c_int;
    sched_setscheduler: unsafe extern "C" fn(libc::pid_t, c_int, *const libc::sched_param) -> c_int;
    process_vm_readv: unsafe extern "C" fn(libc::pid_t, Iov, libc::c_ulong, Iov, libc::c_ulong, libc::c_ulong) -> Ssize;
    process_vm_writev: unsafe extern "C" fn(libc::pid_t, Iov, libc::c_ulong, Iov, libc::c_ulong, libc::c_ulong) -> Ssize;
    vmsplice: unsafe extern "C" fn(c_int, Iov, usize, libc::c_uint) -> Ssize;
    clock_gettime: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> c_int;
    clock_getres: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> c_int;
    sendfile: unsafe extern "C" fn(c_int, c_int, *mut i64, usize) -> Ssize;
    sendfile64: unsafe extern "C" fn(c_int, c_int, *mut i64, usize) -> Ssize;
    chown: unsafe extern "C" fn(Str, u32, u32) -> c_int;
    lchown: unsafe extern "C" fn(Str, u32, u32) -> c_int;
    fchownat: unsafe extern "C" fn(c_int, Str, u32, u32, c_int) -> c_int;
    fchmodat: unsafe extern "C" fn(c_int, Str, u32, c_int) -> c_int;
    linkat: unsafe extern "C" fn(c_int, Str, c_int, Str, c_int) -> c_int;
    symlinkat: unsafe extern "C" fn(Str, c_int, Str) -> c_int;
    mkfifo: unsafe extern "C" fn(Str, u32) -> c_int;
    mkfifoat: unsafe extern "C" fn(c_int, Str, u32) -> c_int;
    mknod: unsafe extern "C" fn(Str, u32, u64) -> c_int;
    mknodat: unsafe extern "C" fn(c_int, Str, u32, u64) -> c_int;
    utime: unsafe extern "C" fn(Str, *const libc::utimbuf) -> c_int;
    utimes: unsafe extern "C" fn(Str, *const libc::timeval) -> c_int;
    lutimes: unsafe extern "C" fn(Str, *const libc::timeval) -> c_int;
    futimesat: unsafe extern "C" fn(c_int, Str, *const libc::timeval) -> c_int;
    mq_notify: unsafe extern "C" fn(libc::mqd_t, *const libc::sigevent) -> c_int;
    chroot: unsafe extern "C" fn(Str) -> c_int;
    inotify_add_watch: unsafe extern "C" fn(c_int, Str, u32) -> c_int;
    getxattr: unsafe extern "C" fn(Str, Str, *mut c_void, usize) -> Ssize;
    lgetxattr: unsafe extern "C" fn(Str, Str, *mut c_void, usize) -> Ssize;
    fgetxattr: unsafe extern "C" fn(c_int, Str, *mut c_void, usize) -> Ssize;
    setxattr: unsafe extern "C" fn(Str, Str, *const c_void, usize, c_int) -> c_int;
    lsetxattr: unsafe extern "C" fn(Str, Str, *const c_void, usize, c_int) -> c_int;
    fsetxattr: unsafe extern "C" fn(c_int, Str, *const c_void, usize, c_int) -> c_int;
    listxattr: unsafe extern "C" fn(Str, *mut c_char, usize) -> Ssize;
    llistxattr: unsafe extern "C" fn(Str, *mut c_char, usize) -> Ssize;
    flistxattr: unsafe extern "C" fn(c_int, *mut c_char, usize) -> Ssize;
    removexattr: unsafe extern "C" fn(Str, Str) -> c_int;
    lremovexattr: unsafe extern "C" fn(Str, Str) -> c_int;
    fremovexattr: unsafe extern "C" fn(c_int, Str) -> c_int;
    getentropy: unsafe extern "C" fn(*mut c_void, usize) -> c_int;
    // Variadic in C; the third argument is read as a pointer-sized word
    // either way (x86-64 passes it in the same register).
    ioctl: unsafe extern "C" fn(c_int, libc::c_ulong, *mut c_void) -> c_int;
    fcntl: unsafe extern "C" fn(c_int, c_int, *mut c_void) -> c_int;
    fcntl64: unsafe extern "C" fn(c_int, c_int, *mut c_void) -> c_int;
    // Starting a new image (`exec.rs`).
    execve: unsafe extern "C" fn(Str, *const Str, *const Str) -> c_int;
    execvpe: unsafe extern "C" fn(Str, *const Str, *const Str) -> c_int;
    fexecve: unsafe extern "C" fn(c_int, *const Str, *const Str) -> c_int;
    execveat: unsafe extern "C" fn(c_int, Str, *const Str, *const Str, c_int) -> c_int;
    posix_spawn_file_actions_addopen: unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, c_int, Str, c_int, u32) -> c_int;
    posix_spawn_file_actions_addclose: unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, c_int) -> c_int;
    posix_spawn_file_actions_adddup2: unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, c_int, c_int) -> c_int;
    posix_spawn_file_actions_addchdir_np: unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, Str) -> c_int;
    posix_spawn_file_actions_addfchdir_np: unsafe extern "C" fn(*mut libc::posix_spawn_file_actions_t, c_int) -> c_int;
    // Signals (`signals.rs`).
    sigaction: unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    bsd_signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    __sysv_signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    sysv_signal: unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    sigprocmask: unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
    pthread_sigmask: unsafe extern "C" fn(c_int, *const libc::sigset_t, *mut libc::sigset_t) -> c_int;
    // Streams (`streams.rs`).
    fopen: unsafe extern "C" fn(Str, Str) -> File;
    fopen64: unsafe extern "C" fn(Str, Str) -> File;
    fdopen: unsafe extern "C" fn(c_int, Str) -> File;
    freopen: unsafe extern "C" fn(Str, Str, File) -> File;
    freopen64: unsafe extern "C" fn(Str, Str, File) -> File;
    tmpfile: unsafe extern "C" fn() -> File;
    tmpfile64: unsafe extern "C" fn() -> File;
    popen: unsafe extern "C" fn(Str, Str) -> File;
    fclose: unsafe extern "C" fn(File) -> c_int;
    pclose: unsafe extern "C" fn(File) -> c_int;
    fread: unsafe extern "C" fn(*mut c_void, usize, usize, File) -> usize;
    fread_unlocked: unsafe extern "C" fn(*mut c_void, usize, usize, File) -> usize;
    fwrite: unsafe extern "C" fn(*const c_void, usize, usize, File) -> usize;
    fwrite_unlocked: unsafe extern "C" fn(*const c_void, usize, usize, File) -> usize;
    fputs: unsafe extern "C" fn(Str, File) -> c_int;
    fputs_unlocked: unsafe extern "C" fn(Str, File) -> c_int;
    puts: unsafe extern "C" fn(Str) -> c_int;
    setvbuf: unsafe extern "C" fn(File, *mut c_char, c_int, usize) -> c_int;
    setbuffer: unsafe extern "C" fn(File, *mut c_char, usize);
    opendir: unsafe extern "C" fn(Str) -> *mut libc::DIR;
    fdopendir: unsafe extern "C" fn(c_int) -> *mut libc::DIR;
    getcwd: unsafe extern "C" fn(*mut c_char, usize) -> *mut c_char;
    realpath: unsafe extern "C" fn(Str, *mut c_char) -> *mut c_char;
    canonicalize_file_name: unsafe extern "C" fn(Str) -> *mut c_char;
    glob: unsafe extern "C" fn(Str, c_int, GlobErr, *mut libc::glob_t) -> c_int;
    glob64: unsafe extern "C" fn(Str, c_int, GlobErr, *mut libc::glob64_t) -> c_int;
    fts_open: unsafe extern "C" fn(*const *mut c_char, c_int, FtsCmp) -> *mut c_void;
    scandir: unsafe extern "C" fn(Str, List, DirFilter, DirCmp) -> c_int;
    scandir64: unsafe extern "C" fn(Str, List, DirFilter, DirCmp) -> c_int;
    scandirat: unsafe extern "C" fn(c_int, Str, List, DirFilter, DirCmp) -> c_int;
    scandirat64: unsafe extern "C" fn(c_int, Str, List, DirFilter, DirCmp) -> c_int;
    ftw: unsafe extern "C" fn(Str, FtwFn, c_int) -> c_int;
    ftw64: unsafe extern "C" fn(Str, FtwFn, c_int) -> c_int;
    nftw: unsafe extern "C" fn(Str, NftwFn, c_int, c_int) -> c_int;
    nftw64: unsafe extern "C" fn(Str, NftwFn, c_int, c_int) -> c_int;
    setmntent: unsafe extern "C" fn(Str, Str) -> File;
    fts_read: unsafe extern "C" fn(*mut c_void) -> *mut c_void;
    fts_children: unsafe extern "C" fn(*mut c_void, c_int) -> *mut c_void;
    fts_close: unsafe extern "C" fn(*mut c_void) -> c_int;
    getpwnam: unsafe extern "C" fn(Str) -> *mut libc::passwd;
    getpwuid: unsafe extern "C" fn(libc::uid_t) -> *mut libc::passwd;
    getgrnam: unsafe extern "C" fn(Str) -> *mut libc::group;
    getgrgid: unsafe extern "C" fn(libc::gid_t) -> *mut libc::group;
    getpwnam_r: unsafe extern "C" fn(Str, *mut libc::passwd, *mut c_char, usize, *mut *mut libc::passwd) -> c_int;
    getpwuid_r: unsafe extern "C" fn(libc::uid_t, *mut libc::passwd, *mut c_char, usize, *mut *mut libc::passwd) -> c_int;
    getgrnam_r: unsafe extern "C" fn(Str, *mut libc::group, *mut c_char, usize, *mut *mut libc::group) -> c_int;
    getgrgid_r: unsafe extern "C" fn(libc::gid_t, *mut libc::group, *mut c_char, usize, *mut *mut libc::group) -> c_int;
    getaddrinfo: unsafe extern "C" fn(Str, Str, *const libc::addrinfo, *mut *mut libc::addrinfo) -> c_int;
    getnameinfo: unsafe extern "C" fn(*const libc::sockaddr, libc::socklen_t, *mut c_char, libc::socklen_t, *mut c_char, libc::socklen_t, c_int) -> c_int;
    gethostbyname: unsafe extern "C" fn(Str) -> *mut libc::hostent;
    // Waits on futex words (`waits.rs`).
    pthread_mutex_lock: unsafe extern "C" fn(Mutex) -> c_int;
    pthread_mutex_trylock: unsafe extern "C" fn(Mutex) -> c_int;
    pthread_mutex_timedlock: unsafe extern "C" fn(Mutex, Ts) -> c_int;
    pthread_mutex_clocklock: unsafe extern "C" fn(Mutex, libc::clockid_t, Ts) -> c_int;
    pthread_mutex_unlock: unsafe extern "C" fn(Mutex) -> c_int;
    pthread_cond_wait: unsafe extern "C" fn(Cond, Mutex) -> c_int;
    pthread_cond_timedwait: unsafe extern "C" fn(Cond, Mutex, Ts) -> c_int;
    pthread_cond_clockwait: unsafe extern "C" fn(Cond, Mutex, libc::clockid_t, Ts) -> c_int;
    pthread_cond_signal: unsafe extern "C" fn(Cond) -> c_int;
    pthread_cond_broadcast: unsafe extern "C" fn(Cond) -> c_int;
    pthread_cond_destroy: unsafe extern "C" fn(Cond) -> c_int;
    sem_wait: unsafe extern "C" fn(Sem) -> c_int;
    sem_trywait: unsafe extern "C" fn(Sem) -> c_int;
    sem_timedwait: unsafe extern "C" fn(Sem, Ts) -> c_int;
    sem_clockwait: unsafe extern "C" fn(Sem, libc::clockid_t, Ts) -> c_int;
    pthread_rwlock_rdlock: unsafe extern "C" fn(RwLock) -> c_int;
    pthread_rwlock_wrlock: unsafe extern "C" fn(RwLock) -> c_int;
    pthread_rwlock_tryrdlock: unsafe extern "C" fn(RwLock) -> c_int;
    pthread_rwlock_trywrlock: unsafe extern "C" fn(RwLock) -> c_int;
    pthread_rwlock_timedrdlock: unsafe extern "C" fn(RwLock, Ts) -> c_int;
    pthread_rwlock_timedwrlock: unsafe extern "C" fn(RwLock, Ts) -> c_int;
    pthread_rwlock_clockrdlock: unsafe extern "C" fn(RwLock, libc::clockid_t, Ts) -> c_int;
    pthread_rwlock_clockwrlock: unsafe extern "C" fn(RwLock, libc::clockid_t, Ts) -> c_int;
    pthread_barrier_wait: unsafe extern "C" fn(*mut libc::pthread_barrier_t) -> c_int;
    pthread_barrier_destroy: unsafe extern "C" fn(*mut libc::pthread_barrier_t) -> c_int;
    pthread_once: unsafe extern "C" fn(*mut libc::pthread_once_t, Init) -> c_int;
    mtx_lock: unsafe extern "C" fn(Mutex) -> c_int;
    mtx_trylock: unsafe extern "C" fn(Mutex) -> c_int;
    mtx_timedlock: unsafe extern "C" fn(Mutex, Ts) -> c_int;
    cnd_wait: unsafe extern "C" fn(Cond, Mutex) -> c_int;
    cnd_timedwait: unsafe extern "C" fn(Cond, Mutex, Ts) -> c_int;
    cnd_signal: unsafe extern "C" fn(Cond) -> c_int;
    cnd_broadcast: unsafe extern "C" fn(Cond) -> c_int;
    call_once: unsafe extern "C" fn(*mut libc::pthread_once_t, Init);
    // Joins (`stacks.rs`).
    pthread_join: unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void) -> c_int;
    pthread_tryjoin_np: unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void) -> c_int;
    pthread_timedjoin_np: unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void, Ts) -> c_int;
    pthread_clockjoin_np: unsafe extern "C" fn(libc::pthread_t, *mut *mut c_void, libc::clockid_t, Ts) -> c_int;
}
