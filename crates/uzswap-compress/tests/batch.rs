//! The batch engine: configuration, equivalence with serial compression,
//! failure isolation, panics, and concurrent callers.

mod common;
use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uzswap_compress::{
    by_name, BatchEngine, BatchError, CompressCtx, CompressError, Compressor, CompressorId,
    DecompressError, EngineConfig, Spread, MAX_BATCH,
};

/// An engine that spreads its batches whatever else the machine runs (the
/// tests run beside each other): `Spread::WhenIdle` has its own test.
fn engine(name: &str, workers: usize, batch_size: usize) -> BatchEngine {
    BatchEngine::new(
        by_name(name).unwrap(),
        EngineConfig {
            workers,
            batch_size,
            spread: Spread::Always,
        },
    )
    .unwrap()
}

#[test]
fn engine_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<BatchEngine>();
}

#[test]
fn config_is_checked() {
    let c = by_name("lz4").unwrap();
    for bad in [0, MAX_BATCH + 1] {
        let r = BatchEngine::new(
            c.clone(),
            EngineConfig {
                workers: 2,
                batch_size: bad,
                ..EngineConfig::default()
            },
        );
        assert_eq!(r.err(), Some(BatchError::BatchSize(bad)));
    }
    let r = BatchEngine::new(
        c.clone(),
        EngineConfig {
            workers: 1 << 20,
            batch_size: 1,
            ..EngineConfig::default()
        },
    );
    assert_eq!(r.err(), Some(BatchError::Workers(1 << 20)));
    for bs in [1, MAX_BATCH] {
        let e = BatchEngine::new(
            c.clone(),
            EngineConfig {
                workers: 3,
                batch_size: bs,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        assert_eq!((e.batch_size(), e.workers()), (bs, 3));
    }
    let d = BatchEngine::new(c, EngineConfig::default()).unwrap();
    assert!(d.workers() >= 1);
    assert_eq!(d.batch_size(), MAX_BATCH);
}

fn serial(name: &str, pages: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let c = by_name(name).unwrap();
    let mut ctx = c.new_ctx();
    pages
        .iter()
        .map(|p| {
            let mut out = vec![0u8; c.max_compressed_len(p.len())];
            let n = ctx.compress(p, &mut out).unwrap();
            out.truncate(n);
            out
        })
        .collect()
}

#[test]
fn batch_equals_serial() {
    let pages: Vec<Vec<u8>> = (0..100).map(|i| page(PATTERNS[i % 6], i as u64)).collect();
    for name in ["lz4", "zstd", "lzo", "deflate"] {
        let want = serial(name, &pages);
        // The slow compressors only at 2 workers, to keep the test short.
        let workers_set: &[usize] = if matches!(name, "lz4" | "lzo") {
            &[1, 2, 3]
        } else {
            &[2]
        };
        for &workers in workers_set {
            for bs in [1, 7, 32] {
                let e = engine(name, workers, bs);
                for n in 0..100 {
                    let refs: Vec<&[u8]> = pages[..n].iter().map(|p| &p[..]).collect();
                    let got = e.compress_batch(&refs);
                    assert_eq!(got.len(), n);
                    for (i, r) in got.into_iter().enumerate() {
                        assert_eq!(
                            r.as_ref().unwrap(),
                            &want[i],
                            "{name} w{workers} b{bs} n{n} i{i}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn for_each_runs_every_index_once() {
    for workers in [1, 2, 4] {
        for bs in [1, 7, 32] {
            let e = engine("lz4", workers, bs);
            for n in [0, 1, 2, 31, 32, 33, 64, 97] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                e.for_each(n, |i, _ctx| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "w{workers} b{bs} n{n}"
                );
            }
        }
    }
}

#[test]
fn batches_run_in_order_and_batch_one_is_inline() {
    // Batch size 1: every item on the caller's thread, in order.
    let e = engine("lz4", 4, 1);
    let me = std::thread::current().id();
    let order = Mutex::new(Vec::new());
    e.for_each(50, |i, _| {
        assert_eq!(std::thread::current().id(), me);
        order.lock().unwrap().push(i);
    });
    assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
    // Batch size 7: batch k starts only after batch k-1 completed.
    let e = engine("lz4", 4, 7);
    let done = AtomicUsize::new(0);
    e.for_each(70, |i, _| {
        let batch_start = i / 7 * 7;
        assert!(
            done.load(Ordering::SeqCst) >= batch_start,
            "item {i} ran early"
        );
        std::thread::sleep(Duration::from_micros(50));
        done.fetch_add(1, Ordering::SeqCst);
    });
    assert_eq!(done.load(Ordering::SeqCst), 70);
}

#[test]
fn batch_spreads_over_workers() {
    // With slow items, a 32-item batch must be worked on by more than one
    // thread; otherwise the engine would be serial in disguise.
    let e = engine("lz4", 2, 32);
    let threads = Mutex::new(std::collections::HashSet::new());
    e.for_each(32, |_, _| {
        threads.lock().unwrap().insert(std::thread::current().id());
        std::thread::sleep(Duration::from_millis(2));
    });
    assert_eq!(threads.lock().unwrap().len(), 2);
}

#[test]
fn a_batch_runs_inline_while_every_cpu_is_busy() {
    // The default engine hands a batch to its helper only where a CPU is
    // idle. With a spinning thread per CPU, none is: the batch must run on
    // the caller's thread.
    if std::fs::read_to_string("/proc/loadavg").is_err() {
        println!("skipped: no /proc/loadavg, so the engine cannot see idle CPUs");
        return;
    }
    let e = BatchEngine::new(
        by_name("lz4").unwrap(),
        EngineConfig {
            workers: 2,
            batch_size: 32,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..cpus {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        std::thread::sleep(Duration::from_millis(20));
        let me = std::thread::current().id();
        let threads = Mutex::new(std::collections::HashSet::new());
        e.for_each(32, |_, _| {
            threads.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(Duration::from_millis(1));
        });
        stop.store(true, Ordering::Relaxed);
        assert_eq!(*threads.lock().unwrap(), [me].into_iter().collect());
    });
}

#[test]
fn a_batch_runs_inline_while_every_worker_has_a_caller() {
    // One caller is inside `for_each` (its one item blocks), so with two
    // workers a second caller's batch must not be handed to the helper: it
    // would take the CPU the first caller compresses on.
    let e = engine("lz4", 2, 32);
    let entered = std::sync::Barrier::new(2);
    let release = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            e.for_each(1, |_, _| {
                entered.wait();
                release.wait();
            })
        });
        entered.wait();
        let me = std::thread::current().id();
        let threads = Mutex::new(std::collections::HashSet::new());
        e.for_each(32, |_, _| {
            threads.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(Duration::from_millis(1));
        });
        release.wait();
        assert_eq!(*threads.lock().unwrap(), [me].into_iter().collect());
    });
    // Alone again: the batch spreads.
    let threads = Mutex::new(std::collections::HashSet::new());
    e.for_each(32, |_, _| {
        threads.lock().unwrap().insert(std::thread::current().id());
        std::thread::sleep(Duration::from_millis(2));
    });
    assert_eq!(threads.lock().unwrap().len(), 2);
}
/// Fails every page whose first byte is 0xEE; otherwise lz4.
struct Picky(Arc<dyn Compressor>);
struct PickyCtx(Box<dyn CompressCtx>);

impl Compressor for Picky {
    fn name(&self) -> &'static str {
        "picky"
    }
    fn id(&self) -> CompressorId {
        CompressorId::Lz4
    }
    fn new_ctx(&self) -> Box<dyn CompressCtx> {
        Box::new(PickyCtx(self.0.new_ctx()))
    }
    fn max_compressed_len(&self, n: usize) -> usize {
        self.0.max_compressed_len(n)
    }
}

impl CompressCtx for PickyCtx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        if src.first() == Some(&0xEE) {
            return Err(CompressError::Backend("picky".into()));
        }
        self.0.compress(src, dst)
    }
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), DecompressError> {
        self.0.decompress(src, dst)
    }
}

#[test]
fn a_failing_page_does_not_fail_the_others() {
    let picky: Arc<dyn Compressor> = Arc::new(Picky(by_name("lz4").unwrap()));
    let mut pages: Vec<Vec<u8>> = (0..64).map(|i| page("text", i)).collect();
    for bad in [0, 13, 31, 32, 63] {
        pages[bad][0] = 0xEE;
    }
    let want = serial("lz4", &pages);
    for (workers, bs) in [(1, 1), (2, 7), (3, 32)] {
        let e = BatchEngine::new(
            picky.clone(),
            EngineConfig {
                workers,
                batch_size: bs,
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
        for (i, r) in e.compress_batch(&refs).into_iter().enumerate() {
            if [0, 13, 31, 32, 63].contains(&i) {
                assert_eq!(r, Err(CompressError::Backend("picky".into())));
            } else {
                assert_eq!(r.unwrap(), want[i]);
            }
        }
    }
}

/// Runs cover every item once. Inline batches merge into runs of up to
/// MAX_BATCH; a spread batch comes item by item.
#[test]
fn runs_cover_every_item_once() {
    let runs = |e: &BatchEngine, n: usize| {
        let got = Mutex::new(Vec::new());
        e.for_each_run(n, |r, _| got.lock().unwrap().push(r));
        let mut got = got.into_inner().unwrap();
        got.sort_by_key(|r| r.start);
        got
    };
    // One worker: everything inline, batches merged up to MAX_BATCH.
    assert_eq!(
        runs(&engine("lz4", 1, 1), 100),
        [0..32, 32..64, 64..96, 96..100]
    );
    assert_eq!(
        runs(&engine("lz4", 1, 7), 100),
        [0..28, 28..56, 56..84, 84..100]
    );
    assert_eq!(runs(&engine("lz4", 1, 32), 40), [0..32, 32..40]);
    assert!(runs(&engine("lz4", 1, 32), 0).is_empty());
    // Helpers always on: a batch of more than one item is spread, so its
    // items come one by one; a lone last item runs inline.
    let e = engine("lz4", 3, 8);
    let got = runs(&e, 17);
    let mut want: Vec<_> = (0..16).map(|i| i..i + 1).collect();
    want.push(16..17);
    assert_eq!(got, want);
    for n in [1, 31, 33, 200] {
        let covered: Vec<usize> = runs(&e, n).into_iter().flatten().collect();
        assert_eq!(covered, (0..n).collect::<Vec<_>>());
    }
}

#[test]
fn a_panicking_item_is_reraised_after_the_others_ran() {
    let e = engine("lz4", 3, 32);
    let ran = AtomicUsize::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.for_each(32, |i, _| {
            if i == 5 {
                panic!("item five");
            }
            std::thread::sleep(Duration::from_micros(100));
            ran.fetch_add(1, Ordering::SeqCst);
        })
    }));
    assert!(r.is_err());
    assert_eq!(ran.load(Ordering::SeqCst), 31);
    // The engine still works afterwards.
    let hits = AtomicUsize::new(0);
    e.for_each(40, |_, _| {
        hits.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(hits.load(Ordering::Relaxed), 40);
}

#[test]
fn with_ctx_round_trips_and_reuses_contexts() {
    let e = engine("zstd", 2, 8);
    let src = page("text", 9);
    let mut comp = vec![0u8; 2 * PAGE_SIZE];
    let n = e.with_ctx(|c| c.compress(&src, &mut comp)).unwrap();
    let mut out = vec![0u8; PAGE_SIZE];
    for _ in 0..1000 {
        e.with_ctx(|c| c.decompress(&comp[..n], &mut out)).unwrap();
    }
    assert_eq!(out, src);
    // Nested use (a store path that loads inside f) does not deadlock.
    e.for_each(16, |_, ctx| {
        let mut o = vec![0u8; PAGE_SIZE];
        e.with_ctx(|c| c.decompress(&comp[..n], &mut o)).unwrap();
        let mut tmp = vec![0u8; 2 * PAGE_SIZE];
        ctx.compress(&o, &mut tmp).unwrap();
        assert_eq!(o, src);
    });
}

/// Many threads submit to one engine at once, mixing batch compression
/// and single-page loads; every result is checked by decompressing it.
#[test]
fn concurrent_callers_stress() {
    for (name, bs) in [("lz4", 32), ("lzo", 7), ("zstd", 1)] {
        let e = Arc::new(engine(name, 3, bs));
        let deadline = Instant::now() + Duration::from_millis(600);
        let handles: Vec<_> = (0..6)
            .map(|t| {
                let e = e.clone();
                std::thread::spawn(move || {
                    let mut rounds = 0u64;
                    while Instant::now() < deadline || rounds < 3 {
                        let n = ((rounds * 7 + t * 13) % 60 + 1) as usize;
                        let pages: Vec<Vec<u8>> = (0..n)
                            .map(|i| page(PATTERNS[(i + t as usize) % 6], rounds * 1000 + i as u64))
                            .collect();
                        let refs: Vec<&[u8]> = pages.iter().map(|p| &p[..]).collect();
                        let comp = e.compress_batch(&refs);
                        for (i, c) in comp.iter().enumerate() {
                            let c = c.as_ref().unwrap();
                            let mut out = vec![0u8; PAGE_SIZE];
                            e.with_ctx(|ctx| ctx.decompress(c, &mut out)).unwrap();
                            assert_eq!(out, pages[i], "{t}/{rounds}/{i}");
                        }
                        rounds += 1;
                    }
                    rounds
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap() >= 3);
        }
    }
}

#[test]
fn drop_joins_idle_and_busy_engines() {
    for _ in 0..20 {
        let e = engine("lz4", 4, 32);
        e.for_each(64, |_, _| {});
        drop(e);
    }
    // Dropped right after creation, with helpers possibly not started yet.
    for _ in 0..20 {
        drop(engine("deflate", 3, 4));
    }
}

/// The engine of the thread-exit test and what its batches produced.
static EXIT_ENGINE: std::sync::OnceLock<BatchEngine> = std::sync::OnceLock::new();
static EXIT_BATCHES: AtomicUsize = AtomicUsize::new(0);

extern "C" fn compress_at_thread_exit(_: *mut libc::c_void) {
    let e = EXIT_ENGINE.get().unwrap();
    let pages: Vec<Vec<u8>> = (0..MAX_BATCH as u64).map(|i| page("text", i)).collect();
    let refs: Vec<&[u8]> = pages.iter().map(|p| p.as_slice()).collect();
    let out = e.compress_batch(&refs);
    if out.iter().all(|r| r.is_ok()) {
        EXIT_BATCHES.fetch_add(1, Ordering::SeqCst);
    }
}

/// A thread the program made (not Rust's) that has used Rust's
/// thread-locals, then armed `key` and exits.
extern "C" fn foreign_thread(key: *mut libc::c_void) -> *mut libc::c_void {
    // Rust's handle of this thread, made now and torn down at its exit
    // before the key's destructor runs.
    let _ = std::thread::current().id();
    // SAFETY: `key` was made by the test; any non-null value arms it.
    unsafe {
        libc::pthread_setspecific(
            key as libc::pthread_key_t,
            std::ptr::dangling::<libc::c_void>(),
        )
    };
    std::ptr::null_mut()
}

/// A batch submitted as a thread exits, after its Rust thread-locals are
/// gone (from a pthread key's destructor: where a program's allocator, at
/// its thread-exit hook, faults on evicted memory and the fault evicts).
/// The submitter used to wait with `thread::current()`, which panicked
/// there under `uzswap run` (a program thread's exit, seen once in CI) and
/// aborted; this test does not reproduce that panic, it holds the path.
#[test]
fn a_batch_from_a_thread_exit_hook_completes() {
    EXIT_ENGINE.get_or_init(|| engine("lz4", 2, MAX_BATCH));
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out pointer and a plain destructor.
    let made = unsafe { libc::pthread_key_create(&mut key, Some(compress_at_thread_exit)) };
    assert_eq!(made, 0);
    let rounds = 20;
    for _ in 0..rounds {
        let mut t: libc::pthread_t = 0;
        // SAFETY: a plain start routine; the thread is joined below.
        unsafe {
            assert_eq!(
                libc::pthread_create(
                    &mut t,
                    std::ptr::null(),
                    foreign_thread,
                    key as usize as *mut _
                ),
                0
            );
            assert_eq!(libc::pthread_join(t, std::ptr::null_mut()), 0);
        }
    }
    assert_eq!(EXIT_BATCHES.load(Ordering::SeqCst), rounds);
}
