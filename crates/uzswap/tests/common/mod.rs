//! Helpers shared by the region test files.

use uzswap::region::{Config, Uzswap};

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
