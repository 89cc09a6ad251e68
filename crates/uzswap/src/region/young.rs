//! Reads of resident memory, from the kernel's accessed bits
//! (`Config::sample_young`, off by default).
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
//! probation on its install alone. (A chunk evicted and faulted back
//! between two samples still counts; a whole chunk's fault gave it REF
//! anyway.)
//!
//! Pacing. A mark is worth most just before the hand reaches its chunk, so
//! samples come [`PER_TURN`] times per turn of the hand over the resident
//! chunks (counted by the hand's visits, `evict::Clock::visited`). A sample
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
//! Only the evictor thread samples (a sample takes milliseconds; a fault at
//! the backstop must not wait for one).
//!
//! Locking: `Young`'s mutex is held by the evictor thread while it samples
//! and splits; under it, the clock lock (briefly, to read `visited`) and
//! region `live` read locks, one at a time. Marks are set by compare-and-
//! swap on the chunk word, only in mapped states and keeping the state: a
//! hint that never changes what a chunk is.

use super::chunk::{self, *};
use super::{RegionInner, Shared};
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
/// `vm.max_map_count`'s default, where it cannot be read.
const DEFAULT_MAX_MAP_COUNT: usize = 65530;

#[derive(Default)]
pub(super) struct Young {
    state: parking_lot::Mutex<State>,
}

/// One region's splits and mapped chunks.
struct Marks {
    /// The odd groups marked `MADV_DONTDUMP` (a bit each), and how many.
    split: Vec<u64>,
    splits: usize,
    /// The chunks mapped when the last sample cleared the bits (a bit each):
    /// the only ones whose bits can tell a read.
    seen: Vec<u64>,
}

fn bit(v: &[u64], i: usize) -> bool {
    v[i / 64] & (1 << (i % 64)) != 0
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
}

/// Figures for `Stats`.
#[derive(Default)]
pub(super) struct YoungCounters {
    pub samples: AtomicU64,
    pub sample_ns: AtomicU64,
    pub marked: AtomicU64,
    pub splits: AtomicU64,
}

fn mapped(st: u32) -> bool {
    matches!(st, RESIDENT | CLEAN | PARTIAL)
}

/// Chunks per group (a power of two, at least one).
fn group_chunks(chunk: usize) -> usize {
    (GROUP_BYTES / chunk).max(1)
}

/// The evictor thread, before a batch: sample if one is due.
pub(super) fn maybe_sample(sh: &Shared) {
    if !sh.cfg.sample_young {
        return;
    }
    let mut g = sh.young.state.lock();
    if g.broken || g.last.is_some_and(|t| t.elapsed() < g.interval) {
        return;
    }
    let visited = sh.clock.lock().visited;
    let resident = sh.resident.load(Relaxed) / sh.chunk as u64;
    if g.last.is_some() && visited.saturating_sub(g.visited) < (resident / PER_TURN).max(16) {
        return;
    }
    g.visited = visited;
    let t0 = Instant::now();
    let regions = sh.snapshot_regions();
    split_new(&mut g, &regions, sh.chunk);
    let marked = match sample(&mut g, &regions, sh.chunk) {
        Ok(m) => m,
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
            seen: vec![0u64; n.div_ceil(64)],
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

/// Read smaps, set REF on the mapped chunks of referenced groups, clear the
/// bits. Returns the chunks marked that were not REF already.
fn sample(g: &mut State, regions: &[Arc<RegionInner>], chunk: usize) -> std::io::Result<u64> {
    g.buf.clear();
    std::fs::File::open("/proc/self/smaps")?.read_to_end(&mut g.buf)?;
    let group = group_chunks(chunk) * chunk;
    let mut marked = 0u64;
    for (lo, hi) in referenced(&g.buf) {
        // A mapping longer than a group spans unsplit groups: its
        // reference says too little of any one chunk.
        if hi - lo > group {
            continue;
        }
        let Some(r) = regions
            .iter()
            .find(|r| lo >= r.base && hi <= r.base + r.len)
        else {
            continue;
        };
        let Some(m) = g.regions.get(&r.id) else {
            continue;
        };
        let live = r.live.read();
        if !*live {
            continue;
        }
        for ci in (lo - r.base) / chunk..(hi - r.base).div_ceil(chunk) {
            if !bit(&m.seen, ci) {
                continue;
            }
            let w = &r.state[ci];
            let st = chunk::state(w.load(Relaxed));
            if mapped(st) && chunk::transition(w, st, st, 0, REF).is_ok_and(|old| old & REF == 0) {
                marked += 1;
            }
        }
    }
    // What is mapped now is what the next sample may count. Noted before
    // the bits are cleared: a chunk installed after this scan is not in
    // it, whether its install's bit is cleared below or not; one in it had
    // that bit cleared below (unless it is evicted and faulted back before
    // the next sample, the case the module comment allows).
    for r in regions {
        let Some(m) = g.regions.get_mut(&r.id) else {
            continue;
        };
        m.seen.fill(0);
        for (ci, w) in r.state.iter().enumerate() {
            if mapped(chunk::state(w.load(Relaxed))) {
                m.seen[ci / 64] |= 1 << (ci % 64);
            }
        }
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/self/clear_refs")?
        .write_all(b"1")?;
    Ok(marked)
}

/// The mappings of an smaps text whose `Referenced` is not zero.
fn referenced(smaps: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut cur = None;
    smaps.split(|&b| b == b'\n').filter_map(move |line| {
        if let Some(range) = vma_range(line) {
            cur = Some(range);
            return None;
        }
        let rest = line.strip_prefix(b"Referenced:")?;
        cur.take().filter(|_| kb(rest) > 0)
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
        let got: Vec<_> = referenced(SMAPS).collect();
        assert_eq!(
            got,
            [
                (0x55d0c0000000, 0x55d0c0040000),
                (0x55d0c0080000, 0x55d0c00c0000)
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

    #[test]
    fn groups_hold_whole_chunks() {
        assert_eq!(group_chunks(64 << 10), 4);
        assert_eq!(group_chunks(4 << 10), 64);
        assert_eq!(group_chunks(1 << 20), 1);
    }
}
