//! `uzswap usemem`: the vm-scalability usemem workload. Workers each write
//! their share of the working set (pass 1), then read it back (later passes),
//! against one backend.
//!
//! `--backend uzswap` puts each worker's share in a uzswap region under the
//! budget; `--backend none` uses plain anonymous memory (no budget), and is
//! also what the kernel backends run in a child process inside a memory
//! cgroup, parsing the JSON line this prints last. So the JSON's top level is
//! backend-independent; uzswap's own figures sit under "stats".

use std::time::Instant;
use uzswap::region::{Config, HandlerMode, Uzswap};
use uzswap::{Pattern, PAGE_SIZE};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// uzswap regions under a budget.
    Uzswap,
    /// The kernel's zswap in front of a swap file, in a memory cgroup.
    KernelZswap,
    /// A zram swap device, in a memory cgroup.
    Zram,
    /// A plain swap file, in a memory cgroup.
    Swapfile,
    /// Plain memory, no budget.
    None,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Uzswap => "uzswap",
            Backend::KernelZswap => "kernel-zswap",
            Backend::Zram => "zram",
            Backend::Swapfile => "swapfile",
            Backend::None => "none",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    Seq,
    Skew,
}

/// Parse a size with an optional K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul = match c.to_ascii_lowercase() {
                'k' => 1u64 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return Err(format!("bad size suffix in '{s}' (use K, M, G or T)")),
            };
            (&s[..i], mul)
        }
        _ => (s, 1),
    };
    // Whole numbers exactly (an f64 holds integers only up to 2^53), with
    // the multiplication checked.
    if let Ok(n) = num.trim().parse::<u64>() {
        return n
            .checked_mul(mul)
            .ok_or_else(|| format!("size '{s}' is too large (more than 2^64 - 1 bytes)"));
    }
    let n: f64 = num.trim().parse().map_err(|_| format!("bad size '{s}'"))?;
    // `as u64` saturates: infinity, or 1e30, would become u64::MAX, which
    // means "no budget" downstream.
    if !n.is_finite() || n < 0.0 {
        return Err(format!("bad size '{s}': not a finite, non-negative number"));
    }
    let bytes = n * mul as f64;
    // 2^64 is the first f64 above every u64.
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(format!(
            "size '{s}' is too large (more than 2^64 - 1 bytes)"
        ));
    }
    Ok(bytes as u64)
}

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Worker threads.
    #[arg(short = 'n', long = "workers", default_value_t = 2)]
    pub workers: usize,
    /// Total working set (all workers together), e.g. 512M, 4G.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub size: u64,
    /// Page content pattern: index, zero, same, text, random, mixed.
    #[arg(long, default_value = "mixed")]
    pub pattern: Pattern,
    /// Passes over the working set: the first writes, the rest read.
    #[arg(long, default_value_t = 2)]
    pub passes: u32,
    /// Memory budget (resident + pool), e.g. 256M. Default: half the size.
    #[arg(long, value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Compressor: lz4, zstd[:level], lzo, deflate[:level].
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// uzswap: a denser compressor ("zstd:1") the shrinker recompresses
    /// cold pool entries with before it writes any back. Default: none.
    #[arg(long)]
    pub recompress: Option<String>,
    /// Folio (chunk) size, 4K..2M, a power of two.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    #[arg(long, value_enum, default_value = "uzswap")]
    pub backend: Backend,
    /// Read passes' access order: `seq` reads every page in order; `skew`
    /// reads as many pages, 80% of them from a hot 20% of the working set.
    #[arg(long, value_enum, default_value = "seq")]
    pub access: Access,
    /// Check every page read against the pattern; any mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// uzswap: how the fault handler waits for faults.
    #[arg(long, value_enum, default_value = "block")]
    pub handler: Handler,
    /// uzswap: with `--handler spin`, microseconds to poll before sleeping.
    #[arg(long, default_value_t = 200)]
    pub spin_us: u32,
    /// uzswap: fault handler threads (default: the library's, one per CPU
    /// up to 4).
    #[arg(long)]
    pub handler_threads: Option<usize>,
    /// uzswap: read faults drop the pool copy instead of keeping it (a
    /// re-eviction of an unwritten chunk then compresses it again).
    #[arg(long)]
    pub no_keep_copy: bool,
    /// uzswap: read faults install the whole chunk, never a single page
    /// (see `Config::partial_faults`).
    #[arg(long)]
    pub no_partial: bool,
    /// uzswap: directory of the swap device written back to (default:
    /// $TMPDIR, else /tmp). The file is unlinked and uses O_DIRECT.
    #[arg(long)]
    pub swap_dir: Option<std::path::PathBuf>,
    /// uzswap: swap device size (default: the working set or twice the
    /// budget, whichever is larger: every page may end up on the device).
    #[arg(long, value_parser = parse_size)]
    pub swap_size: Option<u64>,
    /// uzswap: the pool's share of the budget in percent when writing back
    /// (default: the library's).
    #[arg(long)]
    pub pool_share: Option<u32>,

    /// uzswap: keep the pool's share where `--pool-share` puts it, instead
    /// of raising it while the cold pages would all fit in the pool
    #[arg(long)]
    pub fixed_pool_share: bool,
    /// uzswap: no swap device; every compressed page stays in the pool.
    #[arg(long)]
    pub no_writeback: bool,
    /// uzswap: back the pool with transparent huge pages once it holds
    /// 2 MiB (off by default: see docs/BENCHMARKS.md, "Huge arenas off").
    #[arg(long)]
    pub huge_arenas: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Handler {
    Block,
    Spin,
    /// Faults resolved by the faulting thread in a SIGBUS handler.
    Signal,
}

/// The pattern seed: independent of the pass, so read passes can verify.
const SEED: u64 = 0x757a_7377_6170;

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.backend {
        Backend::KernelZswap | Backend::Zram | Backend::Swapfile => {
            crate::kernel::run_usemem(&args)
        }
        Backend::Uzswap | Backend::None => run_local(&args),
    }
}

/// One worker's share of the working set.
struct Share {
    base: *mut u8,
    pages: usize,
    /// Global index of its first page (pattern index).
    first: u64,
}

// SAFETY: a share is memory only its worker touches during a pass.
unsafe impl Send for Share {}
// SAFETY: as above; the main thread only reads the pointer.
unsafe impl Sync for Share {}

impl Share {
    // The share is a raw mapping, not memory `self` owns; exclusivity comes
    // from one worker per share.
    #[allow(clippy::mut_from_ref)]
    fn page(&self, i: usize) -> &mut [u8] {
        assert!(i < self.pages);
        // SAFETY: page `i` lies inside this share's mapping, which outlives
        // the passes; one worker touches a share at a time.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(i * PAGE_SIZE), PAGE_SIZE) }
    }
}

/// Plain anonymous mappings for `--backend none`.
struct Plain {
    maps: Vec<(usize, usize)>,
}

impl Drop for Plain {
    fn drop(&mut self) {
        for &(p, len) in &self.maps {
            // SAFETY: our own mappings, no longer referenced.
            unsafe { libc::munmap(p as *mut _, len) };
        }
    }
}

fn map_plain(len: usize, folio: u64) -> anyhow::Result<usize> {
    // SAFETY: a fresh private anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        anyhow::bail!("mmap {len}: {}", std::io::Error::last_os_error());
    }
    if folio > PAGE_SIZE as u64 {
        // Let the kernel back it with THP / mTHP where those are enabled, so
        // kernel baselines get large folios like uzswap's chunks.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
    }
    Ok(p as usize)
}

fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

fn vm_hwm() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |k| k << 10)
}

#[derive(Default)]
struct PassResult {
    checked: u64,
    mismatches: u64,
    first_bad: Vec<u64>,
    sink: u64,
}

fn run_pass(share: &Share, pass: u32, args: &Args, worker: usize) -> PassResult {
    let mut res = PassResult::default();
    let read = |i: usize, res: &mut PassResult| {
        let idx = share.first + i as u64;
        let page = share.page(i);
        if args.verify {
            res.checked += 1;
            if !args.pattern.verify(idx, SEED, page) {
                res.mismatches += 1;
                if res.first_bad.len() < 4 {
                    res.first_bad.push(idx);
                }
            }
        } else {
            let mut x = 0u64;
            for w in page.chunks_exact(8) {
                x = x.wrapping_add(u64::from_ne_bytes(w.try_into().unwrap()));
            }
            res.sink = res.sink.wrapping_add(x);
        }
    };
    if pass == 0 {
        for i in 0..share.pages {
            args.pattern
                .fill(share.first + i as u64, SEED, share.page(i));
        }
    } else if args.access == Access::Seq {
        for i in 0..share.pages {
            read(i, &mut res);
        }
    } else {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64((worker as u64) << 32 | pass as u64);
        let hot = (share.pages / 5).max(1);
        for _ in 0..share.pages {
            let i = if rng.gen_bool(0.8) {
                rng.gen_range(0..hot)
            } else {
                rng.gen_range(0..share.pages)
            };
            read(i, &mut res);
        }
    }
    res
}

fn run_local(args: &Args) -> anyhow::Result<()> {
    if args.workers == 0 {
        anyhow::bail!("--workers must be at least 1");
    }
    if args.passes == 0 {
        anyhow::bail!("--passes must be at least 1");
    }
    if !args.folio.is_power_of_two() || !(PAGE_SIZE as u64..=2 << 20).contains(&args.folio) {
        anyhow::bail!(
            "--folio must be a power of two from 4K to 2M, got {}",
            args.folio
        );
    }
    let total_pages = (args.size / PAGE_SIZE as u64) as usize;
    if total_pages < args.workers {
        anyhow::bail!("--size {} is less than a page per worker", args.size);
    }
    let budget = args.budget.unwrap_or(args.size / 2);
    let order = args.folio.trailing_zeros() - PAGE_SIZE.trailing_zeros();

    // Set up each worker's share.
    let mut plain = Plain { maps: Vec::new() };
    let mut regions = Vec::new();
    let uz = if args.backend == Backend::Uzswap {
        let mut cfg = Config {
            budget,
            folio_order: order,
            handler: match args.handler {
                Handler::Block => HandlerMode::Block,
                Handler::Spin => HandlerMode::Spin {
                    micros: args.spin_us,
                },
                Handler::Signal => HandlerMode::Signal,
            },
            keep_copy: !args.no_keep_copy,
            partial_faults: !args.no_partial,
            ..Config::default()
        };
        cfg.zswap.compressor = args.compressor.clone();
        cfg.zswap.recompress = args.recompress.clone();
        cfg.zswap.huge_arenas = args.huge_arenas;
        if args.no_writeback {
            cfg.writeback = None;
        } else if let Some(wb) = cfg.writeback.as_mut() {
            wb.dir = args.swap_dir.clone();
            wb.size_bytes = args
                .swap_size
                .unwrap_or_else(|| args.size.max(budget.saturating_mul(2)));
        }
        cfg.adapt_pool_share = !args.fixed_pool_share;
        if let Some(p) = args.pool_share {
            cfg.pool_share_percent = p;
        }
        if let Some(n) = args.handler_threads {
            cfg.handler_threads = n;
        }
        Some(Uzswap::new(cfg)?)
    } else {
        None
    };
    let mut shares = Vec::new();
    let mut first = 0u64;
    for w in 0..args.workers {
        let pages = total_pages / args.workers + usize::from(w < total_pages % args.workers);
        let len = pages * PAGE_SIZE;
        let base = match &uz {
            Some(uz) => {
                let r = uz.region(len)?;
                let p = r.as_ptr();
                if args.folio > PAGE_SIZE as u64 && !r.is_registered() {
                    // The same advice as plain memory gets: a region that
                    // fits the budget stays plain until it must be
                    // registered, and registering takes the advice back.
                    // SAFETY: advice on the region's own mapping.
                    unsafe { libc::madvise(p as *mut _, r.len(), libc::MADV_HUGEPAGE) };
                }
                regions.push(r);
                p
            }
            None => {
                let p = map_plain(len, args.folio)?;
                plain.maps.push((p, len));
                p as *mut u8
            }
        };
        shares.push(Share { base, pages, first });
        first += pages as u64;
    }

    let (u0, s0) = cpu_times();
    let t0 = Instant::now();
    let mut pass_secs = Vec::new();
    let mut checked = 0u64;
    let mut mismatches = 0u64;
    let mut first_bad = Vec::new();
    let mut sink = 0u64;
    for pass in 0..args.passes {
        let tp = Instant::now();
        let results: Vec<PassResult> = std::thread::scope(|s| {
            let hs: Vec<_> = shares
                .iter()
                .enumerate()
                .map(|(w, sh)| s.spawn(move || run_pass(sh, pass, args, w)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("worker panicked"))
                .collect()
        });
        let secs = tp.elapsed().as_secs_f64();
        for r in results {
            checked += r.checked;
            mismatches += r.mismatches;
            sink = sink.wrapping_add(r.sink);
            first_bad.extend(r.first_bad);
        }
        let mbps = (total_pages * PAGE_SIZE) as f64 / secs / 1e6;
        let what = if pass == 0 { "write" } else { "read" };
        if !args.json {
            println!("pass {pass} ({what}): {secs:.3} s, {mbps:.1} MB/s");
        } else {
            eprintln!("pass {pass} ({what}): {secs:.3} s, {mbps:.1} MB/s");
        }
        pass_secs.push(secs);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu_times();
    std::hint::black_box(sink);

    let bytes = (total_pages * PAGE_SIZE) as f64;
    let write_mbps = bytes / pass_secs[0] / 1e6;
    let read_secs: f64 = pass_secs[1..].iter().sum();
    let read_mbps = if args.passes > 1 {
        bytes * (args.passes - 1) as f64 / read_secs / 1e6
    } else {
        0.0
    };
    let throughput = bytes * args.passes as f64 / elapsed / 1e6;
    let (stats, peak) = match &uz {
        Some(uz) => {
            let st = uz.stats();
            // Regions that fit the budget stay unregistered plain memory
            // (uzswap does not track it): count them whole, an upper bound.
            let peak = st.peak_bytes + st.unregistered_bytes;
            (serde_json::to_value(&st)?, peak)
        }
        None => (serde_json::json!({}), vm_hwm()),
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = serde_json::json!({
        "backend": args.backend.name(),
        "pattern": args.pattern.name(),
        "access": args.access,
        "workers": args.workers,
        "size_bytes": total_pages * PAGE_SIZE,
        "budget_bytes": if uz.is_some() { Some(budget) } else { None },
        "passes": args.passes,
        "folio_bytes": args.folio,
        "compressor": args.compressor,
        "recompress": args.recompress,
        "elapsed_s": elapsed,
        "pass_s": pass_secs,
        "throughput_mbps": throughput,
        "write_mbps": write_mbps,
        "read_mbps": read_mbps,
        "user_s": u1 - u0,
        "sys_s": s1 - s0,
        "verify": {"checked_pages": checked, "mismatches": mismatches},
        "peak_bytes": peak,
        "stats": stats,
        "command": command,
    });
    let is_uz = uz.is_some();
    drop(regions);
    drop(uz);
    drop(plain);
    if args.json {
        println!("{report}");
    } else {
        println!(
            "usemem {} {} x{} {} MiB: {:.1} MB/s ({:.1} write, {:.1} read), {:.2} s, user {:.2} s, sys {:.2} s, peak {} MiB",
            args.backend.name(),
            args.pattern.name(),
            args.workers,
            (total_pages * PAGE_SIZE) >> 20,
            throughput,
            write_mbps,
            read_mbps,
            elapsed,
            u1 - u0,
            s1 - s0,
            peak >> 20
        );
        if args.verify {
            println!("verify: {checked} pages checked, {mismatches} mismatches");
        }
        if is_uz {
            println!("stats: {}", serde_json::to_string_pretty(&report["stats"])?);
        }
    }
    if mismatches > 0 {
        anyhow::bail!(
            "verify failed: {mismatches} of {checked} pages differ (first: pages {first_bad:?})"
        );
    }
    Ok(())
}
