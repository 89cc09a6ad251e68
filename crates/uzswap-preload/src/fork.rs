//! `fork`: a child must see every byte its parent had.
//!
//! Without `UFFD_FEATURE_EVENT_FORK` (which unprivileged processes cannot
//! enable) a child's copy of a region is not registered, and a page evicted
//! at the fork would read as zeros there: silent corruption.
//!
//! The work is done in fork handlers registered with glibc before any of
//! the program's ([`register_handlers`]), so that every fork glibc makes
//! comes through it — `daemon`'s and `forkpty`'s too, which call glibc's
//! own fork — after the program's prepare handlers and before its child
//! handlers.
//!
//! After evictions, the child takes the evicted memory over from its
//! copy-on-write copy of the parent's instance (`uzswap::region::fork`):
//! the parent holds eviction and writeback, brings in only the chunks with
//! a page written back, brings uzswap's threads to rest and forks; the
//! child gives the parent's instance up (`Uzswap::abandon_in_child`) and,
//! before the program runs on, makes one of its own that takes every
//! region over with its evicted chunks (`Uzswap::adopt_inheriting`),
//! their entries referring to the objects in its copy of the parent's
//! pool. Nothing is decompressed at the fork, and the parent stays under
//! its budget. The child's budget is what the parent's usage left of the
//! budget, at least a sixteenth of it ([`child_budget`]). Where the threads
//! do not come to rest in time, or a page went to the device meanwhile,
//! the fork brings every evicted page in as below; where the child's
//! instance cannot be made, the child writes the evicted pages into place
//! from the parent's cache and runs detached.
//!
//! Before any eviction (and where the above falls back), the parent brings
//! every evicted page in first (`Uzswap::prepare_fork`), holding eviction
//! until the fork is done; the child then shares every page copy-on-write
//! and runs detached (plain memory, no budget) until it execs, or with
//! `--fork-instance` (below) under an instance of its own.
//!
//! With `--fork-instance`: the parent's instance is dead in the child (its
//! threads were the parent's), so the child gives it up and takes its
//! memory over with an instance of its own, under the same budget
//! (`Uzswap::adopt` for every region; `Vmas::adopt_in_child`). What the
//! parent left mapped stays and is charged to nobody in the child: it is the
//! parent's, shared copy-on-write, and compressing it there would add a copy
//! and free nothing while the parent maps it — a `BGSAVE` child of Redis
//! reads its whole dataset once and must not evict it. Everything the child
//! maps or faults in afresh (a PostgreSQL backend's sorts, a worker's
//! results) is charged and evicted under its budget. Each process has the
//! whole budget (not a share of one): a process tree of N holds at most N
//! budgets, plus what the children inherited.
//!
//! Where the child's instance cannot be made (no userfaultfd left, no
//! threads), it runs detached: plain memory, no budget, a line on stderr.
//!
//! Before a fork with a take-over every other thread of uzswap's comes to
//! rest (`uzswap::compress::quiesce`): a lock held at the instant of the
//! fork stays held in the child, and the child's instance takes some again
//! — `parking_lot`'s process-wide table of parked threads, whose bucket
//! locks no `atfork` handler holds, above all: one `multiprocessing`
//! worker in about fifty hung at its first contended lock before. Where
//! the threads do not come to rest in time (one inside waits for one at
//! rest), the child runs detached, which takes none of uzswap's locks.
//! The take-over of a child whose parent evicted nothing is deferred until
//! the child changes its memory ([`Deferred`]), and opt-in
//! (docs/ARCHITECTURE.md, "fork"). `exec` starts the new image under
//! uzswap again either way (the environment carries it).
//!
//! Costs: with evictions, an instance's start in the child (its threads,
//! a registration per region, a tree entry per evicted page); where the
//! fork falls back, a decompression of everything evicted and memory over
//! the budget until the parent's evictor takes it back; with
//! `--fork-instance`, in a child that allocates, an instance's start (a
//! bash subshell took 3.3 ms against 1.1 ms detached while every child
//! paid it). `vfork` and `posix_spawn` (which `system` and `popen` use)
//! share the parent's memory and do not come here: they stay as cheap as
//! without uzswap.
//!
//! Copies of the address space that run no fork handler — glibc's
//! `clone()` and the clone system calls without `CLONE_VM` — bring every
//! evicted page in and leave the child detached (the last section).

use crate::vma::{DONT_FORK, WIPE};
use crate::{real, Internal, State, DETACHED, STATE};
use std::cell::Cell;
use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicPtr, AtomicUsize};
use std::time::Duration;
use uzswap::compress::quiesce;
use uzswap::region::KernelFaults;
use uzswap::Uzswap;

/// How long a fork waits for uzswap's threads to come to rest before its
/// child runs detached instead (`quiesce::close`): they rest within a
/// fault's or an eviction batch's time, unless one waits on another.
const REST_TIMEOUT: Duration = Duration::from_millis(200);

/// One fork with a take-over at a time: a second, waiting inside uzswap,
/// would keep the first's threads from rest. A `std` mutex (a futex of its
/// own), not `parking_lot`'s: a thread parking on it is not inside, and
/// must not be in `parking_lot`'s table at the fork.
static ONE_FORK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// # Safety
/// As fork(2).
///
/// glibc's fork, which runs the handlers below. Where uzswap could not
/// ready the instance for it (a written-back page that would not read
/// back), the child exits at once and the caller gets `ENOMEM`, as before
/// any child existed: the child would read evicted memory as zeros.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let _ = IN_FORK_CALL.try_with(|c| c.set(true));
    // SAFETY: glibc's fork.
    let pid = unsafe { real::__fork() };
    let _ = IN_FORK_CALL.try_with(|c| c.set(false));
    if pid > 0 {
        if let Some(e) = REFUSED.try_with(|r| r.take()).ok().flatten() {
            // SAFETY: reaps the child just made, which exits at once.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::__WALL) };
            crate::say(&format!("fork refused: {e}"));
            crate::set_errno(libc::ENOMEM);
            return -1;
        }
    }
    pid
}

std::thread_local! {
    /// The fork in progress on this thread, from [`on_prepare`] to
    /// [`on_parent`] or [`on_child`] (the child's only thread is a copy of
    /// this one, with this cell).
    static PENDING: Cell<*mut Pending> = const { Cell::new(std::ptr::null_mut()) };
    /// This thread is inside the interposed [`fork`], which refuses a fork
    /// whose preparation failed (a caller of glibc's internal fork —
    /// `daemon`, `forkpty` — gets a child that says why and exits).
    static IN_FORK_CALL: Cell<bool> = const { Cell::new(false) };
    /// Why the last preparation failed, for [`fork`].
    static REFUSED: Cell<Option<String>> = const { Cell::new(None) };
}

/// A fork between its prepare handler and its parent or child handler.
enum Pending {
    /// The instance could not be readied: a child would read evicted
    /// memory as zeros.
    Failed(String),
    Held(Box<Held>),
}

/// What uzswap holds across the fork(2) itself.
struct Held {
    st: &'static State,
    /// Eviction held, uzswap's threads at rest where the child takes over.
    prepared: Prepared<'static>,
    /// What the parent holds of its budget: a sharing child has the rest.
    usage: u64,
    /// Our address-space map stays consistent in the child.
    vmas: parking_lot::MutexGuard<'static, crate::vma::Vmas>,
    /// The signal mask before a sharing fork held every signal.
    held: Option<libc::sigset_t>,
    /// The pinned stdio streams (`streams::pin_for_fork`), and the
    /// chunks ranges left out of the child cut (`Vmas::pin_fork_edges`).
    streams: Vec<uzswap::region::PinGuard<'static>>,
    /// The mid-size heap's lock.
    mid: crate::alloc::mid::ForkLock,
    g: Internal,
    one: std::sync::MutexGuard<'static, ()>,
}

/// Registers [`on_prepare`], [`on_parent`] and [`on_child`] with glibc,
/// once, before any handler of the program's: glibc runs prepare handlers
/// in the reverse order of their registration and the others in order, so
/// uzswap readies the instance after every prepare handler of the
/// program's (one that locks its allocator may fault on evicted memory,
/// which uzswap's threads at rest would never resolve) and a child takes
/// its memory over before any child handler of the program's reads it
/// (jemalloc's reinitialises its locks: a write of zeros there went to a
/// page that read as zeros, and was lost). Every fork glibc makes runs
/// them: `fork` and `__fork`, and those of `daemon` and `forkpty`, which
/// call glibc's own and never came through the interposed `fork` (their
/// children read every evicted page as zeros).
pub(crate) fn register_handlers() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: plain functions that live as long as the process; no
        // object to unregister them with (this library is never closed).
        let r = unsafe {
            real_register_atfork(
                Some(on_prepare),
                Some(on_parent),
                Some(on_child),
                std::ptr::null_mut(),
            )
        };
        if r != 0 {
            crate::die("cannot register fork handlers");
        }
    });
}

type Handler = Option<unsafe extern "C" fn()>;
type RegisterAtfork = unsafe extern "C" fn(Handler, Handler, Handler, *mut libc::c_void) -> i32;

/// glibc's `__register_atfork` (the symbol is ours), looked up on first use
/// (a library's constructor may register before this one's).
unsafe fn real_register_atfork(
    prepare: Handler,
    parent: Handler,
    child: Handler,
    dso: *mut libc::c_void,
) -> i32 {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    let mut f = REAL.load(Acquire);
    if f == 0 {
        let _g = Internal::enter();
        // SAFETY: a NUL-terminated name; RTLD_NEXT finds libc's.
        f = unsafe { libc::dlsym(libc::RTLD_NEXT, c"__register_atfork".as_ptr()) } as usize;
        if f == 0 {
            crate::die("cannot find __register_atfork");
        }
        REAL.store(f, Release);
    }
    // SAFETY: glibc's `__register_atfork`, of this type.
    unsafe {
        let f: RegisterAtfork = std::mem::transmute(f);
        f(prepare, parent, child, dso)
    }
}

/// `pthread_atfork` (libc_nonshared's, in the program) and every library's
/// handlers come here: uzswap's are registered first.
///
/// # Safety
/// As glibc's.
#[no_mangle]
pub unsafe extern "C" fn __register_atfork(
    prepare: Handler,
    parent: Handler,
    child: Handler,
    dso: *mut libc::c_void,
) -> i32 {
    register_handlers();
    // SAFETY: the caller's arguments.
    unsafe { real_register_atfork(prepare, parent, child, dso) }
}

extern "C" fn on_prepare() {
    let Some(st) = crate::active() else {
        return;
    };
    let p = match begin(st, true) {
        Ok(h) => Pending::Held(Box::new(h)),
        Err(e) => Pending::Failed(e.to_string()),
    };
    let p = Box::into_raw(Box::new(p));
    PENDING.with(|c| c.set(p));
}

fn take_pending() -> Option<Pending> {
    let p = PENDING.with(|c| c.replace(std::ptr::null_mut()));
    // SAFETY: stored from a leaked Box by `on_prepare` on this thread.
    (!p.is_null()).then(|| *unsafe { Box::from_raw(p) })
}

extern "C" fn on_parent() {
    match take_pending() {
        None => {}
        Some(Pending::Failed(e)) => {
            // `try_with`: a panic here (a fork from a thread-local's
            // destructor) would abort the process.
            let refused = IN_FORK_CALL.try_with(Cell::get).unwrap_or(false)
                && REFUSED.try_with(|r| r.set(Some(e.clone()))).is_ok();
            if !refused {
                crate::say(&format!(
                    "fork: the child could not be given its evicted memory ({e}); it exits"
                ));
            }
        }
        Some(Pending::Held(h)) => in_parent(*h),
    }
}

extern "C" fn on_child() {
    match take_pending() {
        None => {}
        // SAFETY: ending this process: it would read evicted memory as
        // zeros. Its parent says why.
        Some(Pending::Failed(_)) => unsafe { libc::_exit(127) },
        Some(Pending::Held(h)) => in_child(*h),
    }
}

/// Ready the instance for a fork (after every prepare handler of the
/// program's). On failure nothing is held.
fn begin(st: &'static State, share: bool) -> Result<Held, uzswap::region::RegionError> {
    let one = ONE_FORK.lock().unwrap_or_else(|e| e.into_inner());
    let g = Internal::enter();
    // The mid-size heap stays consistent in the child. Taken before
    // uzswap's threads are brought to rest: a program thread holding it
    // may fault on the heap's memory, and would wait at the shut gate
    // while the fork waited for the lock. Others only ever try it.
    let mid = crate::alloc::mid::lock_for_fork();
    // Before eviction is held: bringing a stream in may need room.
    let streams = if st.uz.evicted_any() {
        let mut pins = crate::streams::pin_for_fork(st);
        pins.extend(st.vmas.lock().pin_fork_edges(st));
        pins
    } else {
        Vec::new()
    };
    let prepared = if share {
        prepare(st)?
    } else {
        prepare_detached(st)?
    };
    let usage = st.uz.usage();
    let vmas = st.vmas.lock();
    // A sharing child's evicted memory is in the parent's instance only
    // until its take-over: the signals a handler could read it in are held
    // from here (a signal arriving in the child between the fork and the
    // take-over would run its handler on pages that read as zeros), in the
    // parent only across the fork.
    let held = prepared.sharing.then(hold_signals);
    Ok(Held {
        st,
        prepared,
        usage,
        vmas,
        held,
        streams,
        mid,
        g,
        one,
    })
}

/// The parent's side, after the fork(2) (made or failed).
fn in_parent(h: Held) {
    let Held {
        prepared,
        vmas,
        held,
        streams,
        mid,
        g,
        one,
        ..
    } = h;
    drop(mid);
    if let Some(old) = held {
        // SAFETY: restoring the mask `hold_signals` saved.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
    let Prepared {
        guard,
        rest,
        sharing,
        after_evictions,
    } = prepared;
    if after_evictions {
        match sharing {
            true => FORKS_SHARED.fetch_add(1, Relaxed),
            false => FORKS_BROUGHT_IN.fetch_add(1, Relaxed),
        };
    }
    drop(vmas);
    drop(rest);
    drop(guard);
    drop(streams);
    drop(g);
    drop(one);
}

/// The child's side, before any child handler of the program's runs.
fn in_child(h: Held) {
    let Held {
        st,
        prepared,
        usage,
        mut vmas,
        held,
        streams,
        mid,
        g,
        one,
    } = h;
    drop(mid);
    vmas.hold_fork_holes();
    let Prepared {
        guard,
        rest,
        sharing,
        ..
    } = prepared;
    // The slots and the instance's threads are the parent's, and so are
    // the counts (of forks, and of threads inside uzswap), and the pins.
    std::mem::forget(guard);
    std::mem::forget(streams);
    DETACHED.store(true, Release);
    FORKS_SHARED.store(0, Relaxed);
    FORKS_BROUGHT_IN.store(0, Relaxed);
    quiesce::reset_in_child();
    let Some(rest) = rest else {
        drop(vmas);
        drop(g);
        drop(one);
        return;
    };
    // Open: the child's own threads pass it.
    drop(rest);
    // SAFETY: just forked, nothing of uzswap's has run here since, and the
    // parent's instance is never used again (DETACHED, then STATE replaced).
    unsafe { st.uz.abandon_in_child() };
    let taken = std::mem::take(&mut *vmas);
    drop(vmas);
    if sharing {
        // The evicted memory is in the parent's instance only: taken over
        // now, before the program reads any of it, with the signals a
        // handler could read it in held since before the fork (a page a
        // handler faulted in before its region was registered would read
        // zeros, and stay).
        let held = held.expect("signals held for a sharing fork");
        take_over_sharing(st, taken, usage);
        // SAFETY: restoring the mask `hold_signals` saved.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &held, std::ptr::null_mut()) };
        drop(g);
        drop(one);
        if crate::active().is_some() {
            crate::register_thread();
        }
        return;
    }
    let d = Box::new(Deferred {
        parent: st,
        vmas: taken,
    });
    DEFERRED.store(Box::into_raw(d), Release);
    // A child exiting takes nothing over: its allocator's last purge
    // (mimalloc's, from the loader's destructors) would start an instance
    // while the process is torn down.
    // SAFETY: registering a plain function.
    unsafe { libc::atexit(no_take_over) };
    drop(g);
    drop(one);
}

/// Forks of this process whose child took the evicted memory over, and
/// forks after evictions that brought it in instead (a fork(2) that failed
/// after its preparation counts too)
/// (`forks_shared`, `forks_brought_in` in the figures).
static FORKS_SHARED: AtomicUsize = AtomicUsize::new(0);
static FORKS_BROUGHT_IN: AtomicUsize = AtomicUsize::new(0);

/// (`forks_shared`, `forks_brought_in`).
pub(crate) fn counts() -> (usize, usize) {
    (FORKS_SHARED.load(Relaxed), FORKS_BROUGHT_IN.load(Relaxed))
}

/// What a fork holds across the fork(2) itself.
struct Prepared<'a> {
    /// Eviction (and for a sharing fork, writeback) held.
    guard: uzswap::region::ForkGuard<'a>,
    /// uzswap's threads at rest, for a child that takes its memory over.
    rest: Option<quiesce::Closed>,
    /// The child takes the evicted memory over from its copy of the
    /// parent's instance (`Uzswap::adopt_inheriting`); else every evicted
    /// page was brought in.
    sharing: bool,
    /// The instance had evicted memory (counted as shared or brought in).
    after_evictions: bool,
}

/// Block every signal but the synchronous ones (a fault's SIGBUS above
/// all, which signal mode resolves faults by); the mask before.
fn hold_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data, filled by the calls below.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        for s in [
            libc::SIGBUS,
            libc::SIGSEGV,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
        ] {
            libc::sigdelset(&mut all, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    }
}

/// Ready the instance for a fork. Where it has evicted memory, the child
/// takes it over from its copy of this instance, with the threads at rest
/// (`uzswap::region::fork`, docs/ARCHITECTURE.md "fork"); where that cannot
/// be had (they did not come to rest, or a page went to the device), or
/// nothing was ever evicted, every evicted page is brought in and the
/// child runs detached, or with `--fork-instance` takes its memory over
/// when it first changes it.
fn prepare(st: &'static State) -> Result<Prepared<'static>, uzswap::region::RegionError> {
    if st.uz.evicted_any() {
        let guard = st.uz.prepare_fork_sharing()?;
        if let Some(rest) = guard.rest_for_sharing(REST_TIMEOUT)? {
            return Ok(Prepared {
                guard,
                rest: Some(rest),
                sharing: true,
                after_evictions: true,
            });
        }
        guard.bring_in_all()?;
        return Ok(Prepared {
            guard,
            rest: rest_for_take_over(st),
            sharing: false,
            after_evictions: true,
        });
    }
    let guard = st.uz.prepare_fork()?;
    Ok(Prepared {
        guard,
        rest: rest_for_take_over(st),
        sharing: false,
        after_evictions: false,
    })
}

/// For a copy made without the fork handlers ([`clone`], [`by_syscall`]):
/// every evicted page brought in and eviction held, no take-over, the
/// child detached.
fn prepare_detached(st: &'static State) -> Result<Prepared<'static>, uzswap::region::RegionError> {
    let after_evictions = st.uz.evicted_any();
    Ok(Prepared {
        guard: st.uz.prepare_fork()?,
        rest: None,
        sharing: false,
        after_evictions,
    })
}

/// With `--fork-instance`, every other thread of uzswap's at rest, holding
/// no lock the child takes (`quiesce`); a detached child takes none.
fn rest_for_take_over(st: &State) -> Option<quiesce::Closed> {
    if !st.cfg.fork_instance {
        return None;
    }
    let rest = quiesce::close(REST_TIMEOUT);
    if rest.is_none() {
        crate::say(&format!(
            "fork: uzswap's threads did not come to rest within {} ms; \
             this child runs detached (plain memory, no budget)",
            REST_TIMEOUT.as_millis()
        ));
    }
    rest
}

extern "C" fn no_take_over() {
    // Leaked: the parent's handles may not be dropped here.
    DEFERRED.store(std::ptr::null_mut(), Release);
}

/// A forked child's take-over, deferred until the child changes its memory
/// (`active_for_memory`: a mapping call; more than [`DEFERRED_BYTES`]
/// allocated and not freed). A fork that execs at once (a shell's) then
/// pays for no instance, and a child that reads what it inherited and
/// allocates little runs as a detached one. Until then the child is
/// detached: its allocations go to glibc, its memory is plain, and its
/// regions are as the fork left them — so the parent's chunk states, read at the
/// take-over, still say which chunks may map pages (nothing but a mapping
/// call, which takes over first, or an allocation, which goes to glibc,
/// changes region memory in between).
struct Deferred {
    parent: &'static State,
    vmas: crate::vma::Vmas,
}

static DEFERRED: AtomicPtr<Deferred> = AtomicPtr::new(std::ptr::null_mut());

/// Bytes a child with a deferred take-over may hold allocated (from glibc)
/// before it takes its memory over (a shell's child before `exec`
/// allocates a few KiB; a child that compresses value by value, as Redis's
/// `BGSAVE`, frees each buffer before the next).
pub(crate) const DEFERRED_BYTES: usize = 1 << 20;

static DEFERRED_ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// One take-over at a time (`std`'s mutex: nothing of `parking_lot`'s in a
/// child before its instance exists).
static TAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether this process is a child whose take-over is deferred.
pub(crate) fn deferred() -> bool {
    !DEFERRED.load(Relaxed).is_null()
}

/// Count `size` bytes allocated while the take-over is deferred; take it
/// over once those live add up past [`DEFERRED_BYTES`]. True if this
/// allocation goes to the child's instance.
pub(crate) fn allocated_while_deferred(size: usize) -> bool {
    if crate::internal() {
        return false;
    }
    let total = DEFERRED_ALLOCATED
        .fetch_add(size, Relaxed)
        .saturating_add(size);
    total > DEFERRED_BYTES && take_over_deferred().is_some()
}

/// A block of `size` bytes allocated from glibc freed while the take-over
/// is deferred (one allocated before the fork too: the count only tends
/// low, never negative).
pub(crate) fn freed_while_deferred(size: usize) {
    let _ = DEFERRED_ALLOCATED.fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(size)));
}

/// Take the deferred memory over now, if it still is: the child's
/// instance, or `None` where the child runs detached.
pub(crate) fn take_over_deferred() -> Option<&'static State> {
    // Not from a thread whose thread-locals are gone (it is exiting): an
    // instance's start needs them.
    if DEFERRED.load(Acquire).is_null() || crate::INTERNAL.try_with(|_| ()).is_err() {
        return None;
    }
    let _one = TAKING.lock().unwrap_or_else(|e| e.into_inner());
    let p = DEFERRED.swap(std::ptr::null_mut(), AcqRel);
    if p.is_null() {
        // Another thread took it over while this one waited.
        return crate::active();
    }
    // SAFETY: stored from a leaked Box by `fork`, taken out once (swapped).
    let d = unsafe { Box::from_raw(p) };
    let g = Internal::enter();
    match take_over(d.parent, d.vmas, None) {
        Ok(child) => {
            STATE.store(child, Release);
            DETACHED.store(false, Release);
            // SAFETY: just stored, from a leaked Box.
            crate::streams::after_fork(unsafe { &*child });
            crate::report::start_interval();
            drop(g);
            crate::register_thread();
            crate::active()
        }
        Err(e) => {
            crate::say(&format!(
                "fork: the child runs without uzswap (plain memory, no budget): {e}"
            ));
            None
        }
    }
}

/// In a child forked from the process of `parent` (whose instance it gave
/// up at the fork, `Uzswap::abandon_in_child`): an instance of the
/// child's own over the memory `vmas` maps (taken out of the parent's
/// state, which is never used again). With `sharing` (the parent's
/// usage at the fork), its evicted chunks are taken over too, and the
/// budget is what the parent left of it. On failure everything is leaked:
/// the parent's handles may not be dropped here; with `sharing`, nothing
/// is left registered.
fn take_over(
    parent: &'static State,
    mut vmas: crate::vma::Vmas,
    sharing: Option<u64>,
) -> Result<*mut State, String> {
    let mut cfg = parent.cfg.uzswap();
    if let Some(usage) = sharing {
        // The parent's own budget (itself a child's, in a grandchild).
        cfg.budget = parent.uz.config().budget;
        cfg.budget = child_budget(&cfg, usage);
    }
    // Its threads are not waited for where the program's allocator is
    // ours (its starting threads allocate from glibc): a child that execs
    // at once, as a shell's, pays little more than their creation.
    let new = || Uzswap::new(cfg);
    let made = if crate::alloc::program_brings_malloc() {
        new()
    } else {
        uzswap::compress::thread_hook::without_waiting(new)
    };
    let uz = match made {
        Ok(uz) => uz,
        Err(e) => {
            std::mem::forget(vmas);
            return Err(e.to_string());
        }
    };
    // While regions are taken over one by one, nothing of them is evicted:
    // a fallback rebuilds the memory from the parent's cache alone, and
    // must find what the parent left mapped still there.
    let held = sharing.map(|_| uz.hold_eviction());
    if let Err(e) = vmas.adopt_in_child(&uz, sharing.is_some()) {
        if sharing.is_some() {
            // SAFETY: the instance is leaked below and its regions with it
            // (eviction held for good: its evictor has nothing to do).
            unsafe { uz.unregister_all_in_child() };
        }
        std::mem::forget(held);
        std::mem::forget(vmas);
        std::mem::forget(uz);
        return Err(e);
    }
    drop(held);
    Ok(Box::into_raw(Box::new(State {
        pin_buffers: uz.kernel_faults() == KernelFaults::NotServed,
        // A child inherits its parent's filter.
        uring_filtered: parent.uring_filtered,
        uz,
        vmas: parking_lot::Mutex::new(vmas),
        cfg: parent.cfg.clone(),
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
    })))
}

/// A child's budget where it takes evicted memory over: what the parent's
/// usage (`usage`, resident and pool at the fork) left of the budget, so
/// that parent and child together hold about one budget as the kernel's
/// memory cgroup holds a process tree to one limit, but never below
/// [`CHILD_BUDGET_FLOOR`] of it (a child that must evict all it reads
/// pays a fault per chunk; what it reads and does not write is dropped
/// again, not compressed: `uzswap::region::fork`).
fn child_budget(cfg: &uzswap::UzswapConfig, usage: u64) -> u64 {
    let floor = (cfg.budget / CHILD_BUDGET_FLOOR).max(uzswap::region::min_budget(cfg));
    cfg.budget.saturating_sub(usage).max(floor)
}

/// The least share of the budget a sharing child gets: a sixteenth. What
/// a child faults in is its own copy, on top of what its parent holds
/// (the kernel's child reads a swapped-out page into the swap cache,
/// shared, charged once), so the floor is what the tree may hold beyond
/// one budget. Redis's `BGSAVE` child at a quarter added 53 MiB to a
/// 212 MiB budget; at a sixteenth, since a child keeps what it reads as
/// clean copies of its parent's objects, it saves in 3-6 s where it took
/// 2 s, and at the same real memory the whole run is faster
/// (docs/BENCHMARKS.md, "A forked child's share of the budget").
const CHILD_BUDGET_FLOOR: u64 = 16;

/// In a child forked with its evicted memory left in the parent's instance
/// (`prepare`'s `sharing`): take it over with an instance of its own, or
/// where that cannot be made, write every evicted page into place from the
/// parent's cache and run detached (plain memory, no budget, a line says
/// so). The program runs on only once its memory reads as the parent's.
fn take_over_sharing(parent: &'static State, vmas: crate::vma::Vmas, usage: u64) {
    let (left_out, wiped) = (vmas.fork_ranges(DONT_FORK), vmas.fork_ranges(WIPE));
    match take_over(parent, vmas, Some(usage)) {
        Ok(child) => {
            STATE.store(child, Release);
            DETACHED.store(false, Release);
            // SAFETY: just stored, from a leaked Box.
            crate::streams::after_fork(unsafe { &*child });
            crate::report::start_interval();
        }
        Err(e) => {
            // SAFETY: the parent's instance was given up at this fork,
            // after `sharable` held there, and nothing else uses it; the
            // ranges left out of the child are made writable for the
            // writes, then inaccessible again, and those to wipe wiped.
            let put = unsafe {
                for &(a, b) in &left_out {
                    real::mmap(a as *mut _, b - a, RW, MAP_FIXED_PRIVATE_ANON, -1, 0);
                }
                let put = parent.uz.materialize_in_child();
                for &(a, b) in &left_out {
                    crate::vma::hold_hole(a, b);
                }
                for &(a, b) in &wiped {
                    real::madvise(a as *mut _, b - a, libc::MADV_DONTNEED);
                }
                put
            };
            match put {
                Ok(()) => crate::say(&format!(
                    "fork: the child runs without uzswap (plain memory, no budget): {e}"
                )),
                Err(e2) => {
                    crate::say(&format!(
                        "fork: the child could take over neither its memory ({e}) \
                         nor its parent's evicted pages ({e2}); it exits"
                    ));
                    // SAFETY: ending this process; nothing of it is used.
                    unsafe { libc::_exit(127) };
                }
            }
        }
    }
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;
const MAP_FIXED_PRIVATE_ANON: i32 = libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

// ---------------------------------------------------------------------------
// Copies of the process that no fork handler sees
// ---------------------------------------------------------------------------
//
// glibc's `clone()` wrapper and the clone system calls made through
// `syscall(2)` copy the address space (without `CLONE_VM`) and run no fork
// handler: the child's copy of every evicted page read as zeros
// (`fork_paths.c`'s clone, sysclone and clone3: 6.6 M of 8.4 M words).
// Container and sandbox tools start their first process so, often with
// namespace flags. The child runs on a stack its caller chose, of a size
// uzswap cannot know, or with the C library's view of the process stale
// (a raw clone's child still has its parent's thread id cached), so it is
// not a place to start an instance: the parent brings every evicted page in
// first, holding eviction across the call (`prepare_detached`), and the
// child runs detached, plain memory, until it execs — as a fork before any
// eviction. A copy with a thread pointer of its own (`CLONE_SETTLS`) is
// refused: the child's side of the work reads this thread's locals.

/// A copy's preparation, or why there is none to make: `None` where the
/// copy needs no work (uzswap is not active here, or the memory is
/// shared), `Err` where it is refused (errno and message set).
fn prepare_copy(flags: u64, what: &str) -> Option<Result<Box<Held>, ()>> {
    if flags & libc::CLONE_VM as u64 != 0 {
        return None;
    }
    let st = crate::active()?;
    if flags & libc::CLONE_SETTLS as u64 != 0 {
        crate::say(&format!(
            "{what} refused: a copy of the address space with a thread pointer of its own \
             (CLONE_SETTLS without CLONE_VM) is not supported under uzswap"
        ));
        crate::set_errno(libc::EINVAL);
        return Some(Err(()));
    }
    Some(match begin(st, false) {
        Ok(h) => Ok(Box::new(h)),
        Err(e) => {
            crate::say(&format!("{what} refused: {e}"));
            crate::set_errno(libc::ENOMEM);
            Err(())
        }
    })
}

type CloneFn = extern "C" fn(*mut libc::c_void) -> libc::c_int;

/// What [`clone`] hands its child: the preparation and the caller's
/// function. Set by the parent under the fork lock (`Held::one`), read by
/// the child in its own copy of memory.
struct CloneCall {
    held: Box<Held>,
    f: CloneFn,
    arg: *mut libc::c_void,
}

static CLONE_CALL: AtomicPtr<CloneCall> = AtomicPtr::new(std::ptr::null_mut());

extern "C" {
    /// glibc's `clone` (the `clone` symbol is ours). Variadic: the parent
    /// tid, the thread pointer and the child tid follow, read where the
    /// flags name them.
    fn __clone(
        f: CloneFn,
        stack: *mut libc::c_void,
        flags: libc::c_int,
        arg: *mut libc::c_void,
        ...
    ) -> libc::c_int;
}

/// As clone(2)'s glibc wrapper. Variadic in C: the three trailing
/// arguments are passed in registers as these are (x86-64, aarch64), and
/// read by glibc only where the flags name them, whether the caller passed
/// them or not.
///
/// # Safety
/// As glibc's `clone`.
#[no_mangle]
pub unsafe extern "C" fn clone(
    f: CloneFn,
    stack: *mut libc::c_void,
    flags: libc::c_int,
    arg: *mut libc::c_void,
    ptid: *mut libc::pid_t,
    tls: *mut libc::c_void,
    ctid: *mut libc::pid_t,
) -> libc::c_int {
    let held = match prepare_copy(flags as u32 as u64, "clone") {
        // SAFETY: the caller's call, passed on unchanged.
        None => return unsafe { __clone(f, stack, flags, arg, ptid, tls, ctid) },
        Some(Err(())) => return -1,
        Some(Ok(h)) => h,
    };
    let call = Box::into_raw(Box::new(CloneCall { held, f, arg }));
    CLONE_CALL.store(call, Release);
    // SAFETY: the caller's call, the child entering through
    // `clone_child`, which runs the caller's function with its argument.
    let pid = unsafe {
        __clone(
            clone_child,
            stack,
            flags,
            std::ptr::null_mut(),
            ptid,
            tls,
            ctid,
        )
    };
    let errno = crate::errno();
    CLONE_CALL.store(std::ptr::null_mut(), Relaxed);
    // SAFETY: leaked above; the child has its own copy.
    let call = unsafe { Box::from_raw(call) };
    in_parent(*call.held);
    crate::set_errno(errno);
    pid
}

/// The child of [`clone`]: detached before the caller's function runs.
extern "C" fn clone_child(_: *mut libc::c_void) -> libc::c_int {
    let p = CLONE_CALL.swap(std::ptr::null_mut(), Acquire);
    // SAFETY: stored from a leaked Box by the parent before the clone;
    // this is the child's copy of it.
    let CloneCall { held, f, arg } = *unsafe { Box::from_raw(p) };
    in_child(*held);
    f(arg)
}

/// A clone system call made through `syscall(2)` whose child goes on from
/// the call (no new stack): `make` makes it, returning 0 in the child.
/// Calls that need no work pass through.
pub(crate) fn by_syscall(flags: u64, make: impl FnOnce() -> libc::c_long) -> libc::c_long {
    let held = match prepare_copy(flags, "clone") {
        None => return make(),
        Some(Err(())) => return -(crate::errno() as libc::c_long),
        Some(Ok(h)) => h,
    };
    let r = make();
    if r == 0 {
        in_child(*held);
    } else {
        in_parent(*held);
    }
    r
}
