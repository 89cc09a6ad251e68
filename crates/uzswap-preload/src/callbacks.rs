//! libc calls that allocate buffers for the kernel to fill and call the
//! program back while they run: `scandir` (its filter and comparison),
//! `ftw` and `nftw` (the walk's callback), where the kernel's faults inside
//! system calls are not served (`KernelFaults::NotServed`).
//!
//! Each opens directories with libc's internal `opendir`, which no wrapper
//! sees: the `DIR` and its buffer were the program's allocations, in a
//! region, and `getdents64` into a buffer evicted (or never touched) failed
//! with EFAULT. libc reads that as the end of the directory or an error:
//! an `nftw` over 653 entries whose callback allocated called it 353 times
//! and returned 0, a walk cut short in silence. `streams.rs` runs such
//! calls with the re-entry guard up, so that what they allocate is glibc's,
//! outside every region; but these run the program's code in between, and
//! that code must run as the program's: its allocations in regions, its
//! own system calls pinned, and not counted inside for a fork's rest
//! (`quiesce`), since a callback may run as long as the program likes.
//!
//! So the call runs with the guard up and is handed a trampoline in place
//! of each callback: the trampoline lowers the guard (`program_code`),
//! calls the program's function, and raises it again. libc calls these
//! callbacks on the calling thread, before the call returns, and gives them
//! no argument of the caller's, so the program's functions wait in
//! thread-locals, saved and restored around each call (a callback may walk
//! again). What the calls return to the program (`scandir`'s list and
//! entries) is glibc's memory; `free` takes either kind.
//!
//! `glob` (its error callback) and `fts` (its comparison, which `fts_open`
//! keeps and `fts_read` and `fts_children` call) are the same kind: the
//! comparison of each open `FTS` is kept in a table from `fts_open` to
//! `fts_close`, and held for each call on it.
//!
//! Locking: none. The `fts` table is a fixed array of atomic slots
//! (claimed by compare-and-swap, keyed once the stream exists); the rest
//! is thread-locals.

use crate::buffers::Pins;
use crate::real::{self, DirCmp, DirFilter, FtsCmp, FtwFn, GlobErr, NftwFn};
use crate::streams::guarded;
use crate::{program_code, Internal};
use libc::{c_char, c_int, c_void};
use std::cell::Cell;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

thread_local! {
    static FILTER: Cell<DirFilter> = const { Cell::new(None) };
    static COMPARE: Cell<DirCmp> = const { Cell::new(None) };
    static FTW: Cell<FtwFn> = const { Cell::new(None) };
    static NFTW: Cell<NftwFn> = const { Cell::new(None) };
    static GLOB: Cell<GlobErr> = const { Cell::new(None) };
    static FTS: Cell<FtsCmp> = const { Cell::new(None) };
}

/// Holds `f` in `slot` for one call, the slot's old value back when
/// dropped.
struct Held<T: Copy + 'static> {
    slot: &'static std::thread::LocalKey<Cell<T>>,
    old: T,
}

impl<T: Copy + 'static> Held<T> {
    /// None where the thread's locals are gone (a call made in a
    /// thread-local destructor): the caller passes the program's function
    /// itself then.
    fn new(slot: &'static std::thread::LocalKey<Cell<T>>, f: T) -> Option<Held<T>> {
        let old = slot.try_with(|c| c.replace(f)).ok()?;
        Some(Held { slot, old })
    }
}

impl<T: Copy + 'static> Drop for Held<T> {
    fn drop(&mut self) {
        let old = self.old;
        let _ = self.slot.try_with(|c| c.set(old));
    }
}

/// The program's function a trampoline stands for. A trampoline is
/// handed to libc only while its function is held (`hold`), on this
/// thread, so None is never seen; were it, the trampoline answers as the
/// call's neutral value (keep the entry, equal, go on) rather than abort
/// the program.
fn held<T: Copy + 'static>(slot: &'static std::thread::LocalKey<Cell<Option<T>>>) -> Option<T> {
    slot.try_with(Cell::get).ok().flatten()
}

unsafe extern "C" fn filter(d: *const c_void) -> c_int {
    let Some(f) = held(&FILTER) else {
        return 1;
    };
    // SAFETY: libc's argument, to the program's function it stands for.
    program_code(|| unsafe { f(d) })
}

unsafe extern "C" fn compare(a: *const *const c_void, b: *const *const c_void) -> c_int {
    let Some(f) = held(&COMPARE) else {
        return 0;
    };
    // SAFETY: as `filter`.
    program_code(|| unsafe { f(a, b) })
}

unsafe extern "C" fn ftw_fn(p: *const c_char, sb: *const c_void, flag: c_int) -> c_int {
    let Some(f) = held(&FTW) else {
        return 0;
    };
    // SAFETY: as `filter`.
    program_code(|| unsafe { f(p, sb, flag) })
}

unsafe extern "C" fn nftw_fn(
    p: *const c_char,
    sb: *const c_void,
    flag: c_int,
    ftw: *mut c_void,
) -> c_int {
    let Some(f) = held(&NFTW) else {
        return 0;
    };
    // SAFETY: as `filter`.
    program_code(|| unsafe { f(p, sb, flag, ftw) })
}

/// The trampoline for callback `f`, if there is one, with `f` held for
/// the call; `f` itself where it cannot be held.
fn hold<T: Copy + 'static>(
    slot: &'static std::thread::LocalKey<Cell<Option<T>>>,
    f: Option<T>,
    tramp: T,
) -> (Option<T>, Option<Held<Option<T>>>) {
    match f.and_then(|_| Held::new(slot, f)) {
        Some(held) => (Some(tramp), Some(held)),
        None => (f, None),
    }
}

fn enosys() -> c_int {
    crate::set_errno(libc::ENOSYS);
    -1
}

/// The path the call's first system call reads, pinned for the call.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn pin_path(path: *const c_char) -> Option<Pins> {
    Pins::new().map(|mut p| {
        // SAFETY: the caller's string.
        unsafe { p.path(path) };
        p
    })
}

macro_rules! scandir {
    ($name:ident($($pre:ident: $pt:ty),*)) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $($pre: $pt,)*
            dir: *const c_char,
            list: *mut *mut *mut c_void,
            sel: DirFilter,
            cmp: DirCmp,
        ) -> c_int {
            let Some(real) = real::$name() else {
                return enosys();
            };
            if !guarded() {
                // SAFETY: the caller's arguments.
                return unsafe { real($($pre,)* dir, list, sel, cmp) };
            }
            // SAFETY: the caller's path.
            let _pins = unsafe { pin_path(dir) };
            let (sel, _f) = hold(&FILTER, sel, filter);
            let (cmp, _c) = hold(&COMPARE, cmp, compare);
            let _g = Internal::enter();
            // SAFETY: the caller's arguments, callbacks in trampolines that
            // call them.
            unsafe { real($($pre,)* dir, list, sel, cmp) }
        }
    };
}

scandir!(scandir());
scandir!(scandir64());
scandir!(scandirat(fd: c_int));
scandir!(scandirat64(fd: c_int));

macro_rules! ftw {
    ($name:ident) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(dir: *const c_char, f: FtwFn, fds: c_int) -> c_int {
            let Some(real) = real::$name() else {
                return enosys();
            };
            if !guarded() {
                // SAFETY: the caller's arguments.
                return unsafe { real(dir, f, fds) };
            }
            // SAFETY: the caller's path.
            let _pins = unsafe { pin_path(dir) };
            let (f, _h) = hold(&FTW, f, ftw_fn);
            let _g = Internal::enter();
            // SAFETY: as in `scandir`.
            unsafe { real(dir, f, fds) }
        }
    };
}

ftw!(ftw);
ftw!(ftw64);

macro_rules! nftw {
    ($name:ident) => {
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            dir: *const c_char,
            f: NftwFn,
            fds: c_int,
            flags: c_int,
        ) -> c_int {
            let Some(real) = real::$name() else {
                return enosys();
            };
            if !guarded() {
                // SAFETY: the caller's arguments.
                return unsafe { real(dir, f, fds, flags) };
            }
            // SAFETY: the caller's path.
            let _pins = unsafe { pin_path(dir) };
            let (f, _h) = hold(&NFTW, f, nftw_fn);
            let _g = Internal::enter();
            // SAFETY: as in `scandir`.
            unsafe { real(dir, f, fds, flags) }
        }
    };
}

nftw!(nftw);
nftw!(nftw64);

unsafe extern "C" fn glob_err(p: *const c_char, e: c_int) -> c_int {
    let Some(f) = held(&GLOB) else {
        return 0;
    };
    // SAFETY: as `filter`.
    program_code(|| unsafe { f(p, e) })
}

macro_rules! glob {
    ($name:ident, $g:ty) => {
        /// # Safety
        /// As the libc function of the same name: what it allocates is
        /// glibc's, its error callback runs as the program's.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            p: *const c_char,
            fl: c_int,
            err: GlobErr,
            g: *mut $g,
        ) -> c_int {
            let Some(real) = real::$name() else {
                return libc::GLOB_NOSPACE;
            };
            if !guarded() {
                // SAFETY: the caller's arguments.
                return unsafe { real(p, fl, err, g) };
            }
            let (err, _h) = hold(&GLOB, err, glob_err);
            let _g = Internal::enter();
            // SAFETY: as in `scandir`.
            unsafe { real(p, fl, err, g) }
        }
    };
}

glob!(glob, libc::glob_t);
glob!(glob64, libc::glob64_t);

unsafe extern "C" fn fts_compare(a: *const *const c_void, b: *const *const c_void) -> c_int {
    let Some(f) = held(&FTS) else {
        return 0;
    };
    // SAFETY: as `filter`.
    program_code(|| unsafe { f(a, b) })
}

/// Open `FTS` streams given a comparison, at most: one more is given the
/// program's comparison itself, which then runs with the guard up.
const FTS_SLOTS: usize = 64;

/// Each open `FTS` given a comparison (key: its address, 0 where free),
/// and that comparison, the program's. Lock-free: a forked child that runs
/// detached (`fork.rs`) may read it while a thread of the parent held any
/// lock at the fork.
static FTS_KEYS: [AtomicUsize; FTS_SLOTS] = [const { AtomicUsize::new(0) }; FTS_SLOTS];
static FTS_FNS: [AtomicUsize; FTS_SLOTS] = [const { AtomicUsize::new(0) }; FTS_SLOTS];

/// The program's comparison for `fts`, if we stand in front of one.
fn fts_cmp(fts: *mut c_void) -> FtsCmp {
    let i = FTS_KEYS
        .iter()
        .position(|k| k.load(Acquire) == fts as usize)?;
    let f = FTS_FNS[i].load(Acquire);
    // SAFETY: stored from an `FtsCmp` that was Some, before its key.
    (f != 0).then(|| unsafe {
        std::mem::transmute::<
            usize,
            unsafe extern "C" fn(*const *const c_void, *const *const c_void) -> c_int,
        >(f)
    })
}

/// # Safety
/// As fts_open(3): what it allocates is glibc's, its comparison (kept for
/// the stream's later calls) runs as the program's.
#[no_mangle]
pub unsafe extern "C" fn fts_open(
    paths: *const *mut c_char,
    opts: c_int,
    cmp: FtsCmp,
) -> *mut c_void {
    let Some(real) = real::fts_open() else {
        crate::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    if !guarded() {
        // SAFETY: the caller's arguments.
        return unsafe { real(paths, opts, cmp) };
    }
    // A slot for the stream, claimed before the call (0 → 1), keyed after.
    let slot = cmp.and_then(|_| {
        FTS_KEYS
            .iter()
            .position(|k| k.compare_exchange(0, 1, AcqRel, Relaxed).is_ok())
    });
    let (tramp, _h) = match slot {
        Some(_) => hold(&FTS, cmp, fts_compare),
        None => (cmp, None),
    };
    let _g = Internal::enter();
    // SAFETY: as in `scandir`.
    let fts = unsafe { real(paths, opts, tramp) };
    if let (Some(i), Some(f)) = (slot, cmp) {
        if fts.is_null() {
            FTS_KEYS[i].store(0, Release);
        } else {
            FTS_FNS[i].store(f as usize, Release);
            FTS_KEYS[i].store(fts as usize, Release);
        }
    }
    fts
}

/// # Safety
/// As fts_read(3).
#[no_mangle]
pub unsafe extern "C" fn fts_read(fts: *mut c_void) -> *mut c_void {
    let Some(real) = real::fts_read() else {
        crate::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's argument.
    on_fts(fts, || unsafe { real(fts) })
}

/// A call on open stream `fts`: its comparison held whether or not
/// guarded (a stream opened while it was keeps our trampoline: a detached
/// child's, say), and libc's allocations glibc's where guarded.
fn on_fts<R>(fts: *mut c_void, call: impl FnOnce() -> R) -> R {
    let _h = Held::new(&FTS, fts_cmp(fts));
    let _g = guarded().then(Internal::enter);
    call()
}

/// # Safety
/// As fts_children(3).
#[no_mangle]
pub unsafe extern "C" fn fts_children(fts: *mut c_void, opts: c_int) -> *mut c_void {
    let Some(real) = real::fts_children() else {
        crate::set_errno(libc::ENOSYS);
        return std::ptr::null_mut();
    };
    // SAFETY: the caller's arguments.
    on_fts(fts, || unsafe { real(fts, opts) })
}

/// # Safety
/// As fts_close(3).
#[no_mangle]
pub unsafe extern "C" fn fts_close(fts: *mut c_void) -> c_int {
    let Some(real) = real::fts_close() else {
        crate::set_errno(libc::ENOSYS);
        return -1;
    };
    let _g = guarded().then(Internal::enter);
    // SAFETY: the caller's argument.
    let r = unsafe { real(fts) };
    if let Some(i) = FTS_KEYS
        .iter()
        .position(|k| k.load(Acquire) == fts as usize)
    {
        FTS_FNS[i].store(0, Release);
        FTS_KEYS[i].store(0, Release);
    }
    r
}
