//! Helpers shared by the region test files.

use uzswap::region::{Config, Region, Uzswap};
use uzswap::PAGE_SIZE;

/// An instance, or None (with the reason printed) where userfaultfd is
/// unavailable, so the suite passes on machines that cannot run it.
pub fn instance(cfg: Config) -> Option<Uzswap> {
    match Uzswap::new(cfg) {
        Ok(u) => Some(u),
        Err(e @ uzswap::RegionError::Unavailable(_)) => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Page `i` of `r`, in place.
#[allow(dead_code)] // not every test binary uses every helper
pub fn page(r: &Region, i: usize) -> &'static mut [u8] {
    assert!(i * PAGE_SIZE < r.len());
    // SAFETY: `i` is inside the live region, which outlives each use here.
    unsafe { std::slice::from_raw_parts_mut(r.as_ptr().add(i * PAGE_SIZE), PAGE_SIZE) }
}

/// The first byte of page `i` of `r`: one read access to the page.
#[allow(dead_code)]
pub fn read(r: &Region, i: usize) -> u8 {
    // SAFETY: an in-bounds read of the live region.
    unsafe { std::ptr::read_volatile(page(r, i).as_ptr()) }
}

/// The failpoint tests' setup: an instance with 64 KiB chunks whose faults
/// are resolved by the faulting thread, and a region of `len` bytes filled
/// with the index pattern. None where userfaultfd is unavailable.
#[allow(dead_code)]
pub fn index_region(len: usize, seed: u64) -> Option<(Uzswap, Region)> {
    index_region_in(uzswap::region::HandlerMode::Signal, len, seed)
}

/// `index_region` with faults resolved in `handler`'s way.
#[allow(dead_code)]
pub fn index_region_in(
    handler: uzswap::region::HandlerMode,
    len: usize,
    seed: u64,
) -> Option<(Uzswap, Region)> {
    let uz = instance(Config {
        folio_order: 4,
        handler,
        ..Config::default()
    })?;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        uzswap::Pattern::Index.fill(i as u64, seed, page(&r, i));
    }
    Some((uz, r))
}

/// Every page of `r` holds the index pattern, but the pages of `flipped`,
/// whose first byte was inverted.
#[allow(dead_code)]
pub fn check_index(r: &Region, seed: u64, flipped: &[usize]) {
    for i in 0..r.len() / PAGE_SIZE {
        let p = page(r, i);
        let f = flipped.contains(&i);
        if f {
            p[0] ^= 0xff;
        }
        let ok = uzswap::Pattern::Index.verify(i as u64, seed, p);
        if f {
            p[0] ^= 0xff;
        }
        assert!(ok, "page {i}");
    }
}
