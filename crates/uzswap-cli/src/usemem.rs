//! `uzswap usemem`: the vm-scalability usemem workload. Workers each write
//! their share of the working set (pass 1), then read it back (later passes),
//! against one backend.
//!
//! `--backend uzswap` puts each worker's share in a uzswap region under the
//! budget; `--backend none` uses plain anonymous memory (no budget), and is
//! also what the kernel backends run in a child process inside a memory
//! cgroup, parsing the JSON line this prints last. So the JSON's top level is
//! backend-independent; uzswap's own figures sit under "stats".

use anyhow::bail;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use crate::random_access::{bump, word_ok, Scatter, Zipf};
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
    /// Every worker over the whole region: Zipf-chosen pages, 8-byte reads
    /// and writes (see `crate::random_access`).
    Random,
}

impl Access {
    /// The name `--access` takes.
    pub fn name(self) -> &'static str {
        match self {
            Access::Seq => "seq",
            Access::Skew => "skew",
            Access::Random => "random",
        }
    }
}

pub use uzswap_cli::parse::parse_size;
use uzswap_cli::parse::{parse_writeback, WritebackSpec};

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Worker threads.
    #[arg(short = 'n', long = "workers", default_value_t = 2)]
    pub workers: usize,
    /// Total working set (all workers together), e.g. 512M, 4G.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub size: u64,
    /// Page content pattern: index, zero, same, text, random, mixed, sparse.
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
    /// Folio size, 4K..2M, a power of two. uzswap: the chunk up to 64K; a
    /// larger folio is the read-ahead window of forward scans. The kernel
    /// backends: the mTHP size.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    #[arg(long, value_enum, default_value = "uzswap")]
    pub backend: Backend,
    /// Read passes' access order: `seq` reads every page in order; `skew`
    /// reads as many pages, 80% of them from a hot 20% of the working set;
    /// `random`: each worker does `--ops` 8-byte reads and writes at
    /// Zipf-chosen pages of the whole working set (all workers share every
    /// page), `--write-percent` of them writes.
    #[arg(long, value_enum, default_value = "seq")]
    pub access: Access,
    /// `--access random`: operations per worker over all the passes after
    /// the first (default: `passes - 1` times the working set's pages, so
    /// the workers together touch it `workers` times over per pass).
    #[arg(long)]
    pub ops: Option<u64>,
    /// `--access random`: the Zipf exponent of page choice (0: uniform).
    #[arg(long, default_value_t = 0.99)]
    pub zipf: f64,
    /// `--access random`: percent of operations that write.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub write_percent: u32,
    /// Check every page read against the pattern; any mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// uzswap: how faults are resolved. usemem's workers never hand region
    /// memory to a system call, so the default resolves each fault in the
    /// thread that took it (`signal`: no handler-thread wake-ups; 6-40%
    /// faster than `block` on every row, docs/BENCHMARKS.md).
    #[arg(long, value_enum, default_value = "signal")]
    pub handler: Handler,
    /// uzswap: with `--handler spin`, microseconds to poll before sleeping.
    #[arg(long, default_value_t = 200)]
    pub spin_us: u32,
    /// uzswap: fault handler threads (default: the library's, one per CPU
    /// up to 4).
    #[arg(long)]
    pub handler_threads: Option<usize>,
    /// uzswap: evictions that may run at once (default: the library's, one
    /// per handler thread plus the evictor thread's).
    #[arg(long)]
    pub evictors: Option<usize>,
    /// uzswap: read faults drop the pool copy instead of keeping it (a
    /// re-eviction of an unwritten chunk then compresses it again).
    #[arg(long)]
    pub no_keep_copy: bool,
    /// uzswap: the accessed-bit sampler.
    #[command(flatten)]
    pub young: crate::young_arg::SampleYoungArg,
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
    #[arg(long, conflicts_with = "writeback")]
    pub no_writeback: bool,
    /// uzswap: where the coldest pages go: `file` (default), `file:DIR`,
    /// or the far tier `redis://HOST:PORT[,HOST:PORT...]` (more than one
    /// node: a Redis Cluster; options `?timeout_ms=&retries=&backoff_ms=`),
    /// or both in the order `pool → file → redis`: `file[:DIR]+redis://...`
    /// (the file, `--swap-size`, takes what it can; Redis the rest).
    /// Remote pages are always sealed.
    #[arg(long, value_parser = parse_writeback, conflicts_with = "swap_dir")]
    pub writeback: Option<WritebackSpec>,
    /// uzswap: size of the far tier behind the file with
    /// `--writeback file+redis://...` (default: as large as the file).
    #[arg(long, value_parser = parse_size, requires = "writeback")]
    pub far_size: Option<u64>,
    /// uzswap: write pages to the swap file as they are, not sealed
    /// (AES-256-GCM under a key only this process holds, the default).
    #[arg(long)]
    pub writeback_plain: bool,
    /// uzswap: back the pool with transparent huge pages once it holds
    /// 2 MiB (off by default: see docs/BENCHMARKS.md, "Huge arenas off").
    #[arg(long)]
    pub huge_arenas: bool,
    /// uzswap: pages per compression batch, 1..=32 (vm.compress-batchsize;
    /// default: the library's, 32). 1 compresses every page inline on the
    /// evicting thread, as the kernel's zswap_store does.
    #[arg(long, value_parser = crate::bench::usize_in(1, uzswap::compress::MAX_BATCH))]
    pub batch_size: Option<usize>,
    /// uzswap: no proactive shrinker (writeback only when the pool limit is
    /// hit: seed 003's "off").
    #[arg(long)]
    pub no_shrinker: bool,
    /// uzswap: the shrinker ignores its protected region (seed 003's
    /// warm-page estimate), to measure what the protection does.
    #[arg(long)]
    pub no_shrinker_protect: bool,
    /// uzswap: no same-filled page detection; zero and repeated-word pages
    /// are compressed like any other (seed 004's "off").
    #[arg(long)]
    pub no_same_filled: bool,
    /// uzswap: the swap device's slot allocator: `cluster` (the library's)
    /// or `baseline`, one bitmap behind one lock (seed 001's "before").
    #[arg(long, value_enum, default_value = "cluster")]
    pub swap_allocator: SwapAllocator,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SwapAllocator {
    Cluster,
    Baseline,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Handler {
    Block,
    Spin,
    /// Faults resolved by the faulting thread in a SIGBUS handler.
    Signal,
    /// `signal` where the kernel's faults cannot be served anyway (no
    /// access to /dev/userfaultfd: user mode only), `block` where they can.
    Auto,
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

/// One worker's share of the working set (its region under uzswap); the
/// fill pass writes each share from its own worker, random access reads and
/// writes them all from every worker.
struct Share {
    base: *mut u8,
    pages: usize,
    /// Global index of its first page (pattern index).
    first: u64,
}

// SAFETY: a share is memory only its worker touches during the fill and
// seq/skew passes; random passes touch it from every worker, through atomic
// words only.
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

    /// Word `w` of page `i`, for random passes, where every worker may touch
    /// it at once.
    fn word(&self, i: usize, w: usize) -> &AtomicU64 {
        assert!(i < self.pages && w < WORDS);
        // SAFETY: the word lies inside this share's mapping, which outlives
        // the passes, and is 8-byte aligned (the mapping is page-aligned);
        // while random passes run, every access to the mapping goes through
        // atomics like this one (no `page()` slice exists then).
        unsafe { AtomicU64::from_ptr(self.base.add(i * PAGE_SIZE + w * 8).cast()) }
    }
}

/// 8-byte words in a page.
const WORDS: usize = PAGE_SIZE / 8;

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
        bail!("mmap {len}: {}", std::io::Error::last_os_error());
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
    /// Random passes: operations done, of them writes, and words checked.
    ops: u64,
    writes: u64,
    checked_words: u64,
}

/// What a random pass needs besides the shares.
struct RandomPlan {
    zipf: Zipf,
    scatter: Scatter,
    /// Operations per worker in each random pass.
    ops: u64,
    /// The most versions any word can reach: every write of the run.
    max_v: u32,
}

/// The share holding global page `g`, and the page's index in it.
fn locate(shares: &[Share], g: u64) -> (&Share, usize) {
    let s = shares.partition_point(|s| s.first <= g) - 1;
    (&shares[s], (g - shares[s].first) as usize)
}

/// The pattern's content of page `g`, kept for the next operation: Zipf's
/// hottest pages come back often enough for one entry to be worth keeping.
struct Expected {
    page: u64,
    buf: Box<[u8; PAGE_SIZE]>,
}

impl Expected {
    fn new() -> Expected {
        Expected {
            page: u64::MAX,
            buf: Box::new([0; PAGE_SIZE]),
        }
    }

    fn word(&mut self, pattern: uzswap::Pattern, g: u64, w: usize) -> u64 {
        if self.page != g {
            pattern.fill(g, SEED, &mut self.buf[..]);
            self.page = g;
        }
        u64::from_ne_bytes(self.buf[w * 8..w * 8 + 8].try_into().unwrap())
    }
}

/// One worker's operations of a random pass: Zipf-ranked pages scattered
/// over the whole working set, an 8-byte read or write at a random word.
/// With `--verify` every word read or written is checked to hold a valid
/// version (see `crate::random_access`).
fn run_random(
    shares: &[Share],
    plan: &RandomPlan,
    pass: u32,
    args: &Args,
    worker: usize,
) -> PassResult {
    use rand::{Rng, SeedableRng};
    let mut res = PassResult::default();
    let mut rng =
        rand::rngs::SmallRng::seed_from_u64(0x7a69_7066 ^ ((worker as u64) << 32 | pass as u64));
    let mut exp = Expected::new();
    for _ in 0..plan.ops {
        let g = plan.scatter.map(plan.zipf.sample(&mut rng));
        let w = rng.gen_range(0..WORDS);
        let write = rng.gen_range(0..100) < args.write_percent;
        let (share, i) = locate(shares, g);
        let word = share.word(i, w);
        let ok = if write {
            res.writes += 1;
            let pattern = args.verify.then(|| exp.word(args.pattern, g, w));
            bump(word, g, w as u64, pattern, plan.max_v).is_ok()
        } else {
            let x = word.load(Relaxed);
            res.sink = res.sink.wrapping_add(x);
            !args.verify || word_ok(g, w as u64, x, exp.word(args.pattern, g, w), plan.max_v)
        };
        if args.verify {
            res.checked_words += 1;
        }
        if !ok {
            res.mismatches += 1;
            if res.first_bad.len() < 4 {
                res.first_bad.push(g);
            }
        }
    }
    res.ops = plan.ops;
    res
}

/// After random passes: every word of the worker's own share must hold a
/// valid version of itself.
fn check_share(share: &Share, args: &Args, max_v: u32) -> PassResult {
    let mut res = PassResult::default();
    let mut exp = Expected::new();
    for i in 0..share.pages {
        let g = share.first + i as u64;
        let bad = (0..WORDS)
            .filter(|&w| {
                let x = share.word(i, w).load(Relaxed);
                !word_ok(g, w as u64, x, exp.word(args.pattern, g, w), max_v)
            })
            .count();
        res.checked += 1;
        res.checked_words += WORDS as u64;
        if bad > 0 {
            res.mismatches += 1;
            if res.first_bad.len() < 4 {
                res.first_bad.push(g);
            }
        }
    }
    res
}

/// A worker registered with the instance (`Uzswap::register_thread`)
/// until it ends, by returning or by a panic.
struct Registered<'a>(&'a Uzswap);

impl<'a> Registered<'a> {
    fn new(uz: &'a Uzswap) -> Option<Self> {
        uz.register_thread().then_some(Registered(uz))
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0.unregister_thread();
    }
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
        bail!("--workers must be at least 1");
    }
    if args.passes == 0 {
        bail!("--passes must be at least 1");
    }
    if !args.folio.is_power_of_two() || !(PAGE_SIZE as u64..=2 << 20).contains(&args.folio) {
        bail!(
            "--folio must be a power of two from 4K to 2M, got {}",
            args.folio
        );
    }
    let total_pages = (args.size / PAGE_SIZE as u64) as usize;
    if total_pages < args.workers {
        bail!("--size {} is less than a page per worker", args.size);
    }
    let random = args.access == Access::Random;
    if random && args.passes < 2 {
        bail!("--access random needs --passes 2 or more: the first pass fills the working set");
    }
    if !(args.zipf >= 0.0 && args.zipf.is_finite()) {
        bail!("--zipf must be a number >= 0, got {}", args.zipf);
    }
    let random_passes = u64::from(args.passes - 1);
    // Per worker per random pass; --ops is per worker over all of them.
    // With one pass (the fill alone) there is no random pass to share them.
    let ops_per_pass = args
        .ops
        .unwrap_or(random_passes * total_pages as u64)
        .div_ceil(random_passes.max(1));
    let plan = RandomPlan {
        zipf: Zipf::new(total_pages as u64, args.zipf),
        scatter: Scatter::new(total_pages as u64),
        ops: ops_per_pass,
        max_v: (ops_per_pass * random_passes * args.workers as u64).min(u32::MAX as u64) as u32,
    };
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
                Handler::Auto => HandlerMode::Auto,
            },
            keep_copy: !args.no_keep_copy,
            sample_young: args.young.mode(),
            partial_faults: !args.no_partial,
            ..Config::default()
        };
        if let Some(n) = args.evictors {
            cfg.evictors = n;
        }
        cfg.zswap.compressor = args.compressor.clone();
        cfg.zswap.recompress = args.recompress.clone();
        cfg.zswap.huge_arenas = args.huge_arenas;
        cfg.zswap.writeback_encrypted = !args.writeback_plain;
        if let Some(b) = args.batch_size {
            cfg.zswap.batch_size = b;
        }
        cfg.zswap.shrinker_enabled = !args.no_shrinker;
        cfg.zswap.shrinker_protect = !args.no_shrinker_protect;
        cfg.zswap.same_filled = !args.no_same_filled;
        if args.no_writeback {
            cfg.writeback = None;
        } else if let Some(wb) = cfg.writeback.as_mut() {
            wb.dir = args.swap_dir.clone();
            wb.baseline_allocator = args.swap_allocator == SwapAllocator::Baseline;
            match &args.writeback {
                Some(WritebackSpec::File(dir)) => wb.dir = dir.clone(),
                Some(WritebackSpec::Remote(r)) => wb.remote = Some(r.clone()),
                Some(WritebackSpec::FileThenRemote(dir, r)) => {
                    wb.dir = dir.clone();
                    wb.remote = Some(r.clone());
                    wb.file_first = true;
                }
                None => {}
            }
            wb.far_size_bytes = args.far_size.unwrap_or(0);
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
    let (mut ops, mut writes, mut checked_words) = (0u64, 0u64, 0u64);
    let mut absorb = |r: PassResult| {
        checked += r.checked;
        mismatches += r.mismatches;
        sink = sink.wrapping_add(r.sink);
        first_bad.extend(r.first_bad);
        ops += r.ops;
        writes += r.writes;
        checked_words += r.checked_words;
    };
    let say = |line: String| {
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    for pass in 0..args.passes {
        let tp = Instant::now();
        let shares = &shares;
        let plan = &plan;
        let uz = &uz;
        let results: Vec<PassResult> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..args.workers)
                .map(|w| {
                    s.spawn(move || {
                        // Its faults resolved on its CPU (handler threads).
                        let _registered = uz.as_ref().and_then(Registered::new);
                        if random && pass > 0 {
                            run_random(shares, plan, pass, args, w)
                        } else {
                            run_pass(&shares[w], pass, args, w)
                        }
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("worker panicked"))
                .collect()
        });
        let secs = tp.elapsed().as_secs_f64();
        let pass_ops: u64 = results.iter().map(|r| r.ops).sum();
        results.into_iter().for_each(&mut absorb);
        if random && pass > 0 {
            let mbps = (pass_ops as usize * PAGE_SIZE) as f64 / secs / 1e6;
            say(format!(
                "pass {pass} (random): {secs:.3} s, {:.0} ops/s, {mbps:.1} MB/s-equivalent",
                pass_ops as f64 / secs
            ));
        } else {
            let mbps = (total_pages * PAGE_SIZE) as f64 / secs / 1e6;
            let what = if pass == 0 { "write" } else { "read" };
            say(format!("pass {pass} ({what}): {secs:.3} s, {mbps:.1} MB/s"));
        }
        pass_secs.push(secs);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu_times();
    // Random passes left words at many versions: check every word of every
    // page once the writers are done (not timed into the throughput).
    let mut verify_s = None;
    if random && args.verify {
        let tv = Instant::now();
        let shares = &shares;
        let results: Vec<PassResult> = std::thread::scope(|s| {
            let hs: Vec<_> = shares
                .iter()
                .map(|sh| s.spawn(move || check_share(sh, args, plan.max_v)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("checker panicked"))
                .collect()
        });
        results.into_iter().for_each(&mut absorb);
        verify_s = Some(tv.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);

    let bytes = (total_pages * PAGE_SIZE) as f64;
    let write_mbps = bytes / pass_secs[0] / 1e6;
    let read_secs: f64 = pass_secs[1..].iter().sum();
    // Random passes count each operation as one page touched (MB/s
    // equivalent), so their rows read on the same scale as the others.
    let read_bytes = if random {
        (ops as usize * PAGE_SIZE) as f64
    } else {
        bytes * (args.passes - 1) as f64
    };
    let read_mbps = if args.passes > 1 {
        read_bytes / read_secs / 1e6
    } else {
        0.0
    };
    let throughput = (bytes + read_bytes) / elapsed / 1e6;
    let random_report = random.then(|| {
        serde_json::json!({
            "ops": ops,
            "write_ops": writes,
            "ops_per_s": ops as f64 / read_secs,
            "zipf": args.zipf,
            "write_percent": args.write_percent,
            "ops_per_worker": plan.ops * random_passes,
            "first_rank_probability": (total_pages <= 1 << 22).then(|| plan.zipf.p_first()),
        })
    });
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
        "verify": {"checked_pages": checked, "mismatches": mismatches,
            "checked_words": random.then_some(checked_words), "verify_s": verify_s},
        "random": random_report,
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
        if let Some(r) = &random_report {
            println!(
                "random: {} ops ({} writes), {:.0} ops/s, zipf {}, all workers over every page",
                ops,
                writes,
                r["ops_per_s"].as_f64().unwrap_or(0.0),
                args.zipf
            );
        }
        if args.verify {
            println!("verify: {checked} pages checked, {mismatches} mismatches");
            if random {
                println!(
                    "verify: {checked_words} words checked ({} in the final check of every word, {:.2} s)",
                    checked * WORDS as u64,
                    verify_s.unwrap_or(0.0)
                );
            }
        }
        if is_uz {
            println!("stats: {}", serde_json::to_string_pretty(&report["stats"])?);
        }
    }
    if mismatches > 0 {
        bail!("verify failed: {mismatches} of {checked} pages differ (first: pages {first_bad:?})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random passes over two shares of plain memory from two workers, then
    /// the final check: no false mismatch; one corrupted word is caught.
    #[test]
    fn random_passes_verify_and_the_final_check_catches_corruption() {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: Args,
        }
        use clap::Parser;
        let args = T::parse_from(["usemem", "--access", "random", "--verify"]).a;
        const PAGES: usize = 64;
        let mut mem = vec![0u64; PAGES * WORDS];
        let base = mem.as_mut_ptr().cast::<u8>();
        let shares = [
            Share {
                base,
                pages: 40,
                first: 0,
            },
            Share {
                // SAFETY: page 40 of the 64-page buffer.
                base: unsafe { base.add(40 * PAGE_SIZE) },
                pages: 24,
                first: 40,
            },
        ];
        for s in &shares {
            for i in 0..s.pages {
                args.pattern.fill(s.first + i as u64, SEED, s.page(i));
            }
        }
        let plan = RandomPlan {
            zipf: Zipf::new(PAGES as u64, 0.99),
            scatter: Scatter::new(PAGES as u64),
            ops: 20_000,
            max_v: 40_000,
        };
        let results: Vec<PassResult> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|w| {
                    let (shares, plan, args) = (&shares, &plan, &args);
                    s.spawn(move || run_random(shares, plan, 1, args, w))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(results.iter().map(|r| r.mismatches).sum::<u64>(), 0);
        assert_eq!(results.iter().map(|r| r.ops).sum::<u64>(), 40_000);
        let writes: u64 = results.iter().map(|r| r.writes).sum();
        assert!(
            (6_000..10_000).contains(&writes),
            "{writes} writes of 40000"
        );
        let check = |s: &Share| check_share(s, &args, plan.max_v);
        assert_eq!(
            check(&shares[0]).mismatches + check(&shares[1]).mismatches,
            0
        );
        assert_eq!(check(&shares[1]).checked_words, 24 * WORDS as u64);
        // One flipped bit in page 50 (the second share's page 10).
        shares[1].word(10, 100).fetch_xor(1 << 20, Relaxed);
        let r = check(&shares[1]);
        assert_eq!((r.mismatches, r.first_bad.clone()), (1, vec![50]));
        assert_eq!(check(&shares[0]).mismatches, 0);
        drop(mem);
    }
}
