//! Fault-handling locality: a fault resolved on the CPU it was taken on.
//!
//! With handler threads (`HandlerMode::Block`), one bound per CPU
//! (`fault::handler_cpus`), a fault is cheapest when the handler on the
//! faulting thread's CPU resolves it: that handler runs as soon as the
//! thread blocks, and `UFFDIO_COPY` wakes the thread on the same CPU. But
//! every handler polling the userfaultfd is woken by every fault, and one
//! on another CPU (woken late, through an IPI to a halted vCPU) often reads
//! the next fault first and resolves it remotely: two cross-CPU wake-ups,
//! the most expensive fault there is (an exclusive epoll wait, which wakes
//! the first handler in queue order, made heap.py twice as slow).
//!
//! So a handler learns where each fault it resolves was taken: the message
//! names the faulting thread (`UFFD_FEATURE_THREAD_ID`), and a thread that
//! registered itself (`Uzswap::register_thread`; the preload library
//! registers the program's threads) is found here with the address of its
//! rseq area, whose `cpu_id` the kernel keeps current. A handler whose last
//! `STANDBY_AFTER` outcomes were all remote faults or empty wakes goes on
//! standby: it stops polling the userfaultfd and sleeps on its own eventfd
//! for at most `STANDBY_MS`. A handler that resolves a fault taken on the
//! CPU of a handler on standby wakes that handler. At least one handler
//! always polls (is not on standby), so a fault is resolved remotely until
//! its CPU's handler is back; it waits longer only while the one handler
//! polling is busy resolving another fault (a device read), at most
//! `STANDBY_MS`. The cost: faults of threads on one CPU are resolved one at
//! a time by that CPU's handler, where a second handler could overlap their
//! device reads.
//!
//! Unregistered threads and faults without a thread id count as local, and
//! empty wakes count only while some thread is registered: with no
//! registered thread the policy never moves, and every handler polls as
//! before. Without bound handlers or rseq (glibc before 2.35, or
//! `GLIBC_TUNABLES` turning it off) there is no policy at all.
//!
//! Locking: `threads` is read-locked by a handler for the lookup and the
//! read of the rseq field together, and write-locked by a thread
//! registering or unregistering itself, so a handler never reads the rseq
//! area of a thread that has gone (unregistration comes before the thread
//! library frees it). The standby counters are atomics; a stale count costs
//! at most one wasted wake or one standby of `STANDBY_MS`.

use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::*;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};

/// Non-local outcomes in a row before a handler goes on standby.
const STANDBY_AFTER: u32 = 4;
/// Longest standby before a handler polls the userfaultfd again: the
/// most a fault can wait when the one handler polling is itself stuck (a
/// slow device read, an eviction batch run inline).
const STANDBY_MS: i32 = 5;

/// Where this thread's rseq `cpu_id` is, if glibc registered rseq for it.
fn rseq_cpu_id() -> Option<&'static AtomicU32> {
    // `__rseq_offset` / `__rseq_size`: glibc 2.35+ (exported by ld.so).
    static OFFSET: std::sync::OnceLock<Option<isize>> = std::sync::OnceLock::new();
    let off = (*OFFSET.get_or_init(|| {
        // SAFETY: dlsym with NUL-terminated names; the symbols, where
        // present, are an isize and a u32 glibc never moves.
        unsafe {
            let o = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
            let s = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
            if o.is_null() || s.is_null() || *(s as *const u32) == 0 {
                return None;
            }
            Some(*(o as *const isize))
        }
    }))?;
    let tp = thread_pointer()?;
    // struct rseq { u32 cpu_id_start; u32 cpu_id; ... }: `cpu_id` at 4.
    let p = (tp as isize + off + 4) as *const AtomicU32;
    // SAFETY: the rseq area is in this thread's TCB, aligned (32 bytes),
    // live as long as the thread, and written only by the kernel.
    let a = unsafe { &*p };
    // Negative values: unregistered or registration failed.
    ((a.load(Relaxed) as i32) >= 0).then_some(a)
}

#[cfg(target_arch = "x86_64")]
fn thread_pointer() -> Option<usize> {
    let tp: usize;
    // SAFETY: reads the TCB's self pointer at %fs:0 (the x86-64 TLS ABI).
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    Some(tp)
}

#[cfg(target_arch = "aarch64")]
fn thread_pointer() -> Option<usize> {
    let tp: usize;
    // SAFETY: reads the thread pointer register.
    unsafe {
        std::arch::asm!("mrs {}, tpidr_el0", out(reg) tp, options(nostack, nomem, preserves_flags))
    };
    Some(tp)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn thread_pointer() -> Option<usize> {
    None
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// One handler's standby state.
struct Handler {
    cpu: usize,
    on_standby: AtomicBool,
    /// Written to end this handler's standby early.
    fd: uzswap_swap::fds::Owned<std::os::fd::OwnedFd>,
}

pub(super) struct Locality {
    /// Registered threads: tid -> address of their rseq `cpu_id`.
    threads: RwLock<FxHashMap<i32, usize>>,
    /// One per handler thread, in handler order; empty: no policy.
    handlers: Box<[Handler]>,
    /// Handlers polling the userfaultfd (not on standby).
    polling: AtomicUsize,
    /// Threads registered now: without any, no fault is known to be
    /// remote, and no handler goes on standby.
    registered: AtomicUsize,
    /// Faults resolved for a registered thread on another CPU; standbys.
    remote: AtomicU64,
    standbys: AtomicU64,
}

impl Locality {
    /// The policy for handlers bound to `cpus` (one each, in handler
    /// order); none where they are not bound or rseq is not there.
    pub(super) fn new(cpus: Option<&[usize]>) -> Self {
        let handlers: Vec<Handler> = match cpus {
            Some(c) if c.len() > 1 && rseq_cpu_id().is_some() => c
                .iter()
                .map_while(|&cpu| {
                    let fd = uzswap_swap::fds::eventfd(libc::EFD_NONBLOCK).ok()?;
                    Some(Handler {
                        cpu,
                        on_standby: AtomicBool::new(false),
                        fd,
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        // An eventfd that could not be made: no policy (dropping the
        // handlers made closes theirs).
        let handlers = if cpus.is_some_and(|c| c.len() == handlers.len()) {
            handlers.into_boxed_slice()
        } else {
            Box::new([])
        };
        Locality {
            polling: AtomicUsize::new(handlers.len()),
            registered: AtomicUsize::new(0),
            threads: Default::default(),
            handlers,
            remote: AtomicU64::new(0),
            standbys: AtomicU64::new(0),
        }
    }

    /// Whether the policy runs (bound handlers, rseq).
    pub(super) fn active(&self) -> bool {
        !self.handlers.is_empty()
    }

    /// Register the calling thread (see the module comment); returns
    /// whether it was (an inactive policy or no rseq: nothing to do).
    /// `in_region` says whether an address is region memory: a thread
    /// whose rseq area is there (a stack the program gave it from region
    /// memory) is not registered, as a handler reading it could fault on
    /// it.
    pub(super) fn register_current(&self, in_region: impl Fn(usize) -> bool) -> bool {
        if !self.active() {
            return false;
        }
        let Some(a) = rseq_cpu_id() else { return false };
        let addr = a as *const AtomicU32 as usize;
        if in_region(addr) {
            return false;
        }
        if self.threads.write().insert(gettid(), addr).is_none() {
            self.registered.fetch_add(1, Relaxed);
        }
        true
    }

    /// Unregister the calling thread; it must be called before the thread
    /// exits (its rseq area goes with it).
    pub(super) fn unregister_current(&self) {
        if self.active() && self.threads.write().remove(&gettid()).is_some() {
            self.registered.fetch_sub(1, Relaxed);
        }
    }

    /// The CPU thread `tid` (0: unknown) last ran on, if it registered.
    /// Read before its fault is resolved: after, the thread may run again
    /// elsewhere.
    pub(super) fn cpu_of(&self, tid: i32) -> Option<usize> {
        if tid == 0 || self.registered.load(Relaxed) == 0 {
            return None;
        }
        let t = self.threads.read();
        let a = *t.get(&tid)?;
        // SAFETY: a registered thread's rseq `cpu_id`, read under the lock
        // its unregistration takes, so the thread has not gone.
        let cpu = unsafe { &*(a as *const AtomicU32) }.load(Relaxed) as i32;
        (cpu >= 0).then_some(cpu as usize)
    }

    /// Handler `h` resolved a fault taken on `cpu` (`cpu_of` the faulting
    /// thread, read before it was resolved; None: unknown); `miss` counts
    /// its non-local outcomes in a row. A fault from a CPU whose handler
    /// is on standby wakes that handler.
    pub(super) fn resolved(&self, h: usize, cpu: Option<usize>, miss: &mut u32) {
        let Some(me) = self.handlers.get(h) else {
            return;
        };
        match cpu {
            Some(c) if c != me.cpu => {
                *miss += 1;
                self.remote.fetch_add(1, Relaxed);
                if let Some(o) = self.handlers.iter().find(|o| o.cpu == c) {
                    if o.on_standby.load(Relaxed) {
                        wake(o.fd.as_raw_fd());
                    }
                }
            }
            _ => *miss = 0,
        }
    }

    /// Handler `h` woke and found nothing. Counted only while threads are
    /// registered: otherwise nothing would ever wake a handler on standby
    /// early, and one handler would serve every CPU's faults.
    pub(super) fn empty_wake(&self, miss: &mut u32) {
        if self.registered.load(Relaxed) > 0 {
            *miss += 1;
        }
    }

    /// Whether handler `h`, with `miss` non-local outcomes in a row, goes
    /// on standby now (it is then counted off the pollers; `standby` must
    /// follow).
    pub(super) fn should_stand_by(&self, h: usize, miss: &mut u32) -> bool {
        if *miss < STANDBY_AFTER || h >= self.handlers.len() {
            return false;
        }
        let mut n = self.polling.load(Relaxed);
        while n > 1 {
            match self
                .polling
                .compare_exchange_weak(n, n - 1, AcqRel, Relaxed)
            {
                Ok(_) => {
                    *miss = 0;
                    self.standbys.fetch_add(1, Relaxed);
                    self.handlers[h].on_standby.store(true, Release);
                    return true;
                }
                Err(now) => n = now,
            }
        }
        false
    }

    /// Handler `h` on standby: sleep until woken, `stop_fd` is readable or
    /// `STANDBY_MS` pass; then it polls again.
    pub(super) fn standby(&self, h: usize, stop_fd: i32) {
        let me = &self.handlers[h];
        let mut fds = [
            libc::pollfd {
                fd: me.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // A wait for work (`quiesce`).
        // SAFETY: `fds` is a valid array of two pollfd for the call's duration.
        crate::compress::quiesce::idle(|| unsafe { libc::poll(fds.as_mut_ptr(), 2, STANDBY_MS) });
        me.on_standby.store(false, Release);
        self.polling.fetch_add(1, AcqRel);
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our nonblocking eventfd (a
        // wake that lands after this only shortens the next standby).
        let _ = unsafe { libc::read(me.fd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
    }

    pub(super) fn remote(&self) -> u64 {
        self.remote.load(Relaxed)
    }

    pub(super) fn standbys(&self) -> u64 {
        self.standbys.load(Relaxed)
    }

    #[cfg(test)]
    fn polling(&self) -> usize {
        self.polling.load(Relaxed)
    }
}

impl super::Uzswap {
    /// Tell the instance which CPU the calling thread runs on, so that the
    /// handler thread of that CPU resolves its faults (see
    /// `region/locality.rs`). Optional, and worth it only for threads that
    /// fault often; returns whether the thread was registered (it is not
    /// where handler threads are not bound to CPUs, glibc has no rseq, or
    /// the thread's stack is region memory). A registered thread must call
    /// [`Self::unregister_thread`] before it exits, and before the
    /// instance is dropped.
    pub fn register_thread(&self) -> bool {
        let sh = &self.owner.sh;
        sh.locality.register_current(|a| sh.lookup(a).is_some())
    }

    /// Undo [`Self::register_thread`] for the calling thread.
    pub fn unregister_thread(&self) {
        self.owner.sh.locality.unregister_current()
    }
}

fn wake(fd: i32) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from `one` to an eventfd of ours.
    let _ = unsafe { libc::write(fd, &one as *const u64 as *const _, 8) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy over handlers bound to `cpus`; None (the test says it is
    /// skipped) where this C library registers no rseq.
    fn policy(cpus: &[usize]) -> Option<Locality> {
        let l = Locality::new(Some(cpus));
        if !l.active() {
            eprintln!("skipped: no rseq registered by the C library (glibc 2.35+)");
            return None;
        }
        Some(l)
    }

    /// A thread `tid` that reports itself on the CPU in `cpu`.
    fn fake(l: &Locality, tid: i32, cpu: &'static AtomicU32) {
        l.threads
            .write()
            .insert(tid, cpu as *const AtomicU32 as usize);
        l.registered.fetch_add(1, Relaxed);
    }

    fn here() -> usize {
        // SAFETY: sched_getcpu has no preconditions.
        unsafe { libc::sched_getcpu() as usize }
    }

    #[test]
    fn a_registered_thread_is_found_on_the_cpu_it_runs_on() {
        let Some(l) = policy(&[0, 1]) else { return };
        // A thread whose rseq area is region memory is refused.
        assert!(!l.register_current(|_| true));
        assert_eq!(l.cpu_of(gettid()), None);
        assert!(l.register_current(|_| false));
        // The thread may move between the two reads; not every time.
        let agree = (0..100).any(|_| {
            let c = here();
            l.cpu_of(gettid()) == Some(c) && here() == c
        });
        assert!(agree);
        l.unregister_current();
        assert_eq!(l.cpu_of(gettid()), None);
        assert_eq!(l.cpu_of(0), None);
        assert_eq!(l.registered.load(Relaxed), 0);
    }

    #[test]
    fn remote_faults_and_empty_wakes_send_a_handler_to_standby_but_never_the_last() {
        static ON_1: AtomicU32 = AtomicU32::new(1);
        let Some(l) = policy(&[0, 1]) else { return };
        // Empty wakes count only while a thread is registered.
        let mut m = 0;
        for _ in 0..10 {
            l.empty_wake(&mut m);
        }
        assert_eq!(m, 0);
        fake(&l, 77, &ON_1);
        let on_1 = l.cpu_of(77);
        assert_eq!(on_1, Some(1));
        let (mut m0, mut m1) = (0, 0);
        // Local faults keep handler 1 polling.
        for _ in 0..10 {
            l.resolved(1, on_1, &mut m1);
            assert!(!l.should_stand_by(1, &mut m1));
        }
        // Remote faults, then empty wakes: handler 0 goes on standby
        // after STANDBY_AFTER of them.
        l.resolved(0, on_1, &mut m0);
        l.resolved(0, on_1, &mut m0);
        l.empty_wake(&mut m0);
        assert!(!l.should_stand_by(0, &mut m0));
        l.empty_wake(&mut m0);
        assert!(l.should_stand_by(0, &mut m0));
        assert_eq!(l.polling(), 1);
        assert_eq!((l.remote(), l.standbys()), (2, 1));
        // Handler 1, the last polling, never goes.
        for _ in 0..10 {
            l.empty_wake(&mut m1);
        }
        assert!(!l.should_stand_by(1, &mut m1));
        // A local fault, or one of an unknown thread, resets the count.
        let mut m = 3;
        l.resolved(1, l.cpu_of(78), &mut m);
        assert_eq!(m, 0);
        m = 3;
        l.resolved(1, on_1, &mut m);
        assert_eq!(m, 0);
    }

    #[test]
    fn a_fault_from_a_cpu_whose_handler_stands_by_wakes_it() {
        static ON_0: AtomicU32 = AtomicU32::new(0);
        let Some(l) = policy(&[0, 1]) else { return };
        fake(&l, 77, &ON_0);
        let mut m0 = STANDBY_AFTER;
        assert!(l.should_stand_by(0, &mut m0));
        let read = |fd: i32| {
            let mut v = 0u64;
            // SAFETY: a nonblocking read of 8 bytes into `v`.
            let r = unsafe { libc::read(fd, &mut v as *mut u64 as *mut _, 8) };
            (r, v)
        };
        // Handler 1 resolves a fault taken on CPU 0: handler 0's eventfd
        // is written, once.
        let mut m1 = 0;
        l.resolved(1, l.cpu_of(77), &mut m1);
        assert_eq!(m1, 1);
        assert_eq!(read(l.handlers[0].fd.as_raw_fd()), (8, 1));
        // Back from standby (here: its timeout; the stop descriptor never
        // becomes readable), handler 0 polls again.
        let stop = Locality::new(Some(&[0, 1]));
        let t0 = std::time::Instant::now();
        l.standby(0, stop.handlers[0].fd.as_raw_fd());
        assert!(t0.elapsed() >= std::time::Duration::from_millis(STANDBY_MS as u64 - 1));
        assert_eq!(l.polling(), 2);
        assert!(!l.handlers[0].on_standby.load(Acquire));
        // A handler polling is not woken.
        l.resolved(1, l.cpu_of(77), &mut m1);
        assert_eq!(read(l.handlers[0].fd.as_raw_fd()).0, -1);
    }

    #[test]
    fn a_policy_needs_bound_handlers() {
        assert!(!Locality::new(None).active());
        assert!(!Locality::new(Some(&[0])).active());
        let l = Locality::new(None);
        assert!(!l.register_current(|_| false));
        let mut m = 10;
        assert!(!l.should_stand_by(0, &mut m));
    }
}
