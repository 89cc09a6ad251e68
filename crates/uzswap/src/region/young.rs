//! Reads of resident memory, from the kernel's accessed bits
//! (`Config::sample_young`: off by default, on, or auto, which is
//! `uzswap run`'s default: `SampleYoung::FOR_PROGRAMS`).
//!
//! A fault is the only reference userspace is handed for free: a chunk read
//! often while it stays mapped looks as cold to the CLOCK as one never read.
//! The kernel's reclaim reads the accessed ("young") bit of every page table
//! entry it scans. Userspace has no per-page view of those bits (pagemap
//! carries none; page idle tracking and DAMON's virtual address mode are
//! not built on every kernel and need root), but `/proc/self/smaps` reports,
//! per mapping (VMA), the bytes of its pages whose bit is set, and writing
//! `1` to `/proc/self/clear_refs` clears every bit of the process. Both are
//! the process's own files: no privilege is needed.
//!
//! So the sampler makes the resident parts of each region many mappings:
//! *groups* of [`GROUP_BYTES`] (a few chunks) with odd index are marked
//! `MADV_DONTDUMP`, which changes nothing but what a core dump holds (it
//! leaves them out); since
//! a mapping spans only pages of equal flags, each marked group splits from
//! its neighbours and each unmarked one is left between two marked ones.
//! Groups are split as chunks in them are first seen mapped, up to a bound
//! on the mappings made (`max_splits`: an eighth of `vm.max_map_count`,
//! so the program keeps nearly all of its own); past it, unsplit groups
//! share a mapping, which is never read as a reference (it would mark far
//! more than was read). Then, paced by the CLOCK hand, a *sample*: read
//! smaps, set REF on every mapped chunk of a group whose `Referenced` is
//! not zero (a chunk read since the last sample keeps its second chance; a
//! PARTIAL chunk leaves probation as if read again), and clear the bits.
//! Only chunks already mapped at the last sample count: `UFFDIO_COPY`
//! installs its pages with the bit set, so a chunk faulted in since holds
//! the install's bit, not a read's, and a random read's first group,
//! deliberately left without REF (`evict.rs`, probation), would leave
//! probation on its install alone. A chunk evicted and faulted back
//! between two samples is told by its shadow, which changes at each
//! eviction and the sampler keeps per chunk.
//!
//! Pacing. A mark is worth most just before the hand reaches its chunk, so
//! samples come [`PER_TURN`] times per turn of the hand over the resident
//! chunks (counted by the hand's visits, `evict::Clock::visited`), or at
//! the first batch after [`STALE_INTERVALS`] intervals without one. A sample
//! costs two walks of the process's page tables and the text of every
//! mapping (on a 2-vCPU VM: about 8 µs per mapping and 0.1 µs per resident
//! page; 4-5 ms for GNU sort at 48 MiB, 15 ms for a 130 MiB heap), so
//! samples are also at least [`COST_FACTOR`] times the last one's cost
//! apart: at most a fifth of the evictor thread's time goes to them.
//! What it buys depends on the program (docs/BENCHMARKS.md, "Accessed bits
//! from smaps"): where a read-mostly hot set sits apart from data streamed
//! through (GNU sort's text and its line records), the hand stops evicting
//! the hot set and faults fall severalfold; where the working set does not
//! fit or reads are uniform, marks change nothing and the samples are pure
//! cost. Hence `auto` (below) for whole programs, and off by default for
//! the API.
//!
//! A group counts as read only if more of its bytes are young than were
//! installed in it since the last sample (smaps gives bytes): the install
//! of one chunk must not make its neighbours in the group look read.
//!
//! `SampleYoung::Auto` finds out whether the marks pay, by experiment.
//! A *trial* holds an eighth of the groups out of its marks (a controlled
//! trial: which groups is a hash, a different eighth each trial, not the
//! program's choice), and counts the faults taken in held-out groups and
//! in marked ones, and the groups of each with chunks mapped at each
//! sample. Where marks keep a hot set that the hand would take, the
//! held-out groups fault more per group than the marked ones: GNU sort's
//! took 2.5-9 times as many, a Python heap's, a multi-threaded program's
//! and uniform reads' 1.0-1.3 times (`on` took as many faults as `off` on
//! those). The held-out groups also take the evictions the marks move off
//! the others, which inflates their rate where most of what is resident
//! is read: so a trial pays only where the rate is at least
//! [`MIN_RATIO`] times the marked groups' and the faults that ratio says
//! the marks saved cost more than the trial's samples took
//! (`Split::saved`). The bound is not proof against that inflation: the
//! Python heap program's later phase (its skewed reads), half its mapped
//! chunks marked, showed held-out groups faulting 2.1-2.8 times as often
//! while the marks saved nothing, and a trial there pays (a run long
//! enough to reach it then pays `on`'s cost, 15-18%). Scaling the
//! held-out rate by the unmarked share (`1 - p`) told that phase apart
//! (1.0-1.1 against sort's 3.5-4.1) but also turned down a hot set that
//! is half the memory, which the marks do keep (`region_young.rs`): not
//! kept. States (`Phase`):
//!
//! ```text
//!   Trial --paid--> Marking(n) --n samples--> Trial (first turn: marks only)
//!   Trial --unpaid--> Off(t) --t passed--> Trial (first sample: clears only)
//! ```
//!
//! A trial is short (a few samples: what a program the marks do not help
//! pays for each probe); a pause after one that did not pay lasts
//! [`OFF_FACTOR`] times its cost, fourfold for each in a row; a trial that
//! paid is followed by samples that hold nothing out (a held-out group
//! faults as an unsampled one does: the trial's own price). The tags
//! (`chunk::TAGS`: HELD on a held-out group's read chunks, IDLE on unread
//! ones) and their evictions and refaults are kept as figures.
//!
//! Only the evictor thread samples (a sample takes milliseconds; a fault at
//! the backstop must not wait for one).
//!
//! Locking: `Young`'s mutex is held by the evictor thread while it samples
//! and splits; under it, the clock lock (briefly, to read `visited`) and
//! region `live` read locks, one at a time. Marks are set by compare-and-
//! swap on the chunk word, only in mapped states and keeping the state: a
//! hint that never changes what a chunk is. So are the tags; the eviction
//! and fault paths only read them, and count into relaxed atomics.

use super::chunk::{self, *};
use super::{RegionInner, SampleYoung, Shared};
use crate::PAGE_SIZE;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of a group: a mapping of its own once split.
pub(super) const GROUP_BYTES: usize = 256 << 10;
/// Samples per turn of the CLOCK hand over the resident chunks.
const PER_TURN: u64 = 4;
/// The time between samples, at least this many times the last one's cost.
const COST_FACTOR: u32 = 4;
/// And at least this long.
const MIN_INTERVAL: Duration = Duration::from_millis(20);
/// A sample this many intervals old is due however little the hand moved
/// since: a program that reads its hot set without a fault and then
/// streams (a pass over its data after a computation) must have those
/// reads marked before the hand's first visits, not a quarter-turn after
/// them. It costs at most one sample in this many intervals.
const STALE_INTERVALS: u32 = 4;
/// `vm.max_map_count`'s default, where it cannot be read.
const DEFAULT_MAX_MAP_COUNT: usize = 65530;
/// Samples a trial counts after its first, at least (the faults of one
/// interval between samples, a quarter turn of the hand); it goes on
/// until its held-out groups took [`MIN_HELD_FAULTS`] faults, up to
/// [`MAX_WINDOW`] samples. Short, since a trial that does not pay costs
/// what its samples took: a program whose reads the marks cannot tell
/// apart pays for a few samples, not for turns of them.
const WINDOW: u32 = 1;
const MAX_WINDOW: u32 = 4 * PER_TURN as u32;
const MIN_HELD_FAULTS: u64 = 128;
/// A trial pays only where its held-out groups faulted at least this many
/// times as often per group as the marked ones.
const MIN_RATIO: f64 = 2.0;
/// One group in this many is held out of a trial's marks (`auto`).
const HOLD_OUT: u64 = 8;
/// After a trial that paid, samples that mark every group (four turns of
/// the hand) before the next trial: a trial's held-out groups fault as
/// unsampled ones do, a cost of the measure that marking alone does not
/// pay.
const MARKING: u32 = 4 * PER_TURN as u32;
/// A trial that did not pay pauses `auto` sampling for this many times
/// its cost, four times as long for each pause with no trial that paid
/// between, up to [`MAX_OFF_GROWTHS`] times: a program whose reads the
/// marks cannot tell apart pays a seventeenth of the evictor's time for
/// the first probe, and a quarter of that for each one after. (Four
/// times, tried: GNU sort, whose first trial falls in its input phase
/// about one run in ten, came back sooner; but the Python heap program
/// reached its later phase, where a trial pays wrongly (module comment),
/// and ran 9-16% over unsampled against 5-8%.)
const OFF_FACTOR: u32 = 16;
const MAX_OFF_GROWTHS: u32 = 4;
/// What a fault is taken to cost where none was timed yet: the order of
/// one 4 KiB round trip.
const DEFAULT_FAULT: Duration = Duration::from_micros(40);

#[derive(Default)]
pub(super) struct Young {
    state: parking_lot::Mutex<State>,
}

/// One region's splits and mapped chunks.
struct Marks {
    /// The odd groups marked `MADV_DONTDUMP` (a bit each), and how many.
    split: Vec<u64>,
    splits: usize,
    /// The pages of each chunk mapped when the last sample cleared the
    /// bits: the only ones whose bits can tell a read.
    seen: Vec<u16>,
    /// Each chunk's shadow (`RegionInner::shadow`) then: written when the
    /// chunk is evicted and when a PARTIAL chunk's first group comes in,
    /// so a changed one says the pages mapped now came back since, their
    /// bits their installs', however many there are.
    stamp: Vec<u32>,
}

fn bit(v: &[u64], i: usize) -> bool {
    v[i / 64] & (1 << (i % 64)) != 0
}

/// Where `auto` stands.
#[derive(Default)]
enum Phase {
    /// A trial: samples that hold a window's groups out of their marks (a
    /// probe at the start and after a pause; again after a stretch of
    /// marking).
    #[default]
    Trial,
    /// A trial paid: every read group is marked, none held out, for this
    /// many more samples.
    Marking(u32),
    /// Judged not to pay: no samples until then.
    Off(Instant),
}

/// The faults of a window's held-out and marked groups, and the groups of
/// each that had chunks mapped, summed over its samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Split {
    faults_held: u64,
    faults_marked: u64,
    groups_held: u64,
    groups_marked: u64,
}

impl Split {
    fn since(self, then: Split) -> Split {
        Split {
            faults_held: self.faults_held - then.faults_held,
            faults_marked: self.faults_marked - then.faults_marked,
            groups_held: self.groups_held - then.groups_held,
            groups_marked: self.groups_marked - then.groups_marked,
        }
    }

    /// The fault time the marks saved: the faults the marked groups would
    /// have taken at the held-out groups' rate, less those they took,
    /// each worth `fault`; nothing where that rate is under
    /// [`MIN_RATIO`] times theirs.
    fn saved(&self, fault: Duration) -> Duration {
        if self.groups_held == 0 || self.groups_marked == 0 {
            return Duration::ZERO;
        }
        let unmarked =
            self.faults_held as f64 * self.groups_marked as f64 / self.groups_held as f64;
        let took = self.faults_marked as f64;
        if unmarked < MIN_RATIO * took {
            return Duration::ZERO;
        }
        fault.mul_f64(unmarked - took)
    }
}

/// The trial under way.
#[derive(Default)]
struct Window {
    /// Its number was taken (`State::windows`).
    begun: bool,
    /// Samples that marked, and of those, the first this many only mark:
    /// after a stretch of marking every group, the groups held out now
    /// keep the REF of their last marks for up to a turn of the hand, and
    /// their faults would say less than they do.
    marking: u32,
    skip: u32,
    /// Samples whose faults and groups are counted.
    samples: u32,
    cost: Duration,
    /// The counters when counting began.
    start: Split,
}

#[derive(Default)]
struct State {
    last: Option<Instant>,
    interval: Duration,
    /// The hand's `visited` at the last sample.
    visited: u64,
    /// Per region id, what the sampler keeps of it.
    regions: HashMap<u32, Marks>,
    splits: usize,
    /// Most groups to mark (each makes up to two mappings); 0: not read yet.
    max_splits: usize,
    buf: Vec<u8>,
    /// smaps or clear_refs could not be used: sampling is off for good.
    broken: bool,
    phase: Phase,
    /// The bits were not cleared since the last sample (the first sample,
    /// or the first after a pause): the next one reads none of them, and
    /// only clears them.
    stale: bool,
    window: Window,
    /// Trials begun: which groups a trial holds out.
    windows: u64,
    /// Pauses in a row (no trial paid between them).
    pauses: u32,
    /// The program excluded region memory from core dumps itself
    /// (`Uzswap::program_dont_dump`): splits are never merged back.
    keep_splits: bool,
}

/// Figures for `Stats`.
#[derive(Default)]
pub(super) struct YoungCounters {
    pub samples: AtomicU64,
    pub sample_ns: AtomicU64,
    pub marked: AtomicU64,
    pub splits: AtomicU64,
    pub windows: AtomicU64,
    pub windows_unpaid: AtomicU64,
    pub saved_ns: AtomicU64,
    pub evicted_held: AtomicU64,
    pub faults_held: AtomicU64,
    pub evicted_idle: AtomicU64,
    pub faults_idle: AtomicU64,
    /// The window whose held-out groups faults are counted against (0:
    /// none: `auto` is paused, or off), and the counts (`Split`).
    pub window: AtomicU64,
    pub faults_held_groups: AtomicU64,
    pub faults_marked_groups: AtomicU64,
    pub groups_held: AtomicU64,
    pub groups_marked: AtomicU64,
}

impl YoungCounters {
    fn split(&self) -> Split {
        Split {
            faults_held: self.faults_held_groups.load(Relaxed),
            faults_marked: self.faults_marked_groups.load(Relaxed),
            groups_held: self.groups_held.load(Relaxed),
            groups_marked: self.groups_marked.load(Relaxed),
        }
    }
}

/// A chunk with word `w` was evicted (STORED now).
#[inline]
pub(super) fn evicted(sh: &Shared, w: u32) {
    if w & HELD != 0 {
        sh.young_ctr.evicted_held.fetch_add(1, Relaxed);
    } else if w & IDLE != 0 {
        sh.young_ctr.evicted_idle.fetch_add(1, Relaxed);
    }
}

/// A fault brought in (part of) chunk `ci` of `r`. Counted against its
/// group's side of the window's trial, and against its tag only within a
/// turn of the hand of its eviction (its refault
/// distance, `fault::workingset_refault`): a chunk that comes back later
/// would have been evicted again by then, whatever was kept in its place
/// (a streamed chunk comes back when the stream does).
#[inline]
pub(super) fn faulted(sh: &Shared, r: &RegionInner, ci: usize) {
    let c = &sh.young_ctr;
    let window = c.window.load(Relaxed);
    if window != 0 {
        if held_out(r.id, ci / group_chunks(sh.chunk), window) {
            c.faults_held_groups.fetch_add(1, Relaxed);
        } else {
            c.faults_marked_groups.fetch_add(1, Relaxed);
        }
    }
    let w = r.state[ci].load(Relaxed);
    if w & TAGS == 0 {
        return;
    }
    let now = sh.evict_clock.load(Relaxed) as u32;
    let distance = now.wrapping_sub(r.shadow[ci].load(Relaxed)) as u64;
    if distance > sh.resident.load(Relaxed) / sh.chunk as u64 {
        return;
    }
    if w & HELD != 0 {
        sh.young_ctr.faults_held.fetch_add(1, Relaxed);
    } else if w & IDLE != 0 {
        sh.young_ctr.faults_idle.fetch_add(1, Relaxed);
    }
}

fn mapped(st: u32) -> bool {
    matches!(st, RESIDENT | CLEAN | PARTIAL)
}

/// Chunks per group (a power of two, at least one).
fn group_chunks(chunk: usize) -> usize {
    (GROUP_BYTES / chunk).max(1)
}

/// Whether window `window` holds group `gi` of region `id` out of its
/// marks: a different eighth of the groups each window, so that no group
/// goes unmarked for long.
fn held_out(id: u32, gi: usize, window: u64) -> bool {
    let mut x = (gi as u64) ^ (u64::from(id) << 40) ^ window.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x ^ (x >> 29)).is_multiple_of(HOLD_OUT)
}

/// The evictor thread, before a batch: sample if one is due.
pub(super) fn maybe_sample(sh: &Shared) {
    let mode = sh.cfg.sample_young;
    if mode == SampleYoung::Off {
        return;
    }
    let mut g = sh.young.state.lock();
    if g.broken || g.last.is_some_and(|t| t.elapsed() < g.interval) {
        return;
    }
    if let Phase::Off(until) = g.phase {
        if Instant::now() < until {
            return;
        }
        g.phase = Phase::Trial;
        g.stale = true;
    }
    let visited = sh.clock.lock().visited;
    let resident = sh.resident.load(Relaxed) / sh.chunk as u64;
    let stale_by_time = g
        .last
        .is_some_and(|t| t.elapsed() >= g.interval * STALE_INTERVALS);
    if g.last.is_some()
        && !stale_by_time
        && visited.saturating_sub(g.visited) < (resident / PER_TURN).max(16)
    {
        return;
    }
    if g.last.is_none() {
        g.stale = true;
    }
    g.visited = visited;
    let t0 = Instant::now();
    let regions = sh.snapshot_regions();
    split_new(&mut g, &regions, sh.chunk);
    let stale = std::mem::take(&mut g.stale);
    // Only `auto` holds groups out, and only in a trial: `on` samples
    // whatever they save.
    let auto = mode == SampleYoung::Auto;
    let trial = auto && matches!(g.phase, Phase::Trial);
    if trial && !g.window.begun {
        g.windows += 1;
        g.window.begun = true;
    }
    let hold = trial.then_some(g.windows);
    let (marked, groups) = match sample(&mut g, &regions, sh.chunk, stale, hold) {
        Ok(t) => t,
        Err(e) => {
            g.broken = true;
            eprintln!("uzswap: accessed-bit sampling is off: /proc/self/smaps or clear_refs: {e}");
            return;
        }
    };
    let cost = t0.elapsed();
    g.last = Some(Instant::now());
    g.interval = (cost * COST_FACTOR).max(MIN_INTERVAL);
    let c = &sh.young_ctr;
    c.samples.fetch_add(1, Relaxed);
    c.sample_ns.fetch_add(cost.as_nanos() as u64, Relaxed);
    c.marked.fetch_add(marked, Relaxed);
    c.splits.store(g.splits as u64, Relaxed);
    if !auto {
        return;
    }
    if let Phase::Marking(left) = g.phase {
        g.phase = match left.checked_sub(1) {
            Some(0) | None => {
                g.window = Window {
                    skip: PER_TURN as u32,
                    ..Window::default()
                };
                Phase::Trial
            }
            Some(n) => Phase::Marking(n),
        };
        return;
    }
    let window = g.windows;
    let w = &mut g.window;
    w.cost += cost;
    // A sample that only cleared the bits marked nothing: what comes after
    // it says nothing of marks. The trial's faults are counted from its
    // first sample that marked (past `skip`), against its own held-out
    // groups.
    if stale {
        return;
    }
    w.marking += 1;
    if w.marking <= w.skip {
        return;
    }
    if w.samples == 0 {
        c.window.store(window, Relaxed);
        w.start = c.split();
    }
    w.samples += 1;
    c.groups_held.fetch_add(groups[0], Relaxed);
    c.groups_marked.fetch_add(groups[1], Relaxed);
    let split = c.split().since(w.start);
    if w.samples > WINDOW && (split.faults_held >= MIN_HELD_FAULTS || w.samples > MAX_WINDOW) {
        let fault = sh
            .lat_pool
            .mean_ns()
            .map_or(DEFAULT_FAULT, Duration::from_nanos);
        judge(&mut g, c, split, fault);
        if matches!(g.phase, Phase::Off(_)) {
            let t0 = Instant::now();
            merge_all(&mut g, &regions, sh.chunk);
            c.sample_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
            c.splits.store(g.splits as u64, Relaxed);
        }
    }
}

/// End a trial: where its marks saved more fault time than its samples
/// cost, mark every group for a while ([`MARKING`] samples) and try again;
/// else pause, for longer after each trial in a row that did not pay. A
/// fault saved is counted twice its mean time in the handler: the fault,
/// and the eviction that would have made its room (a store, whose
/// compression costs about a decompression and a copy).
fn judge(g: &mut State, c: &YoungCounters, split: Split, fault: Duration) {
    let w = std::mem::take(&mut g.window);
    let saved = split.saved(fault * 2);
    c.window.store(0, Relaxed);
    c.windows.fetch_add(1, Relaxed);
    c.saved_ns.fetch_add(saved.as_nanos() as u64, Relaxed);
    if saved >= w.cost {
        g.pauses = 0;
        g.phase = Phase::Marking(MARKING);
        return;
    }
    c.windows_unpaid.fetch_add(1, Relaxed);
    let off = w.cost * (OFF_FACTOR << (2 * g.pauses.min(MAX_OFF_GROWTHS)));
    g.pauses += 1;
    g.phase = Phase::Off(Instant::now() + off);
}

fn max_splits() -> usize {
    let max_map = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_MAP_COUNT);
    max_map / 16
}

/// `MADV_DONTDUMP` (split) or `MADV_DODUMP` (merge back) over group `o` of
/// `r`, whose `live` lock the caller read-holds.
fn advise_group(r: &RegionInner, o: usize, chunk: usize, advice: i32) {
    let per = group_chunks(chunk);
    let first = o * per;
    let len = (r.state.len() - first).min(per) * chunk;
    // SAFETY: inside the region's mapping, live (read-held by the caller);
    // either advice changes no page and no access, only what a core dump
    // holds.
    unsafe { libc::madvise((r.base + first * chunk) as *mut libc::c_void, len, advice) };
}

impl super::Uzswap {
    /// Run `f`, the program's own `MADV_DONTDUMP` over region memory: from
    /// then on the sampler never merges its splits back (`merge_all`),
    /// whose `MADV_DODUMP` would put that memory back into core dumps (a
    /// key a crypto library keeps out of them). Its splits only ever add
    /// `MADV_DONTDUMP`. Taken under the sampler's lock, so that no merge
    /// runs between the note and the program's call.
    pub fn program_dont_dump<R>(&self, f: impl FnOnce() -> R) -> R {
        let mut g = self.owner.sh.young.state.lock();
        g.keep_splits = true;
        f()
    }
}

/// Undo every split (`MADV_DODUMP`: the kernel merges each group back
/// into its neighbours), for a pause of `auto`. Mappings cost where no
/// sample reads them: a write-protect or a zap over many chunks is made
/// per mapping, each with its own TLB shootdown, and a program whose
/// evictions protect page by page (the threads program of `bench
/// programs`) ran 5-10% slower with its groups split and no sample taken.
/// The next trial splits them again as it finds them mapped.
fn merge_all(g: &mut State, regions: &[Arc<RegionInner>], chunk: usize) {
    if g.keep_splits {
        return;
    }
    for r in regions {
        let Some(m) = g.regions.get_mut(&r.id) else {
            continue;
        };
        let live = r.live.read();
        if !*live {
            continue;
        }
        for (wi, word) in m.split.iter_mut().enumerate() {
            while *word != 0 {
                let o = wi * 64 + word.trailing_zeros() as usize;
                *word &= *word - 1;
                advise_group(r, o, chunk, libc::MADV_DODUMP);
            }
        }
        g.splits -= m.splits;
        m.splits = 0;
    }
}

/// Mark the odd groups around every group with a chunk newly seen mapped,
/// so that each such group is a mapping of its own.
fn split_new(g: &mut State, regions: &[Arc<RegionInner>], chunk: usize) {
    if g.max_splits == 0 {
        g.max_splits = max_splits().max(1);
    }
    let per = group_chunks(chunk);
    // Regions dropped since: their marks went with their mappings.
    let mut gone = 0;
    g.regions.retain(|id, m| {
        let keep = regions.iter().any(|r| r.id == *id);
        if !keep {
            gone += m.splits;
        }
        keep
    });
    g.splits -= gone;
    for r in regions {
        let live = r.live.read();
        if !*live || !r.registered.load(Acquire) {
            continue;
        }
        let n = r.state.len();
        let groups = n.div_ceil(per);
        let m = g.regions.entry(r.id).or_insert_with(|| Marks {
            split: vec![0u64; groups.div_ceil(64)],
            splits: 0,
            seen: vec![0u16; n],
            stamp: vec![0u32; n],
        });
        let mut splits = 0;
        for gi in 0..groups {
            let chunks = gi * per..((gi + 1) * per).min(n);
            if !chunks
                .into_iter()
                .any(|ci| mapped(chunk::state(r.state[ci].load(Relaxed))))
            {
                continue;
            }
            for o in [gi.wrapping_sub(1), gi, gi + 1] {
                if o >= groups || o % 2 == 0 || bit(&m.split, o) {
                    continue;
                }
                if g.splits + splits >= g.max_splits {
                    m.splits += splits;
                    g.splits += splits;
                    return;
                }
                m.split[o / 64] |= 1 << (o % 64);
                advise_group(r, o, chunk, libc::MADV_DONTDUMP);
                splits += 1;
            }
        }
        m.splits += splits;
        g.splits += splits;
    }
}

/// Read smaps; unless the bits are `stale`, set REF on the mapped chunks
/// of groups read since the last sample, but for those of groups held out
/// of window `hold` (`auto`), which are tagged HELD instead (and unread
/// ones IDLE); then clear the bits. Returns the chunks marked that were
/// not REF already, and the groups with chunks mapped held out of the
/// marks and not.
fn sample(
    g: &mut State,
    regions: &[Arc<RegionInner>],
    chunk: usize,
    stale: bool,
    hold: Option<u64>,
) -> std::io::Result<(u64, [u64; 2])> {
    let State {
        buf,
        regions: marks,
        ..
    } = g;
    buf.clear();
    // A stale sample reads no bits (they are the program's since long
    // before): it only notes what is mapped and clears them, at half the
    // cost of one that reads.
    if !stale {
        std::fs::File::open("/proc/self/smaps")?.read_to_end(buf)?;
    }
    let per = group_chunks(chunk);
    let group = per * chunk;
    // Per region, the young bytes of each group that is a mapping of its
    // own (a mapping no longer than a group, inside a region, is one: its
    // neighbours are split from it). A longer mapping spans unsplit
    // groups: its bits say too little of any one chunk.
    let mut found: HashMap<u32, Vec<Option<u64>>> = HashMap::new();
    for (lo, hi, young) in mappings(buf) {
        let Some(r) = regions
            .iter()
            .find(|r| lo >= r.base && hi <= r.base + r.len)
        else {
            continue;
        };
        let gi = (lo - r.base) / group;
        if hi - lo > group || (hi - r.base - 1) / group != gi {
            continue;
        }
        found
            .entry(r.id)
            .or_insert_with(|| vec![None; r.state.len().div_ceil(per)])[gi] = Some(young);
    }
    let mut marked = 0;
    let mut groups = [0u64; 2];
    let mut words = vec![0u32; per];
    for r in regions {
        let Some(m) = marks.get_mut(&r.id) else {
            continue;
        };
        let live = r.live.read();
        if !*live {
            continue;
        }
        let n = r.state.len();
        let mut seen = vec![0u16; n];
        let mut stamp = vec![0u32; n];
        let young = found.get(&r.id).filter(|_| !stale);
        for gi in 0..n.div_ceil(per) {
            let chunks = gi * per..((gi + 1) * per).min(n);
            // What is mapped now is what the next sample may count. Noted
            // before the bits are cleared: a page installed after this
            // scan is not in it, whether its install's bit is cleared
            // below or not; one in it had that bit cleared below (unless
            // it is evicted and faulted back before the next sample, the
            // case the module comment allows).
            let mut installed = 0;
            for (k, ci) in chunks.clone().enumerate() {
                words[k] = r.state[ci].load(Relaxed);
                stamp[ci] = r.shadow[ci].load(Relaxed);
                if mapped(chunk::state(words[k])) {
                    seen[ci] = (chunk::charge(words[k], chunk) / PAGE_SIZE as u64) as u16;
                }
                // Mapped at the last sample and not evicted since: only
                // those pages' bits were cleared (a chunk evicted and
                // faulted back in between holds its installs' bits).
                if stamp[ci] != m.stamp[ci] {
                    m.seen[ci] = 0;
                }
                installed += u64::from(seen[ci].saturating_sub(m.seen[ci]));
            }
            // Pages mapped since the last sample hold their installs'
            // bits: the group was read only if more of it is young.
            let read = young
                .and_then(|v| v[gi])
                .map(|y| y > installed * PAGE_SIZE as u64);
            let out = hold.is_some_and(|w| held_out(r.id, gi, w));
            if chunks.clone().any(|ci| seen[ci] != 0) {
                groups[usize::from(!out)] += 1;
            }
            let held = read == Some(true) && out;
            for (k, ci) in chunks.enumerate() {
                let st = chunk::state(words[k]);
                if seen[ci] == 0 {
                    continue;
                }
                // Chunks whose bits were not read lose their tags: what
                // they take next says nothing of marks.
                let (tag, set) = match read {
                    Some(true) if m.seen[ci] != 0 && held => (HELD, 0),
                    Some(true) if m.seen[ci] != 0 => (0, REF),
                    Some(false) if m.seen[ci] != 0 && hold.is_some() => (IDLE, 0),
                    _ => (0, 0),
                };
                if words[k] & TAGS == tag && (set == 0 || words[k] & REF != 0) {
                    continue;
                }
                if let Ok(old) = chunk::transition(&r.state[ci], st, st, TAGS, tag | set) {
                    if set != 0 && old & REF == 0 {
                        marked += 1;
                    }
                }
            }
        }
        m.seen = seen;
        m.stamp = stamp;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/clear_refs")?
        .write_all(b"1")?;
    Ok((marked, groups))
}

/// The mappings of an smaps text, and the bytes of each that are young
/// (its `Referenced`).
fn mappings(smaps: &[u8]) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
    let mut cur = None;
    smaps.split(|&b| b == b'\n').filter_map(move |line| {
        if let Some(range) = vma_range(line) {
            cur = Some(range);
            return None;
        }
        let rest = line.strip_prefix(b"Referenced:")?;
        cur.take().map(|(lo, hi)| (lo, hi, kb(rest) << 10))
    })
}

/// The range of an smaps mapping line (`lo-hi perms offset ...`).
fn vma_range(line: &[u8]) -> Option<(usize, usize)> {
    let sp = line.iter().position(|&b| b == b' ')?;
    let (lo, hi) = std::str::from_utf8(&line[..sp]).ok()?.split_once('-')?;
    let (lo, hi) = (
        usize::from_str_radix(lo, 16).ok()?,
        usize::from_str_radix(hi, 16).ok()?,
    );
    (lo < hi).then_some((lo, hi))
}

/// The number in `   123 kB`.
fn kb(rest: &[u8]) -> u64 {
    rest.iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .fold(0u64, |n, &b| {
            n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &[u8] = b"55d0c0000000-55d0c0040000 rw-p 00000000 00:00 0 \n\
Size:                256 kB\n\
Referenced:           12 kB\n\
VmFlags: rd wr mr mw me ac dd\n\
55d0c0040000-55d0c0080000 rw-p 00000000 00:00 0 \n\
Size:                256 kB\n\
Referenced:            0 kB\n\
55d0c0080000-55d0c00c0000 rw-p 00000000 00:00 0     /usr/lib/x-86_64.so\n\
Referenced:          256 kB\n\
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0   [vsyscall]\n\
Referenced:            0 kB\n";

    #[test]
    fn smaps_mappings_with_referenced_pages_are_found() {
        let got: Vec<_> = mappings(SMAPS).collect();
        assert_eq!(
            got,
            [
                (0x55d0c0000000, 0x55d0c0040000, 12 << 10),
                (0x55d0c0040000, 0x55d0c0080000, 0),
                (0x55d0c0080000, 0x55d0c00c0000, 256 << 10),
                (0xffffffffff600000, 0xffffffffff601000, 0),
            ]
        );
    }

    #[test]
    fn smaps_fields_parse() {
        assert_eq!(kb(b"     123 kB"), 123);
        assert_eq!(kb(b"0 kB"), 0);
        assert_eq!(vma_range(b"Referenced:    4 kB"), None);
        assert_eq!(vma_range(b"VmFlags: rd wr"), None);
        assert_eq!(vma_range(b"10-20 rw-p 0 00:00 0"), Some((0x10, 0x20)));
    }

    fn split(held: (u64, u64), marked: (u64, u64)) -> Split {
        Split {
            faults_held: held.0,
            groups_held: held.1,
            faults_marked: marked.0,
            groups_marked: marked.1,
        }
    }

    #[test]
    fn marks_save_what_the_held_out_groups_rate_says_the_marked_ones_would_take() {
        let fault = Duration::from_micros(50);
        // Held-out groups faulted 4 times a group, marked ones once: at the
        // held-out rate the 700 marked groups would have taken 2800.
        let hot = split((400, 100), (700, 700));
        assert_eq!(hot.saved(fault), fault * 2100);
        // Alike, or up to twice the rate (evictions the marks moved onto
        // the held-out groups): nothing saved.
        assert_eq!(split((100, 100), (700, 700)).saved(fault), Duration::ZERO);
        assert_eq!(split((190, 100), (700, 700)).saved(fault), Duration::ZERO);
        // Nothing mapped on a side: no measure.
        assert_eq!(split((100, 0), (700, 700)).saved(fault), Duration::ZERO);
        // Marked groups took no fault at all.
        assert_eq!(split((10, 10), (0, 70)).saved(fault), fault * 70);
        let t = split((5, 10), (1, 100));
        assert_eq!(t.since(split((1, 4), (1, 50))), split((4, 6), (0, 50)));
    }

    #[test]
    fn an_unpaid_trial_pauses_auto_for_longer_each_time_and_a_paid_one_marks() {
        let c = YoungCounters::default();
        let fault = Duration::from_micros(50);
        let unpaid = split((10, 10), (70, 70));
        let paid = split((400, 100), (700, 700));
        let mut g = State::default();
        let trial = |g: &mut State| {
            g.phase = Phase::Trial;
            g.window = Window {
                begun: true,
                samples: WINDOW + 1,
                cost: Duration::from_millis(4),
                ..Window::default()
            };
            c.window.store(7, Relaxed);
        };
        let mut offs = vec![];
        for _ in 0..7 {
            trial(&mut g);
            let t = Instant::now();
            judge(&mut g, &c, unpaid, fault);
            let Phase::Off(until) = g.phase else {
                panic!("an unpaid trial pauses auto sampling");
            };
            assert_eq!(
                c.window.load(Relaxed),
                0,
                "no trial counts faults while off"
            );
            offs.push(until - t);
        }
        for (i, w) in offs.windows(2).enumerate() {
            let want = if i < MAX_OFF_GROWTHS as usize {
                4.0
            } else {
                1.0
            };
            let got = w[1].as_secs_f64() / w[0].as_secs_f64();
            assert!((got - want).abs() < 0.05, "{offs:?}");
        }
        assert!(offs[0] >= Duration::from_millis(4) * OFF_FACTOR, "{offs:?}");
        assert_eq!(c.windows_unpaid.load(Relaxed), 7);
        // A trial that pays ends the run of pauses and marks every group.
        trial(&mut g);
        judge(&mut g, &c, paid, fault);
        assert!(matches!(g.phase, Phase::Marking(MARKING)) && g.pauses == 0);
        assert_eq!(c.window.load(Relaxed), 0);
        assert_eq!(c.windows.load(Relaxed), 8);
        assert_eq!(c.windows_unpaid.load(Relaxed), 7);
    }

    #[test]
    fn an_eighth_of_the_groups_is_held_out_a_different_eighth_each_window() {
        let groups = 4096;
        let held = |w| {
            (0..groups)
                .filter(|&gi| held_out(1, gi, w))
                .collect::<Vec<_>>()
        };
        let (a, b) = (held(1), held(2));
        for h in [&a, &b] {
            assert!((h.len() as f64 - groups as f64 / 8.0).abs() < groups as f64 / 32.0);
        }
        let both = a.iter().filter(|gi| b.contains(gi)).count();
        assert!(both < a.len() / 4, "{both} of {} held out twice", a.len());
    }

    #[test]
    fn groups_hold_whole_chunks() {
        assert_eq!(group_chunks(64 << 10), 4);
        assert_eq!(group_chunks(4 << 10), 64);
        assert_eq!(group_chunks(1 << 20), 1);
    }
}
