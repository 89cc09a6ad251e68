//! The evictor's undo path, driven by failure injection: a zap
//! (`MADV_DONTNEED`) refused after the chunk's content went to the cache
//! must leave the chunk mapped, charged and correct (a whole chunk
//! writable again, a partial chunk still partial, a chunk zapped in part
//! before the refusal whole again, a partial one with its mapped pages), and a later eviction and fault must
//! bring every byte back. One test in its own binary: the
//! failpoint is process-wide.

use uzswap::region::{failpoints, Advice, Region};
use uzswap::PAGE_SIZE;

mod common;
use common::{check_index, index_region, page, read};

const SEED: u64 = 33;
const PER: usize = 16;

fn check(r: &Region, flipped: &[usize]) {
    check_index(r, SEED, flipped)
}

#[test]
fn a_refused_zap_keeps_the_chunk_mapped_and_loses_nothing() {
    let len = 8 * PER * PAGE_SIZE;
    let Some((uz, r)) = index_region(len, SEED) else {
        return;
    };

    // Whole chunks: the page-out stores all eight as one run, and the one
    // zap for them fails at the first chunk. Each is then zapped on its
    // own: the first, refused again, stays mapped, charged, and writable;
    // the other seven go.
    failpoints::fail_next_zap();
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), (PER * PAGE_SIZE) as u64);
    assert_eq!(uz.stats().evicted_chunks, 7);
    page(&r, 3)[0] ^= 0xff;
    assert_eq!(uz.stats().pgmajfault, 0, "the refused chunk never left");
    check(&r, &[3]);
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    check(&r, &[3]);

    // Partial chunks: one page read into each of three chunks, then paged
    // out with the first chunk's zap refused. That chunk keeps its page
    // mapped (its copy dropped: the chunk is partial with a page whose only
    // copy is in memory); the other two go.
    r.advise(0..len, Advice::PageOut).unwrap();
    for c in 1..4 {
        read(&r, c * PER + 5);
    }
    let before = uz.stats();
    assert_eq!(r.resident_bytes(), 3 * PAGE_SIZE as u64, "{before:?}");
    failpoints::fail_next_zap();
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), PAGE_SIZE as u64);
    // A write to the page left mapped completes its chunk exclusively,
    // from the other pages' copies and the mapped page itself.
    page(&r, PER + 5)[0] ^= 0xff;
    check(&r, &[3, PER + 5]);
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0);
    check(&r, &[3, PER + 5]);

    // A zap the kernel refuses midway through a chunk (a mapping locked
    // behind uzswap's back that begins inside it) has zapped the pages
    // before the refusal: they are put back from the cache, where their
    // only copies were, and the chunk stays mapped without a fault.
    check(&r, &[3, PER + 5]);
    failpoints::fail_next_zap_midway();
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), (PER * PAGE_SIZE) as u64);
    assert_eq!(uz.stats().zapped_restored, (PER / 2) as u64);
    let faults = uz.stats().pgmajfault;
    for p in 0..PER {
        read(&r, p);
    }
    assert_eq!(
        uz.stats().pgmajfault,
        faults,
        "the refused chunk is mapped whole"
    );
    check(&r, &[3, PER + 5]);

    // The same midway refusal of a partial chunk's zap: the mapped pages
    // in the half zapped before it go back from the cache too (dropped
    // with their copies, they read back as zeros).
    r.advise(0..len, Advice::PageOut).unwrap();
    let c = 2 * PER;
    read(&r, c + 1);
    read(&r, c + 3);
    let restored = uz.stats().zapped_restored;
    assert_eq!(r.resident_bytes(), 2 * PAGE_SIZE as u64);
    failpoints::fail_next_zap_midway();
    r.advise(c * PAGE_SIZE..(c + PER) * PAGE_SIZE, Advice::PageOut)
        .unwrap();
    assert_eq!(r.resident_bytes(), 2 * PAGE_SIZE as u64);
    assert_eq!(uz.stats().zapped_restored, restored + 2);
    let faults = uz.stats().pgmajfault;
    read(&r, c + 1);
    read(&r, c + 3);
    assert_eq!(uz.stats().pgmajfault, faults, "both pages still mapped");
    check(&r, &[3, PER + 5]);
    let st = uz.stats();
    assert_eq!(st.fault_errors, 0, "{st:?}");
    assert_eq!(st.resident_bytes, r.resident_bytes());
}
