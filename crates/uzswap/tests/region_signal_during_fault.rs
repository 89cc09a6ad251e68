//! A thread blocked on a fault still receives a signal: its handler runs
//! while the fault waits to be resolved, and the access then completes with
//! the right bytes. In the default mode the thread sleeps in the kernel on
//! the userfaultfd (an interruptible wait); in signal mode it is inside
//! uzswap's SIGBUS handler. A program's timers, `SIGINT` and `SIGTERM`
//! must not wait for a page to come back. One test in its own binary: the
//! fault-delay failpoint is process-wide.

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::{Duration, Instant};
use uzswap::region::{failpoints, Advice, Config, HandlerMode};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

/// When the SIGUSR1 handler last ran, in nanoseconds since `BASE` (0: not
/// yet).
static HANDLED_AT: AtomicU64 = AtomicU64::new(0);
static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

extern "C" fn on_usr1(_: libc::c_int) {
    // Only atomics and a monotonic clock read: async-signal-safe.
    let t = BASE
        .get()
        .map_or(1, |b| b.elapsed().as_nanos() as u64)
        .max(1);
    HANDLED_AT.store(t, Release);
}

#[test]
fn a_thread_blocked_on_a_fault_receives_a_signal() {
    let base = *BASE.get_or_init(Instant::now);
    // SAFETY: installing a handler that only touches atomics; no
    // SA_RESTART, as a program's default.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some(uz) = instance(Config {
            folio_order: 4,
            handler,
            defer_register: false,
            ..Config::default()
        }) else {
            return;
        };
        let len = 1 << 20;
        let r = uz.region(len).unwrap();
        for i in 0..len / PAGE_SIZE {
            Pattern::Index.fill(i as u64, 3, page(&r, i));
        }
        r.advise(0..len, Advice::PageOut).unwrap();
        assert_eq!(r.resident_bytes(), 0);

        HANDLED_AT.store(0, Release);
        let delay = Duration::from_millis(600);
        failpoints::delay_faults(delay.as_millis() as u64);
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (done, took) = std::thread::scope(|s| {
            let reader = s.spawn(|| {
                // SAFETY: pthread_self has no preconditions.
                tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
                let start = Instant::now();
                let ok = Pattern::Index.verify(37, 3, page(&r, 37));
                (ok, base.elapsed(), start.elapsed())
            });
            let tid = tid_rx.recv().unwrap();
            // Let the reader reach its fault, then signal it.
            std::thread::sleep(Duration::from_millis(150));
            let sent = base.elapsed();
            // SAFETY: `tid` is a live thread of this process (joined below).
            assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGUSR1) }, 0);
            let t0 = Instant::now();
            while HANDLED_AT.load(Acquire) == 0 && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let handled = HANDLED_AT.load(Acquire);
            assert!(handled > 0, "{handler:?}: the signal was never handled");
            let after = Duration::from_nanos(handled).saturating_sub(sent);
            let (ok, read_end, took) = reader.join().unwrap();
            assert!(
                Duration::from_nanos(handled) < read_end,
                "{handler:?}: handled {after:?} after sending, but only once the read was done"
            );
            (ok, took)
        });
        failpoints::delay_faults(0);
        assert!(done, "{handler:?}: the page read back wrong");
        assert!(
            took >= delay,
            "{handler:?}: the fault was not held ({took:?})"
        );
        assert_eq!(uz.stats().fault_errors, 0);
    }
}
