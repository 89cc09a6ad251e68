//! LRU, shrinker and writeback: the kernel's cgroup zswap tests
//! (tools/testing/selftests/cgroup/test_zswap.c) rebuilt on instances, plus
//! second chance, the protected region, device failures and a stress run.

use std::sync::Arc;
use std::time::{Duration, Instant};
use uzswap::swap::device::failpoints::{Fault, IoOp};
use uzswap::swap::{SwapDevice, SwapDeviceConfig};
use uzswap::zswap::{ShrinkStop, StoreError};
use uzswap::{LoadMode, Pattern, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

fn dev_cfg(mib: u64) -> SwapDeviceConfig {
    SwapDeviceConfig {
        dir: std::env::temp_dir(),
        size_bytes: mib << 20,
        ..Default::default()
    }
}

fn cfg(limit: u64, device_mib: Option<u64>) -> ZswapConfig {
    ZswapConfig {
        workers: 2,
        max_pool_bytes: limit,
        swap_device: device_mib.map(dev_cfg),
        psi_trigger: None,
        ..Default::default()
    }
}

fn page(index: u64, seed: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE_SIZE];
    Pattern::Text.fill(index, seed, &mut p);
    p
}

fn check(z: &Zswap, key: SwapEntry, seed: u64, mode: LoadMode) {
    let mut out = vec![0u8; PAGE_SIZE];
    z.load(key, &mut out, mode)
        .unwrap_or_else(|e| panic!("{key:?}: {e}"));
    assert!(out == page(key.index(), seed), "{key:?}: content differs");
}

/// test_zswap_usage: the pool's memory is accounted and given back.
#[test]
fn pool_usage_is_accounted() {
    let z = Zswap::new(cfg(u64::MAX, None)).unwrap();
    for i in 0..256 {
        z.store(SwapEntry::new(0, i), &page(i, 1)).unwrap();
    }
    let s = z.stats();
    assert_eq!(s.stored_pages, 256);
    assert_eq!(s.lru_pages, 256);
    assert!(s.pool_total_size > 0 && s.pool_total_size < 256 * PAGE_SIZE as u64);
    assert_eq!(z.invalidate_range(SwapEntry::new(0, 0), 256), 256);
    let s = z.stats();
    assert_eq!((s.stored_pages, s.lru_pages, s.pool_total_size), (0, 0, 0));
}

/// test_zswap_writeback(wb = true) and test_swapin_nozswap: under a small
/// pool limit pages go to the device, and come back from it byte-exact.
#[test]
fn writeback_under_pool_limit_reads_back_from_device() {
    let limit = 256 << 10;
    let z = Zswap::new(cfg(limit, Some(64))).unwrap();
    let n = 4096u64;
    for i in 0..n {
        z.store(SwapEntry::new(1, i), &page(i, 2))
            .unwrap_or_else(|e| panic!("store {i}: {e}"));
    }
    let s = z.stats();
    assert!(s.written_back_pages > n / 2, "{s:?}");
    assert_eq!(s.written_back_pages, s.zswpwb);
    assert_eq!(s.pswpout, s.written_back_pages);
    assert_eq!(s.device_pages + s.stored_pages, n);
    assert!(
        s.pool_total_size <= limit + (64 << 10),
        "pool {} over limit {limit}",
        s.pool_total_size
    );
    for i in 0..n {
        check(&z, SwapEntry::new(1, i), 2, LoadMode::Exclusive);
    }
    let s = z.stats();
    assert!(s.pswpin > 0 && s.zswpin > 0, "{s:?}");
    assert_eq!(s.pswpin + s.zswpin, n);
    assert_eq!(s.device_pages, 0);
    assert_eq!(
        z.swap_device().unwrap().stats().used,
        0,
        "slots freed on load"
    );
}

/// test_zswap_writeback(wb = false): no writeback, and the limit holds by
/// refusing stores.
#[test]
fn writeback_disabled_keeps_pages_and_limit() {
    let limit = 256 << 10;
    let z = Zswap::new(ZswapConfig {
        writeback_enabled: false,
        ..cfg(limit, Some(64))
    })
    .unwrap();
    let mut stored = Vec::new();
    for i in 0..4096u64 {
        match z.store(SwapEntry::new(1, i), &page(i, 3)) {
            Ok(()) => stored.push(i),
            Err(StoreError::PoolLimit) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let s = z.stats();
    assert_eq!(s.written_back_pages, 0);
    assert!(s.pool_limit_hit > 0);
    assert!(s.pool_total_size <= limit + (64 << 10), "{s:?}");
    assert_eq!(z.shrink(u64::MAX).stop, Some(ShrinkStop::Disabled));
    for &i in &stored {
        check(&z, SwapEntry::new(1, i), 3, LoadMode::KeepCopy);
    }
    // Switched on at run time, writeback makes room.
    z.set_writeback_enabled(true);
    for i in 4096..8192u64 {
        z.store(SwapEntry::new(1, i), &page(i, 3)).unwrap();
    }
    assert!(z.stats().written_back_pages > 0);
}

/// test_no_invasive_cgroup_shrink: shrinking one instance never touches
/// another, even when they share the device.
#[test]
fn shrinking_one_instance_leaves_another_alone() {
    let dev = Arc::new(SwapDevice::create(dev_cfg(64)).unwrap());
    let a = Zswap::with_device(cfg(u64::MAX, None), Arc::clone(&dev)).unwrap();
    let b = Zswap::with_device(cfg(u64::MAX, None), Arc::clone(&dev)).unwrap();
    for i in 0..1024 {
        a.store(SwapEntry::new(1, i), &page(i, 4)).unwrap();
        b.store(SwapEntry::new(1, i), &page(i, 5)).unwrap();
    }
    let before = b.stats();
    let mut written = 0;
    for _ in 0..8 {
        written += a.shrink(u64::MAX).written_back;
    }
    assert!(written > 0, "{:?}", a.stats());
    let after = b.stats();
    assert_eq!(after.written_back_pages, 0);
    assert_eq!(after.shrink_scanned, 0);
    assert_eq!(after.stored_pages, before.stored_pages);
    assert_eq!(after.pool_total_size, before.pool_total_size);
    assert_eq!(after.lru_pages, before.lru_pages);
    for i in 0..1024 {
        check(&a, SwapEntry::new(1, i), 4, LoadMode::Exclusive);
        check(&b, SwapEntry::new(1, i), 5, LoadMode::Exclusive);
    }
    assert_eq!(dev.stats().used, 0);
}

/// Every entry is stored referenced: the first pass rotates, the next
/// writes back. The freeable count leaves the protected region out.
#[test]
fn second_chance_and_protected_region() {
    let z = Zswap::new(cfg(u64::MAX, Some(64))).unwrap();
    for i in 0..2048 {
        z.store(SwapEntry::new(1, i), &page(i, 6)).unwrap();
    }
    let s = z.stats();
    assert!(
        s.shrink_protected > 0 && s.shrink_protected <= s.lru_pages / 4 + 1,
        "{s:?}"
    );
    let count = z.shrinker_count();
    let ratio = s.pool_total_size as f64 / (s.lru_pages * PAGE_SIZE as u64) as f64;
    let expect = ((s.lru_pages - s.shrink_protected) as f64 * ratio) as u64;
    assert!(
        count.abs_diff(expect) <= 1,
        "count {count}, expected {expect}"
    );
    let first = z.shrink(count);
    assert_eq!(first.written_back, 0, "{first:?}");
    assert_eq!(first.rotated, first.scanned);
    assert!(first.rotated > 0);
    let mut written = 0;
    for _ in 0..8 {
        written += z.shrink(u64::MAX).written_back;
    }
    assert!(written > 0, "{:?}", z.stats());
    // Refaults widen the protected region.
    let p0 = z.stats().shrink_protected;
    let mut out = vec![0u8; PAGE_SIZE];
    z.load(SwapEntry::new(1, 0), &mut out, LoadMode::KeepCopy)
        .unwrap();
    assert!(z.stats().shrink_protected >= p0.min(1));
    for i in 0..2048 {
        check(&z, SwapEntry::new(1, i), 6, LoadMode::Exclusive);
    }
}

/// Folios are written to contiguous slots and read back whole, in both
/// device formats.
#[test]
fn folios_round_trip_through_the_device_in_both_formats() {
    for compressed in [true, false] {
        let z = Zswap::new(ZswapConfig {
            writeback_compressed: compressed,
            store_incompressible: true,
            ..cfg(u64::MAX, Some(64))
        })
        .unwrap();
        let order = 4;
        let n = 1u64 << order;
        let mut data = vec![0u8; PAGE_SIZE << order];
        for f in 0..32u64 {
            for (i, p) in data.chunks_exact_mut(PAGE_SIZE).enumerate() {
                Pattern::Text.fill(f * n + i as u64, 7, p);
            }
            z.store_folio(SwapEntry::new(1, f * n), order, &data)
                .unwrap();
        }
        for _ in 0..8 {
            z.shrink(u64::MAX);
        }
        let s = z.stats();
        assert!(s.device_pages > 0, "compressed={compressed}: {s:?}");
        let dev = z.swap_device().unwrap().stats();
        // Folios written in one walk may share a larger run of slots.
        assert!(
            dev.alloc[order as usize..].iter().sum::<u64>() > 0,
            "folio-sized (or larger) slot runs: {dev:?}"
        );
        let mut out = vec![0u8; PAGE_SIZE << order];
        for f in 0..32u64 {
            let first = SwapEntry::new(1, f * n);
            z.load_folio(first, order, &mut out, LoadMode::Exclusive)
                .unwrap();
            for (i, p) in out.chunks_exact(PAGE_SIZE).enumerate() {
                let mut want = vec![0u8; PAGE_SIZE];
                Pattern::Text.fill(f * n + i as u64, 7, &mut want);
                assert!(p == &want[..], "compressed={compressed} folio {f} page {i}");
            }
        }
        assert_eq!(z.swap_device().unwrap().stats().used, 0);
    }
}

/// A full device stops writeback; the entries stay in the pool.
#[test]
fn full_device_keeps_entries_in_the_pool() {
    let z = Zswap::new(cfg(u64::MAX, Some(2))).unwrap(); // one cluster: 512 slots
    for i in 0..2048 {
        z.store(SwapEntry::new(1, i), &page(i, 8)).unwrap();
    }
    let mut last = None;
    for _ in 0..16 {
        last = z.shrink(u64::MAX).stop;
    }
    let s = z.stats();
    // Every slot taken, by more pages than slots: objects are packed.
    assert_eq!(s.swap_slots, 512, "{s:?}");
    assert_eq!(z.swap_device().unwrap().stats().used, 512);
    assert!(s.device_pages > 512, "{s:?}");
    assert!(s.reject_reclaim_fail > 0);
    assert_eq!(last, Some(ShrinkStop::DeviceFull));
    assert_eq!(s.device_pages + s.stored_pages, 2048);
    for i in 0..2048 {
        check(&z, SwapEntry::new(1, i), 8, LoadMode::Exclusive);
    }
}

/// A failing write: slots freed, entries kept, failure counted, and a
/// failing read is an error with the page still there.
#[test]
fn device_errors_lose_nothing() {
    let z = Zswap::new(cfg(u64::MAX, Some(64))).unwrap();
    for i in 0..512 {
        z.store(SwapEntry::new(1, i), &page(i, 9)).unwrap();
    }
    let dev = Arc::clone(z.swap_device().unwrap());
    dev.inject_fault(IoOp::Write, Fault::Errno(libc::EIO));
    // The first runs only rotate (second chance); the first write fails.
    let failed = (0..8).find(|_| z.shrink(u64::MAX).stop == Some(ShrinkStop::DeviceError));
    assert!(failed.is_some(), "{:?}", z.stats());
    let s = z.stats();
    assert!(s.reject_reclaim_fail > 0);
    assert_eq!(s.device_pages + s.stored_pages, 512);
    assert_eq!(dev.stats().used, s.swap_slots, "failed run's slots freed");
    for _ in 0..8 {
        z.shrink(u64::MAX);
    }
    assert!(z.stats().device_pages > 0);
    dev.inject_fault(IoOp::Read, Fault::Errno(libc::EIO));
    let mut errors = 0;
    let mut out = vec![0u8; PAGE_SIZE];
    for i in 0..512 {
        let k = SwapEntry::new(1, i);
        match z.load(k, &mut out, LoadMode::Exclusive) {
            Ok(()) => assert!(out == page(i, 9)),
            Err(e) => {
                errors += 1;
                assert!(e.to_string().contains("swap device"), "{e}");
                check(&z, k, 9, LoadMode::Exclusive);
            }
        }
    }
    assert_eq!(errors, 1);
    assert_eq!(dev.stats().used, 0);
}

/// The shrinker thread writes back once the pool exceeds its share.
#[test]
fn shrinker_thread_enforces_the_pool_share() {
    let share = 128 << 10;
    let z = Arc::new(
        Zswap::new(ZswapConfig {
            pool_share_bytes: share,
            ..cfg(u64::MAX, Some(64))
        })
        .unwrap(),
    );
    z.start_shrinker().unwrap();
    for round in 0..4u64 {
        for i in 0..1024 {
            z.store(SwapEntry::new(1, round * 1024 + i), &page(i, 10))
                .unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while z.stats().written_back_pages == 0 && Instant::now() < deadline {
        z.memory_pressure();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(z.stats().written_back_pages > 0, "{:?}", z.stats());
    drop(z); // joins the thread
}

/// A run toward the pool's share writes back about the excess. The pool's
/// size is its spans' pages, and the coldest entries are spread over the
/// oldest spans of every size class: written back, they leave holes that
/// free no page until the walk compacts, so a walk that did not would
/// write back many times the excess before the pool showed any of it.
#[test]
fn a_share_run_writes_back_about_the_excess() {
    let z = Arc::new(Zswap::new(cfg(u64::MAX, Some(256))).unwrap());
    z.start_shrinker().unwrap();
    let n = 16384u64;
    for i in 0..n {
        z.store(SwapEntry::new(1, i), &page(i, 11)).unwrap();
    }
    // Every other page loaded and stored again: warm entries now share
    // the old spans with the cold ones, as after a working set's reads.
    let mut out = vec![0u8; PAGE_SIZE];
    for i in (0..n).step_by(2) {
        z.load(SwapEntry::new(1, i), &mut out, LoadMode::Exclusive)
            .unwrap();
        z.store(SwapEntry::new(1, i), &out).unwrap();
    }
    let total = z.stats().pool_total_size;
    let excess = 1 << 20;
    z.set_pool_share_bytes(total - excess);
    let deadline = Instant::now() + Duration::from_secs(20);
    while z.stats().pool_total_size > total - excess && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = z.stats();
    assert!(s.pool_total_size <= total - excess, "{s:?}");
    // Pool bytes per page, spans and all: what each page written back
    // could have given back at best.
    let per_page = total / n;
    assert!(
        s.written_back_pages * per_page <= 4 * excess,
        "{} pages ({} KiB of pool) written back for {} KiB",
        s.written_back_pages,
        (s.written_back_pages * per_page) >> 10,
        excess >> 10
    );
    for i in 0..n {
        check(&z, SwapEntry::new(1, i), 11, LoadMode::Exclusive);
    }
}

/// A run toward the share stops at the share as it is now, not as it was
/// when the run began: the front end raises the share while data comes in,
/// and a run that kept to the old figure wrote back pages the pool then
/// had room for.
#[test]
fn a_share_run_stops_when_the_share_rises() {
    // No protected region, so one run may take every entry.
    let z = Arc::new(
        Zswap::new(ZswapConfig {
            shrinker_protect: false,
            ..cfg(u64::MAX, Some(256))
        })
        .unwrap(),
    );
    z.start_shrinker().unwrap();
    let n = 16384u64;
    for i in 0..n {
        z.store(SwapEntry::new(1, i), &page(i, 13)).unwrap();
    }
    // Every entry has had its second chance (a scan of them all rotates
    // each once), so a run now writes back from its first batch.
    z.shrink(n);
    assert_eq!(z.stats().written_back_pages, 0);
    // The first batch the run writes raises the share above the pool.
    z.debug_after_writeback(|z| {
        if z.stats().written_back_pages > 0 {
            z.set_pool_share_bytes(u64::MAX / 2);
        }
    });
    // A share of nothing: the shrinker sets out to write everything back.
    z.set_pool_share_bytes(0);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = 0;
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = z.stats().written_back_pages;
        if (now > 0 && now == last) || Instant::now() > deadline {
            break;
        }
        last = now;
    }
    // That one batch (a 2 MiB group of keys, 512 pages) and no more; a run
    // that kept to the share it began with wrote back 3584.
    assert!(last > 0, "the run never started");
    assert!(
        last <= 512,
        "{last} of {n} pages written back, the share above the pool after the first 512"
    );
    for i in 0..n {
        check(&z, SwapEntry::new(1, i), 13, LoadMode::Exclusive);
    }
}

#[test]
fn incompressible_entries_are_written_back_first() {
    let z = Zswap::new(ZswapConfig {
        store_incompressible: true,
        ..cfg(u64::MAX, Some(16))
    })
    .unwrap();
    let random = |i: u64| {
        let mut p = vec![0u8; PAGE_SIZE];
        Pattern::Random.fill(i, 4, &mut p);
        p
    };
    // Text first (the oldest), then plain pages, then text again.
    for i in 0..256 {
        z.store(SwapEntry::new(0, i), &page(i, 4)).unwrap();
    }
    for i in 256..320 {
        z.store(SwapEntry::new(0, i), &random(i)).unwrap();
    }
    for i in 320..384 {
        z.store(SwapEntry::new(0, i), &page(i, 4)).unwrap();
    }
    assert_eq!(z.stats().incompressible_pages, 64);
    let written = |r: std::ops::Range<u64>| {
        r.filter(|&i| z.is_written_back(SwapEntry::new(0, i)))
            .count() as u64
    };
    let mut steps = 0;
    let mut rotated = 0;
    while written(256..320) < 64 {
        let r = z.shrink(1);
        rotated += r.rotated;
        steps += 1;
        assert!(
            steps < 1000,
            "plain pages not written back: {:?}",
            z.stats()
        );
        assert_eq!(
            written(0..256) + written(320..384),
            0,
            "a compressed page went first"
        );
        assert_eq!(z.stats().device_pages, written(256..320));
    }
    assert_eq!(rotated, 64, "each plain page had its second chance");
    // Then the LRU's order again: the oldest compressed pages.
    while z.stats().device_pages < 96 {
        z.shrink(1);
        steps += 1;
        assert!(steps < 2000, "{:?}", z.stats());
    }
    assert_eq!(written(320..384), 0, "{:?}", z.stats());
    let mut out = vec![0u8; PAGE_SIZE];
    for i in 0..384 {
        let key = SwapEntry::new(0, i);
        z.load(key, &mut out, LoadMode::Exclusive).unwrap();
        let want = if (256..320).contains(&i) {
            random(i)
        } else {
            page(i, 4)
        };
        assert!(out == want, "page {i}");
    }
    assert_eq!(z.stats().checksum_fail, 0);
}

/// Seed 003 + zram's recompression: with a dense compressor, every cold
/// entry has its pass through it before any entry is written back, the
/// pool shrinks, and the dense objects come back byte-exact from the pool
/// and from the device (kept compressed there, or as plain pages).
#[test]
fn cold_entries_are_recompressed_before_any_is_written_back() {
    for compressed in [true, false] {
        let z = Zswap::new(ZswapConfig {
            recompress: Some("zstd:1".into()),
            writeback_compressed: compressed,
            ..cfg(u64::MAX, Some(64))
        })
        .unwrap();
        let n = 512u64;
        // Keys apart, so that no two make a run the walk writes together.
        let key = |i: u64| SwapEntry::new(1, i * 16);
        for i in 0..n {
            z.store(key(i), &page(i * 16, 12)).unwrap();
        }
        let before = z.stats();
        // The figures after the last run that wrote nothing back.
        let mut last_in_pool = before.clone();
        let mut runs = 0;
        while z.stats().written_back_pages < n / 4 {
            runs += 1;
            assert!(runs < 256, "{:?}", z.stats());
            z.shrink(64);
            let s = z.stats();
            if s.written_back_pages == 0 {
                last_in_pool = s;
            } else {
                // Nothing was written back before every entry had its pass.
                assert_eq!(s.recompressed_pages + s.recompress_poor, n, "{s:?}");
            }
        }
        let s = last_in_pool;
        assert!(s.recompressed_pages > n / 2, "text pages shrink: {s:?}");
        assert!(
            s.compressed_bytes * 4 < before.compressed_bytes * 3,
            "dense objects: {} bytes vs {} before",
            s.compressed_bytes,
            before.compressed_bytes
        );
        assert!(s.pool_total_size < before.pool_total_size, "{s:?}");
        let s = z.stats();
        assert!(s.device_pages > 0 && s.stored_pages > 0, "{s:?}");
        for i in 0..n {
            check(&z, key(i), 12, LoadMode::Exclusive);
        }
        let s = z.stats();
        assert_eq!(
            (s.stored_pages, s.device_pages, s.compressed_bytes),
            (0, 0, 0)
        );
        assert_eq!(s.checksum_fail + s.decompress_fail, 0);
    }
}

/// Without a dense compressor the walk writes entries back on their second
/// meeting, and a dense compressor equal to the store's is refused.
#[test]
fn recompression_is_off_without_a_dense_compressor() {
    let z = Zswap::new(cfg(u64::MAX, Some(64))).unwrap();
    for i in 0..64 {
        z.store(SwapEntry::new(1, i), &page(i, 13)).unwrap();
    }
    for _ in 0..8 {
        assert_eq!(z.shrink(u64::MAX).recompressed, 0);
    }
    assert!(z.stats().written_back_pages > 0);
    let same = ZswapConfig {
        recompress: Some("lz4".into()),
        ..cfg(u64::MAX, Some(64))
    };
    assert!(Zswap::new(same).is_err());
    let unknown = ZswapConfig {
        recompress: Some("brotli".into()),
        ..cfg(u64::MAX, Some(64))
    };
    assert!(Zswap::new(unknown).is_err());
}

/// Stores, loads and invalidates from several threads while the shrinker
/// thread and direct reclaim write back under a tiny pool limit (and, with
/// a dense compressor, recompress meanwhile).
#[test]
fn concurrent_writeback_keeps_content() {
    concurrent_writeback(None, false);
}

/// With a third of the pages incompressible, stored as is: the walks take
/// them from the raw rings first while the same keys are stored, loaded
/// and invalidated.
#[test]
fn concurrent_writeback_of_plain_pages_keeps_content() {
    let s = concurrent_writeback(None, true);
    assert!(s.pswpout > 0, "{s:?}");
}

#[test]
fn concurrent_recompression_and_writeback_keep_content() {
    let s = concurrent_writeback(Some("zstd:1"), false);
    assert!(s.recompressed_pages > 0, "{s:?}");
}

/// Page `i` of generation `gen`: text, or with `raw` a third of them
/// random (stored as is).
fn content(i: u64, gen: u64, raw: bool) -> Vec<u8> {
    if raw && (i + gen).is_multiple_of(3) {
        let mut p = vec![0u8; PAGE_SIZE];
        Pattern::Random.fill(i, gen, &mut p);
        p
    } else {
        page(i, gen)
    }
}

fn concurrent_writeback(recompress: Option<&str>, raw: bool) -> uzswap::ZswapStats {
    let z = Arc::new(
        Zswap::new(ZswapConfig {
            recompress: recompress.map(Into::into),
            store_incompressible: raw,
            ..cfg(128 << 10, Some(64))
        })
        .unwrap(),
    );
    z.start_shrinker().unwrap();
    let stop = Instant::now() + Duration::from_millis(1500);
    let threads: Vec<_> = (0..3u32)
        .map(|t| {
            let z = Arc::clone(&z);
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9u64 ^ t as u64;
                let mut gen = vec![0u64; 1024];
                let mut present = vec![false; 1024];
                let mut out = vec![0u8; PAGE_SIZE];
                let mut ops = 0u64;
                while Instant::now() < stop {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let i = (rng % 1024) as usize;
                    let key = SwapEntry::new(t, i as u64);
                    match (rng >> 20) % 4 {
                        0 | 1 => {
                            gen[i] += 1;
                            match z.store(key, &content(i as u64, gen[i], raw)) {
                                Ok(()) => present[i] = true,
                                Err(StoreError::PoolLimit) => present[i] = false,
                                Err(e) => panic!("{e}"),
                            }
                        }
                        2 => {
                            if present[i] {
                                z.load(key, &mut out, LoadMode::Exclusive).unwrap();
                                assert!(out == content(i as u64, gen[i], raw), "{key:?}");
                                present[i] = false;
                            } else {
                                assert!(!z.contains(key));
                            }
                        }
                        _ => {
                            assert_eq!(z.invalidate(key), present[i]);
                            present[i] = false;
                        }
                    }
                    ops += 1;
                }
                ops
            })
        })
        .collect();
    let ops: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let s = z.stats();
    assert!(ops > 1000 && s.written_back_pages > 0, "ops {ops} {s:?}");
    assert_eq!(s.checksum_fail + s.decompress_fail, 0);
    s
}

/// Clean copies (`LoadMode::KeepClean`) leave the LRU, count in
/// `clean_pages`, and a claim makes them ordinary entries again; a copy the
/// cache dropped is reported by the claim, not returned.
#[test]
fn clean_copies_are_claimed_or_dropped() {
    let z = Zswap::new(cfg(u64::MAX, None)).unwrap();
    let order = 4;
    let n = 1u64 << order;
    let mut buf = vec![0u8; PAGE_SIZE << order];
    for f in 0..4u64 {
        let data: Vec<u8> = (0..n).flat_map(|i| page(f * n + i, 7)).collect();
        z.store_folio(SwapEntry::new(0, f * n), order, &data)
            .unwrap();
    }
    for f in 0..4u64 {
        z.load_folio(
            SwapEntry::new(0, f * n),
            order,
            &mut buf,
            LoadMode::KeepClean,
        )
        .unwrap();
        let want: Vec<u8> = (0..n).flat_map(|i| page(f * n + i, 7)).collect();
        assert!(buf == want, "folio {f}");
    }
    let s = z.stats();
    assert_eq!(
        (s.stored_pages, s.clean_pages, s.lru_pages),
        (4 * n, 4 * n, 0)
    );

    // Claimed: back on the LRU, out of the cache's reach.
    assert!(z.claim_clean(SwapEntry::new(0, 0), order));
    let s = z.stats();
    assert_eq!((s.clean_pages, s.lru_pages), (3 * n, n));

    // Dropped oldest first (folio 1 became clean before 2 and 3, in its
    // shard), freeing pool memory with no device at all.
    let pool = z.stats().pool_total_size;
    let freed = z.drop_clean(u64::MAX);
    let s = z.stats();
    assert!(freed > 0);
    assert_eq!(
        (s.clean_pages, s.clean_dropped, s.stored_pages),
        (0, 3 * n, n)
    );
    assert!(s.pool_total_size < pool, "{} !< {pool}", s.pool_total_size);
    for f in 1..4u64 {
        assert!(!z.claim_clean(SwapEntry::new(0, f * n), order), "folio {f}");
        assert!(!z.contains(SwapEntry::new(0, f * n)));
    }
    // The claimed folio was not touched and still loads.
    for i in 0..n {
        check(&z, SwapEntry::new(0, i), 7, LoadMode::KeepCopy);
    }
    assert_eq!(z.drop_clean(u64::MAX), 0);
}

/// Every path that needs pool room frees clean copies before it writes a
/// unique page back: a store over the pool limit makes room from clean
/// copies alone.
#[test]
fn clean_copies_go_before_writeback() {
    let z = Zswap::new(cfg(2 << 20, Some(64))).unwrap();
    let mut out = vec![0u8; PAGE_SIZE];
    let mut i = 0u64;
    // Fill the pool close to its limit.
    while z.stats().pool_total_size < (2 << 20) * 15 / 16 {
        z.store(SwapEntry::new(0, i), &page(i, 3)).unwrap();
        i += 1;
    }
    let wb_before = z.stats().zswpwb;
    assert_eq!(wb_before, 0);
    // Half of what is stored becomes clean copies of pages "held" here.
    for k in 0..i / 2 {
        z.load(SwapEntry::new(0, k), &mut out, LoadMode::KeepClean)
            .unwrap();
    }
    // Store past the limit.
    let dropped_before = z.stats().clean_dropped;
    for k in 0..64 {
        let key = i + k;
        z.store(SwapEntry::new(0, key), &page(key, 3)).unwrap();
    }
    let s = z.stats();
    assert!(s.pool_limit_hit > 0, "the stores never reached the limit");
    assert!(
        s.clean_dropped > dropped_before,
        "no clean copy dropped: {s:?}"
    );
    assert_eq!(
        s.zswpwb, wb_before,
        "wrote back while clean copies were left"
    );
    // Overshoot is at most one folio's worth of pool growth.
    assert!(s.pool_total_size <= (2 << 20) + (64 << 10), "{s:?}");
    // Unique pages all still load byte-exact.
    for k in i / 2..i + 64 {
        check(&z, SwapEntry::new(0, k), 3, LoadMode::KeepCopy);
    }
}

/// Claims race drops: a folio whose claim succeeds loads byte-exact after
/// it, one whose claim fails is stored afresh, and none is ever lost.
#[test]
fn claims_racing_drops_lose_nothing() {
    let z = Arc::new(Zswap::new(cfg(u64::MAX, None)).unwrap());
    let order = 2;
    let n = 1u64 << order;
    let folios = 256u64;
    let data = |f: u64| -> Vec<u8> { (0..n).flat_map(|i| page(f * n + i, 11)).collect() };
    for f in 0..folios {
        z.store_folio(SwapEntry::new(1, f * n), order, &data(f))
            .unwrap();
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dropper = {
        let (z, stop) = (z.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                z.drop_clean(3 * PAGE_SIZE as u64);
                std::thread::yield_now();
            }
        })
    };
    let mut buf = vec![0u8; PAGE_SIZE << order];
    let (mut claimed, mut restored) = (0, 0);
    for round in 0..20 {
        for f in 0..folios {
            let first = SwapEntry::new(1, f * n);
            z.load_folio(first, order, &mut buf, LoadMode::KeepClean)
                .unwrap_or_else(|e| panic!("round {round} folio {f}: {e}"));
            assert!(buf == data(f), "round {round} folio {f}: content differs");
            // The caller "holds" the folio in `buf`; now it evicts it again.
            if z.claim_clean(first, order) {
                claimed += 1;
            } else {
                z.store_folio(first, order, &buf).unwrap();
                restored += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    dropper.join().unwrap();
    for f in 0..folios {
        z.load_folio(
            SwapEntry::new(1, f * n),
            order,
            &mut buf,
            LoadMode::Exclusive,
        )
        .unwrap();
        assert!(buf == data(f), "folio {f} at the end");
    }
    let s = z.stats();
    assert_eq!((s.stored_pages, s.clean_pages, s.lru_pages), (0, 0, 0));
    eprintln!(
        "claimed {claimed}, stored afresh {restored}, dropped {}",
        s.clean_dropped
    );
    assert!(claimed > 0 && restored > 0, "the race never went both ways");
}

/// Written-back objects are packed: several share a slot and some straddle
/// two. Each loads byte-exact (alone, in a folio, kept or taken), a slot
/// stays held while any object in it lives, and goes back with the last.
#[test]
fn packed_objects_share_slots_and_free_them_with_the_last_user() {
    // Text and mixed pages (incompressible ones kept whole, as the front
    // end does): objects of many sizes, up to a page, so boundaries fall
    // anywhere inside slots.
    let z = Zswap::new(ZswapConfig {
        store_incompressible: true,
        ..cfg(u64::MAX, Some(64))
    })
    .unwrap();
    let n = 1024u64;
    let fill = |i: u64| {
        let mut p = vec![0u8; PAGE_SIZE];
        let pat = if i.is_multiple_of(3) {
            Pattern::Mixed
        } else {
            Pattern::Text
        };
        pat.fill(i, 11, &mut p);
        p
    };
    for f in 0..n / 16 {
        let data: Vec<u8> = (0..16).flat_map(|k| fill(f * 16 + k)).collect();
        z.store_folio(SwapEntry::new(1, f * 16), 4, &data).unwrap();
    }
    for _ in 0..8 {
        z.shrink(u64::MAX);
    }
    let dev = Arc::clone(z.swap_device().unwrap());
    let s = z.stats();
    assert!(s.device_pages >= n / 2, "most pages written back: {s:?}");
    assert!(
        s.swap_slots * 3 < s.device_pages * 2,
        "packed: {} slots for {} pages",
        s.swap_slots,
        s.device_pages
    );
    assert_eq!(dev.stats().used, s.swap_slots);
    let load = |i: u64, mode| {
        let mut out = vec![0u8; PAGE_SIZE];
        z.load(SwapEntry::new(1, i), &mut out, mode)
            .unwrap_or_else(|e| panic!("page {i}: {e}"));
        assert!(out == fill(i), "page {i} differs");
    };
    // Every other page, kept: nothing is freed.
    for i in (0..n).step_by(2) {
        load(i, LoadMode::KeepCopy);
    }
    assert_eq!(z.stats().swap_slots, s.swap_slots);
    // Taken: each slot still shared with an odd page stays.
    for i in (0..n).step_by(2) {
        load(i, LoadMode::Exclusive);
    }
    let mid = z.stats();
    assert!(
        mid.swap_slots > 0 && mid.swap_slots <= s.swap_slots,
        "{mid:?}"
    );
    assert_eq!(dev.stats().used, mid.swap_slots);
    // Slots given back too early would be reused by these and overwrite
    // the odd pages' objects.
    for i in 0..n / 2 {
        z.store(SwapEntry::new(2, i), &page(i, 12)).unwrap();
    }
    for _ in 0..8 {
        z.shrink(u64::MAX);
    }
    assert!(z.stats().swap_slots > mid.swap_slots, "{:?}", z.stats());
    for i in 0..n / 2 {
        check(&z, SwapEntry::new(2, i), 12, LoadMode::Exclusive);
    }
    // The odd pages as whole folios would no longer be complete; load them
    // one by one, from the top, and the device is empty at the end.
    for i in (0..n / 2).rev().map(|k| 2 * k + 1) {
        load(i, LoadMode::Exclusive);
    }
    let end = z.stats();
    assert_eq!(
        (end.swap_slots, end.device_pages, end.stored_pages),
        (0, 0, 0)
    );
    assert_eq!(dev.stats().used, 0);
}

/// Keep-copy loads read the device with the shard unlocked (the slots
/// pinned): racing with stores that replace the same pages and with
/// writeback, each load returns a version of the page that was stored
/// around it, never a mix or a reused slot's bytes, and no slot is leaked.
#[test]
fn keep_copy_device_reads_race_replacements() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let z = Arc::new(Zswap::new(cfg(u64::MAX, Some(64))).unwrap());
    const N: u64 = 256;
    // The newest generation whose store returned, per page.
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..N).map(|_| AtomicU64::new(1)).collect());
    let ver = |i: u64, g: u64| page(i, 100 + g);
    for i in 0..N {
        z.store(SwapEntry::new(3, i), &ver(i, 1)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    // One thread replaces pages, one writes the pool back over and over.
    let writer = {
        let (z, done, stop) = (Arc::clone(&z), Arc::clone(&done), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i = (i * 7 + 13) % N;
                let g = done[i as usize].load(Ordering::Relaxed) + 1;
                z.store(SwapEntry::new(3, i), &ver(i, g)).unwrap();
                done[i as usize].store(g, Ordering::Release);
            }
        })
    };
    let reclaimer = {
        let (z, stop) = (Arc::clone(&z), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                z.reclaim(256 << 10);
                std::thread::yield_now();
            }
        })
    };
    let t = Instant::now();
    let (mut loads, mut from_dev) = (0u64, 0u64);
    let mut out = vec![0u8; PAGE_SIZE];
    let mut i = 0u64;
    while t.elapsed() < Duration::from_millis(1500) {
        i = (i * 5 + 3) % N;
        let lo = done[i as usize].load(Ordering::Acquire);
        let before = z.stats().pswpin;
        z.load(SwapEntry::new(3, i), &mut out, LoadMode::KeepCopy)
            .unwrap_or_else(|e| panic!("page {i}: {e}"));
        let hi = done[i as usize].load(Ordering::Acquire) + 1;
        assert!(
            (lo..=hi).any(|g| out == ver(i, g)),
            "page {i}: not a version stored between {lo} and {hi}"
        );
        loads += 1;
        from_dev += (z.stats().pswpin > before) as u64;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    reclaimer.join().unwrap();
    assert!(
        loads > 1000 && from_dev > 100,
        "{loads} loads, {from_dev} from the device"
    );
    for i in 0..N {
        let g = done[i as usize].load(Ordering::Acquire);
        z.load(SwapEntry::new(3, i), &mut out, LoadMode::KeepCopy)
            .unwrap();
        assert!(out == ver(i, g), "page {i} final version");
    }
    let s = z.stats();
    assert_eq!(z.swap_device().unwrap().stats().used, s.swap_slots, "{s:?}");
}

/// The pool's ghost (what steers the front end's pool share): loads of the
/// LRU's oldest entries count as its tail, device reads of pages written
/// back lately as near.
#[test]
fn the_pool_ghost_counts_loads_of_its_tail_and_reads_of_recent_writeback() {
    // Unprotected: the loads below would otherwise make the rest warm.
    let z = Zswap::new(ZswapConfig {
        shrinker_protect: false,
        ..cfg(u64::MAX, Some(64))
    })
    .unwrap();
    let n = 1024u64;
    for i in 0..n {
        z.store(SwapEntry::new(1, i), &page(i, 3)).unwrap();
    }
    // The oldest quarter is the tail: stored first, nothing rotated.
    z.set_ghost_windows(0, n / 4);
    for i in (0..n).step_by(2) {
        check(&z, SwapEntry::new(1, i), 3, LoadMode::Exclusive);
    }
    let g = z.pool_ghost();
    assert_eq!((g.tail, g.read_count, g.near), (n / 8, 0, 0), "{g:?}");
    // Everything left to the device; then a window of half of what was
    // written takes about half of the reads (runs are stamped whole).
    for _ in 0..8 {
        z.shrink(u64::MAX);
    }
    let written = z.stats().written_back_pages;
    assert_eq!(written, n / 2);
    z.set_ghost_windows(written / 2, 0);
    for i in (1..n).step_by(2) {
        check(&z, SwapEntry::new(1, i), 3, LoadMode::Exclusive);
    }
    let g = z.pool_ghost();
    assert_eq!((g.tail, g.read_count), (n / 8, n / 2), "{g:?}");
    assert!((n / 8..=3 * n / 8).contains(&g.near), "{g:?}");
    assert!(g.read_ns > 0, "{g:?}");
}
