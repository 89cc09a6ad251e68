//! Pages that carry a plaintext marker, for the tests that look for it in
//! what leaves the process (the swap file, Redis values): each compresses
//! (so the object written back is small) but holds the marker many times,
//! in every compressed form's literals.

use uzswap::{LoadMode, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

pub const PAGES: u64 = 256;
pub const MARK: &[u8] = b"PLAINTEXT-MARKER-";

pub fn page(i: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(PAGE_SIZE);
    let mut k = 0u64;
    while p.len() < PAGE_SIZE {
        p.extend_from_slice(MARK);
        p.extend_from_slice(format!("{i:06}/{k:04} the cold page's own words; ").as_bytes());
        k += 1;
    }
    p.truncate(PAGE_SIZE);
    p
}

/// A single-threaded cache that stores every page (incompressible ones
/// too) and writes back sealed or plain, compressed or whole.
pub fn config(encrypted: bool, compressed: bool) -> ZswapConfig {
    ZswapConfig {
        workers: 1,
        psi_trigger: None,
        writeback_encrypted: encrypted,
        writeback_compressed: compressed,
        store_incompressible: true,
        ..Default::default()
    }
}

/// Writes back every stored page (the first pass only clears referenced
/// bits: second chance).
pub fn write_back_all(z: &Zswap) {
    for _ in 0..8 {
        z.reclaim(u64::MAX);
    }
    assert_eq!(z.stats().device_pages, PAGES, "every page is written back");
}

/// Loads every page back and checks it.
pub fn load_all(z: &Zswap) {
    let mut out = vec![0u8; PAGE_SIZE];
    for i in 0..PAGES {
        z.load(SwapEntry::new(0, i), &mut out, LoadMode::KeepCopy)
            .unwrap_or_else(|e| panic!("page {i}: {e}"));
        assert!(out == page(i), "page {i} differs after writeback");
    }
}

pub fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}
