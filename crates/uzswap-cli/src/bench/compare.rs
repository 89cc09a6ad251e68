//! `uzswap bench compare`: the same usemem workload (patterns × backends)
//! against uzswap and the kernel's zswap, zram and disk swap, each cell in
//! its own `uzswap usemem` process measured the same way: its CPU time comes
//! from wait4() (the whole process tree, kernel reclaim done on its behalf
//! included), the rest from its JSON line.
//!
//! Memory is counted the same way on both sides: uzswap's peak is its
//! resident pages plus its pool, all inside the budget; a kernel cell's peak
//! is its cgroup's high-water mark plus what the cgroup was not charged for
//! (zswap's pool under cgroup v1, zram's device; see
//! `crate::kernel::footprint`). Under cgroup v1 the kernel's zswap so runs
//! with more memory than the budget; the equal-memory cell
//! (`uzswap-lz4-eqmem`, run right after a pattern's kernel-zswap-lzo cell)
//! gives uzswap that cell's real footprint as its budget, so the two can be
//! compared at the same memory as well as at the same nominal budget. Every
//! other kernel cell gets one too (`uzswap-lz4-eqmem-<kernel backend>`, e.g.
//! `uzswap-lz4-eqmem-zram-lz4`), and the targets are also computed against
//! the best kernel backend of each row, whichever that is.
//!
//! Rows: one per data pattern with the skewed read pass, and the `random` row
//! (`usemem --access random`: Zipf-chosen pages of the whole working set,
//! shared by 4 workers, 8-byte reads and writes, 20% writes).
//!
//! The kernel cells need root; each restores the machine itself (see
//! `crate::kernel`). Output: a markdown table and the target ratios on
//! stdout, one JSON object on the last line, and with --plot a PNG.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::usemem::parse_size;

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;
const PAGE: f64 = 4096.0;

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
    /// Draw throughput and CPU seconds per GiB moved out to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Working set of each cell (all workers together).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Memory budget of each cell (uzswap's budget, the cgroup's limit).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub budget: u64,
    /// Worker threads per cell.
    #[arg(short = 'n', long, default_value_t = 2)]
    pub workers: usize,
    /// Folio size for every backend (uzswap's chunk; the kernel's mTHP size).
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Patterns, comma-separated.
    #[arg(long, default_value = "index,text,mixed", value_delimiter = ',')]
    pub patterns: Vec<uzswap::Pattern>,
    /// Backends, comma-separated: uzswap-<compressor>, kernel-zswap-<compressor>,
    /// zram-<compressor>, swapfile.
    #[arg(
        long,
        default_value = "uzswap-lz4,uzswap-lzo,kernel-zswap-lzo,zram-lz4,swapfile",
        value_delimiter = ','
    )]
    pub backends: Vec<String>,
    /// Skip the equal-memory cells (uzswap-lz4 with a kernel cell's real
    /// footprint as its budget) that otherwise follow each kernel cell.
    #[arg(long)]
    pub no_eqmem: bool,
    /// Leave out the `random` row (usemem `--access random`).
    #[arg(long)]
    pub no_random: bool,
    /// The random row's data pattern (its fill pass is the usual write pass).
    #[arg(long, default_value = "mixed")]
    pub random_pattern: uzswap::Pattern,
    /// The random row's worker threads, all sharing every page.
    #[arg(long, default_value_t = 4)]
    pub random_workers: usize,
    /// The random row's Zipf exponent of page choice (0: uniform).
    #[arg(long, default_value_t = 0.99)]
    pub zipf: f64,
    /// How uzswap cells resolve faults (usemem's `--handler`): `signal`, in
    /// the faulting thread (usemem never hands region memory to a system
    /// call, which that mode cannot serve), or `block`, the library's
    /// default, handler threads.
    #[arg(long, value_enum, default_value = "signal")]
    pub uzswap_handler: crate::usemem::Handler,
    /// Run the whole matrix this many times, round after round, and report
    /// each cell's median run by throughput (a run that failed in any round
    /// is reported instead). On a shared machine one run's speed moves by
    /// 15% and more; rounds spread that over every backend alike.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub repeat: u32,
}

/// The kernel cell the equal-memory cell matches, and the equal-memory cell.
pub const EQMEM_KERNEL: &str = "kernel-zswap-lzo";
pub const EQMEM_LABEL: &str = "uzswap-lz4-eqmem";

/// The equal-memory column (uzswap with lz4, its budget set per row)
/// matched to kernel column `kernel`: the existing
/// `uzswap-lz4-eqmem` for kernel-zswap-lzo, `uzswap-lz4-eqmem-<kernel>` for
/// the others.
pub fn eqmem_column_for(kernel: &str) -> Column {
    Column {
        label: if kernel == EQMEM_KERNEL {
            EQMEM_LABEL.into()
        } else {
            format!("{EQMEM_LABEL}-{kernel}")
        },
        backend: "uzswap",
        compressor: "lz4".into(),
    }
}

/// The label of the random-access row (the data pattern's name otherwise).
pub const RANDOM_ROW: &str = "random";

/// A matrix row: a workload every column runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// What the tables call it: the pattern's name, or `random`.
    pub label: String,
    pub pattern: uzswap::Pattern,
    pub access: crate::usemem::Access,
    pub workers: usize,
}

/// The rows `a` asks for: each pattern with the skewed read pass, then the
/// random-access row.
pub fn rows(a: &Args) -> Vec<Row> {
    let mut v: Vec<Row> = a
        .patterns
        .iter()
        .map(|&p| Row {
            label: p.name().into(),
            pattern: p,
            access: crate::usemem::Access::Skew,
            workers: a.workers,
        })
        .collect();
    if !a.no_random {
        // A `random` data pattern row keeps its name; this one says what
        // differs.
        let label = if a.patterns.contains(&uzswap::Pattern::Random) {
            "random-access"
        } else {
            RANDOM_ROW
        };
        v.push(Row {
            label: label.into(),
            pattern: a.random_pattern,
            access: crate::usemem::Access::Random,
            workers: a.random_workers,
        });
    }
    v
}

/// A matrix column: the usemem backend and its compressor.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub label: String,
    pub backend: &'static str,
    pub compressor: String,
}

pub fn parse_column(s: &str) -> Result<Column> {
    let s = s.trim();
    if s.contains("-eqmem") {
        bail!(
            "'{s}': the equal-memory cell follows each {EQMEM_KERNEL} cell by itself \
             and each kernel cell (--no-eqmem turns them off); it is not a backend to name"
        );
    }
    let (backend, comp) = if s == "swapfile" {
        ("swapfile", "lz4")
    } else if let Some(c) = s.strip_prefix("kernel-zswap-") {
        ("kernel-zswap", c)
    } else if let Some(c) = s.strip_prefix("zram-") {
        ("zram", c)
    } else if let Some(c) = s.strip_prefix("uzswap-") {
        ("uzswap", c)
    } else {
        bail!("unknown backend '{s}' (use uzswap-<c>, kernel-zswap-<c>, zram-<c> or swapfile)");
    };
    if comp.is_empty() {
        bail!("backend '{s}' names no compressor");
    }
    Ok(Column {
        label: s.to_string(),
        backend,
        compressor: comp.to_string(),
    })
}

/// One cell's figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Cell {
    pub pattern: String,
    pub backend: String,
    pub ok: bool,
    pub error: Option<String>,
    pub throughput_mbps: f64,
    pub elapsed_s: f64,
    pub cpu_s: f64,
    pub moved_out_bytes: u64,
    pub cpu_s_per_gib_out: Option<f64>,
    pub peak_bytes: Option<u64>,
    pub compression_ratio: Option<f64>,
    pub major_faults: Option<u64>,
    pub verify_checked_pages: u64,
    pub verify_mismatches: Option<u64>,
    pub wall_s: f64,
    /// The budget this cell ran under (uzswap's budget, the cgroup's limit).
    pub budget_bytes: u64,
    /// Kernel cells: the cgroup's own high-water mark (`peak_bytes` adds
    /// what the cgroup was not charged for).
    pub cgroup_max_usage_bytes: Option<u64>,
    /// kernel-zswap cells: the pool at its peak, and whether the cgroup was
    /// charged for it (cgroup v2) or it was added to `peak_bytes` (v1).
    pub zswap_pool_peak_bytes: Option<u64>,
    pub zswap_pool_charged: Option<bool>,
    /// The equal-memory cell: the kernel cell whose footprint is its budget.
    pub eqmem_of: Option<String>,
    /// With `--repeat`: the throughput of each round's run, in order (this
    /// cell is the median one).
    pub runs_mbps: Vec<f64>,
    /// The row's workload: its data pattern, access order and workers
    /// (`pattern` is the row's label: the data pattern, or `random`).
    pub data_pattern: Option<String>,
    pub access: Option<String>,
    pub workers: Option<usize>,
    /// The random row: operations per second of its random passes.
    pub ops_per_s: Option<f64>,
}

/// One cell per position from `rounds` (each the same matrix, in the same
/// order): the run with the median throughput, or the first failed run if
/// any round failed, with every round's throughput in `runs_mbps`.
pub fn median_cells(rounds: Vec<Vec<Cell>>) -> Vec<Cell> {
    let n = rounds.first().map_or(0, Vec::len);
    debug_assert!(rounds.iter().all(|r| r.len() == n));
    let mut cols: Vec<Vec<Cell>> = (0..n).map(|_| Vec::new()).collect();
    for round in rounds {
        for (i, c) in round.into_iter().enumerate() {
            cols[i].push(c);
        }
    }
    cols.into_iter()
        .map(|mut runs| {
            let all: Vec<f64> = runs.iter().map(|c| c.throughput_mbps).collect();
            let mut pick = match runs.iter().position(|c| !c.ok) {
                Some(bad) => runs.swap_remove(bad),
                None => {
                    runs.sort_by(|a, b| a.throughput_mbps.total_cmp(&b.throughput_mbps));
                    // The lower middle of an even count: never the better of two.
                    runs.swap_remove((runs.len() - 1) / 2)
                }
            };
            pick.runs_mbps = all;
            pick
        })
        .collect()
}

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    let mut v = v;
    for k in path {
        v = v.get(*k)?;
    }
    v.as_f64()
}

/// Fill a cell from a usemem JSON line plus the CPU time wait4() measured.
pub fn cell_from_json(pattern: &str, col: &Column, r: &Value, cpu_s: f64) -> Cell {
    let kernel = col.backend != "uzswap";
    let moved_out = if kernel {
        num(r, &["moved_out_bytes"]).unwrap_or(0.0) as u64
    } else {
        // Pages uzswap compressed out (written-back pages were stored first).
        (num(r, &["stats", "zswpout"]).unwrap_or(0.0) * PAGE) as u64
    };
    let ratio = num(r, &["compression_ratio"]).or_else(|| {
        let stored = num(r, &["stats", "stored_pages"])? * PAGE;
        let pool = num(r, &["stats", "pool_total_size"])?;
        (stored > 0.0 && pool > 0.0).then(|| stored / pool)
    });
    let faults = if kernel {
        num(r, &["kernel", "vmstat", "pgmajfault"])
    } else {
        num(r, &["stats", "pgmajfault"]).or_else(|| num(r, &["stats", "faults"]))
    };
    let mismatches = num(r, &["verify", "mismatches"]).map(|m| m as u64);
    let checked = num(r, &["verify", "checked_pages"]).unwrap_or(0.0) as u64;
    let ok = mismatches == Some(0) && checked > 0;
    Cell {
        pattern: pattern.to_string(),
        backend: col.label.clone(),
        ok,
        error: (!ok).then(|| format!("verify: {checked} pages checked, mismatches {mismatches:?}")),
        throughput_mbps: num(r, &["throughput_mbps"]).unwrap_or(0.0),
        elapsed_s: num(r, &["elapsed_s"]).unwrap_or(0.0),
        cpu_s,
        moved_out_bytes: moved_out,
        cpu_s_per_gib_out: (moved_out > 0).then(|| cpu_s / (moved_out as f64 / GIB)),
        peak_bytes: num(r, &["peak_bytes"]).map(|p| p as u64),
        compression_ratio: ratio,
        major_faults: faults.map(|f| f as u64),
        verify_checked_pages: checked,
        verify_mismatches: mismatches,
        wall_s: 0.0,
        budget_bytes: num(r, &["budget_bytes"])
            .or_else(|| num(r, &["kernel", "cgroup_limit_bytes"]))
            .unwrap_or(0.0) as u64,
        cgroup_max_usage_bytes: num(r, &["kernel", "cgroup_max_usage_bytes"]).map(|b| b as u64),
        zswap_pool_peak_bytes: num(r, &["kernel", "zswap_pool_peak_bytes"]).map(|b| b as u64),
        zswap_pool_charged: r["kernel"]["zswap_pool_charged"].as_bool(),
        eqmem_of: None,
        runs_mbps: Vec::new(),
        data_pattern: r["pattern"].as_str().map(str::to_owned),
        access: r["access"].as_str().map(str::to_owned),
        workers: num(r, &["workers"]).map(|w| w as usize),
        ops_per_s: num(r, &["random", "ops_per_s"]),
    }
}

fn cell_args(a: &Args, row: &Row, col: &Column, budget: u64) -> Vec<String> {
    let pattern = row.pattern;
    let mut v: Vec<String> = [
        "usemem",
        "--backend",
        col.backend,
        "--compressor",
        &col.compressor,
        "--pattern",
        pattern.name(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (k, val) in [
        ("--workers", row.workers.to_string()),
        ("--size", a.size.to_string()),
        ("--budget", budget.to_string()),
        ("--folio", a.folio.to_string()),
        ("--passes", "2".into()),
        ("--access", row.access.name().into()),
    ] {
        v.push(k.into());
        v.push(val);
    }
    if row.access == crate::usemem::Access::Random {
        // Operations default to the working set's pages per worker; the
        // write share is usemem's (20%).
        v.push("--zipf".into());
        v.push(a.zipf.to_string());
    }
    if col.backend == "uzswap" {
        v.push("--handler".into());
        v.push(handler_name(a.uzswap_handler));
    }
    v.push("--verify".into());
    v.push("--json".into());
    v
}

/// The name usemem's `--handler` takes for `h`.
fn handler_name(h: crate::usemem::Handler) -> String {
    use clap::ValueEnum;
    h.to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// Run one cell in its own process; (JSON line, user+sys of its tree).
pub(crate) fn run_cell(args: &[String]) -> Result<(Value, f64)> {
    let exe = std::env::current_exe().context("find the uzswap executable")?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("start usemem")?;
    let mut err = child.stderr.take().context("stderr pipe")?;
    let errt = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut out = String::new();
    child
        .stdout
        .take()
        .context("stdout pipe")?
        .read_to_string(&mut out)?;
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data the call fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: `pid` is our unreaped child; status and ru are valid out pointers.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    let stderr = errt.join().unwrap_or_default();
    if r != pid {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = tv(ru.ru_utime) + tv(ru.ru_stime);
    let exited_ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    if !exited_ok {
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        bail!(
            "usemem failed (wait status {status:#x}): {}",
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        );
    }
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("usemem printed no JSON line")?;
    Ok((
        serde_json::from_str(line).context("usemem's JSON line")?,
        cpu,
    ))
}

/// The equal-memory cell's budget: the kernel cell's real footprint, or why
/// there is none.
pub fn eqmem_budget(kernel: &Cell) -> std::result::Result<u64, String> {
    match kernel.peak_bytes {
        Some(p) if kernel.ok && p > 0 => Ok(p),
        _ => Err(format!(
            "no footprint to match: the {} cell {}",
            kernel.backend,
            if kernel.ok {
                "reported no peak"
            } else {
                "failed"
            }
        )),
    }
}

/// The targets, as ratios from the same run. The throughput and CPU
/// targets are given twice where the equal-memory cell ran: uzswap-lz4 at
/// the nominal budget, and at the kernel cell's real footprint. The peak
/// target is uzswap's: each uzswap cell within the budget it was given.
pub fn targets(cells: &[Cell], budget: u64) -> Vec<Value> {
    let get = |p: &str, b: &str| {
        cells
            .iter()
            .find(|c| c.pattern == p && c.backend == b && c.ok)
    };
    let mut pats: Vec<&str> = cells.iter().map(|c| c.pattern.as_str()).collect();
    pats.dedup();
    let mut t = Vec::new();
    for p in pats {
        let k = get(p, EQMEM_KERNEL);
        for (u, want) in [("uzswap-lzo", 1.0), ("uzswap-lz4", 1.5), (EQMEM_LABEL, 1.5)] {
            if u == "uzswap-lzo" && p == "text" {
                // The issue sets the lzo target on index and mixed only.
                continue;
            }
            let (Some(u), Some(k)) = (get(p, u), k) else {
                continue;
            };
            let memory = if u.backend == EQMEM_LABEL {
                "equal memory"
            } else {
                "nominal budget"
            };
            let r = u.throughput_mbps / k.throughput_mbps.max(1e-9);
            t.push(
                json!({"target": format!("{} throughput / {EQMEM_KERNEL} >= {want}", u.backend),
                "pattern": p, "value": r, "met": r >= want, "memory": memory,
                "budget_bytes": u.budget_bytes}),
            );
            if let (Some(uc), Some(kc)) = (u.cpu_s_per_gib_out, k.cpu_s_per_gib_out) {
                let r = uc / kc;
                t.push(
                    json!({"target": format!("{} CPU s/GiB out / {EQMEM_KERNEL} <= 1", u.backend),
                    "pattern": p, "value": r, "met": r <= 1.0, "memory": memory,
                    "budget_bytes": u.budget_bytes}),
                );
            }
        }
        for u in ["uzswap-lzo", "uzswap-lz4", EQMEM_LABEL] {
            if let Some(c) = get(p, u) {
                if let Some(pk) = c.peak_bytes {
                    let b = if c.budget_bytes > 0 {
                        c.budget_bytes
                    } else {
                        budget
                    };
                    let r = pk as f64 / b as f64;
                    t.push(
                        json!({"target": format!("{u} peak / budget <= 1"), "pattern": p,
                        "value": r, "met": r <= 1.0, "budget_bytes": b}),
                    );
                }
            }
        }
    }
    t
}

/// Whether a cell's backend is one of the kernel's (not a uzswap cell).
fn is_kernel(backend: &str) -> bool {
    !backend.starts_with("uzswap-")
}

/// The equal-memory cells, one per kernel cell that had one: the kernel
/// cell's figures, the budget uzswap-lz4 was given (that cell's footprint),
/// and uzswap's throughput over the kernel's at that memory.
pub fn eqmem_pairs(cells: &[Cell]) -> Vec<Value> {
    cells
        .iter()
        .filter_map(|e| {
            let of = e.eqmem_of.as_deref()?;
            let k = cells
                .iter()
                .find(|k| k.pattern == e.pattern && k.backend == of)?;
            let ratio = (e.ok && k.ok).then(|| e.throughput_mbps / k.throughput_mbps.max(1e-9));
            Some(json!({
                "pattern": e.pattern, "kernel": of, "kernel_mbps": k.throughput_mbps,
                "kernel_ok": k.ok, "kernel_footprint_bytes": k.peak_bytes,
                "kernel_cgroup_max_usage_bytes": k.cgroup_max_usage_bytes,
                "eqmem": e.backend, "eqmem_ok": e.ok, "eqmem_budget_bytes": e.budget_bytes,
                "eqmem_mbps": e.ok.then_some(e.throughput_mbps),
                "eqmem_peak_bytes": e.peak_bytes, "value": ratio,
                "error": e.error,
            }))
        })
        .collect()
}

/// Per row, the kernel cell with the highest throughput, and each uzswap
/// cell's throughput over it: uzswap-lzo and uzswap-lz4 at the nominal
/// budget, and the equal-memory cell matched to that kernel cell (`eqmem`).
pub fn best_kernel(cells: &[Cell]) -> Vec<Value> {
    let mut rows: Vec<&str> = Vec::new();
    for c in cells {
        if !rows.contains(&c.pattern.as_str()) {
            rows.push(&c.pattern);
        }
    }
    rows.into_iter()
        .filter_map(|p| {
            let best = cells
                .iter()
                .filter(|c| c.pattern == p && c.ok && is_kernel(&c.backend))
                .max_by(|a, b| a.throughput_mbps.total_cmp(&b.throughput_mbps))?;
            let eq_label = eqmem_column_for(&best.backend).label;
            let ratios: Vec<Value> = cells
                .iter()
                .filter(|c| c.pattern == p && c.ok && !is_kernel(&c.backend))
                .filter(|c| c.eqmem_of.is_none() || c.backend == eq_label)
                .map(|c| {
                    json!({"backend": c.backend,
                        "memory": if c.eqmem_of.is_some() { "equal memory" } else { "nominal budget" },
                        "budget_bytes": c.budget_bytes,
                        "value": c.throughput_mbps / best.throughput_mbps.max(1e-9),
                        // The random row's MB/s includes its fill pass; its
                        // random passes alone, as operations per second.
                        "ops_value": c.ops_per_s.zip(best.ops_per_s).map(|(u, k)| u / k.max(1e-9))})
                })
                .collect();
            Some(json!({
                "pattern": p, "best_kernel": best.backend, "best_kernel_mbps": best.throughput_mbps,
                "best_kernel_footprint_bytes": best.peak_bytes, "eqmem": eq_label, "ratios": ratios,
            }))
        })
        .collect()
}

/// The targets against the best kernel backend of each row and against each
/// kernel cell at equal memory: uzswap at least as fast (ratio >= 1).
pub fn best_kernel_targets(cells: &[Cell]) -> Vec<Value> {
    let mut t = Vec::new();
    for b in best_kernel(cells) {
        let best = b["best_kernel"].as_str().unwrap_or("");
        for r in b["ratios"].as_array().into_iter().flatten() {
            let v = r["value"].as_f64().unwrap_or(0.0);
            t.push(json!({
                "target": format!("{} throughput / best kernel ({best}) >= 1",
                    r["backend"].as_str().unwrap_or("")),
                "pattern": b["pattern"], "value": v, "met": v >= 1.0, "memory": r["memory"],
                "budget_bytes": r["budget_bytes"], "versus": best,
            }));
        }
    }
    for e in eqmem_pairs(cells) {
        let kernel = e["kernel"].as_str().unwrap_or("");
        // kernel-zswap-lzo's equal-memory target is the 1.5x one above.
        let Some(v) = e["value"].as_f64().filter(|_| kernel != EQMEM_KERNEL) else {
            continue;
        };
        t.push(json!({
            "target": format!("{} throughput / {kernel} >= 1", e["eqmem"].as_str().unwrap_or("")),
            "pattern": e["pattern"], "value": v, "met": v >= 1.0, "memory": "equal memory",
            "budget_bytes": e["eqmem_budget_bytes"], "versus": kernel,
        }));
    }
    t
}

/// The best-kernel and equal-memory tables, in markdown.
pub fn best_kernel_markdown(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| row | best kernel | MB/s | uzswap-lzo | uzswap-lz4 | uzswap-lz4 at its memory |\n\
         |---|---|---:|---:|---:|---:|\n",
    );
    for b in best_kernel(cells) {
        let ratio = |f: &dyn Fn(&Value) -> bool| {
            b["ratios"]
                .as_array()
                .and_then(|r| r.iter().find(|x| f(x)))
                .and_then(|x| x["value"].as_f64())
                .map_or("-".into(), |v| format!("{v:.2}x"))
        };
        s += &format!(
            "| {} | {} | {:.0} | {} | {} | {} |\n",
            b["pattern"].as_str().unwrap_or(""),
            b["best_kernel"].as_str().unwrap_or(""),
            b["best_kernel_mbps"].as_f64().unwrap_or(0.0),
            ratio(&|x| x["backend"] == "uzswap-lzo"),
            ratio(&|x| x["backend"] == "uzswap-lz4"),
            ratio(&|x| x["memory"] == "equal memory"),
        );
    }
    s += "\n| row | kernel | MB/s | footprint MiB | uzswap-lz4 at that memory, MB/s | ratio |\n\
          |---|---|---:|---:|---:|---:|\n";
    for e in eqmem_pairs(cells) {
        s += &format!(
            "| {} | {} | {:.0} | {} | {} | {} |\n",
            e["pattern"].as_str().unwrap_or(""),
            e["kernel"].as_str().unwrap_or(""),
            e["kernel_mbps"].as_f64().unwrap_or(0.0),
            opt(e["kernel_footprint_bytes"].as_f64().map(|b| b / MIB), 0),
            e["eqmem_mbps"]
                .as_f64()
                .map_or_else(|| "failed".into(), |v| format!("{v:.0}")),
            e["value"]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.2}x")),
        );
    }
    s
}

/// Each kernel cell's real footprint over the budget it was given (not a
/// target: it shows how much memory the kernel really ran with), with a line
/// saying what was added to the cgroup's figure.
pub fn footprints(cells: &[Cell]) -> Vec<Value> {
    cells
        .iter()
        .filter(|c| c.ok && !c.backend.starts_with("uzswap-") && c.budget_bytes > 0)
        .filter_map(|c| {
            let pk = c.peak_bytes?;
            let r = pk as f64 / c.budget_bytes as f64;
            let mib = |b: u64| b as f64 / MIB;
            let how = match (c.zswap_pool_charged, c.zswap_pool_peak_bytes) {
                (Some(false), Some(pool)) => format!(
                    "cgroup max {:.0} MiB + zswap pool peak {:.0} MiB: the pool is not charged \
                     to a cgroup v1",
                    mib(c.cgroup_max_usage_bytes.unwrap_or(0)),
                    mib(pool)
                ),
                (Some(true), _) => "cgroup max; its pool is charged to the cgroup (v2)".into(),
                _ if c.backend.starts_with("zram-") => format!(
                    "cgroup max {:.0} MiB + zram device memory",
                    mib(c.cgroup_max_usage_bytes.unwrap_or(0))
                ),
                _ => "cgroup max".into(),
            };
            Some(json!({
                "pattern": c.pattern, "backend": c.backend, "peak_bytes": pk,
                "budget_bytes": c.budget_bytes, "value": r,
                "zswap_pool_charged": c.zswap_pool_charged,
                "line": format!("{} footprint / budget on {}: {r:.2} ({:.0} MiB; {how})",
                    c.backend, c.pattern, mib(pk)),
            }))
        })
        .collect()
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}"))
        .unwrap_or_else(|| "-".into())
}

pub fn markdown(cells: &[Cell]) -> String {
    let mut s = String::from(
        "| pattern | backend | MB/s | elapsed s | CPU s | CPU s/GiB out | GiB out | budget MiB | peak MiB | ratio | major faults | verify |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for c in cells {
        if let Some(e) = c.error.as_ref().filter(|_| c.verify_checked_pages == 0) {
            s += &format!(
                "| {} | {} | failed: {} ||||||||||\n",
                c.pattern,
                c.backend,
                e.replace('|', "/")
            );
            continue;
        }
        s += &format!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {} | {:.2} | {} | {} | {} | {} | {} |\n",
            c.pattern,
            c.backend,
            c.throughput_mbps,
            c.elapsed_s,
            c.cpu_s,
            opt(c.cpu_s_per_gib_out, 2),
            c.moved_out_bytes as f64 / GIB,
            opt((c.budget_bytes > 0).then(|| c.budget_bytes as f64 / MIB), 0),
            opt(c.peak_bytes.map(|p| p as f64 / MIB), 0),
            opt(c.compression_ratio, 2),
            c.major_faults.map(|f| f.to_string()).unwrap_or("-".into()),
            match c.verify_mismatches {
                Some(0) if c.ok => format!("ok ({} pages)", c.verify_checked_pages),
                Some(m) => format!("{m} MISMATCHES"),
                None => "not reported".into(),
            }
        );
    }
    s
}

pub fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
        });
    // SAFETY: utsname is plain data that uname fills.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    let kernel = if unsafe { libc::uname(&mut u) } == 0 {
        // SAFETY: uname NUL-terminates release.
        unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    } else {
        String::new()
    };
    let mem = crate::kernel::vmstat::parse_kv(
        &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
    )
    .get("MemTotal")
    .copied();
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": cpu,
        "mem_total_bytes": mem,
        "kernel": kernel,
    })
}

pub fn run(a: Args) -> Result<()> {
    let cols: Vec<Column> = a
        .backends
        .iter()
        .map(|b| parse_column(b))
        .collect::<Result<_>>()?;
    if a.patterns.is_empty() || cols.is_empty() {
        bail!("nothing to run: give at least one pattern and one backend");
    }
    // SAFETY: geteuid() has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && cols.iter().any(|c| c.backend != "uzswap") {
        bail!(
            "the kernel backends (kernel-zswap, zram, swapfile) need root; run as root or pass \
             --backends with uzswap-* only"
        );
    }
    let command: String = std::iter::once("uzswap".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let rows = rows(&a);
    let eqmem = !a.no_eqmem && cols.iter().any(|c| is_kernel(&c.label));
    let n_kernel = cols.iter().filter(|c| is_kernel(&c.label)).count();
    let per_round = rows.len() * (cols.len() + if eqmem { n_kernel } else { 0 });
    let total = per_round * a.repeat as usize;
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let t0 = Instant::now();
    let mut rounds = Vec::with_capacity(a.repeat as usize);
    let run_one = |row: &Row, col: &Column, budget: u64| {
        bar.set_message(format!("{} / {}", row.label, col.label));
        let t = Instant::now();
        let mut cell = match run_cell(&cell_args(&a, row, col, budget)) {
            Ok((r, cpu)) => cell_from_json(&row.label, col, &r, cpu),
            Err(e) => Cell {
                pattern: row.label.clone(),
                backend: col.label.clone(),
                error: Some(format!("{e:#}")),
                ..Default::default()
            },
        };
        cell.budget_bytes = budget;
        cell.wall_s = t.elapsed().as_secs_f64();
        if let Some(e) = &cell.error {
            bar.println(format!("{} / {}: {e}", row.label, col.label));
        }
        bar.inc(1);
        cell
    };
    for _ in 0..a.repeat {
        let mut cells = Vec::with_capacity(per_round);
        for row in &rows {
            for col in &cols {
                let cell = run_one(row, col, a.budget);
                let matched = (eqmem && is_kernel(&col.label)).then(|| eqmem_budget(&cell));
                cells.push(cell);
                // The equal-memory cell right after the kernel cell it matches.
                let eq_col = eqmem_column_for(&col.label);
                let mut eq = match matched {
                    None => continue,
                    Some(Ok(budget)) => run_one(row, &eq_col, budget),
                    Some(Err(e)) => Cell {
                        pattern: row.label.clone(),
                        backend: eq_col.label.clone(),
                        error: Some(e),
                        ..Default::default()
                    },
                };
                eq.eqmem_of = Some(col.label.clone());
                cells.push(eq);
            }
        }
        rounds.push(cells);
    }
    let cells = median_cells(rounds);
    bar.finish_and_clear();
    let wall = t0.elapsed().as_secs_f64();

    let t = targets(&cells, a.budget);
    let bt = best_kernel_targets(&cells);
    let best = best_kernel(&cells);
    let pairs = eqmem_pairs(&cells);
    let fp = footprints(&cells);
    println!("{}", markdown(&cells));
    println!(
        "working set {} MiB, budget {} MiB, {} workers, folio {} KiB, 2 passes (write; skewed read, verified){}, uzswap faults resolved by: {}; {}{:.0} s in all\n",
        a.size >> 20,
        a.budget >> 20,
        a.workers,
        a.folio >> 10,
        if a.no_random {
            String::new()
        } else {
            format!(
                "; random row: {} pattern, {} workers sharing every page, Zipf {} page choice, \
                 8-byte reads and 20% writes, MB/s counting each operation as a page",
                a.random_pattern.name(),
                a.random_workers,
                a.zipf
            )
        },
        handler_name(a.uzswap_handler),
        if a.repeat > 1 {
            format!("median of {} rounds per cell; ", a.repeat)
        } else {
            String::new()
        },
        wall
    );
    for x in t.iter().chain(&bt) {
        println!(
            "- {} on {}: {:.2} ({}{})",
            x["target"].as_str().unwrap_or(""),
            x["pattern"].as_str().unwrap_or(""),
            x["value"].as_f64().unwrap_or(f64::NAN),
            if x["met"].as_bool() == Some(true) {
                "met"
            } else {
                "MISSED"
            },
            match x["memory"].as_str() {
                Some("equal memory") => format!(
                    "; equal memory: budget {:.0} MiB",
                    x["budget_bytes"].as_f64().unwrap_or(0.0) / MIB
                ),
                _ => String::new(),
            }
        );
    }
    if !best.is_empty() {
        println!(
            "\nagainst the best kernel backend of each row, and each kernel cell at its own memory:\n\n{}",
            best_kernel_markdown(&cells)
        );
    }
    if !fp.is_empty() {
        println!("\nkernel cells' real memory (cgroup + what it was not charged for) / budget:");
    }
    for x in &fp {
        println!("- {}", x["line"].as_str().unwrap_or(""));
    }
    if let Some(path) = &a.plot {
        let mut plot_cols = Vec::new();
        for c in &cols {
            plot_cols.push(c.clone());
            if eqmem && is_kernel(&c.label) {
                plot_cols.push(eqmem_column_for(&c.label));
            }
        }
        let labels: Vec<String> = rows.iter().map(|r| r.label.clone()).collect();
        plot(path, &cells, &labels, &plot_cols, a.budget)
            .with_context(|| format!("draw {}", path.display()))?;
        println!("\nplot: {}", path.display());
    }
    let failed = cells.iter().filter(|c| !c.ok).count();
    if a.json {
        println!(
            "{}",
            json!({
                "bench": "compare",
                "command": command,
                "machine": machine(),
                "size_bytes": a.size,
                "budget_bytes": a.budget,
                "workers": a.workers,
                "folio_bytes": a.folio,
                "uzswap_handler": handler_name(a.uzswap_handler),
                "repeat": a.repeat,
                "wall_s": wall,
                "cells": cells,
                "targets": t,
                "best_kernel_targets": bt,
                "best_kernel": best,
                "eqmem_cells": pairs,
                "kernel_footprints": fp,
                "eqmem": eqmem,
                "rows": rows.iter().map(|r| json!({"label": r.label, "pattern": r.pattern.name(),
                    "access": r.access.name(), "workers": r.workers})).collect::<Vec<_>>(),
                "zipf": (!a.no_random).then_some(a.zipf),
                "failed_cells": failed,
            })
        );
    }
    if failed > 0 {
        bail!("{failed} of {total} cells failed or did not verify");
    }
    Ok(())
}

/// A figure drawn from a cell, if it has one.
type Metric = fn(&Cell) -> Option<f64>;

/// Three panels (throughput MB/s; CPU s per GiB moved out; peak memory),
/// bars grouped by row, one colour per backend. The memory panel shows what
/// each bar really used, so the equal-memory cells and the kernel cells'
/// overshoot of the nominal budget (the black line) are seen, not inferred.
fn plot(
    path: &std::path::Path,
    cells: &[Cell],
    rows: &[String],
    cols: &[Column],
    budget: u64,
) -> Result<()> {
    let metrics: [(&str, Metric); 3] = [
        ("throughput, MB/s (higher is better)", |c| {
            (c.ok || c.verify_checked_pages > 0).then_some(c.throughput_mbps)
        }),
        ("CPU seconds per GiB moved out (lower is better)", |c| {
            c.cpu_s_per_gib_out
        }),
        // uzswap: peak resident + pool; kernel: cgroup peak + the pool or
        // device memory the cgroup was not charged for (`peak_bytes` both).
        (
            "peak memory, MiB (resident + pool; cgroup + uncharged)",
            |c| c.peak_bytes.map(|b| b as f64 / MIB),
        ),
    ];
    let budget_mib = budget as f64 / MIB;
    let panels: Vec<super::bars::Panel> = metrics
        .iter()
        .enumerate()
        .map(|(i, (title, metric))| super::bars::Panel {
            title: title.to_string(),
            values: cols
                .iter()
                .map(|col| {
                    rows.iter()
                        .map(|p| {
                            cells
                                .iter()
                                .find(|c| &c.pattern == p && c.backend == col.label)
                                .and_then(metric)
                        })
                        .collect()
                })
                .collect(),
            hline: (i == 2).then(|| (budget_mib, format!("nominal budget {budget_mib:.0} MiB"))),
            log: false,
        })
        .collect();
    let labels: Vec<String> = cols.iter().map(|c| c.label.clone()).collect();
    super::bars::draw(path, (2100, 600), rows, &labels, &panels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_rounds_report_the_median_run_or_a_failure() {
        let cell = |mbps: f64, ok: bool| Cell {
            pattern: "index".into(),
            backend: "uzswap-lz4".into(),
            ok,
            throughput_mbps: mbps,
            ..Default::default()
        };
        let rounds = vec![
            vec![cell(300.0, true), cell(100.0, true)],
            vec![cell(500.0, true), cell(900.0, false)],
            vec![cell(400.0, true), cell(200.0, true)],
        ];
        let m = median_cells(rounds);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].throughput_mbps, 400.0);
        assert_eq!(m[0].runs_mbps, vec![300.0, 500.0, 400.0]);
        assert!(!m[1].ok, "a failed round is what the cell reports");
        assert_eq!(m[1].throughput_mbps, 900.0);
        // Of an even count, the lower middle: never the better of two.
        let m = median_cells(vec![vec![cell(300.0, true)], vec![cell(500.0, true)]]);
        assert_eq!(m[0].throughput_mbps, 300.0);
        // One round: that run.
        let m = median_cells(vec![vec![cell(250.0, true)]]);
        assert_eq!(
            (m[0].throughput_mbps, m[0].runs_mbps.clone()),
            (250.0, vec![250.0])
        );
    }

    #[test]
    fn columns_parse() {
        let c = parse_column("kernel-zswap-lzo").unwrap();
        assert_eq!((c.backend, c.compressor.as_str()), ("kernel-zswap", "lzo"));
        assert_eq!(parse_column("zram-lz4").unwrap().backend, "zram");
        assert_eq!(parse_column("uzswap-lz4").unwrap().compressor, "lz4");
        assert_eq!(parse_column("swapfile").unwrap().backend, "swapfile");
        assert!(parse_column("zram-").is_err());
        assert!(
            parse_column(EQMEM_LABEL).is_err(),
            "added by itself, not named"
        );
        assert!(parse_column("nfs").is_err());
    }

    #[test]
    fn cells_from_json() {
        let k = parse_column("kernel-zswap-lzo").unwrap();
        let r = json!({"throughput_mbps": 200.0, "elapsed_s": 5.0, "moved_out_bytes": 1u64 << 30,
            "peak_bytes": 100, "compression_ratio": 2.0, "kernel": {"vmstat": {"pgmajfault": 7}},
            "verify": {"checked_pages": 10, "mismatches": 0}});
        let c = cell_from_json("index", &k, &r, 3.0);
        assert!(c.ok);
        assert_eq!(c.cpu_s_per_gib_out, Some(3.0));
        assert_eq!(c.major_faults, Some(7));
        let u = parse_column("uzswap-lz4").unwrap();
        let r = json!({"throughput_mbps": 300.0, "stats": {"zswpout": 262144, "stored_pages": 100,
            "pool_total_size": 102400, "pgmajfault": 5}, "verify": {"checked_pages": 10, "mismatches": 2}});
        let c = cell_from_json("index", &u, &r, 1.0);
        assert!(!c.ok, "mismatches fail the cell");
        assert_eq!(c.moved_out_bytes, 1 << 30);
        assert_eq!(c.compression_ratio, Some(4.0));
        assert_eq!(c.major_faults, Some(5));
        // No verify figures: not ok.
        assert!(!cell_from_json("index", &u, &json!({}), 1.0).ok);
    }

    #[test]
    fn targets_are_ratios() {
        let mk = |b: &str, mbps: f64, cpu: f64, peak: u64| Cell {
            pattern: "index".into(),
            backend: b.into(),
            ok: true,
            throughput_mbps: mbps,
            cpu_s_per_gib_out: Some(cpu),
            peak_bytes: Some(peak),
            ..Default::default()
        };
        let cells = [
            mk("kernel-zswap-lzo", 100.0, 2.0, 0),
            mk("uzswap-lzo", 120.0, 1.0, 50),
            mk("uzswap-lz4", 140.0, 3.0, 200),
        ];
        let t = targets(&cells, 100);
        let find = |s: &str| {
            t.iter()
                .find(|x| x["target"].as_str().unwrap().starts_with(s))
                .unwrap()
                .clone()
        };
        assert_eq!(find("uzswap-lzo throughput")["met"], true);
        assert_eq!(find("uzswap-lz4 throughput")["met"], false);
        assert!((find("uzswap-lz4 throughput")["value"].as_f64().unwrap() - 1.4).abs() < 1e-9);
        assert_eq!(find("uzswap-lzo CPU")["met"], true);
        assert_eq!(find("uzswap-lz4 CPU")["met"], false);
        assert_eq!(find("uzswap-lz4 peak")["met"], false);
        assert_eq!(find("uzswap-lzo peak")["met"], true);
    }

    #[test]
    fn kernel_figures_from_json() {
        let k = parse_column("kernel-zswap-lzo").unwrap();
        let r = json!({"peak_bytes": 760, "budget_bytes": null,
            "kernel": {"cgroup_limit_bytes": 512, "cgroup_max_usage_bytes": 512,
                "zswap_pool_peak_bytes": 248, "zswap_pool_charged": false},
            "verify": {"checked_pages": 10, "mismatches": 0}});
        let c = cell_from_json("mixed", &k, &r, 1.0);
        assert_eq!(c.budget_bytes, 512);
        assert_eq!(c.cgroup_max_usage_bytes, Some(512));
        assert_eq!(c.zswap_pool_peak_bytes, Some(248));
        assert_eq!(c.zswap_pool_charged, Some(false));
        assert_eq!(eqmem_budget(&c), Ok(760));
        let failed = Cell {
            backend: EQMEM_KERNEL.into(),
            peak_bytes: Some(760),
            ..Default::default()
        };
        assert!(eqmem_budget(&failed).unwrap_err().contains("failed"));
    }

    #[test]
    fn equal_memory_targets_and_kernel_footprints() {
        let mk = |b: &str, mbps: f64, cpu: f64, peak: u64, budget: u64| Cell {
            pattern: "mixed".into(),
            backend: b.into(),
            ok: true,
            throughput_mbps: mbps,
            cpu_s_per_gib_out: Some(cpu),
            peak_bytes: Some(peak),
            budget_bytes: budget,
            ..Default::default()
        };
        let mut k = mk(EQMEM_KERNEL, 100.0, 2.0, 720, 500);
        k.zswap_pool_charged = Some(false);
        k.zswap_pool_peak_bytes = Some(220);
        k.cgroup_max_usage_bytes = Some(500);
        let cells = [
            mk("uzswap-lz4", 50.0, 4.0, 490, 500),
            k.clone(),
            mk(EQMEM_LABEL, 160.0, 1.0, 730, 720),
            mk("zram-lz4", 200.0, 1.0, 700, 500),
        ];
        let t = targets(&cells, 500);
        let find = |s: &str| {
            t.iter()
                .find(|x| x["target"].as_str().unwrap().starts_with(s))
                .unwrap_or_else(|| panic!("no target {s}"))
                .clone()
        };
        let nominal = find("uzswap-lz4 throughput");
        assert_eq!(nominal["memory"], "nominal budget");
        assert!((nominal["value"].as_f64().unwrap() - 0.5).abs() < 1e-9);
        let eq = find("uzswap-lz4-eqmem throughput");
        assert_eq!(eq["memory"], "equal memory");
        assert_eq!(eq["budget_bytes"], 720);
        assert!((eq["value"].as_f64().unwrap() - 1.6).abs() < 1e-9);
        assert_eq!(eq["met"], true);
        assert_eq!(find("uzswap-lz4-eqmem CPU")["met"], true);
        // Each uzswap cell's peak against its own budget: 730 > 720.
        let p = find("uzswap-lz4-eqmem peak");
        assert_eq!(p["met"], false);
        assert_eq!(find("uzswap-lz4 peak")["met"], true);
        // No peak target for kernel cells; their footprint is reported.
        assert!(!t
            .iter()
            .any(|x| x["target"].as_str().unwrap().starts_with("kernel")));
        let fp = footprints(&cells);
        assert_eq!(fp.len(), 2, "the kernel and zram cells, not uzswap's");
        assert!((fp[0]["value"].as_f64().unwrap() - 1.44).abs() < 1e-9);
        assert_eq!(fp[0]["zswap_pool_charged"], false);
        assert!(fp[0]["line"].as_str().unwrap().contains("not charged"));
        assert!(fp[1]["line"].as_str().unwrap().contains("zram"));
        // The same kernel cell on cgroup v2 says so.
        k.zswap_pool_charged = Some(true);
        let fp = footprints(&[k]);
        assert!(fp[0]["line"].as_str().unwrap().contains("(v2)"));
    }

    #[test]
    fn default_rows_add_the_random_row() {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: Args,
        }
        use clap::Parser;
        let r = rows(&T::parse_from(["compare"]).a);
        let labels: Vec<&str> = r.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(labels, ["index", "text", "mixed", RANDOM_ROW]);
        let random = r.last().unwrap();
        assert_eq!(random.access, crate::usemem::Access::Random);
        assert_eq!(
            (random.pattern, random.workers),
            (uzswap::Pattern::Mixed, 4)
        );
        let a = T::parse_from(["compare", "--no-random"]).a;
        assert_eq!(rows(&a).len(), 3);
        // A `random` data pattern keeps its name; the access row says so.
        let a = T::parse_from(["compare", "--patterns", "random"]).a;
        let l: Vec<String> = rows(&a).into_iter().map(|r| r.label).collect();
        assert_eq!(l, ["random", "random-access"]);
        let args = cell_args(
            &a,
            &rows(&a)[1],
            &parse_column("zram-lz4").unwrap(),
            1 << 20,
        );
        let at = |k: &str| args[args.iter().position(|x| x == k).unwrap() + 1].clone();
        assert_eq!(
            (at("--access"), at("--workers")),
            ("random".into(), "4".into())
        );
        assert_eq!(at("--zipf"), "0.99");
    }

    #[test]
    fn equal_memory_cells_for_every_kernel_cell_and_the_best_kernel() {
        assert_eq!(eqmem_column_for(EQMEM_KERNEL).label, EQMEM_LABEL);
        let z = eqmem_column_for("zram-lz4");
        assert_eq!(
            (z.label.as_str(), z.backend),
            ("uzswap-lz4-eqmem-zram-lz4", "uzswap")
        );
        assert!(
            parse_column(&z.label).is_err(),
            "added by itself, not named"
        );
        let mk = |b: &str, mbps: f64, peak: u64, of: Option<&str>| Cell {
            pattern: RANDOM_ROW.into(),
            backend: b.into(),
            ok: true,
            throughput_mbps: mbps,
            peak_bytes: Some(peak),
            budget_bytes: 500,
            eqmem_of: of.map(Into::into),
            ..Default::default()
        };
        let mut cells = vec![
            mk("uzswap-lz4", 60.0, 490, None),
            mk(EQMEM_KERNEL, 100.0, 720, None),
            mk(EQMEM_LABEL, 160.0, 700, Some(EQMEM_KERNEL)),
            mk("zram-lz4", 200.0, 780, None),
            mk("uzswap-lz4-eqmem-zram-lz4", 180.0, 770, Some("zram-lz4")),
        ];
        cells[4].budget_bytes = 780;
        let b = best_kernel(&cells);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0]["best_kernel"], "zram-lz4");
        let r = b[0]["ratios"].as_array().unwrap();
        // uzswap-lz4 at the nominal budget and the cell at zram's memory;
        // not the one matched to the slower kernel cell.
        assert_eq!(r.len(), 2);
        assert!((r[0]["value"].as_f64().unwrap() - 0.3).abs() < 1e-9);
        assert_eq!(r[1]["memory"], "equal memory");
        assert!((r[1]["value"].as_f64().unwrap() - 0.9).abs() < 1e-9);
        assert_eq!(r[1]["ops_value"], Value::Null, "no ops/s figures given");
        let p = eqmem_pairs(&cells);
        assert_eq!(p.len(), 2, "one per kernel cell");
        assert_eq!(p[1]["kernel"], "zram-lz4");
        assert_eq!(p[1]["eqmem_budget_bytes"], 780);
        assert_eq!(p[1]["kernel_footprint_bytes"], 780);
        let t = best_kernel_targets(&cells);
        let met = |s: &str| {
            t.iter()
                .find(|x| x["target"].as_str().unwrap().starts_with(s))
                .unwrap_or_else(|| panic!("no target {s}"))["met"]
                .clone()
        };
        assert_eq!(met("uzswap-lz4 throughput / best kernel (zram-lz4)"), false);
        assert_eq!(
            met("uzswap-lz4-eqmem-zram-lz4 throughput / best kernel"),
            false
        );
        assert_eq!(
            met("uzswap-lz4-eqmem-zram-lz4 throughput / zram-lz4"),
            false
        );
        // kernel-zswap-lzo's equal-memory target stays the 1.5x one.
        assert!(!t.iter().any(|x| x["versus"] == EQMEM_KERNEL));
        let md = best_kernel_markdown(&cells);
        assert!(
            md.contains("| random | zram-lz4 | 200 | - | 0.30x | 0.90x |"),
            "{md}"
        );
        assert!(
            md.contains("| random | zram-lz4 | 200 | 0 | 180 | 0.90x |"),
            "{md}"
        );
        // A failed kernel cell is never the best one.
        cells[3].ok = false;
        assert_eq!(best_kernel(&cells)[0]["best_kernel"], EQMEM_KERNEL);
    }

    #[test]
    fn markdown_has_a_row_per_cell() {
        let c = Cell {
            pattern: "text".into(),
            backend: "zram-lz4".into(),
            ok: true,
            verify_checked_pages: 4,
            verify_mismatches: Some(0),
            ..Default::default()
        };
        let f = Cell {
            pattern: "text".into(),
            backend: "swapfile".into(),
            error: Some("boom".into()),
            ..Default::default()
        };
        let md = markdown(&[c, f]);
        assert_eq!(md.lines().count(), 4);
        assert!(md.contains("ok (4 pages)"));
        assert!(md.contains("failed: boom"));
        // Every row has the header's number of columns.
        let cols = |l: &str| l.matches('|').count();
        let lines: Vec<&str> = md.lines().collect();
        assert!(lines.iter().all(|l| cols(l) == cols(lines[0])));
    }
}
