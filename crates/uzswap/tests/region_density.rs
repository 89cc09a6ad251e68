//! Eviction scaled by the compression ratio: at equal memory a chunk that
//! compresses poorly frees little when evicted, so the CLOCK passes over it
//! once more than over a dense one (`evict::density`). Two sets of chunks,
//! equally hot (both read whole, once), one poor (about 3/4 random bytes)
//! and one dense (1/8 random): under pressure the dense set goes first,
//! though the poor one lies first in the hand's order (without the extra
//! pass: poor chunks faulted back 22 times, dense ones 0). Which chunks
//! went out is read with `mincore` once enough pressure has evicted some.
//!
//! A chunk stored as is (nothing compressed) that came back within a turn
//! of the hand gets more passes still: its eviction frees nothing and its
//! return reads the device (the second test).

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
    // Stored once, so each chunk's density is known.
    let Some((poor_out, dense_out, st)) = two_sets(3072, 512, false) else {
        return;
    };
    assert!(
        poor_out * 2 <= dense_out,
        "poor chunks evicted: {poor_out}, dense ones {dense_out}: {st:?}"
    );
}

#[test]
fn refaulted_raw_chunks_are_evicted_after_poor_ones() {
    // Each chunk evicted and read straight back: a workingset refault. The
    // raw set (every byte random, stored as is) is first in the hand's
    // order; with the poor set's one pass, it went out first (8-14 chunks
    // out in three runs, every one raw).
    let Some((raw_out, poor_out, st)) = two_sets(4096, 3072, true) else {
        return;
    };
    assert!(
        raw_out * 2 <= poor_out,
        "raw chunks evicted: {raw_out}, poor ones {poor_out}: {st:?}"
    );
}

/// Two sets of `SET` chunks, the first with `first_random` random bytes a
/// page and the second with `second_random`, equally hot, the first ahead
/// in the hand's order; both stored once (each chunk alone and read
/// straight back where `refault`), then pressed until at least 8 of their
/// chunks are out. Returns how many of each set went out, every page
/// checked; None where userfaultfd is unavailable.
fn two_sets(
    first_random: usize,
    second_random: usize,
    refault: bool,
) -> Option<(usize, usize, uzswap::UzswapStats)> {
    let uz = instance(Config {
        budget: 8 << 20,
        folio_order: ORDER,
        writeback: None,
        ..Config::default()
    })?;
    let chunk = uz.chunk_bytes();
    // First set, second set, then the pressure that evicts part of them.
    let r = uz.region(2 * SET * chunk).unwrap();
    // Mapped larger than it is used, so that the regions together outgrow
    // the budget and are registered from the start.
    let pressure = uz.region(16 << 20).unwrap();
    let first = |c: usize| c;
    let second = |c: usize| SET + c;
    let sets: [(Set, usize); 2] = [(first, first_random), (second, second_random)];
    for (at, random_bytes) in sets {
        for c in 0..SET {
            for p in 0..PER {
                let i = at(c) * PER + p;
                fill(page(&r, i), i as u64, random_bytes);
            }
        }
    }
    if refault {
        for c in 0..SET {
            for (at, _) in sets {
                let start = at(c) * chunk;
                r.advise(start..start + chunk, Advice::PageOut).unwrap();
                for p in 0..PER {
                    let _ = std::hint::black_box(page(&r, at(c) * PER + p)[0]);
                }
            }
        }
        assert!(
            uz.stats().workingset_activate >= SET as u64,
            "the chunks read back were not refaults: {:?}",
            uz.stats()
        );
    } else {
        // Read back whole in an interleaved order, so neither set is ahead
        // of the other on the CLOCK's hand: both sets resident and
        // referenced.
        r.advise(0..r.len(), Advice::PageOut).unwrap();
        for c in 0..SET {
            for (at, _) in sets {
                for p in 0..PER {
                    let _ = std::hint::black_box(page(&r, at(c) * PER + p)[0]);
                }
            }
        }
    }
    // Fresh pages on top of the two sets' 4 MiB, 512 KiB at a time, each
    // step left to the evictor until it settles, until at least 8 of the
    // sets' chunks are out (seen with mincore, which faults nothing in).
    // Driven by what was evicted, not by time: on a loaded machine the
    // evictor runs late and a fixed amount of pressure evicted too little.
    let out_of = |at: Set| (0..SET).filter(|&c| !resident(&r, at(c) * PER)).count();
    let step = (512 << 10) / 4096;
    let mut pressed = 0;
    while out_of(first) + out_of(second) < 8 {
        assert!(
            pressed < (12 << 20) / 4096,
            "12 MiB of pressure evicted too little to compare: {:?}",
            uz.stats()
        );
        for i in pressed..pressed + step {
            fill(page(&pressure, i), 1 << 40 | i as u64, 1024);
        }
        pressed += step;
        settle(&uz);
    }
    let outs = (out_of(first), out_of(second));
    // Every page still reads back as written.
    let mut want = vec![0u8; 4096];
    for (at, random_bytes) in sets {
        for c in 0..SET {
            for p in 0..PER {
                let i = at(c) * PER + p;
                fill(&mut want, i as u64, random_bytes);
                assert_eq!(page(&r, i), &want[..], "page {i}");
            }
        }
    }
    Some((outs.0, outs.1, uz.stats()))
}

/// A set's chunk index, from its `c`th chunk.
type Set = fn(usize) -> usize;

/// Whether page `i` of `r` is mapped (`mincore`: no fault taken).
fn resident(r: &uzswap::region::Region, i: usize) -> bool {
    let mut v = 0u8;
    // SAFETY: one page inside the live region; `v` receives one byte.
    let rc = unsafe { libc::mincore(page(r, i).as_mut_ptr().cast(), 4096, &mut v) };
    assert_eq!(rc, 0, "mincore");
    v & 1 != 0
}

/// Wait until the evictor has brought usage under the high mark and
/// evicted nothing more for 20 ms (at most 5 s).
fn settle(uz: &uzswap::region::Uzswap) {
    let t0 = std::time::Instant::now();
    let mut last = uz.stats().evicted_chunks;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let st = uz.stats();
        let quiet = st.evicted_chunks == last;
        last = st.evicted_chunks;
        if (quiet && st.resident_bytes <= st.high_wmark_bytes) || t0.elapsed().as_secs() >= 5 {
            return;
        }
    }
}
