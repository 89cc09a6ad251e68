//! A partial chunk whose eviction is refused partway: some of its mapped
//! pages already went to the cache when the store of the next one fails.
//! The chunk must stay partial, mapped where it was, with the copies taken
//! so far dropped (the mapped pages are the only truth for them), and every
//! byte must come back through later faults, writes and evictions. One test
//! in its own binary: the failpoint is process-wide.

use uzswap::region::{failpoints, Advice};
use uzswap::PAGE_SIZE;

mod common;
use common::{check_index, index_region, page, read};

const SEED: u64 = 41;
const PER: usize = 16;

#[test]
fn a_store_refused_partway_through_a_partial_chunk_loses_nothing() {
    let len = 4 * PER * PAGE_SIZE;
    let Some((uz, r)) = index_region(len, SEED) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    let check = |flipped: &[usize]| check_index(&r, SEED, flipped);
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);

    // Three random reads in chunk 1: it is partial with three pages mapped,
    // each with a clean copy in the cache.
    let mapped = [PER + 3, PER + 7, PER + 11];
    for i in mapped {
        read(&r, i);
    }
    let st = uz.stats();
    assert_eq!(st.faults_partial, 3, "{st:?}");
    assert_eq!(r.resident_bytes(), 3 * PAGE_SIZE as u64);

    // With the clean copies gone, evicting the chunk must store each page;
    // the second store is refused.
    assert!(uz.zswap().drop_clean(u64::MAX) > 0);
    assert_eq!(uz.stats().zswap.clean_pages, 0);
    let stored = uz.stats().zswap.stored_pages;
    failpoints::fail_partial_store(2);
    r.advise(PER * PAGE_SIZE..2 * PER * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    let st = uz.stats();
    assert_eq!(st.evict_aborts, 1, "{st:?}");
    assert_eq!(st.evicted_chunks, 4, "only the first page-out's: {st:?}");
    assert_eq!(
        r.resident_bytes(),
        3 * PAGE_SIZE as u64,
        "the chunk stays partial, its pages mapped"
    );
    assert_eq!(
        st.zswap.stored_pages, stored,
        "the page stored before the refusal was dropped again"
    );

    // The mapped pages read without a fault; the others come from the cache.
    let faults = uz.stats().pgmajfault;
    for i in mapped {
        read(&r, i);
    }
    assert_eq!(uz.stats().pgmajfault, faults, "still mapped");
    check(&[]);

    // Evicted again with no failure, every page goes; faults bring them back.
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0, "{:?}", uz.stats());
    check(&[]);

    // Once more partial and refused, then a write: the written page's
    // protection is lifted and the chunk stays partial (DIRTY), and the
    // write lands.
    r.advise(0..len, Advice::PageOut).unwrap();
    for i in mapped {
        read(&r, i);
    }
    uz.zswap().drop_clean(u64::MAX);
    failpoints::fail_partial_store(1);
    r.advise(PER * PAGE_SIZE..2 * PER * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    assert_eq!(uz.stats().evict_aborts, 2);
    assert_eq!(r.resident_bytes(), 3 * PAGE_SIZE as u64);
    page(&r, PER + 7)[0] ^= 0xff;
    assert_eq!(r.resident_bytes(), 3 * PAGE_SIZE as u64, "still partial");
    // A dirty partial chunk refused partway: its pages were protected for
    // the store and stay mapped; the written one's data is the mapped
    // page's, and a second write unprotects it again. (Reading the whole
    // region first would complete the chunk.)
    failpoints::fail_partial_store(1);
    r.advise(PER * PAGE_SIZE..2 * PER * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    assert_eq!(uz.stats().evict_aborts, 3);
    assert_eq!(r.resident_bytes(), 3 * PAGE_SIZE as u64);
    check(&[PER + 7]);
    page(&r, PER + 7)[1] ^= 0xff;
    page(&r, PER + 7)[1] ^= 0xff;
    check(&[PER + 7]);
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    let _ = chunk;
    check(&[PER + 7]);
}
