//! Concurrency and budget: random reads and writes against a model with
//! eviction running, a writer racing the evictor on one chunk, and the
//! budget bound.

use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};
use uzswap::region::{Advice, Config, HandlerMode, UzswapStats};
use uzswap::PAGE_SIZE;

mod common;
use common::instance;

const WORDS: usize = PAGE_SIZE / 8;
const LOCK: u64 = 1 << 63;

/// Word `i` of `page` at `version`: one word in eight patterned, the rest
/// zero, so the whole region compresses well under the budget.
fn word(page: usize, version: u64, i: usize) -> u64 {
    if !i.is_multiple_of(8) {
        0
    } else {
        ((page as u64) << 32 | version).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64
    }
}

fn words(base: *mut u8, page: usize) -> &'static mut [u64] {
    // SAFETY: the tests pass pages inside a region that outlives the
    // threads; the model's per-page lock makes one thread the user of a page.
    unsafe { std::slice::from_raw_parts_mut(base.add(page * PAGE_SIZE) as *mut u64, WORDS) }
}

fn run_model(cfg: Config, region_bytes: usize, threads: usize, secs: f64) -> (u64, u64) {
    let (bad, ops, _) = run_model_stats(cfg, region_bytes, threads, secs, 0);
    (bad, ops)
}

/// `run_model`, also returning the instance's figures at the end (default
/// figures when userfaultfd is unavailable and nothing ran). With `late`
/// bytes, a second region of that size is made a third of the way in and
/// filled, while the threads run: with a budget above `region_bytes`, the
/// model's region is plain memory until then and is registered under the
/// threads' feet.
fn run_model_stats(
    cfg: Config,
    region_bytes: usize,
    threads: usize,
    secs: f64,
    late: usize,
) -> (u64, u64, Option<UzswapStats>) {
    let Some(uz) = instance(cfg) else {
        return (0, 0, None);
    };
    let region = uz.region(region_bytes).unwrap();
    let pages = region_bytes / PAGE_SIZE;
    // Per page: the version its content has, with LOCK set while a thread
    // uses it. Version 0 = never written = zeros.
    let model: Vec<AtomicU64> = (0..pages).map(|_| AtomicU64::new(0)).collect();
    let base = region.as_ptr() as usize;
    let mismatches = AtomicU64::new(0);
    let ops = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut other = None;
    std::thread::scope(|s| {
        for t in 0..threads {
            let (model, mismatches, ops) = (&model, &mismatches, &ops);
            s.spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(t as u64 + 1);
                let base = base as *mut u8;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    for _ in 0..64 {
                        let p = rng.gen_range(0..pages);
                        let v = model[p].fetch_or(LOCK, Acquire);
                        if v & LOCK != 0 {
                            continue;
                        }
                        let w = words(base, p);
                        let op = rng.gen_range(0..10);
                        let mut nv = v;
                        if op < 4 {
                            for (i, x) in w.iter().enumerate() {
                                let want = if v == 0 { 0 } else { word(p, v, i) };
                                if *x != want {
                                    mismatches.fetch_add(1, Relaxed);
                                    eprintln!("page {p} v{v} word {i}: {x:#x} != {want:#x}");
                                    break;
                                }
                            }
                        } else if op < 8 {
                            nv = v + 1;
                            for (i, x) in w.iter_mut().enumerate() {
                                *x = word(p, nv, i);
                            }
                        } else {
                            // A write that changes nothing: a write fault on
                            // a clean chunk must still keep the content.
                            let i = rng.gen_range(0..WORDS);
                            // SAFETY: an in-bounds volatile write to our page.
                            unsafe { std::ptr::write_volatile(&mut w[i], w[i]) };
                        }
                        model[p].store(nv, Release);
                        n += 1;
                    }
                }
                ops.fetch_add(n, Relaxed);
            });
        }
        if late > 0 {
            std::thread::sleep(Duration::from_secs_f64(secs / 3.0));
            let mut r = uz.region(late).unwrap();
            assert!(
                region.is_registered(),
                "the second region passed the budget"
            );
            r.as_mut_slice().fill(0x5a);
            other = Some(r);
        }
    });
    // Final sweep: every page as the model says.
    for (p, m) in model.iter().enumerate() {
        let v = m.load(Acquire);
        let w = words(region.as_ptr(), p);
        for (i, x) in w.iter().enumerate() {
            let want = if v == 0 { 0 } else { word(p, v, i) };
            if *x != want {
                mismatches.fetch_add(1, Relaxed);
                break;
            }
        }
    }
    let st = uz.stats();
    eprintln!(
        "{} ops, evicted {} ({} clean), pgmajfault {} ({} partial, {} completed), parked {}, wp {}, peak {} budget {}",
        ops.load(Relaxed),
        st.evicted_chunks,
        st.evicted_clean,
        st.pgmajfault,
        st.faults_partial,
        st.partial_filled,
        st.faults_parked,
        st.faults_wp,
        st.peak_bytes,
        st.budget_bytes
    );
    assert_eq!(st.fault_errors, 0);
    assert!(
        st.evicted_chunks > 0 && st.pgmajfault > 0,
        "eviction ran: {st:?}"
    );
    // Once the evictor and the handler are idle, the charge equals the
    // mapped chunks (an eviction batch may still be in flight right now).
    if let Some(r) = &other {
        assert!(
            r.as_slice().iter().all(|&b| b == 0x5a),
            "second region intact"
        );
    }
    // An eviction uncharges each chunk before it leaves EVICTING, so the
    // two agree only between batches: compare once the evictor has gone
    // three polls without evicting, and assert on that same reading.
    let mapped = || region.resident_bytes() + other.as_ref().map_or(0, |r| r.resident_bytes());
    let t = Instant::now();
    let (mut calm, mut last) = (0, u64::MAX);
    let (charged, chunks) = loop {
        let s = uz.stats();
        let pair = (s.resident_bytes, mapped());
        let evicted = uz.stats().evicted_chunks;
        calm = if evicted == s.evicted_chunks && evicted == last {
            calm + 1
        } else {
            0
        };
        last = evicted;
        if (calm >= 3 && pair.0 == pair.1) || t.elapsed().as_secs() >= 3 {
            break pair;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(charged, chunks, "resident charge matches the chunks");
    assert!(
        st.peak_bytes <= st.budget_bytes + st.evict_batch_bytes,
        "peak {} over budget {} + batch {}",
        st.peak_bytes,
        st.budget_bytes,
        st.evict_batch_bytes
    );
    (
        mismatches.load(Relaxed),
        ops.load(Relaxed),
        Some(uz.stats()),
    )
}

#[test]
fn random_reads_and_writes_match_the_model_under_eviction() {
    for (order, keep_copy) in [(4, true), (0, false), (9, true)] {
        let cfg = Config {
            budget: 8 << 20,
            folio_order: order,
            keep_copy,
            evict_batch_bytes: 1 << 20,
            ..Config::default()
        };
        let (bad, ops, st) = run_model_stats(cfg, 32 << 20, 3, 1.2, 0);
        assert_eq!(bad, 0, "order {order}: {bad} mismatches in {ops} ops");
        if let (Some(st), true) = (st, keep_copy && order > 0) {
            // Random reads take partial chunks through every transition,
            // the CLOCK's trims of their old groups among them.
            assert!(
                st.faults_partial > 0 && st.partial_filled > 0 && st.evicted_trimmed > 0,
                "order {order}: {st:?}"
            );
        }
    }
}

/// A fixed batch of one chunk, with two handler threads that may install a
/// chunk each: the evictor's batch is raised to what they install and a
/// chunk more, so the evictor thread, not the faults at the backstop, does
/// most of the evicting. With the batch as asked, faults here evicted
/// 4.2-4.3 k of 7.6 k batches and waited 0.70-0.74 s at the backstop.
#[test]
fn a_one_chunk_batch_still_leaves_the_evicting_to_the_evictor() {
    let cfg = Config {
        budget: 16 << 20,
        folio_order: 4,
        handler_threads: 2,
        evict_batch_bytes: 64 << 10,
        ..Config::default()
    };
    let (bad, ops, st) = run_model_stats(cfg, 64 << 20, 2, 1.0, 0);
    assert_eq!(bad, 0, "{bad} mismatches in {ops} ops");
    if let Some(st) = st {
        assert_eq!(st.evict_batch_bytes, 192 << 10, "{st:?}");
        let by_faults = st.evict_inline_batches;
        let by_evictor = st.evict_batches - by_faults;
        eprintln!(
            "batches: {by_evictor} by the evictor, {by_faults} by faults; {} us at the backstop",
            st.backstop_us
        );
        assert!(by_evictor > by_faults, "{st:?}");
    }
}

#[test]
fn model_holds_with_spinning_handlers() {
    let cfg = Config {
        budget: 8 << 20,
        handler: HandlerMode::Spin { micros: 50 },
        handler_threads: 2,
        evict_batch_bytes: 1 << 20,
        ..Config::default()
    };
    let (bad, ops) = run_model(cfg, 32 << 20, 2, 1.0);
    assert_eq!(bad, 0, "{bad} mismatches in {ops} ops");
}

/// Several evictions at once (`Config::evictors`): faults at the backstop
/// evict beside the evictor thread, each taking its victims from the one
/// CLOCK hand and storing them on its own thread. No chunk may be evicted
/// by two of them, no write lost, and the headroom kept per eviction holds
/// the budget.
#[test]
fn model_holds_with_several_evictions_at_once() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let cfg = Config {
            budget: 16 << 20,
            folio_order: 4,
            handler,
            handler_threads: 3,
            evictors: 4,
            evict_batch_bytes: 1 << 20,
            ..Config::default()
        };
        // Whether faults outrun the evictor thread and evict for themselves
        // depends on the CPU the tests running beside this one leave it (a
        // CI run once saw none): up to three runs, each checked in full,
        // until one did.
        for attempt in 1..=3 {
            let (bad, ops, st) = run_model_stats(cfg.clone(), 64 << 20, 4, 1.5, 0);
            assert_eq!(bad, 0, "{handler:?}: {bad} mismatches in {ops} ops");
            let Some(st) = st else { break };
            assert_eq!(st.evictors, 4, "{st:?}");
            assert_eq!(
                (st.fault_errors, st.budget_overruns),
                (0, 0),
                "{handler:?}: {st:?}"
            );
            // Faults evicted for themselves, beside the evictor thread.
            if st.evict_inline_batches > 0 {
                break;
            }
            assert!(
                attempt < 3,
                "{handler:?}: no inline eviction in 3 runs: {st:?}"
            );
        }
    }
}

/// A writer increments a counter in every page of one chunk while the
/// chunk is paged out over and over: a write landing between the read-out
/// and the zap would be lost, and the writer would see an old count.
#[test]
fn model_holds_with_faults_resolved_in_the_faulting_thread() {
    for (order, keep_copy) in [(4, true), (0, false), (9, true)] {
        let cfg = Config {
            budget: 8 << 20,
            folio_order: order,
            keep_copy,
            handler: HandlerMode::Signal,
            evict_batch_bytes: 1 << 20,
            ..Config::default()
        };
        let (bad, ops, st) = run_model_stats(cfg, 32 << 20, 3, 1.2, 0);
        assert_eq!(bad, 0, "order {order}: {bad} mismatches in {ops} ops");
        if let Some(st) = st {
            assert_eq!(st.handler, HandlerMode::Signal);
            if keep_copy && order > 0 {
                assert!(st.faults_partial > 0 && st.faults_wp > 0, "{st:?}");
            }
        }
    }
}

#[test]
fn writer_hammering_a_chunk_being_evicted_loses_nothing() {
    let Some(uz) = instance(Config {
        folio_order: 4,
        ..Config::default()
    }) else {
        return;
    };
    let region = uz.region(1 << 20).unwrap();
    let chunk = uz.chunk_bytes();
    let base = region.as_ptr() as usize;
    let stop = AtomicBool::new(false);
    let writes = std::thread::scope(|s| {
        let w = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Relaxed) {
                for p in 0..chunk / PAGE_SIZE {
                    let ptr = (base + p * PAGE_SIZE) as *mut u64;
                    // SAFETY: inside the region; this thread is its only writer.
                    let v = unsafe { std::ptr::read_volatile(ptr) };
                    assert_eq!(v, n, "page {p}: lost write");
                    // SAFETY: as above.
                    unsafe { std::ptr::write_volatile(ptr, n + 1) };
                }
                n += 1;
            }
            n
        });
        let t0 = Instant::now();
        let mut outs = 0;
        while t0.elapsed() < Duration::from_millis(800) {
            region.advise(0..chunk, Advice::PageOut).unwrap();
            outs += 1;
        }
        stop.store(true, Relaxed);
        eprintln!("{outs} page-outs");
        w.join().unwrap()
    });
    for p in 0..chunk / PAGE_SIZE {
        // SAFETY: inside the region; the writer has finished.
        let v = unsafe { std::ptr::read_volatile((base + p * PAGE_SIZE) as *const u64) };
        assert_eq!(v, writes, "page {p}");
    }
    let st = uz.stats();
    eprintln!(
        "{writes} rounds, evicted {}, parked {}, pgmajfault {}",
        st.evicted_chunks, st.faults_parked, st.pgmajfault
    );
    assert!(st.evicted_chunks > 10, "{st:?}");
    assert_eq!(st.fault_errors, 0);
}

/// Writers increment counters in a few scattered pages of one chunk (a
/// random write installs just its page, writable: a DIRTY partial chunk)
/// while the chunk is paged out over and over, in both handler modes: the
/// evictor must write-protect the written pages before it stores them, or
/// a write landing between the store and the zap is lost. Each page has
/// one writer; a lost write shows as an old count.
#[test]
fn writers_of_scattered_pages_racing_eviction_lose_nothing() {
    for handler in [HandlerMode::Block, HandlerMode::Signal] {
        let Some(uz) = instance(Config {
            folio_order: 4,
            handler,
            ..Config::default()
        }) else {
            return;
        };
        let region = uz.region(1 << 20).unwrap();
        let chunk = uz.chunk_bytes();
        let base = region.as_ptr() as usize;
        // Pages far from each other: no write looks like a scan.
        let pages = [[3usize, 11], [6, 14]];
        let stop = AtomicBool::new(false);
        let rounds = std::thread::scope(|s| {
            let writers: Vec<_> = pages
                .iter()
                .map(|mine| {
                    let stop = &stop;
                    s.spawn(move || {
                        let mut n = 0u64;
                        while !stop.load(Relaxed) {
                            for &p in mine {
                                let ptr =
                                    (base + p * PAGE_SIZE + 8 * (n as usize % 64)) as *mut u64;
                                let first = (base + p * PAGE_SIZE) as *mut u64;
                                // SAFETY: inside the region; this thread is
                                // the only writer of its pages.
                                let v = unsafe { std::ptr::read_volatile(first) };
                                assert_eq!(v, n, "{handler:?} page {p}: lost write");
                                // SAFETY: as above.
                                unsafe {
                                    std::ptr::write_volatile(ptr, n);
                                    std::ptr::write_volatile(first, n + 1);
                                }
                            }
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(600) {
                region.advise(0..chunk, Advice::PageOut).unwrap();
            }
            stop.store(true, Relaxed);
            writers
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        });
        for (mine, n) in pages.iter().zip(&rounds) {
            for &p in mine {
                // SAFETY: inside the region; the writers have finished.
                let v = unsafe { std::ptr::read_volatile((base + p * PAGE_SIZE) as *const u64) };
                assert_eq!(v, *n, "{handler:?} page {p}");
            }
        }
        let st = uz.stats();
        eprintln!(
            "{handler:?}: {rounds:?} rounds, evicted {}, partial {}, completed {}, wp {}, parked {}",
            st.evicted_chunks, st.faults_partial, st.partial_filled, st.faults_wp, st.faults_parked
        );
        assert!(st.evicted_chunks > 10, "{st:?}");
        assert!(st.faults_partial > 10, "writes came in as pages: {st:?}");
        assert_eq!(st.fault_errors, 0);
    }
}

/// Usage (resident + pool) never exceeds the budget by more than one
/// eviction batch, writing and then reading 4x the budget.
#[test]
fn budget_is_never_exceeded_by_more_than_one_batch() {
    let budget = 16u64 << 20;
    let cfg = Config {
        budget,
        folio_order: 4,
        evict_batch_bytes: 1 << 20,
        ..Config::default()
    };
    let Some(uz) = instance(cfg) else { return };
    let len = 4 * budget as usize;
    let region = uz.region(len).unwrap();
    let batch = uz.stats().evict_batch_bytes;
    for pass in 0..3u64 {
        for p in 0..len / PAGE_SIZE {
            let w = words(region.as_ptr(), p);
            if pass == 1 {
                assert_eq!(w[0], word(p, 1, 0), "page {p}");
            } else {
                w[0] = word(p, 1, 0);
            }
        }
        let st = uz.stats();
        assert!(
            st.peak_bytes <= budget + batch,
            "pass {pass}: peak {} > budget {budget} + batch {batch}: {st:?}",
            st.peak_bytes
        );
    }
    let st = uz.stats();
    assert!(
        st.evicted_chunks as usize >= 3 * len / uz.chunk_bytes() / 2,
        "{st:?}"
    );
}

/// Issue 5, acceptance 2: the model holds with writeback active and a pool
/// share so small that most stored pages live on the swap device, and
/// usage stays within the budget.
#[test]
fn model_holds_with_most_pages_written_back() {
    for (order, keep_copy) in [(4, true), (4, false), (0, true)] {
        let cfg = Config {
            budget: 8 << 20,
            folio_order: order,
            keep_copy,
            evict_batch_bytes: 1 << 20,
            // The model's pages compress about 8:1: a 2% share (160 KiB)
            // holds a few hundred of them, the rest go to the device. The
            // share stays fixed: adapted to that density, the pool would
            // hold them all.
            pool_share_percent: 2,
            adapt_pool_share: false,
            ..Config::default()
        };
        let (bad, ops, st) = run_model_stats(cfg, 32 << 20, 3, 1.2, 0);
        let Some(st) = st else { return };
        assert_eq!(bad, 0, "order {order}: {bad} mismatches in {ops} ops");
        assert!(
            st.zswap.written_back_pages > 0 && st.zswap.pswpin > 0,
            "writeback and device reads happened: {st:?}"
        );
        assert!(
            st.zswap.device_pages > st.zswap.lru_pages,
            "most compressed pages are on the device: {st:?}"
        );
        assert!(
            st.peak_bytes <= st.budget_bytes,
            "peak {} over budget {}",
            st.peak_bytes,
            st.budget_bytes
        );
    }
}

/// Deferred registration under load: the model's region fits the budget and
/// is plain memory while three threads read and write it; a second region
/// then takes the total past the budget, so the first is registered (its
/// touched pages charged, half-touched chunks zero-filled through the
/// handler) while the threads go on, and eviction follows. Nothing may be
/// lost across that switch.
#[test]
fn model_holds_across_a_late_registration() {
    // Signal mode: the registering thread resolves the faults its own
    // reads of half-touched chunks raise.
    for (order, handler) in [
        (4, HandlerMode::Block),
        (0, HandlerMode::Block),
        (9, HandlerMode::Block),
        (4, HandlerMode::Signal),
    ] {
        let cfg = Config {
            budget: 40 << 20,
            folio_order: order,
            evict_batch_bytes: 1 << 20,
            handler,
            ..Config::default()
        };
        let (bad, ops, _) = run_model_stats(cfg, 32 << 20, 3, 1.5, 16 << 20);
        assert_eq!(bad, 0, "order {order}: {bad} mismatches in {ops} ops");
    }
}
