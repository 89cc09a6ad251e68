//! The process's own memory, counted against the budget
//! (`Config::count_own_memory`), as a memory cgroup counts everything its
//! tasks use.
//!
//! The budget governs what uzswap manages: region pages resident and the
//! pool. Everything else the process holds is outside it: uzswap's own
//! heap (the tree, the LRU, the threads' buffers), glibc's arenas around
//! it, and any anonymous memory the program keeps outside regions (thread
//! stacks, mappings the preload library passes through). For a library
//! caller that is right: its other memory is its own business. For a whole
//! program under `uzswap run` it may not be what the user meant: GNU sort
//! under a 33 MiB budget peaked at 46 MiB of resident memory, 11 MiB of it
//! outside the budget. `uzswap run --count-own` turns the option on; it is
//! off by default, as that memory then comes out of the program's data
//! (sort at 33 MiB ran 4x slower).
//!
//! With the option, the evictor measures the process's anonymous resident
//! memory (`/proc/self/statm`: resident less file-backed and shared
//! pages), takes away what the budget already counts (resident region
//! pages, the pool's memory, regions not registered yet), and adds the
//! rest to usage, so every watermark and the backstop see it. It is
//! measured at most every `EVERY` (a few microseconds each time) and held
//! to half the budget: regions keep at least half, whatever the process
//! allocates elsewhere (usage above the budget because of it would make
//! every eviction futile). Once a second it also gives glibc's free arena
//! pages back (`trim_heap`), since they count now; `Config::trim_own_heap`
//! (set by the preload library, where glibc's heap is uzswap's alone) asks
//! for the trim without the counting, every 10 ms.
//!
//! Locking: none; the figure is one relaxed atomic, written by the
//! evictor (and a refresh racing it writes the same kind of value).

use super::Shared;
use crate::PAGE_SIZE;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How often the figure is measured, at most.
const EVERY: Duration = Duration::from_millis(10);
/// How often free memory inside glibc's arenas is given back, at most,
/// where the heap may be the caller's too (`count_own_memory` without
/// `trim_own_heap`): a walk of a large heap's free chunks can take
/// milliseconds.
const TRIM_EVERY: Duration = Duration::from_secs(1);
/// The same where glibc's heap is uzswap's alone (`trim_own_heap`: the
/// preload library), as often as the figure is measured. What the threads
/// free between two trims stays resident until the next one, and a peak of
/// the program's footprint often falls in that window. GNU sort under a
/// 45 MiB budget, four runs each way, anonymous memory outside regions and
/// the pool at its largest: 3.1-4.5 MiB (median 3.0) trimmed every 10 ms
/// against 4.6-6.2 MiB (median 3.2-4.1) once a second. Trimming after every
/// eviction batch cost 0.3% of the run's CPU (`malloc_trim` and
/// `malloc_consolidate`).
const TRIM_EVERY_OWN_HEAP: Duration = Duration::from_millis(10);

pub(super) struct OwnMemory {
    /// Bytes counted in usage (0 without the option).
    bytes: AtomicU64,
    /// When it was last measured, in ns since `epoch`.
    at_ns: AtomicU64,
    /// When glibc's arenas were last trimmed, in ns since `epoch`.
    trimmed_ns: AtomicU64,
    epoch: Instant,
}

impl Default for OwnMemory {
    fn default() -> Self {
        OwnMemory {
            bytes: AtomicU64::new(0),
            at_ns: AtomicU64::new(0),
            trimmed_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl OwnMemory {
    pub(super) fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }
}

/// Measure the process's own memory again if the option is on and the
/// last measurement is older than `EVERY`; trim glibc's arenas if either
/// option is on and the last trim is older than `TRIM_EVERY` (or
/// `TRIM_EVERY_OWN_HEAP`).
pub(super) fn refresh(sh: &Shared) {
    let count = sh.cfg.count_own_memory && sh.cfg.budget != u64::MAX;
    if !count && !sh.cfg.trim_own_heap {
        return;
    }
    let o = &sh.own;
    let now = o.epoch.elapsed().as_nanos() as u64;
    let at = o.at_ns.load(Relaxed);
    if at != 0 && now.saturating_sub(at) < EVERY.as_nanos() as u64 {
        return;
    }
    o.at_ns.store(now.max(1), Relaxed);
    let every = if sh.cfg.trim_own_heap {
        TRIM_EVERY_OWN_HEAP
    } else {
        TRIM_EVERY
    };
    if now.saturating_sub(o.trimmed_ns.load(Relaxed)) >= every.as_nanos() as u64 {
        o.trimmed_ns.store(now, Relaxed);
        trim_heap();
    }
    if !count {
        return;
    }
    let Some(anon) = anon_resident() else {
        return;
    };
    let counted = sh.resident.load(Relaxed) + sh.zswap.pool_total_size() + sh.unregistered_bytes();
    o.bytes
        .store(own_bytes(anon, counted, sh.cfg.budget), Relaxed);
}

/// Give back the free pages inside glibc's arenas. Its allocator returns
/// only the top of an arena by itself; what uzswap's threads free in the
/// middle (batch buffers, entries of pages loaded) stays resident, ~4 MiB
/// of 6.4 in five arenas in a sort run (`malloc_stats`). Under the preload
/// library the program's allocations go to mimalloc, so these arenas are
/// uzswap's own; a library caller with the option pays a walk of its
/// heap's free chunks a second (micro- to milliseconds), the preload
/// library one every 10 ms (`TRIM_EVERY_OWN_HEAP`).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes only a size to keep and is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// What of `anon` (the process's anonymous resident bytes) the budget does
/// not count already (`counted`), at most half of `budget`.
fn own_bytes(anon: u64, counted: u64, budget: u64) -> u64 {
    anon.saturating_sub(counted).min(budget / 2)
}

/// The process's anonymous resident bytes: statm's resident pages less its
/// shared ones (file-backed and shmem).
fn anon_resident() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let mut f = s.split_ascii_whitespace().map(|x| x.parse::<u64>().ok());
    let resident = f.nth(1)??;
    let shared = f.next()??;
    Some(resident.saturating_sub(shared) * PAGE_SIZE as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_memory_is_what_the_budget_does_not_count_at_most_half_of_it() {
        const MIB: u64 = 1 << 20;
        assert_eq!(own_bytes(46 * MIB, 32 * MIB, 33 * MIB), 14 * MIB);
        // Counted more than measured (pool memory not yet touched, a
        // region's charge ahead of its pages): nothing of its own.
        assert_eq!(own_bytes(30 * MIB, 32 * MIB, 33 * MIB), 0);
        // A program with most of its memory outside regions.
        assert_eq!(own_bytes(500 * MIB, 32 * MIB, 64 * MIB), 32 * MIB);
    }

    #[test]
    fn this_process_has_anonymous_memory() {
        // Touched page by page, and kept from the optimiser: an unread
        // allocation may be elided altogether.
        let mut v = std::hint::black_box(vec![0u8; 8 << 20]);
        for i in (0..v.len()).step_by(PAGE_SIZE) {
            v[i] = 1;
        }
        let v = std::hint::black_box(v);
        let a = anon_resident().expect("/proc/self/statm");
        assert!(a >= 8 << 20, "{a}");
        assert_eq!(v[PAGE_SIZE], 1);
    }
}
