//! Pinned (keep-copy) loads: the copy of a page the caller holds is off the
//! LRU (never written back), a written-back folio comes back into the pool
//! whole, and unpinning puts the copy back on the LRU.

use uzswap::swap::SwapDeviceConfig;
use uzswap::{LoadMode, Pattern, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

fn zswap() -> Zswap {
    Zswap::new(ZswapConfig {
        workers: 2,
        psi_trigger: None,
        store_incompressible: true,
        swap_device: Some(SwapDeviceConfig {
            dir: std::env::temp_dir(),
            size_bytes: 16 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .unwrap()
}

fn folio(f: u64, order: u32) -> Vec<u8> {
    let n = 1u64 << order;
    let mut data = vec![0u8; PAGE_SIZE << order];
    for (i, p) in data.chunks_exact_mut(PAGE_SIZE).enumerate() {
        Pattern::Text.fill(f * n + i as u64, 3, p);
    }
    data
}

/// Shrink until nothing more is written (second chance takes two walks).
fn shrink_all(z: &Zswap) {
    for _ in 0..8 {
        z.shrink(u64::MAX);
    }
}

/// Writeback that ignores the shrinker's warm-region heuristics: a store
/// over the pool limit reclaims directly (its own store then fails).
fn squeeze(z: &Zswap) {
    z.set_max_pool_bytes(1);
    let _ = z.store(SwapEntry::new(9, 0), &folio(0, 0));
    z.set_max_pool_bytes(u64::MAX);
}

#[test]
fn pinned_copies_are_not_written_back_until_unpinned() {
    let z = zswap();
    let order = 4;
    let n = 1u64 << order;
    for f in 0..8 {
        z.store_folio(SwapEntry::new(1, f * n), order, &folio(f, order))
            .unwrap();
    }
    let mut out = vec![0u8; PAGE_SIZE << order];
    for f in 0..4 {
        z.load_folio(
            SwapEntry::new(1, f * n),
            order,
            &mut out,
            LoadMode::KeepPinned,
        )
        .unwrap();
        assert!(out == folio(f, order));
    }
    assert_eq!(z.stats().lru_pages, 4 * n);
    squeeze(&z);
    // Unpinned pages went to the device (as many as the shrinker's
    // heuristics let go); the pinned half stayed.
    let written = z.stats().device_pages;
    assert!(written > 0);
    for f in 0..4 {
        assert!(z.in_memory(SwapEntry::new(1, f * n), order), "folio {f}");
    }
    for f in 0..4 {
        assert!(z.unpin_folio(SwapEntry::new(1, f * n), order));
    }
    assert_eq!(z.stats().lru_pages, 8 * n - written);
    squeeze(&z);
    assert!(z.stats().device_pages > written);
    // An invalidated folio cannot be unpinned: the caller must store it.
    z.invalidate_range(SwapEntry::new(1, 0), 1);
    assert!(!z.unpin_folio(SwapEntry::new(1, 0), order));
    for f in 1..8 {
        z.load_folio(
            SwapEntry::new(1, f * n),
            order,
            &mut out,
            LoadMode::Exclusive,
        )
        .unwrap();
        assert!(out == folio(f, order), "folio {f}");
    }
}

#[test]
fn pinned_load_brings_a_written_back_folio_into_the_pool_whole() {
    let z = zswap();
    let order = 4;
    let n = 1u64 << order;
    for f in 0..4 {
        z.store_folio(SwapEntry::new(2, f * n), order, &folio(f, order))
            .unwrap();
    }
    shrink_all(&z);
    assert_eq!(z.stats().device_pages, 4 * n);
    let mut out = vec![0u8; PAGE_SIZE << order];
    let first = SwapEntry::new(2, n);
    z.load_folio(first, order, &mut out, LoadMode::KeepPinned)
        .unwrap();
    assert!(out == folio(1, order));
    let s = z.stats();
    assert_eq!((s.promoted_pages, s.device_pages), (n, 3 * n));
    assert!(z.in_memory(first, order));
    // Pinned: a walk leaves it alone; unpinned it can be written back again
    // and still reads back byte-exact.
    shrink_all(&z);
    assert!(z.in_memory(first, order));
    assert!(z.unpin_folio(first, order));
    shrink_all(&z);
    assert_eq!(z.stats().device_pages, 4 * n);
    for f in 0..4 {
        z.load_folio(
            SwapEntry::new(2, f * n),
            order,
            &mut out,
            LoadMode::Exclusive,
        )
        .unwrap();
        assert!(out == folio(f, order), "folio {f}");
    }
    assert_eq!(z.swap_device().unwrap().stats().used, 0);
}

/// A fork's move (`promote_for_fork`): every written-back page of a folio,
/// an incompressible one too, goes back into the pool as its object, onto
/// the LRU (a reclaim writes it back again); every page still reads back
/// byte-exact.
#[test]
fn a_forks_move_brings_every_written_back_page_into_the_pool() {
    let z = zswap();
    let order = 4;
    let n = 1u64 << order;
    let mut pages = Vec::new();
    for f in 0..4 {
        let mut data = folio(f, order);
        if f == 1 {
            // One page of random bytes: stored (and written back) raw.
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for b in data[3 * PAGE_SIZE..4 * PAGE_SIZE].iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        z.store_folio(SwapEntry::new(3, f * n), order, &data)
            .unwrap();
        pages.push(data);
    }
    shrink_all(&z);
    assert_eq!(z.stats().device_pages, 4 * n);
    let first = SwapEntry::new(3, n);
    let mut scratch = vec![0u8; PAGE_SIZE << order];
    assert!(z.promote_for_fork(first, n as usize, &mut scratch).unwrap());
    let s = z.stats();
    assert_eq!((s.promoted_pages, s.device_pages), (n, 3 * n), "{s:?}");
    assert!(!z.any_written_back(first, n));
    assert!(z.in_memory(first, order));
    // On the LRU: a reclaim writes it back again.
    squeeze(&z);
    assert!(z.stats().device_pages > 3 * n, "{:?}", z.stats());
    let mut out = vec![0u8; PAGE_SIZE << order];
    for f in 0..4 {
        z.load_folio(
            SwapEntry::new(3, f * n),
            order,
            &mut out,
            LoadMode::Exclusive,
        )
        .unwrap();
        assert!(out == pages[f as usize], "folio {f}");
    }
    assert_eq!(z.swap_device().unwrap().stats().used, 0);
}
