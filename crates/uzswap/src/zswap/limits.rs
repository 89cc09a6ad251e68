//! The pool limit with accept hysteresis (kernel: zswap_check_limits).
//!
//! Once the pool reaches its limit, stores are refused until it has shrunk
//! below `accept_threshold_percent` of the limit: without the gap, a full
//! pool would flip between accepting and rejecting on every store, and each
//! accepted store would only push the pool back over (the reason the kernel
//! added accept_thr_percent).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub(crate) struct PoolLimit {
    max: AtomicU64,
    accept_percent: u64,
    reached_full: AtomicBool,
}

impl PoolLimit {
    pub fn new(max: u64, accept_percent: u32) -> Self {
        PoolLimit {
            max: AtomicU64::new(max),
            accept_percent: accept_percent as u64,
            reached_full: AtomicBool::new(false),
        }
    }

    pub fn set_max(&self, max: u64) {
        self.max.store(max, Ordering::Relaxed);
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Does `incoming` fit under the limit, ignoring the hysteresis? Used
    /// after direct reclaim made room for exactly this store.
    pub fn fits(&self, cur: u64, incoming: u64) -> bool {
        let max = self.max();
        max == u64::MAX || cur.saturating_add(incoming) <= max
    }

    /// The pool size at which stores are accepted again after a hit.
    pub fn accept_bytes(&self) -> u64 {
        let max = self.max();
        if max == u64::MAX {
            max
        } else {
            max / 100 * self.accept_percent
        }
    }

    /// May a store that will add about `incoming` bytes go ahead, with the
    /// pool at `cur` bytes? Racy by design, like the kernel's: concurrent
    /// stores may overshoot by one folio each.
    pub fn admit(&self, cur: u64, incoming: u64) -> bool {
        let max = self.max();
        if max == u64::MAX {
            return true;
        }
        if cur.saturating_add(incoming) > max {
            self.reached_full.store(true, Ordering::Relaxed);
            return false;
        }
        if self.reached_full.load(Ordering::Relaxed) {
            let accept = max / 100 * self.accept_percent;
            if cur > accept {
                return false;
            }
            self.reached_full.store(false, Ordering::Relaxed);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hysteresis() {
        let l = PoolLimit::new(1000, 90);
        assert!(l.admit(0, 100));
        assert!(l.admit(900, 100));
        assert!(!l.admit(950, 100), "over the limit");
        assert!(!l.admit(910, 10), "full: refused until below 90%");
        assert!(l.admit(890, 10), "below the accept threshold: accepted");
        assert!(l.admit(905, 10), "no longer full");
        let unlimited = PoolLimit::new(u64::MAX, 90);
        assert!(unlimited.admit(u64::MAX - 1, 4096));
    }
}
