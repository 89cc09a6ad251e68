//! Read faults install write-protected, keeping the pool's copy, while
//! most of what they install goes unwritten; when most of it is written
//! soon after (each write then a second fault), reads install writable
//! until the pattern changes back (`region/keep.rs`).

use uzswap::region::{Advice, Config, Region, Uzswap};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::instance;

const SEED: u64 = 5;
const PAGES: usize = 2048;

fn page(r: &Region, i: usize) -> *mut u8 {
    assert!(i < PAGES);
    // SAFETY: in bounds of the live region.
    unsafe { r.as_ptr().add(i * PAGE_SIZE) }
}

fn stored_region() -> Option<(Uzswap, Region)> {
    // One-page chunks: each fault is one install.
    let uz = instance(Config {
        folio_order: 0,
        ..Config::default()
    })?;
    let r = uz.region(PAGES * PAGE_SIZE).unwrap();
    for i in 0..PAGES {
        // SAFETY: a page of the live region, written by this thread only.
        let p = unsafe { std::slice::from_raw_parts_mut(page(&r, i), PAGE_SIZE) };
        Pattern::Index.fill(i as u64, SEED, p);
    }
    r.advise(0..PAGES * PAGE_SIZE, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    Some((uz, r))
}

/// Read the first byte of page `i`, and with `write` store it back.
fn touch(r: &Region, i: usize, write: bool) {
    // SAFETY: volatile accesses in bounds of the live region.
    unsafe {
        let b = std::ptr::read_volatile(page(r, i));
        if write {
            std::ptr::write_volatile(page(r, i), b);
        }
    }
}

#[test]
fn reads_followed_by_writes_install_writable_and_turn_back_for_reads_only() {
    let Some((uz, r)) = stored_region() else {
        return;
    };
    // Read then write, page after page (a sort moving what it read).
    for i in 0..512 {
        touch(&r, i, true);
    }
    let s = uz.stats();
    // The first 64 reads decide; after them one in 16 probes.
    assert!(s.reads_writable >= 400, "{s:?}");
    assert!(s.faults_wp <= 64 + 512 / 16 + 8, "{s:?}");
    assert_eq!(s.copies_written, s.faults_wp);

    // Reads only: the probes' installs go unwritten and reads install
    // protected again.
    for i in 512..PAGES - 256 {
        touch(&r, i, false);
    }
    let before = uz.stats().reads_writable;
    for i in PAGES - 256..PAGES {
        touch(&r, i, false);
    }
    let s = uz.stats();
    assert_eq!(s.reads_writable, before, "{s:?}");

    // Nothing changed on the way: every page as written.
    r.advise(0..PAGES * PAGE_SIZE, Advice::PageOut).unwrap();
    for i in 0..PAGES {
        // SAFETY: a page of the live region.
        let p = unsafe { std::slice::from_raw_parts(page(&r, i), PAGE_SIZE) };
        assert!(Pattern::Index.verify(i as u64, SEED, p), "page {i}");
    }
}

#[test]
fn reads_of_memory_left_unwritten_keep_their_copies() {
    let Some((uz, r)) = stored_region() else {
        return;
    };
    // A quarter of what reads bring in is written (usemem's random row).
    for i in 0..1024 {
        touch(&r, i, i % 4 == 0);
    }
    let s = uz.stats();
    assert_eq!(s.reads_writable, 0, "{s:?}");
    assert_eq!(s.faults_wp, 256, "{s:?}");
}
