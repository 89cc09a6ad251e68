//! `uzswap bench alloc`: the cluster slot allocator (seed 001) against the
//! global-lock baseline, in the same run.
//!
//! Throughput: each thread keeps a FIFO ring of live order-0 slots and does
//! alloc + free pairs (one "operation" = one alloc and one free) for a fixed
//! time; the cases alternate between the two allocators over several rounds
//! (the order flips every round) and the median round is reported, so a
//! noisy neighbour hits both alike.
//!
//! A thread count only means something if the threads ran at once: on a
//! shared machine two threads may take turns on one free core, and then a
//! global lock is never contended. Each thread reads its own CPU time
//! (`getrusage(RUSAGE_THREAD)`) around the timed window; the sum over the
//! wall time is the case's *parallelism* (2.0 = two threads on two cores the
//! whole time). It is reported per case, and a warning is printed when it
//! falls well below the thread count; the ratio is then also given over the
//! rounds where both allocators ran in parallel. Voluntary context switches
//! per second show a lock that parks its waiters.
//!
//! Fragmentation: one thread holds the device at a fill level (default 85%)
//! with random allocations (70% order 0, 30% order 4) and frees of random
//! live objects. An order-4 request that fails falls back to 16 order-0
//! slots (as a 64K folio is split) and counts as a fallback. The fallback
//! rate is measured after a warm-up of the same length.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use uzswap::swap::{ClusterAllocator, GlobalLockAllocator, SlotAllocator, SwapSlot};

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Seconds per throughput case (split over the rounds), at most 3600.
    #[arg(long, default_value_t = 1.5, value_parser = super::parse_secs)]
    pub secs: f64,
    /// Alternating rounds per throughput case; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = super::usize_in(1, 1000))]
    pub rounds: usize,
    /// Thread counts, comma separated (default: 1, 2 and the CPU count),
    /// each 1..=1024.
    #[arg(long, value_delimiter = ',', value_parser = super::parse_threads)]
    pub threads: Vec<usize>,
    /// Live order-0 slots each throughput thread keeps.
    #[arg(long, default_value_t = 64, value_parser = super::usize_in(1, 1 << 16))]
    pub ring: usize,
    /// Device size of the fragmentation run, in 2 MiB clusters.
    #[arg(long, default_value_t = 256, value_parser = super::usize_in(1, 1 << 20))]
    pub frag_clusters: usize,
    /// Fill level held in the fragmentation run.
    #[arg(long, default_value_t = 0.85)]
    pub fill: f64,
    /// Measured operations in the fragmentation run (after an equal warm-up).
    #[arg(long, default_value_t = 1_000_000)]
    pub frag_ops: u64,
    /// Share of order-4 in the fragmentation run's mix.
    #[arg(long, default_value_t = 0.3)]
    pub order4_share: f64,
    /// Whether --order4-share counts pages (the headline figure) or
    /// requests; the other reading is run too and reported beside it.
    #[arg(long, value_enum, default_value_t = ShareBy::Pages)]
    pub share_by: ShareBy,
    /// RNG seed of the fragmentation run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ShareBy {
    /// A request is order 4 with probability --order4-share.
    Requests,
    /// Order-4 runs make up --order4-share of the allocated pages.
    Pages,
}

pub(crate) type Alloc = Arc<dyn SlotAllocator>;

pub(crate) fn make(kind: &str, nclusters: usize) -> Alloc {
    match kind {
        "cluster" => Arc::new(ClusterAllocator::new(nclusters)),
        _ => Arc::new(GlobalLockAllocator::new(nclusters)),
    }
}

/// One thread's CPU time (user + system) and voluntary context switches.
fn thread_usage() -> (f64, u64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass and touches nothing else.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (f64::NAN, 0);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_nvcsw as u64)
}

/// One timed round of one allocator.
pub(crate) struct Round {
    /// alloc + free pairs per second.
    pub(crate) ops_per_sec: f64,
    /// Summed thread CPU time over wall time.
    pub(crate) parallelism: f64,
    /// Voluntary context switches per second, all threads.
    pub(crate) vcsw_per_sec: f64,
}

/// alloc + free pairs per second with `threads` threads.
pub(crate) fn throughput(
    a: &Alloc,
    threads: usize,
    ring: usize,
    dur: Duration,
) -> anyhow::Result<Round> {
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let barrier = Arc::new(Barrier::new(threads + 1));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (a, stop, total, barrier) =
                (a.clone(), stop.clone(), total.clone(), barrier.clone());
            std::thread::spawn(move || -> anyhow::Result<(f64, u64)> {
                let mut live = Vec::with_capacity(ring);
                for _ in 0..ring {
                    live.push(a.alloc(0).context("device too small for the rings")?);
                }
                barrier.wait();
                let (cpu0, csw0) = thread_usage();
                let (mut i, mut ops) = (0, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        let s = a.alloc(0).context("order-0 allocation failed")?;
                        a.free(live[i], 0)?;
                        live[i] = s;
                        i = (i + 1) % ring;
                    }
                    ops += 256;
                }
                let (cpu1, csw1) = thread_usage();
                total.fetch_add(ops, Ordering::Relaxed);
                for s in live {
                    a.free(s, 0)?;
                }
                Ok((cpu1 - cpu0, csw1.saturating_sub(csw0)))
            })
        })
        .collect();
    barrier.wait();
    let t0 = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    let secs = t0.elapsed().as_secs_f64();
    let (mut cpu, mut csw) = (0.0, 0u64);
    for h in hs {
        let (c, w) = h
            .join()
            .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
        cpu += c;
        csw += w;
    }
    if a.used() != 0 {
        bail!("{}: {} slots still used after the run", a.name(), a.used());
    }
    Ok(Round {
        ops_per_sec: total.load(Ordering::Relaxed) as f64 / secs,
        parallelism: cpu / secs,
        vcsw_per_sec: csw as f64 / secs,
    })
}

/// The 1-, 5- and 15-minute load averages, if the system reports them.
pub(crate) fn load_avg() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

enum Obj {
    Small(SwapSlot),
    Large(SwapSlot),
}

pub(crate) struct Frag {
    pub(crate) attempts: u64,
    pub(crate) fallbacks: u64,
    pub(crate) failed: u64,
    pub(crate) final_fill: f64,
    pub(crate) secs: f64,
}

/// One order-0 slot into `live`, or one more failure.
fn alloc_small(a: &dyn SlotAllocator, live: &mut Vec<Obj>, used: &mut u64, failed: &mut u64) {
    match a.alloc(0) {
        Some(s) => {
            live.push(Obj::Small(s));
            *used += 1;
        }
        None => *failed += 1,
    }
}

pub(crate) fn fragmentation(a: &dyn SlotAllocator, args: &Args) -> anyhow::Result<Frag> {
    let mut rng = SmallRng::seed_from_u64(args.seed);
    // Probability that a request is order 4.
    let p4 = match args.share_by {
        ShareBy::Requests => args.order4_share,
        // s = 16p / (16p + 1 - p)  =>  p = s / (16 - 15s)
        ShareBy::Pages => args.order4_share / (16.0 - 15.0 * args.order4_share),
    };
    // The bench keeps its own count: summing the allocator's would cost
    // more than the operations measured.
    let mut used = 0u64;
    let target = (a.capacity() as f64 * args.fill) as u64;
    let mut live: Vec<Obj> = Vec::new();
    let (mut attempts, mut fallbacks, mut failed) = (0, 0, 0u64);
    let t0 = Instant::now();
    let mut step = 0u64;
    // Fill, warm up for frag_ops steps, then measure frag_ops steps.
    let mut measuring = false;
    loop {
        if !measuring && used >= target && step >= args.frag_ops {
            measuring = true;
            step = 0;
            (attempts, fallbacks, failed) = (0, 0, 0);
        }
        if measuring && step >= args.frag_ops {
            break;
        }
        step += 1;
        if used < target {
            if rng.gen_bool(p4) {
                attempts += 1;
                if let Some(s) = a.alloc(4) {
                    live.push(Obj::Large(s));
                    used += 16;
                    continue;
                }
                // The folio is split: its pages live on as order-0 pages.
                fallbacks += 1;
                for _ in 0..16 {
                    alloc_small(a, &mut live, &mut used, &mut failed);
                }
            } else {
                alloc_small(a, &mut live, &mut used, &mut failed);
            }
        } else {
            let i = rng.gen_range(0..live.len());
            match live.swap_remove(i) {
                Obj::Small(s) => {
                    a.free(s, 0)?;
                    used -= 1;
                }
                Obj::Large(s) => {
                    a.free(s, 4)?;
                    used -= 16;
                }
            }
        }
    }
    if used != a.used() {
        bail!(
            "{}: bench counted {used} used slots, allocator {}",
            a.name(),
            a.used()
        );
    }
    let final_fill = used as f64 / a.capacity() as f64;
    for o in live {
        match o {
            Obj::Small(s) => a.free(s, 0)?,
            Obj::Large(s) => a.free(s, 4)?,
        }
    }
    if a.used() != 0 {
        bail!(
            "{}: {} slots still used after the fragmentation run",
            a.name(),
            a.used()
        );
    }
    Ok(Frag {
        attempts,
        fallbacks,
        failed,
        final_fill,
        secs: t0.elapsed().as_secs_f64(),
    })
}

fn share_name(s: ShareBy) -> &'static str {
    match s {
        ShareBy::Requests => "requests",
        ShareBy::Pages => "pages",
    }
}

fn frag_table(
    args: &Args,
    kinds: &[&str],
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    println!();
    println!(
        "fragmentation: {} clusters held at {:.0}% fill, {:.0}% order 4 by {}, {} ops",
        args.frag_clusters,
        args.fill * 100.0,
        args.order4_share * 100.0,
        share_name(args.share_by),
        args.frag_ops
    );
    println!(
        "{:>10} {:>10} {:>10} {:>14} {:>8}",
        "allocator", "order4", "fallback", "fallback rate", "secs"
    );
    let mut frag = serde_json::Map::new();
    for kind in kinds {
        let a = make(kind, args.frag_clusters);
        let f = fragmentation(&*a, args)?;
        let rate = f.fallbacks as f64 / f.attempts.max(1) as f64;
        println!(
            "{kind:>10} {:>10} {:>10} {:>13.2}% {:>8.2}",
            f.attempts,
            f.fallbacks,
            rate * 100.0,
            f.secs
        );
        frag.insert(
            kind.to_string(),
            json!({
                "order4_fallback_rate": rate,
                "order4_attempts": f.attempts,
                "order4_fallbacks": f.fallbacks,
                "failed_allocs": f.failed,
                "final_fill": f.final_fill,
                "secs": f.secs,
            }),
        );
    }
    frag.insert("fill".into(), json!(args.fill));
    frag.insert("clusters".into(), json!(args.frag_clusters));
    frag.insert("ops".into(), json!(args.frag_ops));
    frag.insert("order4_share".into(), json!(args.order4_share));
    frag.insert("share_by".into(), json!(share_name(args.share_by)));
    Ok(frag)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if !(args.fill > 0.0 && args.fill < 1.0) {
        bail!("--fill must be between 0 and 1, got {}", args.fill);
    }
    if !(0.0..=1.0).contains(&args.order4_share) {
        bail!(
            "--order4-share must be between 0 and 1, got {}",
            args.order4_share
        );
    }
    if args.secs <= 0.0 || args.rounds == 0 || args.ring == 0 || args.frag_clusters == 0 {
        bail!("--secs, --rounds, --ring and --frag-clusters must be positive");
    }
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = if args.threads.is_empty() {
        vec![1, 2, nproc]
    } else {
        args.threads.clone()
    };
    threads.sort_unstable();
    threads.dedup();
    if threads.contains(&0) {
        bail!("--threads must be positive");
    }

    let kinds = ["cluster", "baseline"];
    let round_dur = Duration::from_secs_f64(args.secs / args.rounds as f64);
    let mut rows = Vec::new();
    let mut rates = std::collections::BTreeMap::new();
    let mut speedups = Vec::new();
    let mut warnings = Vec::new();
    let load_before = load_avg();
    if let Some(l) = load_before {
        println!(
            "load average {:.2} {:.2} {:.2} on {nproc} CPUs",
            l[0], l[1], l[2]
        );
    }
    println!(
        "alloc+free pairs per second (order 0, ring {} per thread, median of {} rounds)",
        args.ring, args.rounds
    );
    println!(
        "{:>8} {:>14} {:>14} {:>8} {:>9} {:>9} {:>12}",
        "threads", "cluster", "baseline", "ratio", "par(c)", "par(b)", "csw/s(b)"
    );
    for &t in &threads {
        // Room for every ring, well under a tenth full.
        let nclusters = (t * args.ring * 20 / 512).max(64);
        let mut samples: [Vec<Round>; 2] = [Vec::new(), Vec::new()];
        for r in 0..args.rounds {
            // Flip the order every round so neither allocator always runs
            // right after the other (caches, frequency, a neighbour's burst).
            for k in [r % 2, 1 - r % 2] {
                let a = make(kinds[k], nclusters);
                samples[k].push(throughput(&a, t, args.ring, round_dur)?);
            }
        }
        let field =
            |k: usize, f: fn(&Round) -> f64| -> Vec<f64> { samples[k].iter().map(f).collect() };
        let ops = [field(0, |r| r.ops_per_sec), field(1, |r| r.ops_per_sec)];
        let par = [field(0, |r| r.parallelism), field(1, |r| r.parallelism)];
        let csw = [field(0, |r| r.vcsw_per_sec), field(1, |r| r.vcsw_per_sec)];
        let (c, b) = (median(ops[0].clone()), median(ops[1].clone()));
        let (pc, pb) = (median(par[0].clone()), median(par[1].clone()));
        println!(
            "{t:>8} {c:>14.0} {b:>14.0} {:>7.2}x {pc:>9.2} {pb:>9.2} {:>12.0}",
            c / b,
            median(csw[1].clone())
        );
        // Threads that ran less than 3/4 of the time in parallel did not
        // measure what this thread count is meant to measure.
        let want = t.min(nproc) as f64;
        let ran_parallel = |p: f64| p >= 0.75 * want;
        for (k, kind) in kinds.iter().enumerate() {
            let p = median(par[k].clone());
            if !ran_parallel(p) {
                let w = format!(
                    "{kind} at {t} threads: parallelism {p:.2} of {want:.0} \
                     (the threads took turns on the CPUs; the machine is busy)"
                );
                println!("warning: {w}");
                warnings.push(w);
            }
        }
        // Ratio over the rounds where both allocators' threads ran at once.
        let parallel: Vec<f64> = (0..args.rounds)
            .filter(|&r| ran_parallel(par[0][r]) && ran_parallel(par[1][r]))
            .map(|r| ops[0][r] / ops[1][r])
            .collect();
        let parallel_ratio = (!parallel.is_empty()).then(|| median(parallel.clone()));
        if let Some(pr) = parallel_ratio {
            if parallel.len() < args.rounds {
                println!(
                    "{:>8} ratio over the {} of {} rounds run in parallel: {pr:.2}x",
                    "",
                    parallel.len(),
                    args.rounds
                );
            }
        }
        speedups.push(json!({
            "threads": t,
            "cluster_over_baseline": c / b,
            "cluster_over_baseline_parallel_rounds": parallel_ratio,
            "parallel_rounds": parallel.len(),
        }));
        for (k, kind) in kinds.iter().enumerate() {
            let r = median(ops[k].clone());
            rates.insert((kind.to_string(), t), r);
            rows.push(json!({
                "allocator": kind,
                "threads": t,
                "ops_per_sec": r,
                "rounds": ops[k],
                "parallelism": median(par[k].clone()),
                "parallelism_rounds": par[k],
                "vcsw_per_sec": median(csw[k].clone()),
            }));
        }
    }
    let load_after = load_avg();
    let ratio = |t: usize| -> Option<f64> {
        Some(rates.get(&("cluster".into(), t))? / rates.get(&("baseline".into(), t))?)
    };

    let mut frag_runs = serde_json::Map::new();
    let other = match args.share_by {
        ShareBy::Pages => ShareBy::Requests,
        ShareBy::Requests => ShareBy::Pages,
    };
    for share_by in [args.share_by, other] {
        let run_args = Args {
            share_by,
            ..args.clone()
        };
        let frag = frag_table(&run_args, &kinds)?;
        let key = if share_by == args.share_by {
            "fragmentation".to_string()
        } else {
            format!("fragmentation_by_{}", share_name(share_by))
        };
        frag_runs.insert(key, serde_json::Value::Object(frag));
    }

    if args.json {
        let out = json!({
            "throughput": rows,
            "speedup_2t": ratio(2),
            "speedup": speedups,
            "nproc": nproc,
            "secs_per_case": args.secs,
            "rounds_per_case": args.rounds,
            "parallelism_warnings": warnings,
            "load_avg_before": load_before,
            "load_avg_after": load_after,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        });
        let mut out = out;
        for (k, v) in frag_runs {
            out[k] = v;
        }
        println!("{out}");
    }
    Ok(())
}
