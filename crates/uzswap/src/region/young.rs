//! Reads of resident memory, from the kernel's accessed bits
//! (`Config::sample_young`: off by default, on, or auto).
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
//! cost. Hence opt-in.
//!
//! A group counts as read only if more of its bytes are young than were
//! installed in it since the last sample (smaps gives bytes): the install
//! of one chunk must not make its neighbours in the group look read.
//!
//! `SampleYoung::Auto` finds out whether the marks pay, by experiment.
//! Each *window* of samples holds a different eighth of the groups out of
//! its marks: their read chunks are tagged HELD, every unread chunk whose
//! bits were read IDLE (`chunk::TAGS`, which ride through every state).
//! Evictions of tagged chunks and the faults they take within a turn of
//! the hand (their refault distance) are counted per tag; a mark moves an
//! eviction from a read chunk to an unread one, so it saves the difference
//! of the two rates ([`Tagged::saved`]). A window whose marks saved less
//! fault time than its samples took is unpaid; two in a row pause the
//! samples for a while that doubles with each pause (`judge`).
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
/// Samples judged together (two turns of the hand), at least; a window
/// goes on until [`MIN_HELD`] held-out chunks were evicted, up to
/// [`MAX_WINDOW`] samples.
const WINDOW: u32 = 2 * PER_TURN as u32;
const MAX_WINDOW: u32 = 4 * WINDOW;
const MIN_HELD: u64 = 64;
/// One group in this many is held out of each window's marks (`auto`).
const HOLD_OUT: u64 = 8;
/// Two windows in a row that did not pay pause `auto` sampling for this
/// many times the second's cost, doubled for each pause with no window
/// that paid between, up to [`MAX_OFF_DOUBLINGS`] times: a program whose
/// reads the marks cannot tell apart pays a seventeenth of the evictor's
/// time for the first probe, and less for each one after.
const OFF_FACTOR: u32 = 32;
const MAX_OFF_DOUBLINGS: u32 = 5;
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
    /// Sampling (a probe, or after windows that paid).
    #[default]
    On,
    /// Judged not to pay: no samples until then.
    Off(Instant),
}

/// The evictions and faults of tagged chunks (`chunk::HELD`, `IDLE`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Tagged {
    evicted_held: u64,
    faults_held: u64,
    evicted_idle: u64,
    faults_idle: u64,
}

impl Tagged {
    fn since(self, then: Tagged) -> Tagged {
        Tagged {
            evicted_held: self.evicted_held - then.evicted_held,
            faults_held: self.faults_held - then.faults_held,
            evicted_idle: self.evicted_idle - then.evicted_idle,
            faults_idle: self.faults_idle - then.faults_idle,
        }
    }

    /// The fault time `spared` marks saved, measured on the held-out
    /// chunks. A mark keeps a read chunk the hand would have taken and
    /// moves the eviction to an unread one: it saves the faults an evicted
    /// read chunk takes (`faults_held / evicted_held`: a hot chunk of 16
    /// pages read at random takes up to 16 partial faults) less those an
    /// evicted unread one takes. Where reads are uniform the two are equal
    /// and no mark saves anything, however many there are; where the hand
    /// takes no read chunk, nothing is saved either.
    fn saved(&self, spared: u64, fault: Duration) -> Duration {
        if self.evicted_held == 0 {
            return Duration::ZERO;
        }
        let held = self.faults_held as f64 / self.evicted_held as f64;
        let idle = if self.evicted_idle == 0 {
            0.0
        } else {
            self.faults_idle as f64 / self.evicted_idle as f64
        };
        fault.mul_f64(spared as f64 * (held - idle).max(0.0))
    }
}

/// The samples since the last judgement.
#[derive(Default)]
struct Window {
    samples: u32,
    cost: Duration,
    /// Marks that set REF on a chunk without it: each spares the chunk one
    /// visit of the hand (which clears REF before ACTIVE, so a mark on an
    /// ACTIVE chunk buys a visit too).
    spared: u64,
    /// The counters at the window's start.
    start: Tagged,
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
    /// Windows begun: which groups a window holds out.
    windows: u64,
    /// The last window did not pay: the next that does not pauses `auto`.
    doubted: bool,
    /// Pauses in a row (no window paid between them).
    pauses: u32,
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
}

impl YoungCounters {
    fn tagged(&self) -> Tagged {
        Tagged {
            evicted_held: self.evicted_held.load(Relaxed),
            faults_held: self.faults_held.load(Relaxed),
            evicted_idle: self.evicted_idle.load(Relaxed),
            faults_idle: self.faults_idle.load(Relaxed),
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
/// tag only within a turn of the hand of its eviction (its refault
/// distance, `fault::workingset_refault`): a chunk that comes back later
/// would have been evicted again by then, whatever was kept in its place
/// (a streamed chunk comes back when the stream does).
#[inline]
pub(super) fn faulted(sh: &Shared, r: &RegionInner, ci: usize) {
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
        g.phase = Phase::On;
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
    let auto = mode == SampleYoung::Auto;
    // Only `auto` keeps windows: `on` samples whatever they save.
    if auto && g.window.samples == 0 {
        g.windows += 1;
        g.window.start = sh.young_ctr.tagged();
    }
    let hold = auto.then_some(g.windows);
    let marked = match sample(&mut g, &regions, sh.chunk, stale, hold) {
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
    let w = &mut g.window;
    w.samples += 1;
    w.cost += cost;
    w.spared += marked;
    let tagged = c.tagged().since(w.start);
    if w.samples >= WINDOW && (tagged.evicted_held >= MIN_HELD || w.samples >= MAX_WINDOW) {
        let fault = sh
            .lat_pool
            .mean_ns()
            .map_or(DEFAULT_FAULT, Duration::from_nanos);
        judge(&mut g, c, tagged, fault);
    }
}

/// End a window: go on sampling if its marks saved more fault time than
/// its samples cost, else (the second time in a row) pause. A fault saved
/// is counted twice its mean time in the handler: the fault, and the
/// eviction that would have made its room (a store, whose compression
/// costs about a decompression and a copy).
fn judge(g: &mut State, c: &YoungCounters, tagged: Tagged, fault: Duration) {
    let w = std::mem::take(&mut g.window);
    let saved = tagged.saved(w.spared, fault * 2);
    c.windows.fetch_add(1, Relaxed);
    c.saved_ns.fetch_add(saved.as_nanos() as u64, Relaxed);
    if saved >= w.cost {
        (g.pauses, g.doubted) = (0, false);
        return;
    }
    c.windows_unpaid.fetch_add(1, Relaxed);
    // One window is a few turns of the hand: too short to condemn the
    // samples where a program is between phases. Sampling on costs one
    // window; pausing wrongly loses `OFF_FACTOR` of them.
    if std::mem::replace(&mut g.doubted, true) {
        let off = w.cost * (OFF_FACTOR << g.pauses.min(MAX_OFF_DOUBLINGS));
        g.pauses += 1;
        g.doubted = false;
        g.phase = Phase::Off(Instant::now() + off);
    }
}

fn max_splits() -> usize {
    let max_map = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_MAX_MAP_COUNT);
    max_map / 16
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
                let first = o * per;
                let len = (n - first).min(per) * chunk;
                // SAFETY: inside the region's mapping, live (read-held);
                // MADV_DONTDUMP changes no page and no access.
                unsafe {
                    libc::madvise(
                        (r.base + first * chunk) as *mut libc::c_void,
                        len,
                        libc::MADV_DONTDUMP,
                    )
                };
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
/// not REF already.
fn sample(
    g: &mut State,
    regions: &[Arc<RegionInner>],
    chunk: usize,
    stale: bool,
    hold: Option<u64>,
) -> std::io::Result<u64> {
    let State {
        buf,
        regions: marks,
        ..
    } = g;
    buf.clear();
    std::fs::File::open("/proc/self/smaps")?.read_to_end(buf)?;
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
            let held = read == Some(true) && hold.is_some_and(|w| held_out(r.id, gi, w));
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
    Ok(marked)
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

    fn tagged(held: (u64, u64), idle: (u64, u64)) -> Tagged {
        Tagged {
            faults_held: held.0,
            evicted_held: held.1,
            faults_idle: idle.0,
            evicted_idle: idle.1,
        }
    }

    #[test]
    fn marks_save_the_faults_held_out_chunks_take_over_unread_ones() {
        let fault = Duration::from_micros(50);
        // Read chunks evicted took 6 faults each (a hot chunk read at
        // random comes back a page at a time), unread ones 0.5.
        let hot = tagged((120, 20), (50, 100));
        assert_eq!(hot.saved(400, fault), fault.mul_f64(400.0 * 5.5));
        // Uniform reads: read or not, an evicted chunk takes as many.
        assert_eq!(
            tagged((40, 20), (300, 150)).saved(5000, fault),
            Duration::ZERO
        );
        assert_eq!(
            tagged((20, 20), (300, 150)).saved(5000, fault),
            Duration::ZERO
        );
        // The hand took no read chunk: marks kept nothing it would take.
        assert_eq!(tagged((0, 0), (30, 100)).saved(100, fault), Duration::ZERO);
        let t = tagged((5, 10), (1, 100));
        assert_eq!(t.since(tagged((1, 4), (1, 50))), tagged((4, 6), (0, 50)));
    }

    #[test]
    fn auto_pauses_after_two_unpaid_windows_for_longer_each_time() {
        let c = YoungCounters::default();
        let fault = Duration::from_micros(50);
        let unpaid = tagged((10, 10), (10, 10));
        let paid = tagged((120, 20), (50, 100));
        let mut g = State::default();
        let window = |g: &mut State| {
            g.window = Window {
                samples: WINDOW,
                cost: Duration::from_millis(4),
                spared: 100,
                start: Tagged::default(),
            }
        };
        let mut offs = vec![];
        for _ in 0..8 {
            window(&mut g);
            judge(&mut g, &c, unpaid, fault);
            assert!(
                matches!(g.phase, Phase::On),
                "one unpaid window pauses nothing"
            );
            window(&mut g);
            let t = Instant::now();
            judge(&mut g, &c, unpaid, fault);
            let Phase::Off(until) = g.phase else {
                panic!("a second unpaid window pauses auto sampling");
            };
            offs.push(until - t);
            g.phase = Phase::On;
        }
        for (i, w) in offs.windows(2).enumerate() {
            let want = if i < MAX_OFF_DOUBLINGS as usize {
                2.0
            } else {
                1.0
            };
            let got = w[1].as_secs_f64() / w[0].as_secs_f64();
            assert!((got - want).abs() < 0.05, "{offs:?}");
        }
        assert!(offs[0] >= Duration::from_millis(4) * OFF_FACTOR, "{offs:?}");
        assert_eq!(c.windows_unpaid.load(Relaxed), 16);
        // A window that pays ends the doubt and the run of pauses.
        for t in [unpaid, paid, unpaid] {
            window(&mut g);
            judge(&mut g, &c, t, fault);
        }
        assert!(matches!(g.phase, Phase::On) && g.pauses == 0);
        assert_eq!(c.windows.load(Relaxed), 19);
        assert_eq!(c.windows_unpaid.load(Relaxed), 18);
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
