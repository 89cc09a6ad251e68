//! Kernel baselines: run the usemem workload on plain memory inside a memory
//! cgroup whose limit is the budget, against the kernel's zswap (in front of
//! a swap file), zram, or a plain swap file, and report the kernel's own
//! counters next to the workload's figures.
//!
//! The workload runs in a child process (`usemem --backend none`, the same
//! code every backend runs) that joins the cgroup between fork and exec.
//! Every machine setting changed is journaled first (`settings`) and undone
//! when the run ends: normally, on error (the journal's Drop), on
//! SIGINT/SIGTERM/SIGHUP (a thread that waits for them), or by the next run
//! if this one was killed outright.
//!
//! Threads and locking: the main thread sets up, runs the child and
//! restores; a sampler thread reads gauges while the child runs; a signal
//! thread waits for a signal. The journal sits in `JOURNAL` behind one mutex,
//! held for each record+change pair and for the whole restore, so a signal
//! restore and a setup step never interleave.

pub mod cgroup;
pub mod settings;
pub mod swap;
pub mod vmstat;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::usemem::{Args, Backend};
use settings::Journal;

const ZSWAP: &str = "/sys/module/zswap/parameters";
const THP: &str = "/sys/kernel/mm/transparent_hugepage";
const DEBUGFS: &str = "/sys/kernel/debug";
const PAGE: u64 = 4096;

/// The run's journal; `None` outside a run and once restored.
static JOURNAL: Mutex<Option<Journal>> = Mutex::new(None);
/// The workload child's pid while it runs, else 0.
static CHILD: AtomicI32 = AtomicI32::new(0);
/// A directory of the run's scratch files, removed by the signal thread too.
static SCRATCH_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Where the journal's state file lives: tmpfs, so a reboot (which undoes
/// every setting anyway) also forgets it.
pub fn state_dir() -> PathBuf {
    if Path::new("/run").is_dir() {
        PathBuf::from("/run/uzswap")
    } else {
        std::env::temp_dir().join("uzswap")
    }
}

/// Record-and-change under the journal lock.
fn with_journal_entry<T>(f: impl FnOnce(&mut Journal) -> Result<T>) -> Result<T> {
    let mut g = JOURNAL.lock();
    let j = g
        .as_mut()
        .context("kernel baseline: no journal (run was interrupted)")?;
    f(j)
}

/// Undo every recorded change now; returns the failures.
fn restore_all() -> Vec<String> {
    restore_locked(&mut JOURNAL.lock())
}

/// `restore_all` with the journal's lock held by the caller.
fn restore_locked(g: &mut Option<Journal>) -> Vec<String> {
    match g.take() {
        Some(mut j) => {
            let errs = j.restore();
            // Restored already; its Drop would only repeat an empty restore.
            drop(j);
            // The state directory goes too once empty (it fails if not).
            let _ = std::fs::remove_dir(state_dir());
            errs
        }
        None => Vec::new(),
    }
}

/// Block the termination signals in this thread (and so in every thread it
/// starts from now on) and start a thread that waits for them, kills the
/// child, restores the machine and exits. Returns the signal mask to give
/// the child back.
fn install_signal_thread() -> Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to local sigsets.
    unsafe {
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
            bail!("pthread_sigmask failed");
        }
    }
    std::thread::Builder::new()
        .name("uzswap-signals".into())
        .spawn(move || {
            let mut sig: libc::c_int = 0;
            // SAFETY: `set` is an initialised sigset, `sig` a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                return;
            }
            let pid = CHILD.load(Ordering::SeqCst);
            if pid != 0 {
                // A negative pid is a process group: the whole tree goes.
                // SAFETY: kill() has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            eprintln!("uzswap: signal {sig}: restoring kernel settings");
            // The journal's lock stays held until the process exits: the
            // main thread, seeing its child killed, would otherwise go on
            // to the next cell and make a change (a cgroup, a swap file)
            // after this restore and before the exit, and leave it behind.
            let mut journal = JOURNAL.lock();
            for e in restore_locked(&mut journal) {
                eprintln!("uzswap: restore: {e}");
            }
            if let Some(d) = SCRATCH_DIR.lock().take() {
                let _ = std::fs::remove_dir_all(d);
            }
            std::process::exit(128 + sig);
        })?;
    Ok(old)
}

/// The signal thread, started on the first call (call it from the main
/// thread, before any other thread is started, so that every thread has
/// the termination signals blocked); returns the mask to give children back.
pub fn signal_mask() -> Result<libc::sigset_t> {
    static MASK: std::sync::OnceLock<libc::sigset_t> = std::sync::OnceLock::new();
    if let Some(m) = MASK.get() {
        return Ok(*m);
    }
    let m = install_signal_thread()?;
    Ok(*MASK.get_or_init(|| m))
}

/// A directory of scratch files the signal thread removes (after the
/// child is killed) when a termination signal ends the run; None when the
/// run removes it itself.
pub fn set_scratch_dir(dir: Option<PathBuf>) {
    *SCRATCH_DIR.lock() = dir;
}

/// The process the signal thread kills before it restores: a pid, or a
/// process group as a negative number; 0 for none.
pub fn set_child(pid: i32) {
    CHILD.store(pid, Ordering::SeqCst);
}

/// Run `f` with a settings journal: what an earlier, killed run left behind
/// is undone first, and every change `f` journals is undone when it
/// returns, on error too (and by the signal thread on SIGINT, SIGTERM or
/// SIGHUP). Fails if the restore fails, even when `f` succeeded.
pub fn with_journal<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    signal_mask()?;
    let dir = state_dir();
    if let Some(r) = settings::recover(&dir)? {
        eprintln!(
            "uzswap: undid {} change(s) left by an earlier run (pid {}){}",
            r.undone,
            r.pid,
            if r.errors.is_empty() {
                String::new()
            } else {
                format!("; failures: {}", r.errors.join("; "))
            }
        );
        if !r.errors.is_empty() {
            bail!(
                "could not clean up after the earlier run; see {}",
                dir.join(settings::STATE_FILE).display()
            );
        }
    }
    *JOURNAL.lock() = Some(Journal::create(&dir)?);
    let result = f();
    let errors = restore_all();
    let v = result?;
    if !errors.is_empty() {
        bail!(
            "run finished but restoring settings failed: {}",
            errors.join("; ")
        );
    }
    Ok(v)
}

/// Whether this process may change the machine (swap, zram, zswap, THP,
/// cgroups): root.
pub fn is_root() -> bool {
    // SAFETY: geteuid() has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn run_usemem(args: &Args) -> Result<()> {
    let backend = args.backend;
    if !is_root() {
        bail!(
            "usemem --backend {}: needs root: it turns on swap, sets up zram, changes zswap and THP \
             settings and creates a memory cgroup (all restored afterwards); run it as root",
            backend.name()
        );
    }
    let budget = args.budget.unwrap_or(args.size / 2);
    if budget < MIN_CGROUP_LIMIT {
        bail!(
            "--budget {budget}: the kernel baselines need at least {} MiB (the cgroup limit)",
            MIN_CGROUP_LIMIT >> 20
        );
    }
    if args.size == 0 || args.workers == 0 {
        bail!("--size and --workers must be positive");
    }
    if !args.folio.is_power_of_two() || !(PAGE..=(2 << 20)).contains(&args.folio) {
        bail!("--folio {}: a power of two from 4K to 2M", args.folio);
    }
    let child_mask = signal_mask()?;
    let mut report = with_journal(|| run_with_settings(args, backend, budget, child_mask))?;
    report["kernel"]["restored"] = json!(true);
    print_report(&report, args.json);
    Ok(())
}

/// What one run asks of the machine.
pub struct Setup<'a> {
    /// The kernel backend, or `Backend::None`: only a memory cgroup without
    /// a limit, to measure a run (no swap, zswap or THP setting changed).
    pub backend: Backend,
    /// zswap's or zram's compressor.
    pub compressor: &'a str,
    /// The mTHP size anonymous memory gets (kernel backends).
    pub folio: u64,
    /// The swap file's or zram device's size (kernel backends).
    pub swap_size: u64,
    /// The cgroup's memory limit; None leaves it unlimited.
    pub limit: Option<u64>,
    /// The cgroup's name (unique on the machine).
    pub cgroup_name: String,
}

/// The machine set up for one run, every change in the journal: the swap
/// device, zswap and THP settings (kernel backends) and the memory cgroup
/// the run joins. Only valid inside `with_journal`.
pub struct Prepared {
    pub cg: cgroup::Cgroup,
    pub backend: Backend,
    pub limit: Option<u64>,
    /// What was set, for the report.
    pub applied: BTreeMap<String, String>,
    zram: Option<swap::Zram>,
    zswap_dbg: Option<PathBuf>,
    pool_charged: bool,
}

/// Set the machine up for `s` (inside `with_journal`).
pub fn prepare(s: &Setup<'_>) -> Result<Prepared> {
    let mut applied = BTreeMap::<String, String>::new();
    let kernel = s.backend != Backend::None;
    let debugfs = if kernel { mount_debugfs()? } else { None };
    let mut zram = None;
    match s.backend {
        Backend::KernelZswap | Backend::Swapfile => {
            let path = swap::swapfile_path();
            check_disk_space(path.parent().unwrap_or(Path::new("/")), s.swap_size)?;
            with_journal_entry(|j| swap::setup_swapfile(j, &path, s.swap_size))?;
            applied.insert(
                "swap".into(),
                format!("file {} ({} MiB)", path.display(), s.swap_size >> 20),
            );
        }
        Backend::Zram => {
            let z = with_journal_entry(|j| swap::setup_zram(j, s.compressor, s.swap_size))?;
            applied.insert(
                "swap".into(),
                format!(
                    "{} {} ({} MiB)",
                    z.path.display(),
                    s.compressor,
                    s.swap_size >> 20
                ),
            );
            zram = Some(z);
        }
        Backend::None => {}
        Backend::Uzswap => bail!("not a kernel backend: {}", s.backend.name()),
    }
    if kernel {
        setup_zswap(
            s.backend == Backend::KernelZswap,
            s.compressor,
            &mut applied,
        )?;
        setup_thp(s.folio, &mut applied)?;
        if let Ok(pc) = std::fs::read_to_string("/proc/sys/vm/page-cluster") {
            applied.insert("page_cluster".into(), pc.trim().to_string());
        }
    }
    let cg = with_journal_entry(|j| cgroup::Cgroup::create(j, &s.cgroup_name, s.limit))?;
    if !kernel && s.limit.is_some() {
        // A uzswap cell held to a limit: the kernel reclaims its page
        // cache as it would a kernel cell's, but must not swap what uzswap
        // keeps resident (its budget is what keeps the cell in memory).
        cg.forbid_swap()?;
    }
    applied.insert(
        "cgroup".into(),
        match s.limit {
            Some(l) => format!("{} ({:?}) limit {l}", cg.dir.display(), cg.version),
            None => format!("{} ({:?}) no limit", cg.dir.display(), cg.version),
        },
    );
    let zswap_dbg = debugfs
        .as_ref()
        .map(|d| d.join("zswap"))
        .filter(|d| d.is_dir());
    let pool_charged = zswap_pool_charged(cg.version);
    Ok(Prepared {
        cg,
        backend: s.backend,
        limit: s.limit,
        applied,
        zram,
        zswap_dbg,
        pool_charged,
    })
}

/// Make `cmd` start inside `cg` (when given: it joins between fork and
/// exec, so all its memory is charged there), die with this process rather
/// than outlive its restore, and get the signal mask `mask` back. Returns
/// the cgroup's `cgroup.procs`, to be kept open until `cmd` is spawned.
pub fn child_setup(
    cmd: &mut Command,
    cg: Option<&cgroup::Cgroup>,
    mask: libc::sigset_t,
) -> Result<Option<std::fs::File>> {
    let procs = cg
        .map(|cg| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(cg.procs_file())
                .with_context(|| format!("open {}", cg.procs_file().display()))
        })
        .transpose()?;
    let fd = procs.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe calls (write, prctl, pthread_sigmask) on data
    // prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = fd {
                // "0" is the writing process itself.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            Ok(())
        });
    }
    Ok(procs)
}

/// The kernel's figures of one run, from `Prepared::start` to `finish`.
pub struct Measuring<'p> {
    p: &'p Prepared,
    before: vmstat::Snapshot,
    dbg_before: BTreeMap<String, u64>,
    psi_before: (u64, u64),
    pool_before: u64,
    sampler: Sampler,
}

/// What `Measuring::finish` found.
pub struct Measured {
    /// Everything, for the report's "kernel" object.
    pub kernel: Value,
    /// The run's real footprint (see `footprint`).
    pub footprint: Option<u64>,
    pub cgroup_max_usage: Option<u64>,
    /// zswap's pool peak (kernel-zswap) or zram's device memory peak: what
    /// `footprint` adds to the cgroup's figure when it was not charged.
    pub uncharged_peak: u64,
    pub compression_ratio: Option<f64>,
    pub moved_out: u64,
}

impl Prepared {
    /// Take the counters before the run and start sampling the gauges.
    pub fn start(&self) -> Measuring<'_> {
        let before = vmstat::Snapshot::take();
        let dbg_before = self
            .zswap_dbg
            .as_deref()
            .map(vmstat::read_dir_numbers)
            .unwrap_or_default();
        let psi_before = read_psi();
        // Entries an earlier zswap user left behind are not this run's.
        let pool_before = read_zswap_pool(self.zswap_dbg.as_deref());
        let sampler = Sampler::start(
            self.zswap_dbg.clone(),
            self.zram.as_ref().map(|z| z.sys("mm_stat")),
            Footprint {
                usage: self.cg.usage_file(),
                stat: self.cg.dir.join("memory.stat"),
                add_pool: self.backend == Backend::KernelZswap && !self.pool_charged,
                pool_before,
            },
        );
        Measuring {
            p: self,
            before,
            dbg_before,
            psi_before,
            pool_before,
            sampler,
        }
    }

    /// Processes the cgroup's OOM killer ended.
    pub fn oom_kills(&self) -> u64 {
        oom_kills(&self.cg)
    }
}

impl Measuring<'_> {
    /// Stop sampling (the run has ended) and gather the figures; `wall` is
    /// the run's wall time.
    pub fn finish(self, wall: f64) -> Measured {
        let p = self.p;
        let backend = p.backend;
        let peaks = self.sampler.stop();
        let after = vmstat::Snapshot::take();
        let dbg_after = p
            .zswap_dbg
            .as_deref()
            .map(vmstat::read_dir_numbers)
            .unwrap_or_default();
        let psi_after = read_psi();
        let (vm, mthp) = after.delta(&self.before);
        let dbg_delta: BTreeMap<String, i64> = dbg_after
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    *v as i64 - self.dbg_before.get(k).copied().unwrap_or(0) as i64,
                )
            })
            .collect();
        let moved_out = moved_out_bytes(&vm);
        let ratio = match backend {
            Backend::KernelZswap => peaks.zswap_ratio(),
            Backend::Zram => peaks.zram.map(|m| m[0] as f64 / m[2].max(1) as f64),
            _ => None,
        };
        let cg_peak = p.cg.max_usage();
        let pool_peak = peaks.pool_bytes.saturating_sub(self.pool_before);
        let zram_peak = peaks.zram.map(|m| m[4]);
        let peak = footprint(backend, cg_peak, p.pool_charged, pool_peak, zram_peak);
        let uncharged = match backend {
            Backend::KernelZswap if !p.pool_charged => pool_peak,
            Backend::Zram => zram_peak.unwrap_or(0),
            _ => 0,
        };
        let zswap = backend == Backend::KernelZswap;
        let kernel = json!({
            "vmstat": vm,
            "mthp": mthp,
            "zswap_debugfs": if p.zswap_dbg.is_some() {
                json!({"at_peak": peaks.debugfs, "delta": dbg_delta})
            } else { Value::Null },
            "meminfo_peak": {"Zswap": peaks.zswap_bytes, "Zswapped": peaks.zswapped_bytes},
            "zram_mm_stat_peak": peaks.zram.map(|m| json!({
                "orig_data_size": m[0], "compr_data_size": m[1], "mem_used_total": m[2],
                "mem_limit": m[3], "mem_used_max": m[4], "same_pages": m[5]})),
            "cgroup_limit_bytes": p.limit,
            "cgroup_max_usage_bytes": cg_peak,
            "cgroup_version": format!("{:?}", p.cg.version),
            "zswap_pool_peak_bytes": zswap.then_some(pool_peak),
            "zswap_pool_before_bytes": zswap.then_some(self.pool_before),
            "zswap_pool_charged": zswap.then_some(p.pool_charged),
            "footprint_sampled_peak_bytes": peaks.footprint_bytes,
            "footprint_sampled_stat": peaks.footprint_stat,
            "footprint_nonfile_peak_bytes": peaks.nonfile_bytes,
            "cgroup_stat_after": p.cg.stat().into_iter().filter(|(k, _)| k.contains("swap") || k.contains("pgmaj")).collect::<BTreeMap<_, _>>(),
            "psi_memory_us": {
                "some": psi_after.0.saturating_sub(self.psi_before.0),
                "full": psi_after.1.saturating_sub(self.psi_before.1),
            },
            "settings": p.applied,
            "wall_s": wall,
        });
        Measured {
            kernel,
            footprint: peak,
            cgroup_max_usage: cg_peak,
            uncharged_peak: uncharged,
            compression_ratio: ratio,
            moved_out,
        }
    }
}

/// The swap area for a run of `bytes` of memory: room for all of it, plus
/// slack for fragmentation and large-folio clusters, so the run is never
/// killed for want of swap; in whole 2 MiB.
pub fn swap_size_for(bytes: u64) -> u64 {
    (bytes + bytes / 4 + (64 << 20)).div_ceil(2 << 20) * (2 << 20)
}

/// The smallest cgroup limit a kernel baseline runs under: below it the
/// cgroup's own overhead and the program's code crowd out its data.
pub const MIN_CGROUP_LIMIT: u64 = 16 << 20;

/// Set the machine up for `backend`, run the workload, gather the figures.
fn run_with_settings(
    args: &Args,
    backend: Backend,
    budget: u64,
    child_mask: libc::sigset_t,
) -> Result<Value> {
    let swap_size = swap_size_for(args.size);
    let p = prepare(&Setup {
        backend,
        compressor: &args.compressor,
        folio: args.folio,
        swap_size,
        limit: Some(budget),
        cgroup_name: format!("uzswap-{}", std::process::id()),
    })?;
    let m = p.start();
    let t0 = Instant::now();
    let (status, stdout) = run_child(args, budget, &p.cg, child_mask);
    let wall = t0.elapsed().as_secs_f64();
    let measured = m.finish(wall);
    let (status, stdout) = (status?, stdout?);
    if !status.success() {
        let oom = p.oom_kills();
        let how = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (_, Some(s)) => format!("was killed by signal {s}"),
            _ => "ended abnormally".into(),
        };
        bail!(
            "the workload {how}{}; its output ended: {}",
            if oom > 0 {
                format!(" (the cgroup's OOM killer fired {oom} time(s))")
            } else {
                String::new()
            },
            stdout.lines().last().unwrap_or("(none)")
        );
    }
    let child: Value = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the workload printed no JSON line")
        .and_then(|l| serde_json::from_str(l).context("the workload's JSON line does not parse"))?;
    Ok(merge_kernel(
        child,
        backend.name(),
        measured.kernel,
        measured.footprint,
        measured.compression_ratio,
        measured.moved_out,
    ))
}

/// Whether the kernel charges zswap's compressed pool to the memory cgroup
/// of the pages' owner. Only the unified hierarchy does: in mm/memcontrol.c
/// `obj_cgroup_may_zswap()` and `obj_cgroup_charge_zswap()` return early
/// unless `cgroup_subsys_on_dfl(memory_cgrp_subsys)`, so under cgroup v1 the
/// pool grows outside the limit and the cgroup's peak leaves it out.
pub fn zswap_pool_charged(v: cgroup::Version) -> bool {
    v == cgroup::Version::V2
}

/// The memory a kernel cell really used at its peak: the cgroup's high-water
/// mark, plus what the cgroup was not charged for: zswap's pool under cgroup
/// v1 (`pool_charged` false), zram's device memory always (zsmalloc pages of
/// a block device belong to no cgroup). Both are peaks taken separately, so
/// the sum can exceed the true simultaneous peak; under a budget the cgroup
/// sits at its limit for most of the run, so the gap is small (the sampler's
/// simultaneous figure is reported next to it).
pub fn footprint(
    backend: Backend,
    cg_peak: Option<u64>,
    pool_charged: bool,
    zswap_pool_peak: u64,
    zram_mem_used_max: Option<u64>,
) -> Option<u64> {
    let uncharged = match backend {
        Backend::KernelZswap if !pool_charged => zswap_pool_peak,
        Backend::Zram => zram_mem_used_max.unwrap_or(0),
        _ => 0,
    };
    cg_peak.map(|p| p + uncharged)
}

/// zswap's pool size now: debugfs `pool_total_size`, else meminfo's Zswap
/// (the same pages counted by the allocator); the larger if both are there.
fn read_zswap_pool(debugfs: Option<&Path>) -> u64 {
    let mi = vmstat::parse_kv(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default());
    let dbg = debugfs
        .and_then(|d| std::fs::read_to_string(d.join("pool_total_size")).ok())
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    dbg.max(mi.get("Zswap").copied().unwrap_or(0))
}

/// Bytes the kernel moved out of the workload's memory: pages stored in zswap
/// plus pages written to the swap device directly; zswap writebacks are
/// counted once (they were stored first).
pub fn moved_out_bytes(vm: &BTreeMap<String, u64>) -> u64 {
    let g = |k: &str| vm.get(k).copied().unwrap_or(0);
    let pswpout_direct = g("pswpout").saturating_sub(g("zswpwb"));
    (g("zswpout") + pswpout_direct) * PAGE
}

/// The workload's JSON with the kernel's figures added: the child's keys are
/// kept, `backend`, `peak_bytes`, `compression_ratio` and `moved_out_bytes`
/// are set from the kernel's side, the rest goes under "kernel".
pub fn merge_kernel(
    mut child: Value,
    backend: &str,
    kernel: Value,
    peak: Option<u64>,
    ratio: Option<f64>,
    moved_out: u64,
) -> Value {
    if !child.is_object() {
        child = json!({ "workload": child });
    }
    let o = child.as_object_mut().expect("made an object above");
    if let Some(b) = o.get("backend").cloned() {
        o.insert("workload_backend".into(), b);
    }
    o.insert("backend".into(), json!(backend));
    if let Some(p) = peak {
        o.insert("peak_bytes".into(), json!(p));
    }
    o.insert("compression_ratio".into(), json!(ratio));
    o.insert("moved_out_bytes".into(), json!(moved_out));
    o.insert("kernel".into(), kernel);
    child
}

/// The `usemem` arguments for the workload child: the same workload on plain
/// memory.
pub fn child_args(args: &Args, budget: u64) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "usemem".into(),
        "--backend".into(),
        "none".into(),
        "--workers".into(),
        args.workers.to_string(),
        "--size".into(),
        args.size.to_string(),
        "--pattern".into(),
        args.pattern.name().into(),
        "--passes".into(),
        args.passes.to_string(),
        "--budget".into(),
        budget.to_string(),
        "--compressor".into(),
        args.compressor.clone(),
        "--folio".into(),
        args.folio.to_string(),
        "--access".into(),
        args.access.name().into(),
        "--json".into(),
    ];
    if args.access == crate::usemem::Access::Random {
        // The same operations as a uzswap run of these arguments.
        if let Some(ops) = args.ops {
            v.extend(["--ops".into(), ops.to_string()]);
        }
        v.extend([
            "--zipf".into(),
            args.zipf.to_string(),
            "--write-percent".into(),
            args.write_percent.to_string(),
        ]);
    }
    if args.verify {
        v.push("--verify".into());
    }
    v
}

/// Run the workload child in the cgroup; returns its status and stdout.
fn run_child(
    args: &Args,
    budget: u64,
    cg: &cgroup::Cgroup,
    mask: libc::sigset_t,
) -> (Result<std::process::ExitStatus>, Result<String>) {
    let spawn = || -> Result<std::process::Child> {
        let exe = std::env::current_exe().context("find the uzswap executable")?;
        let mut cmd = Command::new(exe);
        cmd.args(child_args(args, budget))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let procs = child_setup(&mut cmd, Some(cg), mask)?;
        let child = cmd.spawn().context("start the workload")?;
        drop(procs);
        Ok(child)
    };
    let mut child = match spawn() {
        Ok(c) => c,
        Err(e) => return (Err(e), Ok(String::new())),
    };
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    let mut out = String::new();
    let read = child.stdout.take().map(|mut s| s.read_to_string(&mut out));
    let status = child.wait().context("wait for the workload");
    CHILD.store(0, Ordering::SeqCst);
    let out = match read {
        Some(Err(e)) => Err(e).context("read the workload's output"),
        _ => Ok(out),
    };
    (status, out)
}

fn oom_kills(cg: &cgroup::Cgroup) -> u64 {
    let f = match cg.version {
        cgroup::Version::V1 => "memory.oom_control",
        cgroup::Version::V2 => "memory.events",
    };
    vmstat::parse_kv(&std::fs::read_to_string(cg.dir.join(f)).unwrap_or_default())
        .get("oom_kill")
        .copied()
        .unwrap_or(0)
}

/// Mount debugfs if it is not (journaled); returns its path if usable.
fn mount_debugfs() -> Result<Option<PathBuf>> {
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(DEBUGFS));
    if mounted {
        return Ok(Some(PathBuf::from(DEBUGFS)));
    }
    if !Path::new(DEBUGFS).is_dir() {
        return Ok(None);
    }
    let ok = with_journal_entry(|j| {
        j.apply(
            settings::Undo::Umount {
                path: DEBUGFS.into(),
            },
            || {
                let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
                let (src, dst, ty) = (c("debugfs"), c(DEBUGFS), c("debugfs"));
                // SAFETY: valid NUL-terminated strings; no mount data.
                let r = unsafe {
                    libc::mount(src.as_ptr(), dst.as_ptr(), ty.as_ptr(), 0, std::ptr::null())
                };
                Ok(r == 0)
            },
        )
    })?;
    Ok(ok.then(|| PathBuf::from(DEBUGFS)))
}

/// zswap on (kernel-zswap) or off (the others). Parameters this kernel does
/// not have (`zpool` on kernels where zsmalloc is the only allocator) are
/// skipped.
fn setup_zswap(on: bool, compressor: &str, applied: &mut BTreeMap<String, String>) -> Result<()> {
    let p = Path::new(ZSWAP);
    if !p.is_dir() {
        if on {
            bail!("this kernel has no zswap ({ZSWAP} is missing)");
        }
        return Ok(());
    }
    if !on {
        with_journal_entry(|j| j.set(&p.join("enabled"), "N"))?;
        applied.insert("zswap".into(), "off".into());
        return Ok(());
    }
    with_journal_entry(|j| j.set(&p.join("compressor"), compressor)).with_context(|| {
        format!("zswap cannot use compressor '{compressor}' (this kernel's crypto API lacks it? see /proc/crypto)")
    })?;
    let mut desc = vec![format!("compressor={compressor}")];
    for (k, v) in [
        ("zpool", "zsmalloc"),
        ("max_pool_percent", "20"),
        ("shrinker_enabled", "Y"),
    ] {
        if p.join(k).exists() {
            with_journal_entry(|j| j.set(&p.join(k), v))?;
            desc.push(format!("{k}={v}"));
        }
    }
    with_journal_entry(|j| j.set(&p.join("enabled"), "Y"))?;
    desc.push("enabled=Y".into());
    applied.insert("zswap".into(), desc.join(" "));
    Ok(())
}

/// Make anonymous memory use folios of `folio` bytes: that mTHP size
/// "always", every other size and the top-level (inherit) setting "never";
/// 4K turns them all off.
fn setup_thp(folio: u64, applied: &mut BTreeMap<String, String>) -> Result<()> {
    let base = Path::new(THP);
    if !base.join("enabled").exists() {
        if folio > PAGE {
            bail!(
                "--folio {}K: this kernel has no transparent hugepages",
                folio >> 10
            );
        }
        return Ok(());
    }
    let mut sizes: Vec<String> = std::fs::read_dir(base)?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("hugepages-") && base.join(n).join("enabled").exists())
        .collect();
    sizes.sort();
    let want = format!("hugepages-{}kB", folio >> 10);
    if folio > PAGE && !sizes.contains(&want) {
        bail!(
            "--folio {}K: this kernel offers no such THP size (it has: {})",
            folio >> 10,
            sizes.join(", ")
        );
    }
    with_journal_entry(|j| j.set(&base.join("enabled"), "never"))?;
    for s in &sizes {
        let v = if *s == want { "always" } else { "never" };
        with_journal_entry(|j| j.set(&base.join(s).join("enabled"), v))?;
    }
    applied.insert(
        "thp".into(),
        if folio > PAGE {
            format!("{want}=always, others never")
        } else {
            "all sizes never (4K pages)".into()
        },
    );
    Ok(())
}

fn check_disk_space(dir: &Path, need: u64) -> Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())?;
    // SAFETY: statvfs is plain data; the call fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid path, `st` a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(());
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    if free < need + (1 << 30) {
        bail!(
            "{} has {} MiB free; the swap file needs {} MiB plus 1 GiB to spare",
            dir.display(),
            free >> 20,
            need >> 20
        );
    }
    Ok(())
}

/// PSI memory totals (some, full) in microseconds.
fn read_psi() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/pressure/memory").unwrap_or_default();
    parse_psi(&text)
}

pub fn parse_psi(text: &str) -> (u64, u64) {
    let mut r = (0, 0);
    for l in text.lines() {
        let total = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("total="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if l.starts_with("some") {
            r.0 = total;
        } else if l.starts_with("full") {
            r.1 = total;
        }
    }
    r
}

/// Gauges at their peak while the workload ran.
#[derive(Default)]
struct Peaks {
    zswap_bytes: u64,
    zswapped_bytes: u64,
    debugfs: BTreeMap<String, u64>,
    zram: Option<[u64; 6]>,
    /// zswap's pool (debugfs pool_total_size or meminfo Zswap) at its largest.
    pool_bytes: u64,
    /// cgroup usage + zswap pool + zram device memory read together, at
    /// their largest: a sampled check on `footprint`'s sum of peaks.
    footprint_bytes: u64,
    /// The cgroup's memory.stat when `footprint_bytes` was sampled: what
    /// its charge was made of (anonymous memory, page cache).
    footprint_stat: BTreeMap<String, u64>,
    /// The same sum less the cgroup's page cache, at its largest: what the
    /// workload held that reclaim could not drop (anonymous and kernel
    /// memory, the uncharged pool). Sampled on its own: under a limit the
    /// page cache fills whatever room is left, so the footprint's peak
    /// says little about the moment this one peaks.
    nonfile_bytes: u64,
}

impl Peaks {
    /// Bytes stored over pool bytes, from debugfs at the peak, else meminfo.
    fn zswap_ratio(&self) -> Option<f64> {
        let stored = self.debugfs.get("stored_pages").copied().unwrap_or(0) * PAGE;
        let pool = self.debugfs.get("pool_total_size").copied().unwrap_or(0);
        if stored > 0 && pool > 0 {
            return Some(stored as f64 / pool as f64);
        }
        (self.zswap_bytes > 0).then(|| self.zswapped_bytes as f64 / self.zswap_bytes as f64)
    }
}

/// The parts of a cgroup's charge in its memory.stat, under both
/// versions' names: `anon` (v1 `rss`) and `file` (page cache; v1 `cache`).
pub fn cgroup_parts(stat: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (k, names) in [("anon", ["anon", "rss"]), ("file", ["file", "cache"])] {
        if let Some(v) = names.iter().find_map(|n| stat.get(*n)) {
            m.insert(k.to_string(), *v);
        }
    }
    m
}

/// What the sampler adds up for its simultaneous footprint figure.
struct Footprint {
    /// The cgroup's current-usage file.
    usage: PathBuf,
    /// Its memory.stat.
    stat: PathBuf,
    /// zswap's pool is not in the cgroup's usage (cgroup v1).
    add_pool: bool,
    /// Pool bytes present before the run.
    pool_before: u64,
}

struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Peaks>,
}

impl Sampler {
    fn start(debugfs: Option<PathBuf>, mm_stat: Option<PathBuf>, fp: Footprint) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut p = Peaks::default();
            loop {
                let done = s.load(Ordering::Relaxed);
                let mi =
                    vmstat::parse_kv(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default());
                let zswapped = mi.get("Zswapped").copied().unwrap_or(0);
                let meminfo_pool = mi.get("Zswap").copied().unwrap_or(0);
                if zswapped > p.zswapped_bytes {
                    p.zswapped_bytes = zswapped;
                    p.zswap_bytes = meminfo_pool;
                }
                let mut pool = meminfo_pool;
                let mut zram_used = 0;
                if let Some(d) = &debugfs {
                    let now = vmstat::read_dir_numbers(d);
                    pool = pool.max(now.get("pool_total_size").copied().unwrap_or(0));
                    if now.get("stored_pages") > p.debugfs.get("stored_pages")
                        || p.debugfs.is_empty()
                    {
                        p.debugfs = now;
                    }
                }
                if let Some(m) = mm_stat
                    .as_ref()
                    .and_then(|f| std::fs::read_to_string(f).ok())
                {
                    if let Some(v) = swap::parse_mm_stat(&m) {
                        zram_used = v[2];
                        if p.zram.is_none_or(|z| v[0] >= z[0]) {
                            p.zram = Some(v);
                        }
                    }
                }
                p.pool_bytes = p.pool_bytes.max(pool);
                let cg_now = std::fs::read_to_string(&fp.usage)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                let pool_out = if fp.add_pool {
                    pool.saturating_sub(fp.pool_before)
                } else {
                    0
                };
                let now = cg_now + pool_out + zram_used;
                let parts = cgroup_parts(&vmstat::parse_kv(
                    &std::fs::read_to_string(&fp.stat).unwrap_or_default(),
                ));
                let file = parts.get("file").copied().unwrap_or(0);
                p.nonfile_bytes = p.nonfile_bytes.max(now.saturating_sub(file));
                if now > p.footprint_bytes {
                    p.footprint_bytes = now;
                    p.footprint_stat = parts;
                }
                if done {
                    return p;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Sampler { stop, handle }
    }

    fn stop(self) -> Peaks {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn print_report(r: &Value, json_line: bool) {
    let f = |k: &str| r.get(k).cloned().unwrap_or(Value::Null);
    let mib = |v: Value| {
        v.as_f64()
            .map(|b| format!("{:.1} MiB", b / 1048576.0))
            .unwrap_or("-".into())
    };
    println!("backend           {}", f("backend").as_str().unwrap_or("?"));
    println!("pattern           {}", f("pattern"));
    println!(
        "size / budget     {} / {}",
        mib(f("size_bytes")),
        mib(match f("budget_bytes") {
            Value::Null => r["kernel"]["cgroup_limit_bytes"].clone(),
            b => b,
        })
    );
    println!(
        "elapsed           {:.2} s",
        f("elapsed_s").as_f64().unwrap_or(f64::NAN)
    );
    println!(
        "throughput        {:.1} MB/s",
        f("throughput_mbps").as_f64().unwrap_or(f64::NAN)
    );
    println!(
        "user + sys        {:.2} + {:.2} s",
        f("user_s").as_f64().unwrap_or(f64::NAN),
        f("sys_s").as_f64().unwrap_or(f64::NAN)
    );
    if let Some(rnd) = r.get("random").filter(|v| v.is_object()) {
        println!(
            "random            {} ops ({} writes), {:.0} ops/s, zipf {}",
            rnd["ops"],
            rnd["write_ops"],
            rnd["ops_per_s"].as_f64().unwrap_or(f64::NAN),
            rnd["zipf"]
        );
    }
    println!("moved out         {}", mib(f("moved_out_bytes")));
    println!("peak memory       {}", mib(f("peak_bytes")));
    let k = &r["kernel"];
    if let Some(charged) = k["zswap_pool_charged"].as_bool() {
        println!(
            "  of which         cgroup max {} + zswap pool peak {} ({})",
            mib(k["cgroup_max_usage_bytes"].clone()),
            mib(k["zswap_pool_peak_bytes"].clone()),
            if charged {
                "pool charged to the cgroup (v2): not added"
            } else {
                "pool not charged to the cgroup (v1): added"
            }
        );
    }
    println!(
        "compression ratio {}",
        f("compression_ratio")
            .as_f64()
            .map(|x| format!("{x:.2}"))
            .unwrap_or("-".into())
    );
    if let Some(vm) = r["kernel"]["vmstat"].as_object() {
        let s: Vec<String> = vm.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("vmstat delta      {}", s.join(" "));
    }
    println!(
        "verify            {}",
        r.get("verify").map(|v| v.to_string()).unwrap_or("-".into())
    );
    if json_line {
        println!("{r}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moved_out_counts_writeback_once() {
        let vm: BTreeMap<String, u64> = [("zswpout", 100u64), ("pswpout", 30), ("zswpwb", 20)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        assert_eq!(moved_out_bytes(&vm), 110 * PAGE);
        let vm: BTreeMap<String, u64> = [("pswpout".to_string(), 7u64)].into();
        assert_eq!(moved_out_bytes(&vm), 7 * PAGE);
    }

    #[test]
    fn merge_keeps_child_keys_and_sets_kernel_ones() {
        let child = json!({"backend": "none", "peak_bytes": 1, "throughput_mbps": 5.0, "verify": {"mismatches": 0}});
        let m = merge_kernel(
            child,
            "zram",
            json!({"vmstat": {}}),
            Some(99),
            Some(2.5),
            4096,
        );
        assert_eq!(m["backend"], "zram");
        assert_eq!(m["workload_backend"], "none");
        assert_eq!(m["peak_bytes"], 99);
        assert_eq!(m["throughput_mbps"], 5.0);
        assert_eq!(m["verify"]["mismatches"], 0);
        assert_eq!(m["compression_ratio"], 2.5);
        assert_eq!(m["moved_out_bytes"], 4096);
        assert!(m["kernel"]["vmstat"].is_object());
        // No cgroup figure: the child's own peak stays.
        let m = merge_kernel(
            json!({"peak_bytes": 1}),
            "swapfile",
            json!({}),
            None,
            None,
            0,
        );
        assert_eq!(m["peak_bytes"], 1);
        assert!(m["compression_ratio"].is_null());
    }

    #[test]
    fn footprint_adds_what_the_cgroup_was_not_charged() {
        use cgroup::Version;
        assert!(!zswap_pool_charged(Version::V1));
        assert!(zswap_pool_charged(Version::V2));
        let z = Backend::KernelZswap;
        // v1: the pool sits outside the cgroup's figure.
        assert_eq!(footprint(z, Some(512), false, 215, None), Some(727));
        // v2: the cgroup's figure already holds it.
        assert_eq!(footprint(z, Some(512), true, 215, None), Some(512));
        // zram's device memory is never charged; no pool on the others.
        assert_eq!(
            footprint(Backend::Zram, Some(512), true, 9, Some(270)),
            Some(782)
        );
        assert_eq!(
            footprint(Backend::Swapfile, Some(512), false, 9, None),
            Some(512)
        );
        assert_eq!(footprint(z, None, false, 215, None), None);
    }

    #[test]
    fn the_workload_child_gets_the_random_options() {
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            a: Args,
        }
        use clap::Parser;
        let a = T::parse_from([
            "usemem",
            "--backend",
            "zram",
            "--access",
            "random",
            "--ops",
            "77",
            "--zipf",
            "0.5",
            "--write-percent",
            "30",
            "--verify",
        ])
        .a;
        let v = child_args(&a, 1 << 20);
        let at = |k: &str| v[v.iter().position(|x| x == k).unwrap() + 1].as_str();
        assert_eq!(at("--backend"), "none");
        assert_eq!(at("--access"), "random");
        assert_eq!(
            (at("--ops"), at("--zipf"), at("--write-percent")),
            ("77", "0.5", "30")
        );
        // Other access orders pass none of them.
        let a = T::parse_from(["usemem", "--backend", "zram", "--access", "skew"]).a;
        let v = child_args(&a, 1 << 20);
        assert!(!v.iter().any(|x| x == "--zipf" || x == "--ops"));
    }

    #[test]
    fn cgroup_parts_under_either_version() {
        let v1: BTreeMap<String, u64> = [("rss", 10), ("cache", 4), ("mapped_file", 1)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let p = cgroup_parts(&v1);
        assert_eq!((p["anon"], p["file"], p.len()), (10, 4, 2));
        let v2: BTreeMap<String, u64> = [("anon", 7), ("file", 3)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        assert_eq!(cgroup_parts(&v2)["anon"], 7);
        assert!(cgroup_parts(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn psi_totals() {
        let t = "some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=56\n";
        assert_eq!(parse_psi(t), (1234, 56));
        assert_eq!(parse_psi(""), (0, 0));
    }
}
