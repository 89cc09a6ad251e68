//! `uzswap bench programs`: real programs (Python, the sqlite3 shell, GNU
//! sort, a multi-threaded C program, redis with a BGSAVE fork), each run
//! in cells:
//! 1. plain, no limit: the reference elapsed time, peak RSS and output;
//! 2. under `uzswap run` with a budget of a share (half) of the plain
//!    run's peak RSS;
//! 3. under each kernel backend (zswap with lzo, zram with lz4) in a memory
//!    cgroup whose real footprint, the cgroup's high-water mark plus what it
//!    was not charged for (zswap's pool under cgroup v1, zram's device; see
//!    `kernel::footprint`), less page cache, matches the uzswap cell's
//!    (`matched_bytes`: the nominal uzswap cell's page cache is whatever no
//!    limit made it give back);
//! 4. for each kernel cell that finished, uzswap at that cell's memory
//!    (`uzswap-<compressor>-eqmem-<kernel cell>`, as `bench compare` has
//!    them): in a memory cgroup held to the kernel cell's footprint, so
//!    that the kernel reclaims its page cache as it did the kernel cell's,
//!    with a budget of that footprint less uzswap's own memory
//!    (`eqmem_budget`), fitted to the limit over up to three tries.
//!    The kernel cell is matched to the uzswap cell's footprint less page
//!    cache, but the kernel cannot always run there (its OOM killer ends
//!    it, and it is reported at more memory), and it keeps what page cache
//!    its limit leaves room for; the equal-memory cell is the one at the
//!    kernel's whole footprint, page cache and all. The target is given
//!    against both.
//! 5. with `--repeat N`, each equal-memory cell and its kernel cell N - 1
//!    more times, in turn, at the limit and budget they were fitted to;
//!    each is reported at its median run (`pick_median`), since one run of
//!    either moves the ratio between them by tens of percent here.
//!
//! A target whose kernel cell swapped out no page says so in its verdict
//! (and `kernel_swapped_out_pages` in the JSON): there both cells ran
//! without pressure, and the ratio says nothing about swapping.
//!
//! Each cell reports its elapsed time, slowdown over plain, peak memory,
//! major faults, and whether its output (standard output, output files, a
//! driver's replies) is byte-identical to the plain run's.
//!
//! Peak memory is counted alike in every cell where it can be: when kernel
//! cells run (root), the plain and uzswap cells run in a memory cgroup
//! without a limit, so all three count what the program's process tree was
//! charged for (its memory, uzswap's pool inside it, page cache it wrote)
//! plus, for the kernel cells, the uncharged pool or device. Without kernel
//! cells the peak is wait4()'s largest RSS of the tree. The uzswap cell's
//! budget is set from the plain run's RSS, which is the memory the budget
//! governs.
//!
//! The kernel cell's cgroup limit cannot be set to a footprint directly
//! (the pool grows outside it), so it starts at the uzswap cell's footprint
//! less uzswap's pool, and, if the footprint it ran with is off by more than
//! `--fit-tolerance`, runs once more with the limit corrected by what the
//! first run showed; the try closer to the target is reported, both are in
//! the JSON. A try the cgroup's OOM killer ended (the kernel could not keep
//! the program going in that little memory) runs again with a higher limit,
//! twice at most; the report says how far its footprint then was from the
//! uzswap cell's.
//!
//! Kernel cells change machine settings through `crate::kernel`, which
//! journals each change and restores it afterwards, on error and on
//! SIGINT/SIGTERM/SIGHUP. `--no-kernel` changes nothing on the machine.

mod exec;
mod redis;
mod workloads;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::bench::compare::{parse_column, Column};
use crate::kernel;
use crate::usemem::{parse_size, Backend};
use exec::{Digest, Finished};
use workloads::{Program, Size, NAMES};

const MIB: f64 = (1u64 << 20) as f64;

/// The kernel cell the target compares with.
pub const TARGET_KERNEL: &str = "zram-lz4";
/// The target: uzswap's slowdown at most this many times the kernel
/// cell's (the goal: at most the kernel's).
pub const TARGET_RATIO: f64 = 1.5;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object with every figure as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Draw slowdowns and peak memory to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Small programs (tens of MiB each) for a quick check.
    #[arg(long)]
    pub quick: bool,
    /// Multiply every program's size by this (its data, its operations).
    #[arg(long, default_value_t = 1.0, value_parser = scale)]
    pub scale: f64,
    /// Run only these programs (comma-separated): python, sqlite, sort,
    /// threads, redis.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Leave out the kernel cells: no root needed, no machine setting
    /// changed (plain and uzswap cells only).
    #[arg(long)]
    pub no_kernel: bool,
    /// uzswap's budget, as a share of the plain run's peak RSS.
    #[arg(long, default_value_t = 0.5, value_parser = share)]
    pub budget_share: f64,
    /// uzswap's compressor.
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// How the uzswap cell resolves faults (`uzswap run --handler`): by
    /// default as `uzswap run` does, in handler threads, which also serve
    /// faults the kernel takes inside system calls; `signal` resolves them
    /// in the faulting thread (faster, but a system call glibc makes
    /// internally on an evicted buffer can fail).
    #[arg(long, value_enum, default_value = "block")]
    pub uzswap_handler: crate::usemem::Handler,
    /// The uzswap cells' accessed-bit sampler (`uzswap run
    /// --sample-young=MODE`); unset: the runner's default.
    #[command(flatten)]
    pub young: crate::young_arg::SampleYoungArg,
    /// Folio size: uzswap's chunk, and the kernel cells' mTHP size.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Kernel cells, comma-separated: kernel-zswap-<compressor>,
    /// zram-<compressor>, swapfile.
    #[arg(
        long,
        default_value = "kernel-zswap-lzo,zram-lz4",
        value_delimiter = ','
    )]
    pub kernel: Vec<String>,
    /// How far (a share) a kernel cell's footprint may be from the uzswap
    /// cell's before the cell runs once more with a corrected limit.
    #[arg(long, default_value_t = 0.1, value_parser = share)]
    pub fit_tolerance: f64,
    /// Leave out the equal-memory uzswap cells (one per kernel cell that
    /// finished, in a cgroup held to that cell's footprint).
    #[arg(long)]
    pub no_eqmem: bool,
    /// Run each equal-memory cell and the kernel cell it is matched to
    /// this many times in all, in turn, once both are fitted (at the
    /// fitted limit and budget), and report each at its median elapsed
    /// time: the ratio between them then does not hang on one run of
    /// either on a noisy machine.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub repeat: u32,
    /// Time limit of each cell, in seconds.
    #[arg(long, default_value_t = 300.0, value_parser = super::parse_secs)]
    pub timeout: f64,
    /// Directory for the programs' files (default: a new one under
    /// /var/tmp, removed at the end). Not tmpfs: its files would be memory.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// A share: finite, above 0, at most 1.
fn share(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if !(v.is_finite() && v > 0.0 && v <= 1.0) {
        return Err(format!("{s} is out of range: above 0, at most 1"));
    }
    Ok(v)
}

/// A size factor: finite, above 0, at most 64.
fn scale(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if !(v.is_finite() && v > 0.0 && v <= 64.0) {
        return Err(format!("{s} is out of range: above 0, at most 64"));
    }
    Ok(v)
}

/// One cell's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Cell {
    pub program: String,
    /// `plain`, `uzswap-<compressor>`, or the kernel backend's name.
    pub cell: String,
    /// It ran to completion and its output is the plain run's.
    pub ok: bool,
    pub error: Option<String>,
    /// Whether the output is byte-identical to the plain run's (None for
    /// the plain run, and where the cell did not finish).
    pub identical: Option<bool>,
    pub elapsed_s: f64,
    /// Elapsed time over the plain run's.
    pub slowdown: Option<f64>,
    /// A cell ended at the time limit: its slowdown was at least this.
    pub slowdown_at_least: Option<f64>,
    /// User + system time of the process tree.
    pub cpu_s: f64,
    /// The real footprint at its peak (see `peak_source`).
    pub peak_bytes: Option<u64>,
    /// How `peak_bytes` was counted: `cgroup` (what the process tree was
    /// charged for), `cgroup + zswap pool` / `cgroup + zram` (plus what the
    /// kernel did not charge it for), or `rusage` (the tree's largest RSS).
    pub peak_source: String,
    /// wait4()'s ru_maxrss: the largest RSS of any process of the tree.
    pub rss_peak_bytes: u64,
    pub cgroup_max_usage_bytes: Option<u64>,
    /// Cells in a cgroup: its anonymous memory (`anon`) and page cache
    /// (`file`) when its footprint was sampled at its highest (every 100
    /// ms): page cache the program wrote (a database, a dump, uzswap's
    /// swap file) counts in its footprint as in the kernel's limit.
    pub cgroup_at_peak: Option<Value>,
    /// Cells in a cgroup: the footprint less the cgroup's page cache at its
    /// largest (sampled every 100 ms): anonymous and kernel memory and any
    /// uncharged pool, what reclaim without swap cannot take back.
    pub nonfile_peak_bytes: Option<u64>,
    /// Kernel cells: the pool or device memory the cgroup was not charged
    /// for, at its peak.
    pub uncharged_bytes: Option<u64>,
    /// uzswap's budget, or the kernel cell's cgroup limit.
    pub limit_bytes: Option<u64>,
    /// The process tree's major faults (wait4), plus, in the uzswap cell,
    /// the faults uzswap served from its pool or swap (the kernel counts
    /// those as minor: they are resolved through userfaultfd).
    pub major_faults: u64,
    pub rusage_major_faults: u64,
    /// xxh3-128 of the output (standard output, output files, a driver's
    /// replies), and its size.
    pub output_digest: Option<String>,
    pub output_bytes: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Cells in a cgroup: how often its OOM killer fired.
    pub oom_kills: Option<u64>,
    /// Kernel cells: compressed bytes over stored bytes, as the kernel
    /// reports them.
    pub compression_ratio: Option<f64>,
    /// Kernel cells: the footprint over the uzswap cell's.
    pub footprint_vs_uzswap: Option<f64>,
    /// Equal-memory uzswap cells: the kernel cell whose footprint is this
    /// cell's cgroup limit.
    pub matched_to: Option<String>,
    /// Cells held to a cgroup limit (kernel and equal-memory cells).
    pub cgroup_limit_bytes: Option<u64>,
    /// Kernel cells: each try's cgroup limit and footprint.
    pub fits: Vec<Value>,
    /// With `--repeat`: the elapsed time of every run of the cell at its
    /// fitted limit or budget that finished with the right output, the
    /// reported one (the median; of an even count the slower middle)
    /// among them. Every other figure is that run's.
    pub runs_elapsed_s: Vec<f64>,
    /// With `--repeat`: runs that did not finish (an OOM kill at a limit
    /// the first run fitted under), left out of the median.
    pub runs_failed: Vec<String>,
    /// uzswap cells: the library's figures, over every process.
    pub uzswap: Option<Value>,
    /// Kernel cells: the kernel's counters and settings.
    pub kernel: Option<Value>,
    /// A driver's figures (redis: load and GET times, BGSAVE time).
    pub driver: Option<Value>,
}

/// What a cell runs under.
#[derive(Clone, Debug)]
enum Kind {
    Plain,
    Uzswap {
        budget: u64,
        /// An equal-memory cell: the kernel cell it is matched to, and the
        /// cgroup limit it runs under (that cell's footprint).
        eqmem: Option<(String, u64)>,
    },
    Kernel {
        col: Column,
        limit: u64,
        swap_size: u64,
    },
}

impl Kind {
    fn label(&self, a: &Args) -> String {
        match self {
            Kind::Plain => "plain".into(),
            Kind::Uzswap { eqmem: None, .. } => uzswap_label(a),
            Kind::Uzswap {
                eqmem: Some((k, _)),
                ..
            } => eqmem_label(a, k),
            Kind::Kernel { col, .. } => col.label.clone(),
        }
    }
}

fn handler_name(h: crate::usemem::Handler) -> String {
    use clap::ValueEnum;
    h.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

fn uzswap_label(a: &Args) -> String {
    format!("uzswap-{}", a.compressor)
}

/// The equal-memory uzswap cell matched to kernel cell `kernel`, named as
/// `bench compare` names its own.
fn eqmem_label(a: &Args, kernel: &str) -> String {
    format!("{}-eqmem-{kernel}", uzswap_label(a))
}

/// What the run shares: settings, the signal mask children get back, the
/// work directory.
struct Ctx<'a> {
    a: &'a Args,
    mask: libc::sigset_t,
    dir: PathBuf,
    /// Run plain and uzswap cells in a measuring cgroup (kernel cells run).
    measure_cgroups: bool,
    cells_run: std::cell::Cell<u32>,
}

/// uzswap's figures over every process of a cell: peaks are the largest
/// one process had, counts are summed.
pub fn uzswap_figures(procs: &[Value]) -> Value {
    let max = |k: &str| procs.iter().filter_map(|p| p[k].as_u64()).max();
    let sum = |k: &str| procs.iter().filter_map(|p| p[k].as_u64()).sum::<u64>();
    json!({
        "processes": procs.len(),
        "programs": procs.iter().filter_map(|p| p["program"].as_str()).collect::<Vec<_>>(),
        "peak_bytes": max("peak_bytes"),
        "vm_hwm_bytes": max("vm_hwm_bytes"),
        "pool_total_size": max("pool_total_size"),
        "stored_pages": max("stored_pages"),
        "pgmajfault": sum("pgmajfault"),
        "faults_zero": sum("faults_zero"),
        "evicted_chunks": sum("evicted_chunks"),
        "zswpout": sum("zswpout"),
        "zswpin": sum("zswpin"),
        "written_back_pages": sum("written_back_pages"),
        "swap_reads": sum("swap_reads"),
        "share_moves_up": sum("share_moves_up"),
        "share_moves_down": sum("share_moves_down"),
        "budget_overruns": sum("budget_overruns"),
        "fault_errors": sum("fault_errors"),
        "kernel_faults": procs.first().map(|p| p["kernel_faults"].clone()),
    })
}

/// The budget for a program whose plain run peaked at `rss`: `share` of
/// it in whole MiB, at least what uzswap needs for one chunk in flight.
pub fn budget_for(rss: u64, share: f64, folio: u64) -> u64 {
    let cfg = uzswap::UzswapConfig {
        folio_order: (folio / 4096).trailing_zeros(),
        ..Default::default()
    };
    let want = ((rss as f64 * share) as u64).div_ceil(1 << 20) << 20;
    want.max(uzswap::region::min_budget(&cfg).div_ceil(1 << 20) << 20)
}

/// The next kernel cell limit: move the limit by the footprint's error,
/// scaled by how much of a change in the limit reaches the footprint (a
/// byte more in the cgroup is a byte less to compress: the pool shrinks
/// by 1/ratio of it).
pub fn refit_limit(limit: u64, footprint: u64, target: u64, ratio: Option<f64>) -> u64 {
    let slope = ratio
        .filter(|r| r.is_finite() && *r > 1.0)
        .map_or(1.0, |r| 1.0 - 1.0 / r)
        .clamp(0.5, 1.0);
    let err = target as f64 - footprint as f64;
    let next = limit as f64 + err / slope;
    (next.max(kernel::MIN_CGROUP_LIMIT as f64)) as u64
}

impl Ctx<'_> {
    /// Run `prog` in one cell; `plain` is the reference (None for the
    /// plain cell itself).
    fn cell(&self, prog: &Program, kind: &Kind, plain: Option<&Cell>) -> Cell {
        let a = self.a;
        let label = kind.label(a);
        let mut cell = Cell {
            program: prog.name.into(),
            cell: label.clone(),
            ..Default::default()
        };
        if let Err(e) = self.run_into(prog, kind, &mut cell) {
            cell.error = Some(format!("{e:#}"));
        }
        // Whether the program ran to its end (its output may still differ).
        let ran = cell.error.is_none();
        if let Some(p) = plain {
            let ratio =
                (p.elapsed_s > 0.0 && cell.elapsed_s > 0.0).then(|| cell.elapsed_s / p.elapsed_s);
            if ran {
                cell.slowdown = ratio;
                let same = cell.output_digest == p.output_digest;
                cell.identical = Some(same);
                if !same {
                    cell.error = Some(format!(
                        "output differs from the plain run's ({} bytes, digest {}; plain: {} \
                         bytes, {})",
                        cell.output_bytes,
                        cell.output_digest.as_deref().unwrap_or("-"),
                        p.output_bytes,
                        p.output_digest.as_deref().unwrap_or("-"),
                    ));
                }
            } else if cell.timed_out {
                cell.slowdown_at_least = ratio;
            }
        } else if ran {
            cell.slowdown = Some(1.0);
        }
        cell.ok = cell.error.is_none();
        eprintln!(
            "{} / {}: {}",
            prog.name,
            label,
            match &cell.error {
                None => format!(
                    "{:.2} s{}, peak {:.0} MiB{}",
                    cell.elapsed_s,
                    cell.slowdown
                        .filter(|_| plain.is_some())
                        .map_or(String::new(), |s| format!(" ({s:.2}x)")),
                    cell.peak_bytes.unwrap_or(0) as f64 / MIB,
                    match cell.identical {
                        Some(true) => ", output identical",
                        _ => "",
                    }
                ),
                Some(e) => format!("FAILED: {e}"),
            }
        );
        cell
    }

    fn run_into(&self, prog: &Program, kind: &Kind, cell: &mut Cell) -> Result<()> {
        let a = self.a;
        for f in &prog.scratch {
            match std::fs::remove_file(f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("remove {}", f.display()))
                }
                _ => {}
            }
        }
        let stats = self.dir.join(format!("{}-uzswap-stats.jsonl", prog.name));
        let _ = std::fs::remove_file(&stats);
        let mut wrapper: Vec<OsString> = Vec::new();
        if let Kind::Uzswap { budget, .. } = kind {
            wrapper.push(std::env::current_exe()?.into());
            for (k, v) in [
                ("run", None),
                ("--budget", Some(budget.to_string())),
                ("--compressor", Some(a.compressor.clone())),
                ("--folio", Some(a.folio.to_string())),
                ("--handler", Some(handler_name(a.uzswap_handler))),
            ] {
                wrapper.push(k.into());
                if let Some(v) = v {
                    wrapper.push(v.into());
                }
            }
            if let Some(m) = a.young.sample_young {
                wrapper.push(format!("--sample-young={}", m.as_str()).into());
            }
            wrapper.push("--stats".into());
            wrapper.push(stats.clone().into());
            wrapper.push("--".into());
        }
        let n = self.cells_run.get();
        self.cells_run.set(n + 1);
        let setup = match kind {
            Kind::Kernel {
                col,
                limit,
                swap_size,
            } => Some(kernel::Setup {
                backend: match col.backend {
                    "kernel-zswap" => Backend::KernelZswap,
                    "zram" => Backend::Zram,
                    "swapfile" => Backend::Swapfile,
                    b => bail!("not a kernel backend: {b}"),
                },
                compressor: &col.compressor,
                folio: a.folio,
                swap_size: *swap_size,
                limit: Some(*limit),
                cgroup_name: format!("uzswap-programs-{}-{n}", std::process::id()),
            }),
            Kind::Uzswap {
                eqmem: Some((_, limit)),
                ..
            } => Some(kernel::Setup {
                backend: Backend::None,
                compressor: "",
                folio: a.folio,
                swap_size: 0,
                limit: Some(*limit),
                cgroup_name: format!("uzswap-programs-{}-{n}", std::process::id()),
            }),
            _ if self.measure_cgroups => Some(kernel::Setup {
                backend: Backend::None,
                compressor: "",
                folio: a.folio,
                swap_size: 0,
                limit: None,
                cgroup_name: format!("uzswap-programs-{}-{n}", std::process::id()),
            }),
            _ => None,
        };
        let limit = Duration::from_secs_f64(a.timeout);
        let drive = |r: &exec::Running| match &prog.redis {
            Some(redis) => redis.drive(r),
            None => Ok(exec::Driven::default()),
        };
        let driver: Option<exec::Driver<'_>> = prog.redis.is_some().then_some(&drive);
        let setup_used = setup.is_some();
        let (fin, measured, oom) = match setup {
            None => (
                exec::run(&prog.inv, &wrapper, None, self.mask, limit, driver)?,
                None,
                0,
            ),
            Some(s) => kernel::with_journal(|| {
                let p = kernel::prepare(&s)?;
                let m = p.start();
                let f = exec::run(&prog.inv, &wrapper, Some(&p.cg), self.mask, limit, driver);
                let measured = m.finish(f.as_ref().map_or(0.0, |f| f.elapsed_s));
                Ok((f?, Some(measured), p.oom_kills()))
            })?,
        };
        self.fill(prog, kind, cell, &fin, measured, &stats)?;
        if setup_used {
            cell.oom_kills = Some(oom);
        }
        if let Some(why) = fin.failure() {
            bail!(
                "{why}{}",
                if oom > 0 {
                    format!(" (the cgroup's OOM killer fired {oom} time(s))")
                } else {
                    String::new()
                }
            );
        }
        // The output: standard output, a driver's replies, the dump loaded
        // back, output files, in that order.
        let mut parts: Vec<Digest> = fin.stdout.into_iter().collect();
        if let Some(Ok((out, info))) = &fin.driven {
            parts.push(Digest::of(out));
            cell.driver = Some(info.clone());
        }
        if let Some(r) = &prog.redis {
            parts.push(Digest::of(&r.check_dump(self.mask)?));
        }
        for f in &prog.outputs {
            let file = std::fs::File::open(f)
                .with_context(|| format!("the output file {}", f.display()))?;
            parts.push(Digest::read(file)?);
        }
        let d = Digest::combine(&parts);
        cell.output_digest = Some(d.hex());
        cell.output_bytes = d.bytes;
        Ok(())
    }

    /// A cell's figures from its run.
    fn fill(
        &self,
        prog: &Program,
        kind: &Kind,
        cell: &mut Cell,
        fin: &Finished,
        measured: Option<kernel::Measured>,
        stats: &Path,
    ) -> Result<()> {
        let _ = prog;
        cell.elapsed_s = fin.elapsed_s;
        cell.cpu_s = fin.cpu_s;
        cell.rss_peak_bytes = fin.maxrss_bytes;
        cell.rusage_major_faults = fin.major_faults;
        cell.major_faults = fin.major_faults;
        cell.exit_code = fin.exit_code;
        cell.signal = fin.signal;
        cell.timed_out = fin.timed_out;
        match &measured {
            Some(m) => {
                cell.cgroup_max_usage_bytes = m.cgroup_max_usage;
                cell.cgroup_at_peak = Some(m.kernel["footprint_sampled_stat"].clone());
                cell.nonfile_peak_bytes = m.kernel["footprint_nonfile_peak_bytes"].as_u64();
                cell.peak_bytes = m.footprint;
                cell.peak_source = match kind {
                    Kind::Kernel { col, .. } if m.uncharged_peak > 0 || col.backend == "zram" => {
                        cell.uncharged_bytes = Some(m.uncharged_peak);
                        match col.backend {
                            "zram" => "cgroup + zram".into(),
                            _ => "cgroup + zswap pool".into(),
                        }
                    }
                    _ => "cgroup".into(),
                };
            }
            None => {
                cell.peak_bytes = Some(fin.maxrss_bytes);
                cell.peak_source = "rusage".into();
            }
        }
        match kind {
            Kind::Plain => {}
            Kind::Uzswap { budget, eqmem } => {
                cell.limit_bytes = Some(*budget);
                if let Some((k, limit)) = eqmem {
                    cell.matched_to = Some(k.clone());
                    cell.cgroup_limit_bytes = Some(*limit);
                }
                let procs = crate::run::read_stats(stats);
                let u = uzswap_figures(&procs);
                cell.major_faults += u["pgmajfault"].as_u64().unwrap_or(0);
                cell.uzswap = Some(u);
            }
            Kind::Kernel { limit, .. } => {
                cell.limit_bytes = Some(*limit);
                cell.cgroup_limit_bytes = Some(*limit);
                if let Some(m) = measured {
                    cell.compression_ratio = m.compression_ratio;
                    cell.kernel = Some(m.kernel);
                }
            }
        }
        Ok(())
    }

    /// A kernel cell at the uzswap cell's footprint `target` (when it has
    /// one; else at `fallback`), refitted once if the first try is off by
    /// more than the tolerance.
    fn kernel_cell(
        &self,
        prog: &Program,
        col: &Column,
        plain: &Cell,
        target: Option<u64>,
        pool_guess: u64,
        fallback: u64,
    ) -> Cell {
        let swap_size = kernel_swap_size(plain);
        let first = match target {
            Some(t) => t.saturating_sub(pool_guess).max(kernel::MIN_CGROUP_LIMIT),
            None => fallback.max(kernel::MIN_CGROUP_LIMIT),
        };
        let run = |limit: u64| {
            let kind = Kind::Kernel {
                col: col.clone(),
                limit,
                swap_size,
            };
            let mut c = self.cell(prog, &kind, Some(plain));
            c.footprint_vs_uzswap = target
                .zip(matched_bytes(&c))
                .map(|(t, p)| p as f64 / t.max(1) as f64);
            c
        };
        let fit = |c: &Cell| {
            json!({"limit_bytes": c.limit_bytes, "peak_bytes": c.peak_bytes,
            "nonfile_peak_bytes": c.nonfile_peak_bytes,
            "elapsed_s": c.elapsed_s, "ok": c.ok})
        };
        // At most one refit of a run that finished; a run the cgroup's OOM
        // killer ended gets more memory (`raise_after_oom`), twice at most.
        let (mut limit, mut refitted) = (first, false);
        let mut fits = Vec::new();
        let mut best: Option<Cell> = None;
        for attempt in 0..3 {
            let c = run(limit);
            fits.push(fit(&c));
            let next = match (c.ok, target, matched_bytes(&c)) {
                (true, Some(t), Some(fp)) if !refitted => {
                    let off = (fp as f64 - t as f64).abs() / t.max(1) as f64;
                    refitted = true;
                    (off > self.a.fit_tolerance)
                        .then(|| refit_limit(limit, fp, t, c.compression_ratio))
                }
                (false, _, _) if c.oom_kills.unwrap_or(0) > 0 && attempt < 2 => {
                    Some(raise_after_oom(limit, target))
                }
                _ => None,
            };
            best = Some(match best {
                Some(b) if better(&b, &c, target) => b,
                _ => c,
            });
            match next {
                Some(n) if n != limit => limit = n,
                _ => break,
            }
        }
        let mut best = best.expect("one run at least");
        best.fits = fits;
        best
    }
}

impl Ctx<'_> {
    /// The uzswap cell at kernel cell `k`'s memory: in a cgroup held to
    /// `k`'s footprint, with the budget `eqmem_budget` gives from the
    /// nominal cell `u`. The budget is then fitted to the limit as the
    /// kernel cells' limits are fitted to a footprint:
    /// - a try that finished with its own memory (`own_bytes`) smaller
    ///   than the estimate leaves room: the next try gets the budget that
    ///   try's own memory and fill allow (`fit_from`), if that is 1/256
    ///   of the limit more and below any budget that was OOM-killed (the
    ///   nominal cell, under half the memory, is charged more of its own: GNU
    ///   sort's 4.3 MiB against 2.8 at zram-lz4's 49 MiB, and with a 32nd
    ///   of the limit as the step the cell ran at 44 MiB where 45 fitted,
    ///   1.1-1.2 s against 1.4-1.6);
    /// - a try the cgroup's OOM killer ended (uzswap's own memory or the
    ///   program's page cache outgrew the room left) before any finished
    ///   runs again with a 32nd of the limit less (near a cliff a MiB of
    ///   budget is seconds of run time: GNU sort at 49 MiB took 2.7 s
    ///   with a 44 MiB budget, 3.5 s with 43 and 5.9 s with 41).
    ///
    /// (`next_eqmem_budget`.) Three tries at most; the limit never moves.
    /// The last try that finished is the one reported (the largest budget
    /// that ran at that memory), a failure other than an OOM kill ends the
    /// fit and is reported; each try is in `fits`.
    fn eqmem_cell(&self, prog: &Program, plain: &Cell, u: &Cell, k: &Cell) -> Option<Cell> {
        let limit = k.peak_bytes.filter(|_| k.ok)?;
        let min = budget_for(0, self.a.budget_share, self.a.folio);
        let mut budget = eqmem_budget(u, k)?.max(min);
        let mut fits = Vec::new();
        // The last try that finished, and the last that did not.
        let (mut finished, mut unfinished): (Option<Cell>, Option<Cell>) = (None, None);
        // The smallest budget the OOM killer ended: no later try goes there.
        let mut ceiling = u64::MAX;
        for attempt in 0..3 {
            let kind = Kind::Uzswap {
                budget,
                eqmem: Some((k.cell.clone(), limit)),
            };
            let c = self.cell(prog, &kind, Some(plain));
            fits.push(json!({"budget_bytes": budget, "peak_bytes": c.peak_bytes,
                "nonfile_peak_bytes": c.nonfile_peak_bytes,
                "elapsed_s": c.elapsed_s, "ok": c.ok, "oom_kills": c.oom_kills}));
            let oom = !c.ok && c.oom_kills.unwrap_or(0) > 0;
            if !c.ok && !oom {
                // Any other failure (a wrong output above all) is the
                // cell's result, never hidden behind an earlier try.
                finished = None;
                unfinished = Some(c);
                break;
            }
            if oom {
                ceiling = ceiling.min(budget);
            }
            let next = next_eqmem_budget(Try {
                budget,
                limit,
                min,
                finished: c.ok,
                fitted: c.ok.then(|| fit_from(&c, limit)).flatten(),
                any_finished: finished.is_some(),
                ceiling,
            });
            if c.ok {
                finished = Some(c);
            } else {
                unfinished = Some(c);
            }
            match next {
                Some(b) if attempt < 2 => budget = b,
                _ => break,
            }
        }
        let mut c = finished.or(unfinished)?;
        c.fits = fits;
        Some(c)
    }

    /// `--repeat`: run kernel cell `k` and the equal-memory cell `e`
    /// matched to it `repeat - 1` more times, in turn, at the limit and
    /// budget they were fitted to, and make each the run of median elapsed
    /// time (`pick_median`). `target` is the nominal uzswap cell's
    /// footprint the kernel cell was matched to.
    #[allow(clippy::too_many_arguments)]
    fn repeat_pair(
        &self,
        prog: &Program,
        plain: &Cell,
        col: &Column,
        target: Option<u64>,
        k: &mut Cell,
        e: &mut Cell,
        repeat: u32,
    ) {
        let (Some(klimit), Some(budget), Some(elimit)) =
            (k.limit_bytes, e.limit_bytes, e.cgroup_limit_bytes)
        else {
            return;
        };
        let kkind = Kind::Kernel {
            col: col.clone(),
            limit: klimit,
            swap_size: kernel_swap_size(plain),
        };
        let ekind = Kind::Uzswap {
            budget,
            eqmem: Some((k.cell.clone(), elimit)),
        };
        let (mut ks, mut es) = (vec![k.clone()], vec![e.clone()]);
        for _ in 1..repeat {
            let mut c = self.cell(prog, &kkind, Some(plain));
            c.footprint_vs_uzswap = target
                .zip(c.peak_bytes)
                .map(|(t, p)| p as f64 / t.max(1) as f64);
            ks.push(c);
            es.push(self.cell(prog, &ekind, Some(plain)));
        }
        *k = pick_median(ks);
        *e = pick_median(es);
    }
}

/// The kernel cells' swap size for a program whose plain run is `plain`.
fn kernel_swap_size(plain: &Cell) -> u64 {
    kernel::swap_size_for(plain.peak_bytes.unwrap_or(0).max(plain.rss_peak_bytes))
}

/// Of runs of one cell (the first finished), the one of median elapsed
/// time among those that finished (of an even count the slower middle:
/// never the better of two), with every finished run's time in
/// `runs_elapsed_s`, the others' errors in `runs_failed`, and the first
/// run's fit history.
pub fn pick_median(runs: Vec<Cell>) -> Cell {
    let fits = runs.first().map(|c| c.fits.clone()).unwrap_or_default();
    let (mut ok, failed): (Vec<Cell>, Vec<Cell>) = runs.into_iter().partition(|c| c.ok);
    let times: Vec<f64> = ok.iter().map(|c| c.elapsed_s).collect();
    let runs_failed: Vec<String> = failed
        .into_iter()
        .map(|c| c.error.unwrap_or_else(|| "failed".into()))
        .collect();
    ok.sort_by(|a, b| a.elapsed_s.total_cmp(&b.elapsed_s));
    let mut pick = ok.swap_remove(ok.len() / 2);
    pick.runs_elapsed_s = times;
    pick.runs_failed = runs_failed;
    pick.fits = fits;
    pick
}

/// One equal-memory try, as `next_eqmem_budget` weighs it.
#[derive(Clone, Copy, Debug)]
pub struct Try {
    pub budget: u64,
    pub limit: u64,
    /// The least budget a cell may have.
    pub min: u64,
    /// It ran to completion with the right output (else: OOM-killed).
    pub finished: bool,
    /// A finished try's figures applied to the limit (`fit_from`).
    pub fitted: Option<u64>,
    /// An earlier try finished.
    pub any_finished: bool,
    /// The smallest budget the OOM killer ended (u64::MAX: none).
    pub ceiling: u64,
}

/// The budget of the next equal-memory try, if there is one to make:
/// after a finished try, the fitted budget where it is larger by at least
/// 1/256 of the limit (budgets are whole `FIT_STEP`s) and below any budget
/// that was OOM-killed; after an OOM kill with nothing finished yet, 1/32
/// of the limit less, down to `min`. An OOM kill after a finished try ends
/// the fit (that try is the one reported).
///
/// The 1/256: a try is a whole run of the program, and a quarter of a MiB
/// is worth one near GNU sort's 48 MiB cliff but not at the threads
/// program's 143 MiB, whose fit went 130.5, 130.75, 131 MiB (11 s a try).
pub fn next_eqmem_budget(t: Try) -> Option<u64> {
    if t.finished {
        t.fitted
            .filter(|b| *b >= t.budget + t.limit / 256 && *b < t.ceiling)
    } else if !t.any_finished {
        Some((t.budget.saturating_sub(t.limit / 32) >> 20 << 20).max(t.min))
            .filter(|b| *b < t.budget)
    } else {
        None
    }
}

/// What a uzswap cell in a cgroup was charged beyond its data: the
/// footprint less page cache at its largest, less uzswap's resident +
/// pool peak. uzswap's own heap and buffers, the runner, page tables and
/// other kernel memory.
pub fn own_bytes(u: &Cell) -> Option<u64> {
    let data = u.uzswap.as_ref()?["peak_bytes"].as_u64()?;
    Some(u.nonfile_peak_bytes?.saturating_sub(data))
}

/// How much of its budget a uzswap cell's data filled at its peak: the
/// evictor holds resident + pool between watermarks below the budget, so
/// a budget buys this share of it in memory. At most 1, at least 1/2.
pub fn fill(u: &Cell) -> Option<f64> {
    let data = u.uzswap.as_ref()?["peak_bytes"].as_u64()? as f64;
    let budget = u.limit_bytes? as f64;
    Some((data / budget).clamp(0.5, 1.0))
}

/// The steps equal-memory budgets are fitted in. Whole MiB left half a MiB
/// of the limit unused on average, and near a cliff a MiB is a fifth of
/// the run time or more (GNU sort at zram-lz4's 49 MiB, by hand: 44 MiB of
/// budget 1.40-1.62 s, 45 MiB 1.11-1.19 s, 46 MiB 0.82-0.91 s;
/// docs/BENCHMARKS.md). A quarter of a MiB is a multiple of every folio
/// up to 256 KiB.
pub const FIT_STEP: u64 = 256 << 10;

/// The budget whose data (`fill` of it) and `own` leave a margin of 1/32
/// in `limit`, in `FIT_STEP`s, and never more than the limit less that
/// margin (a program whose data stayed below its budget would otherwise
/// be given more than the limit); None where nothing is left.
pub fn fit_budget(limit: u64, own: u64, fill: f64) -> Option<u64> {
    let margin = limit / 32;
    let room = limit.checked_sub(own)?.checked_sub(margin)?;
    let b = ((room as f64 / fill.clamp(0.5, 1.0)) as u64).min(limit - margin);
    Some(b / FIT_STEP * FIT_STEP).filter(|b| *b > 0)
}

/// A uzswap cell's figures applied to `limit`: the budget `fit_budget`
/// gives from its own memory and fill.
fn fit_from(u: &Cell, limit: u64) -> Option<u64> {
    fit_budget(limit, own_bytes(u)?, fill(u)?)
}

/// The first budget of the uzswap cell at kernel cell `k`'s memory: its
/// footprint, less what the nominal uzswap cell `u` was charged beyond
/// its data (`own_bytes`), less a margin of 1/32 of the footprint (the
/// cell has no swap, so passing its limit ends it), over the share of its
/// budget the nominal cell's data filled. The page cache gets what the
/// budget leaves, under the kernel's reclaim as in the kernel cell: equal
/// memory is the same limit, not the same split of it (a kernel cell that
/// never had to swap kept page cache because its limit left room, not
/// because the program needed it). None where a figure is missing.
pub fn eqmem_budget(u: &Cell, k: &Cell) -> Option<u64> {
    fit_from(u, k.peak_bytes.filter(|_| k.ok)?)
}

/// The limit after a kernel cell's OOM kill: halfway to the target
/// footprint, and at least a quarter more.
pub fn raise_after_oom(limit: u64, target: Option<u64>) -> u64 {
    let half_way = target.map_or(0, |t| limit + t.saturating_sub(limit) / 2);
    half_way.max(limit + limit / 4)
}

/// Whether kernel try `a` is the one to report rather than `b`: one that
/// finished over one that failed; of two that finished, the footprint
/// closer to `target`.
fn better(a: &Cell, b: &Cell, target: Option<u64>) -> bool {
    let err = |c: &Cell| match (target, matched_bytes(c)) {
        (Some(t), Some(p)) => p.abs_diff(t),
        _ => u64::MAX,
    };
    match (a.ok, b.ok) {
        (true, false) => true,
        (false, true) => false,
        (true, true) => err(a) <= err(b),
        (false, false) => false,
    }
}

/// The footprint a kernel cell is matched on: the real footprint less the
/// cgroup's page cache at its peak (`nonfile_peak_bytes`; the uncharged
/// pool or device stays in it), or the footprint where that was not
/// sampled. Page cache is left out on both sides because the nominal
/// uzswap cell's cgroup has no limit to make it give any back: the
/// sqlite shell's kept the 30 MiB of database it wrote, and matching the
/// whole footprint handed the kernel cell those 30 MiB as room for the
/// heap, where neither cell then swapped at all. The kernel cell keeps
/// what page cache its limit leaves room for, as the equal-memory cell,
/// held to the kernel cell's whole footprint, does after it.
pub fn matched_bytes(c: &Cell) -> Option<u64> {
    c.nonfile_peak_bytes.or(c.peak_bytes)
}

/// Whether `c` is a kernel cell that ended only because the cgroup's OOM
/// killer fired (its output was never compared).
fn oom_only(c: &Cell, uzswap: &str) -> bool {
    c.cell != "plain"
        && !c.cell.starts_with(uzswap)
        && !c.ok
        && c.identical.is_none()
        && c.oom_kills.unwrap_or(0) > 0
}

/// A cell that did not run, and why.
fn not_run(program: &str, cell: String, why: &str) -> Cell {
    Cell {
        program: program.into(),
        cell,
        error: Some(why.into()),
        ..Default::default()
    }
}

/// Per program: uzswap's slowdown over the target kernel cell's.
pub fn targets(cells: &[Cell], uzswap: &str) -> Vec<Value> {
    let mut programs: Vec<&str> = Vec::new();
    for c in cells {
        if !programs.contains(&c.program.as_str()) {
            programs.push(&c.program);
        }
    }
    let find = |p: &str, l: &str| cells.iter().find(|c| c.program == p && c.cell == l);
    programs
        .into_iter()
        .filter_map(|p| {
            let (u, k) = (find(p, uzswap)?, find(p, TARGET_KERNEL)?);
            let target =
                format!("{uzswap} slowdown <= {TARGET_RATIO}x {TARGET_KERNEL}'s (goal: <= 1x)");
            let (us, ks) = match (u.ok, k.ok, u.slowdown, k.slowdown) {
                (true, true, Some(us), Some(ks)) => (us, ks),
                _ => {
                    let (c, name) = if u.ok {
                        (k, TARGET_KERNEL)
                    } else {
                        (u, uzswap)
                    };
                    let note = match c.slowdown_at_least {
                        Some(s) => {
                            format!("the {name} cell hit the time limit: slowdown > {s:.0}x")
                        }
                        None if c.oom_kills.unwrap_or(0) > 0 => format!(
                            "the {name} cell was ended by the cgroup's OOM killer at every limit \
                             tried"
                        ),
                        None => format!("the {name} cell failed"),
                    };
                    return Some(json!({"target": target, "program": p, "value": null,
                        "met": false, "goal_met": false, "note": note,
                        "uzswap_slowdown_at_least": u.slowdown_at_least}));
                }
            };
            let v = us / ks.max(1e-9);
            Some(json!({"target": target, "program": p, "value": v,
                "met": v <= TARGET_RATIO, "goal_met": v <= 1.0,
                "uzswap_slowdown": us, "kernel_slowdown": ks,
                "uzswap_peak_bytes": u.peak_bytes, "kernel_peak_bytes": k.peak_bytes,
                "kernel": TARGET_KERNEL,
                "kernel_swapped_out_pages": swapped_out(k)}))
        })
        .collect()
}

/// Each equal-memory uzswap cell against the kernel cell it was matched
/// to: their slowdowns, and the ratio (the target's, where the kernel cell
/// is `TARGET_KERNEL`).
pub fn eqmem_targets(cells: &[Cell]) -> Vec<Value> {
    cells
        .iter()
        .filter_map(|e| {
            let kl = e.matched_to.as_deref()?;
            let k = cells
                .iter()
                .find(|k| k.program == e.program && k.cell == kl)?;
            let target = format!(
                "{} slowdown <= {TARGET_RATIO}x {kl}'s at {kl}'s memory (goal: <= 1x)",
                e.cell
            );
            let is_target = kl == TARGET_KERNEL;
            let (us, ks) = match (e.ok, k.ok, e.slowdown, k.slowdown) {
                (true, true, Some(us), Some(ks)) => (us, ks),
                _ => {
                    let note = match e.slowdown_at_least {
                        Some(s) => format!("the {} cell hit the time limit: slowdown > {s:.0}x", e.cell),
                        None if e.oom_kills.unwrap_or(0) > 0 => format!(
                            "the {} cell was ended by its cgroup's OOM killer at every budget tried",
                            e.cell
                        ),
                        None => format!("the {} cell failed", e.cell),
                    };
                    return Some(json!({"target": target, "program": e.program,
                        "cell": e.cell, "kernel": kl, "is_target": is_target,
                        "value": null, "met": false, "goal_met": false, "note": note}));
                }
            };
            let v = us / ks.max(1e-9);
            Some(json!({"target": target, "program": e.program, "cell": e.cell,
                "kernel": kl, "is_target": is_target, "value": v,
                "kernel_swapped_out_pages": swapped_out(k),
                "met": v <= TARGET_RATIO, "goal_met": v <= 1.0,
                "uzswap_slowdown": us, "kernel_slowdown": ks,
                "uzswap_budget_bytes": e.limit_bytes,
                "cgroup_limit_bytes": e.cgroup_limit_bytes,
                "uzswap_peak_bytes": e.peak_bytes, "kernel_peak_bytes": k.peak_bytes}))
        })
        .collect()
}

/// A target's value as the report prints it: the ratio and both slowdowns.
fn target_value(x: &Value) -> String {
    x["value"].as_f64().map_or("-".into(), |v| {
        format!(
            "{v:.2} ({:.2}x vs {:.2}x)",
            x["uzswap_slowdown"].as_f64().unwrap_or(f64::NAN),
            x["kernel_slowdown"].as_f64().unwrap_or(f64::NAN)
        )
    })
}

/// Pages a kernel cell swapped out (to zram, a swap file, or zswap's
/// pool), from its vmstat delta; None where it has none.
fn swapped_out(k: &Cell) -> Option<u64> {
    let v = &k.kernel.as_ref()?["vmstat"];
    Some(v["pswpout"].as_u64()? + v["zswpout"].as_u64().unwrap_or(0))
}

/// Whether a target and its goal were met, or why it was missed. A target
/// met against a kernel cell that swapped nothing is said to be so: at
/// that memory neither side was under pressure (a program whose real
/// footprint is page cache, or a fork's bring-in, can fit the kernel cell
/// with room to spare), and the ratio says nothing about swapping.
fn target_verdict(x: &Value) -> String {
    let idle = match (x["kernel_swapped_out_pages"].as_u64(), x["kernel"].as_str()) {
        (Some(0), Some(k)) => format!("; no pressure: the {k} cell swapped out no page"),
        _ => String::new(),
    };
    match (x["met"].as_bool(), x["goal_met"].as_bool()) {
        (Some(true), Some(true)) => format!("met, goal met{idle}"),
        (Some(true), _) => format!("met, goal missed{idle}"),
        _ => format!(
            "MISSED{}{idle}",
            x["note"]
                .as_str()
                .map_or(String::new(), |n| format!(": {n}"))
        ),
    }
}

fn mib(b: Option<u64>) -> String {
    b.map_or("-".into(), |b| format!("{:.0}", b as f64 / MIB))
}

pub fn markdown(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| program | cell | elapsed s | slowdown | peak MiB | budget / limit MiB | major faults | output |\n\
         |---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for c in cells {
        let output = match (&c.error, c.identical) {
            (Some(e), _) => format!("failed: {}", e.replace('|', "/")),
            (None, Some(true)) => "identical".into(),
            (None, Some(false)) => "DIFFERS".into(),
            (None, None) => "reference".into(),
        };
        if c.elapsed_s == 0.0 {
            s += &format!(
                "| {} | {} | - | - | - | - | - | {output} |\n",
                c.program, c.cell
            );
            continue;
        }
        let (n, failed) = (c.runs_elapsed_s.len(), c.runs_failed.len());
        let elapsed = match (n, failed) {
            (0 | 1, 0) => format!("{:.2}", c.elapsed_s),
            (_, 0) => format!("{:.2} (median of {n})", c.elapsed_s),
            _ => format!("{:.2} (median of {n}; {failed} more failed)", c.elapsed_s),
        };
        s += &format!(
            "| {} | {} | {elapsed} | {} | {} | {} | {} | {output} |\n",
            c.program,
            c.cell,
            match (c.slowdown, c.slowdown_at_least) {
                (Some(v), _) => format!("{v:.2}x"),
                (None, Some(v)) => format!("> {v:.0}x"),
                _ => "-".into(),
            },
            mib(c.peak_bytes),
            mib(c.limit_bytes),
            c.major_faults,
        );
    }
    s
}

/// Page cache in a cell's cgroup when its footprint peaked (sampled).
fn page_cache(c: &Cell) -> String {
    c.cgroup_at_peak
        .as_ref()
        .and_then(|v| v["file"].as_u64())
        .map_or(String::new(), |f| {
            format!(", {} MiB of it page cache", mib(Some(f)))
        })
}

/// A line per kernel cell: its footprint, what it is made of, and the
/// uzswap cell's it was matched to.
pub fn footprint_lines(cells: &[Cell], uzswap: &str) -> Vec<String> {
    cells
        .iter()
        .filter(|c| c.cell != "plain" && !c.cell.starts_with(uzswap) && c.peak_bytes.is_some())
        .map(|c| {
            let u = cells
                .iter()
                .find(|u| u.program == c.program && u.cell == uzswap);
            format!(
                "{} / {}: cgroup limit {} MiB, cgroup max {} MiB{} + uncharged {} MiB = {} MiB; \
                 the {uzswap} cell's {} MiB{} (non-file {}){}",
                c.program,
                c.cell,
                mib(c.limit_bytes),
                mib(c.cgroup_max_usage_bytes),
                page_cache(c),
                mib(c.uncharged_bytes.or(Some(0))),
                mib(c.peak_bytes),
                mib(u.and_then(|u| u.peak_bytes)),
                u.map_or(String::new(), page_cache),
                c.footprint_vs_uzswap
                    .map_or("not matched".into(), |r| format!("{r:.2}x")),
                if c.fits.len() > 1 {
                    format!(", {} tries", c.fits.len())
                } else {
                    String::new()
                }
            )
        })
        .collect()
}

/// A directory for the programs' files: given, or new under /var/tmp
/// (disk, where /tmp may be tmpfs); whether to remove it at the end.
fn work_dir(a: &Args) -> Result<(PathBuf, bool)> {
    let (dir, made) = match &a.work_dir {
        Some(d) => (d.clone(), false),
        None => (
            Path::new("/var/tmp").join(format!("uzswap-programs-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    Ok((dir.canonicalize()?, made))
}

fn plot(path: &Path, cells: &[Cell], programs: &[String], cols: &[String]) -> Result<()> {
    use crate::bench::bars::{draw, Panel};
    let values = |f: &dyn Fn(&Cell) -> Option<f64>| -> Vec<Vec<Option<f64>>> {
        cols.iter()
            .map(|col| {
                programs
                    .iter()
                    .map(|p| {
                        cells
                            .iter()
                            .find(|c| &c.program == p && &c.cell == col && (c.ok || c.timed_out))
                            .and_then(f)
                    })
                    .collect()
            })
            .collect()
    };
    // A cell stopped at the time limit shows its lower bound.
    let panels = [
        Panel {
            title: "slowdown over plain (log scale; lower is better)".into(),
            values: values(&|c| c.slowdown.or(c.slowdown_at_least)),
            hline: None,
            log: true,
        },
        Panel {
            title: "peak memory, MiB (cgroup + uncharged, or largest RSS)".into(),
            values: values(&|c| c.peak_bytes.map(|b| b as f64 / MIB)),
            hline: None,
            log: false,
        },
    ];
    draw(path, (1600, 600), programs, cols, &panels)
}

pub fn run(a: Args) -> Result<()> {
    if !a.folio.is_power_of_two() || !(4096..=2 << 20).contains(&a.folio) {
        bail!("--folio {}: a power of two from 4K to 2M", a.folio);
    }
    uzswap::compress::by_name(&a.compressor).map_err(|e| anyhow::anyhow!("--compressor: {e}"))?;
    let names: Vec<&str> = if a.only.is_empty() {
        NAMES.to_vec()
    } else {
        let mut v = Vec::new();
        for n in &a.only {
            let n = n.trim();
            match NAMES.iter().find(|k| **k == n) {
                Some(k) if !v.contains(k) => v.push(*k),
                Some(_) => {}
                None => bail!("--only {n}: no such program (known: {})", NAMES.join(", ")),
            }
        }
        v
    };
    let cols: Vec<Column> = if a.no_kernel {
        Vec::new()
    } else {
        a.kernel
            .iter()
            .map(|k| parse_column(k))
            .collect::<Result<_>>()?
    };
    if let Some(c) = cols.iter().find(|c| c.backend == "uzswap") {
        bail!("--kernel {}: not a kernel backend", c.label);
    }
    if !cols.is_empty() && !kernel::is_root() {
        bail!(
            "the kernel cells need root (they turn on swap, set up zram, change zswap and THP \
             settings and make memory cgroups, all restored afterwards); run as root, or pass \
             --no-kernel for the plain and uzswap cells alone"
        );
    }
    // Before any thread starts: every thread then has the termination
    // signals blocked, and the signal thread ends the running cell.
    let mask = kernel::signal_mask()?;
    let (dir, remove) = work_dir(&a)?;
    // Its generated data and outputs are hundreds of MiB: gone on a
    // signal too.
    kernel::set_scratch_dir(remove.then(|| dir.clone()));
    let size = if a.quick { Size::QUICK } else { Size::FULL }.scaled(a.scale);
    let ctx = Ctx {
        a: &a,
        mask,
        dir: dir.clone(),
        measure_cgroups: !cols.is_empty(),
        cells_run: std::cell::Cell::new(0),
    };
    let command: String = std::iter::once("uzswap".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let ulabel = uzswap_label(&a);
    let t0 = Instant::now();
    let mut cells = Vec::new();
    let mut programs = Vec::new();
    for name in &names {
        let labels: Vec<String> = std::iter::once(ulabel.clone())
            .chain(cols.iter().map(|c| c.label.clone()))
            .collect();
        eprintln!("{name}: preparing");
        let prog = match workloads::prepare(name, &dir, &size) {
            Ok(p) => p,
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!("{name}: {why}");
                cells.push(not_run(name, "plain".into(), &why));
                for l in labels {
                    cells.push(not_run(name, l, "the program could not be prepared"));
                }
                continue;
            }
        };
        let plain = ctx.cell(&prog, &Kind::Plain, None);
        let mut info = json!({"name": prog.name, "what": prog.what, "params": prog.params,
            "plain_rss_peak_bytes": plain.rss_peak_bytes});
        if !plain.ok {
            cells.push(plain);
            for l in labels {
                cells.push(not_run(name, l, "the plain run failed"));
            }
            programs.push(info);
            continue;
        }
        let budget = budget_for(plain.rss_peak_bytes, a.budget_share, a.folio);
        info["budget_bytes"] = json!(budget);
        programs.push(info);
        let u = ctx.cell(
            &prog,
            &Kind::Uzswap {
                budget,
                eqmem: None,
            },
            Some(&plain),
        );
        let target = matched_bytes(&u).filter(|_| u.ok);
        let pool_guess = u
            .uzswap
            .as_ref()
            .and_then(|f| f["pool_total_size"].as_u64())
            .unwrap_or(0);
        let mut kernel_cells = Vec::new();
        for col in &cols {
            kernel_cells.push(ctx.kernel_cell(&prog, col, &plain, target, pool_guess, budget));
        }
        let mut eqmem = Vec::new();
        if !a.no_eqmem && u.ok {
            for k in &kernel_cells {
                eqmem.extend(ctx.eqmem_cell(&prog, &plain, &u, k));
            }
        }
        if a.repeat > 1 {
            for e in eqmem.iter_mut().filter(|e| e.ok) {
                let Some((k, col)) = kernel_cells
                    .iter_mut()
                    .zip(&cols)
                    .find(|(k, _)| k.ok && e.matched_to.as_deref() == Some(k.cell.as_str()))
                else {
                    continue;
                };
                ctx.repeat_pair(&prog, &plain, col, target, k, e, a.repeat);
            }
        }
        cells.push(plain);
        cells.push(u);
        cells.extend(kernel_cells);
        cells.extend(eqmem);
    }
    let wall = t0.elapsed().as_secs_f64();
    if remove {
        kernel::set_scratch_dir(None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    let t = targets(&cells, &ulabel);
    let fp = footprint_lines(&cells, &ulabel);
    println!("{}", markdown(&cells));
    println!(
        "{} sizes{}; uzswap budget {:.0}% of each plain run's peak RSS, compressor {}, folio {} \
         KiB (the kernel cells' mTHP size too); peak memory: {}; {wall:.0} s in all\n",
        if a.quick { "quick" } else { "full" },
        if a.scale == 1.0 {
            String::new()
        } else {
            format!(" x {}", a.scale)
        },
        a.budget_share * 100.0,
        a.compressor,
        a.folio >> 10,
        if cols.is_empty() {
            "the largest RSS of each process tree (wait4)"
        } else {
            "what each cell's cgroup was charged at its peak, plus the kernel's uncharged pool \
             or zram device"
        },
    );
    for p in &programs {
        println!(
            "- {}: {}",
            p["name"].as_str().unwrap_or(""),
            p["what"].as_str().unwrap_or("")
        );
    }
    if !fp.is_empty() {
        println!("\nkernel cells' real footprint, matched to the uzswap cell's:");
        for l in &fp {
            println!("- {l}");
        }
    }
    if !t.is_empty() {
        println!();
    }
    for x in &t {
        println!(
            "- {} on {}: {} ({})",
            x["target"].as_str().unwrap_or(""),
            x["program"].as_str().unwrap_or(""),
            target_value(x),
            target_verdict(x)
        );
    }
    let et = eqmem_targets(&cells);
    if !et.is_empty() {
        println!(
            "\nat equal memory: {ulabel} in a cgroup held to each kernel cell's footprint, its \
             budget fitted to that footprint less uzswap's own memory:"
        );
    }
    for x in &et {
        let c = cells.iter().find(|c| {
            c.program == x["program"].as_str().unwrap_or("")
                && c.cell == x["cell"].as_str().unwrap_or("")
        });
        println!(
            "- {} on {}: {} (budget {} MiB, cgroup limit {} MiB, peak {} MiB{}; {})",
            x["target"].as_str().unwrap_or(""),
            x["program"].as_str().unwrap_or(""),
            target_value(x),
            mib(c.and_then(|c| c.limit_bytes)),
            mib(c.and_then(|c| c.cgroup_limit_bytes)),
            mib(c.and_then(|c| c.peak_bytes)),
            c.map_or(String::new(), page_cache),
            target_verdict(x)
        );
    }
    if let Some(path) = &a.plot {
        let mut plot_cols = vec!["plain".to_string(), ulabel.clone()];
        plot_cols.extend(cols.iter().map(|c| c.label.clone()));
        if !a.no_eqmem {
            plot_cols.extend(cols.iter().map(|c| eqmem_label(&a, &c.label)));
        }
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        plot(path, &cells, &names, &plot_cols)
            .with_context(|| format!("draw {}", path.display()))?;
        println!("\nplot: {}", path.display());
    }
    // A kernel cell the cgroup's OOM killer ended on every try is a
    // figure about the kernel at that memory, not a failure of the run.
    let kernel_oom = cells.iter().filter(|c| oom_only(c, &ulabel)).count();
    let failed = cells
        .iter()
        .filter(|c| !c.ok && !oom_only(c, &ulabel))
        .count();
    if a.json {
        println!(
            "{}",
            json!({
                "bench": "programs",
                "command": command,
                "machine": crate::bench::compare::machine(),
                "quick": a.quick,
                "scale": a.scale,
                "budget_share": a.budget_share,
                "repeat": a.repeat,
                "compressor": a.compressor,
                "uzswap_handler": handler_name(a.uzswap_handler),
                "sample_young": a.young.sample_young == Some(uzswap::SampleYoung::On),
                "sample_young_mode": a.young.program_mode().as_str(),
                "folio_bytes": a.folio,
                "kernel_cells": cols.iter().map(|c| c.label.clone()).collect::<Vec<_>>(),
                "fit_tolerance": a.fit_tolerance,
                "peak_source": if cols.is_empty() { "rusage" } else { "cgroup" },
                "programs": programs,
                "cells": cells,
                "targets": t,
                "eqmem_targets": et,
                "wall_s": wall,
                "failed_cells": failed,
                "kernel_oom_cells": kernel_oom,
            })
        );
    }
    if failed > 0 {
        bail!(
            "{failed} of {} cells failed or gave other output",
            cells.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(program: &str, label: &str, slowdown: f64, ok: bool) -> Cell {
        Cell {
            program: program.into(),
            cell: label.into(),
            ok,
            error: (!ok).then(|| "boom".into()),
            identical: ok.then_some(true),
            elapsed_s: slowdown,
            slowdown: Some(slowdown),
            peak_bytes: Some(100 << 20),
            ..Default::default()
        }
    }

    #[test]
    fn repeated_cells_report_their_median_run() {
        let run = |t: f64, faults: u64| {
            let mut c = cell("threads", TARGET_KERNEL, t, true);
            c.major_faults = faults;
            c
        };
        let mut first = run(9.0, 1);
        first.fits = vec![json!({"limit_bytes": 1})];
        let m = pick_median(vec![first, run(7.0, 2), run(8.0, 3)]);
        // The median run's figures, every time, the first run's fits.
        assert_eq!((m.elapsed_s, m.major_faults), (8.0, 3));
        assert_eq!(m.runs_elapsed_s, vec![9.0, 7.0, 8.0]);
        assert_eq!(m.fits.len(), 1);
        // Of two, the slower; a failed run is left out and said.
        let mut oom = cell("threads", TARGET_KERNEL, 1.0, false);
        oom.error = Some("OOM".into());
        let m = pick_median(vec![run(7.0, 1), oom, run(8.0, 2)]);
        assert_eq!((m.elapsed_s, m.major_faults), (8.0, 2));
        assert_eq!(m.runs_elapsed_s, vec![7.0, 8.0]);
        assert_eq!(m.runs_failed, vec!["OOM".to_string()]);
        assert!(markdown(&[m]).contains("8.00 (median of 2; 1 more failed)"));
        // One run: as it was.
        let m = pick_median(vec![run(5.0, 1)]);
        assert_eq!(m.elapsed_s, 5.0);
        assert!(markdown(&[m]).contains("| 5.00 |"));
    }

    #[test]
    fn targets_compare_slowdowns_with_the_zram_cell() {
        let cells = [
            cell("python", "plain", 1.0, true),
            cell("python", "uzswap-lz4", 3.0, true),
            cell("python", "kernel-zswap-lzo", 1.5, true),
            cell("python", TARGET_KERNEL, 2.5, true),
            cell("sort", "plain", 1.0, true),
            cell("sort", "uzswap-lz4", 9.0, true),
            cell("sort", TARGET_KERNEL, 3.0, true),
            cell("redis", "plain", 1.0, true),
            cell("redis", "uzswap-lz4", 9.0, false),
            cell("redis", TARGET_KERNEL, 3.0, true),
        ];
        let t = targets(&cells, "uzswap-lz4");
        assert_eq!(t.len(), 3);
        assert!((t[0]["value"].as_f64().unwrap() - 1.2).abs() < 1e-9);
        assert_eq!(
            (t[0]["met"].as_bool(), t[0]["goal_met"].as_bool()),
            (Some(true), Some(false))
        );
        assert_eq!(t[1]["met"], false, "3x the kernel's slowdown");
        assert_eq!(t[2]["met"], false);
        assert!(t[2]["note"]
            .as_str()
            .unwrap()
            .contains("uzswap-lz4 cell failed"));
        // A uzswap cell stopped at the time limit: its lower bound is said.
        let mut late = cell("sort", "uzswap-lz4", 0.0, false);
        late.timed_out = true;
        late.slowdown = None;
        late.slowdown_at_least = Some(700.0);
        late.elapsed_s = 700.0;
        let t = targets(&[late.clone(), cells[6].clone()], "uzswap-lz4");
        assert_eq!(t[0]["met"], false);
        assert!(
            t[0]["note"].as_str().unwrap().contains("> 700x"),
            "{}",
            t[0]
        );
        assert!(markdown(&[late]).contains("| > 700x |"));
        // A zram cell the OOM killer ended: said so, and not a failed run.
        let mut oom = cell("sort", TARGET_KERNEL, 1.0, false);
        oom.oom_kills = Some(1);
        let t = targets(&[cells[5].clone(), oom.clone()], "uzswap-lz4");
        assert!(t[0]["note"].as_str().unwrap().contains("OOM killer"));
        assert!(oom_only(&oom, "uzswap-lz4"));
        assert!(!oom_only(&cells[8], "uzswap-lz4"), "a uzswap cell failed");
        // No zram cell (--no-kernel): no target.
        assert!(targets(&cells[..2], "uzswap-lz4").is_empty());
        // A kernel cell that swapped nothing: the verdict says the ratio
        // was taken without pressure; one that swapped, or has no
        // counters, says nothing of it.
        let with_vmstat = |pswpout: u64| {
            let mut k = cells[3].clone();
            k.kernel = Some(json!({"vmstat": {"pswpout": pswpout, "zswpout": 0}}));
            k
        };
        let idle = targets(&[cells[1].clone(), with_vmstat(0)], "uzswap-lz4");
        assert_eq!(idle[0]["kernel_swapped_out_pages"], 0);
        let v = target_verdict(&idle[0]);
        assert!(
            v.starts_with("met, goal missed") && v.contains("no pressure"),
            "{v}"
        );
        let busy = targets(&[cells[1].clone(), with_vmstat(5)], "uzswap-lz4");
        assert_eq!(target_verdict(&busy[0]), "met, goal missed");
        let none = targets(&cells, "uzswap-lz4");
        assert_eq!(target_verdict(&none[0]), "met, goal missed");
    }

    #[test]
    fn budgets_are_a_share_of_the_plain_peak_in_whole_mib() {
        assert_eq!(budget_for(300 << 20, 0.5, 64 << 10), 150 << 20);
        assert_eq!(budget_for((300 << 20) + 4, 0.5, 64 << 10), 151 << 20);
        // Never below what the configuration needs (the fault margin and
        // two chunks), rounded up to whole MiB.
        let tiny = budget_for(1 << 20, 0.5, 2 << 20);
        let min = uzswap::region::min_budget(&uzswap::UzswapConfig {
            folio_order: 9,
            ..Default::default()
        });
        assert!(tiny > 1 << 20 && tiny >= min, "{tiny} {min}");
        assert_eq!(tiny % (1 << 20), 0);
    }

    #[test]
    fn refits_move_the_limit_toward_the_target() {
        // 100 MiB over at ratio 2: each limit byte moves the footprint by
        // half a byte, so the limit drops by 200 MiB.
        let l = refit_limit(500 << 20, 700 << 20, 600 << 20, Some(2.0));
        assert_eq!(l, 300 << 20);
        // Under, with no ratio: the limit moves by the error.
        assert_eq!(
            refit_limit(500 << 20, 550 << 20, 600 << 20, None),
            550 << 20
        );
        // Never below the kernel baselines' floor.
        assert_eq!(
            refit_limit(20 << 20, 900 << 20, 100 << 20, Some(3.0)),
            kernel::MIN_CGROUP_LIMIT
        );
    }

    #[test]
    fn an_oom_kill_raises_the_limit_and_finished_tries_win() {
        // Halfway to the target footprint.
        assert_eq!(raise_after_oom(60 << 20, Some(140 << 20)), 100 << 20);
        // At least a quarter more, with a target at or below the limit too.
        assert_eq!(raise_after_oom(100 << 20, Some(90 << 20)), 125 << 20);
        assert_eq!(raise_after_oom(100 << 20, None), 125 << 20);
        let mut a = cell("t", "zram-lz4", 2.0, true);
        let mut b = cell("t", "zram-lz4", 2.0, false);
        assert!(better(&a, &b, Some(100 << 20)));
        assert!(!better(&b, &a, Some(100 << 20)));
        b.ok = true;
        a.peak_bytes = Some(130 << 20);
        b.peak_bytes = Some(95 << 20);
        assert!(better(&b, &a, Some(100 << 20)), "closer to the target");
        assert!(!better(&a, &b, Some(100 << 20)));
    }

    #[test]
    fn uzswap_figures_take_peaks_and_sum_counts() {
        let procs = [
            json!({"peak_bytes": 10, "pgmajfault": 3, "pool_total_size": 5, "kernel_faults": "served", "program": "a", "share_moves_down": 2}),
            json!({"peak_bytes": 30, "pgmajfault": 4, "pool_total_size": 2, "program": "b", "share_moves_down": 1}),
        ];
        let f = uzswap_figures(&procs);
        assert_eq!(f["peak_bytes"], 30);
        assert_eq!(f["pgmajfault"], 7);
        assert_eq!(f["share_moves_down"], 3);
        assert_eq!(f["pool_total_size"], 5);
        assert_eq!(f["processes"], 2);
        assert_eq!(f["kernel_faults"], "served");
    }

    #[test]
    fn the_table_says_what_each_output_was() {
        let mut differs = cell("sort", "zram-lz4", 2.0, true);
        differs.identical = Some(false);
        let cells = [
            Cell {
                identical: None,
                ..cell("sort", "plain", 1.0, true)
            },
            cell("sort", "uzswap-lz4", 2.0, true),
            differs,
            cell("sort", "kernel-zswap-lzo", 2.0, false),
            not_run("sort", "x".into(), "the plain run failed"),
        ];
        let md = markdown(&cells);
        assert!(md.contains("| reference |"));
        assert!(md.contains("| identical |"));
        assert!(md.contains("| DIFFERS |"));
        assert!(md.contains("failed: boom"));
        let cols = |l: &str| l.matches('|').count();
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines.iter().all(|l| cols(l) == cols(lines[0])), "{md}");
    }

    #[test]
    fn kernel_footprints_name_their_parts_and_the_match() {
        let u = cell("python", "uzswap-lz4", 2.0, true);
        let mut k = cell("python", "zram-lz4", 2.0, true);
        k.limit_bytes = Some(80 << 20);
        k.cgroup_max_usage_bytes = Some(80 << 20);
        k.uncharged_bytes = Some(30 << 20);
        k.peak_bytes = Some(110 << 20);
        k.footprint_vs_uzswap = Some(1.1);
        k.fits = vec![json!({}), json!({})];
        let l = footprint_lines(&[cell("python", "plain", 1.0, true), u, k], "uzswap-lz4");
        assert_eq!(l.len(), 1);
        assert!(
            l[0].contains("cgroup max 80 MiB + uncharged 30 MiB = 110 MiB"),
            "{}",
            l[0]
        );
        assert!(l[0].contains("(non-file 1.10x), 2 tries"), "{}", l[0]);
    }

    const M: u64 = 1 << 20;
    const Q: u64 = FIT_STEP;

    /// A nominal uzswap cell charged `nonfile` MiB beyond page cache at its
    /// peak, of which uzswap's resident + pool was `data` MiB, and a kernel
    /// cell with footprint `fp` MiB of which `cache` MiB page cache.
    fn eqmem_pair(nonfile: u64, data: u64, fp: u64, cache: u64) -> (Cell, Cell) {
        let mut u = cell("sqlite", "uzswap-lz4", 30.0, true);
        u.peak_bytes = Some((nonfile + 43) * M);
        u.cgroup_at_peak = Some(json!({"anon": (nonfile - 2) * M, "file": 43 * M}));
        u.nonfile_peak_bytes = Some(nonfile * M);
        u.uzswap = Some(json!({"peak_bytes": data * M}));
        u.limit_bytes = Some(data * M);
        let mut k = cell("sqlite", TARGET_KERNEL, 0.9, true);
        k.peak_bytes = Some(fp * M);
        k.cgroup_at_peak = Some(json!({"anon": (fp - cache) * M, "file": cache * M}));
        (u, k)
    }

    #[test]
    fn the_equal_memory_budget_is_the_kernel_cells_footprint_less_uzswaps_own_memory() {
        // uzswap was charged 34 - 25 = 9 MiB beyond its data and page
        // cache; the kernel cell's footprint is 75 MiB and the margin
        // 75/32: 63.66 MiB of budget, 63.5 in quarter MiB. Neither cell's
        // page cache counts: it gets what the budget leaves.
        let (u, k) = eqmem_pair(34, 25, 75, 29);
        assert_eq!(own_bytes(&u), Some(9 * M));
        assert_eq!(eqmem_budget(&u, &k), Some(63 * M + 2 * Q));
        // Own memory larger than the kernel cell's footprint: no budget.
        let (u, k) = eqmem_pair(90, 10, 60, 0);
        assert_eq!(eqmem_budget(&u, &k), None);
        // A kernel cell that failed has no footprint to match.
        let (u, mut k) = eqmem_pair(34, 25, 75, 29);
        k.ok = false;
        assert_eq!(eqmem_budget(&u, &k), None);
        // Nor does a nominal cell without the sampled figure.
        let (mut u, k) = eqmem_pair(34, 25, 75, 29);
        u.nonfile_peak_bytes = None;
        assert_eq!(eqmem_budget(&u, &k), None);
        // Quarter MiB, rounded down: 65.59 is 65.5.
        let (u, mut k) = eqmem_pair(34, 25, 75, 29);
        k.peak_bytes = Some(77 * M);
        assert_eq!(eqmem_budget(&u, &k), Some(65 * M + 2 * Q));
        // The fit: 6 MiB of own memory at a 53 MiB limit leaves 45.34.
        assert_eq!(fit_budget(53 * M, 6 * M, 1.0), Some(45 * M + Q));
        assert_eq!(fit_budget(4 * M, 4 * M, 1.0), None);
        // Data that fills 90% of its budget: a ninth more budget (50.38).
        assert_eq!(fit_budget(53 * M, 6 * M, 0.9), Some(50 * M + Q));
        // The nominal cell's data filled 25 of a 30 MiB budget. With 19
        // MiB of its own, 63.34 MiB of room at 85 MiB over 5/6 is 76.
        let (mut u, k) = eqmem_pair(44, 25, 85, 29);
        u.limit_bytes = Some(30 * M);
        assert_eq!(eqmem_budget(&u, &k), Some(76 * M));
        // With 9 MiB of its own, 53.97 MiB of room at 65 MiB over 5/6 is
        // 64.8, more than the 62.97 the limit less its margin leaves.
        let (mut u, k) = eqmem_pair(34, 25, 65, 29);
        u.limit_bytes = Some(30 * M);
        assert_eq!(eqmem_budget(&u, &k), Some(62 * M + 3 * Q));
        // A fill below half is taken as half.
        u.limit_bytes = Some(100 * M);
        assert_eq!(fill(&u), Some(0.5));
    }

    #[test]
    fn the_equal_memory_fit_raises_after_room_and_lowers_after_an_oom_kill() {
        let t = Try {
            budget: 40 * M,
            limit: 64 * M,
            min: 4 * M,
            finished: true,
            fitted: Some(44 * M),
            any_finished: false,
            ceiling: u64::MAX,
        };
        // Finished with 4 MiB of room: run again there.
        assert_eq!(next_eqmem_budget(t), Some(44 * M));
        // One MiB more is a try too (near a cliff it is seconds).
        assert_eq!(
            next_eqmem_budget(Try {
                fitted: Some(41 * M),
                ..t
            }),
            Some(41 * M)
        );
        // A quarter MiB more is a try at a 64 MiB limit (its 1/256), not
        // at 256 MiB.
        let q = Try {
            fitted: Some(40 * M + Q),
            ..t
        };
        assert_eq!(next_eqmem_budget(q), Some(40 * M + Q));
        assert_eq!(
            next_eqmem_budget(Try {
                limit: 256 * M,
                ..q
            }),
            None
        );
        // No more than this try had: it stands.
        for b in [40, 39] {
            assert_eq!(
                next_eqmem_budget(Try {
                    fitted: Some(b * M),
                    ..t
                }),
                None
            );
        }
        assert_eq!(next_eqmem_budget(Try { fitted: None, ..t }), None);
        // Never back to a budget the OOM killer ended.
        assert_eq!(
            next_eqmem_budget(Try {
                ceiling: 44 * M,
                ..t
            }),
            None
        );
        // OOM-killed with nothing finished: 1/32 of the limit less.
        let oom = Try {
            finished: false,
            fitted: None,
            ..t
        };
        assert_eq!(next_eqmem_budget(oom), Some(38 * M));
        // ... down to the least budget, then no more.
        assert_eq!(
            next_eqmem_budget(Try {
                budget: 5 * M,
                ..oom
            }),
            Some(4 * M)
        );
        assert_eq!(
            next_eqmem_budget(Try {
                budget: 4 * M,
                ..oom
            }),
            None
        );
        // OOM-killed after a try finished: the finished one stands.
        assert_eq!(
            next_eqmem_budget(Try {
                any_finished: true,
                ..oom
            }),
            None
        );
    }

    #[test]
    fn equal_memory_cells_are_compared_with_the_kernel_cell_they_were_matched_to() {
        let mut cells = vec![
            cell("python", "plain", 1.0, true),
            cell("python", "uzswap-lz4", 6.0, true),
            cell("python", "kernel-zswap-lzo", 2.0, true),
            cell("python", TARGET_KERNEL, 1.5, true),
        ];
        let mut e = cell("python", "uzswap-lz4-eqmem-zram-lz4", 2.0, true);
        e.matched_to = Some(TARGET_KERNEL.into());
        cells.push(e);
        let mut e = cell("python", "uzswap-lz4-eqmem-kernel-zswap-lzo", 4.0, true);
        e.matched_to = Some("kernel-zswap-lzo".into());
        cells.push(e);
        let mut e = cell("python", "uzswap-lz4-eqmem-zram-lz4", 0.0, false);
        e.program = "sort".into();
        e.matched_to = Some(TARGET_KERNEL.into());
        e.oom_kills = Some(3);
        cells.push(e);
        cells.push(cell("sort", TARGET_KERNEL, 2.0, true));
        let t = eqmem_targets(&cells);
        assert_eq!(t.len(), 3);
        assert!((t[0]["value"].as_f64().unwrap() - 2.0 / 1.5).abs() < 1e-9);
        assert_eq!(
            (t[0]["met"].as_bool(), t[0]["is_target"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!(t[0]["goal_met"], false);
        assert_eq!(
            (t[1]["value"].as_f64(), t[1]["met"].as_bool()),
            (Some(2.0), Some(false))
        );
        assert_eq!(t[1]["is_target"], false);
        assert_eq!(t[2]["value"], Value::Null);
        assert!(
            t[2]["note"].as_str().unwrap().contains("OOM killer"),
            "{}",
            t[2]
        );
        // A uzswap cell ended by its cgroup's OOM killer is a failure, not
        // a kernel figure.
        assert!(!oom_only(&cells[6], "uzswap-lz4"));
    }
}
