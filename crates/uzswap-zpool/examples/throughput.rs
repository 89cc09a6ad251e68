//! Throughput of store / read / free, as ratios against the system allocator
//! (one `Box<[u8]>` per object) doing the same work in the same run, with 1
//! and N threads. Each thread owns its objects; sizes are 600..=2000 bytes.
//!
//! `cargo run -p uzswap-zpool --release --example throughput [-- OBJS_PER_THREAD [THREADS]]`
//! Prints a table, then one JSON object on the last line.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use uzswap_zpool::{Handle, ZsPool};

/// What is being measured: a pool or the baseline allocator.
trait Store: Sync {
    type H: Send + Copy;
    fn store(&self, data: &[u8]) -> Self::H;
    fn read(&self, h: Self::H, out: &mut [u8]) -> usize;
    fn free(&self, h: Self::H);
}

impl Store for ZsPool {
    type H = Handle;
    fn store(&self, data: &[u8]) -> Handle {
        ZsPool::store(self, data).unwrap()
    }
    fn read(&self, h: Handle, out: &mut [u8]) -> usize {
        ZsPool::read(self, h, |b| {
            out[..b.len()].copy_from_slice(b);
            b.len()
        })
    }
    fn free(&self, h: Handle) {
        ZsPool::free(self, h)
    }
}

/// Baseline: the global allocator, a raw pointer per object.
struct Malloc;

#[derive(Clone, Copy)]
struct Raw(*mut [u8]);
// SAFETY: a Raw is an owned allocation moved between phases of one thread's
// work; it is never shared.
unsafe impl Send for Raw {}

impl Store for Malloc {
    type H = Raw;
    fn store(&self, data: &[u8]) -> Raw {
        Raw(Box::into_raw(Box::<[u8]>::from(data)))
    }
    fn read(&self, h: Raw, out: &mut [u8]) -> usize {
        // SAFETY: `h` came from `store` and is not freed until `free`.
        let b = unsafe { &*h.0 };
        out[..b.len()].copy_from_slice(b);
        b.len()
    }
    fn free(&self, h: Raw) {
        // SAFETY: `h` came from `Box::into_raw` in `store`, freed once.
        drop(unsafe { Box::from_raw(h.0) });
    }
}

#[derive(Default, Clone, Copy)]
struct Times {
    store: Duration,
    read: Duration,
    free: Duration,
}

/// Each thread stores `n` objects, reads each 4 times in random order, then
/// frees them all; the slowest thread's time per phase counts.
fn run<S: Store>(s: &S, threads: usize, n: usize) -> Times {
    let barrier = Barrier::new(threads);
    let per: Vec<Times> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t as u64);
                    let data: Vec<u8> = (0..4096).map(|i| (i * 7 + t) as u8).collect();
                    let sizes: Vec<usize> = (0..n).map(|_| rng.gen_range(600..=2000)).collect();
                    let order: Vec<usize> = (0..4 * n).map(|_| rng.gen_range(0..n)).collect();
                    let mut out = vec![0u8; 4096];
                    let mut hs = Vec::with_capacity(n);
                    let mut tm = Times::default();
                    barrier.wait();
                    let t0 = Instant::now();
                    for &len in &sizes {
                        hs.push(s.store(&data[..len]));
                    }
                    tm.store = t0.elapsed();
                    barrier.wait();
                    let t0 = Instant::now();
                    let mut sum = 0;
                    for &i in &order {
                        sum += s.read(hs[i], black_box(&mut out));
                        black_box(&out);
                    }
                    black_box(sum);
                    tm.read = t0.elapsed();
                    barrier.wait();
                    let t0 = Instant::now();
                    for h in hs {
                        s.free(h);
                    }
                    tm.free = t0.elapsed();
                    tm
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    per.iter().fold(Times::default(), |a, t| Times {
        store: a.store.max(t.store),
        read: a.read.max(t.read),
        free: a.free.max(t.free),
    })
}

fn mops(ops: usize, d: Duration) -> f64 {
    ops as f64 / d.as_secs_f64() / 1e6
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let max_threads: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |p| p.get()));
    println!(
        "{:>7} {:>6} {:>10} {:>10} {:>10}  (Mops/s; ratio = pool / malloc)",
        "threads", "what", "store", "read", "free"
    );
    let mut json = Vec::new();
    let mut thread_counts = vec![1];
    if max_threads > 1 {
        thread_counts.push(max_threads);
    }
    for threads in thread_counts {
        // Best of three, alternating, so both see the same machine state.
        let (mut p, mut m) = (Times::default(), Times::default());
        for rep in 0..3 {
            let pool = ZsPool::new();
            let tp = run(&pool, threads, n);
            let tm = run(&Malloc, threads, n);
            if rep == 0 {
                (p, m) = (tp, tm);
            }
            p.store = p.store.min(tp.store);
            p.read = p.read.min(tp.read);
            p.free = p.free.min(tp.free);
            m.store = m.store.min(tm.store);
            m.read = m.read.min(tm.read);
            m.free = m.free.min(tm.free);
        }
        let total = n * threads;
        let row = |what: &str, t: &Times| {
            println!(
                "{threads:>7} {what:>6} {:>10.2} {:>10.2} {:>10.2}",
                mops(total, t.store),
                mops(4 * total, t.read),
                mops(total, t.free)
            );
        };
        row("pool", &p);
        row("malloc", &m);
        let ratio = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64();
        let (rs, rr, rf) = (
            ratio(p.store, m.store),
            ratio(p.read, m.read),
            ratio(p.free, m.free),
        );
        println!(
            "{threads:>7} {:>6} {rs:>10.2} {rr:>10.2} {rf:>10.2}",
            "ratio"
        );
        json.push(format!(
            "{{\"threads\":{threads},\"pool_mops\":{{\"store\":{:.3},\"read\":{:.3},\"free\":{:.3}}},\"malloc_mops\":{{\"store\":{:.3},\"read\":{:.3},\"free\":{:.3}}},\"ratio\":{{\"store\":{rs:.3},\"read\":{rr:.3},\"free\":{rf:.3}}}}}",
            mops(total, p.store),
            mops(4 * total, p.read),
            mops(total, p.free),
            mops(total, m.store),
            mops(4 * total, m.read),
            mops(total, m.free),
        ));
    }
    println!("{{\"objs_per_thread\":{n},\"runs\":[{}]}}", json.join(","));
}
