//! A stored page that cannot be read back (its checksum fails) gives the
//! thread that touches it SIGBUS, as the kernel does for a swap-in I/O
//! error: never a hang, never a page of zeros or stale data. The rest of
//! the region is served, and a hint that needs the page returns an error.
//! The touching runs in a child process (this test binary again, with
//! `UZSWAP_TEST_VICTIM` set) so that its SIGBUS ends the child, not the
//! test.

use std::process::Command;
use std::time::{Duration, Instant};
use uzswap::region::{Advice, Config, HandlerMode};
use uzswap::zswap::{Corruption, SwapEntry};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

const LEN: usize = 1 << 20;
const BAD: usize = 37;

/// The child's part: corrupt one stored page, check the hint's error and
/// a good page, then touch the bad one (the process should die there).
fn victim(handler: HandlerMode, partial: bool) {
    let Some(uz) = instance(Config {
        folio_order: 4,
        handler,
        partial_faults: partial,
        defer_register: false,
        ..Config::default()
    }) else {
        std::process::exit(77);
    };
    let r = uz.region(LEN).unwrap();
    for i in 0..LEN / PAGE_SIZE {
        Pattern::Index.fill(i as u64, 5, page(&r, i));
    }
    r.advise(0..LEN, Advice::PageOut).unwrap();
    let key = SwapEntry::new(r.id(), BAD as u64);
    assert!(uz.zswap().debug_corrupt(key, Corruption::Checksum));
    // A hint that must read the page says so.
    let chunk = uz.chunk_bytes();
    let c = BAD * PAGE_SIZE / chunk * chunk;
    assert!(r.advise(c..c + chunk, Advice::WillNeed).is_err());
    // Another chunk is served.
    assert!(Pattern::Index.verify(200, 5, page(&r, 200)));
    eprintln!("victim: touching the unreadable page");
    let v = Pattern::Index.verify(BAD as u64, 5, page(&r, BAD));
    // Reaching here is the failure: the parent sees exit status 3 or 4.
    std::process::exit(if v { 3 } else { 4 });
}

#[test]
fn an_unreadable_page_gives_sigbus_not_a_hang() {
    if let Ok(v) = std::env::var("UZSWAP_TEST_VICTIM") {
        let (h, partial) = v.split_once(',').unwrap();
        let handler = if h == "signal" {
            HandlerMode::Signal
        } else {
            HandlerMode::Block
        };
        victim(handler, partial == "partial");
        return;
    }
    for (h, partial) in [
        ("block", "partial"),
        ("signal", "partial"),
        ("block", "whole"),
        ("signal", "whole"),
    ] {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "an_unreadable_page_gives_sigbus_not_a_hang",
                "--nocapture",
            ])
            .env("UZSWAP_TEST_VICTIM", format!("{h},{partial}"))
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{h} {partial}: the child hung on the unreadable page");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        use std::os::unix::process::ExitStatusExt;
        if status.code() == Some(77) {
            eprintln!("skipping: userfaultfd unavailable");
            return;
        }
        assert_eq!(
            status.signal(),
            Some(libc::SIGBUS),
            "{h} {partial}: {status:?}"
        );
    }
}
