//! Error paths of the fault handler, driven by failure injection: an
//! `UFFDIO_COPY` that installs half a chunk and fails must leave the chunk
//! whole in the cache (nothing lost, no page left mapped under STORED), and
//! the retried access must see the right data. One test in its own binary:
//! the failpoint is process-wide.
//!
//! Signal mode, so the faulting thread itself retries after the failed
//! attempt (with handler threads it would stay parked, as it must when a
//! fault cannot be served).

use uzswap::region::{failpoints, Advice, Region};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{index_region, page, read};

const SEED: u64 = 21;
const PER: usize = 16;

#[test]
fn a_failed_install_loses_nothing_and_the_retry_sees_the_data() {
    let len = 1 << 20;
    let Some((uz, r)) = index_region(len, SEED) else {
        return;
    };
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);

    // A write fault: the chunk is taken exclusively and its first half is
    // placed writable before the copy fails.
    failpoints::fail_next_copy();
    page(&r, PER + 3)[0] ^= 0xff;
    assert_eq!(uz.stats().fault_errors, 1);
    // Read the other half and page the chunk out: had the failed attempt
    // left its half mapped, the write would now sit in memory beside a
    // stale copy, and come back lost.
    read(&r, PER + 12);
    let chunk = uz.chunk_bytes();
    r.advise(chunk..2 * chunk, Advice::PageOut).unwrap();
    // A read fault on a chunk's first page: the whole chunk, kept clean.
    failpoints::fail_next_copy();
    read(&r, 2 * PER);
    // A read fault off the first page: one page, nothing placed.
    failpoints::fail_next_copy();
    read(&r, 3 * PER + 5);
    // Completing a partial chunk (a read right after its two mapped pages,
    // a forward walk): the part before that page is half placed.
    read(&r, 4 * PER + 4);
    read(&r, 4 * PER + 5);
    failpoints::fail_next_copy();
    read(&r, 4 * PER + 6);
    // Adding a page to a partial chunk: nothing placed, the chunk stays
    // partial with its first page.
    read(&r, 5 * PER + 5);
    failpoints::fail_next_copy();
    read(&r, 5 * PER + 9);
    let st = uz.stats();
    assert_eq!(st.fault_errors, 5, "{st:?}");
    assert!(st.partial_filled >= 1 && st.faults_partial >= 4, "{st:?}");

    let check = |r: &Region| {
        for i in 0..len / PAGE_SIZE {
            let p = page(r, i);
            if i == PER + 3 {
                p[0] ^= 0xff;
                assert!(Pattern::Index.verify(i as u64, SEED, p), "page {i}");
                p[0] ^= 0xff;
            } else {
                assert!(Pattern::Index.verify(i as u64, SEED, p), "page {i}");
            }
        }
    };
    check(&r);
    // And once more through the cache.
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    check(&r);
    let st = uz.stats();
    assert_eq!(st.fault_errors, 5, "{st:?}");
    assert_eq!(st.resident_bytes, r.resident_bytes());
}
