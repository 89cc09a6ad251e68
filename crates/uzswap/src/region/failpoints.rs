//! Failure injection for tests of the error paths (sled's failpoints, in
//! miniature): armed by a test, consumed by the next call it names. Each
//! is one process-wide flag, so a test that arms one runs alone in its
//! binary.
//!
//! Only with the `failpoints` feature (tests): without it the module is
//! private, nothing can arm a failpoint, and the takes the front end calls
//! are constant no-ops (`off` below) the compiler removes.
//!
//! Locking: none; each failpoint is one atomic.

#[cfg(not(feature = "failpoints"))]
pub(super) use off::*;

#[cfg(not(feature = "failpoints"))]
mod off {
    #[inline(always)]
    pub(in crate::region) fn take_copy() -> bool {
        false
    }
    #[inline(always)]
    pub(in crate::region) fn take_unprotect() -> bool {
        false
    }
    #[inline(always)]
    pub(in crate::region) fn take_zap() -> u8 {
        0
    }
    #[inline(always)]
    pub(in crate::region) fn take_poison() -> bool {
        false
    }
    #[inline(always)]
    pub(in crate::region) fn take_partial_store() -> bool {
        false
    }
    #[inline(always)]
    pub(in crate::region) fn take_hold(_waited: impl Fn() -> bool) {}
    #[inline(always)]
    pub(in crate::region) fn take_delay() {}
}

#[cfg(feature = "failpoints")]
pub(super) use on::*;
#[cfg(feature = "failpoints")]
pub use on::{
    delay_faults, fail_copies, fail_next_copy, fail_next_poison, fail_next_zap,
    fail_next_zap_midway, fail_partial_store, fail_unprotects, hold_partial_evict, holding,
};

#[cfg(feature = "failpoints")]
mod on {
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

    /// `UFFDIO_COPY` calls left to fail (0: disarmed).
    static FAIL_COPIES: AtomicU32 = AtomicU32::new(0);
    /// Write-protect faults' unprotects left to fail (0: disarmed).
    static FAIL_UNPROTECTS: AtomicU32 = AtomicU32::new(0);
    /// 0: disarmed; [`ZAP_REFUSED`]; [`ZAP_MIDWAY`].
    static FAIL_NEXT_ZAP: AtomicU8 = AtomicU8::new(0);
    pub(in crate::region) const ZAP_REFUSED: u8 = 1;
    pub(in crate::region) const ZAP_MIDWAY: u8 = 2;
    static FAIL_NEXT_POISON: AtomicBool = AtomicBool::new(false);
    /// Partial-chunk page stores left until the refused one (0: disarmed).
    static FAIL_PARTIAL_STORE: AtomicU32 = AtomicU32::new(0);
    static HOLD_PARTIAL_EVICT: AtomicBool = AtomicBool::new(false);
    static HOLDING: AtomicBool = AtomicBool::new(false);
    /// Milliseconds every fault waits before it is resolved (0: disarmed).
    static DELAY_FAULTS_MS: AtomicU64 = AtomicU64::new(0);

    /// Every fault waits `ms` milliseconds before it is resolved, until
    /// disarmed with 0: a thread stays blocked on its fault long enough for
    /// a test to do something to it meanwhile.
    pub fn delay_faults(ms: u64) {
        DELAY_FAULTS_MS.store(ms, Ordering::Release);
    }

    /// Wait out the fault delay, if armed.
    pub(in crate::region) fn take_delay() {
        let ms = DELAY_FAULTS_MS.load(Ordering::Relaxed);
        if ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }

    /// The next `UFFDIO_COPY` installs the first half of its pages (whole
    /// pages, possibly none) and then fails.
    pub fn fail_next_copy() {
        fail_copies(1);
    }

    /// The next `n` `UFFDIO_COPY` calls each fail as [`fail_next_copy`]'s
    /// does: a copy refused every time, as at a memory cgroup's limit.
    pub fn fail_copies(n: u32) {
        FAIL_COPIES.store(n, Ordering::Release);
    }

    /// The next `n` unprotects of a write-protect fault (the first write
    /// to a clean chunk or to a partial chunk's protected group) fail, as
    /// `UFFDIO_WRITEPROTECT` would refuse them.
    pub fn fail_unprotects(n: u32) {
        FAIL_UNPROTECTS.store(n, Ordering::Release);
    }

    /// The evictor's next zap fails for the first chunk in it (before any of
    /// its pages go), as if `madvise(MADV_DONTNEED)` had refused the range.
    pub fn fail_next_zap() {
        FAIL_NEXT_ZAP.store(ZAP_REFUSED, Ordering::Release);
    }

    /// The evictor's next zap zaps the first half of the first chunk in it
    /// and then fails for that chunk, as the kernel's `MADV_DONTNEED` does
    /// where a locked mapping begins in the middle of the chunk.
    pub fn fail_next_zap_midway() {
        FAIL_NEXT_ZAP.store(ZAP_MIDWAY, Ordering::Release);
    }

    /// The next `UFFDIO_POISON` fails, as on a kernel older than 6.6,
    /// which has no such ioctl.
    pub fn fail_next_poison() {
        FAIL_NEXT_POISON.store(true, Ordering::Release);
    }

    /// The `n`th page the evictor stores for partial chunks from now on (1:
    /// the next) is refused, as a full pool would refuse it; the ones before
    /// it are stored.
    pub fn fail_partial_store(n: u32) {
        FAIL_PARTIAL_STORE.store(n, Ordering::Release);
    }

    /// The evictor's next victim is held, EVICTING, before it is evicted
    /// (a whole chunk after its run's write-protection), until a fault
    /// waits on it (or 10 s pass); [`holding`] says when it is. Named for
    /// its first use; it holds whole victims too.
    pub fn hold_partial_evict() {
        HOLDING.store(false, Ordering::Release);
        HOLD_PARTIAL_EVICT.store(true, Ordering::Release);
    }

    /// Whether the evictor holds a partial victim for [`hold_partial_evict`].
    pub fn holding() -> bool {
        HOLDING.load(Ordering::Acquire)
    }

    // The takes run on every install, zap and partial store: a plain load
    // first, so that a disarmed failpoint costs no write to a cache line the
    // faulting threads share.

    /// Consume the copy failpoint.
    pub(in crate::region) fn take_copy() -> bool {
        take_count(&FAIL_COPIES)
    }

    /// Take one from a count of refusals left: whether there was one.
    fn take_count(left: &AtomicU32) -> bool {
        left.load(Ordering::Relaxed) != 0
            && left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Count one unprotect: true while the failpoint has refusals left.
    pub(in crate::region) fn take_unprotect() -> bool {
        take_count(&FAIL_UNPROTECTS)
    }

    /// Consume the zap failpoint.
    pub(in crate::region) fn take_zap() -> u8 {
        match FAIL_NEXT_ZAP.load(Ordering::Relaxed) {
            0 => 0,
            _ => FAIL_NEXT_ZAP.swap(0, Ordering::AcqRel),
        }
    }

    /// Consume the poison failpoint.
    pub(in crate::region) fn take_poison() -> bool {
        FAIL_NEXT_POISON.load(Ordering::Relaxed) && FAIL_NEXT_POISON.swap(false, Ordering::AcqRel)
    }

    /// Count one partial-chunk page store: true for the one to refuse.
    pub(in crate::region) fn take_partial_store() -> bool {
        FAIL_PARTIAL_STORE.load(Ordering::Relaxed) != 0
            && FAIL_PARTIAL_STORE
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok_and(|n| n == 1)
    }

    /// Consume the hold failpoint: if armed, hold here until `waited()` or
    /// 10 s.
    pub(in crate::region) fn take_hold(waited: impl Fn() -> bool) {
        if !(HOLD_PARTIAL_EVICT.load(Ordering::Relaxed)
            && HOLD_PARTIAL_EVICT.swap(false, Ordering::AcqRel))
        {
            return;
        }
        HOLDING.store(true, Ordering::Release);
        let t = std::time::Instant::now();
        while !waited() && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        HOLDING.store(false, Ordering::Release);
    }
}
