//! `uzswap bench engine`: the compressors called directly against the zswap
//! cache built on them, per compressor and page pattern, in one run.
//!
//! Definitions (printed with the results too):
//! - raw compress / raw decompress: one thread, one compression context,
//!   straight `CompressCtx` calls page by page over the same pages.
//! - store / load: `Zswap::store_folio` / `load_folio` (exclusive) of whole
//!   folios (`--folio`, default 64 KiB) on an instance with `--workers`
//!   compressing threads (default 1, so that store vs raw compares one
//!   thread with one thread: the figure is the cost of the cache itself:
//!   same-filled check, checksum, pool allocation and copy, tree insert).
//! - MB/s is always original (uncompressed) bytes per second, 10^6 bytes.
//! - ratio = original bytes / pool_total_size; space_efficiency = sum of
//!   compressed lengths / pool_total_size (how well the pool packs objects).
//! - batch: lz4 on text at 2 workers (the caller and one helper), store
//!   MB/s with batch size 1 (every page compressed inline by the caller, as
//!   kernel zswap does) vs batch size 32 (a folio's pages spread over both).
//! - same_filled_vs_lz4: store MB/s of zero / same pages divided by raw lz4
//!   compress MB/s, both on those same pages and on text pages.
//!
//! Raw and cache are timed folio by folio, back to back, taking turns at
//! going first (`paired`): on a shared machine, whatever else runs falls
//! on both sides alike, so their ratio holds still from run to run where
//! two separate passes minutes apart moved it by ±0.1. Each measurement
//! can be repeated (`--repeat`): MB/s figures keep the best pass, ratios
//! the median of the passes' own ratios. Every loaded (and raw-decompressed) page is
//! compared with the original; any mismatch or failed operation makes the
//! command exit non-zero after printing.

use crate::usemem::parse_size;
use anyhow::{bail, Context};
use serde::Serialize;
use std::time::{Duration, Instant};
use uzswap::compress::{self, CompressCtx};
use uzswap::{LoadMode, Pattern, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

#[derive(clap::Args)]
pub struct Args {
    /// Bytes of pages per compressor and pattern (K/M/G suffixes), 4K to 64G.
    #[arg(long, default_value = "256M", value_parser = parse_case_size)]
    pub size: u64,
    /// Compressors to run, comma separated ("zstd:3" etc. accepted).
    #[arg(long, value_delimiter = ',', default_value = "lz4,zstd,lzo,deflate")]
    pub compressors: Vec<String>,
    /// Patterns to run, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "index,zero,same,text,random,mixed,sparse"
    )]
    pub patterns: Vec<Pattern>,
    /// Folio size for store_folio / load_folio (a power of two of pages).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Compressing threads of the cache for the per-case figures (counting
    /// the caller).
    #[arg(long, default_value_t = 1, value_parser = super::parse_threads)]
    pub workers: usize,
    /// Threads for the batch 1 vs batch 32 comparison.
    #[arg(long, default_value_t = 2, value_parser = super::parse_threads)]
    pub batch_workers: usize,
    /// Repeat every timed pass this many times and keep the best.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Seed of the page patterns.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Skip the batch 1 vs 32 comparison.
    #[arg(long)]
    pub no_batch: bool,
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize, Clone)]
struct Case {
    compressor: String,
    pattern: String,
    store_mbps: f64,
    load_mbps: f64,
    raw_compress_mbps: f64,
    raw_decompress_mbps: f64,
    store_vs_raw: f64,
    /// Store over the same keys again: every object replaces one, so the
    /// pool's memory is already the process's (the raw side's output buffer
    /// is touched before timing too) and each store also frees the object
    /// it replaces. The steady state of a swap cache.
    store_warm_mbps: f64,
    store_warm_vs_raw: f64,
    load_vs_raw: f64,
    /// None when nothing is in the pool (all pages same-filled).
    ratio: Option<f64>,
    space_efficiency: Option<f64>,
    pool_total_size: u64,
    compressed_bytes: u64,
    same_filled_pages: u64,
}

#[derive(Serialize)]
struct Batch {
    batch1_store_mbps: f64,
    batch32_store_mbps: f64,
    speedup: f64,
    workers: usize,
}

#[derive(Serialize)]
struct SameFilled {
    zero: Option<f64>,
    same: Option<f64>,
    zero_vs_text: Option<f64>,
    same_vs_text: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    cases: Vec<Case>,
    batch: Option<Batch>,
    same_filled_vs_lz4: SameFilled,
    definitions: &'static str,
    size: u64,
    folio: u64,
    workers: usize,
    repeat: u32,
    mismatches: u64,
    failures: u64,
    command: String,
}

const DEFINITIONS: &str = "MB/s = original bytes/s (10^6). raw = 1 thread, direct compressor \
calls page by page. store/load = Zswap store_folio/load_folio(exclusive) of --folio folios with \
--workers compressing threads (default 1: store_vs_raw and load_vs_raw are the cache's own cost \
at equal thread count). ratio = original/pool_total_size; space_efficiency = sum of compressed \
lengths/pool_total_size. batch = lz4 text store at --batch-workers threads, batch size 1 \
(inline, serial) vs 32 (spread). same_filled_vs_lz4 = lz4-instance store MB/s of zero/same \
pages / raw lz4 compress MB/s of the same pages (zero, same) or of text pages (*_vs_text). \
Raw and cache timed folio by folio in turns; MB/s: best of --repeat passes; *_vs_raw: median \
of the passes' ratios.";

pub(crate) fn mbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-9) / 1e6
}

/// Counts of things that went wrong; any non-zero fails the command.
#[derive(Default)]
pub(crate) struct Faults {
    pub(crate) mismatches: u64,
    pub(crate) failures: u64,
}

/// Largest `--size`: a case holds its pages and a raw compressed stream as
/// large, plus the pool, so this is already more memory than most machines
/// these runs are on have.
const MAX_CASE_BYTES: u64 = 64 << 30;

/// `--size`: a size (`parse_size`) from one page to [`MAX_CASE_BYTES`].
fn parse_case_size(s: &str) -> Result<u64, String> {
    let v = parse_size(s)?;
    if !(PAGE_SIZE as u64..=MAX_CASE_BYTES).contains(&v) {
        return Err(format!(
            "{s} is out of range: from 4K to {}G per case",
            MAX_CASE_BYTES >> 30
        ));
    }
    Ok(v)
}

/// `len` bytes of `fill`, or an error where the memory cannot be had
/// (`vec!` would abort the process).
fn try_filled(len: usize, fill: u8, what: &str) -> anyhow::Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .with_context(|| format!("cannot allocate {} MiB for {what}", len >> 20))?;
    v.resize(len, fill);
    Ok(v)
}

pub(crate) fn gen_pages(p: Pattern, npages: usize, seed: u64) -> anyhow::Result<Vec<u8>> {
    let len = npages
        .checked_mul(PAGE_SIZE)
        .context("page count overflows")?;
    let mut v = try_filled(len, 0, "the pages of a case")?;
    for (i, page) in v.chunks_exact_mut(PAGE_SIZE).enumerate() {
        p.fill(i as u64, seed, page);
    }
    Ok(v)
}

/// Raw single-thread compress of folio `f`'s pages, each straight into its
/// own slot of `out` (sized and touched beforehand, so the timed loop is
/// the compressor alone); records each page's compressed (offset, len).
fn raw_compress(r: &mut Raw<'_>, f: usize, faults: &mut Faults) -> Duration {
    let t0 = Instant::now();
    for i in f * r.folio_pages..(f + 1) * r.folio_pages {
        let page = &r.pages[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
        let off = i * r.bound;
        r.spans[i] = match r.ctx.compress(page, &mut r.stream[off..off + r.bound]) {
            Ok(n) => (off, n),
            Err(_) => {
                faults.failures += 1;
                (off, 0)
            }
        };
    }
    t0.elapsed()
}

/// Raw single-thread decompress of folio `f` (timed), then compared with
/// the original (not timed).
fn raw_decompress(r: &mut Raw<'_>, f: usize, faults: &mut Faults) -> Duration {
    let t0 = Instant::now();
    for (k, out) in r.buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
        let (off, len) = r.spans[f * r.folio_pages + k];
        if r.ctx.decompress(&r.stream[off..off + len], out).is_err() {
            faults.failures += 1;
        }
    }
    let t = t0.elapsed();
    let folio = r.folio_pages * PAGE_SIZE;
    faults.mismatches += count_mismatches(&r.buf, &r.pages[f * folio..(f + 1) * folio]);
    t
}

/// The raw side of a case: the compressor's own context and buffers.
struct Raw<'a> {
    ctx: Box<dyn CompressCtx>,
    pages: &'a [u8],
    folio_pages: usize,
    bound: usize,
    stream: Vec<u8>,
    spans: Vec<(usize, usize)>,
    buf: Vec<u8>,
}

/// What a timed step reads: wall time (this bench's figures), or the
/// calling thread's CPU time, which a neighbour taking the CPU does not
/// inflate (`bench seeds`, whose single-threaded cases run on a shared
/// machine).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clock {
    Wall,
    ThreadCpu,
}

impl Clock {
    fn now(self) -> Duration {
        match self {
            Clock::Wall => {
                static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
                ORIGIN.get_or_init(Instant::now).elapsed()
            }
            Clock::ThreadCpu => {
                // SAFETY: an all-zero timespec is valid; clock_gettime fills it.
                let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
                // SAFETY: a valid clock id and out pointer.
                unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
                Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
            }
        }
    }
}

/// Store folio `f` (timed).
pub(crate) fn store_one(
    z: &Zswap,
    pages: &[u8],
    order: u32,
    f: usize,
    faults: &mut Faults,
) -> Duration {
    store_one_by(Clock::Wall, z, pages, order, f, faults)
}

/// [`store_one`] timed by `clock`.
pub(crate) fn store_one_by(
    clock: Clock,
    z: &Zswap,
    pages: &[u8],
    order: u32,
    f: usize,
    faults: &mut Faults,
) -> Duration {
    let folio = PAGE_SIZE << order;
    let first = SwapEntry::new(1, (f as u64) << order);
    let t0 = clock.now();
    let r = z.store_folio(first, order, &pages[f * folio..(f + 1) * folio]);
    let t = clock.now().saturating_sub(t0);
    if r.is_err() {
        faults.failures += 1;
    }
    t
}

/// Load folio `f` (exclusive, timed), then compare it (not timed).
pub(crate) fn load_one(
    z: &Zswap,
    pages: &[u8],
    order: u32,
    f: usize,
    buf: &mut [u8],
    faults: &mut Faults,
) -> Duration {
    load_one_by(Clock::Wall, z, pages, order, f, buf, faults)
}

/// [`load_one`] timed by `clock`.
pub(crate) fn load_one_by(
    clock: Clock,
    z: &Zswap,
    pages: &[u8],
    order: u32,
    f: usize,
    buf: &mut [u8],
    faults: &mut Faults,
) -> Duration {
    let folio = PAGE_SIZE << order;
    let first = SwapEntry::new(1, (f as u64) << order);
    let t0 = clock.now();
    let r = z.load_folio(first, order, buf, LoadMode::Exclusive);
    let t = clock.now().saturating_sub(t0);
    match r {
        Ok(()) => faults.mismatches += count_mismatches(buf, &pages[f * folio..(f + 1) * folio]),
        Err(_) => {
            faults.failures += 1;
            faults.mismatches += (folio / PAGE_SIZE) as u64;
        }
    }
    t
}

/// Time `raw(f)` and `cache(f)` for every folio, back to back and taking
/// turns at going first, so that whatever else the machine runs meanwhile,
/// and the cache state one leaves the other, falls on both sides alike.
/// Returns the two total times.
pub(crate) fn paired(
    folios: usize,
    mut raw: impl FnMut(usize) -> Duration,
    mut cache: impl FnMut(usize) -> Duration,
) -> (Duration, Duration) {
    let (mut tr, mut tc) = (Duration::ZERO, Duration::ZERO);
    for f in 0..folios {
        if f % 2 == 0 {
            tr += raw(f);
            tc += cache(f);
        } else {
            tc += cache(f);
            tr += raw(f);
        }
    }
    (tr, tc)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn count_mismatches(got: &[u8], want: &[u8]) -> u64 {
    got.chunks_exact(PAGE_SIZE)
        .zip(want.chunks_exact(PAGE_SIZE))
        .filter(|(a, b)| a != b)
        .count() as u64
}

pub(crate) fn zswap(compressor: &str, workers: usize, batch_size: usize) -> anyhow::Result<Zswap> {
    Zswap::new(ZswapConfig {
        compressor: compressor.to_string(),
        workers,
        batch_size,
        // Random pages are kept (uncompressed) so that every page can be
        // loaded back and verified, as the front end does.
        store_incompressible: true,
        ..Default::default()
    })
    .with_context(|| format!("zswap with {compressor}"))
}

/// Store every folio; returns MB/s of the stores.
pub(crate) fn store_all(z: &Zswap, pages: &[u8], order: u32, faults: &mut Faults) -> f64 {
    let folios = pages.len() / (PAGE_SIZE << order);
    let busy: Duration = (0..folios)
        .map(|f| store_one(z, pages, order, f, faults))
        .sum();
    mbps(pages.len(), busy)
}

/// Load every folio (exclusive, timed), compare it (not timed).
pub(crate) fn load_all(z: &Zswap, pages: &[u8], order: u32, faults: &mut Faults) -> f64 {
    let mut buf = vec![0u8; PAGE_SIZE << order];
    let folios = pages.len() / buf.len();
    let busy: Duration = (0..folios)
        .map(|f| load_one(z, pages, order, f, &mut buf, faults))
        .sum();
    mbps(pages.len(), busy)
}

fn run_case(
    args: &Args,
    name: &str,
    pattern: Pattern,
    order: u32,
    npages: usize,
    faults: &mut Faults,
) -> anyhow::Result<Case> {
    let comp = compress::by_name(name)?;
    let pages = gen_pages(pattern, npages, args.seed)?;
    let folio_pages = 1usize << order;
    let folios = npages / folio_pages;
    let bound = comp.max_compressed_len(PAGE_SIZE);
    let mut raw = Raw {
        ctx: comp.new_ctx(),
        pages: &pages,
        folio_pages,
        bound,
        // Touched now (not zero-mapped), so no page fault lands in the timing.
        stream: try_filled(
            npages.checked_mul(bound).context("stream size overflows")?,
            0x55,
            "the raw compressed stream",
        )?,
        spans: vec![(0, 0); npages],
        buf: vec![0u8; folio_pages * PAGE_SIZE],
    };
    let mut lbuf = vec![0u8; folio_pages * PAGE_SIZE];
    let secs = |t: Duration| t.as_secs_f64().max(1e-9);
    let (mut rc, mut rd, mut st, mut sw, mut ld) = (0f64, 0f64, 0f64, 0f64, 0f64);
    let (mut st_r, mut sw_r, mut ld_r) = (Vec::new(), Vec::new(), Vec::new());
    let mut stats = None;
    for _ in 0..args.repeat.max(1) {
        let z = zswap(name, args.workers, compress::MAX_BATCH)?;
        let (mut fr, mut fc) = (Faults::default(), Faults::default());
        // A fresh pool (its memory first touched), then the same keys again
        // (each store replaces an object: a swap cache's steady state),
        // then an exclusive drain; each against the raw compressor.
        for (best, ratios) in [(&mut st, &mut st_r), (&mut sw, &mut sw_r)] {
            let (tr, tc) = paired(
                folios,
                |f| raw_compress(&mut raw, f, &mut fr),
                |f| store_one(&z, &pages, order, f, &mut fc),
            );
            // The pool as the fresh pass left it (the warm pass replaces
            // every object with the same one).
            stats.get_or_insert_with(|| z.stats());
            rc = rc.max(mbps(pages.len(), tr));
            *best = best.max(mbps(pages.len(), tc));
            ratios.push(secs(tr) / secs(tc));
        }
        let (tr, tc) = paired(
            folios,
            |f| raw_decompress(&mut raw, f, &mut fr),
            |f| load_one(&z, &pages, order, f, &mut lbuf, &mut fc),
        );
        rd = rd.max(mbps(pages.len(), tr));
        ld = ld.max(mbps(pages.len(), tc));
        ld_r.push(secs(tr) / secs(tc));
        for x in [fr, fc] {
            faults.failures += x.failures;
            faults.mismatches += x.mismatches;
        }
    }
    let s = stats.expect("at least one pass");
    let orig = pages.len() as f64;
    let pool = s.pool_total_size as f64;
    Ok(Case {
        compressor: name.to_string(),
        pattern: pattern.name().to_string(),
        store_mbps: st,
        load_mbps: ld,
        raw_compress_mbps: rc,
        raw_decompress_mbps: rd,
        store_vs_raw: median(st_r),
        store_warm_mbps: sw,
        store_warm_vs_raw: median(sw_r),
        load_vs_raw: median(ld_r),
        ratio: (pool > 0.0).then(|| orig / pool),
        space_efficiency: (pool > 0.0).then(|| s.compressed_bytes as f64 / pool),
        pool_total_size: s.pool_total_size,
        compressed_bytes: s.compressed_bytes,
        same_filled_pages: s.same_filled_pages,
    })
}

fn run_batch(args: &Args, order: u32, npages: usize, faults: &mut Faults) -> anyhow::Result<Batch> {
    let pages = gen_pages(Pattern::Text, npages, args.seed)?;
    let (mut b1, mut b32) = (0f64, 0f64);
    // Alternate the two so that machine noise hits both alike.
    for _ in 0..args.repeat.max(1) {
        for (bs, best) in [(1usize, &mut b1), (compress::MAX_BATCH, &mut b32)] {
            let z = zswap("lz4", args.batch_workers, bs)?;
            *best = best.max(store_all(&z, &pages, order, faults));
            load_all(&z, &pages, order, faults);
        }
    }
    Ok(Batch {
        batch1_store_mbps: b1,
        batch32_store_mbps: b32,
        speedup: b32 / b1,
        workers: args.batch_workers,
    })
}

fn shell_quote(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=:,./+".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.2}"))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let folio = args.folio as usize;
    if folio < PAGE_SIZE || !folio.is_power_of_two() || folio > PAGE_SIZE << uzswap::MAX_ORDER {
        bail!(
            "--folio {folio}: must be a power of two from 4K to {}K",
            (PAGE_SIZE << uzswap::MAX_ORDER) >> 10
        );
    }
    let order = (folio / PAGE_SIZE).trailing_zeros();
    let npages = (args.size as usize / folio).max(1) * (folio / PAGE_SIZE);
    if args.workers == 0 || args.batch_workers == 0 {
        bail!("--workers and --batch-workers must be at least 1");
    }
    for c in &args.compressors {
        compress::by_name(c)?;
    }
    let mut faults = Faults::default();
    let mut cases = Vec::new();
    println!(
        "bench engine: {} MiB per case, folio {} KiB, workers {}, best of {}",
        (npages * PAGE_SIZE) >> 20,
        folio >> 10,
        args.workers,
        args.repeat.max(1)
    );
    println!(
        "{:<10} {:<7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6}",
        "compressor",
        "pattern",
        "raw_c",
        "store",
        "st_warm",
        "raw_d",
        "load",
        "st/raw",
        "warm/raw",
        "ld/raw",
        "ratio",
        "space"
    );
    for name in &args.compressors {
        for &p in &args.patterns {
            let c = run_case(&args, name, p, order, npages, &mut faults)?;
            println!(
                "{:<10} {:<7} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>7.2} {:>7.2} {:>7.2} {:>7} {:>6}",
                c.compressor,
                c.pattern,
                c.raw_compress_mbps,
                c.store_mbps,
                c.store_warm_mbps,
                c.raw_decompress_mbps,
                c.load_mbps,
                c.store_vs_raw,
                c.store_warm_vs_raw,
                c.load_vs_raw,
                fmt_opt(c.ratio),
                fmt_opt(c.space_efficiency)
            );
            cases.push(c);
        }
    }
    let batch = if args.no_batch {
        None
    } else {
        let b = run_batch(&args, order, npages, &mut faults)?;
        println!(
            "batch (lz4, text, {} workers): batch 1 {:.0} MB/s, batch 32 {:.0} MB/s, speedup {:.2}x",
            b.workers, b.batch1_store_mbps, b.batch32_store_mbps, b.speedup
        );
        Some(b)
    };

    let find = |c: &str, p: &str| cases.iter().find(|x| x.compressor == c && x.pattern == p);
    let ratio = |store_of: &str, raw_of: &str| {
        let s = find("lz4", store_of)?;
        let r = find("lz4", raw_of)?;
        Some(s.store_mbps / r.raw_compress_mbps)
    };
    let same_filled = SameFilled {
        zero: ratio("zero", "zero"),
        same: ratio("same", "same"),
        zero_vs_text: ratio("zero", "text"),
        same_vs_text: ratio("same", "text"),
    };
    println!(
        "same-filled store vs raw lz4 compress: zero {} same {} (same pages); zero {} same {} (vs text pages)",
        fmt_opt(same_filled.zero),
        fmt_opt(same_filled.same),
        fmt_opt(same_filled.zero_vs_text),
        fmt_opt(same_filled.same_vs_text)
    );
    println!("definitions: {DEFINITIONS}");
    println!(
        "verify: {} page mismatches, {} failed operations",
        faults.mismatches, faults.failures
    );

    let command = std::env::args()
        .map(|a| shell_quote(&a))
        .collect::<Vec<_>>()
        .join(" ");
    if args.json {
        let report = Report {
            cases,
            batch,
            same_filled_vs_lz4: same_filled,
            definitions: DEFINITIONS,
            size: (npages * PAGE_SIZE) as u64,
            folio: folio as u64,
            workers: args.workers,
            repeat: args.repeat.max(1),
            mismatches: faults.mismatches,
            failures: faults.failures,
            command,
        };
        println!("{}", serde_json::to_string(&report)?);
    }
    if faults.mismatches > 0 || faults.failures > 0 {
        bail!(
            "{} pages came back different and {} operations failed",
            faults.mismatches,
            faults.failures
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_size_is_bounded() {
        assert_eq!(parse_case_size("256M"), Ok(256 << 20));
        assert_eq!(parse_case_size("64G"), Ok(64 << 30));
        for bad in ["100T", "65G", "1", "0", "nan", "1e30"] {
            assert!(parse_case_size(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn allocation_failure_is_an_error() {
        // More than any address space: refused by the allocator, reported.
        let e = try_filled(usize::MAX / 2, 0, "a test").unwrap_err();
        assert!(e.to_string().contains("cannot allocate"), "{e}");
    }
}
