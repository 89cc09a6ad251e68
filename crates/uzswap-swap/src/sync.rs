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
pub(crate) use loom_spin::{Mutex, SpinGuard as MutexGuard};

/// A mutex with parking_lot's shape (no poisoning).
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    inner: parking_lot::Mutex<T>,
}

#[cfg(not(loom))]
impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Self {
            inner: parking_lot::Mutex::new(v),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.inner.lock()
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.inner.try_lock()
    }
}

/// Under loom the locks are modelled as what they are in the kernel:
/// spinlocks (an atomic flag, `try_lock` = one compare-exchange). loom's own
/// `Mutex::try_lock` can report a false deadlock when another thread holds
/// the lock (tokio-rs/loom#376), which this protocol's isolation step hits.
#[cfg(loom)]
mod loom_spin {
    use loom::cell::{MutPtr, UnsafeCell};
    use loom::sync::atomic::{AtomicBool, Ordering};

    #[derive(Debug)]
    pub(crate) struct Mutex<T> {
        locked: AtomicBool,
        data: UnsafeCell<T>,
    }

    // SAFETY: the data is only reached through a guard, and a guard exists
    // only while `locked` is held, so at most one thread accesses it at a time.
    unsafe impl<T: Send> Sync for Mutex<T> {}
    // SAFETY: moving the mutex moves the data; T: Send makes that sound.
    unsafe impl<T: Send> Send for Mutex<T> {}

    pub(crate) struct SpinGuard<'a, T> {
        lock: &'a Mutex<T>,
        // Dropped before the flag is released, so loom sees the access end
        // while the lock is still held.
        ptr: Option<MutPtr<T>>,
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(v: T) -> Self {
            Self {
                locked: AtomicBool::new(false),
                data: UnsafeCell::new(v),
            }
        }

        pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
            self.locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .ok()?;
            Some(SpinGuard {
                lock: self,
                ptr: Some(self.data.get_mut()),
            })
        }

        pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
            loop {
                if let Some(g) = self.try_lock() {
                    return g;
                }
                loom::thread::yield_now();
            }
        }
    }

    impl<T> std::ops::Deref for SpinGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: the guard holds the lock, so no other reference to the
            // data exists; loom checks this access against the cell.
            unsafe { self.ptr.as_ref().expect("guard is live").deref() }
        }
    }

    impl<T> std::ops::DerefMut for SpinGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: as in `deref`, and `&mut self` makes it unique.
            unsafe { self.ptr.as_ref().expect("guard is live").deref() }
        }
    }

    impl<T> Drop for SpinGuard<'_, T> {
        fn drop(&mut self) {
            self.ptr = None;
            self.lock.locked.store(false, Ordering::Release);
        }
    }
}
