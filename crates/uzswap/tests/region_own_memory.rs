//! `Config::count_own_memory`: the process's anonymous memory outside
//! regions and the pool counts against the budget (`region/own.rs`). One
//! test in its own binary: the measure is the whole process's, so no other
//! test may allocate beside it.

use uzswap::region::{Advice, Config};
use uzswap::{Pattern, PAGE_SIZE};

mod common;
use common::{instance, page};

const MIB: usize = 1 << 20;
const SEED: u64 = 9;

#[test]
fn memory_outside_regions_takes_its_part_of_the_budget() {
    let budget = 48 * MIB;
    let Some(uz) = instance(Config {
        budget: budget as u64,
        count_own_memory: true,
        ..Config::default()
    }) else {
        return;
    };
    // 16 MiB of the process's own, touched, outside any region.
    let own: Vec<u8> = (0..16 * MIB).map(|i| i as u8).collect();
    let len = 96 * MIB;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        Pattern::Text.fill(i as u64, SEED, page(&r, i));
    }
    // The evictor measures every 10 ms at most, and on each batch: one more
    // pass of eviction after the fill sees the final figure.
    std::thread::sleep(std::time::Duration::from_millis(100));
    r.advise(0..MIB, Advice::PageOut).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let s = uz.stats();
    assert!(s.own_bytes >= 14 * MIB as u64, "{s:?}");
    assert!(s.own_bytes <= budget as u64 / 2, "{s:?}");
    let data = s.resident_bytes + s.zswap.pool_total_size;
    // The own figure is measured between batches, so usage may pass the
    // budget by up to the evictor's largest batch (budget/64 here; the
    // batch in `stats` is the one it adapted to last, `region/batch.rs`).
    let largest_batch = (budget / 64) as u64;
    assert!(
        data + s.own_bytes <= budget as u64 + largest_batch,
        "resident + pool {data} + own {} over the budget: {s:?}",
        s.own_bytes
    );
    for i in 0..len / PAGE_SIZE {
        assert!(
            Pattern::Text.verify(i as u64, SEED, page(&r, i)),
            "page {i}"
        );
    }
    assert_eq!(own[12345], 12345usize as u8);
}
