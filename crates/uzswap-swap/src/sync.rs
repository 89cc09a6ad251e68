//! Lock and atomic types the allocator's protocol is built on, swappable for
//! loom's model-checked versions under `--cfg loom` (as crossbeam-epoch does).
//!
//! Only what takes part in the isolate / relocate / free protocol goes
//! through here: the cluster locks, the device lock and the per-thread
//! cluster hints. Statistics counters use std atomics directly, since no
//! decision of the protocol depends on them.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// A mutex with parking_lot's shape (no poisoning) on both backends.
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(v),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(v),
        }
    }

    #[cfg(not(loom))]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.inner.lock()
    }

    #[cfg(not(loom))]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.inner.try_lock()
    }

    #[cfg(loom)]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        // A panic while holding a lock already fails the model.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(loom)]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        }
    }
}
