//! The preload library: `uzswap run` loads it with `LD_PRELOAD` so that an
//! unmodified, dynamically linked program keeps its heap and its anonymous
//! memory in uzswap regions, under one budget.
//!
//! It is a client of the `uzswap` library, like the CLI: it owns
//! interposition, the re-entry guard and bootstrap memory, never eviction
//! policy. Modules:
//! - `alloc`: the malloc family, routed to mimalloc (whose memory comes from
//!   `mmap`, below) for the program, and to glibc's own allocator for
//!   uzswap's threads and for everything before initialisation;
//! - `vma`: anonymous private `mmap`/`munmap`/`mremap`/`madvise`/`mprotect`
//!   carved out of a few large registered regions (registrations are few);
//! - `mlock`: `mlock` and `mlockall` on that memory: pinned, brought in
//!   and locked, never a populate of a whole reservation;
//! - `buffers`: system calls that take user buffers, which pin them
//!   resident where the kernel does not hand us its faults;
//! - `streams`: stdio and directory streams, and the libc calls that fill
//!   buffers they allocate, on that same path;
//! - `dlopen`: libraries opened with `RTLD_DEEPBIND` bind to the malloc
//!   family here like any other;
//! - `signals`: in signal mode, SIGBUS stays uzswap's and unblocked;
//! - `fork`: a child gets every byte its parent had;
//! - `fds`: the program's closes and `dup2`s, kept off the library's own
//!   descriptors;
//! - `report`: the figures written at exit.
//!
//! Configuration comes from the environment `uzswap run` sets (`UZSWAP_*`,
//! see `config`). Without `UZSWAP_BUDGET` the library stays out of the way:
//! every call goes straight to libc.
//!
//! Locking: `State::vmas` (the address-space map) is taken by the mmap
//! family and held across the uzswap calls they make (`discard`, `pin`,
//! region creation), which take only uzswap's own locks. Nothing here is
//! taken by uzswap's threads.

mod alloc;
mod buffers;
mod callbacks;
mod config;
mod dlopen;
mod exec;
mod fds;
mod fork;
mod mlock;
mod real;
mod report;
mod signals;
mod stacks;
mod streams;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod syscall;
mod vma;
mod waits;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::*};
use uzswap::region::KernelFaults;
use uzswap::{HandlerMode, Uzswap};

#[global_allocator]
static GLOBAL: alloc::LibcAlloc = alloc::LibcAlloc;

/// The running instance and what goes with it.
pub(crate) struct State {
    uz: Uzswap,
    vmas: parking_lot::Mutex<vma::Vmas>,
    /// System calls on evicted memory fail unless their buffers are
    /// pinned first (`buffers`).
    pin_buffers: bool,
    /// io_uring and Linux AIO are refused in the kernel as well
    /// (`syscall::refuse_in_kernel`), liburing's own calls included.
    uring_filtered: bool,
    cfg: config::Config,
    pid: libc::pid_t,
}

/// Set once initialisation is complete; never freed.
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());
/// In a forked child until it has an instance of its own (`fork.rs`), and
/// for good where it could not make one: the instance's threads are the
/// parent's, so nothing here may call into it any more; the child's memory
/// is plain memory.
static DETACHED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Nonzero on uzswap's own threads and while this library runs code
    /// that may allocate on the program's behalf: their C allocations go to
    /// glibc, never into memory uzswap manages (a handler thread faulting
    /// on its own region memory would wait on itself).
    static INTERNAL: Cell<u32> = const { Cell::new(0) };
}

fn internal() -> bool {
    INTERNAL.try_with(|c| c.get() > 0).unwrap_or(true)
}

/// Marks the current thread internal until dropped; it is also inside for
/// `quiesce` (a fork's rest: it waits at a shut gate first).
struct Internal(#[allow(dead_code)] uzswap::compress::quiesce::Inside);

impl Internal {
    fn enter() -> Internal {
        let _ = INTERNAL.try_with(|c| c.set(c.get() + 1));
        Internal(uzswap::compress::quiesce::inside())
    }
}

impl Drop for Internal {
    fn drop(&mut self) {
        let _ = INTERNAL.try_with(|c| c.set(c.get() - 1));
    }
}

/// Run `f`, the program's code called back by libc under one of our calls
/// that raised the guard (`callbacks.rs`), as the program's: not internal
/// (its allocations and calls are the program's, pinned and counted as
/// any), and outside for `quiesce` (a fork elsewhere does not wait for it).
fn program_code<T>(f: impl FnOnce() -> T) -> T {
    struct Back(u32);
    impl Drop for Back {
        fn drop(&mut self) {
            let _ = INTERNAL.try_with(|c| c.set(self.0));
        }
    }
    let _back = Back(INTERNAL.try_with(|c| c.replace(0)).unwrap_or(0));
    uzswap::compress::quiesce::outside(f)
}

/// The instance, where the calling thread is the program's and the
/// process is not a detached child.
fn active() -> Option<&'static State> {
    let p = STATE.load(Acquire);
    if p.is_null() || DETACHED.load(Relaxed) || internal() {
        return None;
    }
    // SAFETY: set once from a leaked Box and never freed.
    Some(unsafe { &*p })
}

/// [`active`], for a call that changes the program's memory (the mapping
/// calls, a large allocation): a forked child whose take-over is still
/// deferred takes its memory over first (`fork.rs`).
fn active_for_memory() -> Option<&'static State> {
    active().or_else(|| {
        if DETACHED.load(Relaxed) && !internal() {
            fork::take_over_deferred()
        } else {
            None
        }
    })
}

/// uzswap's threads mark themselves internal for good, and make their
/// thread-locals while no fault can be pending on them
/// (`uzswap::region::prepare_signal_thread`).
fn uzswap_thread_began() {
    uzswap_scope_entered();
    uzswap::region::prepare_signal_thread(0);
}

/// The start of a fault resolved in the program thread that took it.
fn uzswap_scope_entered() {
    let _ = INTERNAL.try_with(|c| c.set(c.get() + 1));
}

/// The end of a fault resolved in the program thread that took it.
fn uzswap_scope_left() {
    let _ = INTERNAL.try_with(|c| c.set(c.get().saturating_sub(1)));
}

/// A thread started by one of ours (or by initialisation) is ours from its
/// first instruction: the thread library and Rust's runtime allocate
/// before any code of uzswap's runs in it (thread-local destructors), and
/// a fault handler whose allocation went to mimalloc could wait on a lock
/// held by a program thread that waits on a fault: a deadlock. Threads the
/// program starts are the program's.
///
/// # Safety
/// As pthread_create(3).
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    t: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: real::StartFn,
    arg: *mut libc::c_void,
) -> i32 {
    let Some(create) = real::pthread_create() else {
        return libc::ENOSYS;
    };
    if !internal() {
        // A stack the program gives from region memory keeps its top chunk,
        // where glibc puts the thread's descriptor, pinned (`stacks.rs`).
        let pinned = stacks::pin_for(attr);
        let rc = {
            // The thread stays the program's, but what the thread library
            // allocates for it here comes from glibc: its dynamic thread
            // vector (calloc'd as the thread is made) is read by every
            // access to our thread-locals, the SIGBUS handler's included,
            // and in region memory it could be evicted; the handler then
            // faults with SIGBUS blocked, which the kernel answers by
            // killing the process.
            let _g = Internal::enter();
            // The program's thread starts in `program_thread`, which
            // registers it for fault-handling locality and then runs
            // `start`.
            let p = Box::into_raw(Box::new((start, arg as usize)));
            // SAFETY: the caller's arguments, with our trampoline owning
            // the box.
            let rc = unsafe { create(t, attr, program_thread, p as *mut libc::c_void) };
            if rc != 0 {
                // SAFETY: the thread was not made; the box is still ours.
                drop(unsafe { Box::from_raw(p) });
            }
            rc
        };
        if let (Some(start), true) = (pinned, rc != 0) {
            stacks::release(start);
        }
        return rc;
    }
    extern "C" fn trampoline(p: *mut libc::c_void) -> *mut libc::c_void {
        uzswap_thread_began();
        // SAFETY: the box made below, handed to exactly this thread.
        let (start, arg) = *unsafe { Box::from_raw(p as *mut (real::StartFn, usize)) };
        start(arg as *mut libc::c_void)
    }
    let p = Box::into_raw(Box::new((start, arg as usize)));
    // SAFETY: as above, with our trampoline owning the box.
    let rc = unsafe { create(t, attr, trampoline, p as *mut libc::c_void) };
    if rc != 0 {
        // SAFETY: the thread was not made; the box is still ours.
        drop(unsafe { Box::from_raw(p) });
    }
    rc
}

/// The global locale's data comes from glibc's heap, never from region
/// memory: a new thread reads it (`__ctype_init`) before the thread library
/// unblocks signals in it, and in signal mode a fault there is a SIGBUS
/// raised while blocked, which the kernel answers by killing the process.
/// Any threaded program that set its locale, had that data evicted, and
/// then started a thread died so: GNU sort over a large file, as an
/// unprivileged user. The data is a few kilobytes per locale set.
///
/// # Safety
/// As setlocale(3).
#[no_mangle]
pub unsafe extern "C" fn setlocale(
    category: libc::c_int,
    locale: *const libc::c_char,
) -> *mut libc::c_char {
    let Some(real) = real::setlocale() else {
        return std::ptr::null_mut();
    };
    let _g = Internal::enter();
    // SAFETY: the caller's arguments, passed on unchanged.
    unsafe { real(category, locale) }
}

/// A program thread's first frame: registered with the instance
/// (`Uzswap::register_thread`), so that its faults are resolved by the
/// handler of the CPU it runs on, until it exits (`LOCALITY_KEY`'s
/// destructor).
extern "C" fn program_thread(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: the box made by `pthread_create`, handed to exactly this thread.
    let (start, arg) = *unsafe { Box::from_raw(p as *mut (real::StartFn, usize)) };
    register_thread();
    alt_stack_for_thread();
    start(arg as *mut libc::c_void)
}

/// Key whose destructor takes back a program thread's alternate signal
/// stack as it exits (`signals::take_alt_stack`). None: not made, and
/// threads get none.
static ALT_STACK_KEY: std::sync::OnceLock<Option<libc::pthread_key_t>> = std::sync::OnceLock::new();

extern "C" fn alt_stack_gone(_: *mut libc::c_void) {
    signals::take_alt_stack();
}

/// Give the calling program thread an alternate signal stack of uzswap's
/// (signal mode only; `signals::give_alt_stack`), taken back at its exit.
fn alt_stack_for_thread() {
    let Some(st) = active() else { return };
    if !uzswap::region::sigbus_installed() {
        return;
    }
    let _g = Internal::enter();
    uzswap::region::prepare_signal_thread(st.uz.chunk_bytes());
    let Some(key) = exit_key(&ALT_STACK_KEY, alt_stack_gone) else {
        return;
    };
    signals::give_alt_stack();
    arm_exit_key(key);
}

/// The thread-specific key in `cell` (made on first use) whose destructor
/// `at_exit` runs as a thread that armed it exits; None if it cannot be made.
fn exit_key(
    cell: &std::sync::OnceLock<Option<libc::pthread_key_t>>,
    at_exit: extern "C" fn(*mut libc::c_void),
) -> Option<libc::pthread_key_t> {
    *cell.get_or_init(|| {
        let mut k: libc::pthread_key_t = 0;
        // SAFETY: `k` is a valid out pointer; the destructor is a plain fn.
        let rc = unsafe { libc::pthread_key_create(&mut k, Some(at_exit)) };
        (rc == 0).then_some(k)
    })
}

/// Have `key`'s destructor run when the calling thread exits.
fn arm_exit_key(key: libc::pthread_key_t) {
    // Any non-null value: the destructor runs only for those.
    // SAFETY: `key` was made by `exit_key`.
    unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<libc::c_void>()) };
}

/// Key whose destructor unregisters a registered thread as it exits (by
/// returning or by `pthread_exit`), before the thread library frees the
/// rseq area the registration points at. None: the key could not be made,
/// and no thread registers.
static LOCALITY_KEY: std::sync::OnceLock<Option<libc::pthread_key_t>> = std::sync::OnceLock::new();

extern "C" fn unregister_thread(_: *mut libc::c_void) {
    // Not through `active()`: however the thread ends, with an internal
    // scope open or not, its registration must go before its rseq area.
    let p = STATE.load(Acquire);
    if p.is_null() || DETACHED.load(Relaxed) {
        return;
    }
    // SAFETY: set once from a leaked Box and never freed.
    let st = unsafe { &*p };
    let _g = Internal::enter();
    st.uz.unregister_thread();
}

/// Register the calling program thread (its registration allocates from
/// glibc: the table is read by handler threads, which must never fault on
/// region memory).
fn register_thread() {
    let Some(st) = active() else { return };
    let _g = Internal::enter();
    // Without the key nothing would unregister the thread at its exit.
    let Some(key) = exit_key(&LOCALITY_KEY, unregister_thread) else {
        return;
    };
    if st.uz.register_thread() {
        arm_exit_key(key);
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    let _g = Internal::enter();
    real::resolve();
    // Before any fork, even one made where the library stays out of the
    // way: the program's handlers are registered after these.
    fork::register_handlers();
    let mut cfg = match config::Config::from_env() {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => die(&e),
    };
    let go = go_runtime();
    if go {
        cfg.foreign_drops = true;
        if cfg.handler == HandlerMode::Signal {
            say("a Go program sets its own signal masks: faults are resolved by handler threads, not in signal mode");
        }
        cfg.handler = HandlerMode::Block;
    }
    if matches!(cfg.handler, HandlerMode::Auto | HandlerMode::Signal)
        && alloc::program_brings_malloc()
    {
        // Its heap is then in region memory, and signal mode resolves a
        // fault taken inside it (holding its lock) in a handler that
        // reaches that allocator through libc (a thread-local's first use
        // registers its destructor with `calloc`; freeing what libc
        // allocated): rustc, which links jemalloc, hung on the lock or
        // died of a fault taken with SIGBUS blocked. Handler threads
        // instead (`region/sigbus.rs`); the system-call guarantee is the
        // same. Said only where signal mode was asked for by name.
        if cfg.handler == HandlerMode::Signal {
            say("the program brings its own malloc: faults are resolved by handler threads, not in signal mode");
        }
        cfg.handler = HandlerMode::Block;
    }
    if cfg.no_inherit {
        config::drop_preload_from_environ();
    }
    // A fork after evictions brings uzswap's threads to rest, so that its
    // child can take the evicted memory over from its copy of the
    // instance; with `--fork-instance` every fork does (`fork.rs`).
    uzswap::compress::quiesce::enable();
    alloc::configure_glibc();
    uzswap::compress::thread_hook::set(uzswap_thread_began);
    uzswap::compress::thread_hook::set_scope(uzswap_scope_entered, uzswap_scope_left);
    // Program threads get alternate stacks of ours for the SIGBUS handler
    // (signal mode; `alt_stack_for_thread`).
    uzswap::region::use_alt_stacks();
    let uz = match Uzswap::new(cfg.uzswap()) {
        Ok(uz) => uz,
        Err(e) => die(&format!("cannot start: {e}")),
    };
    let pin_buffers = uz.kernel_faults() == KernelFaults::NotServed;
    if go && pin_buffers {
        // `uzswap run` refuses such a program; one exec'd under it runs
        // without uzswap rather than fail in the middle of its caller's
        // work.
        say("a Go program makes its system calls itself, where a fault on evicted memory is served only through /dev/userfaultfd (`uzswap setup`): it runs without uzswap");
        drop(uz);
        return;
    }
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    let uring_filtered = syscall::refuse_in_kernel();
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let uring_filtered = false;
    let st = Box::new(State {
        uz,
        vmas: parking_lot::Mutex::new(vma::Vmas::default()),
        pin_buffers,
        uring_filtered,
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        cfg,
    });
    alloc::configure_mimalloc();
    STATE.store(Box::into_raw(st), Release);
    streams::init(pin_buffers);
    report::arm();
    // The main thread is the program's once initialisation is over.
    drop(_g);
    register_thread();
    alt_stack_for_thread();
}

/// Whether the program is Go's (linked with cgo, which a dynamically
/// linked Go program is: its runtime exports `crosscall2`). Its runtime
/// makes its system calls without libc: `madvise` that drops region pages
/// behind uzswap's back, `rt_sigprocmask` that blocks SIGBUS, and reads
/// and writes that no wrapper of ours sees. So it needs handler threads
/// (a fault in signal mode came while SIGBUS was blocked, and the process
/// died of it) serving faults taken in the kernel, and an evictor that
/// looks for dropped pages (`Config::foreign_drops`).
fn go_runtime() -> bool {
    // SAFETY: a NUL-terminated name; the symbol is only looked up.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"crosscall2".as_ptr()) }.is_null()
}

fn say(msg: &str) {
    let line = format!("uzswap: {msg}\n");
    // SAFETY: writes our own buffer to stderr.
    unsafe { libc::write(2, line.as_ptr() as *const _, line.len()) };
}

fn die(msg: &str) -> ! {
    say(msg);
    // SAFETY: ends the process.
    unsafe { libc::_exit(125) }
}

fn set_errno(e: i32) {
    // SAFETY: errno is thread-local and always valid to write.
    unsafe { *libc::__errno_location() = e };
}

fn errno() -> i32 {
    // SAFETY: errno is thread-local and always valid to read.
    unsafe { *libc::__errno_location() }
}
