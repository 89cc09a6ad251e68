//! Regions: zero-fill, round trips through the pool, hints, drop order.

use std::time::{Duration, Instant};
use uzswap::region::{Advice, Config, Region, Uzswap, UzswapStats};
use uzswap::{Pattern, ZswapConfig, PAGE_SIZE};

mod common;
use common::instance;

fn page_mut(base: *mut u8, i: usize) -> &'static mut [u8] {
    // SAFETY: tests only pass indices inside a live region they own.
    unsafe { std::slice::from_raw_parts_mut(base.add(i * PAGE_SIZE), PAGE_SIZE) }
}

#[test]
fn untouched_memory_reads_zero_and_keeps_writes() {
    let Some(uz) = instance(Config {
        defer_register: false,
        ..Config::default()
    }) else {
        return;
    };
    let mut r = uz.region(1 << 20).unwrap();
    assert!(r.as_slice().iter().all(|&b| b == 0));
    let s = r.as_mut_slice();
    for (i, b) in s.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    assert!(r
        .as_slice()
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (i % 251) as u8));
    let st = uz.stats();
    assert_eq!(st.zero_filled_chunks, (1 << 20) / uz.chunk_bytes() as u64);
    assert!(st.faults_zero >= 1 && st.faults_zero <= st.zero_filled_chunks);
    assert_eq!(st.resident_bytes, 1 << 20);
}

#[test]
fn page_out_and_refault_round_trip_every_pattern() {
    for (order, keep_copy) in [(0, false), (4, true), (9, false)] {
        let cfg = Config {
            folio_order: order,
            keep_copy,
            ..Config::default()
        };
        let Some(uz) = instance(cfg) else { return };
        let len = 4 << 20;
        let r = uz.region(len).unwrap();
        let pages = len / PAGE_SIZE;
        for (k, pat) in Pattern::ALL.iter().enumerate() {
            for i in 0..pages {
                pat.fill(i as u64, k as u64, page_mut(r.as_ptr(), i));
            }
            r.advise(0..len, Advice::PageOut).unwrap();
            let st = uz.stats();
            assert_eq!(st.resident_bytes, 0, "{pat:?} order {order}: {st:?}");
            // Read back (protected with keep_copy), page out again, then
            // write.
            for i in 0..pages {
                assert!(
                    pat.verify(i as u64, k as u64, page_mut(r.as_ptr(), i)),
                    "{pat:?} {i}"
                );
            }
            r.advise(0..len, Advice::PageOut).unwrap();
            for i in (0..pages).rev() {
                let p = page_mut(r.as_ptr(), i);
                assert!(pat.verify(i as u64, k as u64, p), "{pat:?} {i} second pass");
                p[8] ^= 0xff;
                p[8] ^= 0xff;
            }
        }
        let st = uz.stats();
        assert!(
            st.pgmajfault > 0 && st.zswap.zswpout > 0 && st.zswap.zswpin > 0,
            "{st:?}"
        );
        assert_eq!(st.fault_errors, 0);
        if keep_copy {
            // Reads installed protected; the writes then faulted.
            assert!(st.faults_wp > 0, "{st:?}");
        }
    }
}

#[test]
fn will_need_prefetches_and_cold_is_taken_first() {
    let Some(uz) = instance(Config::default()) else {
        return;
    };
    let len = 2 << 20;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        Pattern::Text.fill(i as u64, 7, page_mut(r.as_ptr(), i));
    }
    r.advise(0..len, Advice::PageOut).unwrap();
    let before = uz.stats().pgmajfault;
    r.advise(0..len / 2, Advice::WillNeed).unwrap();
    assert_eq!(uz.stats().resident_bytes, len as u64 / 2);
    for i in 0..len / PAGE_SIZE / 2 {
        assert!(Pattern::Text.verify(i as u64, 7, page_mut(r.as_ptr(), i)));
    }
    assert_eq!(
        uz.stats().pgmajfault,
        before,
        "prefetched chunks fault no more"
    );
    r.advise(0..len, Advice::Cold).unwrap();
    assert!(r.advise(0..len + 1, Advice::Cold).is_err());
}

#[test]
fn drop_order_either_way_frees_everything() {
    let Some(uz) = instance(Config {
        budget: 64 << 20,
        defer_register: false,
        ..Config::default()
    }) else {
        return;
    };
    let a = uz.region(4 << 20).unwrap();
    let b = uz.region(4 << 20).unwrap();
    for i in 0..1024 {
        Pattern::Index.fill(i, 1, page_mut(a.as_ptr(), i as usize));
        Pattern::Index.fill(i, 2, page_mut(b.as_ptr(), i as usize));
    }
    a.advise(0..4 << 20, Advice::PageOut).unwrap();
    assert!(uz.zswap().stored_pages() > 0);
    drop(a);
    assert_eq!(uz.stats().resident_bytes, 4 << 20);
    let stored_b = uz.zswap().stored_pages();
    assert_eq!(stored_b, 0, "a's pages were invalidated");
    // The instance goes first; b keeps the handler alive.
    drop(uz);
    b.advise(0..2 << 20, Advice::PageOut).unwrap();
    for i in 0..1024 {
        assert!(Pattern::Index.verify(i, 2, page_mut(b.as_ptr(), i as usize)));
    }
    drop(b);
}

/// What page `i` of the deferred test's first region holds: the first 2 MiB
/// written whole, the next 1 MiB every other page, the rest never touched.
fn deferred_written(i: usize) -> bool {
    let pages_2m = (2 << 20) / PAGE_SIZE;
    i < pages_2m || (i < pages_2m + pages_2m / 2 && i % 2 == 1)
}

#[test]
fn deferred_registration_takes_charge_of_memory_touched_before() {
    let Some(uz) = instance(Config {
        budget: 8 << 20,
        // Room in the pool for all of the first region, so `PageOut` below
        // is never refused by the pool limit (a refused store would leave a
        // chunk resident, as `PageOut` allows).
        pool_share_percent: 50,
        ..Config::default()
    }) else {
        return;
    };
    let len = 4 << 20;
    let r = uz.region(len).unwrap();
    assert!(!r.is_registered(), "fits the budget: plain memory");
    assert_eq!(uz.stats().unregistered_bytes, len as u64);
    // Huge pages where the kernel has them: registration must cope with
    // memory the kernel mapped by the PMD.
    // SAFETY: advice on the region's own mapping.
    unsafe { libc::madvise(r.as_ptr() as *mut _, len, libc::MADV_HUGEPAGE) };
    for i in (0..len / PAGE_SIZE).filter(|&i| deferred_written(i)) {
        Pattern::Mixed.fill(i as u64, 3, page_mut(r.as_ptr(), i));
    }
    let st = uz.stats();
    assert_eq!(
        (st.faults_zero, st.pgmajfault, st.resident_bytes),
        (0, 0, 0),
        "plain memory costs no faults and is not charged"
    );

    // 4 + 6 MiB > 8 MiB: both are registered now.
    let r2 = uz.region(6 << 20).unwrap();
    assert!(r.is_registered() && r2.is_registered());
    let st = uz.stats();
    assert_eq!(st.unregistered_bytes, 0);
    // Whole chunks were charged as found; the half-written ones had their
    // holes zero-filled by the handler (with whatever else of that window
    // was untouched), so every RESIDENT chunk is fully mapped.
    assert!(st.resident_bytes >= 3 << 20, "{st:?}");
    assert_eq!(st.resident_bytes, r.resident_bytes() + r2.resident_bytes());

    // Push the first region out by filling the second, then read it back.
    for i in 0..(6 << 20) / PAGE_SIZE {
        Pattern::Index.fill(i as u64, 4, page_mut(r2.as_ptr(), i));
    }
    r.advise(0..len, Advice::PageOut).unwrap();
    assert_eq!(r.resident_bytes(), 0, "{:?}", uz.stats());
    for i in 0..len / PAGE_SIZE {
        let page = page_mut(r.as_ptr(), i);
        if deferred_written(i) {
            assert!(Pattern::Mixed.verify(i as u64, 3, page), "page {i}");
        } else {
            assert!(page.iter().all(|&b| b == 0), "page {i} never written");
        }
    }
    for i in 0..(6 << 20) / PAGE_SIZE {
        assert!(Pattern::Index.verify(i as u64, 4, page_mut(r2.as_ptr(), i)));
    }
    let st = uz.stats();
    assert_eq!(st.fault_errors, 0);
    assert!(st.peak_bytes <= 8 << 20, "{st:?}");
}

#[test]
fn signal_mode_resolves_in_the_faulting_thread() {
    use uzswap::region::HandlerMode;
    let Some(uz) = instance(Config {
        handler: HandlerMode::Signal,
        ..Config::default()
    }) else {
        return;
    };
    let len = 2 << 20;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        Pattern::Text.fill(i as u64, 5, page_mut(r.as_ptr(), i));
    }
    r.advise(0..len, Advice::PageOut).unwrap();
    // Reads (partial and whole chunks), then writes, from this thread.
    for i in (0..len / PAGE_SIZE).step_by(3) {
        assert!(Pattern::Text.verify(i as u64, 5, page_mut(r.as_ptr(), i)));
    }
    for i in 0..len / PAGE_SIZE {
        let p = page_mut(r.as_ptr(), i);
        assert!(Pattern::Text.verify(i as u64, 5, p), "page {i}");
        p[0] ^= 1;
    }
    let st = uz.stats();
    assert!(
        st.pgmajfault > 0 && st.faults_partial > 0 && st.faults_wp > 0,
        "{st:?}"
    );
    assert_eq!(st.fault_errors, 0);
    // The mode's documented limit: the kernel does not resolve a fault it
    // takes inside a system call on a page that is not mapped.
    r.advise(0..len, Advice::PageOut).unwrap();
    let zero = std::fs::File::open("/dev/zero").unwrap();
    // SAFETY: reading into the region's first page, which we own.
    let n = unsafe {
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(&zero),
            r.as_ptr() as *mut _,
            PAGE_SIZE,
        )
    };
    assert_eq!(n, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EFAULT)
    );
    // Touched from user space first, it works and the data is intact.
    let p = page_mut(r.as_ptr(), 1);
    p[0] ^= 1;
    assert!(Pattern::Text.verify(1, 5, p));
}

#[test]
fn a_pool_with_room_writes_nothing_back() {
    // 40 MiB of index pages (~1.9:1 with lz4) under a 32 MiB budget whose
    // pool may take 90%: every page fits in the pool compressed, clean
    // copies of the resident ones included, below where the shrinker starts
    // (7/8 of a configured share), so none has to go to the device. A store near the
    // budget must count the pool's already-charged reserve (a huge arena's
    // untouched pages) as room, not make room for a new arena on top of it
    // by writing back. With huge arenas (a reserve) and without (the
    // default: a margin with no arena in it).
    for huge in [false, true] {
        let mut cfg = Config {
            budget: 32 << 20,
            pool_share_percent: 90,
            ..Config::default()
        };
        cfg.zswap.huge_arenas = huge;
        let Some(uz) = instance(cfg) else {
            return;
        };
        let len = 40 << 20;
        let r = uz.region(len).unwrap();
        for i in 0..len / PAGE_SIZE {
            Pattern::Index.fill(i as u64, 6, page_mut(r.as_ptr(), i));
        }
        for i in 0..len / PAGE_SIZE {
            assert!(
                Pattern::Index.verify(i as u64, 6, page_mut(r.as_ptr(), i)),
                "huge {huge}: page {i}"
            );
        }
        let st = uz.stats();
        assert!(st.zswap.stored_pages > 0, "huge {huge}: {st:?}");
        assert_eq!(st.zswap.written_back_pages, 0, "huge {huge}: {st:?}");
        assert_eq!(
            (st.fault_errors, st.budget_overruns),
            (0, 0),
            "huge {huge}: {st:?}"
        );
        assert!(st.peak_bytes <= 32 << 20, "huge {huge}: {st:?}");
    }
}

#[test]
fn recompressed_pages_fault_back_byte_exact() {
    // 48 MiB of text pages (~1.6:1 with lz4, ~2.4:1 with zstd) under a
    // 16 MiB budget whose pool share is small: the shrinker meets cold
    // entries at once and recompresses them before it writes any back, and
    // two passes fault pages back from the lz4 form, the zstd form and
    // the device.
    let Some(uz) = instance(Config {
        budget: 16 << 20,
        adapt_pool_share: false,
        zswap: ZswapConfig {
            recompress: Some("zstd:1".into()),
            ..Config::default().zswap
        },
        ..Config::default()
    }) else {
        return;
    };
    let len = 48 << 20;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        Pattern::Text.fill(i as u64, 8, page_mut(r.as_ptr(), i));
    }
    for _ in 0..2 {
        for i in (0..len / PAGE_SIZE).step_by(3) {
            assert!(
                Pattern::Text.verify(i as u64, 8, page_mut(r.as_ptr(), i)),
                "page {i}"
            );
        }
    }
    let st = uz.stats();
    assert!(st.zswap.recompressed_pages > 0, "{st:?}");
    assert!(st.zswap.written_back_pages > 0, "{st:?}");
    assert_eq!(st.zswap.checksum_fail + st.zswap.decompress_fail, 0);
    assert_eq!((st.fault_errors, st.budget_overruns), (0, 0), "{st:?}");
    assert!(st.peak_bytes <= 16 << 20, "{st:?}");
}

#[test]
fn two_writers_with_room_in_the_pool_write_nothing_back() {
    // Two threads fill 64 MiB of mixed pages (a tenth incompressible)
    // under a 48 MiB budget whose pool may take 90%: compressed, every page
    // fits, so nothing should go to the device. Faults resolved in the
    // writing threads take any room the evictor's stores leave at once; a
    // store that opens spans grows the pool by more than the chunk it
    // uncharges, and the next store must still find its margin there
    // rather than write back to make room.
    use uzswap::region::HandlerMode;
    let Some(uz) = instance(Config {
        budget: 48 << 20,
        pool_share_percent: 90,
        handler: HandlerMode::Signal,
        ..Config::default()
    }) else {
        return;
    };
    let len = 64 << 20;
    let r = uz.region(len).unwrap();
    let base = r.as_ptr() as usize;
    let pages = len / PAGE_SIZE;
    std::thread::scope(|s| {
        for t in 0..2 {
            s.spawn(move || {
                for i in (t * pages / 2)..((t + 1) * pages / 2) {
                    Pattern::Mixed.fill(i as u64, 8, page_mut(base as *mut u8, i));
                }
            });
        }
    });
    for i in 0..pages {
        assert!(
            Pattern::Mixed.verify(i as u64, 8, page_mut(r.as_ptr(), i)),
            "page {i}"
        );
    }
    let st = uz.stats();
    assert!(st.zswap.stored_pages > 0, "{st:?}");
    assert_eq!(st.zswap.written_back_pages, 0, "{st:?}");
    assert_eq!((st.fault_errors, st.budget_overruns), (0, 0), "{st:?}");
    assert!(st.peak_bytes <= 48 << 20, "{st:?}");
}

const MIB: usize = 1 << 20;

/// A small xorshift, so the reads are spread the same way each run.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The pool share's cases: an instance under 32 MiB with a swap device
/// (the default), a region of `len` bytes of index pages with `seed`, and
/// the stats once written (the plan's share).
fn share_case(len: usize, seed: u64) -> Option<(Uzswap, Region, UzswapStats)> {
    let uz = instance(Config {
        budget: 32 << 20,
        folio_order: 4,
        ..Config::default()
    })?;
    let r = uz.region(len).unwrap();
    for i in 0..len / PAGE_SIZE {
        Pattern::Index.fill(i as u64, seed, page_mut(r.as_ptr(), i));
    }
    let planned = uz.stats();
    Some((uz, r, planned))
}

fn verify(r: &Region, i: usize, seed: u64) {
    assert!(
        Pattern::Index.verify(i as u64, seed, page_mut(r.as_ptr(), i)),
        "page {i}"
    );
}

fn say_share(what: &str, planned: &UzswapStats, st: &UzswapStats) {
    eprintln!(
        "{what}: share {} -> {} MiB, moves up {} down {}, ghosts {} {}, faults {}, device reads {}",
        planned.zswap.max_pool_bytes >> 20,
        st.zswap.max_pool_bytes >> 20,
        st.share_moves_up,
        st.share_moves_down,
        st.share_ghost_resident,
        st.share_ghost_device,
        st.pgmajfault,
        st.zswap.swap_reads
    );
}

/// GNU sort's case: a cold set written once that the pool would hold
/// whole, and a hot set read at random that the resident part the plan
/// leaves cannot hold. The hot set's faults land within a step of
/// evictions of their chunks' eviction, the pool's tail is never read:
/// the share goes down until the hot set is resident.
#[test]
fn a_hot_set_out_of_resident_reach_takes_the_share_down() {
    let (cold, hot) = (36 * MIB, 18 * MIB);
    let Some((uz, r, _)) = share_case(cold + hot, 7) else {
        return;
    };
    // Everything written once more, the hot set last: what went to the
    // device before the plan raised the share (the configured 20% holds
    // little) is dropped there and stored again, so the pool holds its
    // planned share, the cold set at its oldest end.
    for i in 0..(cold + hot) / PAGE_SIZE {
        Pattern::Index.fill(i as u64, 7, page_mut(r.as_ptr(), i));
    }
    let planned = uz.stats();
    // The plan may still raise the share after this reading (the evictor
    // re-derives it after its batches, and the reads below make them): the
    // highest share seen between rounds is the one the hot set must bring
    // down. Read only `planned`, a run ended 19 -> 20 MiB, the plan having
    // gone to 22 and one move down to 20.
    let mut highest = planned.zswap.max_pool_bytes;
    let (first, n) = (cold / PAGE_SIZE, hot / PAGE_SIZE);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut round = || {
        let s = uz.stats();
        highest = highest.max(s.zswap.max_pool_bytes);
        let before = s.pgmajfault;
        for _ in 0..n {
            verify(&r, first + (next(&mut x) % n as u64) as usize, 7);
        }
        let s = uz.stats();
        highest = highest.max(s.zswap.max_pool_bytes);
        s.pgmajfault - before
    };
    let first_round = round();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut rounds, mut faults) = (1, first_round);
    while Instant::now() < deadline && (faults * 3 >= first_round || rounds < 8) {
        faults = round();
        rounds += 1;
    }
    let st = uz.stats();
    say_share(&format!("{rounds} rounds"), &planned, &st);
    eprintln!("faults in {n} reads: {first_round} in the first round, {faults} in the last");
    if first_round * 4 < n as u64 {
        // The pool had not filled its share yet when the reads began (the
        // plan raised it late): the hot set fit from the start, and there
        // was nothing to steer.
        eprintln!("the hot set fit from the start: the share had nothing to correct");
    } else {
        // Under the plan's share a quarter or more of the hot set's reads
        // faulted; with the share moved down, under a third of that.
        assert!(faults * 3 < first_round, "{st:?}");
        assert!(st.share_moves_down >= 1, "{st:?}");
        assert!(st.zswap.max_pool_bytes < highest, "{st:?}");
    }
    for i in 0..(cold + hot) / PAGE_SIZE {
        verify(&r, i, 7);
    }
    let st = uz.stats();
    assert_eq!((st.fault_errors, st.budget_overruns), (0, 0), "{st:?}");
}

/// usemem's skewed reads: most on a small hot set, the rest spread over
/// everything. The cold reads come from all over the pool (its oldest
/// pages as much as any) and the device, and few of them within a step of
/// evictions of their chunk's: more resident memory would save little, so
/// the share does not go down.
#[test]
fn a_cold_set_read_from_all_over_the_pool_keeps_the_share() {
    let len = 44 * MIB;
    let Some((uz, r, planned)) = share_case(len, 8) else {
        return;
    };
    let pages = len / PAGE_SIZE;
    let hot = 4 * MIB / PAGE_SIZE;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let start = Instant::now();
    let mut reads = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        for _ in 0..4096 {
            let v = next(&mut x);
            let i = if v.is_multiple_of(5) {
                (v >> 8) as usize % pages
            } else {
                (v >> 8) as usize % hot
            };
            verify(&r, i, 8);
        }
        reads += 4096;
    }
    let st = uz.stats();
    say_share(&format!("{reads} reads"), &planned, &st);
    assert_eq!(st.share_moves_down, 0, "{st:?}");
    assert!(st.pgmajfault > 1000, "the cold reads fault: {st:?}");
    assert_eq!((st.fault_errors, st.budget_overruns), (0, 0), "{st:?}");
}
