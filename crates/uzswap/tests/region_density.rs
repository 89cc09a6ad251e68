//! Eviction scaled by the compression ratio: at equal memory a chunk that
//! compresses poorly frees little when evicted, so the CLOCK passes over it
//! once more than over a dense one (`evict::density`). Two sets of chunks,
//! equally hot (both read whole, once), one poor (about 3/4 random bytes)
//! and one dense (1/8 random): under pressure the dense set goes first,
//! though the poor one lies first in the hand's order (without the extra
//! pass: poor chunks faulted back 22 times, dense ones 0).

use uzswap::region::{Advice, Config};

mod common;
use common::{instance, page};

/// 64 KiB chunks.
const ORDER: u32 = 4;
const PER: usize = 1 << ORDER;
/// Chunks in each set.
const SET: usize = 32;

fn fill(p: &mut [u8], seed: u64, random_bytes: usize) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for (i, b) in p.iter_mut().enumerate() {
        *b = if i < random_bytes {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        } else {
            (i % 7) as u8
        };
    }
}

#[test]
fn poorly_compressing_chunks_are_evicted_after_dense_ones() {
    let Some(uz) = instance(Config {
        budget: 8 << 20,
        folio_order: ORDER,
        writeback: None,
        ..Config::default()
    }) else {
        return;
    };
    let chunk = uz.chunk_bytes();
    // Poor set, dense set, then the pressure that evicts part of them.
    let r = uz.region(2 * SET * chunk).unwrap();
    // Mapped larger than it is used, so that the regions together outgrow
    // the budget and are registered from the start.
    let pressure = uz.region(16 << 20).unwrap();
    let poor = |c: usize| c;
    let dense = |c: usize| SET + c;
    let fill_set = |first: fn(usize) -> usize, random_bytes: usize| {
        for c in 0..SET {
            for p in 0..PER {
                let i = first(c) * PER + p;
                fill(page(&r, i), i as u64, random_bytes);
            }
        }
    };
    fill_set(poor, 3072);
    fill_set(dense, 512);
    // Stored once, so each chunk's density is known; then read back whole
    // (in an interleaved order, so neither set is ahead of the other on
    // the CLOCK's hand): both sets resident and referenced.
    r.advise(0..r.len(), Advice::PageOut).unwrap();
    for c in 0..SET {
        for first in [poor, dense] {
            for p in 0..PER {
                let _ = std::hint::black_box(page(&r, first(c) * PER + p)[0]);
            }
        }
    }
    // 3 MiB of fresh pages on top of the two sets' 4 MiB: with its high
    // mark at about 6 MiB, the 8 MiB budget has the evictor take a few MiB
    // of the three.
    for i in 0..(3 << 20) / 4096 {
        fill(page(&pressure, i), 1 << 40 | i as u64, 1024);
    }
    let faults_reading = |first: fn(usize) -> usize, random_bytes: usize| {
        let before = uz.stats().pgmajfault;
        let mut want = vec![0u8; 4096];
        for c in 0..SET {
            for p in 0..PER {
                let i = first(c) * PER + p;
                fill(&mut want, i as u64, random_bytes);
                assert_eq!(page(&r, i), &want[..], "page {i}");
            }
        }
        uz.stats().pgmajfault - before
    };
    let dense_faults = faults_reading(dense, 512);
    let poor_faults = faults_reading(poor, 3072);
    let st = uz.stats();
    assert!(
        dense_faults + poor_faults >= 8,
        "the pressure evicted too little to compare: {st:?}"
    );
    assert!(
        poor_faults * 2 <= dense_faults,
        "poor chunks faulted {poor_faults} times, dense ones {dense_faults}: {st:?}"
    );
}
