//! A read of a partial chunk's unmapped page, or a write to a whole chunk,
//! while an eviction batch holds the chunk (taken, not yet evicted): the
//! batch hands the chunk back rather than make the access wait for it and
//! then load it again. The failpoint is process-wide, so the tests take a
//! lock each.

use std::sync::Mutex;
use uzswap::region::{failpoints, Advice};
use uzswap::PAGE_SIZE;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

mod common;
use common::{check_index, index_region, page, read};

const SEED: u64 = 43;
const PER: usize = 16;

#[test]
fn a_read_waiting_on_a_partial_victim_gets_it_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

#[test]
fn a_write_waiting_on_a_whole_victim_gets_it_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let len = 4 * PER * PAGE_SIZE;
    let Some((uz, r)) = index_region(len, SEED + 1) else {
        return;
    };
    let chunk = (PER * PAGE_SIZE) as u64;
    // Chunk 2 resident and written (RESIDENT, writable), the rest stored.
    let c2 = 2 * PER * PAGE_SIZE..3 * PER * PAGE_SIZE;
    r.advise(0..len, Advice::PageOut).unwrap();
    r.advise(c2.clone(), Advice::WillNeed).unwrap();
    page(&r, 2 * PER + 1)[0] ^= 0xff;
    assert_eq!(r.resident_bytes(), chunk, "{:?}", uz.stats());
    let before = uz.stats();
    failpoints::hold_partial_evict();
    std::thread::scope(|s| {
        let evictor = s.spawn(|| r.advise(c2.clone(), Advice::PageOut).unwrap());
        while !failpoints::holding() {
            assert!(!evictor.is_finished(), "the page-out never held the chunk");
            std::thread::yield_now();
        }
        // Chunk 2 is EVICTING and write-protected: this write traps and
        // waits on it.
        page(&r, 2 * PER + 3)[0] ^= 0xff;
        evictor.join().unwrap();
    });
    let st = uz.stats();
    assert_eq!(st.evict_yielded, 1, "{st:?}");
    assert_eq!(
        st.evicted_chunks, before.evicted_chunks,
        "nothing was evicted: {st:?}"
    );
    assert_eq!(r.resident_bytes(), chunk, "{st:?}");
    // Writable again: more writes take no fault.
    page(&r, 2 * PER + 4)[0] ^= 0xff;
    let after = uz.stats();
    assert_eq!(
        after.pgmajfault + after.faults_wp,
        st.pgmajfault + st.faults_wp
    );
    let flipped = [2 * PER + 1, 2 * PER + 3, 2 * PER + 4];
    check_index(&r, SEED + 1, &flipped);
    // Evicted with nothing waiting, it goes, the writes with it.
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    check_index(&r, SEED + 1, &flipped);
}
