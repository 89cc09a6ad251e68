//! glibc's waits on futex words: mutexes, condition variables, semaphores,
//! read-write locks, barriers and `pthread_once`, and C11's threads calls,
//! where the object lies in region memory.
//!
//! A wait that blocks asks the kernel to sleep while a word still holds a
//! value (`FUTEX_WAIT`): the kernel reads the word inside the system call.
//! Where the kernel does not hand us the faults it takes there
//! (`KernelFaults::NotServed`: signal mode, `UFFD_USER_MODE_ONLY`), an
//! eviction between the program's last touch of the object and that read
//! fails the call with EFAULT. glibc (2.34 on) takes EFAULT from a futex
//! for its own bug and ends the process: "The futex facility returned an
//! unexpected error code". A thread that paged a condition variable's
//! chunk out while two threads passed turns through it ended the process
//! within a second (`tests/programs/sync_waits.c`), for a mutex waited on
//! too (`__lll_lock_wait`).
//!
//! So on that path each call below holds its objects resident for the
//! call (`Pins`, as `buffers.rs` does for a system call's buffer), from a
//! touch before glibc's last read to after the kernel's. Where the call
//! can take the object without waiting it does not pin: a
//! `trylock`/`trywait` first (user-space atomics only; the kernel is not
//! asked), wherever the object lies, and only when that fails the range
//! check and the pin. An uncontended lock pays the extra call and one
//! load; a waiter pays the pin (two lock acquisitions in the instance, 0.1
//! µs) on top of the futex call it makes anyway. A signal or broadcast
//! pins only where the condition has waiters (`may_wait_inside`). The
//! mutexes whose lock and unlock are done by the kernel (priority
//! inheritance, `FUTEX_LOCK_PI`/`FUTEX_UNLOCK_PI`, and robust and
//! priority-protected ones, whose paths differ) are pinned for every call.
//!
//! The futex calls a program makes itself through `syscall(2)` (Rust's
//! std, abseil, libstdc++'s atomic waits) are pinned in `syscall.rs`. Not
//! covered: futex calls made without libc, and the compatibility versions
//! of the condition-variable calls (`@GLIBC_2.2.5`, for programs linked
//! before 2003), which this library's unversioned definitions would also
//! stand in front of and pass to the current ones. Where the kernel's
//! faults are served (root, `uzswap setup`'s group) nothing here pins: a
//! call costs its try, and a range check and a branch when it would wait.

use crate::buffers::Pins;
use crate::real;
use libc::{c_int, c_void, clockid_t, timespec};
use std::mem::size_of;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

type Mutex = *mut libc::pthread_mutex_t;
type Cond = *mut libc::pthread_cond_t;
type Sem = *mut libc::sem_t;
type RwLock = *mut libc::pthread_rwlock_t;
type Ts = *const timespec;
type Init = Option<unsafe extern "C" fn()>;
type Barrier = *mut libc::pthread_barrier_t;
type Once = *mut libc::pthread_once_t;

/// The share of the budget the waits may hold at once: one in this many.
const HELD_SHARE: u64 = 8;

/// Bytes of chunks the waits hold pinned now (a chunk per object).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// A wait's pins, and what they count in [`HELD`].
pub(crate) struct Held {
    _pins: Pins,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(self.bytes, Relaxed);
    }
}

/// Pins for `objs` (pointer, length) where any lies in region memory and
/// the kernel's faults are not served; `None` (nothing to hold) otherwise.
/// The range check comes first: it is lock-free and reads no thread-local,
/// and a lock outside the regions (static data, the stack, this library's
/// own) is the common case.
///
/// A waiter holds its pin while it sleeps, and a parked thread may sleep
/// for ever: 200 threads each waiting on a condition of its own pinned 200
/// chunks, 12.5 MiB under an 8 MiB budget, and the program's faults
/// overran the budget 170 k times (21.8 s against 0.42 s). So the waits
/// together hold at most an eighth of the budget; past that a wait goes
/// unpinned, as before this was built, where an eviction would have to
/// fall between the wait's last touch of its object and the kernel's read
/// to fail it.
pub(crate) fn hold(objs: &[(*const c_void, usize)]) -> Option<Held> {
    if !objs
        .iter()
        .any(|&(p, n)| crate::vma::overlaps_regions(p as usize, p as usize + n))
    {
        return None;
    }
    let st = crate::active()?;
    let mut pins = Pins::new()?;
    let bytes = objs.len() * st.uz.chunk_bytes();
    let cap = usize::try_from(st.uz.config().budget / HELD_SHARE).unwrap_or(usize::MAX);
    if HELD.fetch_add(bytes, Relaxed) + bytes > cap {
        HELD.fetch_sub(bytes, Relaxed);
        return None;
    }
    for &(p, n) in objs {
        pins.add(p, n, true);
    }
    Some(Held { _pins: pins, bytes })
}

fn obj<T>(p: *const T) -> (*const c_void, usize) {
    (p as *const c_void, size_of::<T>())
}

/// glibc's mutex kinds whose lock or unlock the kernel does
/// (`PTHREAD_MUTEX_ROBUST_NORMAL_NP`, `_PRIO_INHERIT_NP`,
/// `_PRIO_PROTECT_NP` in `__data.__kind`).
const KERNEL_KINDS: c_int = 16 | 32 | 64;

/// Whether the mutex is of a kind the kernel locks or unlocks. Reads
/// glibc's `__kind` (offset 16 on every 64-bit glibc target), in user
/// space: a touch that brings the mutex in if it was evicted.
///
/// # Safety
/// `m` is an initialised mutex.
unsafe fn kernel_kind(m: Mutex) -> bool {
    #[cfg(all(target_env = "gnu", target_pointer_width = "64"))]
    {
        // SAFETY: the caller's mutex; `__kind` is an int at offset 16.
        let kind = unsafe { std::ptr::read_volatile((m as *const c_int).add(4)) };
        kind & KERNEL_KINDS != 0
    }
    #[cfg(not(all(target_env = "gnu", target_pointer_width = "64")))]
    {
        let _ = m;
        true
    }
}

/// Lock `m` with `lock`. A plain mutex is tried first (`trylock`: an
/// atomic in user space, the kernel not asked), wherever it lies: the
/// uncontended lock, the common case, then costs the extra call alone.
/// Only a lock that would wait looks at where the mutex lies and pins it.
///
/// # Safety
/// As `pthread_mutex_lock(m)`.
unsafe fn lock_mutex(m: Mutex, lock: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: the caller's mutex.
    if !unsafe { kernel_kind(m) } {
        if let Some(try_lock) = real::pthread_mutex_trylock() {
            // SAFETY: as above.
            match unsafe { try_lock(m) } {
                libc::EBUSY => {}
                r => return r,
            }
        }
    }
    let _pins = held(m);
    lock()
}

/// Call `wait` with `p` pinned where it lies in the regions, unless
/// `try_take` (an atomic in user space) takes it first. `try_take` returns
/// 0 when it took the object; glibc's `EBUSY`/`EAGAIN` (or -1 with errno
/// `EAGAIN`, for semaphores) when it would wait. As for a mutex, the try
/// comes first wherever the object lies.
fn take<T>(
    p: *const T,
    try_take: Option<impl FnOnce() -> c_int>,
    wait: impl FnOnce() -> c_int,
) -> c_int {
    if let Some(t) = try_take {
        let errno = crate::errno();
        if t() == 0 {
            return 0;
        }
        crate::set_errno(errno);
    }
    let _pins = held(p);
    wait()
}

/// [`hold`] for one object.
fn held<T>(p: *const T) -> Option<Held> {
    hold(&[obj(p)])
}

/// What a pthread call returns where libc has no such function.
fn missing() -> c_int {
    libc::ENOSYS
}

/// What a semaphore call returns there: -1, errno set.
fn missing_errno() -> c_int {
    crate::set_errno(libc::ENOSYS);
    -1
}

/// Calls that always hold their objects for the call where they lie in
/// the regions: each waits, or may, with nothing to try first.
macro_rules! pinned {
    ($missing:expr; $($(#[$doc:meta])* $name:ident($($a:ident: $t:ty),*) holds [$($o:ident),*];)*) => {$(
        /// # Safety
        /// As the libc function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let Some(f) = real::$name() else {
                return $missing;
            };
            let _pins = hold(&[$(obj($o)),*]);
            // SAFETY: the caller's objects and arguments.
            unsafe { f($($a),*) }
        }
    )*};
}

// ---------------------------------------------------------------------------
// Mutexes
// ---------------------------------------------------------------------------

/// # Safety
/// As pthread_mutex_lock(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_lock(m: Mutex) -> c_int {
    let Some(f) = real::pthread_mutex_lock() else {
        return missing();
    };
    // SAFETY: the caller's mutex.
    unsafe { lock_mutex(m, || f(m)) }
}

/// # Safety
/// As pthread_mutex_timedlock(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_timedlock(m: Mutex, t: Ts) -> c_int {
    let Some(f) = real::pthread_mutex_timedlock() else {
        return missing();
    };
    // SAFETY: the caller's mutex and time.
    unsafe { lock_mutex(m, || f(m, t)) }
}

/// # Safety
/// As pthread_mutex_clocklock(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_clocklock(m: Mutex, c: clockid_t, t: Ts) -> c_int {
    let Some(f) = real::pthread_mutex_clocklock() else {
        return missing();
    };
    // SAFETY: as above.
    unsafe { lock_mutex(m, || f(m, c, t)) }
}

/// Only a kernel-kind mutex (priority inheritance: `FUTEX_UNLOCK_PI`) has
/// the kernel touch it on unlock.
///
/// # Safety
/// As pthread_mutex_unlock(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_unlock(m: Mutex) -> c_int {
    let Some(f) = real::pthread_mutex_unlock() else {
        return missing();
    };
    // SAFETY: the caller's mutex, which it holds.
    let _pins = unsafe { kernel_kind(m) }.then(|| held(m)).flatten();
    // SAFETY: as above.
    unsafe { f(m) }
}

// ---------------------------------------------------------------------------
// Condition variables: the wait relocks the mutex at its end, and the
// condition's own internal lock is a futex wait too (signal, broadcast and
// destroy may take it).
// ---------------------------------------------------------------------------

pinned! { missing();
    // The wait relocks the mutex at its end.
    pthread_cond_wait(c: Cond, m: Mutex) holds [c, m];
    pthread_cond_timedwait(c: Cond, m: Mutex, t: Ts) holds [c, m];
    pthread_cond_clockwait(c: Cond, m: Mutex, k: clockid_t, t: Ts) holds [c, m];
    // Waits for the waiters still leaving.
    pthread_cond_destroy(c: Cond) holds [c];
}

/// The offset of `__wrefs` (the waiters' count, shifted left by 3) in
/// glibc's `pthread_cond_t`, for the versions whose layout is known: 2.25
/// (the condition variable rewritten) to 2.40 (2.41 dropped `__g_refs`).
/// `None` on any other C library, where signal and broadcast always pin.
fn wrefs_offset() -> Option<usize> {
    /// 0: not asked yet; 1: unknown layout; else the offset.
    static OFFSET: AtomicUsize = AtomicUsize::new(0);
    let o = match OFFSET.load(Relaxed) {
        0 => {
            let o = glibc_minor()
                .filter(|v| (25..=40).contains(v))
                .map_or(1, |_| 36);
            OFFSET.store(o, Relaxed);
            o
        }
        o => o,
    };
    (o != 1).then_some(o)
}

/// The minor version of the running glibc 2.x, if it is glibc.
fn glibc_minor() -> Option<u32> {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: returns a static NUL-terminated string ("2.36").
        let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        let minor = v.to_str().ok()?.strip_prefix("2.")?;
        minor.split('.').next()?.parse().ok()
    }
    #[cfg(not(target_env = "gnu"))]
    None
}

/// Whether a signal or broadcast on `c` may reach glibc's internal lock
/// (a futex wait where another thread holds it): only with waiters. With
/// none glibc returns before it, having read `__wrefs` alone; a read here
/// touches that word first, in user space.
///
/// # Safety
/// `c` is an initialised condition variable.
unsafe fn may_wait_inside(c: Cond) -> bool {
    match wrefs_offset() {
        Some(o) => {
            // SAFETY: the caller's condition; a u32 at a known offset.
            let wrefs = unsafe { std::ptr::read_volatile((c as *const u8).add(o) as *const u32) };
            wrefs >> 3 != 0
        }
        None => true,
    }
}

macro_rules! cond_call {
    ($missing:expr; $($name:ident),*) => {$(
        /// # Safety
        /// As the pthread function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(c: Cond) -> c_int {
            let Some(f) = real::$name() else {
                return $missing;
            };
            // SAFETY: the caller's condition.
            let _pins = unsafe { may_wait_inside(c) }.then(|| held(c)).flatten();
            // SAFETY: the caller's condition.
            unsafe { f(c) }
        }
    )*};
}

cond_call!(missing(); pthread_cond_signal, pthread_cond_broadcast);

// ---------------------------------------------------------------------------
// Semaphores
// ---------------------------------------------------------------------------

extern "C" {
    fn pthread_testcancel();
}

/// [`take`] for a semaphore wait: a cancellation point that glibc tests
/// before it tries, whether the wait would block or not (POSIX's "shall
/// occur"); the try below would skip that test, so it is made first.
fn sem_take(s: Sem, wait: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: no arguments; acts on this thread's pending cancellation as
    // the wait itself would.
    unsafe { pthread_testcancel() };
    // SAFETY: the caller's semaphore.
    take(
        s,
        real::sem_trywait().map(|t| move || unsafe { t(s) }),
        wait,
    )
}

/// # Safety
/// As sem_wait(3).
#[no_mangle]
pub unsafe extern "C" fn sem_wait(s: Sem) -> c_int {
    let Some(f) = real::sem_wait() else {
        return missing_errno();
    };
    // SAFETY: the caller's semaphore.
    sem_take(s, || unsafe { f(s) })
}

/// # Safety
/// As sem_timedwait(3).
#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(s: Sem, t: Ts) -> c_int {
    let Some(f) = real::sem_timedwait() else {
        return missing_errno();
    };
    // SAFETY: the caller's semaphore and time.
    sem_take(s, || unsafe { f(s, t) })
}

/// # Safety
/// As sem_clockwait(3).
#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(s: Sem, k: clockid_t, t: Ts) -> c_int {
    let Some(f) = real::sem_clockwait() else {
        return missing_errno();
    };
    // SAFETY: as above.
    sem_take(s, || unsafe { f(s, k, t) })
}

// ---------------------------------------------------------------------------
// Read-write locks (their unlocks only wake, which reads no word)
// ---------------------------------------------------------------------------

macro_rules! rwlock_take {
    ($($name:ident($($a:ident: $t:ty),*) try $try:ident;)*) => {$(
        /// # Safety
        /// As the pthread function of the same name.
        #[no_mangle]
        pub unsafe extern "C" fn $name(l: RwLock $(, $a: $t)*) -> c_int {
            let Some(f) = real::$name() else {
                return missing();
            };
            // SAFETY: the caller's lock (and time).
            take(l, real::$try().map(|t| move || unsafe { t(l) }), || unsafe { f(l $(, $a)*) })
        }
    )*};
}

rwlock_take! {
    pthread_rwlock_rdlock() try pthread_rwlock_tryrdlock;
    pthread_rwlock_wrlock() try pthread_rwlock_trywrlock;
    pthread_rwlock_timedrdlock(t: Ts) try pthread_rwlock_tryrdlock;
    pthread_rwlock_timedwrlock(t: Ts) try pthread_rwlock_trywrlock;
    pthread_rwlock_clockrdlock(k: clockid_t, t: Ts) try pthread_rwlock_tryrdlock;
    pthread_rwlock_clockwrlock(k: clockid_t, t: Ts) try pthread_rwlock_trywrlock;
}

// ---------------------------------------------------------------------------
// Barriers and once
// ---------------------------------------------------------------------------

pinned! { missing();
    pthread_barrier_wait(b: Barrier) holds [b];
    // Waits for the threads still leaving the barrier.
    pthread_barrier_destroy(b: Barrier) holds [b];
    // A second caller waits for the first's `init` to finish. The pin
    // holds across `init` too, which runs the program's code: one chunk,
    // the `pthread_once_t`'s.
    pthread_once(o: Once, init: Init) holds [o];
}

// ---------------------------------------------------------------------------
// C11 threads: glibc's run its pthread functions internally, past the
// wrappers above. `mtx_t` and `cnd_t` are a `pthread_mutex_t` and a
// `pthread_cond_t`; `once_flag` a `pthread_once_t`.
// ---------------------------------------------------------------------------

/// C11's `thrd_error`, what a C11 call returns where libc has none.
const THRD_ERROR: c_int = 2;

/// # Safety
/// As mtx_lock(3).
#[no_mangle]
pub unsafe extern "C" fn mtx_lock(m: Mutex) -> c_int {
    let Some(f) = real::mtx_lock() else {
        return THRD_ERROR;
    };
    // SAFETY: the caller's mutex.
    c11_lock(m, || unsafe { f(m) })
}

/// # Safety
/// As mtx_timedlock(3).
#[no_mangle]
pub unsafe extern "C" fn mtx_timedlock(m: Mutex, t: Ts) -> c_int {
    let Some(f) = real::mtx_timedlock() else {
        return THRD_ERROR;
    };
    // SAFETY: the caller's mutex and time.
    c11_lock(m, || unsafe { f(m, t) })
}

/// C11 has only plain, timed and recursive mutexes: never a kernel kind.
fn c11_lock(m: Mutex, lock: impl FnOnce() -> c_int) -> c_int {
    // SAFETY: the caller's mutex; `thrd_success` is 0.
    take(
        m,
        real::mtx_trylock().map(|t| move || unsafe { t(m) }),
        lock,
    )
}

pinned! { THRD_ERROR;
    cnd_wait(c: Cond, m: Mutex) holds [c, m];
    cnd_timedwait(c: Cond, m: Mutex, t: Ts) holds [c, m];
}

cond_call!(THRD_ERROR; cnd_signal, cnd_broadcast);

/// # Safety
/// As call_once(3).
#[no_mangle]
pub unsafe extern "C" fn call_once(o: *mut libc::pthread_once_t, init: Init) {
    let Some(f) = real::call_once() else {
        return;
    };
    let _pins = hold(&[obj(o)]);
    // SAFETY: the caller's flag and function.
    unsafe { f(o, init) }
}
