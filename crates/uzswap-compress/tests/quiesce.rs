//! `quiesce`: the gate, the count, and `Event`. Their own process: the
//! count is process-wide, and other tests' threads would be in it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uzswap_compress::quiesce::{self, Event};

/// The tests share the process-wide gate: one at a time.
static SERIAL: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

#[test]
fn close_waits_for_threads_inside_and_holds_newcomers_at_the_gate() {
    let _s = SERIAL.lock();
    quiesce::enable();
    let busy = Arc::new(AtomicBool::new(true));
    let b = busy.clone();
    // Inside until told to stop.
    let inside = std::thread::spawn(move || {
        let _in = quiesce::inside();
        while b.load(SeqCst) {
            std::hint::spin_loop();
        }
    });
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    assert!(
        quiesce::close(Duration::from_millis(50)).is_none(),
        "a thread inside keeps the gate from closing"
    );
    assert!(t0.elapsed() >= Duration::from_millis(50));
    busy.store(false, SeqCst);
    inside.join().unwrap();

    let closed = quiesce::close(Duration::from_secs(5)).expect("nobody inside");
    let passed = Arc::new(AtomicBool::new(false));
    let p = passed.clone();
    let newcomer = std::thread::spawn(move || {
        let _in = quiesce::inside();
        p.store(true, SeqCst);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !passed.load(SeqCst),
        "a thread arriving at a shut gate waits"
    );
    drop(closed);
    newcomer.join().unwrap();
    assert!(passed.load(SeqCst));
}

#[test]
fn a_thread_waiting_for_work_is_at_rest_and_comes_back_through_the_gate() {
    let _s = SERIAL.lock();
    quiesce::enable();
    let ev = Arc::new(Event::new());
    let work = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let (e, w, d) = (ev.clone(), work.clone(), done.clone());
    let worker = uzswap_compress::thread::spawn("quiesce-test", move || loop {
        let seen = e.seq();
        let n = w.load(SeqCst);
        if n == u64::MAX {
            return;
        }
        if n > d.load(SeqCst) {
            d.store(n, SeqCst);
            continue;
        }
        e.wait(seen, None);
    })
    .unwrap();
    work.store(1, SeqCst);
    ev.notify_all();
    let t0 = Instant::now();
    while done.load(SeqCst) < 1 {
        assert!(t0.elapsed() < Duration::from_secs(5), "notify lost");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Asleep in its event: at rest, though it is inside from start to end.
    let closed = quiesce::close(Duration::from_secs(5)).expect("the worker rests in its wait");
    // Woken while the gate is shut, it does no work until it opens.
    work.store(2, SeqCst);
    ev.notify_all();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(done.load(SeqCst), 1, "a wake-up passes the gate first");
    drop(closed);
    let t0 = Instant::now();
    while done.load(SeqCst) < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the worker stayed at the gate"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    work.store(u64::MAX, SeqCst);
    ev.notify_all();
    worker.join().unwrap();
}

#[test]
fn an_event_wait_times_out_and_a_notify_before_the_wait_is_not_lost() {
    let _s = SERIAL.lock();
    let ev = Event::new();
    let t0 = Instant::now();
    assert!(ev.wait(ev.seq(), Some(Duration::from_millis(30))));
    assert!(t0.elapsed() >= Duration::from_millis(30));
    let seen = ev.seq();
    ev.notify_one();
    // The sequence moved on: the wait returns at once, not timed out.
    let t0 = Instant::now();
    assert!(!ev.wait(seen, Some(Duration::from_secs(5))));
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn the_closer_passes_its_own_gate_and_counts_itself() {
    let _s = SERIAL.lock();
    quiesce::enable();
    let _in = quiesce::inside();
    let closed = quiesce::close(Duration::from_secs(5)).expect("only the caller is inside");
    // Nested entries of the closer neither wait nor count twice.
    {
        let _again = quiesce::inside();
    }
    drop(closed);
}
