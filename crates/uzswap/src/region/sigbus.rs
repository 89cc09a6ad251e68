//! Faults resolved in the thread that takes them (`HandlerMode::Signal`).
//!
//! With `UFFD_FEATURE_SIGBUS` the kernel queues no fault event: the access
//! raises SIGBUS in the faulting thread, and this module's handler resolves
//! the fault right there (the same resolver the handler threads run), then
//! returns so the access is retried. A fault then costs no wake-up of a
//! handler thread and no wake-up back, each 15-100 us between vCPUs of a
//! small VM, and the decompression runs on the CPU that needs the data.
//!
//! The price, and why it is opt-in: a fault the kernel takes on the
//! program's behalf (a system call reading or writing a region page that is
//! not mapped) fails with EFAULT instead of being resolved, and the process
//! shares its SIGBUS disposition with us (we chain to the handler that was
//! there before for every address outside our regions, so Rust's own stack
//! overflow reporting keeps working). A handler the program installs after
//! ours must not replace it: redis installs its crash reporter on SIGBUS at
//! start, and its first access to an evicted page was reported as a crash.
//! So the disposition the program sees is the chained one
//! ([`swap_chained`]): the preload library routes the program's
//! `sigaction(SIGBUS, ...)` there, and our handler stays.
//!
//! What runs in the signal handler is ordinary uzswap code: it takes the
//! cache's locks and allocates. That is sound because the signal is
//! synchronous: the interrupted instruction is an access to region memory,
//! and uzswap's own code never touches a region page that can be missing
//! while holding a lock (the evictor reads only mapped, write-protected
//! chunks). A program whose *allocator* keeps its heap in a uzswap region
//! must not use this mode: libc calls that allocator on the handler's
//! behalf, and a fault taken inside it holds its lock. The preload library
//! runs such a program (one whose `malloc` is not the library's: rustc
//! links jemalloc) with handler threads even where signal mode was asked
//! for, and readies every thread's thread-locals before its first fault
//! (`prepare_thread`).
//!
//! Locking: `INSTANCES` is read-held only to find the instance of an
//! address; it is written when an instance starts or stops. The chained
//! disposition is read by the handler with one atomic load and replaced
//! with one atomic swap into a ring of static slots: no lock and no
//! allocation, since the program may change SIGBUS from a signal handler
//! or a forked child.

use super::{fault, RegionError, Shared};
use parking_lot::RwLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock};

/// Instances in signal mode.
static INSTANCES: RwLock<Vec<Arc<Shared>>> = RwLock::new(Vec::new());
/// Whether our handler was installed (once per process), or why not.
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
/// The disposition chained to for every SIGBUS that is not ours: what
/// SIGBUS had before ours, or what the program set since. Null until
/// installed. Points into `SLOTS`.
static CHAINED: AtomicPtr<libc::sigaction> = AtomicPtr::new(std::ptr::null_mut());
/// Slots the chained disposition is written to, in turn: no lock and no
/// allocation, so the program may set SIGBUS from a signal handler (crash
/// handlers reset it there) or in a forked child. A reader holds a slot
/// for one call; it is rewritten only after `SLOTS_N` more changes.
const SLOTS_N: usize = 16;
static SLOTS: [Slot; SLOTS_N] = [const { Slot(std::cell::UnsafeCell::new(None)) }; SLOTS_N];
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

struct Slot(std::cell::UnsafeCell<Option<libc::sigaction>>);
// SAFETY: a slot is written only by the writer that took it from
// `NEXT_SLOT` (each index goes to one writer per round of `SLOTS_N`) before
// it is published, and read only after.
unsafe impl Sync for Slot {}

/// Write `a` to the next slot and make it the chained disposition;
/// returns the one it replaces (null before the first).
fn publish(a: libc::sigaction) -> *mut libc::sigaction {
    let slot = &SLOTS[NEXT_SLOT.fetch_add(1, Relaxed) % SLOTS_N];
    // SAFETY: this slot is ours until published (see `Slot`).
    let p = unsafe { (*slot.0.get()).insert(a) as *mut libc::sigaction };
    CHAINED.swap(p, AcqRel)
}

/// The kernel's `struct sigaction` (x86-64 and the generic layout).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// Whether our SIGBUS handler is installed in this process: SIGBUS must
/// then stay deliverable to every thread (a fault raised while SIGBUS is
/// blocked ends the process).
pub fn installed() -> bool {
    !CHAINED.load(Relaxed).is_null()
}

/// While our handler is installed: the SIGBUS disposition the program sees
/// (returned), replaced by `new` where given; None where it is not
/// installed (the kernel's disposition is the program's). For the preload
/// library's `sigaction` and `signal`.
pub fn swap_chained(new: Option<&libc::sigaction>) -> Option<libc::sigaction> {
    if !installed() {
        return None;
    }
    let old = match new {
        Some(n) => publish(*n),
        None => CHAINED.load(Acquire),
    };
    // SAFETY: a published slot (see `Slot`).
    Some(unsafe { *old })
}

/// Unblock SIGBUS in the calling thread with the kernel's own call (the
/// program's `sigprocmask` may be a preload library's).
fn unblock_sigbus() {
    let unblock: u64 = 1 << (libc::SIGBUS - 1);
    // SAFETY: a valid set of the kernel's size; no old set read.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_UNBLOCK,
            &unblock as *const u64,
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        );
    }
}

/// Route this instance's faults to the signal handler (installed once per
/// process).
pub(super) fn attach(sh: &Arc<Shared>) -> Result<(), RegionError> {
    INSTALLED
        .get_or_init(install)
        .as_ref()
        .map_err(|e| RegionError::Os(e.clone()))?;
    INSTANCES.write().push(sh.clone());
    Ok(())
}

/// Stop routing faults to `sh` (its regions are gone).
pub(super) fn detach(sh: &Shared) {
    INSTANCES.write().retain(|s| !std::ptr::eq(&**s, sh));
}

/// Whether the handler runs on an alternate signal stack (`use_alt_stacks`).
static ONSTACK: AtomicBool = AtomicBool::new(false);

/// Bytes of the alternate stack each thread gets from [`alt_stack`]: a
/// fault's resolution decompresses, and at the backstop evicts inline
/// (compression tables on the stack), so a few KiB (`SIGSTKSZ`) would not
/// do. Only what a fault uses is touched.
pub const ALT_STACK_BYTES: usize = 256 << 10;

/// Run the SIGBUS handler on an alternate signal stack where the faulting
/// thread has one: call before the first signal-mode instance starts, and
/// give every thread that may fault one of [`ALT_STACK_BYTES`] with
/// [`alt_stack`]. The kernel writes the signal's frame on the stack the
/// thread runs on; a stack the program carved from its heap (a coroutine's)
/// is region memory, and where the page below its stack pointer was
/// evicted or never touched the frame cannot be written, and the kernel
/// kills the program. Threads with no alternate stack (or a few KiB of
/// one, as Rust's own threads have) must not fault in signal mode: the
/// preload library gives one to every program thread and keeps the
/// program's `sigaltstack` from replacing it.
pub fn use_alt_stacks() {
    ONSTACK.store(true, Relaxed);
}

/// Create, in the calling thread, every thread-local with a destructor
/// that resolving a fault here may use: the fault's scratch (of `chunk`
/// bytes), the cache's compression scratch and staging slot, and
/// parking_lot's per-thread parking data. A thread-local's destructor is
/// registered at its first use, and glibc's registration allocates with
/// `calloc`, which resolves to the program's allocator where the program
/// brings one (rustc links jemalloc): created inside the SIGBUS handler of
/// a fault taken in that allocator, holding its lock (its metadata lies in
/// region memory), it waited on that lock for ever. The preload library
/// calls this for each program thread before the thread runs any of the
/// program's code (signal mode), and for each of uzswap's own threads as
/// it starts (`chunk` 0: they resolve no fault of their own): an evictor
/// whose first store made its scratch waited on the lock of a program
/// thread that had faulted inside its allocator, while that fault waited
/// for the evictor to make room.
pub fn prepare_thread(chunk: usize) {
    fault::prepare_scratch(chunk);
    crate::zswap::prepare_thread();
    // A zero-timeout wait parks once, which creates the parking data.
    let m = parking_lot::Mutex::new(());
    let mut g = m.lock();
    parking_lot::Condvar::new().wait_for(&mut g, std::time::Duration::ZERO);
}

/// Map an alternate signal stack of [`ALT_STACK_BYTES`] (plain memory,
/// never a region's, with a guard page below it) and make it the calling
/// thread's. Returns its mapping (base, length) for [`drop_alt_stack`].
pub fn alt_stack() -> std::io::Result<(usize, usize)> {
    let guard = crate::PAGE_SIZE;
    let len = ALT_STACK_BYTES + guard;
    // SAFETY: a fresh anonymous mapping; `MAP_STACK` keeps an mmap
    // interposer from placing it in a region.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the mapping's first page, ours.
    unsafe { libc::mprotect(p, guard, libc::PROT_NONE) };
    let ss = libc::stack_t {
        ss_sp: (p as usize + guard) as *mut _,
        ss_flags: 0,
        ss_size: ALT_STACK_BYTES,
    };
    // SAFETY: a valid stack_t over memory we own.
    if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: our mapping, not in use.
        unsafe { libc::munmap(p, len) };
        return Err(e);
    }
    Ok((p as usize, len))
}

/// Undo [`alt_stack`] on the calling thread (which must not be running on
/// it): disable it and unmap it.
pub fn drop_alt_stack(base: usize, len: usize) {
    let ss = libc::stack_t {
        ss_sp: std::ptr::null_mut(),
        ss_flags: libc::SS_DISABLE,
        ss_size: 0,
    };
    // SAFETY: disabling needs no memory; the mapping is ours and unused
    // once disabled.
    unsafe {
        if libc::sigaltstack(&ss, std::ptr::null_mut()) == 0 {
            libc::munmap(base as *mut _, len);
        }
    }
}

fn install() -> Result<(), String> {
    // SAFETY: zeroed is a valid sigaction; the fields we need are set below.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigbus as *const () as usize;
    // SA_ONSTACK only where every faulting thread has a stack of ours
    // (`use_alt_stacks`): resolving a fault (decompressing, inline
    // eviction) needs a real stack, and the alternate stacks threads have
    // otherwise (Rust sets one up per thread to report stack overflows)
    // are a few KiB. Without it the handler runs on the thread's own stack.
    // SA_RESTART: interrupted calls go on.
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    if ONSTACK.load(Relaxed) {
        sa.sa_flags |= libc::SA_ONSTACK;
    }
    // SAFETY: an empty mask is valid for sigemptyset.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both structs are valid for the call.
    if unsafe { libc::sigaction(libc::SIGBUS, &sa, &mut old) } != 0 {
        return Err(format!(
            "sigaction(SIGBUS): {}",
            std::io::Error::last_os_error()
        ));
    }
    publish(old);
    // A SIGBUS blocked since before us (inherited across `exec`) would end
    // the process at the first fault.
    unblock_sigbus();
    Ok(())
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // SAFETY: errno is thread-local; the handler must leave it as found.
    let errno = unsafe { *libc::__errno_location() };
    // From the lookup on, the thread is inside (`quiesce`): the locks it
    // reads take part in a fork's rest.
    let _inside = crate::compress::quiesce::inside();
    // A userfault is BUS_ADRERR with the address; a SIGBUS sent by a
    // process, or a machine-check one (BUS_MCEERR_*), is not ours.
    let found = (code == libc::BUS_ADRERR).then(|| {
        let list = INSTANCES.read();
        list.iter()
            .find_map(|sh| sh.lookup(addr).map(|r| (sh.clone(), r)))
    });
    let found = found.flatten();
    match found {
        Some((sh, r)) => {
            let (write, wp) = access(ctx);
            if fault::resolve_here(&sh, &r, addr, write, wp) {
                chain(sig, code, info, ctx);
            }
        }
        None => chain(sig, code, info, ctx),
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Whether the faulting access was a write, and whether it was a
/// write-protect fault (a write to a present page), from the page-fault
/// error code where the architecture's context is decoded (x86-64: the
/// kernel's `set_signal_archinfo` leaves it in the signal frame); elsewhere
/// None, and the chunk's state decides.
fn access(ctx: *mut libc::c_void) -> (Option<bool>, Option<bool>) {
    #[cfg(target_arch = "x86_64")]
    {
        const X86_PF_PROT: i64 = 1 << 0;
        const X86_PF_WRITE: i64 = 1 << 1;
        let uc = ctx as *const libc::ucontext_t;
        // SAFETY: the kernel passes a valid ucontext to SA_SIGINFO handlers.
        let err = unsafe { (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] };
        let write = err & X86_PF_WRITE != 0;
        (Some(write), Some(write && err & X86_PF_PROT != 0))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ctx;
        (None, None)
    }
}

/// A SIGBUS that is not ours: hand it to whoever had it before, or take the
/// default action (the process ends, as it would have without us).
fn chain(sig: libc::c_int, code: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let p = CHAINED.load(Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: a published slot (see `Slot`).
    let old = unsafe { *p };
    let program_handler = !matches!(old.sa_sigaction, libc::SIG_DFL | libc::SIG_IGN);
    if program_handler {
        if old.sa_flags & libc::SA_RESETHAND != 0 {
            // One-shot, as the kernel would have made it: the next one
            // takes the default action.
            // SAFETY: zeroed is a valid sigaction: SIG_DFL, no flags.
            publish(unsafe { std::mem::zeroed() });
        }
        // The program's handler runs with SIGBUS deliverable: ours runs
        // with it blocked, and a fault the program's handler takes on an
        // evicted page (a crash reporter reading its heap) would end the
        // process. Our handler nests: the fault is resolved and the
        // program's handler goes on.
        unblock_sigbus();
    }
    match old.sa_sigaction {
        // Sent by a process (si_code <= 0) to a program ignoring SIGBUS.
        libc::SIG_IGN if code <= 0 => {}
        libc::SIG_DFL | libc::SIG_IGN => {
            // The default action, as if we had not been here: the signal
            // is blocked while we run, so the raised one is delivered (and
            // ends the process) as soon as the handler returns.
            // The kernel's own call, not libc's: a preload library that
            // routes the program's `sigaction(SIGBUS)` to the chained
            // disposition would leave ours in place, and the raised signal
            // would come straight back here. A default disposition needs
            // no restorer, so the kernel's struct is all zeros but for it.
            let kact = KernelSigaction {
                handler: libc::SIG_DFL,
                flags: 0,
                restorer: 0,
                mask: 0,
            };
            // SAFETY: a valid kernel sigaction for SIGBUS, no old one read;
            // then the signal raised.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    libc::SIGBUS,
                    &kact as *const KernelSigaction,
                    std::ptr::null_mut::<KernelSigaction>(),
                    std::mem::size_of::<u64>(),
                );
                libc::raise(libc::SIGBUS);
            }
        }
        h if old.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous owner installed `h` as an SA_SIGINFO
            // handler, so it has this signature.
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(h) };
            f(sig, info, ctx);
        }
        h => {
            // SAFETY: a plain handler installed without SA_SIGINFO.
            let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
            f(sig);
        }
    }
}
