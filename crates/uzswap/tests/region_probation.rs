//! Probation: pages that come in as one random read each are evicted before
//! chunks in use. A hot set that is mapped whole earns no reference while it
//! is read (no fault), so only the order of eviction keeps it resident while
//! cold random reads stream through the budget many times over.

use uzswap::region::{Advice, Config};
use uzswap::Pattern;

mod common;
use common::{instance, page};

const SEED: u64 = 5;
/// 64 KiB chunks: 16 pages.
const ORDER: u32 = 4;
const PER: usize = 1 << ORDER;
const CHUNKS: usize = 2048;
const HOT: usize = 32;

#[test]
fn cold_random_reads_do_not_push_out_a_mapped_hot_set() {
    hot_set_stays(1);
}

/// The same over 32 regions of 32 chunks, the hot set the first of them:
/// the evictor finds the regions of queued chunks through a map.
#[test]
fn probation_spans_many_regions() {
    hot_set_stays(32);
}

fn hot_set_stays(nregions: usize) {
    // Same-filled pages cost the pool nothing, so the 8 MiB budget is all
    // resident room: the 2 MiB hot set plus slack that the cold reads
    // (8 MiB a round) pass through. A round must be more than the slack:
    // a cold page still resident when the next round reads its chunk
    // again is that chunk's second reference, which takes it off
    // probation, and then only the CLOCK stands between the cold chunks
    // and the hot set (with 4 MiB a round, that happened once the fault
    // margin left 1 MiB more of the budget to resident memory).
    let Some(uz) = instance(Config {
        budget: 8 << 20,
        folio_order: ORDER,
        writeback: None,
        ..Config::default()
    }) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    let per_region = CHUNKS / nregions;
    let regions: Vec<_> = (0..nregions)
        .map(|_| uz.region(per_region * chunk).unwrap())
        .collect();
    // Page `i` of the whole working set: its region and its index there.
    let at = |i: usize| {
        let pages = per_region * PER;
        page(&regions[i / pages], i % pages)
    };
    let pages = CHUNKS * PER;
    for i in 0..pages {
        Pattern::Same.fill(i as u64, SEED, at(i));
    }
    for r in &regions {
        r.advise(0..r.len(), Advice::PageOut).unwrap();
    }
    let check = |i: usize| assert!(Pattern::Same.verify(i as u64, SEED, at(i)), "page {i}");

    // The hot set, read in order: each chunk comes in whole.
    let read_hot = || (0..HOT * PER).for_each(check);
    read_hot();
    let hot_in = uz.stats().pgmajfault;

    for round in 0..4 {
        // One page in every cold chunk, a different one each round: a
        // random read, installed alone.
        for c in HOT..CHUNKS {
            check(c * PER + 3 + 4 * round);
        }
        // The hot set is read again between rounds; mapped, it faults no
        // more, so nothing tells the evictor it is in use.
        let before = uz.stats().pgmajfault;
        read_hot();
        let st = uz.stats();
        assert_eq!(
            st.pgmajfault, before,
            "round {round}: hot chunks were evicted and faulted back \
             ({hot_in} faults brought the hot set in): {st:?}"
        );
    }
    let st = uz.stats();
    assert!(st.evicted_probation > 0, "{st:?}");
    assert!(st.peak_bytes <= 8 << 20, "{st:?}");
    for i in 0..pages {
        check(i);
    }
}

/// Random reads whose copies the cache still holds leave by those copies:
/// the evictor takes probation's pages (a claim and a zap) before it frees
/// a copy, so a page read once and not again is not compressed a second
/// time (`evict::probation_first`).
#[test]
fn random_reads_are_evicted_by_their_copies() {
    const CHUNKS: usize = 1024;
    // The 64 MiB region is ~38 MiB of pool (text, 4 KiB pages, lz4), so
    // the budget leaves a few MiB of resident room: less than a round of
    // reads, one page of every chunk, and the copies they keep.
    let Some(uz) = instance(Config {
        budget: 44 << 20,
        folio_order: ORDER,
        writeback: None,
        ..Config::default()
    }) else {
        return;
    };
    let r = uz.region(CHUNKS * uz.chunk_bytes()).unwrap();
    for i in 0..CHUNKS * PER {
        Pattern::Text.fill(i as u64, SEED, page(&r, i));
    }
    r.advise(0..r.len(), Advice::PageOut).unwrap();
    let before = uz.stats();
    // Round k reads page k of every chunk: by the time a round comes back
    // to a chunk, its page of the round before has been evicted, so every
    // read is a chunk's first (a probation entry with its copy kept).
    for round in 0..4 {
        for c in 0..CHUNKS {
            let i = c * PER + round;
            assert!(
                Pattern::Text.verify(i as u64, SEED, page(&r, i)),
                "page {i}"
            );
        }
    }
    let st = uz.stats();
    let claimed = st.evicted_clean - before.evicted_clean;
    let dropped = st.zswap.clean_dropped - before.zswap.clean_dropped;
    let probation = st.evicted_probation - before.evicted_probation;
    assert!(probation >= 2 * CHUNKS as u64, "{st:?}");
    assert!(
        claimed >= probation * 3 / 4 && dropped <= claimed / 4,
        "{claimed} claimed, {dropped} freed for room, {probation} probation \
         evictions: {st:?}"
    );
    assert!(st.peak_bytes <= 44 << 20, "{st:?}");
    assert_eq!(st.fault_errors, 0);
    for i in 0..CHUNKS * PER {
        assert!(
            Pattern::Text.verify(i as u64, SEED, page(&r, i)),
            "page {i}"
        );
    }
}
