//! `uzswap bench seeds`: each seed's headline claim measured in uzswap in
//! one run, beside the figure the seed itself gives.
//!
//! This module owns the five rows: what each seed claims and the figure it
//! states (quoted, with its file), which ablation reproduces the claim here
//! (the mechanism on vs off, same data, same run), the rule that turns the
//! measured ratio into a verdict, the sizes of a full, `--quick` and smoke
//! run, and the report (table, JSON, PNG). The measuring is the other
//! benches' code: `engine`'s paired per-folio timing and page generators,
//! `alloc`'s throughput and fragmentation runs, `shrinker`'s hot/cold model,
//! and `compare`'s usemem cells (each its own `uzswap usemem` process, every
//! page verified, CPU from wait4).
//!
//! Ratios are only ever taken within the run: the arms of an ablation take
//! turns (folio by folio in process, round by round for usemem cells, the
//! order rotating every round) and each arm reports its median round, so a
//! noisy neighbour falls on both sides alike.
//!
//! Verdict (`verdict`): the seed's effect `s` and ours `g`, both as the
//! relative improvement the claim is about (positive = the mechanism helps).
//! Within `NOISE` of zero counts as no effect. A claim of a real effect
//! (s >= NOISE) holds when g >= s, holds partly when NOISE <= g < s, and
//! does not hold below that; a claim that the mechanism costs little
//! (|s| < NOISE) holds when g > -NOISE. No workload is shaped per seed:
//! every row uses the same patterns (text pages in process, mixed pages
//! under usemem) and the library's defaults except the switch under test.
//!
//! What needs userfaultfd (the usemem cells) is probed first; where it is
//! unavailable (an unprivileged user on a kernel without user-mode-only
//! userfaultfd, or with `vm.unprivileged_userfaultfd` off and no access to
//! `/dev/userfaultfd`) those cells are skipped and the reason printed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{json, Value};
use uzswap::{Pattern, Zswap, PAGE_SIZE};

use super::engine::{self, Faults};
use super::{alloc, compare, shrinker};

/// Relative differences smaller than this are read as no effect: paired
/// runs on the shared 2-core machine this was built on move by 1-3%.
const NOISE: f64 = 0.03;

/// Where the seeds are, for the file names quoted (the files themselves are
/// not read: the figures are quoted below, so the bench runs anywhere).
const SEED_DIR: &str = "seeds/";

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Draw a panel per seed (off vs on, the seed's figure marked) to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Smaller sizes and fewer rounds: under 2 minutes on 2 cores.
    #[arg(long)]
    pub quick: bool,
    /// Smallest sizes, one round: a smoke test of every row (the test suite's).
    #[arg(long, hide = true)]
    pub smoke: bool,
    /// Directory of the swap files (default: $TMPDIR, else /tmp).
    #[arg(long)]
    pub swap_dir: Option<PathBuf>,
}

/// Sizes of one run mode.
struct Sizes {
    mode: &'static str,
    /// Rounds of every paired measurement (arms alternate; median kept).
    rounds: usize,
    /// Bytes of pages per in-process case (seeds 000, 002, 004).
    case_bytes: usize,
    /// usemem working set and budget (seeds 000, 002, 003).
    usemem_size: u64,
    usemem_budget: u64,
    /// usemem working set and budget of the writeback-heavy cells (001).
    wb_size: u64,
    wb_budget: u64,
    /// Seconds per allocator throughput case and round.
    alloc_secs: f64,
    /// Measured operations of the fragmentation run (after as many warm-up)
    /// and its device, in 2 MiB clusters: fallbacks appear once the free
    /// space has been churned through a few times.
    frag_ops: u64,
    frag_clusters: usize,
    /// Hot set of the shrinker model, in pages, and its passes.
    hot: u64,
    passes: u64,
}

const MIB: u64 = 1 << 20;

fn sizes(a: &Args) -> Sizes {
    if a.smoke {
        Sizes {
            mode: "smoke",
            rounds: 1,
            case_bytes: 2 << 20,
            usemem_size: 16 * MIB,
            usemem_budget: 8 * MIB,
            wb_size: 16 * MIB,
            wb_budget: 8 * MIB,
            alloc_secs: 0.1,
            frag_ops: 40_000,
            frag_clusters: 16,
            hot: 512,
            passes: 4,
        }
    } else if a.quick {
        Sizes {
            mode: "quick",
            rounds: 2,
            case_bytes: 16 << 20,
            usemem_size: 64 * MIB,
            usemem_budget: 32 * MIB,
            wb_size: 64 * MIB,
            wb_budget: 16 * MIB,
            alloc_secs: 0.4,
            frag_ops: 300_000,
            frag_clusters: 64,
            hot: 2048,
            passes: 10,
        }
    } else {
        Sizes {
            mode: "full",
            rounds: 5,
            case_bytes: 64 << 20,
            usemem_size: 256 * MIB,
            usemem_budget: 128 * MIB,
            wb_size: 256 * MIB,
            wb_budget: 64 * MIB,
            alloc_secs: 1.0,
            frag_ops: 1_000_000,
            frag_clusters: 256,
            hot: 4096,
            passes: 20,
        }
    }
}

/// A content check (verified pages, accounted slots) and whether it passed.
#[derive(serde::Serialize)]
struct Check {
    name: String,
    passed: bool,
    detail: String,
}

/// State shared by the rows: the checks, what was skipped and why.
struct Ctx {
    sz: Sizes,
    swap_dir: Option<PathBuf>,
    /// `Err(reason)` when usemem cannot run here (no userfaultfd).
    uffd: std::result::Result<(), String>,
    checks: Vec<Check>,
    skipped: Vec<Value>,
    cells: usize,
}

impl Ctx {
    fn check(&mut self, name: impl Into<String>, passed: bool, detail: impl Into<String>) {
        let c = Check {
            name: name.into(),
            passed,
            detail: detail.into(),
        };
        if !c.passed {
            eprintln!("uzswap: check failed: {}: {}", c.name, c.detail);
        }
        self.checks.push(c);
    }

    /// Faults of an in-process case as a check.
    fn faults(&mut self, name: &str, pages: u64, f: &Faults) {
        self.check(
            name,
            f.mismatches == 0 && f.failures == 0,
            format!(
                "{pages} pages stored and loaded back: {} differed, {} operations failed",
                f.mismatches, f.failures
            ),
        );
    }

    fn skip(&mut self, what: &str, reason: &str) {
        println!("skipped: {what}: {reason}");
        self.skipped.push(json!({"what": what, "reason": reason}));
    }

    /// usemem cells `arms` (name, extra arguments), `rounds` rounds, the
    /// order rotating every round; each arm's runs, or `None` (skipped or
    /// failed, said why). Every cell verifies every page it reads.
    fn usemem_arms(
        &mut self,
        what: &str,
        arms: &[(&str, Vec<String>)],
        size: u64,
        budget: u64,
    ) -> Option<Vec<Vec<Value>>> {
        if let Err(why) = &self.uffd {
            let why = why.clone();
            self.skip(what, &format!("usemem needs userfaultfd: {why}"));
            return None;
        }
        let mut out: Vec<Vec<Value>> = vec![Vec::new(); arms.len()];
        for r in 0..self.sz.rounds {
            for k in 0..arms.len() {
                let i = (k + r) % arms.len();
                let (name, extra) = &arms[i];
                let mut argv: Vec<String> = [
                    "usemem",
                    "--backend",
                    "uzswap",
                    "--pattern",
                    "mixed",
                    "--workers",
                    "2",
                    "--passes",
                    "2",
                    "--verify",
                    "--json",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                argv.extend([
                    "--size".into(),
                    size.to_string(),
                    "--budget".into(),
                    budget.to_string(),
                ]);
                if let Some(d) = &self.swap_dir {
                    argv.extend(["--swap-dir".into(), d.display().to_string()]);
                }
                argv.extend(extra.iter().cloned());
                self.cells += 1;
                let label = format!("{what}: usemem {name} (round {})", r + 1);
                match compare::run_cell(&argv) {
                    Ok((v, cpu)) => {
                        let checked = num(&v, &["verify", "checked_pages"]);
                        let bad = num(&v, &["verify", "mismatches"]);
                        self.check(
                            label,
                            checked > 0.0 && bad == 0.0,
                            format!("{checked} pages read back and checked, {bad} differed"),
                        );
                        let mut v = v;
                        v["wait4_cpu_s"] = json!(cpu);
                        out[i].push(v);
                    }
                    Err(e) => {
                        self.check(label, false, format!("{e:#}"));
                        return None;
                    }
                }
            }
        }
        Some(out)
    }
}

/// A number at `path` of a JSON value (0 where absent).
fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64().unwrap_or(0.0)
}

fn median(v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    engine::median(v)
}

/// The median over an arm's runs of a figure of each run.
fn med(runs: &[Value], f: impl Fn(&Value) -> f64) -> f64 {
    median(runs.iter().map(f).collect())
}

/// Whether usemem can run: an instance opens its userfaultfd at once.
fn probe_uffd() -> std::result::Result<(), String> {
    let cfg = uzswap::region::Config {
        budget: 64 * MIB,
        writeback: None,
        ..Default::default()
    };
    match uzswap::region::Uzswap::new(cfg) {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// This process's CPU time, all threads (user + system).
fn process_cpu() -> f64 {
    // SAFETY: getrusage fills the zeroed struct we pass; no other memory.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

// ---------------------------------------------------------------- verdicts

/// What a seed's figure claims, as the improvement the mechanism brings
/// (positive = it helps; see the module comment).
fn verdict(seed: f64, ours: f64) -> &'static str {
    verdict_within(seed, ours, NOISE)
}

/// [`verdict`] with a noise band of `noise` (at least `NOISE`).
fn verdict_within(seed: f64, ours: f64, noise: f64) -> &'static str {
    let noise = noise.max(NOISE);
    if !ours.is_finite() {
        return "not measured";
    }
    if seed.abs() < NOISE {
        if ours > -noise {
            "holds"
        } else {
            "does not hold"
        }
    } else if ours >= seed {
        "holds"
    } else if ours >= noise {
        "holds partly (smaller effect)"
    } else if ours > -noise {
        "does not hold (no measurable effect)"
    } else {
        "does not hold (the opposite)"
    }
}

/// One figure of a seed row: the seed's number, ours, and the verdict.
#[derive(serde::Serialize, Clone)]
struct Figure {
    metric: String,
    /// The seed's figure as the seed states it.
    seed_figure: String,
    /// The seed's effect as a relative improvement (None: no comparable one).
    seed_effect: Option<f64>,
    /// "off" and "on" in the metric's unit, and on/off.
    off: f64,
    on: f64,
    ratio: f64,
    /// Our effect as a relative improvement, in the claim's direction.
    effect: f64,
    lower_is_better: bool,
    /// The noise band the verdict used: `NOISE`, or the spread of an arm's
    /// rounds where that was wider.
    noise: f64,
    verdict: String,
}

impl Figure {
    /// A wall-clock figure whose threads did not run at once (`par` of
    /// `want` CPUs on average) measured the machine's load, not the
    /// mechanism: reported, not judged (as `bench alloc` warns).
    fn needs_parallel(mut self, par: f64, want: f64) -> Figure {
        if par < 0.75 * want {
            self.verdict = format!(
                "not measured: its {want:.0} threads ran at once only {par:.2} of {want:.0} \
                 (the CPUs were busy)"
            );
            self.effect = f64::NAN;
        }
        self
    }

    /// Widen the noise band to the rounds' own spread (see [`spread`]).
    fn within(mut self, spread: f64) -> Figure {
        if spread.is_finite() && spread > self.noise {
            self.noise = spread;
            let s = self.seed_effect.unwrap_or(NOISE);
            self.verdict = verdict_within(s, self.effect, spread).into();
        }
        self
    }
}

/// How far an arm's rounds lie apart, (max - min) / median; the larger of
/// the arms'. An effect inside it is not told apart from the run's noise.
fn spread(arms: &[&[Value]], f: impl Fn(&Value) -> f64) -> f64 {
    arms.iter()
        .map(|runs| {
            let v: Vec<f64> = runs.iter().map(&f).collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if v.len() < 2 {
                0.0
            } else {
                (hi - lo) / median(v).abs().max(1e-12)
            }
        })
        .fold(0.0, f64::max)
}

fn figure(
    metric: &str,
    seed_figure: &str,
    seed_effect: Option<f64>,
    off: f64,
    on: f64,
    lower_is_better: bool,
) -> Figure {
    figure_paired(
        metric,
        seed_figure,
        seed_effect,
        off,
        on,
        on / off,
        lower_is_better,
    )
}

/// [`figure`] whose on/off ratio is the median of paired rounds' ratios
/// (steadier than the ratio of the two medians).
fn figure_paired(
    metric: &str,
    seed_figure: &str,
    seed_effect: Option<f64>,
    off: f64,
    on: f64,
    ratio: f64,
    lower_is_better: bool,
) -> Figure {
    let effect = if lower_is_better {
        1.0 - ratio
    } else {
        ratio - 1.0
    };
    let v = match seed_effect {
        Some(s) => verdict(s, effect),
        // No figure of the same comparison in the seed: direction only.
        None => verdict(NOISE, effect),
    };
    Figure {
        metric: metric.into(),
        seed_figure: seed_figure.into(),
        seed_effect,
        off,
        on,
        ratio,
        effect,
        lower_is_better,
        noise: NOISE,
        verdict: v.into(),
    }
}

/// A seed's row: its claim, figures, verdict and why.
#[derive(serde::Serialize)]
struct SeedRow {
    seed: &'static str,
    file: &'static str,
    topic: &'static str,
    claim: &'static str,
    ablation: String,
    figures: Vec<Figure>,
    holds: String,
    why: String,
    details: Value,
    /// Bar groups for the plot.
    #[serde(skip)]
    panel: Vec<Group>,
}

/// One bar group of a panel: bars as a percentage of the "off" bar, and the
/// seed's own figure(s) for the "on" bar on the same scale.
struct Group {
    label: String,
    bars: Vec<(String, f64)>,
    seed_marks: Vec<f64>,
    /// The bar the seed's figure is for ("on"; batch 32 in a curve).
    mark_bar: usize,
}

fn group(label: &str, f: &Figure) -> Group {
    let marks = f
        .seed_effect
        .map(|s| if f.lower_is_better { 1.0 - s } else { 1.0 + s })
        .map(|r| vec![r * 100.0])
        .unwrap_or_default();
    Group {
        label: label.into(),
        bars: vec![("off".into(), 100.0), ("on".into(), f.ratio * 100.0)],
        seed_marks: marks,
        mark_bar: 1,
    }
}

/// The row's verdict from its figures: every one holding, none, or some.
fn overall(figs: &[Figure]) -> String {
    let measured: Vec<&Figure> = figs.iter().filter(|f| f.effect.is_finite()).collect();
    if measured.is_empty() {
        return "not measured".into();
    }
    let holds = measured
        .iter()
        .filter(|f| f.verdict.starts_with("holds"))
        .count();
    let full = measured.iter().filter(|f| f.verdict == "holds").count();
    if full == measured.len() {
        "holds".into()
    } else if holds == 0 {
        "does not hold".into()
    } else {
        format!("partly ({holds} of {} figures)", measured.len())
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.1}%", x * 100.0)
    } else {
        "-".into()
    }
}

// ------------------------------------------------------- 000 large folios

/// Stores of one 64 KiB folio's pages one 4 KiB page at a time (the split
/// the seed's series removes), timed together; each page verified on load.
fn store_pages(z: &Zswap, pages: &[u8], f: usize, faults: &mut Faults) -> Duration {
    (0..16)
        .map(|k| engine::store_one_by(CPU, z, pages, 0, f * 16 + k, faults))
        .sum()
}

fn load_pages(z: &Zswap, pages: &[u8], f: usize, buf: &mut [u8], faults: &mut Faults) -> Duration {
    (0..16)
        .map(|k| engine::load_one_by(CPU, z, pages, 0, f * 16 + k, buf, faults))
        .sum()
}

/// The in-process single-threaded cases (000, 004) time the caller's CPU:
/// with one compressing thread all their work is on it, and a neighbour
/// taking the CPU does not count (wall time moved by 2x here under load).
const CPU: engine::Clock = engine::Clock::ThreadCpu;

fn seed000(ctx: &mut Ctx) -> Result<SeedRow> {
    let npages = (ctx.sz.case_bytes / PAGE_SIZE).next_multiple_of(16);
    let folios = npages / 16;
    let pages = engine::gen_pages(Pattern::Text, npages, 1)?;
    let bytes = npages * PAGE_SIZE;
    let (mut st, mut ld, mut locks_st, mut locks_ld) = (vec![], vec![], vec![], vec![]);
    let (mut ff, mut fp) = (Faults::default(), Faults::default());
    let mut mthp = Value::Null;
    let (mut mbps_f, mut mbps_p) = (vec![], vec![]);
    for _ in 0..ctx.sz.rounds {
        // One compressing thread each, so the comparison is the folio path
        // against the page path, not batching (seed 002's row).
        let zf = engine::zswap("lz4", 1, uzswap::compress::MAX_BATCH)?;
        let zp = engine::zswap("lz4", 1, uzswap::compress::MAX_BATCH)?;
        let l0 = (zf.stats().tree_locks, zp.stats().tree_locks);
        let (tf, tp) = engine::paired(
            folios,
            |f| engine::store_one_by(CPU, &zf, &pages, 4, f, &mut ff),
            |f| store_pages(&zp, &pages, f, &mut fp),
        );
        let l1 = (zf.stats().tree_locks, zp.stats().tree_locks);
        let (mut bf, mut bp) = (vec![0u8; 16 * PAGE_SIZE], vec![0u8; PAGE_SIZE]);
        let (lf, lp) = engine::paired(
            folios,
            |f| engine::load_one_by(CPU, &zf, &pages, 4, f, &mut bf, &mut ff),
            |f| load_pages(&zp, &pages, f, &mut bp, &mut fp),
        );
        let l2 = (zf.stats().tree_locks, zp.stats().tree_locks);
        st.push(tp.as_secs_f64() / tf.as_secs_f64().max(1e-9));
        ld.push(lp.as_secs_f64() / lf.as_secs_f64().max(1e-9));
        mbps_f.push(engine::mbps(bytes, tf));
        mbps_p.push(engine::mbps(bytes, tp));
        let per = |a: u64, b: u64| (b - a) as f64 / npages as f64;
        locks_st.push((per(l0.0, l1.0), per(l0.1, l1.1)));
        locks_ld.push((per(l1.0, l2.0), per(l1.1, l2.1)));
        mthp = json!({"folio": zf.stats().mthp, "pages": zp.stats().mthp});
    }
    let n = (npages * ctx.sz.rounds) as u64;
    ctx.faults("000 folio store/load (64 KiB)", n, &ff);
    ctx.faults("000 page store/load (4 KiB)", n, &fp);
    let lock_store = locks_st[0];
    let lock_load = locks_ld[0];
    let store_speedup = median(st);
    let load_speedup = median(ld);

    // usemem with 4 KiB chunks (every fault and eviction a page) and 64 KiB.
    let um = ctx.usemem_arms(
        "000 usemem 64K vs 4K chunks",
        &[
            ("4K chunks", vec!["--folio".into(), "4K".into()]),
            ("64K chunks", vec!["--folio".into(), "64K".into()]),
        ],
        ctx.sz.usemem_size,
        ctx.sz.usemem_budget,
    );
    let seed_fig = "64K mTHP, usemem -n 70 1g: ZSWAP lz4 271,558 KB/s vs SSD 335,346 (-19%), \
                    deflate-iaa 388,154 (+16%); hugepages-64kB/stats/zswpout 63,200";
    let mut figs = vec![
        figure(
            "store CPU per page, folio vs split (1 thread)",
            "none of this comparison (the seed's baseline is SSD swap)",
            None,
            1.0,
            1.0 / store_speedup,
            true,
        ),
        figure(
            "load CPU per page, folio vs split (1 thread)",
            "none of this comparison",
            None,
            1.0,
            1.0 / load_speedup,
            true,
        ),
        figure(
            "tree lock acquisitions per stored page",
            "kernel v4 series: one xarray store per page, also inside an mTHP",
            None,
            lock_store.1,
            lock_store.0,
            true,
        ),
    ];
    let mut details = json!({
        "case_bytes": bytes,
        "store_mbps_cpu_folio": median(mbps_f),
        "store_mbps_cpu_pages": median(mbps_p),
        "store_speedup": store_speedup,
        "load_speedup": load_speedup,
        "tree_locks_per_page_store": {"folio": lock_store.0, "pages": lock_store.1},
        "tree_locks_per_page_load": {"folio": lock_load.0, "pages": lock_load.1},
        "per_order_counters": mthp,
    });
    let mut panel = vec![
        group("store CPU/page", &figs[0]),
        group("tree locks/page", &figs[2]),
    ];
    if let Some(um) = um {
        let (p4, p64) = (&um[0], &um[1]);
        let el = |r: &[Value]| med(r, |v| num(v, &["elapsed_s"]));
        let tp = |r: &[Value]| med(r, |v| num(v, &["throughput_mbps"]));
        let sys = |r: &[Value]| med(r, |v| num(v, &["sys_s"]));
        let f = figure(
            "usemem throughput, 64K vs 4K chunks",
            seed_fig,
            None,
            tp(p4),
            tp(p64),
            false,
        )
        .within(spread(&[p4, p64], |v| num(v, &["throughput_mbps"])));
        let mut g = group("usemem MB/s", &f);
        // The seed's usemem figure compares mTHP zswap with SSD swap, not
        // folio with page: marked for scale, not judged against.
        g.seed_marks = vec![271_558.0 / 335_346.0 * 100.0];
        panel.insert(0, g);
        figs.insert(0, f);
        let last = |r: &[Value]| r.last().cloned().unwrap_or(Value::Null);
        details["usemem"] = json!({
            "elapsed_s": {"4K": el(p4), "64K": el(p64)},
            "throughput_mbps": {"4K": tp(p4), "64K": tp(p64)},
            "sys_s": {"4K": sys(p4), "64K": sys(p64)},
            "tree_locks_per_page": {
                "4K": med(p4, |v| num(v, &["stats", "tree_locks"]) / num(v, &["stats", "zswpout"]).max(1.0)),
                "64K": med(p64, |v| num(v, &["stats", "tree_locks"]) / num(v, &["stats", "zswpout"]).max(1.0)),
            },
            "per_order_counters_64K": last(p64)["stats"]["mthp"],
            "zswpout": {"4K": last(p4)["stats"]["zswpout"], "64K": last(p64)["stats"]["zswpout"]},
        });
    }
    let holds = overall(&figs);
    let why = format!(
        "A 64 KiB folio is one admission check, one shard lock for all 16 entries \
         ({:.3} vs {:.3} locks per page stored, {:.3} vs {:.3} per page loaded) and one \
         all-or-nothing insert; page by page each of the 16 pays them. Single-threaded, the \
         store is {store_speedup:.2}x and the load {load_speedup:.2}x as fast per page: \
         compression dominates a page's cost, so fewer locks move it by what the lock costs. \
         The seed's own figures compare mTHP zswap with SSD swap (and owe their sys-time \
         regression to cgroup charging, as the thread finds), not a folio with its pages; \
         uzswap's comparable gain is in usemem, where a chunk is also one fault and one \
         UFFDIO_COPY.",
        lock_store.0, lock_store.1, lock_load.0, lock_load.1
    );
    Ok(SeedRow {
        seed: "000",
        file: "000_73b8cd268b033d7f.txt",
        topic: "large folios (mTHP) stored whole",
        claim: "zswap_store() takes a 64K mTHP folio whole (all-or-nothing) instead of splitting \
                it; per-order hugepages-64kB zswpout counters",
        ablation: "64 KiB folio store/load vs the same 16 pages one at a time (lz4, text pages, \
                   1 thread); usemem with 64 KiB vs 4 KiB chunks"
            .into(),
        figures: figs,
        holds,
        why,
        details,
        panel,
    })
}

// ------------------------------------------------------ 001 swap allocator

fn seed001(ctx: &mut Ctx) -> Result<SeedRow> {
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get());
    let over = (2 * nproc).max(4);
    let dur = Duration::from_secs_f64(ctx.sz.alloc_secs);
    let ring = 64;
    let mut tput = Vec::new();
    let mut slots_ok = true;
    let mut slot_err = String::new();
    for t in [1, 2, over] {
        let nclusters = (t * ring * 20 / 512).max(64);
        let mut ops = [Vec::new(), Vec::new()];
        let mut par = [Vec::new(), Vec::new()];
        for r in 0..ctx.sz.rounds {
            for k in [r % 2, 1 - r % 2] {
                let a = alloc::make(["cluster", "baseline"][k], nclusters);
                match alloc::throughput(&a, t, ring, dur) {
                    Ok(x) => {
                        ops[k].push(x.ops_per_sec);
                        par[k].push(x.parallelism);
                    }
                    Err(e) => {
                        slots_ok = false;
                        slot_err = format!("{e:#}");
                    }
                }
            }
        }
        tput.push(json!({
            "threads": t,
            "oversubscribed": t > nproc,
            "cluster_ops_per_s": median(ops[0].clone()),
            "baseline_ops_per_s": median(ops[1].clone()),
            "cluster_over_baseline": median(ops[0].clone()) / median(ops[1].clone()),
            "parallelism": {"cluster": median(par[0].clone()), "baseline": median(par[1].clone())},
        }));
    }
    // Fragmentation at 85% fill, 30% of pages in order-4 runs.
    let fa = alloc::Args {
        json: false,
        secs: 1.0,
        rounds: 1,
        threads: vec![],
        ring,
        frag_clusters: ctx.sz.frag_clusters,
        fill: 0.85,
        frag_ops: ctx.sz.frag_ops,
        order4_share: 0.3,
        share_by: alloc::ShareBy::Pages,
        seed: 1,
    };
    let mut frag = serde_json::Map::new();
    let mut rates = [f64::NAN; 2];
    for (k, kind) in ["cluster", "baseline"].iter().enumerate() {
        let a = alloc::make(kind, fa.frag_clusters);
        match alloc::fragmentation(&*a, &fa) {
            Ok(f) => {
                rates[k] = f.fallbacks as f64 / f.attempts.max(1) as f64;
                frag.insert(
                    kind.to_string(),
                    json!({"order4_fallback_rate": rates[k], "order4_attempts": f.attempts,
                        "order4_fallbacks": f.fallbacks, "failed_allocs": f.failed,
                        "final_fill": f.final_fill}),
                );
            }
            Err(e) => {
                slots_ok = false;
                slot_err = format!("{e:#}");
            }
        }
    }
    ctx.check(
        "001 allocators: every slot accounted after each run",
        slots_ok,
        if slots_ok {
            "allocator and bench agree on used slots; all freed at the end".to_string()
        } else {
            slot_err
        },
    );
    let t2 = &tput[1];
    let time_per_op = |v: &Value, k: &str| 1.0 / v[k].as_f64().unwrap_or(f64::NAN);
    let mut figs = vec![
        figure(
            "order-4 fallback rate at 85% fill (by pages 30% order 4)",
            "64K mTHP swpout_fallback 430,333 of 2,165,549 (19.9%) -> 158,330 of 2,024,597 (7.8%)",
            Some(1.0 - 7.82 / 19.87),
            rates[1],
            rates[0],
            true,
        ),
        figure(
            "time per slot alloc+free, 2 threads",
            "make -j96 on 96 threads, 4K: sys 21303 -> 11353 s (-46.7%)",
            Some(0.467),
            time_per_op(t2, "baseline_ops_per_s"),
            time_per_op(t2, "cluster_ops_per_s"),
            true,
        )
        .needs_parallel(
            t2["parallelism"]["baseline"]
                .as_f64()
                .unwrap_or(0.0)
                .min(t2["parallelism"]["cluster"].as_f64().unwrap_or(0.0)),
            2.0,
        ),
        figure(
            "time per slot alloc+free, 1 thread",
            "make -j6 on 96 threads: sys 5258 -> 5235 s (-0.3%)",
            Some(0.003),
            time_per_op(&tput[0], "baseline_ops_per_s"),
            time_per_op(&tput[0], "cluster_ops_per_s"),
            true,
        ),
    ];
    let mut panel = vec![
        group("order-4 fallback", &figs[0]),
        group("alloc time, 2 thr", &figs[1]),
    ];
    let mut details = json!({
        "throughput": tput,
        "fragmentation": frag,
        "nproc": nproc,
    });
    // The writeback-heavy usemem: the budget a quarter of the working set,
    // the pool held at its default share, so most pages go to the device.
    let um = ctx.usemem_arms(
        "001 usemem writeback, cluster vs baseline allocator",
        &[
            (
                "baseline allocator",
                vec![
                    "--swap-allocator".into(),
                    "baseline".into(),
                    "--fixed-pool-share".into(),
                ],
            ),
            (
                "cluster allocator",
                vec![
                    "--swap-allocator".into(),
                    "cluster".into(),
                    "--fixed-pool-share".into(),
                ],
            ),
        ],
        ctx.sz.wb_size,
        ctx.sz.wb_budget,
    );
    let mut why_wb = String::new();
    if let Some(um) = um {
        let sys = |r: &[Value]| med(r, |v| num(v, &["sys_s"]));
        let cpu = |r: &[Value]| med(r, |v| num(v, &["wait4_cpu_s"]));
        let wb = |r: &[Value]| med(r, |v| num(v, &["stats", "written_back_pages"]));
        let el = |r: &[Value]| med(r, |v| num(v, &["elapsed_s"]));
        let f = figure(
            "usemem sys time, writeback-heavy",
            "make -j96, 768M memcg, 4K: sys 73578 -> 33314 s (-54.7%)",
            Some(0.547),
            sys(&um[0]),
            sys(&um[1]),
            true,
        )
        .within(spread(&[&um[0], &um[1]], |v| num(v, &["sys_s"])));
        panel.push(group("usemem sys", &f));
        figs.push(f);
        // How much of the run the allocator can be: each written-back run
        // is at most one allocation, priced at the 1-thread rate.
        let ns_op = 1e9 / tput[0]["cluster_ops_per_s"].as_f64().unwrap_or(f64::NAN);
        let share = wb(&um[1]) * ns_op * 1e-9 / cpu(&um[1]).max(1e-9);
        why_wb = format!(
            " Under usemem the allocator is user-space code called by one or two threads \
             (the shrinker, and a store's direct reclaim): {:.0} pages written back in \
             {:.2} s cost at most {:.3}% of the run's CPU at {ns_op:.0} ns per alloc+free, \
             and sys time is the I/O, faults and zaps, which no allocator changes \
             (sys {:.2} s baseline, {:.2} s cluster).",
            wb(&um[1]),
            el(&um[1]),
            share * 100.0,
            sys(&um[0]),
            sys(&um[1])
        );
        details["usemem"] = json!({
            "sys_s": {"baseline": sys(&um[0]), "cluster": sys(&um[1])},
            "wait4_cpu_s": {"baseline": cpu(&um[0]), "cluster": cpu(&um[1])},
            "elapsed_s": {"baseline": el(&um[0]), "cluster": el(&um[1])},
            "written_back_pages": {"baseline": wb(&um[0]), "cluster": wb(&um[1])},
            "allocator_cpu_share_bound": share,
        });
    }
    let par2 = t2["parallelism"]["baseline"].as_f64().unwrap_or(0.0);
    let holds = overall(&figs);
    let why = format!(
        "Fragmentation: a cluster serves one order while in use, so order-4 runs stay \
         whole: fallback {:.1}% (cluster) vs {:.1}% (global bitmap) at 85% fill. Contention: \
         at 2 threads the global lock's cache line and bitmap move between the cores on \
         every operation (cluster {:.2}x the baseline's rate, baseline parallelism {par2:.2} \
         of 2); at 1 thread there is nothing to contend and the cluster path's extra \
         loads cost {:.0}%. Oversubscribed ({over} threads on {nproc} CPUs): {:.2}x.{why_wb}",
        rates[0] * 100.0,
        rates[1] * 100.0,
        tput[1]["cluster_over_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN),
        (1.0 - tput[0]["cluster_over_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN))
            * 100.0,
        tput[2]["cluster_over_baseline"]
            .as_f64()
            .unwrap_or(f64::NAN),
    );
    Ok(SeedRow {
        seed: "001",
        file: "001_f72291a192892ce8.txt",
        topic: "swap slot allocator: per-cluster locks",
        claim: "the device lock only for cluster-list moves: less lock contention (sys time) \
                and less mTHP fragmentation",
        ablation: format!(
            "cluster allocator vs one bitmap behind one lock: alloc+free rate at 1, 2 and \
             {over} threads; order-4 fallback at 85% fill; usemem writeback with the device \
             on each"
        ),
        figures: figs,
        holds,
        why,
        details,
        panel,
    })
}

// ----------------------------------------------------------- 002 batching

const BATCHES: [usize; 5] = [1, 4, 8, 16, 32];

fn seed002(ctx: &mut Ctx) -> Result<SeedRow> {
    // 128 KiB folios: a folio is the most one batch can hold, so with the
    // front end's 64 KiB chunks 16 and 32 would be the same batch.
    let order = 5u32;
    let fpages = 1usize << order;
    let npages = (ctx.sz.case_bytes / PAGE_SIZE).next_multiple_of(fpages);
    let pages = engine::gen_pages(Pattern::Text, npages, 1)?;
    let mut mbps: Vec<Vec<f64>> = vec![Vec::new(); BATCHES.len()];
    let mut ratios: Vec<[f64; BATCHES.len()]> = Vec::new();
    // Process CPU over wall time while storing: 2.0 when both compressing
    // threads had a core throughout. Batching can only gain what it gets.
    let mut par: Vec<Vec<f64>> = vec![Vec::new(); BATCHES.len()];
    let mut faults = Faults::default();
    for r in 0..ctx.sz.rounds {
        let mut round = [f64::NAN; BATCHES.len()];
        for k in 0..BATCHES.len() {
            let i = (k + r) % BATCHES.len();
            let z = engine::zswap("lz4", 2, BATCHES[i])?;
            let (c0, t0) = (process_cpu(), Instant::now());
            round[i] = engine::store_all(&z, &pages, order, &mut faults);
            par[i].push((process_cpu() - c0) / t0.elapsed().as_secs_f64().max(1e-9));
            mbps[i].push(round[i]);
            engine::load_all(&z, &pages, order, &mut faults);
        }
        ratios.push(round.map(|x| x / round[0]));
    }
    // Each batch size against batch 1 of the same round, median over rounds.
    let rel: Vec<f64> = (0..BATCHES.len())
        .map(|i| median(ratios.iter().map(|r| r[i]).collect()))
        .collect();
    let par: Vec<f64> = par.into_iter().map(median).collect();
    ctx.faults(
        "002 batched store/load",
        (npages * ctx.sz.rounds * BATCHES.len()) as u64,
        &faults,
    );
    let store: Vec<f64> = mbps.into_iter().map(median).collect();
    let seed_tp = "usemem30, 4K folios, deflate-iaa: 4,470,466 KB/s (no batching) -> 6,363,045 \
                   (batch 32): +42%";
    let seed_sys = "same runs: sys 2,819.29 s -> 1,970.79 s: -30%";
    let mut figs = vec![figure_paired(
        "store MB/s, batch 32 vs 1 (2 workers, 128K folios)",
        seed_tp,
        Some(0.42),
        store[0],
        store[4],
        rel[4],
        false,
    )
    .needs_parallel(par[4], 2.0)];
    let curve = |v: &[f64]| -> Vec<(String, f64)> {
        BATCHES
            .iter()
            .zip(v)
            .map(|(b, x)| (format!("{b}"), x / v[0] * 100.0))
            .collect()
    };
    let mut panel = vec![Group {
        label: "store MB/s".into(),
        bars: BATCHES
            .iter()
            .zip(&rel)
            .map(|(b, x)| (format!("{b}"), x * 100.0))
            .collect(),
        seed_marks: vec![142.0],
        mark_bar: 4,
    }];
    let mut details = json!({
        "batch_sizes": BATCHES,
        "store_mbps": store,
        "store_parallelism": par,
        "store_vs_batch1": rel,
        "folio_bytes": fpages * PAGE_SIZE,
        "workers": 2,
    });
    let arms: Vec<(String, Vec<String>)> = BATCHES
        .iter()
        .map(|b| {
            (
                format!("batch {b}"),
                vec!["--batch-size".into(), b.to_string()],
            )
        })
        .collect();
    let arms_ref: Vec<(&str, Vec<String>)> =
        arms.iter().map(|(n, a)| (n.as_str(), a.clone())).collect();
    let um = ctx.usemem_arms(
        "002 usemem per batch size",
        &arms_ref,
        ctx.sz.usemem_size,
        ctx.sz.usemem_budget,
    );
    let mut um_tp = vec![];
    if let Some(um) = um {
        um_tp = um
            .iter()
            .map(|r| med(r, |v| num(v, &["throughput_mbps"])))
            .collect::<Vec<f64>>();
        let sys: Vec<f64> = um.iter().map(|r| med(r, |v| num(v, &["sys_s"]))).collect();
        let cpu: Vec<f64> = um
            .iter()
            .map(|r| med(r, |v| num(v, &["wait4_cpu_s"])))
            .collect();
        let f_tp = figure(
            "usemem MB/s, batch 32 vs 1",
            seed_tp,
            Some(0.42),
            um_tp[0],
            um_tp[4],
            false,
        )
        .within(spread(&[&um[0], &um[4]], |v| num(v, &["throughput_mbps"])));
        let f_sys = figure(
            "usemem sys time, batch 32 vs 1",
            seed_sys,
            Some(0.30),
            sys[0],
            sys[4],
            true,
        )
        .within(spread(&[&um[0], &um[4]], |v| num(v, &["sys_s"])));
        panel.push(Group {
            label: "usemem MB/s".into(),
            bars: curve(&um_tp),
            seed_marks: vec![142.0],
            mark_bar: 4,
        });
        panel.push(Group {
            label: "usemem sys".into(),
            bars: curve(&sys),
            seed_marks: vec![70.0],
            mark_bar: 4,
        });
        figs.push(f_tp);
        figs.push(f_sys);
        details["usemem"] = json!({
            "throughput_mbps": um_tp, "sys_s": sys, "wait4_cpu_s": cpu,
            "chunk_bytes": 65536,
        });
    }
    // The default (32) against the curve: the best batch size by the
    // paired ratios, and how far 32 is from it.
    let (bi, bx) = rel
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map_or((0, f64::NAN), |(i, x)| (i, *x));
    let bb = BATCHES[bi];
    let gap = rel[4] / bx - 1.0;
    let default_note = format!(
        "Default compress-batchsize 32: the best store batch here is {bb} ({bx:.2}x batch 1) \
         and 32 is {} ({:+.1}%). A batch never exceeds a folio, so on the front end's 64 KiB \
         chunks 32 acts as 16; what a batch costs is one hand-off per helper, so the largest \
         batch is the default unless a smaller one measures better beyond noise{}.",
        if gap > -NOISE {
            "within noise of it"
        } else {
            "below it"
        },
        gap * 100.0,
        if um_tp.len() == BATCHES.len() {
            let ub = um_tp
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(i, _)| BATCHES[i]);
            format!(" (usemem's fastest: batch {ub})")
        } else {
            String::new()
        }
    );
    details["default_batch"] = json!({
        "default": uzswap::compress::MAX_BATCH,
        "best_store_batch": bb,
        "batch32_vs_best": rel[4] / bx,
        "note": default_note,
    });
    let holds = overall(&figs);
    let why = format!(
        "Batching here is software: a batch's pages are spread over the compressing \
         threads, so its gain is bounded by the free cores (2 here, shared) and eaten by \
         cross-CPU wake-ups of 15-100 us per hand-off; the seed's gain comes from IAA \
         hardware compressing a batch's pages in parallel at 112 cores. Batch 32 stores at \
         {:.2}x batch 1 in process, with {:.2} of 2 threads running on average (batch 1: \
         {:.2}); a helper that claimed a page and lost its core holds up the whole batch. \
         {default_note}",
        figs[0].ratio, par[4], par[0]
    );
    Ok(SeedRow {
        seed: "002",
        file: "002_3569f8a62a768081.txt",
        topic: "compress batching (vm.compress-batchsize)",
        claim: "compressing a batch of pages in parallel raises usemem throughput up to 40% and \
                cuts sys time up to 30%",
        ablation: "batch size 1, 4, 8, 16, 32: in-process store of 128 KiB folios with 2 \
                   compressing threads (lz4, text), and usemem with each batch size"
            .into(),
        figures: figs,
        holds,
        why,
        details,
        panel,
    })
}

// ----------------------------------------------------------- 003 shrinker

fn seed003(ctx: &mut Ctx) -> Result<SeedRow> {
    let a = shrinker::Args {
        hot: ctx.sz.hot,
        cold_factor: 4,
        budget_percent: 150,
        passes: ctx.sz.passes,
        cold_percent: 1,
        pattern: "text".into(),
        compressor: "lz4".into(),
        swap_dir: ctx.swap_dir.clone(),
        writeback_plain: false,
        format_pages: 1,
        json: false,
    };
    // Arms: off, on, on without the protected region.
    let modes = [(false, true), (true, true), (true, false)];
    let mut runs: Vec<Vec<shrinker::RunFigures>> = vec![Vec::new(), Vec::new(), Vec::new()];
    for r in 0..ctx.sz.rounds {
        for k in 0..modes.len() {
            let i = (k + r) % modes.len();
            runs[i].push(shrinker::run_once(
                &a,
                Pattern::Text,
                modes[i].0,
                modes[i].1,
            )?);
        }
    }
    let bad: u64 = runs.iter().flatten().map(|r| r.mismatches).sum();
    let refaulted: u64 = runs.iter().flatten().map(|r| r.refaults).sum();
    ctx.check(
        "003 hot/cold model: refaulted pages verified",
        bad == 0 && refaulted > 0,
        format!("{refaulted} refaults checked against their pattern, {bad} differed"),
    );
    let m = |i: usize, f: fn(&shrinker::RunFigures) -> f64| median(runs[i].iter().map(f).collect());
    let cpu = |i| m(i, |r| r.cpu_s);
    let refaults = |i| m(i, |r| r.refaults as f64);
    let wb = |i| m(i, |r| r.written_back_pages as f64);
    let stops = |i| m(i, |r| r.stop_protected as f64);
    let seed_cpu = "sys 541.65 -> 461.15 s (-14.9%); colder benchmark 769.31 -> 517.44 s (-32.7%)";
    let mut figs = vec![
        figure(
            "hot/cold CPU s, shrinker on vs off",
            seed_cpu,
            Some(0.14),
            cpu(0),
            cpu(1),
            true,
        ),
        figure(
            "hot/cold refaults, shrinker on vs off",
            "not given (the heuristics exist to avoid extra refaults)",
            Some(0.0),
            refaults(0),
            refaults(1),
            true,
        ),
    ];
    let mut g = group("hot/cold CPU", &figs[0]);
    g.bars
        .push(("on, unprotected".into(), cpu(2) / cpu(0) * 100.0));
    g.seed_marks = vec![85.1, 67.3];
    let mut gr = group("refaults", &figs[1]);
    gr.bars
        .push(("on, unprotected".into(), refaults(2) / refaults(0) * 100.0));
    let mut panel = vec![g, gr];
    let mut details = json!({
        "hot_pages": a.hot, "cold_factor": a.cold_factor, "passes": a.passes,
        "model": {
            "cpu_s": {"off": cpu(0), "on": cpu(1), "on_unprotected": cpu(2)},
            "refaults": {"off": refaults(0), "on": refaults(1), "on_unprotected": refaults(2)},
            "written_back_pages": {"off": wb(0), "on": wb(1), "on_unprotected": wb(2)},
            "shrink_stop_protected": {"on": stops(1), "on_unprotected": stops(2)},
        },
    });
    let um = ctx.usemem_arms(
        "003 usemem writeback, shrinker off vs on",
        &[
            (
                "shrinker off",
                vec!["--no-shrinker".into(), "--access".into(), "skew".into()],
            ),
            ("shrinker on", vec!["--access".into(), "skew".into()]),
            (
                "shrinker on, unprotected",
                vec![
                    "--no-shrinker-protect".into(),
                    "--access".into(),
                    "skew".into(),
                ],
            ),
        ],
        ctx.sz.usemem_size,
        ctx.sz.usemem_budget,
    );
    let mut why_um = String::new();
    if let Some(um) = um {
        let f = |i: usize, p: &[&str]| med(&um[i], |v| num(v, p));
        let sys = |i| f(i, &["sys_s"]);
        let rf = |i| f(i, &["stats", "pgmajfault"]);
        let wbp = |i| f(i, &["stats", "written_back_pages"]);
        let fs = figure(
            "usemem sys time, shrinker on vs off",
            seed_cpu,
            Some(0.14),
            sys(0),
            sys(1),
            true,
        )
        .within(spread(&[&um[0], &um[1]], |v| num(v, &["sys_s"])));
        let mut g = group("usemem sys", &fs);
        g.bars
            .push(("on, unprotected".into(), sys(2) / sys(0) * 100.0));
        g.seed_marks = vec![85.1, 67.3];
        panel.push(g);
        figs.push(fs);
        why_um = format!(
            " Under usemem (skewed reads, writeback on) the pool is already held to its \
             share of the budget by limit-driven writeback, so the shrinker only moves when \
             it writes back: sys {:.2} s off, {:.2} s on, {:.2} s unprotected; faults \
             {:.0} / {:.0} / {:.0}; written back {:.0} / {:.0} / {:.0} pages.",
            sys(0),
            sys(1),
            sys(2),
            rf(0),
            rf(1),
            rf(2),
            wbp(0),
            wbp(1),
            wbp(2)
        );
        details["usemem"] = json!({
            "sys_s": {"off": sys(0), "on": sys(1), "on_unprotected": sys(2)},
            "pgmajfault": {"off": rf(0), "on": rf(1), "on_unprotected": rf(2)},
            "written_back_pages": {"off": wbp(0), "on": wbp(1), "on_unprotected": wbp(2)},
            "elapsed_s": {"off": f(0, &["elapsed_s"]), "on": f(1, &["elapsed_s"]),
                "on_unprotected": f(2, &["elapsed_s"])},
        });
    }
    let holds = overall(&figs);
    let why = format!(
        "With the pool limit set high (90% of the budget, the seed's case), cold pages \
         fill the pool and squeeze the hot set out; the shrinker writes them back under \
         pressure: CPU {:.3} -> {:.3} s, refaults {:.0} -> {:.0}, written back {:.0} -> \
         {:.0}. Without the protected region it writes back warm entries too: CPU {:.3} s, \
         refaults {:.0}, written back {:.0} (the region stopped {:.0} shrinks).{why_um}",
        cpu(0),
        cpu(1),
        refaults(0),
        refaults(1),
        wb(0),
        wb(1),
        cpu(2),
        refaults(2),
        wb(2),
        stops(1),
    );
    Ok(SeedRow {
        seed: "003",
        file: "003_d38cba233f10e7d5.txt",
        topic: "shrinker on memory pressure",
        claim: "writing cold pool pages back under memory pressure cuts kernel CPU 14-15%, \
                32-35% with more cold memory",
        ablation: "shrinker off / on / on without the protected region: the hot/cold model \
                   (hot set + 4x cold, pool limit 90% of the budget) and usemem with \
                   writeback and skewed reads"
            .into(),
        figures: figs,
        holds,
        why,
        details,
        panel,
    })
}

// ------------------------------------------------- 004 same-filled pages

/// `npages` pages of which `share` are same-filled (one in four of those a
/// repeated non-zero word, within the 17-40% the seed quotes), the rest
/// text; which pages is a fixed hash of the index.
fn share_pages(npages: usize, share: f64) -> Result<Vec<u8>> {
    let mut v = engine::gen_pages(Pattern::Text, npages, 1)?;
    for (i, p) in v.chunks_exact_mut(PAGE_SIZE).enumerate() {
        let h = (i as u64 ^ 0x9e37_79b9).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
        if (h % 100_000) as f64 >= share * 100_000.0 {
            continue;
        }
        let word: u64 = if h & 3 == 0 { 0x5a5a_0f0f_1234_abcd } else { 0 };
        for w in p.chunks_exact_mut(8) {
            w.copy_from_slice(&word.to_ne_bytes());
        }
    }
    Ok(v)
}

/// One share of same-filled pages, on vs off: paired store and load CPU
/// time per folio, the pool each store pass left, the pages' costs.
fn same_case(rounds: usize, npages: usize, share: f64, faults: &mut Faults) -> Result<Value> {
    let folios = npages / 16;
    let bytes = npages * PAGE_SIZE;
    let pages = share_pages(npages, share)?;
    let (mut st, mut ldr, mut cpu) = (vec![], vec![], vec![]);
    let mut pool = (0u64, 0u64);
    let mut same_pages = 0u64;
    let (mut ns_on, mut ns_off) = (vec![], vec![]);
    for _ in 0..rounds {
        let mk = |same: bool| {
            Zswap::new(uzswap::ZswapConfig {
                compressor: "lz4".into(),
                workers: 1,
                same_filled: same,
                store_incompressible: true,
                psi_trigger: None,
                ..Default::default()
            })
        };
        let (zon, zoff) = (mk(true)?, mk(false)?);
        let (mut fon, mut foff) = (Faults::default(), Faults::default());
        let (st_on, st_off) = engine::paired(
            folios,
            |f| engine::store_one_by(CPU, &zon, &pages, 4, f, &mut fon),
            |f| engine::store_one_by(CPU, &zoff, &pages, 4, f, &mut foff),
        );
        // The pool as the stores left it (loads are exclusive).
        let (son, soff) = (zon.stats(), zoff.stats());
        pool = (soff.pool_total_size, son.pool_total_size);
        same_pages = son.same_filled_pages;
        let (mut bon, mut boff) = (vec![0u8; 16 * PAGE_SIZE], vec![0u8; 16 * PAGE_SIZE]);
        let (ld_on, ld_off) = engine::paired(
            folios,
            |f| engine::load_one_by(CPU, &zon, &pages, 4, f, &mut bon, &mut fon),
            |f| engine::load_one_by(CPU, &zoff, &pages, 4, f, &mut boff, &mut foff),
        );
        for x in [fon, foff] {
            faults.mismatches += x.mismatches;
            faults.failures += x.failures;
        }
        let secs = |d: Duration| d.as_secs_f64().max(1e-9);
        st.push(secs(st_off) / secs(st_on));
        ldr.push(secs(ld_off) / secs(ld_on));
        cpu.push(secs(st_on + ld_on) / secs(st_off + ld_off));
        ns_on.push(secs(st_on) * 1e9 / npages as f64);
        ns_off.push(secs(st_off) * 1e9 / npages as f64);
    }
    let (non, noff) = (median(ns_on), median(ns_off));
    Ok(json!({
        "same_filled_share": share,
        "same_filled_pages_stored": same_pages,
        "store_cpu_ns_per_page": {"off": noff, "on": non},
        "store_mbps_cpu": {"off": bytes as f64 / noff / npages as f64 * 1e3,
            "on": bytes as f64 / non / npages as f64 * 1e3},
        "store_speedup": median(st),
        "load_speedup": median(ldr),
        "cpu_on_over_off": median(cpu),
        "pool_total_size": {"off": pool.0, "on": pool.1},
    }))
}

fn seed004(ctx: &mut Ctx) -> Result<SeedRow> {
    let npages = (ctx.sz.case_bytes / PAGE_SIZE).next_multiple_of(16);
    let bytes = npages * PAGE_SIZE;
    let points = [
        (
            0.015,
            "kernel build, ~1.5% same-filled: removing the handling gained 1.3% (optimizing \
             zero pages 1.4%)",
            -0.013,
        ),
        (
            0.10,
            "~10% same-filled: store path ~1% apart either way (perf); the seed estimates \
             2-3% for on from the original patch's 19-32% per same-filled page",
            0.02,
        ),
        (
            0.40,
            "40% (the top of the seed's 17-40% non-zero data): not measured in the seed; its \
             rule (share x 19-32%) gives 8-13%",
            0.08,
        ),
    ];
    let mut figs = Vec::new();
    let mut panel = Vec::new();
    let mut det = Vec::new();
    let mut faults = Faults::default();
    for (share, seed_fig, seed_eff) in points {
        let d = same_case(ctx.sz.rounds, npages, share, &mut faults)?;
        let mb = |k: &str| d["store_mbps_cpu"][k].as_f64().unwrap_or(f64::NAN);
        let pool = |k: &str| d["pool_total_size"][k].as_f64().unwrap_or(f64::NAN);
        let label = format!("{:.1}%", share * 100.0);
        let f = figure_paired(
            &format!("store MB/s (of CPU time) at {label} same-filled, on vs off"),
            seed_fig,
            Some(seed_eff),
            mb("off"),
            mb("on"),
            d["store_speedup"].as_f64().unwrap_or(f64::NAN),
            false,
        );
        let mut g = group(&format!("{label} store"), &f);
        g.bars
            .push(("pool".into(), pool("on") / pool("off") * 100.0));
        panel.push(g);
        figs.push(f);
        det.push(d);
    }
    // The two ends, for the mechanism: all text (what the precheck alone
    // costs) and all same-filled (what a same-filled page saves).
    let ends = [0.0, 1.0].map(|share| same_case(ctx.sz.rounds, npages / 4, share, &mut faults));
    let [text, same] = ends;
    let (text, same) = (text?, same?);
    ctx.faults(
        "004 same-filled on/off store/load",
        // On and off, every round: the three points and the two ends.
        (ctx.sz.rounds * 2 * (points.len() * npages + 2 * (npages / 4))) as u64,
        &faults,
    );
    let holds = overall(&figs);
    let d = |i: usize, k: &str| det[i][k].as_f64().unwrap_or(f64::NAN);
    let pool = |i: usize, k: &str| det[i]["pool_total_size"][k].as_f64().unwrap_or(f64::NAN);
    let why = format!(
        "A same-filled page is found by a scan from the front, a cache line at a time, that \
         stops at the first line that differs (a text page costs its first line, which \
         compression reads next anyway) and is kept as \
         the word: no compression, no pool object, no checksum. Store speed on/off \
         {:.2}x / {:.2}x / {:.2}x and load {:.2}x / {:.2}x / {:.2}x at 1.5 / 10 / 40%; \
         CPU on/off {:.2} / {:.2} / {:.2}; pool {:.0}% / {:.0}% / {:.0}% of off's. \
         Measured at the ends: the precheck costs a text page {:+.1}% of its {:.0} ns \
         store (all text, on vs off); a same-filled page stores in {:.0} ns kept as a word \
         and {:.0} ns compressed (all same-filled), lz4's best case: a few bytes out, a \
         small pool object. So the store gain is the same-filled share times a saving of \
         {:.0} ns against {:.0} ns per text page, far from the seed's 19-32% per page; \
         loads gain more (a fill against decompression and checksum: {:.2}x at 100%).",
        d(0, "store_speedup"),
        d(1, "store_speedup"),
        d(2, "store_speedup"),
        d(0, "load_speedup"),
        d(1, "load_speedup"),
        d(2, "load_speedup"),
        d(0, "cpu_on_over_off"),
        d(1, "cpu_on_over_off"),
        d(2, "cpu_on_over_off"),
        pool(0, "on") / pool(0, "off") * 100.0,
        pool(1, "on") / pool(1, "off") * 100.0,
        pool(2, "on") / pool(2, "off") * 100.0,
        (1.0 / text["store_speedup"].as_f64().unwrap_or(f64::NAN) - 1.0) * 100.0,
        text["store_cpu_ns_per_page"]["off"]
            .as_f64()
            .unwrap_or(f64::NAN),
        same["store_cpu_ns_per_page"]["on"]
            .as_f64()
            .unwrap_or(f64::NAN),
        same["store_cpu_ns_per_page"]["off"]
            .as_f64()
            .unwrap_or(f64::NAN),
        same["store_cpu_ns_per_page"]["off"]
            .as_f64()
            .unwrap_or(f64::NAN)
            - same["store_cpu_ns_per_page"]["on"]
                .as_f64()
                .unwrap_or(f64::NAN),
        text["store_cpu_ns_per_page"]["on"]
            .as_f64()
            .unwrap_or(f64::NAN),
        same["load_speedup"].as_f64().unwrap_or(f64::NAN),
    );
    Ok(SeedRow {
        seed: "004",
        file: "004_65440196496a2528.txt",
        topic: "same-filled pages",
        claim: "same-filled handling is worth keeping: cheap where such pages are rare \
                (1.5%), a gain in cycles and memory as they grow (10%, 17-40%)",
        ablation: "same-filled detection on vs off (off: every page compressed) at 1.5%, 10% \
                   and 40% same-filled pages (a quarter of them non-zero), text otherwise; \
                   64 KiB folios, lz4, 1 thread"
            .into(),
        figures: figs,
        holds,
        why,
        details: json!({"case_bytes": bytes, "points": det, "all_text": text,
            "all_same_filled": same}),
        panel,
    })
}

// ---------------------------------------------------------------- report

fn markdown(rows: &[SeedRow]) -> String {
    let mut s = String::from(
        "| seed | claim (the seed's figure) | uzswap: on vs off, same run | effect | holds? |\n\
         |---|---|---|---:|---|\n",
    );
    for r in rows {
        for (i, f) in r.figures.iter().enumerate() {
            let seed = if i == 0 {
                format!("{} {} (`{SEED_DIR}{}`)", r.seed, r.topic, r.file)
            } else {
                String::new()
            };
            s += &format!(
                "| {seed} | {} | {}: {} -> {} ({:.2}x) | {} | {} |\n",
                f.seed_figure,
                f.metric,
                fmt_val(f.off),
                fmt_val(f.on),
                f.ratio,
                pct(f.effect),
                f.verdict
            );
        }
        s += &format!("| | **{}: {}** | | | **{}** |\n", r.seed, r.claim, r.holds);
    }
    s
}

fn fmt_val(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x == 0.0 {
        "0".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else if x.abs() >= 0.01 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// A panel per seed: bar groups as a percentage of "off" (100), the seed's
/// figure(s) for "on" as red marks across the group.
fn plot(path: &std::path::Path, rows: &[SeedRow]) -> Result<()> {
    use plotters::prelude::*;
    const OFF: RGBColor = RGBColor(127, 127, 127);
    const ON: RGBColor = RGBColor(31, 119, 180);
    const MORE: RGBColor = RGBColor(255, 127, 14);
    let root = BitMapBackend::new(path, (2500, 700)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, rows.len().max(1)));
    for (area, row) in areas.iter().zip(rows) {
        let groups = &row.panel;
        let width: f64 = groups
            .iter()
            .map(|g| g.bars.len() as f64 + 1.0)
            .sum::<f64>();
        let ymax = groups
            .iter()
            .flat_map(|g| {
                g.bars
                    .iter()
                    .map(|b| b.1)
                    .chain(g.seed_marks.iter().copied())
            })
            .filter(|x| x.is_finite())
            .fold(120.0f64, f64::max)
            * 1.2;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{} {}: {}", row.seed, row.topic, row.holds),
                ("sans-serif", 17),
            )
            .margin(10)
            .x_label_area_size(45)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..width.max(1.0), 0.0..ymax)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .y_desc("% of off")
            .y_label_style(("sans-serif", 13))
            .draw()?;
        let mut x0 = 0.5;
        for g in groups {
            for (bi, (name, y)) in g.bars.iter().enumerate() {
                if !y.is_finite() {
                    continue;
                }
                let c = if bi == 0 {
                    OFF
                } else if bi == g.mark_bar {
                    ON
                } else {
                    MORE
                };
                let x = x0 + bi as f64;
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x, 0.0), (x + 0.85, *y)],
                    c.filled(),
                )))?;
                chart.draw_series(std::iter::once(Text::new(
                    format!("{name} {y:.0}"),
                    (x + 0.1, y + ymax * 0.01),
                    ("sans-serif", 11)
                        .into_font()
                        .transform(FontTransform::Rotate270),
                )))?;
            }
            // The seed's figure for "on": across the "on" bar, in red.
            let xm = x0 + g.mark_bar as f64;
            for m in &g.seed_marks {
                chart.draw_series(LineSeries::new(
                    [(xm - 0.15, *m), (xm + 1.0, *m)],
                    RED.stroke_width(3),
                ))?;
            }
            let (px, py) = chart.backend_coord(&(x0, 0.0));
            let (ox, oy) = area.get_base_pixel();
            area.draw_text(
                &g.label,
                &("sans-serif", 13).into_text_style(area),
                (px - ox, py - oy + 6),
            )?;
            x0 += g.bars.len() as f64 + 1.0;
        }
        area.draw_text(
            "grey: off, blue: on (orange: other settings), red: the seed's figure for on",
            &("sans-serif", 12).into_text_style(area),
            (65, 32),
        )?;
    }
    root.present()?;
    Ok(())
}

pub fn run(a: Args) -> Result<()> {
    let t0 = Instant::now();
    let load_before = alloc::load_avg();
    let sz = sizes(&a);
    let uffd = probe_uffd();
    if let Err(why) = &uffd {
        println!("usemem cells will be skipped: userfaultfd unavailable: {why}");
    }
    let mut ctx = Ctx {
        sz,
        swap_dir: a.swap_dir.clone(),
        uffd,
        checks: Vec::new(),
        skipped: Vec::new(),
        cells: 0,
    };
    println!(
        "bench seeds ({}): {} round(s) per comparison, arms alternating",
        ctx.sz.mode, ctx.sz.rounds
    );
    let mut rows = Vec::new();
    type RowFn = fn(&mut Ctx) -> Result<SeedRow>;
    let all: [(&str, RowFn); 5] = [
        ("000", seed000),
        ("001", seed001),
        ("002", seed002),
        ("003", seed003),
        ("004", seed004),
    ];
    for (name, f) in all {
        let t = Instant::now();
        let row = f(&mut ctx).with_context(|| format!("seed {name}"))?;
        println!(
            "seed {name} ({:.1} s): {} -- {}",
            t.elapsed().as_secs_f64(),
            row.holds,
            row.why
        );
        rows.push(row);
    }
    let wall = t0.elapsed().as_secs_f64();
    // Wall-clock figures (usemem throughput, batching) need the CPUs they
    // ask for; say so when others had them.
    let nproc = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let load_after = alloc::load_avg();
    let mut warnings = Vec::new();
    for (when, l) in [("before", load_before), ("after", load_after)] {
        if let Some(l) = l.filter(|l| l[0] > nproc) {
            warnings.push(format!(
                "load average {:.1} on {nproc} CPUs {when} the run: wall-clock figures \
                 (usemem MB/s, batching) were taken with the CPUs shared",
                l[0]
            ));
        }
    }
    for w in &warnings {
        println!("warning: {w}");
    }
    println!("\n{}", markdown(&rows));
    let failed = ctx.checks.iter().filter(|c| !c.passed).count();
    println!(
        "checks: {} of {} passed; {} usemem cells; {} skipped; {wall:.0} s",
        ctx.checks.len() - failed,
        ctx.checks.len(),
        ctx.cells,
        ctx.skipped.len()
    );
    if let Some(p) = &a.plot {
        plot(p, &rows).with_context(|| format!("draw {}", p.display()))?;
        println!("plot: {}", p.display());
    }
    if a.json {
        let command: String = std::iter::once("uzswap".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        println!(
            "{}",
            json!({
                "bench": "seeds",
                "mode": ctx.sz.mode,
                "command": command,
                "machine": compare::machine(),
                "load_avg_before": load_before,
                "load_avg_after": load_after,
                "warnings": warnings,
                "rounds": ctx.sz.rounds,
                "noise": NOISE,
                "wall_s": wall,
                "seeds": rows,
                "checks": ctx.checks,
                "all_checks_passed": failed == 0,
                "skipped": ctx.skipped,
                "usemem_cells": ctx.cells,
            })
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} content checks failed", ctx.checks.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts() {
        assert_eq!(verdict(0.42, 0.5), "holds");
        assert_eq!(verdict(0.42, 0.1), "holds partly (smaller effect)");
        assert_eq!(verdict(0.42, 0.01), "does not hold (no measurable effect)");
        assert_eq!(verdict(0.42, -0.2), "does not hold (the opposite)");
        // A claim that the mechanism costs little.
        assert_eq!(verdict(-0.013, -0.02), "holds");
        assert_eq!(verdict(-0.013, 0.3), "holds");
        assert_eq!(verdict(-0.013, -0.05), "does not hold");
        assert_eq!(verdict(0.42, f64::NAN), "not measured");
    }

    #[test]
    fn figures_read_in_the_claims_direction() {
        let f = figure("sys", "", Some(0.3), 10.0, 7.0, true);
        assert!((f.effect - 0.3).abs() < 1e-9);
        assert_eq!(f.verdict, "holds");
        let f = figure("tp", "", Some(0.42), 100.0, 120.0, false);
        assert!((f.effect - 0.2).abs() < 1e-9);
        assert_eq!(f.verdict, "holds partly (smaller effect)");
    }

    #[test]
    fn share_pages_hit_their_share() {
        let n = 20_000;
        for share in [0.015, 0.10, 0.40] {
            let v = share_pages(n, share).unwrap();
            let same = v
                .chunks_exact(PAGE_SIZE)
                .filter(|p| p.chunks_exact(8).all(|w| w == &p[..8]))
                .count() as f64
                / n as f64;
            assert!((same - share).abs() < 0.01, "{share}: {same}");
        }
    }
}
