//! A write-protect fault that goes stale before its event is resolved: the
//! page it wrote to was evicted meanwhile and the chunk came back PARTIAL
//! with another page. Nothing woke the thread since (a zap wakes nobody),
//! so the resolver must, or the thread sleeps on its fault for good. One
//! test in its own binary: the fault delay is process-wide.
//!
//! Handler threads (the faulting thread sleeps in the kernel), so the test
//! skips where only signal mode is available.

use std::sync::mpsc;
use std::time::Duration;
use uzswap::region::{failpoints, Advice, HandlerMode};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{index_region_in, page, read};

const SEED: u64 = 5;

#[test]
fn a_write_fault_on_a_page_evicted_before_it_was_served_is_woken() {
    let len = 1 << 20;
    let Some((uz, r)) = index_region_in(HandlerMode::Block, len, SEED) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    r.advise(0..len, Advice::PageOut).unwrap();
    // A random read maps page 5 alone, write-protected (its copy kept).
    read(&r, 5);
    assert_eq!(r.resident_bytes(), PAGE_SIZE as u64, "{:?}", uz.stats());

    // A write to it: a write-protect fault, whose resolver waits 300 ms.
    failpoints::delay_faults(300);
    let (done, finished) = mpsc::channel();
    let rr = &r;
    std::thread::scope(|s| {
        s.spawn(move || {
            page(rr, 5)[8] ^= 0xff;
            let _ = done.send(());
        });
        // Past the start of the resolver's wait; later faults go undelayed.
        std::thread::sleep(Duration::from_millis(100));
        failpoints::delay_faults(0);
        // Meanwhile page 5 is evicted, and a read of page 9 makes the chunk
        // PARTIAL again without it.
        r.advise(0..chunk, Advice::PageOut).unwrap();
        read(&r, 9);
        assert_eq!(r.resident_bytes(), PAGE_SIZE as u64, "{:?}", uz.stats());
        // The stale event is resolved after that: the writer must be
        // woken to fault afresh, and its write must land.
        let woke = finished.recv_timeout(Duration::from_secs(5)).is_ok();
        if !woke {
            eprintln!("the writer is still asleep on its fault: {:?}", uz.stats());
            // Leave rather than wait on the sleeping thread for ever.
            std::process::exit(1);
        }
    });
    let mut want = vec![0u8; PAGE_SIZE];
    Pattern::Index.fill(5, SEED, &mut want);
    want[8] ^= 0xff;
    assert_eq!(page(&r, 5), &want[..], "the write landed");
    let st = uz.stats();
    assert!(st.faults_stale >= 1, "{st:?}");
    assert_eq!(st.fault_errors, 0, "{st:?}");
}
