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

/// The tests here pace themselves by sleeps that let a sample fall where it
/// must; one at a time, so that another's faults on the second CPU do not
/// move them.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
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
    let _one = serial();
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

/// A random read's page comes in without REF and waits on probation for a
/// second read (`evict.rs`). `UFFDIO_COPY` maps it with its accessed bit
/// set, so a sample that counted every young chunk would take the install
/// for that second read and keep every such page: only chunks mapped
/// before the last sample count.
#[test]
fn a_random_reads_install_is_not_taken_for_a_second_read() {
    const COLD: usize = 1024;
    let _one = serial();
    let Some(uz) = instance(Config {
        budget: 8 << 20,
        folio_order: ORDER,
        writeback: None,
        sample_young: true,
        ..Config::default()
    }) else {
        return;
    };
    let r = uz.region(COLD * uz.chunk_bytes()).unwrap();
    for i in 0..COLD * PER {
        Pattern::Same.fill(i as u64, SEED, page(&r, i));
    }
    r.advise(0..r.len(), uzswap::region::Advice::PageOut)
        .unwrap();
    let check = |i: usize| {
        assert!(
            Pattern::Same.verify(i as u64, SEED, page(&r, i)),
            "page {i}"
        )
    };
    let before = uz.stats();
    // One page of every chunk a round, in slices with pauses for samples
    // to fall among them: each read is its chunk's first (the page of the
    // round before was evicted), installed alone.
    for round in 0..4 {
        for slice in (0..COLD).collect::<Vec<_>>().chunks(128) {
            for &c in slice {
                check(c * PER + 3 + 4 * round);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
    let st = uz.stats();
    let probation = st.evicted_probation - before.evicted_probation;
    let evicted = st.evicted_chunks - before.evicted_chunks;
    assert!(st.young_samples - before.young_samples >= 4, "{st:?}");
    // Nearly every eviction takes a read page off probation, as unsampled
    // (2189 of 2376 here; 2221 of 2385 without samples). Counting the
    // installs' bits, 14 of 1461 did: every page looked read twice.
    assert!(
        evicted >= COLD as u64 && probation >= evicted * 3 / 4,
        "{probation} of {evicted} evictions from probation: {st:?}"
    );
    assert_eq!(st.fault_errors, 0, "{st:?}");
    for i in 0..COLD * PER {
        check(i);
    }
}
