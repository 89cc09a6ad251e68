//! The batch compression engine (seed 002): one API that runs many page
//! compressions at once on parallel workers, batch size 1..=32.
//!
//! What it owns: `workers - 1` helper threads (the submitting thread is the
//! remaining worker: it always compresses too), a queue of published
//! batches, and a pool of compression contexts for callers' own threads.
//!
//! Batch semantics. `for_each(n, f)` cuts `0..n` into consecutive batches of
//! `batch_size` items and runs them one after another. A batch of one item
//! runs inline on the calling thread: batch size 1 is exactly the kernel's
//! zswap today, which compresses the pages of a folio one by one on the
//! reclaiming CPU, with no hand-off and no wake-up. A larger batch is
//! published to the helpers; every worker (the caller included) claims
//! items one at a time from the batch's atomic cursor until none is left,
//! and the caller returns to submit the next batch once every item of this
//! one has completed — as the seed's hardware compresses a batch of pages in
//! parallel and the store path waits for the batch.
//!
//! When to spread (`Spread`). A helper only helps where a CPU would
//! otherwise be idle: on a busy CPU it takes the time of the thread it
//! displaces (often the program whose memory is being evicted), and the
//! hand-off, spins and yields are pure cost. So by default a batch goes to
//! the helpers only while (a) fewer callers are inside `for_each` than there
//! are workers (`compressing`; several evictions at once already occupy the
//! CPUs, as the kernel's direct reclaimers compress beside kswapd), and (b)
//! the system's runnable threads (`/proc/loadavg`'s fourth field, the
//! kernel's `nr_running()`; ~1 µs to read), less our own awake helpers,
//! leave a CPU free. Otherwise the batch runs inline, as batch size 1 would.
//! usemem's write pass at zram-lz4's memory (two workers evicting under the
//! budget) ran 8% slower with every batch spread than with batch size 1;
//! a lone caller on an idle machine (the engine bench) still spreads.
//!
//! Wake-ups. Waking a parked thread on another CPU costs 15-100 µs on a VM,
//! as much as compressing several pages. So nobody parks straight away: a
//! helper that finds no work spins (`HELPER_SPIN`) watching the submission
//! counter before it sleeps on its event, which catches the next batch of
//! a streaming store; the caller waiting for the last items of its batch
//! spins (`OWNER_SPIN`) before it parks. A submitter notifies the event
//! only when some helper is actually asleep.
//!
//! Per-batch state machine (`Job`): published (in the queue, cursor <
//! end) -> exhausted (cursor >= end: every item claimed; helpers drop it
//! from the queue when they see it) -> complete (`pending == 0`: every
//! claimed item has returned; the owner may return). `f` is called only
//! for a successfully claimed item, so only between publish and complete.
//!
//! Locking: `Shared::queue` (a mutex, with the `sleepers` count; helpers
//! sleep on an `Event`, a wait `quiesce` sees) is a leaf lock held only to
//! push, peek or pop a job; `f` never runs under it. Context-pool slot
//! mutexes are leaves too, held only to pop or push a context. The two are
//! never held together.

use crate::quiesce::Event;
use crate::thread::Handle as JoinHandle;
use crate::{CompressCtx, CompressError, Compressor};
use parking_lot::{Condvar, Mutex};
use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The largest batch the engine accepts (seed 002: vm.compress-batchsize).
pub const MAX_BATCH: usize = 32;

/// More workers than this is a configuration mistake, not a machine.
const MAX_WORKERS: usize = 1024;

/// Scratch for one page's compressed output in `compress_batch`.
const STACK_BUF: usize = 2 * crate::PAGE_SIZE + 256;

/// How long an idle helper watches for the next batch before it sleeps.
/// Longer than the gap between two batches of one streaming store (a few
/// µs), shorter than the time a sleeping thread would steal from others.
const HELPER_SPIN: Duration = Duration::from_micros(50);

/// The part of a wait spent spinning without yielding the CPU.
const PURE_SPIN: Duration = Duration::from_micros(10);

/// How long a submitter waits actively for the last items of its batch
/// (other workers' in-flight pages) before parking: about one zstd page.
const OWNER_SPIN: Duration = Duration::from_micros(100);

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Threads that compress, counting the submitting thread (so `1` means
    /// no helper thread at all); 0 means one per online CPU.
    pub workers: usize,
    /// Pages per batch, 1..=MAX_BATCH.
    pub batch_size: usize,
    /// When a batch goes to the helpers.
    pub spread: Spread,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            workers: 0,
            batch_size: MAX_BATCH,
            spread: Spread::WhenIdle,
        }
    }
}

/// When a batch of more than one item is handed to the helpers (see "When
/// to spread" above).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Spread {
    /// While fewer callers compress than there are workers and a CPU is
    /// idle.
    #[default]
    WhenIdle,
    /// While fewer callers compress than there are workers, busy CPUs or
    /// not (an accelerator's queues, or a measurement of the helpers).
    Always,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("batch size {0} out of range 1..={MAX_BATCH}")]
    BatchSize(usize),
    #[error("worker count {0} out of range")]
    Workers(usize),
}

/// The item function of one `for_each` call, lifetime erased (see `Job`).
type ItemFn<'a> = dyn Fn(usize, &mut dyn CompressCtx) + Sync + 'a;

/// One published batch: items `next..end` of a `for_each` call.
struct Job {
    /// The caller's `f`. Its real lifetime is that of the `for_each` call
    /// that published this job; see the SAFETY comment in `run_batch`.
    f: *const ItemFn<'static>,
    end: usize,
    /// The next unclaimed item; claims overshoot `end` harmlessly.
    next: AtomicUsize,
    /// Claimed-or-unclaimed items not yet completed.
    pending: AtomicUsize,
    /// Whoever completes the last item wakes the submitting thread here:
    /// `done` is held while `pending` is checked and the wake-up sent, so
    /// none is lost. Not `Thread::unpark`: a fault resolved while the
    /// program thread exits (its allocator's thread-exit hook faulting on
    /// evicted memory) may evict and compress, after the thread's Rust
    /// thread-locals are gone, and `thread::current()` then panics inside a
    /// signal handler, which aborts the program. parking_lot's wait needs
    /// no thread-local.
    done: Mutex<()>,
    done_cv: Condvar,
    /// The first panic of an item, re-raised on the owner.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `f` points to a `Sync` closure, so calling it through a shared
// reference from several threads is allowed; it is dereferenced only while
// the owner keeps it alive (see `run_batch`). The other fields are Sync.
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

impl Job {
    /// Claim and run items until none is left. Returns after the last call
    /// of `f` this thread makes.
    fn work(&self, ctx: &mut dyn CompressCtx, is_owner: bool) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.end {
                return;
            }
            // SAFETY: item `i < end` was claimed by this thread and has not
            // completed (`pending` still counts it), so the owner is still
            // inside `run_batch` waiting, and `f` is alive.
            let f = unsafe { &*self.f };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(i, ctx))) {
                self.panic.lock().get_or_insert(p);
            }
            // Release: the item's effects happen-before the owner's Acquire
            // load that sees the count reach zero.
            if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 && !is_owner {
                let _done = self.done.lock();
                self.done_cv.notify_one();
            }
        }
    }

    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.end
    }
}

/// What the helpers share with the engine.
struct Shared {
    queue: Mutex<Queue>,
    /// Where helpers sleep for work (`quiesce`: not a condition variable).
    wake: Event,
    /// Bumped (under the queue lock) on every publish; spinners watch it.
    submitted: AtomicU64,
    /// `Queue::sleepers`, readable without the lock (`helpers_would_help`).
    asleep: AtomicUsize,
    shutdown: AtomicBool,
}

struct Queue {
    jobs: VecDeque<Arc<Job>>,
    sleepers: usize,
}

impl Shared {
    /// The oldest job with unclaimed items, dropping exhausted ones.
    fn find_job(&self) -> Option<Arc<Job>> {
        let mut q = self.queue.lock();
        while let Some(j) = q.jobs.front() {
            if !j.exhausted() {
                return Some(j.clone());
            }
            q.jobs.pop_front();
        }
        None
    }

    fn publish(&self, job: Arc<Job>) {
        let sleepers = {
            let mut q = self.queue.lock();
            q.jobs.push_back(job);
            self.submitted.fetch_add(1, Ordering::Release);
            q.sleepers
        };
        if sleepers > 0 {
            self.wake.notify_all();
        }
    }
}

fn helper_main(shared: Arc<Shared>, compressor: Arc<dyn Compressor>) {
    let mut ctx = compressor.new_ctx();
    loop {
        // Read before looking at the queue: a publish after this read
        // changes it, so the wait below cannot miss that job.
        let seen = shared.submitted.load(Ordering::Acquire);
        if let Some(job) = shared.find_job() {
            job.work(ctx.as_mut(), false);
            continue;
        }
        let changed = spin_until(HELPER_SPIN, || {
            shared.submitted.load(Ordering::Acquire) != seen
                || shared.shutdown.load(Ordering::Relaxed)
        });
        if shared.shutdown.load(Ordering::Relaxed) {
            return;
        }
        if changed {
            continue;
        }
        let mut q = shared.queue.lock();
        q.sleepers += 1;
        shared.asleep.fetch_add(1, Ordering::Relaxed);
        // `submitted` only changes under this lock, so a publish either
        // happened before this check or will see `sleepers > 0` and notify.
        while shared.submitted.load(Ordering::Acquire) == seen
            && !shared.shutdown.load(Ordering::Relaxed)
        {
            shared.wake.wait_unlocked(&mut q, None);
        }
        q.sleepers -= 1;
        shared.asleep.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Wait up to `limit` for `done()`; true if it became true. The first
/// `PURE_SPIN` only spins (the cheapest wake-up when the other thread is
/// running on its own CPU); after that each check yields the CPU, so on an
/// oversubscribed machine the thread we are waiting for (or anyone else)
/// runs instead of us burning the time slice.
fn spin_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        for _ in 0..32 {
            if done() {
                return true;
            }
            std::hint::spin_loop();
        }
        let waited = t0.elapsed();
        if waited >= limit {
            return done();
        }
        if waited >= PURE_SPIN {
            std::thread::yield_now();
        }
    }
}

/// `runnable`'s descriptor of `/proc/loadavg`, or one of these two, and
/// the (device, inode) it was opened on.
static FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(UNOPENED);
static FD_ID: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
const UNOPENED: i32 = -1;
const GAVE_UP: i32 = -2;

/// The system's runnable threads now, the caller included: the fourth
/// field of `/proc/loadavg` ("R/T"), the kernel's `nr_running()`. `None`
/// where it cannot be read (no procfs), and then every batch may spread.
///
/// The file stays open (a read is ~1 µs; opening it again each time, ~5).
/// A program under `uzswap run` may close descriptors it did not open, and
/// its next file may then get our number. So the descriptor is read only
/// while it still refers to the file we opened (`fstat`'s device and
/// inode; a read of a program's eventfd or timerfd would consume its
/// count), and is opened again otherwise. The old number is never closed:
/// it is no longer ours. If a fresh descriptor does not give loadavg's
/// text either, the probe gives up for good rather than open files without
/// end.
fn runnable() -> Option<usize> {
    for fresh in [false, true] {
        let mut fd = FD.load(Ordering::Acquire);
        if fd == GAVE_UP {
            return None;
        }
        let ours = fd >= 0
            && identity(fd)
                == Some((
                    FD_ID[0].load(Ordering::Relaxed),
                    FD_ID[1].load(Ordering::Relaxed),
                ));
        if !ours || fresh {
            // SAFETY: a NUL-terminated path; the flags ask for nothing else.
            let new =
                unsafe { libc::open(c"/proc/loadavg".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            let Some((dev, ino)) = (new >= 0).then(|| identity(new)).flatten() else {
                break;
            };
            FD_ID[0].store(dev, Ordering::Relaxed);
            FD_ID[1].store(ino, Ordering::Relaxed);
            // Racing threads each store the same identity (one file); the
            // loser closes its own descriptor.
            match FD.compare_exchange(fd, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => fd = new,
                Err(theirs) => {
                    // SAFETY: `new` is ours alone, opened above.
                    unsafe { libc::close(new) };
                    fd = theirs;
                }
            }
        }
        if let Some(r) = read_runnable(fd) {
            return Some(r);
        }
    }
    FD.store(GAVE_UP, Ordering::Release);
    None
}

/// The (device, inode) `fd` refers to.
fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid buffer for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is valid for writes; a bad `fd` is an error, not UB.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Parse loadavg's "L1 L5 L15 R/T PID" from `fd`, or `None`.
fn read_runnable(fd: i32) -> Option<usize> {
    let mut buf = [0u8; 128];
    // SAFETY: `buf` is valid for writes of its length; `fd` may be anything
    // (a bad descriptor is an error, not undefined behaviour).
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    let text = std::str::from_utf8(buf.get(..usize::try_from(n).ok()?)?).ok()?;
    let mut f = text.split_ascii_whitespace();
    for _ in 0..3 {
        f.next()?.parse::<f64>().ok()?;
    }
    let (r, t) = f.next()?.split_once('/')?;
    t.parse::<usize>().ok()?;
    f.next()?.parse::<u64>().ok()?;
    if f.next().is_some() {
        return None;
    }
    r.parse().ok()
}

/// Idle contexts for callers' own threads (`with_ctx`, and the caller's
/// share of `for_each`), spread over slots like the kernel's per-CPU
/// acomp_ctx so that threads rarely meet on one slot's mutex.
struct CtxPool {
    slots: Box<[CtxSlot]>,
}

type CtxSlot = Mutex<Vec<Box<dyn CompressCtx>>>;

impl CtxPool {
    fn slot(&self) -> &CtxSlot {
        thread_local! {
            static SLOT_HINT: Cell<usize> = const { Cell::new(usize::MAX) };
        }
        static NEXT_HINT: AtomicUsize = AtomicUsize::new(0);
        let hint = SLOT_HINT.with(|h| {
            if h.get() == usize::MAX {
                h.set(NEXT_HINT.fetch_add(1, Ordering::Relaxed));
            }
            h.get()
        });
        &self.slots[hint % self.slots.len()]
    }
}

/// Parallel compression engine. `Send + Sync`; many callers may submit at once.
pub struct BatchEngine {
    compressor: Arc<dyn Compressor>,
    batch_size: usize,
    workers: usize,
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    pool: CtxPool,
    spread: Spread,
    /// Callers inside `for_each` now (see "Oversubscription" above).
    compressing: AtomicUsize,
}

/// Counts a caller in `BatchEngine::compressing` for its `for_each`.
struct Compressing<'a>(&'a AtomicUsize);

impl<'a> Compressing<'a> {
    fn enter(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Compressing(n)
    }
}

impl Drop for Compressing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn online_cpus() -> usize {
    static CPUS: OnceLock<usize> = OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl BatchEngine {
    pub fn new(compressor: Arc<dyn Compressor>, cfg: EngineConfig) -> Result<Self, BatchError> {
        if !(1..=MAX_BATCH).contains(&cfg.batch_size) {
            return Err(BatchError::BatchSize(cfg.batch_size));
        }
        let workers = if cfg.workers == 0 {
            online_cpus()
        } else {
            cfg.workers
        };
        if workers > MAX_WORKERS {
            return Err(BatchError::Workers(cfg.workers));
        }
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                jobs: VecDeque::new(),
                sleepers: 0,
            }),
            wake: Event::new(),
            submitted: AtomicU64::new(0),
            asleep: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
        });
        let mut helpers = Vec::with_capacity(workers - 1);
        for k in 1..workers {
            let (s, c) = (shared.clone(), compressor.clone());
            let h =
                crate::thread_hook::spawn(format!("uzswap-comp/{k}"), move || helper_main(s, c));
            match h {
                Ok(h) => helpers.push(h),
                Err(_) => {
                    // Out of threads: give back the ones made, then fail.
                    stop_helpers(&shared, &mut helpers);
                    return Err(BatchError::Workers(cfg.workers));
                }
            }
        }
        let nslots = (2 * online_cpus()).max(4);
        let pool = CtxPool {
            slots: (0..nslots).map(|_| Mutex::new(Vec::new())).collect(),
        };
        Ok(BatchEngine {
            compressor,
            batch_size: cfg.batch_size,
            workers,
            shared,
            helpers,
            pool,
            spread: cfg.spread,
            compressing: AtomicUsize::new(0),
        })
    }

    pub fn compressor(&self) -> &Arc<dyn Compressor> {
        &self.compressor
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Threads that compress, counting the caller.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Run `f(i, ctx)` for every `i` in `0..n`, spread over the workers (the
    /// caller participates), `batch_size` items per submitted batch. Returns
    /// when all `n` calls have returned. `f` must not panic; if it does, the
    /// other items still run and the first panic is re-raised here after
    /// every call has returned.
    pub fn for_each<F>(&self, n: usize, f: F)
    where
        F: Fn(usize, &mut dyn CompressCtx) + Sync,
    {
        self.for_each_run(n, |run, ctx| {
            for i in run {
                f(i, &mut *ctx);
            }
        });
    }

    /// [`BatchEngine::for_each`], handing `f` runs of consecutive items
    /// (`f(run, ctx)`), each to be done on the thread it is given to: items
    /// the caller does itself come as runs of up to [`MAX_BATCH`] (whole
    /// inline batches, consecutive ones merged), items of a batch spread
    /// over the helpers one by one. Every item of `0..n` is in exactly one
    /// run.
    ///
    /// Why runs: a caller that compresses its pages back to back and then
    /// does the rest of each page's work (allocation, checksum, index)
    /// keeps the compressor's branch history and tables warm. The store of
    /// a 64 KiB folio of index pages, page by page, spent 8% more cycles
    /// inside lz4 than the same calls made back to back (docs/BENCHMARKS.md,
    /// "Compressing a folio's pages back to back").
    pub fn for_each_run<F>(&self, n: usize, f: F)
    where
        F: Fn(Range<usize>, &mut dyn CompressCtx) + Sync,
    {
        if n == 0 {
            return;
        }
        let _in = Compressing::enter(&self.compressing);
        self.with_ctx(|ctx| {
            let mut run = 0..0;
            let mut start = 0;
            while start < n {
                let end = n.min(start + self.batch_size);
                if end - start == 1 || !self.helpers_would_help() {
                    if end - run.start > MAX_BATCH {
                        f(run.clone(), &mut *ctx);
                        run = start..start;
                    }
                    run.end = end;
                } else {
                    if !run.is_empty() {
                        f(run.clone(), &mut *ctx);
                    }
                    run = end..end;
                    self.run_batch(
                        start,
                        end,
                        &|i, c: &mut dyn CompressCtx| f(i..i + 1, c),
                        ctx,
                    );
                }
                start = end;
            }
            if !run.is_empty() {
                f(run, &mut *ctx);
            }
        })
    }

    /// Whether to hand the next batch to the helpers (see "When to spread");
    /// asked per batch, as the other callers and threads come and go.
    fn helpers_would_help(&self) -> bool {
        if self.helpers.is_empty() || self.compressing.load(Ordering::Relaxed) >= self.workers {
            return false;
        }
        match self.spread {
            Spread::Always => true,
            Spread::WhenIdle => {
                // Our awake helpers (spinning for work, or on it) are in the
                // count; they are the CPUs we would hand the batch to.
                let awake = self.helpers.len() - self.shared.asleep.load(Ordering::Relaxed);
                runnable().is_none_or(|r| r.saturating_sub(awake) < online_cpus())
            }
        }
    }

    /// Publish items `start..end`, work on them, wait for all of them.
    fn run_batch(&self, start: usize, end: usize, f: &ItemFn<'_>, ctx: &mut dyn CompressCtx) {
        // SAFETY: this only erases the lifetime of the borrow of `f` so that
        // the job can sit in the shared queue. The pointer is dereferenced
        // only by a thread that has claimed an item `< end` and not yet
        // completed it (`Job::work`), and this function does not return
        // until `pending` reaches 0, i.e. until every item has been claimed
        // and completed: after that, `next >= end` forever and no thread can
        // claim again, so the dangling pointer left in a stale queue entry
        // (kept alive by its Arc) is never dereferenced. Panics from `f` are
        // caught inside `work`, so this frame cannot unwind early either.
        let f: *const ItemFn<'static> =
            unsafe { std::mem::transmute::<*const ItemFn<'_>, *const ItemFn<'static>>(f) };
        let job = Arc::new(Job {
            f,
            end,
            next: AtomicUsize::new(start),
            pending: AtomicUsize::new(end - start),
            done: Mutex::new(()),
            done_cv: Condvar::new(),
            panic: Mutex::new(None),
        });
        self.shared.publish(job.clone());
        job.work(ctx, true);
        if job.pending.load(Ordering::Acquire) != 0 {
            spin_until(OWNER_SPIN, || job.pending.load(Ordering::Acquire) == 0);
            let mut done = job.done.lock();
            while job.pending.load(Ordering::Acquire) != 0 {
                job.done_cv.wait(&mut done);
            }
        }
        let p = job.panic.lock().take();
        if let Some(p) = p {
            resume_unwind(p);
        }
    }

    /// Borrow a context on the calling thread (for loads and single stores).
    /// Contexts are pooled: no allocation once the pool has warmed up.
    pub fn with_ctx<R>(&self, f: impl FnOnce(&mut dyn CompressCtx) -> R) -> R {
        let slot = self.pool.slot();
        let popped = slot.lock().pop();
        let mut ctx = popped.unwrap_or_else(|| self.compressor.new_ctx());
        let r = f(ctx.as_mut());
        slot.lock().push(ctx);
        r
    }

    /// Compress every page, in parallel as `for_each` does. Each result is
    /// the page's compressed bytes or that page's own error: one page
    /// failing never fails the others.
    pub fn compress_batch(&self, pages: &[&[u8]]) -> Vec<Result<Vec<u8>, CompressError>> {
        let out: Vec<OnceLock<Result<Vec<u8>, CompressError>>> =
            (0..pages.len()).map(|_| OnceLock::new()).collect();
        let comp = &self.compressor;
        self.for_each(pages.len(), |i, ctx| {
            let src = pages[i];
            let bound = comp.max_compressed_len(src.len());
            // Compress into scratch, keep only the compressed length.
            let r = if bound <= STACK_BUF {
                let mut buf = [0u8; STACK_BUF];
                ctx.compress(src, &mut buf[..bound])
                    .map(|len| buf[..len].to_vec())
            } else {
                let mut buf = vec![0u8; bound];
                ctx.compress(src, &mut buf).map(|len| buf[..len].to_vec())
            };
            let _ = out[i].set(r);
        });
        out.into_iter()
            .map(|c| {
                c.into_inner()
                    .unwrap_or_else(|| Err(CompressError::Backend("item not run".into())))
            })
            .collect()
    }
}

fn stop_helpers(shared: &Shared, helpers: &mut Vec<JoinHandle<()>>) {
    {
        let _q = shared.queue.lock();
        shared.shutdown.store(true, Ordering::Relaxed);
    }
    shared.wake.notify_all();
    for h in helpers.drain(..) {
        // A helper never panics outside `f`, and `f`'s panics are caught.
        let _ = h.join();
    }
}

impl Drop for BatchEngine {
    fn drop(&mut self) {
        stop_helpers(&self.shared, &mut self.helpers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn only_loadavg_text_counts_as_runnable_threads() {
        let dir = std::env::temp_dir().join(format!("uzswap-loadavg-{}", std::process::id()));
        std::fs::write(&dir, b"0.5 0.4 0.3 garbage\n").unwrap();
        let junk = std::fs::File::open(&dir).unwrap();
        assert_eq!(read_runnable(junk.as_raw_fd()), None);
        let mut p = [0i32; 2];
        // SAFETY: `p` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: `p[1]` is our pipe's write end; the source has 12 bytes.
        let wrote = unsafe { libc::write(p[1], b"1 1 1 3/9 7\n".as_ptr().cast(), 12) };
        assert_eq!(wrote, 12);
        assert_eq!(read_runnable(p[0]), None, "a pipe refuses pread");
        let mut left = [0u8; 16];
        // SAFETY: `left` is valid for 16 bytes; the pipe still holds ours.
        let read = unsafe { libc::read(p[0], left.as_mut_ptr().cast(), 16) };
        assert_eq!(read, 12, "the pipe's bytes are all still there");
        assert_eq!(read_runnable(-1), None);
        if std::fs::metadata("/proc/loadavg").is_err() {
            println!("skipped the rest: no /proc/loadavg");
            return;
        }
        let n = runnable().expect("loadavg parses");
        assert!(n >= 1, "this thread runs");

        // The program closes our descriptor and its next file, an eventfd
        // holding a count, takes the number: we open loadavg again, leave
        // its file open and its count unread.
        let ours = FD.load(Ordering::Relaxed);
        // SAFETY: eventfd takes no pointers.
        let efd = unsafe { libc::eventfd(1, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        assert!(efd >= 0);
        // SAFETY: both are open descriptors; this replaces ours atomically.
        assert_eq!(unsafe { libc::dup2(efd, ours) }, ours);
        assert!(runnable().is_some());
        assert_ne!(FD.load(Ordering::Relaxed), ours);
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into `count`, from the eventfd now at `ours`.
        let r = unsafe { libc::read(ours, (&mut count as *mut u64).cast(), 8) };
        assert_eq!((r, count), (8, 1), "the program's count is still there");
        // SAFETY: both are the test's copies of the eventfd.
        unsafe { libc::close(ours) };
        // SAFETY: as above.
        unsafe { libc::close(efd) };
        for end in p {
            // SAFETY: the pipe's two ends are ours.
            unsafe { libc::close(end) };
        }
        let _ = std::fs::remove_file(&dir);
    }
}
