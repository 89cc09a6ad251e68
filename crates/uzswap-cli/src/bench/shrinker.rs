//! `uzswap bench shrinker`: the zswap shrinker on vs off on a workload with
//! a hot set and a cold set several times larger (seed 003), plus the
//! measurement behind the device format (compressed vs plain pages).
//!
//! The workload drives the zswap API through a small model of a front end,
//! so it is deterministic and needs no userfaultfd: a memory budget covers
//! resident pages plus the pool's bytes (as the region front end charges);
//! when over budget the model first reports pressure to zswap (a
//! synchronous `shrink` of a quarter of the freeable count, what a PSI event
//! makes the shrinker thread do), then evicts resident pages by CLOCK into
//! zswap. An access to a page that is not resident is a *refault*: an
//! exclusive `load` from the pool or the device. The pool limit is set high
//! (90% of the budget), the case seed 003 describes: without the shrinker,
//! cold pages sit in the pool and squeeze the hot set out of memory.
//!
//! CPU time is `getrusage(RUSAGE_SELF)` user + system over each run: every
//! thread of the process, so the engine's workers and the writeback I/O are
//! included. Both runs use the same seed and the same access sequence.

use anyhow::Context;
use serde_json::json;
use std::time::Instant;
use uzswap::swap::SwapDeviceConfig;
use uzswap::{LoadMode, Pattern, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

#[derive(clap::Args)]
pub struct Args {
    /// Hot set, in pages (at most 2^24; hot and cold sets together at most
    /// 2^26 pages).
    #[arg(long, default_value_t = 4096, value_parser = super::u64_in(1, 1 << 24))]
    pub hot: u64,
    /// Cold set size as a multiple of the hot set (1..=1024).
    #[arg(long, default_value_t = 4, value_parser = super::u64_in(1, 1024))]
    pub cold_factor: u64,
    /// Memory budget (resident + pool) as a percentage of the hot set.
    #[arg(long, default_value_t = 150, value_parser = super::u64_in(1, 100_000))]
    pub budget_percent: u64,
    /// Accesses after the cold set was touched, as a multiple of the hot set.
    #[arg(long, default_value_t = 20, value_parser = super::u64_in(0, 1_000_000))]
    pub passes: u64,
    /// Percentage of those accesses that go to the cold set.
    #[arg(long, default_value_t = 1, value_parser = super::u64_in(0, 100))]
    pub cold_percent: u64,
    /// Page content (see `usemem --pattern`).
    #[arg(long, default_value = "text")]
    pub pattern: String,
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// Directory for the swap file.
    #[arg(long)]
    pub swap_dir: Option<std::path::PathBuf>,
    /// Write pages back unsealed (the default seals each with AES-256-GCM):
    /// run both ways to see what sealing costs.
    #[arg(long)]
    pub writeback_plain: bool,
    /// Pages in the device-format measurement.
    #[arg(long, default_value_t = 8192, value_parser = super::u64_in(1, 1 << 24))]
    pub format_pages: u64,
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass; no other memory.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn device(args: &Args, pages: u64) -> SwapDeviceConfig {
    SwapDeviceConfig {
        dir: args.swap_dir.clone().unwrap_or_else(std::env::temp_dir),
        size_bytes: ((pages * PAGE_SIZE as u64) + (4 << 20)).next_multiple_of(2 << 20),
        ..Default::default()
    }
}

pub(crate) struct RunFigures {
    pub(crate) cpu_s: f64,
    pub(crate) elapsed_s: f64,
    pub(crate) refaults: u64,
    pub(crate) written_back_pages: u64,
    pub(crate) pool_refaults: u64,
    pub(crate) device_refaults: u64,
    pub(crate) evictions: u64,
    pub(crate) store_rejected: u64,
    /// Refaulted pages whose bytes were not the page's pattern.
    pub(crate) mismatches: u64,
    /// Proactive shrinks that stopped at the protected region.
    pub(crate) stop_protected: u64,
}

/// xorshift: the same sequence for both runs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Most pages, hot and cold, one run models: its per-page state is three
/// bytes a page in memory, and its swap file as large as all of them.
const MAX_TOTAL_PAGES: u64 = 1 << 26;

/// The workload's sizes, from the arguments, with every product checked:
/// they come from the command line, and an overflow would wrap into a
/// small, wrong workload or a capacity overflow panic.
#[derive(Debug, PartialEq, Eq)]
struct Sizes {
    hot: u64,
    /// Hot and cold pages.
    total: u64,
    budget_bytes: u64,
    /// Accesses of the steady state.
    steps: u64,
}

fn sizes(args: &Args) -> anyhow::Result<Sizes> {
    let hot = args.hot;
    let total = hot
        .checked_mul(args.cold_factor)
        .and_then(|cold| cold.checked_add(hot))
        .filter(|&t| t <= MAX_TOTAL_PAGES)
        .with_context(|| {
            format!(
                "--hot {hot} with --cold-factor {}: more than {MAX_TOTAL_PAGES} pages in all",
                args.cold_factor
            )
        })?;
    let budget_bytes = hot
        .checked_mul(PAGE_SIZE as u64)
        .and_then(|b| b.checked_mul(args.budget_percent))
        .map(|b| b / 100)
        .with_context(|| {
            format!(
                "--budget-percent {} of {hot} pages overflows",
                args.budget_percent
            )
        })?;
    let steps = args
        .passes
        .checked_mul(hot)
        .with_context(|| format!("--passes {} of {hot} pages overflows", args.passes))?;
    Ok(Sizes {
        hot,
        total,
        budget_bytes,
        steps,
    })
}

/// One run of the hot/cold workload; `protect`: whether the shrinker keeps
/// out of its protected region (seed 003's warm-page estimate).
pub(crate) fn run_once(
    args: &Args,
    pattern: Pattern,
    shrinker: bool,
    protect: bool,
) -> anyhow::Result<RunFigures> {
    let Sizes {
        hot,
        total,
        budget_bytes: budget,
        steps,
    } = sizes(args)?;
    let z = Zswap::new(ZswapConfig {
        compressor: args.compressor.clone(),
        max_pool_bytes: budget / 100 * 90,
        shrinker_enabled: shrinker,
        shrinker_protect: protect,
        writeback_encrypted: !args.writeback_plain,
        swap_device: Some(device(args, total)),
        psi_trigger: None,
        ..Default::default()
    })
    .context("zswap instance")?;
    let mut resident = vec![false; total as usize];
    let mut touched = vec![false; total as usize];
    let mut refbit = vec![false; total as usize];
    let mut nres = 0u64;
    let mut hand = 0usize;
    let mut page = vec![0u8; PAGE_SIZE];
    let (mut refaults, mut evictions, mut rejected) = (0u64, 0u64, 0u64);
    let mut mismatches = 0u64;
    let s0 = z.stats();
    let (cpu0, t0) = (cpu_seconds(), Instant::now());

    let mut access = |i: u64, page: &mut [u8]| -> anyhow::Result<()> {
        let iu = i as usize;
        if resident[iu] {
            refbit[iu] = true;
            return Ok(());
        }
        if touched[iu] {
            z.load(SwapEntry::new(0, i), page, LoadMode::Exclusive)
                .with_context(|| format!("refault of page {i}"))?;
            refaults += 1;
            if !pattern.verify(i, 1, page) {
                mismatches += 1;
            }
        } else {
            pattern.fill(i, 1, page);
            touched[iu] = true;
        }
        resident[iu] = true;
        refbit[iu] = true;
        nres += 1;
        // Reclaim: pressure to the shrinker first, then evict by CLOCK.
        if nres * PAGE_SIZE as u64 + z.pool_total_size() > budget {
            z.shrink(z.shrinker_count() >> 2);
            let mut tries = 0;
            while nres * PAGE_SIZE as u64 + z.pool_total_size() > budget && tries < 4 * total {
                tries += 1;
                hand = (hand + 1) % total as usize;
                if !resident[hand] {
                    continue;
                }
                if refbit[hand] {
                    refbit[hand] = false;
                    continue;
                }
                // The model keeps no page contents: a resident page's data
                // is its pattern, regenerated to be stored.
                pattern.fill(hand as u64, 1, page);
                match z.store(SwapEntry::new(0, hand as u64), page) {
                    Ok(()) => {
                        resident[hand] = false;
                        nres -= 1;
                        evictions += 1;
                    }
                    Err(_) => rejected += 1,
                }
            }
        }
        Ok(())
    };

    // Touch the hot set, then the cold set once (it ends up in zswap), then
    // the steady state: mostly hot, some cold.
    for i in (0..hot).chain(hot..total) {
        access(i, &mut page)?;
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for _ in 0..steps {
        let r = rng.next();
        let i = if r % 100 < args.cold_percent {
            hot + (r >> 8) % (total - hot)
        } else {
            (r >> 8) % hot
        };
        access(i, &mut page)?;
    }
    let (cpu_s, elapsed_s) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let s = z.stats();
    Ok(RunFigures {
        cpu_s,
        elapsed_s,
        refaults,
        written_back_pages: s.written_back_pages - s0.written_back_pages,
        pool_refaults: s.zswpin,
        device_refaults: s.pswpin,
        evictions,
        store_rejected: rejected,
        mismatches,
        stop_protected: s.shrink_stop_protected - s0.shrink_stop_protected,
    })
}

/// Write `n` pages back in one format, then load them all back: CPU per
/// written-back page, swap-in time per page, bytes written to the device.
fn format_run(
    args: &Args,
    pattern: Pattern,
    compressed: bool,
) -> anyhow::Result<serde_json::Value> {
    let n = args.format_pages;
    let z = Zswap::new(ZswapConfig {
        compressor: args.compressor.clone(),
        writeback_compressed: compressed,
        writeback_encrypted: !args.writeback_plain,
        store_incompressible: true,
        swap_device: Some(device(args, n)),
        psi_trigger: None,
        ..Default::default()
    })?;
    let mut page = vec![0u8; PAGE_SIZE];
    for i in 0..n {
        pattern.fill(i, 2, &mut page);
        z.store(SwapEntry::new(0, i), &page)?;
    }
    // First pass: second chance only; not timed.
    z.shrink(u64::MAX);
    let c0 = cpu_seconds();
    let mut written = 0;
    for _ in 0..64 {
        let r = z.shrink(u64::MAX);
        written += r.written_back;
        if r.written_back == 0 && r.rotated == 0 {
            break;
        }
    }
    let wb_cpu = cpu_seconds() - c0;
    let s = z.stats();
    let t0 = Instant::now();
    let mut from_device = 0u64;
    for i in 0..n {
        let k = SwapEntry::new(0, i);
        z.load(k, &mut page, LoadMode::Exclusive)?;
        if !pattern.verify(i, 2, &page) {
            anyhow::bail!("page {i} differs after writeback");
        }
    }
    from_device += z.stats().pswpin;
    let swapin = t0.elapsed().as_secs_f64();
    Ok(json!({
        "written_back_pages": written,
        "wb_cpu_us_per_page": wb_cpu * 1e6 / written.max(1) as f64,
        "swapin_us_per_page": swapin * 1e6 / n as f64,
        "pages_from_device": from_device,
        "device_bytes": s.swap_slots * PAGE_SIZE as u64,
    }))
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let pattern: Pattern = args
        .pattern
        .parse()
        .map_err(|e| anyhow::anyhow!("--pattern: {e}"))?;
    if args.hot == 0 || args.cold_factor == 0 || args.budget_percent == 0 {
        anyhow::bail!("--hot, --cold-factor and --budget-percent must be positive");
    }
    if args.cold_percent > 100 {
        anyhow::bail!("--cold-percent is at most 100");
    }
    sizes(&args)?;
    let dir = args.swap_dir.clone().unwrap_or_else(std::env::temp_dir);
    if let Some(fs) = uzswap::swap::memory_backed_fs(&dir) {
        eprintln!(
            "uzswap: warning: swap directory {} is on {fs}, which keeps files in memory: \
             pages written back there still take RAM (--swap-dir picks another)",
            dir.display()
        );
    }
    let off = run_once(&args, pattern, false, true)?;
    let on = run_once(&args, pattern, true, true)?;
    let fmt_c = format_run(&args, pattern, true)?;
    let fmt_p = format_run(&args, pattern, false)?;
    let fig = |r: &RunFigures| {
        json!({
            "cpu_s": r.cpu_s,
            "elapsed_s": r.elapsed_s,
            "refaults": r.refaults,
            "written_back_pages": r.written_back_pages,
            "pool_refaults": r.pool_refaults,
            "device_refaults": r.device_refaults,
            "evictions": r.evictions,
            "store_rejected": r.store_rejected,
            "mismatches": r.mismatches,
        })
    };
    let cpu_reduction = 1.0 - on.cpu_s / off.cpu_s;
    let refault_increase = on.refaults as f64 / off.refaults.max(1) as f64 - 1.0;
    let command: Vec<String> = std::env::args().collect();
    for (name, r) in [("off", &off), ("on", &on)] {
        println!(
            "shrinker {name:>3}: cpu {:.3} s, elapsed {:.3} s, refaults {} (pool {}, device {}), written back {}",
            r.cpu_s, r.elapsed_s, r.refaults, r.pool_refaults, r.device_refaults, r.written_back_pages
        );
    }
    println!(
        "cpu reduction {:.1}% (target >= 15%), refault increase {:.1}% (target <= 5%)",
        cpu_reduction * 100.0,
        refault_increase * 100.0
    );
    println!(
        "writeback {}",
        if args.writeback_plain {
            "plain (--writeback-plain)"
        } else {
            "sealed (AES-256-GCM)"
        }
    );
    println!("device format: compressed {fmt_c}");
    println!("device format: plain      {fmt_p}");
    let mismatches = off.mismatches + on.mismatches;
    println!("verify: {mismatches} refaulted pages differed from their pattern");
    if args.json {
        println!(
            "{}",
            json!({
                "on": fig(&on),
                "off": fig(&off),
                "cpu_reduction": cpu_reduction,
                "refault_increase": refault_increase,
                "writeback_format": {"compressed": fmt_c, "plain": fmt_p},
                "writeback_encrypted": !args.writeback_plain,
                "command": command.join(" "),
            })
        );
    }
    if mismatches > 0 {
        anyhow::bail!("{mismatches} refaulted pages came back different");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(std::iter::once("shrinker").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn huge_sets_are_refused_at_parse_time() {
        for argv in [
            &["--hot", "18446744073709551615"][..],
            &["--cold-factor", "18446744073709551615"],
            &["--hot", "0"],
            &["--cold-percent", "101"],
            &["--budget-percent", "18446744073709551615"],
            &["--passes", "18446744073709551615"],
        ] {
            assert!(parse(argv).is_err(), "{argv:?} accepted");
        }
    }

    #[test]
    fn sizes_are_checked() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            sizes(&a).unwrap(),
            Sizes {
                hot: 4096,
                total: 5 * 4096,
                budget_bytes: 4096 * 4096 * 150 / 100,
                steps: 20 * 4096,
            }
        );
        // Each within its own range, too many pages together.
        let a = parse(&["--hot", "16777216", "--cold-factor", "1024"]).unwrap();
        let e = sizes(&a).unwrap_err().to_string();
        assert!(e.contains("more than 67108864 pages"), "{e}");
        let a = parse(&["--hot", "16777216", "--cold-factor", "3"]).unwrap();
        assert_eq!(sizes(&a).unwrap().total, 1 << 26);
    }
}
