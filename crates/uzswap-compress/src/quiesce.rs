//! Quiescence: uzswap's threads brought to rest, holding nothing a forked
//! child could need, for the instant of a fork.
//!
//! A child forked from a process with uzswap's threads inherits every lock
//! in the state those threads left it: one held at the fork stays held in
//! the child for ever. The locks that matter are the ones the child takes
//! again: `parking_lot`'s process-wide table of parked threads (every
//! contended lock and condition variable goes through its bucket locks,
//! which no `atfork` handler holds), the allocator's, stdio's. A child that
//! starts an instance of its own parks on that table at its first
//! contended lock, and one copied while a bucket lock was held hung there
//! (one child in about fifty of a `multiprocessing` pool's).
//!
//! So threads are counted. A thread is *inside* while it runs uzswap's code:
//! each of uzswap's threads from its first instruction to its last
//! ([`crate::thread::spawn`]), a program's thread while it resolves a fault
//! or runs an interposed call ([`inside`]). It steps out only to wait for
//! work, in [`idle`] (around a raw system call: `poll(2)`, a futex,
//! `nanosleep`), or on an [`Event`], which waits that way; a wake-up runs
//! nothing of a lock's before it comes back through the gate. [`close`]
//! shuts the gate and waits until nobody but its caller is inside: then
//! every other thread of uzswap's is in one of those waits or at the gate,
//! and none can run a lock's code until the gate opens. The fork happens
//! there; the [`Closed`] guard opens the gate again (in both processes).
//!
//! Waits for work must therefore be [`Event`]s, not `parking_lot` condition
//! variables: a condition variable's wake-up (a notify just before the
//! notifier stepped out, or a timeout) relocks its mutex inside
//! `parking_lot`, where the count cannot see it.
//!
//! A thread stepping out of a wait may hold locks of its instance's own
//! (a fault handler waiting for an eviction slot holds the chunk it
//! resolves): a child never takes those, it gives the parent's instance up
//! whole. Where a thread inside waits for one at rest (for a slot that
//! thread holds, say), [`close`] gives up after its timeout and reopens the
//! gate; the caller falls back (the preload library's child then runs
//! detached, which needs none of this).
//!
//! The count is kept only once [`enable`] has been called (the preload
//! library, where a forked child takes its memory over): otherwise
//! [`inside`] and [`idle`] cost one relaxed load.
//!
//! Ordering: a thread arriving increments the count and then reads the
//! gate; [`close`] shuts the gate and then reads the count, all `SeqCst`,
//! so at least one of the two sees the other (Dekker): a thread that saw
//! the gate open is counted by the time `close` looks.

use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
/// 1 while shut.
static GATE: AtomicU32 = AtomicU32::new(0);
/// Threads inside.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// One closer at a time.
static CLOSING: AtomicBool = AtomicBool::new(false);

std::thread_local! {
    /// Nesting depth of `inside` on this thread, and whether the outermost
    /// counted it (a thread that entered before `enable` never did).
    static DEPTH: Cell<(u32, bool)> = const { Cell::new((0, false)) };
    /// This thread shut the gate: it passes it.
    static CLOSER: Cell<bool> = const { Cell::new(false) };
}

/// Keep the count from now on. Call before the first instance starts its
/// threads; a thread already inside then is never counted.
pub fn enable() {
    ENABLED.store(true, SeqCst);
}

fn arrive() {
    INSIDE.fetch_add(1, SeqCst);
    while GATE.load(SeqCst) != 0 && !CLOSER.try_with(Cell::get).unwrap_or(false) {
        INSIDE.fetch_sub(1, SeqCst);
        futex::wait(&GATE, 1, None);
        INSIDE.fetch_add(1, SeqCst);
    }
}

fn depart() {
    INSIDE.fetch_sub(1, SeqCst);
}

/// While the returned guard lives the calling thread is inside (nested
/// guards count once). Async-signal-safe: a fault's signal handler takes
/// one.
pub fn inside() -> Inside {
    if !ENABLED.load(Relaxed) {
        return Inside(false);
    }
    let entered = DEPTH.try_with(|d| match d.get() {
        (0, _) => {
            arrive();
            d.set((1, true));
        }
        (n, counted) => d.set((n + 1, counted)),
    });
    Inside(entered.is_ok())
}

/// See [`inside`]: whether it took a level of the thread's depth.
pub struct Inside(bool);

impl Drop for Inside {
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        let _ = DEPTH.try_with(|d| match d.get() {
            (0 | 1, counted) => {
                d.set((0, false));
                if counted {
                    depart();
                }
            }
            (n, counted) => d.set((n - 1, counted)),
        });
    }
}

/// In a child just forked: the count is of this thread alone. Any other
/// thread counted at the fork (one between its increment and its look at
/// the gate, or inside where the fork did not rest) does not exist here,
/// and left counted it would keep every later `close` waiting out its
/// timeout.
pub fn reset_in_child() {
    let own = DEPTH.try_with(|d| d.get().1).unwrap_or(false);
    INSIDE.store(usize::from(own), SeqCst);
}

/// Run `wait` (a wait for work in a raw system call, holding no lock the
/// child takes: see the module comment) with the calling thread stepped
/// out, and come back through the gate.
pub fn idle<T>(wait: impl FnOnce() -> T) -> T {
    let counted = ENABLED.load(Relaxed)
        && DEPTH
            .try_with(|d| matches!(d.get(), (n, true) if n > 0))
            .unwrap_or(false);
    if !counted {
        return wait();
    }
    depart();
    let r = wait();
    arrive();
    r
}

/// Run `f`, the program's own code called back from inside (a directory
/// walk's callback, run by libc under one of the preload library's calls),
/// with the calling thread wholly outside: its depth is set aside, so that
/// what `f` calls of uzswap's enters through the gate again, and a fork
/// elsewhere need not wait for a callback that may run for as long as the
/// program likes. Unlike [`idle`], which keeps the depth for a wait that
/// runs nothing of uzswap's. The depth is restored, through the gate,
/// when `f` returns.
pub fn outside<T>(f: impl FnOnce() -> T) -> T {
    /// The depth set aside, and whether it was counted.
    struct Back((u32, bool), bool);
    impl Drop for Back {
        fn drop(&mut self) {
            if self.1 {
                arrive();
            }
            let _ = DEPTH.try_with(|d| d.set(self.0));
        }
    }
    let saved = DEPTH
        .try_with(|d| d.replace((0, false)))
        .unwrap_or((0, false));
    let counted = saved.0 > 0 && saved.1;
    if counted {
        depart();
    }
    let _back = Back(saved, counted);
    f()
}

/// The gate shut, nobody but the caller inside; open again when dropped.
pub struct Closed(());

impl Drop for Closed {
    fn drop(&mut self) {
        let _ = CLOSER.try_with(|c| c.set(false));
        GATE.store(0, SeqCst);
        futex::wake(&GATE, i32::MAX);
        CLOSING.store(false, Release);
    }
}

/// Shut the gate and wait up to `timeout` for every thread but the caller
/// to step out; `None` (the gate open again) if they did not, or if the
/// count is not kept.
pub fn close(timeout: Duration) -> Option<Closed> {
    if !ENABLED.load(Relaxed) {
        return None;
    }
    let t0 = Instant::now();
    while CLOSING
        .compare_exchange(false, true, Acquire, Relaxed)
        .is_err()
    {
        if t0.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let _ = CLOSER.try_with(|c| c.set(true));
    let own = usize::from(DEPTH.try_with(|d| d.get().1).unwrap_or(false));
    GATE.store(1, SeqCst);
    let closed = Closed(());
    let mut spins = 0u32;
    while INSIDE.load(SeqCst) > own {
        if t0.elapsed() >= timeout {
            return None; // `closed` drops: the gate opens.
        }
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 128 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    Some(closed)
}

/// A futex word a thread waits on for work (as a condition variable: check
/// the condition, under its lock if it has one, then wait on the sequence
/// read before): the wait is [`idle`]. A notifier changes the condition
/// first (under the same lock), then notifies.
#[derive(Default)]
pub struct Event {
    seq: AtomicU32,
    waiters: AtomicU32,
}

impl Event {
    pub const fn new() -> Event {
        Event {
            seq: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
        }
    }

    /// The sequence to wait on: read before (or while, under the
    /// condition's lock) checking the condition.
    pub fn seq(&self) -> u32 {
        self.seq.load(SeqCst)
    }

    /// Wait until notified after `seen` was read, or `timeout` passes
    /// (then true), or spuriously.
    pub fn wait(&self, seen: u32, timeout: Option<Duration>) -> bool {
        self.waiters.fetch_add(1, SeqCst);
        let timed_out = if self.seq.load(SeqCst) == seen {
            idle(|| futex::wait(&self.seq, seen, timeout))
        } else {
            false
        };
        self.waiters.fetch_sub(1, SeqCst);
        timed_out
    }

    /// [`Event::wait`] with `guard`'s mutex released for the wait (and
    /// taken again after the gate), the sequence read while it is held.
    pub fn wait_unlocked<T>(
        &self,
        guard: &mut parking_lot::MutexGuard<'_, T>,
        timeout: Option<Duration>,
    ) -> bool {
        let seen = self.seq();
        parking_lot::MutexGuard::unlocked(guard, || self.wait(seen, timeout))
    }

    /// Wake every waiter.
    pub fn notify_all(&self) {
        self.seq.fetch_add(1, SeqCst);
        if self.waiters.load(SeqCst) > 0 {
            futex::wake(&self.seq, i32::MAX);
        }
    }

    /// Wake one waiter (at least one, if any waits).
    pub fn notify_one(&self) {
        self.seq.fetch_add(1, SeqCst);
        if self.waiters.load(SeqCst) > 0 {
            futex::wake(&self.seq, 1);
        }
    }
}

/// The futex(2) calls this module needs (private, process-local).
mod futex {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// Sleep while `word` holds `val`, for at most `timeout`; true if the
    /// time ran out.
    pub(super) fn wait(word: &AtomicU32, val: u32, timeout: Option<Duration>) -> bool {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: a live word for the call's duration, and a timespec or
        // null.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                val,
                tsp,
            )
        };
        rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ETIMEDOUT)
    }

    /// Wake up to `n` sleepers on `word`.
    pub(super) fn wake(word: &AtomicU32, n: i32) {
        // SAFETY: a live word; waking has no other precondition.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                n,
            )
        };
    }
}
