//! Accessed bits from smaps (`Config::sample_young`): a hot set that stays
//! mapped is read without a fault, so only the kernel's accessed bits tell
//! the evictor it is in use. With them sampled, a stream of whole chunks
//! read once passes through the budget many times over and the hot set
//! stays; without, the CLOCK sees the streamed chunks referenced (they
//! faulted) and the hot set not, and evicts it every turn.

use std::time::Duration;
use uzswap::region::{Config, Uzswap};
use uzswap::Pattern;

mod common;
use common::{instance, page};

const SEED: u64 = 11;
/// 64 KiB chunks: 16 pages.
const ORDER: u32 = 4;
const PER: usize = 1 << ORDER;
/// 1 MiB hot, 31 MiB streamed, an 8 MiB budget.
const HOT: usize = 16;
const CHUNKS: usize = 512;
const ROUNDS: usize = 12;
/// Streamed chunks read per round: half the budget.
const STREAM: usize = 64;

/// The hot set's faults in the last rounds (after a warm-up), and the
/// instance's figures.
fn hot_faults(sample_young: bool) -> Option<(u64, uzswap::region::UzswapStats)> {
    let uz: Uzswap = instance(Config {
        budget: 8 << 20,
        folio_order: ORDER,
        writeback: None,
        sample_young,
        ..Config::default()
    })?;
    let r = uz.region(CHUNKS * uz.chunk_bytes()).unwrap();
    // Same-filled pages cost the pool nothing: the budget is all resident
    // room, a quarter of the region.
    for i in 0..CHUNKS * PER {
        Pattern::Same.fill(i as u64, SEED, page(&r, i));
    }
    let check = |i: usize| {
        assert!(
            Pattern::Same.verify(i as u64, SEED, page(&r, i)),
            "page {i}"
        )
    };
    let mut next = HOT;
    let mut late = 0;
    for round in 0..ROUNDS {
        let before = uz.stats().pgmajfault;
        (0..HOT * PER).for_each(check);
        if round >= ROUNDS / 2 {
            late += uz.stats().pgmajfault - before;
        }
        // Samples are at least 20 ms apart: let one fall between the hot
        // set's reads and the stream's evictions.
        std::thread::sleep(Duration::from_millis(40));
        for _ in 0..STREAM {
            (next * PER..(next + 1) * PER).for_each(check);
            next = if next + 1 == CHUNKS { HOT } else { next + 1 };
        }
    }
    let st = uz.stats();
    assert_eq!(st.fault_errors, 0, "{st:?}");
    assert!(st.peak_bytes <= 8 << 20, "{st:?}");
    for i in 0..CHUNKS * PER {
        check(i);
    }
    eprintln!(
        "sample_young {sample_young}: the hot set faulted {late} times in the last {} rounds \
         ({} samples)",
        ROUNDS / 2,
        st.young_samples
    );
    Some((late, st))
}

#[test]
fn a_hot_set_read_without_faults_stays_when_accessed_bits_are_sampled() {
    let Some((late, st)) = hot_faults(true) else {
        return;
    };
    assert!(st.young_samples > 0 && st.young_splits > 0, "{st:?}");
    assert!(st.young_marked > 0, "{st:?}");
    // Without samples the hot set (16 chunks, read whole) faults back about
    // once a turn of the hand: 16-30 faults over these rounds; with them,
    // none here.
    assert!(
        late <= HOT as u64 / 4,
        "the hot set faulted {late} times in the last {} rounds: {st:?}",
        ROUNDS / 2
    );
}

/// The control: the same run unsampled loses the hot set, so the test
/// above measures the samples, not a workload the CLOCK handles anyway.
#[test]
fn without_samples_the_hot_set_is_evicted() {
    let Some((late, st)) = hot_faults(false) else {
        return;
    };
    assert_eq!(st.young_samples, 0, "{st:?}");
    assert!(
        late > HOT as u64 / 2,
        "the hot set faulted only {late} times unsampled: {st:?}"
    );
}
