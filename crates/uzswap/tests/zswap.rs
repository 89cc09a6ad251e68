//! zswap store / load / invalidate: content, folios, same-filled pages,
//! limits, corruption, concurrency.

use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use uzswap::zswap::{Corruption, LoadError, StoreError};
use uzswap::{LoadMode, Pattern, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

fn zswap(compressor: &str) -> Zswap {
    Zswap::new(ZswapConfig {
        compressor: compressor.into(),
        workers: 2,
        store_incompressible: true,
        ..Default::default()
    })
    .unwrap()
}

fn folio(p: Pattern, first: u64, order: u32, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; PAGE_SIZE << order];
    for (i, page) in v.chunks_exact_mut(PAGE_SIZE).enumerate() {
        p.fill(first + i as u64, seed, page);
    }
    v
}

#[test]
fn round_trip_every_compressor_and_pattern() {
    for c in uzswap::compress::names() {
        let z = Zswap::new(ZswapConfig {
            compressor: c.to_string(),
            workers: 2,
            store_incompressible: true,
            ..Default::default()
        })
        .unwrap();
        for (pi, p) in Pattern::ALL.into_iter().enumerate() {
            for order in [0u32, 4, 9] {
                let first = SwapEntry::new(pi as u32, 1024);
                let data = folio(p, 1024, order, 7);
                z.store_folio(first, order, &data)
                    .unwrap_or_else(|e| panic!("{c} {p} {order}: {e}"));
                let mut out = vec![0u8; data.len()];
                z.load_folio(first, order, &mut out, LoadMode::KeepCopy)
                    .unwrap();
                assert!(out == data, "{c} {p} order {order}: keep-copy load differs");
                out.fill(0xaa);
                z.load_folio(first, order, &mut out, LoadMode::Exclusive)
                    .unwrap();
                assert!(out == data, "{c} {p} order {order}: exclusive load differs");
                assert!(!z.contains(first), "exclusive load frees the entry");
            }
        }
        let s = z.stats();
        assert_eq!(s.stored_pages, 0, "{c}");
        assert_eq!(
            s.pool_total_size, 0,
            "{c}: an empty cache holds no pool memory"
        );
        assert_eq!(s.compressed_bytes, 0, "{c}");
    }
}

#[test]
fn unknown_compressor_is_a_clear_error() {
    let e = Zswap::new(ZswapConfig {
        compressor: "lzma".into(),
        ..Default::default()
    })
    .err()
    .expect("unknown compressor must fail");
    let msg = e.to_string();
    assert!(
        msg.contains("lzma") && msg.contains("lz4") && msg.contains("zstd"),
        "{msg}"
    );
}

#[test]
fn bad_arguments_are_errors() {
    let z = zswap("lz4");
    let page = vec![1u8; PAGE_SIZE];
    assert!(matches!(
        z.store(SwapEntry::new(0, 0), &page[..100]),
        Err(StoreError::BadSize { .. })
    ));
    assert!(matches!(
        z.store_folio(SwapEntry::new(0, 0), 10, &page),
        Err(StoreError::BadOrder(10))
    ));
    let f = vec![1u8; PAGE_SIZE * 4];
    assert!(matches!(
        z.store_folio(SwapEntry::new(0, 2), 2, &f),
        Err(StoreError::Misaligned { index: 2, order: 2 })
    ));
    let mut out = vec![0u8; PAGE_SIZE];
    assert_eq!(
        z.load(SwapEntry::new(0, 5), &mut out, LoadMode::Exclusive),
        Err(LoadError::NotFound(SwapEntry::new(0, 5)))
    );
    assert!(matches!(
        z.load(SwapEntry::new(0, 5), &mut out[..10], LoadMode::Exclusive),
        Err(LoadError::BadSize { .. })
    ));
}

#[test]
fn load_pages_takes_any_run_inside_a_group() {
    let z = zswap("lz4");
    let first = SwapEntry::new(3, 512);
    let data = folio(Pattern::Text, 512, 4, 9);
    z.store_folio(first, 4, &data).unwrap();
    // Pages 3..11 of the folio, keeping copies: content, and nothing taken.
    let mut out = vec![0u8; 8 * PAGE_SIZE];
    z.load_pages(first.offset(3), 8, &mut out, LoadMode::KeepClean)
        .unwrap();
    assert_eq!(out, data[3 * PAGE_SIZE..11 * PAGE_SIZE]);
    assert_eq!(z.stats().clean_pages, 8);
    assert_eq!(z.stored_pages(), 16);
    // Exclusive: exactly those pages leave.
    let mut out = vec![0u8; 2 * PAGE_SIZE];
    z.load_pages(first.offset(14), 2, &mut out, LoadMode::Exclusive)
        .unwrap();
    assert_eq!(out, data[14 * PAGE_SIZE..]);
    assert_eq!(z.stored_pages(), 14);
    // All or nothing: a run with a missing page changes nothing.
    let mut out = vec![0u8; 4 * PAGE_SIZE];
    assert_eq!(
        z.load_pages(first.offset(12), 4, &mut out, LoadMode::Exclusive),
        Err(LoadError::NotFound(first.offset(14)))
    );
    assert_eq!(z.stored_pages(), 14);
    // A run across a 2 MiB group, empty, or of the wrong size is refused.
    let mut big = vec![0u8; 2 * PAGE_SIZE];
    assert_eq!(
        z.load_pages(SwapEntry::new(3, 511), 2, &mut big, LoadMode::KeepCopy),
        Err(LoadError::BadRange(SwapEntry::new(3, 511), 2))
    );
    assert!(matches!(
        z.load_pages(first, 0, &mut [], LoadMode::KeepCopy),
        Err(LoadError::BadRange(..))
    ));
    assert!(matches!(
        z.load_pages(first, 1, &mut big, LoadMode::KeepCopy),
        Err(LoadError::BadSize { .. })
    ));
}

#[test]
fn same_filled_pages_take_no_pool_memory() {
    let z = zswap("lz4");
    let zero = folio(Pattern::Zero, 0, 6, 0);
    let same = folio(Pattern::Same, 64, 6, 0);
    z.store_folio(SwapEntry::new(0, 0), 6, &zero).unwrap();
    z.store_folio(SwapEntry::new(0, 64), 6, &same).unwrap();
    let s = z.stats();
    assert_eq!(s.same_filled_pages, 128);
    assert_eq!(s.pool_total_size, 0);
    let mut out = vec![1u8; same.len()];
    z.load_folio(SwapEntry::new(0, 64), 6, &mut out, LoadMode::Exclusive)
        .unwrap();
    assert!(out == same);
    assert_eq!(z.stats().same_filled_pages, 64);

    // With non-zero same-filled handling off, repeated words are compressed.
    let z = Zswap::new(ZswapConfig {
        same_filled_nonzero: false,
        ..Default::default()
    })
    .unwrap();
    z.store_folio(SwapEntry::new(0, 64), 6, &same).unwrap();
    z.store_folio(SwapEntry::new(0, 0), 6, &zero).unwrap();
    let s = z.stats();
    assert_eq!(s.same_filled_pages, 64, "only the zero pages");
    assert!(s.pool_total_size > 0);
}

#[test]
fn failing_page_leaves_no_entry_of_its_folio() {
    // The default policy rejects pages that compress poorly.
    let z = Zswap::new(ZswapConfig::default()).unwrap();
    let first = SwapEntry::new(3, 512);
    // An older copy of the folio is stored...
    let old = folio(Pattern::Text, 512, 5, 1);
    z.store_folio(first, 5, &old).unwrap();
    assert_eq!(z.stats().stored_pages, 32);
    // ...then a newer version with one incompressible page is refused whole.
    let mut new = folio(Pattern::Text, 512, 5, 2);
    Pattern::Random.fill(512 + 17, 2, &mut new[17 * PAGE_SIZE..18 * PAGE_SIZE]);
    assert_eq!(z.store_folio(first, 5, &new), Err(StoreError::CompressPoor));
    let s = z.stats();
    assert_eq!(
        s.stored_pages, 0,
        "no page of the folio stays, old copies included"
    );
    assert_eq!(
        s.pool_total_size, 0,
        "objects of the failed folio are freed"
    );
    assert_eq!(s.reject_compress_poor, 1);
    assert_eq!(s.mthp["hugepages-128kB"].store_fail, 1);
    for i in 0..32 {
        assert!(!z.contains(first.offset(i)));
    }
}

/// One worker stores a folio's pages as one run (compressed back to back,
/// then allocated): each page keeps its own kind and content, whatever its
/// neighbours, including runs of incompressible pages that overflow the
/// run's scratch and are allocated part way.
#[test]
fn a_run_of_mixed_pages_keeps_each_page() {
    let z = Zswap::new(ZswapConfig {
        workers: 1,
        store_incompressible: true,
        ..Default::default()
    })
    .unwrap();
    let kinds = [
        Pattern::Zero,
        Pattern::Random,
        Pattern::Text,
        Pattern::Same,
        Pattern::Index,
        Pattern::Random,
        Pattern::Random,
        Pattern::Text,
    ];
    let mut data = vec![0u8; 32 * PAGE_SIZE];
    for (i, page) in data.chunks_exact_mut(PAGE_SIZE).enumerate() {
        kinds[i % kinds.len()].fill(i as u64, 5, page);
    }
    let first = SwapEntry::new(0, 64);
    z.store_folio(first, 5, &data).unwrap();
    let s = z.stats();
    assert_eq!(s.stored_pages, 32);
    assert_eq!(s.same_filled_pages, 8, "the zero and same pages");
    assert_eq!(s.incompressible_pages, 12, "the random pages, kept raw");
    let mut out = vec![0u8; data.len()];
    z.load_folio(first, 5, &mut out, LoadMode::Exclusive)
        .unwrap();
    for (i, (a, b)) in out
        .chunks_exact(PAGE_SIZE)
        .zip(data.chunks_exact(PAGE_SIZE))
        .enumerate()
    {
        assert!(a == b, "page {i} ({})", kinds[i % kinds.len()]);
    }
    // Thirty-two incompressible pages: the run's scratch fills part way.
    let random = folio(Pattern::Random, 0, 5, 3);
    z.store_folio(first, 5, &random).unwrap();
    assert_eq!(z.stats().incompressible_pages, 32);
    z.load_folio(first, 5, &mut out, LoadMode::Exclusive)
        .unwrap();
    assert!(out == random);
}

#[test]
fn poor_pages_can_be_kept_raw() {
    let z = Zswap::new(ZswapConfig {
        store_incompressible: true,
        ..Default::default()
    })
    .unwrap();
    let data = folio(Pattern::Random, 0, 3, 9);
    z.store_folio(SwapEntry::new(0, 0), 3, &data).unwrap();
    let s = z.stats();
    assert_eq!(s.incompressible_pages, 8);
    assert_eq!(s.reject_compress_poor, 8);
    let mut out = vec![0u8; data.len()];
    z.load_folio(SwapEntry::new(0, 0), 3, &mut out, LoadMode::Exclusive)
        .unwrap();
    assert!(out == data);
}

#[test]
fn corruption_is_reported_not_returned() {
    let z = zswap("lz4");
    let a = SwapEntry::new(0, 10);
    let b = SwapEntry::new(0, 11);
    let pa = folio(Pattern::Text, 10, 0, 0);
    let pb = folio(Pattern::Text, 11, 0, 0);
    z.store(a, &pa).unwrap();
    z.store(b, &pb).unwrap();
    let mut out = vec![0u8; PAGE_SIZE];

    assert!(z.debug_corrupt(a, Corruption::Checksum));
    for mode in [LoadMode::KeepCopy, LoadMode::Exclusive] {
        out.fill(0);
        assert_eq!(z.load(a, &mut out, mode), Err(LoadError::Checksum(a)));
    }
    assert!(
        z.contains(a),
        "a corrupt entry stays, so it keeps failing loudly"
    );

    // A misdirected object (entry points at another page's data) is caught
    // because the checksum binds the key.
    assert!(z.debug_corrupt(a, Corruption::Checksum)); // undo the flip
    assert!(z.debug_corrupt(a, Corruption::SwapObjectWith(b)));
    assert_eq!(
        z.load(a, &mut out, LoadMode::Exclusive),
        Err(LoadError::Checksum(a))
    );
    assert_eq!(
        z.load(b, &mut out, LoadMode::Exclusive),
        Err(LoadError::Checksum(b))
    );
    assert!(z.stats().checksum_fail >= 4);

    // In a folio, one corrupt page fails the load and every page stays.
    let f = SwapEntry::new(1, 64);
    let data = folio(Pattern::Text, 64, 6, 0);
    z.store_folio(f, 6, &data).unwrap();
    assert!(z.debug_corrupt(f.offset(40), Corruption::Checksum));
    let mut big = vec![0u8; data.len()];
    assert_eq!(
        z.load_folio(f, 6, &mut big, LoadMode::Exclusive),
        Err(LoadError::Checksum(f.offset(40)))
    );
    for i in 0..64 {
        assert!(
            z.contains(f.offset(i)),
            "page {i} must survive a failed folio load"
        );
    }
}

#[test]
fn pool_limit_with_hysteresis() {
    let limit = 256 << 10;
    let z = Zswap::new(ZswapConfig {
        max_pool_bytes: limit,
        accept_threshold_percent: 50,
        ..Default::default()
    })
    .unwrap();
    let mut stored = 0u64;
    let mut refused_at = None;
    for i in 0..200u64 {
        let data = folio(Pattern::Text, i * 16, 4, 0);
        match z.store_folio(SwapEntry::new(0, i * 16), 4, &data) {
            Ok(()) => stored += 1,
            Err(StoreError::PoolLimit) => {
                refused_at = Some(i);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    let refused_at = refused_at.expect("the limit must refuse stores");
    assert!(stored > 0);
    let s = z.stats();
    assert_eq!(s.pool_limit_hit, 1);
    // Overshoot is at most one folio's worth of pool growth.
    assert!(
        s.pool_total_size <= limit + (64 << 10),
        "pool {} over limit {limit}",
        s.pool_total_size
    );
    // Freeing a little is not enough: below 50% of the limit is.
    z.invalidate_range(SwapEntry::new(0, 0), 16);
    let data = folio(Pattern::Text, refused_at * 16, 4, 0);
    assert_eq!(
        z.store_folio(SwapEntry::new(0, refused_at * 16), 4, &data),
        Err(StoreError::PoolLimit)
    );
    z.invalidate_range(SwapEntry::new(0, 0), refused_at * 16);
    z.compact();
    assert!(
        z.pool_total_size() < limit / 2,
        "pool {}",
        z.pool_total_size()
    );
    z.store_folio(SwapEntry::new(0, refused_at * 16), 4, &data)
        .unwrap();
}

/// A page taken out with an exclusive load and put back (an install that
/// failed) is never refused by the limit that refuses new stores.
#[test]
fn restore_passes_the_pool_limit_that_refuses_stores() {
    let limit = 128 << 10;
    let z = Zswap::new(ZswapConfig {
        max_pool_bytes: limit,
        ..Default::default()
    })
    .unwrap();
    let page_of = |i: u64| folio(Pattern::Text, i, 0, 0);
    let mut n = 0u64;
    while z.store(SwapEntry::new(0, n), &page_of(n)).is_ok() {
        n += 1;
    }
    assert!(n > 8, "{n} pages stored");
    // Take one out, as a fault would: the pool stays above the accept
    // threshold, so a new page is still refused...
    let key = SwapEntry::new(0, 3);
    let mut page = vec![0u8; PAGE_SIZE];
    z.load(key, &mut page, LoadMode::Exclusive).unwrap();
    assert!(!z.contains(key));
    assert_eq!(
        z.store(SwapEntry::new(0, n), &page_of(n)),
        Err(StoreError::PoolLimit)
    );
    // ...and the page put back is not.
    z.restore(key, &page).unwrap();
    let mut back = vec![0u8; PAGE_SIZE];
    z.load(key, &mut back, LoadMode::Exclusive).unwrap();
    assert!(back == page_of(3));
}

#[test]
fn per_order_counters_add_up() {
    let z = zswap("lz4");
    let mut pages = 0;
    for order in 0..=9u32 {
        let first = SwapEntry::new(order, 0);
        z.store_folio(first, order, &folio(Pattern::Mixed, 0, order, 0))
            .unwrap();
        pages += 1u64 << order;
    }
    let s = z.stats();
    assert_eq!(s.zswpout, pages);
    for order in 1..=9u32 {
        assert_eq!(s.mthp[&format!("hugepages-{}kB", 4 << order)].zswpout, 1);
    }
    let mut out = vec![0u8; PAGE_SIZE << 9];
    z.load_folio(SwapEntry::new(9, 0), 9, &mut out, LoadMode::Exclusive)
        .unwrap();
    let s = z.stats();
    assert_eq!(s.zswpin, 512);
    assert_eq!(s.mthp["hugepages-2048kB"].zswpin, 1);
    assert_eq!(s.stored_pages, pages - 512);
}

#[test]
fn store_replaces_and_invalidate_frees() {
    let z = zswap("lz4");
    let e = SwapEntry::new(0, 0);
    z.store(e, &folio(Pattern::Text, 0, 0, 1)).unwrap();
    z.store(e, &folio(Pattern::Text, 0, 0, 2)).unwrap();
    assert_eq!(z.stats().stored_pages, 1);
    let mut out = vec![0u8; PAGE_SIZE];
    z.load(e, &mut out, LoadMode::KeepCopy).unwrap();
    assert!(Pattern::Text.verify(0, 2, &out), "the newer copy wins");
    assert!(z.invalidate(e));
    assert!(!z.invalidate(e));
    z.store_folio(SwapEntry::new(5, 0), 9, &folio(Pattern::Index, 0, 9, 0))
        .unwrap();
    assert_eq!(z.invalidate_region(5), 512);
    let s = z.stats();
    assert_eq!((s.stored_pages, s.compressed_bytes), (0, 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_pages_round_trip(
        order in 0u32..=6,
        seed in any::<u64>(),
        kinds in prop::collection::vec(0usize..6, 64),
        comp in 0usize..4,
    ) {
        let z = Zswap::new(ZswapConfig {
            compressor: uzswap::compress::names()[comp].into(),
            workers: 2,
            store_incompressible: true,
            ..Default::default()
        }).unwrap();
        let n = 1usize << order;
        let mut data = vec![0u8; n * PAGE_SIZE];
        for (i, page) in data.chunks_exact_mut(PAGE_SIZE).enumerate() {
            Pattern::ALL[kinds[i % kinds.len()]].fill(i as u64, seed, page);
        }
        let first = SwapEntry::new(1, (seed % 1000) << order);
        z.store_folio(first, order, &data).unwrap();
        let mut out = vec![0u8; data.len()];
        z.load_folio(first, order, &mut out, LoadMode::Exclusive).unwrap();
        prop_assert!(out == data);
        prop_assert_eq!(z.stats().pool_total_size, 0);
    }
}

/// Many threads store, load and invalidate overlapping keys; every load must
/// return exactly the version last stored for that key.
#[test]
fn concurrent_store_load_invalidate_keeps_content() {
    let z = Arc::new(zswap("lz4"));
    const KEYS: u64 = 256; // folios of order 2
                           // version[k]: 0 = absent, v > 0 = stored with seed v. Each thread owns the
                           // keys congruent to its id, so the model is exact; the tree, the pool and
                           // the engine are shared.
    let threads = 4u64;
    let mismatches = Arc::new(AtomicU64::new(0));
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(1500);
    std::thread::scope(|s| {
        for t in 0..threads {
            let z = z.clone();
            let mismatches = mismatches.clone();
            s.spawn(move || {
                let mut version = vec![0u64; KEYS as usize];
                let mut rng = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut out = vec![0u8; 4 * PAGE_SIZE];
                let mut next_seed = 1;
                while std::time::Instant::now() < deadline {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let k = (rng % (KEYS / threads)) * threads + t;
                    let first = SwapEntry::new(0, k * 4);
                    let p = Pattern::ALL[(rng >> 32) as usize % Pattern::ALL.len()];
                    match (rng >> 40) % 4 {
                        0 | 1 => {
                            next_seed += 1;
                            let data = folio(p, k * 4, 2, next_seed);
                            z.store_folio(first, 2, &data).unwrap();
                            version[k as usize] = next_seed;
                            // Remember which pattern: derive from the seed.
                            version[k as usize] |= (p as u64) << 56;
                        }
                        2 => {
                            let v = version[k as usize];
                            let mode = if rng & 1 == 0 {
                                LoadMode::Exclusive
                            } else {
                                LoadMode::KeepCopy
                            };
                            match z.load_folio(first, 2, &mut out, mode) {
                                Ok(()) => {
                                    let (seed, p) =
                                        (v & ((1 << 56) - 1), Pattern::ALL[(v >> 56) as usize]);
                                    let want = folio(p, k * 4, 2, seed);
                                    if v == 0 || out != want {
                                        mismatches.fetch_add(1, Ordering::Relaxed);
                                    }
                                    if mode == LoadMode::Exclusive {
                                        version[k as usize] = 0;
                                    }
                                }
                                Err(LoadError::NotFound(_)) => {
                                    if v != 0 {
                                        mismatches.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                        _ => {
                            let n = z.invalidate_range(first, 4);
                            assert_eq!(n > 0, version[k as usize] != 0);
                            version[k as usize] = 0;
                        }
                    }
                }
            });
        }
    });
    assert_eq!(mismatches.load(Ordering::Relaxed), 0);
}

#[test]
fn tree_bytes_counts_the_entries_own_memory() {
    let z = zswap("lz4");
    assert_eq!(
        z.stats().tree_bytes,
        0,
        "an empty cache's tree holds nothing"
    );
    let n = 4096u64;
    for i in 0..n {
        let page = folio(Pattern::Text, i, 0, 3);
        z.store_folio(SwapEntry::new(1, i), 0, &page).unwrap();
    }
    let s = z.stats();
    assert_eq!(s.stored_pages, n);
    // At least an entry per page and a ring node per LRU entry; and not
    // more than a few times that.
    let floor = n * (32 + 16);
    assert!(
        (floor..8 * floor).contains(&s.tree_bytes),
        "{} bytes for {n} entries",
        s.tree_bytes
    );
}

/// A cache holding pages 0..n of region 1 (one text page each), and its
/// tree's bytes then.
fn filled_tree(n: u64) -> (Zswap, u64) {
    let z = zswap("lz4");
    let page = folio(Pattern::Text, 7, 0, 3);
    for i in 0..n {
        z.store_folio(SwapEntry::new(1, i), 0, &page).unwrap();
    }
    let filled = z.stats().tree_bytes;
    (z, filled)
}

/// A cache whose pages went (loaded back, invalidated) gives the tree's
/// memory back: neither the maps nor the rings shrink by themselves.
#[test]
fn tree_bytes_fall_when_entries_go() {
    let n = 8192u64;
    let (z, filled) = filled_tree(n);
    for i in 0..n {
        if i % 16 != 0 {
            assert!(z.invalidate(SwapEntry::new(1, i)));
        }
    }
    let s = z.stats();
    assert_eq!(s.stored_pages, n / 16);
    // Each entry left is alone in its block of 16 keys and keeps the
    // block's table slot: a third of the memory, not a sixteenth.
    assert!(
        s.tree_bytes <= filled / 3,
        "{} bytes for {} entries, {filled} for {n}",
        s.tree_bytes,
        s.stored_pages
    );
}

/// Churn (pages invalidated and stored again, the live count steady)
/// leaves stale LRU nodes behind; a full ring drops them instead
/// of doubling, so the tree stays near what its live entries need.
#[test]
fn tree_bytes_stay_bounded_under_churn() {
    let n = 8192u64;
    let (z, filled) = filled_tree(n);
    let page = folio(Pattern::Text, 7, 0, 3);
    // Ten rounds: every other page goes and comes back (a new node each
    // time; the map keeps its keys, so only the rings can grow).
    for round in 0..10u64 {
        for i in (round % 2..n).step_by(2) {
            assert!(z.invalidate(SwapEntry::new(1, i)));
            z.store_folio(SwapEntry::new(1, i), 0, &page).unwrap();
        }
    }
    let s = z.stats();
    assert_eq!(s.stored_pages, n);
    // At most one more 16-byte node per live entry than after the fill
    // (rings that doubled while mostly stale held three more).
    assert!(
        s.tree_bytes <= filled + n * 16,
        "{} bytes after churn, {filled} after the fill, {n} entries",
        s.tree_bytes
    );
}

/// `Zswap::inherit` (a forked child's take-over, here from a second
/// instance in the same process, never used again after): the entries
/// taken load byte-exact under the same keys, zero pages stay same-filled,
/// the pool objects stay the parent's (no memory of the child's pool, so
/// a kept clean copy of them counts as kept, not clean), a page that is
/// not stored or is written back is refused with nothing taken, and the
/// child's own stores replace inherited pages as any.
#[test]
fn inherited_entries_load_from_the_parents_objects() {
    let parent = zswap("lz4");
    let child = zswap("lz4");
    let first = SwapEntry::new(3, 64);
    let data = folio(Pattern::Text, 64, 4, 11);
    parent.store_folio(first, 4, &data).unwrap();
    let zero = SwapEntry::new(3, 200);
    parent.store(zero, &[0u8; PAGE_SIZE]).unwrap();
    let pool = parent.stats().pool_total_size;
    // Only the pages `take` names (the child's mapped ones are not).
    // SAFETY: `parent` is not used again until the end of the test but to
    // be dropped, after `child`, which holds no reference once dropped.
    let n = unsafe { child.inherit(&parent, first, 16, |i| i != 2) }.unwrap();
    assert_eq!(n, 15);
    assert!(
        !child.contains(first.offset(2)),
        "a page not named was taken"
    );
    // SAFETY: as above.
    let zeros = unsafe { child.inherit(&parent, zero, 1, |_| true) };
    assert_eq!(zeros.unwrap(), 1);
    let s = child.stats();
    assert_eq!(s.inherited_pages, 15, "{s:?}");
    assert_eq!(s.same_filled_pages, 1, "{s:?}");
    assert_eq!(
        s.stored_pages, 1,
        "inherited pages are not stored here: {s:?}"
    );
    assert_eq!(s.pool_total_size, 0, "the child's pool holds nothing");
    assert_eq!(parent.stats().pool_total_size, pool);
    // A missing page, or a range with one, takes nothing.
    let missing = SwapEntry::new(3, 500);
    // SAFETY: as above.
    assert!(unsafe { child.inherit(&parent, missing, 1, |_| true) }.is_err());
    let mut out = vec![0u8; PAGE_SIZE];
    for i in [0u64, 1, 3, 15] {
        child
            .load(first.offset(i), &mut out, LoadMode::KeepClean)
            .unwrap();
        let at = i as usize * PAGE_SIZE;
        assert!(out == data[at..at + PAGE_SIZE], "page {i} differs");
    }
    let s = child.stats();
    assert_eq!((s.kept_pages, s.clean_pages), (4, 0), "{s:?}");
    assert!(child.claim_clean(first.offset(0), 0));
    child
        .load(first.offset(4), &mut out, LoadMode::Exclusive)
        .unwrap();
    assert!(out == data[4 * PAGE_SIZE..5 * PAGE_SIZE]);
    assert!(
        !child.contains(first.offset(4)),
        "an exclusive load drops it"
    );
    child.load(zero, &mut out, LoadMode::Exclusive).unwrap();
    assert!(out.iter().all(|&b| b == 0));
    // The child's own store replaces an inherited page.
    let mine = folio(Pattern::Index, 5, 0, 99);
    child.store(first.offset(5), &mine).unwrap();
    child
        .load(first.offset(5), &mut out, LoadMode::KeepCopy)
        .unwrap();
    assert!(out == mine);
    assert!(child.invalidate(first.offset(6)));
    let s = child.stats();
    assert_eq!(s.inherited_pages, 15 - 3, "{s:?}");
    assert_eq!(s.checksum_fail, 0);
    drop(child);
    // The parent's entries are untouched by all of it.
    let mut all = vec![0u8; data.len()];
    parent
        .load_folio(first, 4, &mut all, LoadMode::Exclusive)
        .unwrap();
    assert!(all == data);
}
