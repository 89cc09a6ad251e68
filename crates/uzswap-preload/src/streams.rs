//! stdio and directory streams, and the other libc calls that allocate a
//! buffer and hand it to the kernel themselves, where the kernel does not
//! hand us the faults it takes inside a system call
//! (`KernelFaults::NotServed`: `UFFD_USER_MODE_ONLY`, or signal mode).
//!
//! The wrappers in `buffers` see only the system calls a program makes
//! through their dynamic symbols. glibc's own calls go straight to the
//! kernel: stdio fills and drains a `FILE`'s buffer with its internal
//! `read`/`write`, reads a large `fread` straight into the caller's buffer
//! and writes a large `fwrite` straight from it; `readdir` fills the
//! `DIR`'s buffer with `getdents64`; `getcwd(NULL, 0)`, `realpath` and the
//! name-service lookups allocate a buffer and have the kernel fill it. On
//! this path each of those failed with EFAULT where the buffer was evicted
//! or never touched: GNU sort, which `fread`s its input into a fresh heap
//! buffer, stopped at once with "read failed: Bad address", and an output
//! stream whose buffer was evicted before its flush would lose its data.
//!
//! So on this path:
//! - the buffers stdio and the directory calls allocate come from glibc's
//!   heap, outside every region: each stream is given its buffer as it is
//!   opened (`_IO_doallocbuf`, what stdio's first read or write would do),
//!   with the re-entry guard up, so the allocation is not the program's;
//!   the standard streams get theirs at initialisation. They are small (a
//!   block each) and uzswap's own memory, outside the budget;
//! - a buffer the program gives a stream (`setvbuf`) is pinned while the
//!   stream uses it;
//! - `fread`/`fwrite`/`fputs`/`puts` pin the caller's bytes where stdio
//!   would move them in one direct transfer (a request of at least the
//!   stream's buffer size, glibc's rule);
//! - the calls that allocate and then fill (`getcwd`, `realpath`,
//!   `setmntent`'s stream, the passwd/group/host lookups) run with the guard up, so what
//!   they allocate is glibc's (our `free` and `realloc` take either kind).
//!
//! The calls that also run the program's callbacks (`scandir`, `ftw`,
//! `nftw`, `fts`, `glob`) are in `callbacks.rs`. What is still not covered
//! (docs/ARCHITECTURE.md): the printf family writing one argument of at
//! least a buffer's size, straight from the program's memory, where an
//! eviction falls between glibc's read of the argument and the write.
//! Where faults are served (root, or a member of `uzswap setup`'s group)
//! none of this runs: each wrapper costs a load and a branch.
//!
//! Locking: the table of pinned stream buffers is a leaf lock; pins are
//! made with it released.

use crate::buffers::Pins;
use crate::{real, Internal};
use libc::{c_char, c_int, c_void, size_t, FILE};
use parking_lot::Mutex;

/// The start of glibc's `struct _IO_FILE` (<bits/types/struct_FILE.h>, an
/// ABI glibc keeps): enough to read the stream's buffer bounds.
#[repr(C)]
struct FileHead {
    flags: c_int,
    read_ptr: *mut c_char,
    read_end: *mut c_char,
    read_base: *mut c_char,
    write_base: *mut c_char,
    write_ptr: *mut c_char,
    write_end: *mut c_char,
    buf_base: *mut c_char,
    buf_end: *mut c_char,
}

extern "C" {
    /// Give a stream its buffer now, as its first read or write would.
    fn _IO_doallocbuf(fp: *mut FILE);
    fn flockfile(fp: *mut FILE);
    fn funlockfile(fp: *mut FILE);
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
}

/// Whether this call needs the streams' measures: an active instance whose
/// kernel faults are not served, on a program thread.
pub(crate) fn guarded() -> bool {
    crate::active().is_some_and(|st| st.pin_buffers)
}

/// The stream's buffer size (0: none yet). stdio moves a request of at
/// least this many bytes (or any, without a buffer) in one direct
/// transfer between the caller's memory and the kernel.
///
/// # Safety
/// `fp` is a valid stream.
unsafe fn block_size(fp: *mut FILE) -> usize {
    if fp.is_null() {
        return 0;
    }
    // SAFETY: a valid stream starts with this header.
    let h = unsafe { &*(fp as *const FileHead) };
    (h.buf_end as usize).saturating_sub(h.buf_base as usize)
}

/// Whether a transfer of `n` bytes through `fp` may go straight between
/// the caller's memory and the kernel (glibc's `_IO_file_xsgetn` and
/// `_IO_new_file_xsputn`: whole blocks of a request that does not fit the
/// buffer go direct; with no buffer, or one under 128 bytes, everything
/// may).
///
/// # Safety
/// `fp` is a valid stream.
unsafe fn direct(fp: *mut FILE, n: usize) -> bool {
    // SAFETY: the caller's stream.
    let b = unsafe { block_size(fp) };
    // Under 128 bytes of buffer glibc writes what does not fit whole.
    n > 0 && (b < 128 || n >= b)
}

/// Give stream `fp` its buffer from glibc's heap now (the guard is up in
/// the caller). A stream that has one keeps it.
///
/// # Safety
/// `fp` is null or a valid stream.
unsafe fn own_buffer(fp: *mut FILE) {
    if fp.is_null() {
        return;
    }
    // SAFETY: a valid stream; stdio's own allocation, under the stream's
    // lock as stdio takes it.
    unsafe {
        flockfile(fp);
        _IO_doallocbuf(fp);
        funlockfile(fp);
    }
}

/// At initialisation, on this path: the standard streams' buffers come
/// from glibc's heap (stdio would allocate them at their first use, from
/// the program's, in a region).
pub fn init(pin_buffers: bool) {
    if !pin_buffers {
        return;
    }
    let _g = Internal::enter();
    // SAFETY: glibc's standard streams, valid for the process's life.
    unsafe {
        own_buffer(stdin);
        own_buffer(stdout);
        own_buffer(stderr);
    }
}

fn errno_enosys<T>(v: T) -> T {
    crate::set_errno(libc::ENOSYS);
    v
}

/// A stream's buffer of the program's and its pin.
type UserBuffer = (usize, (usize, usize), uzswap::region::PinGuard<'static>);

/// Buffers programs gave their streams (`setvbuf`), pinned while the
/// stream lives: (stream, (buffer, length), pin).
static USER_BUFFERS: Mutex<Vec<UserBuffer>> = Mutex::new(Vec::new());

/// In a forked child that has taken its memory over with an instance of its
/// own (`st`): the streams' buffers pinned there, the parent's pins leaked
/// (they are its instance's). Skipped where another thread of the parent
/// held the table at the fork.
pub fn after_fork(st: &'static crate::State) {
    let Some(mut t) = USER_BUFFERS.try_lock() else {
        return;
    };
    for (_, (buf, len), pin) in t.iter_mut() {
        std::mem::forget(std::mem::replace(pin, st.uz.pin(*buf, *len, true)));
    }
}

/// Stream `fp` now uses `buf..buf+len` (null: its own buffer): pin the
/// program's, drop any pin of the buffer it had.
fn set_user_buffer(fp: *mut FILE, buf: *mut c_char, len: usize) {
    let pin = if buf.is_null() || len == 0 || !crate::vma::in_regions(buf as usize) {
        None
    } else {
        crate::active().map(|st| {
            let _g = Internal::enter();
            let pin = st.uz.pin(buf as usize, len, true);
            (fp as usize, (buf as usize, len), pin)
        })
    };
    let old: Vec<_> = {
        let mut t = USER_BUFFERS.lock();
        let old = t
            .iter()
            .position(|(f, _, _)| *f == fp as usize)
            .map(|i| t.swap_remove(i));
        if let Some(p) = pin {
            t.push(p);
        }
        old.into_iter().collect()
    };
    let _g = Internal::enter();
    drop(old);
}

/// A call that allocates (a stream, a directory stream, a result) and then
/// has the kernel fill or drain what it allocated: with the guard up its
/// allocations are glibc's, outside every region.
macro_rules! outside {
    ($name:ident($($a:ident: $t:ty),*) -> $r:ty, $fail:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            let _g = guarded().then(Internal::enter);
            match real::$name() {
                // SAFETY: the caller's arguments, to the function we stand
                // in front of.
                Some(f) => unsafe { f($($a),*) },
                None => errno_enosys($fail),
            }
        }
    };
}

/// A call that opens a stream: its buffer is given at once, from glibc.
macro_rules! opens {
    ($name:ident($($a:ident: $t:ty),*) $(path $path:ident)?) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> *mut FILE {
            let g = guarded();
            // The path glibc's internal `open` reads.
            let _pins = g.then(Pins::new).flatten().map(|mut _p| {
                // SAFETY: the caller's path, a NUL-terminated string.
                $(unsafe { _p.path($path) };)?
                _p
            });
            let _g = g.then(Internal::enter);
            let fp = match real::$name() {
                // SAFETY: the caller's arguments.
                Some(f) => unsafe { f($($a),*) },
                None => errno_enosys(std::ptr::null_mut()),
            };
            if g {
                // SAFETY: null or the stream just opened.
                unsafe { own_buffer(fp) };
            }
            fp
        }
    };
}

opens!(fopen(path: *const c_char, mode: *const c_char) path path);
opens!(fopen64(path: *const c_char, mode: *const c_char) path path);
opens!(fdopen(fd: c_int, mode: *const c_char));
opens!(freopen(path: *const c_char, mode: *const c_char, fp: *mut FILE) path path);
opens!(freopen64(path: *const c_char, mode: *const c_char, fp: *mut FILE) path path);
opens!(setmntent(path: *const c_char, mode: *const c_char) path path);
opens!(tmpfile());
opens!(tmpfile64());
/// # Safety
/// As popen(3): its stream's buffer from glibc, and its command and
/// environment pinned until the child has `exec`ed.
#[no_mangle]
pub unsafe extern "C" fn popen(cmd: *const c_char, mode: *const c_char) -> *mut FILE {
    let g = guarded();
    let _pins = if g {
        // SAFETY: the caller's command.
        unsafe { crate::buffers::pin_spawn(cmd) }
    } else {
        None
    };
    let _g = g.then(Internal::enter);
    let fp = match real::popen() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(cmd, mode) },
        None => errno_enosys(std::ptr::null_mut()),
    };
    if g {
        // SAFETY: null or the stream just opened.
        unsafe { own_buffer(fp) };
    }
    fp
}

/// # Safety
/// As opendir(3): the `DIR` (and its buffer) from glibc, the path pinned.
#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut libc::DIR {
    let g = guarded();
    let _pins = g.then(Pins::new).flatten().map(|mut p| {
        // SAFETY: the caller's path.
        unsafe { p.path(path) };
        p
    });
    let _g = g.then(Internal::enter);
    match real::opendir() {
        // SAFETY: the caller's argument.
        Some(f) => unsafe { f(path) },
        None => errno_enosys(std::ptr::null_mut()),
    }
}
outside!(fdopendir(fd: c_int) -> *mut libc::DIR, std::ptr::null_mut());
/// # Safety
/// As getcwd(3): a buffer it allocates comes from glibc; the caller's is
/// pinned, as the kernel writes it.
#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, n: size_t) -> *mut c_char {
    let g = guarded();
    let _pins = g.then(Pins::new).flatten().map(|mut p| {
        p.add(buf as *const c_void, n, true);
        p
    });
    let _g = g.then(Internal::enter);
    match real::getcwd() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(buf, n) },
        None => errno_enosys(std::ptr::null_mut()),
    }
}
outside!(realpath(path: *const c_char, out: *mut c_char) -> *mut c_char, std::ptr::null_mut());
outside!(canonicalize_file_name(path: *const c_char) -> *mut c_char, std::ptr::null_mut());
/// # Safety
/// As initgroups(3): it builds the group list with glibc's allocator and
/// hands it to `setgroups`, which glibc makes in every thread, uzswap's
/// too (see `buffers::setgroups`): the list must be outside the regions
/// on every path, not only where faults are not served.
#[no_mangle]
pub unsafe extern "C" fn initgroups(user: *const c_char, group: libc::gid_t) -> c_int {
    let _pins = guarded().then(Pins::new).flatten().map(|mut p| {
        // SAFETY: the caller's name.
        unsafe { p.path(user) };
        p
    });
    let _g = crate::active().is_some().then(Internal::enter);
    match real::initgroups() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(user, group) },
        None => errno_enosys(-1),
    }
}
// The main thread's attributes come from /proc/self/maps, read through a
// stream glibc opens itself (16 of 20 calls failed after the heap churned).
outside!(pthread_getattr_np(t: libc::pthread_t, at: *mut libc::pthread_attr_t) -> c_int, libc::ENOSYS);
outside!(getpwnam(name: *const c_char) -> *mut libc::passwd, std::ptr::null_mut());
outside!(getpwuid(uid: libc::uid_t) -> *mut libc::passwd, std::ptr::null_mut());
outside!(getgrnam(name: *const c_char) -> *mut libc::group, std::ptr::null_mut());
outside!(getgrgid(gid: libc::gid_t) -> *mut libc::group, std::ptr::null_mut());
outside!(getpwnam_r(name: *const c_char, pw: *mut libc::passwd, buf: *mut c_char, n: size_t, out: *mut *mut libc::passwd) -> c_int, libc::ENOSYS);
outside!(getpwuid_r(uid: libc::uid_t, pw: *mut libc::passwd, buf: *mut c_char, n: size_t, out: *mut *mut libc::passwd) -> c_int, libc::ENOSYS);
outside!(getgrnam_r(name: *const c_char, gr: *mut libc::group, buf: *mut c_char, n: size_t, out: *mut *mut libc::group) -> c_int, libc::ENOSYS);
outside!(getgrgid_r(gid: libc::gid_t, gr: *mut libc::group, buf: *mut c_char, n: size_t, out: *mut *mut libc::group) -> c_int, libc::ENOSYS);
outside!(getaddrinfo(node: *const c_char, svc: *const c_char, hints: *const libc::addrinfo, res: *mut *mut libc::addrinfo) -> c_int, libc::EAI_SYSTEM);
outside!(getnameinfo(sa: *const libc::sockaddr, sl: libc::socklen_t, host: *mut c_char, hl: libc::socklen_t, serv: *mut c_char, svl: libc::socklen_t, fl: c_int) -> c_int, libc::EAI_SYSTEM);
outside!(gethostbyname(name: *const c_char) -> *mut libc::hostent, std::ptr::null_mut());

/// The caller's `total` bytes at `p`, pinned (`write`: writable) where
/// stdio moves them straight between them and the kernel through `fp`.
///
/// # Safety
/// `fp` is a valid stream.
unsafe fn pin_direct(p: *const c_void, total: usize, fp: *mut FILE, write: bool) -> Option<Pins> {
    // SAFETY: the caller's stream.
    if !unsafe { direct(fp, total) } {
        return None;
    }
    let mut pins = Pins::new()?;
    pins.add(p, total, write);
    Some(pins)
}

/// `fread`/`fwrite` and their unlocked forms (`$write`: the kernel writes
/// the caller's bytes, as a read does).
macro_rules! transfers {
    ($name:ident, $ptr:ty, $write:expr) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(p: $ptr, size: size_t, n: size_t, fp: *mut FILE) -> size_t {
            let g = guarded();
            let total = size.saturating_mul(n);
            let _pins = if g {
                // SAFETY: the caller's bytes and stream.
                unsafe { pin_direct(p as *const c_void, total, fp, $write) }
            } else {
                None
            };
            let _g = g.then(Internal::enter);
            match real::$name() {
                // SAFETY: the caller's arguments.
                Some(f) => unsafe { f(p, size, n, fp) },
                None => errno_enosys(0),
            }
        }
    };
}

transfers!(fread, *mut c_void, true);
transfers!(fread_unlocked, *mut c_void, true);
transfers!(fwrite, *const c_void, false);
transfers!(fwrite_unlocked, *const c_void, false);

/// A string written to `fp`: pinned where stdio would write it direct.
///
/// # Safety
/// `s` is a NUL-terminated string, `fp` a valid stream (or stdout).
unsafe fn pin_string(s: *const c_char, fp: *mut FILE) -> Option<Option<Pins>> {
    if s.is_null() || !crate::vma::in_regions(s as usize) {
        return None;
    }
    // SAFETY: the caller's string.
    let n = unsafe { libc::strlen(s) };
    // SAFETY: the caller's stream.
    if !unsafe { direct(fp, n) } {
        return None;
    }
    let mut pins = Pins::new();
    if let Some(p) = pins.as_mut() {
        p.add(s as *const c_void, n, false);
    }
    Some(pins)
}

macro_rules! puts_to {
    ($name:ident) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(s: *const c_char, fp: *mut FILE) -> c_int {
            let g = guarded();
            let _pins = if g {
                // SAFETY: the caller's string and stream.
                unsafe { pin_string(s, fp) }
            } else {
                None
            };
            let _g = g.then(Internal::enter);
            match real::$name() {
                // SAFETY: the caller's arguments.
                Some(f) => unsafe { f(s, fp) },
                None => errno_enosys(libc::EOF),
            }
        }
    };
}

puts_to!(fputs);
puts_to!(fputs_unlocked);

/// # Safety
/// As puts(3).
#[no_mangle]
pub unsafe extern "C" fn puts(s: *const c_char) -> c_int {
    let g = guarded();
    let _pins = if g {
        // SAFETY: the caller's string; glibc's stdout.
        unsafe { pin_string(s, stdout) }
    } else {
        None
    };
    let _g = g.then(Internal::enter);
    match real::puts() {
        // SAFETY: the caller's argument.
        Some(f) => unsafe { f(s) },
        None => errno_enosys(libc::EOF),
    }
}

/// # Safety
/// As setvbuf(3).
#[no_mangle]
pub unsafe extern "C" fn setvbuf(fp: *mut FILE, buf: *mut c_char, mode: c_int, n: size_t) -> c_int {
    let g = guarded();
    let user = if mode == libc::_IONBF {
        std::ptr::null_mut()
    } else {
        buf
    };
    if g {
        set_user_buffer(fp, user, n);
    }
    let _g = g.then(Internal::enter);
    match real::setvbuf() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(fp, buf, mode, n) },
        None => errno_enosys(libc::EOF),
    }
}

/// # Safety
/// As setbuf(3): `setvbuf` with a buffer of BUFSIZ bytes.
#[no_mangle]
pub unsafe extern "C" fn setbuf(fp: *mut FILE, buf: *mut c_char) {
    // SAFETY: the same call, as glibc defines it.
    unsafe { setbuffer(fp, buf, libc::BUFSIZ as size_t) };
}

/// # Safety
/// As setbuffer(3).
#[no_mangle]
pub unsafe extern "C" fn setbuffer(fp: *mut FILE, buf: *mut c_char, n: size_t) {
    let g = guarded();
    if g {
        set_user_buffer(fp, buf, n);
    }
    let _g = g.then(Internal::enter);
    match real::setbuffer() {
        // SAFETY: the caller's arguments.
        Some(f) => unsafe { f(fp, buf, n) },
        None => crate::set_errno(libc::ENOSYS),
    }
}

/// Take stream `fp`'s pinned buffer out of the table before the stream
/// goes (its address may be reused by another thread's `fopen` at once);
/// the pin is dropped after the close.
fn take_user_buffer(fp: *mut FILE) -> Option<UserBuffer> {
    let mut t = USER_BUFFERS.lock();
    let i = t.iter().position(|(f, _, _)| *f == fp as usize)?;
    Some(t.swap_remove(i))
}

macro_rules! closes {
    ($name:ident) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fp: *mut FILE) -> c_int {
            let g = guarded();
            let pinned = if g { take_user_buffer(fp) } else { None };
            let r = {
                let _g = g.then(Internal::enter);
                match real::$name() {
                    // SAFETY: the caller's stream.
                    Some(f) => unsafe { f(fp) },
                    None => errno_enosys(-1),
                }
            };
            // Its buffer is the program's memory again.
            let _g = Internal::enter();
            drop(pinned);
            r
        }
    };
}

closes!(fclose);
closes!(pclose);

// ---- streams across fork ----------------------------------------------
//
// In the child of a multi-threaded program (every program under uzswap is
// one: its threads count) glibc's `fork` resets the lock of every stream
// before anything else runs there (`fresetlockfiles`: it reads each
// FILE's flags and lock pointer, then writes the lock), and nothing of
// uzswap's is registered in the child yet. A FILE whose page was evicted
// reads as zeros there: a null lock pointer, and the child died of
// SIGSEGV inside `fork` (`fork_stdio.c`, a stream opened and left idle
// while the heap churned); a lock on an evicted page is written to a page
// the kernel zero-filled, and the take-over can merge only its bytes that
// are not zero back over the cached page (`fork::reconcile_touched`): a
// lock reset to zero would read as held again, and the child's first
// write to the stream would wait for ever. So before such a fork every
// stream's FILE and lock are brought in and pinned until the fork is done.

/// Offsets in glibc's `struct _IO_FILE` (<bits/types/struct_FILE.h>, an ABI
/// glibc keeps) of `_chain` (the next stream of `_IO_list_all`) and
/// `_lock`, and the bytes of `struct _IO_FILE_plus` (the FILE and its
/// jump table pointer).
#[cfg(target_pointer_width = "64")]
const CHAIN_AT: usize = 0x68;
#[cfg(target_pointer_width = "64")]
const LOCK_AT: usize = 0x88;
#[cfg(target_pointer_width = "64")]
const FILE_PLUS_BYTES: usize = 0xe0;
/// `_IO_lock_t`: a recursive lock of three words.
#[cfg(target_pointer_width = "64")]
const LOCK_BYTES: usize = 16;

extern "C" {
    /// glibc's list of every open stream, newest first, and its lock.
    static mut _IO_list_all: *mut FILE;
    fn _IO_list_lock();
    fn _IO_list_unlock();
}

/// Bring in every open stream's FILE and lock, and keep them mapped until
/// the guards drop: for a fork whose child will not have its regions
/// registered when glibc resets the streams' locks. The guards are the
/// parent's (a child forgets them).
#[cfg(target_pointer_width = "64")]
pub fn pin_for_fork(st: &'static crate::State) -> Vec<uzswap::region::PinGuard<'static>> {
    let mut streams = Vec::new();
    // SAFETY: the list is walked under its lock, as glibc walks it; each
    // entry is a live stream (a stream leaves the list, under the lock,
    // before it is freed). Reading a FILE may fault its page in, which
    // takes no stdio lock.
    unsafe {
        _IO_list_lock();
        let mut fp = _IO_list_all as usize;
        while fp != 0 && streams.len() < MAX_STREAMS {
            let lock = *((fp + LOCK_AT) as *const usize);
            streams.push((fp, lock));
            fp = *((fp + CHAIN_AT) as *const usize);
        }
        _IO_list_unlock();
    }
    let mut pins = Vec::new();
    for (fp, lock) in streams {
        if st.uz.contains(fp) {
            pins.push(st.uz.pin(fp, FILE_PLUS_BYTES, false));
        }
        if lock != 0 && st.uz.contains(lock) {
            pins.push(st.uz.pin(lock, LOCK_BYTES, false));
        }
    }
    pins
}

#[cfg(not(target_pointer_width = "64"))]
pub fn pin_for_fork(_: &'static crate::State) -> Vec<uzswap::region::PinGuard<'static>> {
    Vec::new()
}

/// Streams pinned at a fork, at most: a list that long is walked no
/// further (a program with more open streams than this keeps the rest's
/// old hazard).
#[cfg(target_pointer_width = "64")]
const MAX_STREAMS: usize = 4096;
