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
