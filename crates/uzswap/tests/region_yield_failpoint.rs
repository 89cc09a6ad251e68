//! A read of a partial chunk's unmapped page while an eviction batch holds
//! the chunk (taken, not yet evicted): the batch hands the chunk back
//! rather than make the read wait for it and then load it again. One test
//! in its own binary: the failpoint is process-wide.

use uzswap::region::{failpoints, Advice};
use uzswap::PAGE_SIZE;

mod common;
use common::{check_index, index_region, read};

const SEED: u64 = 43;
const PER: usize = 16;

#[test]
fn a_read_waiting_on_a_partial_victim_gets_it_back() {
    let len = 4 * PER * PAGE_SIZE;
    let Some((uz, r)) = index_region(len, SEED) else {
        return;
    };
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    // One random read in chunk 1: partial, one page mapped.
    read(&r, PER + 5);
    assert_eq!(uz.stats().faults_partial, 1);
    assert_eq!(r.resident_bytes(), PAGE_SIZE as u64);

    failpoints::hold_partial_evict();
    std::thread::scope(|s| {
        let evictor = s.spawn(|| {
            r.advise(PER * PAGE_SIZE..2 * PER * PAGE_SIZE, Advice::PageOut)
                .unwrap()
        });
        while !failpoints::holding() {
            assert!(!evictor.is_finished(), "the page-out never held the chunk");
            std::thread::yield_now();
        }
        // The chunk is EVICTING: this read waits on it.
        read(&r, PER + 9);
        evictor.join().unwrap();
    });
    let st = uz.stats();
    assert_eq!(st.evict_yielded, 1, "{st:?}");
    assert_eq!(st.faults_partial, 2, "the read added its page: {st:?}");
    assert_eq!(
        r.resident_bytes(),
        2 * PAGE_SIZE as u64,
        "the chunk stays partial, with both pages: {st:?}"
    );
    check_index(&r, SEED, &[]);
    // Evicted with nothing waiting, it goes.
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    check_index(&r, SEED, &[]);
}
