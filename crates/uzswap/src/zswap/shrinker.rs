//! The shrinker: writes cold entries back on memory pressure, not only when
//! the pool limit is hit (seed 003; kernel: zswap_shrinker_count/scan and
//! shrink_worker).
//!
//! # When it runs
//! - **Pool limit hit** (the store path kicks it, as the kernel queues
//!   shrink_work): write back until the pool is under the accept threshold.
//!   No warm-region protection here: the limit must hold. The store that hit
//!   the limit also reclaims synchronously just enough for itself (`store`).
//! - **Pool over its share of the budget** (`pool_share_bytes`; the store
//!   path kicks it): proactive, with the heuristics below, until the pool is
//!   back under its share or the heuristics say stop.
//! - **PSI memory pressure**: a trigger on /proc/pressure/memory
//!   (`psi_trigger`, default "some 150000 1000000"); each event scans a
//!   quarter of the freeable count. Where PSI is missing or the trigger is
//!   refused (it needs CAP_SYS_RESOURCE for sub-2 s windows), one line on
//!   stderr says so and the other triggers still work.
//! - **On demand**: [`Zswap::shrink`] (synchronous) and
//!   [`Zswap::memory_pressure`] (asynchronous, like a PSI event).
//!
//! Every path that needs room frees clean copies first (`clean`): they
//! duplicate pages the caller holds, so dropping them costs no I/O and no
//! data; only what is still over the target after that is written back.
//!
//! # Heuristics (seed 003), proactive runs only
//! - *Protected region*: recent stores, rotations and refaults (every load)
//!   add to an estimate of warm entries, halved whenever it exceeds a
//!   quarter of the LRU (`lru`). The freeable count excludes it, and a run
//!   whose scan would reach into it does not start.
//! - *Compression ratio*: the freeable count is scaled by pool bytes per
//!   stored page: the better the pool compresses, the less a writeback
//!   saves for its I/O, so the fewer are written.
//! - *Stop at a page being loaded*: meeting an entry whose exclusive load is
//!   in flight means the walk has reached warm pages.
//! - *Second chance*: every entry is stored referenced; the walk rotates a
//!   referenced entry once (clearing the bit) before writing it back.
//!
//! # Thread and locking
//! [`Zswap::start_shrinker`] starts one thread per instance (and a PSI
//! watcher thread when the trigger is armed). The thread holds only a weak
//! reference to the instance between runs, so dropping the last `Arc`
//! stops it; the instance's `Drop` wakes and joins both threads. The
//! control state is one mutex and an `Event` (a wait `quiesce` sees),
//! never held while the thread walks the LRU; the walk takes shard locks
//! one at a time (`writeback`).

use super::stats::Counters;
pub use super::writeback::ShrinkStop;
use super::writeback::{WalkMode, WalkResult};
use super::{Zswap, ZswapError};
use crate::compress::quiesce::Event;
use crate::compress::thread::Handle as JoinHandle;
use crate::PAGE_SIZE;
use parking_lot::Mutex;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;
use uzswap_swap::fds::Owned;

/// A PSI event scans freeable >> PRESSURE_SHIFT entries.
const PRESSURE_SHIFT: u32 = 2;
/// Check the pool's share this often even without a kick.
const IDLE_TICK: Duration = Duration::from_millis(500);
/// The shrinker's own runs (seed 003): stop at a page being loaded, and
/// recompress before writing back.
const PROACTIVE_WALK: WalkMode = WalkMode {
    proactive: true,
    recompress: true,
};
/// The shrinker thread's limit-driven walk: no warm-region stop, but
/// recompression first (the thread has the time; nothing waits on it).
const LIMIT_WALK: WalkMode = WalkMode {
    proactive: false,
    recompress: true,
};
/// Reclaim a caller waits for (a store over the limit, the front end's
/// `reclaim`): writeback only, which frees whole objects at once.
const DIRECT_WALK: WalkMode = WalkMode {
    proactive: false,
    recompress: false,
};

/// What one shrink run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ShrinkResult {
    /// Live LRU entries examined.
    pub scanned: u64,
    /// Entries given their second chance.
    pub rotated: u64,
    /// Pages written back.
    pub written_back: u64,
    /// Pages recompressed with the dense compressor (`recompress`).
    pub recompressed: u64,
    /// Why the run ended before its scan budget, if it did.
    pub stop: Option<ShrinkStop>,
}

impl From<WalkResult> for ShrinkResult {
    fn from(w: WalkResult) -> Self {
        ShrinkResult {
            scanned: w.scanned,
            rotated: w.rotated,
            written_back: w.written,
            recompressed: w.recompressed,
            stop: w.stop,
        }
    }
}

#[derive(Default)]
struct Events {
    limit: bool,
    share: bool,
    pressure: u64,
    stop: bool,
}

/// Shared between the instance, its shrinker thread and the PSI watcher.
#[derive(Default)]
pub(super) struct Control {
    events: Mutex<Events>,
    /// The shrinker's wait for work (`quiesce`: not a condition variable).
    wake: Event,
    running: AtomicBool,
    share_pending: AtomicBool,
    psi_active: AtomicBool,
    /// eventfd that wakes the PSI watcher for shutdown.
    psi_wake: Mutex<Option<Owned<OwnedFd>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Control {
    fn post(&self, f: impl FnOnce(&mut Events)) {
        f(&mut self.events.lock());
        self.wake.notify_one();
    }
}

impl Zswap {
    /// The shrinker's freeable count (kernel: zswap_shrinker_count): LRU
    /// entries outside the protected region, scaled by the pool's bytes per
    /// stored page. 0 when the shrinker or writeback is off.
    pub fn shrinker_count(&self) -> u64 {
        if !self.writeback_possible() || !self.shrinker_on.load(Relaxed) {
            return 0;
        }
        let lru = self.tree.lru.len();
        if lru == 0 {
            return 0;
        }
        let freeable = lru.saturating_sub(self.protected());
        let backing = self.pool.total_size() / PAGE_SIZE as u64;
        (freeable as u128 * backing as u128 / lru as u128) as u64
    }

    /// The protected-region estimate the shrinker honours: the LRU's, or 0
    /// with `shrinker_protect` off.
    fn protected(&self) -> u64 {
        if self.cfg.shrinker_protect {
            self.tree.lru.protected()
        } else {
            0
        }
    }

    /// Shrink now, on the calling thread: scan up to `nr` entries (at most
    /// the freeable count) from the cold end with seed 003's heuristics.
    pub fn shrink(&self, nr: u64) -> ShrinkResult {
        self.engine
            .with_ctx(|ctx| self.proactive_shrink(nr, ctx, |_| false))
    }

    /// Report memory pressure (as a PSI event would): the shrinker thread
    /// scans a quarter of the freeable count. No-op without the thread.
    pub fn memory_pressure(&self) {
        if self.shrink.running.load(Relaxed) {
            self.shrink.post(|e| e.pressure += 1);
        }
    }

    fn proactive_shrink(
        &self,
        nr: u64,
        ctx: &mut dyn crate::compress::CompressCtx,
        done: impl FnMut(&Zswap) -> bool,
    ) -> ShrinkResult {
        Counters::add(&self.counters.shrink_runs, 1);
        let nr = nr.min(self.shrinker_count());
        if nr == 0 {
            let stop = if !self.writeback_possible() || !self.shrinker_on.load(Relaxed) {
                ShrinkStop::Disabled
            } else if self.tree.lru.len() == 0 {
                ShrinkStop::Empty
            } else {
                Counters::add(&self.counters.shrink_stop_protected, 1);
                ShrinkStop::Protected
            };
            return ShrinkResult {
                stop: Some(stop),
                ..Default::default()
            };
        }
        // Seed 003: do not start a scan that would reach the warm region.
        if self.protected() > self.tree.lru.len().saturating_sub(nr) {
            Counters::add(&self.counters.shrink_stop_protected, 1);
            return ShrinkResult {
                stop: Some(ShrinkStop::Protected),
                ..Default::default()
            };
        }
        let r = self.writeback_walk(nr, PROACTIVE_WALK, ctx, done);
        if r.stop == Some(ShrinkStop::Loading) {
            Counters::add(&self.counters.shrink_stop_loading, 1);
        }
        r.into()
    }

    /// Limit-driven writeback (kernel: shrink_worker): until the pool is at
    /// most `target` bytes. Second chance applies; protection does not.
    fn limit_shrink(
        &self,
        target: u64,
        ctx: &mut dyn crate::compress::CompressCtx,
    ) -> ShrinkResult {
        Counters::add(&self.counters.shrink_runs, 1);
        self.drop_clean(self.pool.total_size().saturating_sub(target));
        if self.pool.total_size() <= target {
            return ShrinkResult::default();
        }
        // Twice the LRU: every entry may need its second chance first.
        let max_scan = self.tree.lru.len().saturating_mul(2);
        // The walk compacts as it frees and once more at its end. It stops
        // early where the limit rose meanwhile (as the proactive walk
        // follows the share).
        self.writeback_walk(max_scan, LIMIT_WALK, ctx, |z| {
            z.pool.total_size() <= target.max(z.limit.accept_bytes())
        })
        .into()
    }

    /// Write back about `bytes` of pool memory now, coldest first (second
    /// chance is honoured, the protected region is not: the caller is over
    /// its budget, like direct reclaim). Returns the pool bytes given back;
    /// 0 without writeback or when nothing could be written.
    ///
    /// The front end needs this for incompressible data: evicting such a
    /// chunk moves it into the pool at full size, so its budget only drops
    /// once the copy reaches the device.
    pub fn reclaim(&self, bytes: u64) -> u64 {
        let before = self.pool.total_size();
        let target = before.saturating_sub(bytes);
        // Clean copies first: freeing them costs no I/O.
        self.drop_clean(bytes);
        if self.pool.total_size() <= target || !self.writeback_possible() {
            return before.saturating_sub(self.pool.total_size());
        }
        let max_scan = bytes.div_ceil(512) + 128;
        self.engine.with_ctx(|ctx| {
            self.writeback_walk(max_scan, DIRECT_WALK, ctx, |z| {
                z.pool.total_size() <= target
            })
        });
        before.saturating_sub(self.pool.total_size())
    }

    /// The store path's direct reclaim: make room for `incoming` more bytes
    /// under the limit, dropping clean copies first and then, when the
    /// instance can, writing back. True if the store now fits.
    pub(super) fn direct_reclaim(&self, incoming: u64) -> bool {
        let need = |z: &Zswap| (z.pool.total_size() + incoming).saturating_sub(z.limit.max());
        self.drop_clean(need(self));
        if self.limit.fits(self.pool.total_size(), incoming) {
            return true;
        }
        if !self.writeback_possible() {
            return false;
        }
        // A bound, not a goal: objects average well under a page, and a
        // span is given back only once all its objects are gone.
        let max_scan = need(self).div_ceil(512) + 128;
        self.engine.with_ctx(|ctx| {
            self.writeback_walk(max_scan, DIRECT_WALK, ctx, |z| {
                z.limit.fits(z.pool.total_size(), incoming)
            })
        });
        self.limit.fits(self.pool.total_size(), incoming)
    }

    pub(super) fn kick_limit_shrink(&self) {
        if self.shrink.running.load(Relaxed) && self.writeback_possible() {
            self.shrink.post(|e| e.limit = true);
        }
    }

    pub(super) fn kick_share_shrink(&self) {
        let c = &self.shrink;
        if c.running.load(Relaxed)
            && self.pool.total_size() > self.pool_share_bytes()
            && !c.share_pending.swap(true, Relaxed)
        {
            c.post(|e| e.share = true);
        }
    }

    pub(super) fn shrinker_psi_active(&self) -> bool {
        self.shrink.psi_active.load(Relaxed)
    }

    /// Start the shrinker thread (and the PSI watcher if `psi_trigger` is
    /// set and the kernel accepts it). Idempotent. Without it, the pool
    /// limit is still enforced by the store path's direct reclaim, and
    /// [`Zswap::shrink`] still works.
    pub fn start_shrinker(self: &Arc<Self>) -> Result<(), ZswapError> {
        let c = &self.shrink;
        if c.running.swap(true, Relaxed) {
            return Ok(());
        }
        let weak = Arc::downgrade(self);
        let ctl = Arc::clone(c);
        let t = crate::compress::thread_hook::spawn("uzswap-shrink".into(), move || {
            shrinker_thread(weak, ctl)
        })
        .map_err(ZswapError::Thread)?;
        c.threads.lock().push(t);
        if let Some(trigger) = &self.cfg.psi_trigger {
            match Psi::arm(trigger) {
                Ok(psi) => {
                    *c.psi_wake.lock() = Some(psi.wake_fd()?);
                    c.psi_active.store(true, Relaxed);
                    let ctl = Arc::clone(c);
                    let t = crate::compress::thread_hook::spawn("uzswap-psi".into(), move || {
                        psi.watch(&ctl)
                    })
                    .map_err(ZswapError::Thread)?;
                    c.threads.lock().push(t);
                }
                Err(e) => eprintln!(
                    "uzswap: memory pressure (PSI) trigger not armed, shrinking on the \
                     pool limit, the pool share and on demand only: {e}"
                ),
            }
        }
        Ok(())
    }

    /// Stop and join the threads (from `Drop`, and from an owner about to
    /// drop its last handle). A shrinker thread holds the cache (an
    /// upgraded `Weak`) while it runs: an owner that dropped its handle then
    /// left the last one, and so the drop (freeing the device's slots and
    /// unlinking a far tier's values), to that thread, which a process
    /// leaving `main` ends mid-drop. Stopped first, the owner's drop is the
    /// last. Idempotent; the cache still works without the threads.
    pub fn stop_shrinker(&self) {
        let c = &self.shrink;
        if !c.running.swap(false, Relaxed) {
            return;
        }
        c.post(|e| e.stop = true);
        if let Some(fd) = c.psi_wake.lock().take() {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            // The watcher polls its own descriptor of the same eventfd.
        }
        for t in c.threads.lock().drain(..) {
            // The last Arc may be dropped by the shrinker thread itself,
            // mid-run: it exits on its own once this returns.
            if !t.is_current() {
                let _ = t.join();
            }
        }
    }
}

fn shrinker_thread(weak: Weak<Zswap>, ctl: Arc<Control>) {
    let mut ctx = None;
    loop {
        let ev = {
            let mut e = ctl.events.lock();
            if !(e.stop || e.limit || e.share || e.pressure > 0) {
                ctl.wake.wait_unlocked(&mut e, Some(IDLE_TICK));
            }
            std::mem::take(&mut *e)
        };
        if ev.stop {
            return;
        }
        let Some(z) = weak.upgrade() else { return };
        let ctx = ctx.get_or_insert_with(|| z.engine.compressor().new_ctx());
        let ctx = &mut **ctx;
        if ev.limit && z.writeback_possible() {
            z.limit_shrink(z.limit.accept_bytes(), ctx);
        }
        if z.shrinker_on.load(Relaxed) {
            z.shrink.share_pending.store(false, Relaxed);
            let share = z.pool_share_bytes();
            if z.pool.total_size() > share {
                // Clean copies go before any unique page is written back.
                z.drop_clean(z.pool.total_size() - share);
            }
            // The walk stops at the share as it is at each step, not as it
            // was when the walk began: the evictor re-plans the share while
            // data comes in (`region/share.rs`), and a walk that started
            // under the configured share just before the first plan raised
            // it kept writing back to the old figure, while the pool grew
            // past it, until it reached the protected region (skewed mixed
            // pages, 1 GiB under 759 MiB: 11.7 k pages written back in about
            // one run in three, 3.6 k of them read back, read pass 0.8 s ->
            // 1.0-1.1 s; docs/BENCHMARKS.md).
            if z.pool.total_size() > z.pool_share_bytes() {
                z.proactive_shrink(u64::MAX, ctx, |z| {
                    z.pool.total_size() <= z.pool_share_bytes()
                });
            }
            if ev.pressure > 0 {
                z.proactive_shrink(z.shrinker_count() >> PRESSURE_SHIFT, ctx, |_| false);
            }
        }
    }
}

/// An armed PSI trigger and the eventfd that stops its watcher.
struct Psi {
    trigger: Owned<OwnedFd>,
    wake: Owned<OwnedFd>,
}

impl Psi {
    fn arm(trigger: &str) -> std::io::Result<Psi> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/proc/pressure/memory")?;
        // The kernel parses the trigger from one write, NUL-terminated.
        f.write_all(format!("{trigger}\0").as_bytes())?;
        Ok(Psi {
            trigger: Owned::new(f.into()),
            wake: uzswap_swap::fds::eventfd(0)?,
        })
    }

    fn wake_fd(&self) -> Result<Owned<OwnedFd>, ZswapError> {
        self.wake
            .try_clone()
            .map(Owned::new)
            .map_err(ZswapError::Thread)
    }

    fn watch(self, ctl: &Control) {
        let mut fds = [
            libc::pollfd {
                fd: self.trigger.as_raw_fd(),
                events: libc::POLLPRI,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            // A wait for work (`quiesce`).
            // SAFETY: `fds` is a live array of two pollfds for the call.
            let rc =
                crate::compress::quiesce::idle(|| unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) });
            if rc < 0 {
                if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            if fds[1].revents != 0 || fds[0].revents & libc::POLLERR != 0 {
                break;
            }
            if fds[0].revents & libc::POLLPRI != 0 {
                ctl.post(|e| e.pressure += 1);
            }
        }
        ctl.psi_active.store(false, Relaxed);
    }
}
