//! `uzswap run -- CMD ARGS…`: an unmodified, dynamically linked program with
//! its heap and anonymous memory under one uzswap budget, through the
//! preload library (`crates/uzswap-preload`), and `uzswap setup`, which
//! grants a group the userfaultfd device so that system calls on evicted
//! memory are served for its members as for root.
//!
//! The runner becomes the program: once the arguments are checked it
//! `exec`s it with the library preloaded, so the program's process id,
//! standard streams, signals and exit status are its own, and no runner
//! process stays beside it. A parent would be charged to the program's
//! memory cgroup (about 5 MiB: its binary's pages, and 0.6 MiB of heap and
//! stacks): at a fixed limit, GNU sort of 32 MiB under a 48.5 MiB cgroup ran
//! with a 43 MiB budget without the parent where the parent's cgroup
//! OOM-killed it (docs/BENCHMARKS.md, "The runner execs the program").
//! Only `--json` keeps a parent, which must outlive the program to print
//! the summary: it waits, passes on the signals a supervisor sends
//! (SIGTERM, SIGHUP, SIGUSR1, SIGUSR2; terminal signals reach the program
//! directly, as it shares the runner's process group), and ends as the
//! program did: with its exit status, or killed by the same signal.

use crate::usemem::parse_size;
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering::*};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Resident memory plus compressed pool the program may use (and with
    /// `--count-own`, the process's other memory too).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub budget: u64,
    /// Compressor (lz4, lzo, zstd[:level], deflate[:level]).
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// Folio size (4K..2M): the chunk, the unit of eviction and of most
    /// faults, up to 64K; a larger folio is the read-ahead window of
    /// forward scans through evicted memory.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    /// Directory of the swap file the coldest pages are written back to.
    #[arg(long, conflicts_with = "writeback")]
    pub writeback_dir: Option<PathBuf>,
    /// Where the coldest pages go: `file` (default), `file:DIR`, or the far
    /// tier `redis://HOST:PORT[,HOST:PORT...]` (more than one node: a Redis
    /// Cluster; options `?timeout_ms=&retries=&backoff_ms=`), or both in the
    /// order `pool → file → redis`: `file[:DIR]+redis://...` (the file,
    /// `--swap-size`, takes what it can; Redis the rest). Remote pages are
    /// always sealed. A page that cannot be read back from it raises SIGBUS
    /// in the program, which then ends with that signal.
    #[arg(long, value_parser = check_writeback)]
    pub writeback: Option<String>,
    /// Size of the far tier behind the file with `--writeback
    /// file+redis://...` (default: as large as the file).
    #[arg(long, value_parser = parse_size, requires = "writeback")]
    pub far_size: Option<u64>,
    /// Size of that swap file (default: 8x the budget, at least 1 GiB).
    #[arg(long, value_parser = parse_size)]
    pub swap_size: Option<u64>,
    /// Write pages to the swap file as they are. By default each is sealed
    /// (AES-256-GCM) under a random key the program's process holds only in
    /// memory, so the file is unreadable and a page changed in it fails to
    /// load rather than loading wrong.
    #[arg(long)]
    pub writeback_plain: bool,
    /// Append each process's figures (JSON, one line each) to FILE at its
    /// exit; without it they go to stderr (or, with --json, into the
    /// summary). A program that ends with the exit_group system call
    /// itself (Go's runtime) runs no exit handler and writes no exit line:
    /// use --stats-every for its figures.
    #[arg(long)]
    pub stats: Option<PathBuf>,
    /// Also write the figures every this many seconds.
    #[arg(long)]
    pub stats_every: Option<f64>,
    /// Print one JSON summary line on stdout after the program ends.
    #[arg(long)]
    pub json: bool,
    /// Programs this one execs run without uzswap.
    #[arg(long)]
    pub no_inherit: bool,
    /// A forked child takes its memory over with an instance of its own
    /// (under the same budget) instead of running detached until it
    /// execs. Each fork then brings uzswap's threads to rest first; the
    /// child takes its memory over once it changes it (a mapping call, or
    /// more than 1 MiB allocated), so a fork that execs at once pays for no
    /// instance (docs/ARCHITECTURE.md, "fork").
    #[arg(long)]
    pub fork_instance: bool,
    #[command(flatten)]
    pub young: crate::young_arg::SampleYoungArg,
    /// Count the process's own memory outside regions and the pool
    /// (uzswap's heap and buffers, memory the program keeps outside
    /// regions) against the budget too, as a memory cgroup counts
    /// everything: the budget then bounds the whole process (at most half
    /// of it goes to that memory).
    #[arg(long)]
    pub count_own: bool,
    /// Open userfaultfd in user mode only, as an unprivileged user without
    /// access to /dev/userfaultfd does (buffers of system calls are then
    /// pinned by the library).
    #[arg(long)]
    pub user_mode: bool,
    /// How faults are resolved: `block`, by handler threads (serves faults
    /// the kernel takes inside system calls where /dev/userfaultfd is
    /// open); `spin`, the same polling a while after each fault; `signal`,
    /// by the faulting thread itself in a SIGBUS handler, which saves two
    /// cross-CPU wake-ups per fault (system call buffers are then pinned
    /// by the library, as in user mode); `auto`, `block` where
    /// /dev/userfaultfd can be opened and `signal` where it cannot (user
    /// mode only, where the kernel's faults are not served either way).
    #[arg(long, value_enum, default_value = "auto")]
    pub handler: crate::usemem::Handler,
    /// The preload library (default: libuzswap_preload.so next to this
    /// binary, or $UZSWAP_PRELOAD).
    #[arg(long)]
    pub preload: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true)]
    pub cmd: Vec<OsString>,
}

/// `--writeback`, checked here and passed on as written.
fn check_writeback(s: &str) -> std::result::Result<String, String> {
    uzswap_cli::parse::parse_writeback(s).map(|_| s.to_string())
}

/// The program's path: as given when it names a file, else from $PATH.
fn resolve(prog: &OsString) -> Result<PathBuf> {
    let p = Path::new(prog);
    if p.components().count() > 1 {
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let c = dir.join(p);
        if c.metadata()
            .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        {
            return Ok(c);
        }
    }
    bail!("{}: command not found", p.display())
}

/// Refuse what LD_PRELOAD cannot reach: static binaries (no program
/// interpreter) and secure-execution programs (set-user-ID, set-group-ID,
/// file capabilities), for which the loader ignores LD_PRELOAD; and a Go
/// program where faults in system calls would not be served (`user_mode`,
/// or no access to /dev/userfaultfd).
fn check_program(path: &Path, user_mode: bool) -> Result<()> {
    let meta = path
        .metadata()
        .with_context(|| format!("{}", path.display()))?;
    if meta.mode() & (libc::S_ISUID | libc::S_ISGID) != 0 {
        bail!(
            "{} is set-user-ID or set-group-ID: the loader ignores LD_PRELOAD for it, so \
             uzswap cannot hold its memory; run a copy without those bits",
            path.display()
        );
    }
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: NUL-terminated strings; a null buffer of size 0 asks for the
    // attribute's size only.
    let caps = unsafe {
        libc::getxattr(
            name.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    if caps > 0 {
        bail!(
            "{} has file capabilities: the loader ignores LD_PRELOAD for it, so uzswap \
             cannot hold its memory",
            path.display()
        );
    }
    let mut head = [0u8; 64];
    let mut f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let n = f.read(&mut head)?;
    if n < 4 || &head[..4] != b"\x7fELF" {
        // A script: its interpreter is checked when it starts.
        return Ok(());
    }
    if n < 64 || head[4] != 2 || head[5] != 1 {
        bail!("{}: not a 64-bit little-endian ELF program", path.display());
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let u64_at = |o: usize| u64::from_le_bytes(head[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(phoff))?;
    f.read_exact(&mut table)?;
    const PT_INTERP: u32 = 3;
    let dynamic = table
        .chunks_exact(phentsize.max(4) as usize)
        .any(|ph| u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_INTERP);
    let go = go_sections(&mut f, &head)?;
    if !dynamic {
        let how = if go {
            "a Go program is linked dynamically where it uses cgo: build it with \
             CGO_ENABLED=1 and a package that imports \"C\", such as os/user or net"
        } else {
            "link it dynamically, or use the library's API"
        };
        bail!(
            "{} is statically linked: its allocator and system calls are inside it, where \
             LD_PRELOAD cannot reach, so uzswap cannot hold its memory ({how})",
            path.display()
        );
    }
    if go && !kernel_faults_served(user_mode) {
        bail!(
            "{} is a Go program: its runtime makes its system calls itself, not through \
             libc, so one that reads or writes evicted memory would fail unless the kernel \
             hands that fault to uzswap, which takes /dev/userfaultfd: run it as root, or \
             let this user open the device once with `sudo uzswap setup --user $USER`",
            path.display()
        );
    }
    Ok(())
}

/// Whether the ELF file `f` (its header `head`) has Go's sections
/// (`.go.buildinfo`, which every Go program has since Go 1.13).
fn go_sections(f: &mut std::fs::File, head: &[u8; 64]) -> Result<bool> {
    use std::io::{Seek, SeekFrom};
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let shoff = u64::from_le_bytes(head[40..48].try_into().unwrap());
    let (shentsize, shnum, shstrndx) = (u16_at(58), u16_at(60), u16_at(62));
    if shoff == 0 || shentsize < 64 || shnum == 0 || shstrndx >= shnum || shnum > 4096 {
        return Ok(false);
    }
    let mut table = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff))?;
    if f.read_exact(&mut table).is_err() {
        return Ok(false);
    }
    let sh = |i: u64| &table[(i * shentsize) as usize..][..64];
    let strtab = sh(shstrndx);
    let (off, size) = (
        u64::from_le_bytes(strtab[24..32].try_into().unwrap()),
        u64::from_le_bytes(strtab[32..40].try_into().unwrap()),
    );
    if size > 1 << 20 {
        return Ok(false);
    }
    let mut names = vec![0u8; size as usize];
    f.seek(SeekFrom::Start(off))?;
    if f.read_exact(&mut names).is_err() {
        return Ok(false);
    }
    Ok((0..shnum).any(|i| {
        let name = u32::from_le_bytes(sh(i)[0..4].try_into().unwrap()) as usize;
        names
            .get(name..)
            .is_some_and(|n| n.starts_with(b".go.buildinfo\0"))
    }))
}

/// Whether faults the kernel takes inside a system call will reach the
/// program's handler threads: the user may open /dev/userfaultfd, and
/// user mode was not asked for.
fn kernel_faults_served(user_mode: bool) -> bool {
    !user_mode
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/userfaultfd")
            .is_ok()
}

fn preload_path(a: &Args) -> Result<PathBuf> {
    let p = match (&a.preload, std::env::var_os("UZSWAP_PRELOAD")) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => std::env::current_exe()?
            .parent()
            .context("the uzswap binary has no directory")?
            .join("libuzswap_preload.so"),
    };
    if !p.is_file() {
        bail!(
            "preload library {} not found: build it with `cargo build --release -p \
             uzswap-preload` (it lands next to the uzswap binary), or name it with --preload",
            p.display()
        );
    }
    Ok(p.canonicalize()?)
}

/// A new directory of this run's own under the temporary directory, for
/// the figures `--json` collects. The file was `uzswap-run-PID.json`, kept
/// after the run where a process outliving the runner (a daemon) wrote its
/// figures late: a later run with the same process id then read that
/// process into its summary (a test saw a stranger among its processes).
/// A process still running when the directory is gone cannot create its
/// file there, and the library then writes nothing.
fn private_dir() -> Result<std::path::PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    for n in 0..64u32 {
        let d =
            std::env::temp_dir().join(format!("uzswap-run-{}-{nanos:x}-{n}", std::process::id()));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", d.display())),
        }
    }
    anyhow::bail!(
        "no new directory for the figures under {}",
        std::env::temp_dir().display()
    )
}

/// Each process's figures from a `--stats` file (the library appends one
/// JSON line per process as it exits); lines that do not parse are skipped.
pub fn read_stats(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The largest `peak_bytes` (resident region memory + pool) of `procs`.
pub fn peak_of(procs: &[serde_json::Value]) -> u64 {
    procs
        .iter()
        .filter_map(|p| p["peak_bytes"].as_u64())
        .max()
        .unwrap_or(0)
}

static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: i32) {
    let pid = CHILD.load(Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

pub fn run(a: Args) -> Result<()> {
    if !a.folio.is_power_of_two() || !(4096..=2 << 20).contains(&a.folio) {
        bail!("--folio {}: a power of two from 4K to 2M", a.folio);
    }
    uzswap::compress::by_name(&a.compressor).map_err(|e| anyhow::anyhow!("--compressor: {e}"))?;
    if let Some(s) = a.stats_every {
        if !(s.is_finite() && s > 0.0) {
            bail!("--stats-every {s}: a positive number of seconds");
        }
    }
    let cfg = uzswap::UzswapConfig {
        budget: a.budget,
        folio_order: (a.folio / 4096).trailing_zeros(),
        ..Default::default()
    };
    let min = uzswap::region::min_budget(&cfg);
    if a.budget < min {
        bail!(
            "--budget {}: below the {} KiB a {} KiB chunk needs (room for the stores and \
             faults in flight)",
            a.budget,
            min.div_ceil(1024),
            a.folio >> 10
        );
    }
    let prog = resolve(&a.cmd[0])?;
    check_program(&prog, a.user_mode)?;
    let lib = preload_path(&a)?;
    let tmp_dir = if a.json && a.stats.is_none() {
        Some(private_dir()?)
    } else {
        None
    };
    let stats = a
        .stats
        .clone()
        .or(tmp_dir.as_ref().map(|d| d.join("stats.json")));
    let mut preload = lib.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = std::process::Command::new(&prog);
    cmd.arg0(&a.cmd[0]).args(&a.cmd[1..]);
    cmd.env("LD_PRELOAD", preload)
        .env("UZSWAP_BUDGET", a.budget.to_string())
        .env("UZSWAP_COMPRESSOR", &a.compressor)
        .env("UZSWAP_FOLIO", a.folio.to_string());
    let optional = [
        (
            "UZSWAP_SWAP_DIR",
            a.writeback_dir
                .as_ref()
                .map(|d| d.clone().into_os_string())
                .or_else(|| {
                    a.writeback
                        .as_ref()
                        .and_then(|w| w.strip_prefix("file:"))
                        .map(|d| d.split_once("+redis://").map_or(d, |(d, _)| d).into())
                }),
        ),
        (
            "UZSWAP_SWAP_SIZE",
            a.swap_size.map(|s| s.to_string().into()),
        ),
        (
            "UZSWAP_WRITEBACK",
            // `redis://...`, or `file+redis://...` for the far tier behind
            // the file (its directory goes in UZSWAP_SWAP_DIR).
            a.writeback.as_ref().and_then(|w| {
                let i = w.find("redis://")?;
                Some(if i == 0 {
                    w.into()
                } else {
                    format!("file+{}", &w[i..]).into()
                })
            }),
        ),
        ("UZSWAP_FAR_SIZE", a.far_size.map(|s| s.to_string().into())),
        (
            "UZSWAP_STATS",
            stats.as_ref().map(|s| s.clone().into_os_string()),
        ),
        (
            "UZSWAP_STATS_COLLECTED",
            tmp_dir.is_some().then(|| "1".into()),
        ),
        (
            "UZSWAP_STATS_EVERY",
            a.stats_every.map(|s| s.to_string().into()),
        ),
        (
            "UZSWAP_WRITEBACK_PLAIN",
            a.writeback_plain.then(|| "1".into()),
        ),
        ("UZSWAP_NO_INHERIT", a.no_inherit.then(|| "1".into())),
        ("UZSWAP_FORK_INSTANCE", a.fork_instance.then(|| "1".into())),
        (
            "UZSWAP_SAMPLE_YOUNG",
            a.young.sample_young.map(|m| m.as_str().into()),
        ),
        ("UZSWAP_OWN_MEMORY", a.count_own.then(|| "1".into())),
        ("UZSWAP_USER_MODE", a.user_mode.then(|| "1".into())),
        (
            "UZSWAP_HANDLER",
            Some(
                match a.handler {
                    crate::usemem::Handler::Block => "block",
                    crate::usemem::Handler::Spin => "spin",
                    crate::usemem::Handler::Signal => "signal",
                    crate::usemem::Handler::Auto => "auto",
                }
                .into(),
            ),
        ),
    ];
    for (k, v) in optional {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if !a.json {
        // Returns only if the exec failed.
        let err = cmd.exec();
        return Err(err).with_context(|| format!("starting {}", prog.display()));
    }
    let t0 = std::time::Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", prog.display()))?;
    CHILD.store(child.id() as i32, Relaxed);
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: installs a handler that only calls kill(2).
        unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
    }
    // Terminal signals reach the program through the process group; the
    // runner waits for it to act on them.
    // SAFETY: ignoring signals has no preconditions.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let status = child.wait()?;
    let elapsed = t0.elapsed().as_secs_f64();
    // Only `--json` gets here (without it the runner exec'd the program).
    let procs = stats.as_deref().map(read_stats).unwrap_or_default();
    let peak = peak_of(&procs);
    let summary = serde_json::json!({
        "command": a.cmd.iter().map(|s| s.to_string_lossy()).collect::<Vec<_>>(),
        "exit_code": status.code(),
        "signal": status.signal(),
        "elapsed_s": elapsed,
        "budget_bytes": a.budget,
        "peak_bytes": peak,
        "processes": procs,
    });
    // Not `println!`: a reader that went away (`| head -1` took the
    // program's line and left) is no reason to panic, and the exit status
    // stays the program's.
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, "{summary}").and_then(|()| out.flush()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("uzswap run: writing the summary: {e}");
            }
        }
    }
    if let Some(d) = tmp_dir {
        let _ = std::fs::remove_dir_all(d);
    }
    if let Some(sig) = status.signal() {
        if sig == libc::SIGBUS {
            // The library's own line (above, from the process) says which
            // page and why when one could not be read back; without it, the
            // SIGBUS was a fault uzswap never saw (raised while the thread
            // had SIGBUS blocked, in signal mode) or the program's own.
            eprintln!(
                "uzswap run: {} was killed by SIGBUS: memory it touched could not be read \
                 back (the writeback target failed or lost it; the line above says which \
                 page), so it was stopped rather than given wrong data, or, with no such \
                 line, a fault came while SIGBUS was blocked in signal mode (`--handler \
                 block` serves those) or the SIGBUS was the program's own",
                prog.display()
            );
        }
        // SAFETY: the default action, then the same signal to ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    std::process::exit(status.code().unwrap_or(1));
}

use std::os::unix::process::CommandExt;

#[derive(clap::Args, Debug)]
pub struct SetupArgs {
    /// Also add this user to the group.
    #[arg(long)]
    pub user: Option<String>,
    /// The group given access to /dev/userfaultfd.
    #[arg(long, default_value = "userfaultfd")]
    pub group: String,
}

/// `uzswap setup` (root, once): a system group with read/write access to
/// /dev/userfaultfd, as the kvm group has /dev/kvm, and a udev rule that
/// keeps it across reboots. Its members then get faults inside system calls
/// served (`KernelFaults::Served`) without being root.
pub fn setup(a: SetupArgs) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "setup changes /dev/userfaultfd's group and mode: run it as root (sudo uzswap setup)"
        );
    }
    let dev = Path::new("/dev/userfaultfd");
    if !dev.exists() {
        bail!("/dev/userfaultfd does not exist (Linux 6.1+ with CONFIG_USERFAULTFD)");
    }
    let sh = |args: &[&str]| -> Result<()> {
        let st = std::process::Command::new(args[0])
            .args(&args[1..])
            .status()?;
        if !st.success() {
            bail!("{} failed: {st}", args.join(" "));
        }
        Ok(())
    };
    let have_group = std::fs::read_to_string("/etc/group")?
        .lines()
        .any(|l| l.split(':').next() == Some(a.group.as_str()));
    if !have_group {
        sh(&["groupadd", "--system", &a.group])?;
    }
    sh(&["chgrp", &a.group, "/dev/userfaultfd"])?;
    sh(&["chmod", "0660", "/dev/userfaultfd"])?;
    let rule = format!(
        "# uzswap: members of {g} may open /dev/userfaultfd\nKERNEL==\"userfaultfd\", GROUP=\"{g}\", MODE=\"0660\"\n",
        g = a.group
    );
    let rules = Path::new("/etc/udev/rules.d");
    if rules.is_dir() {
        std::fs::write(rules.join("60-uzswap-userfaultfd.rules"), rule)?;
    }
    if let Some(u) = &a.user {
        sh(&["usermod", "-aG", &a.group, u])?;
    }
    println!(
        "/dev/userfaultfd: group {g}, mode 0660{}. Members of {g} (usermod -aG {g} USER, then \
         log in again) get system calls on evicted memory served.",
        if rules.is_dir() {
            ", kept across reboots by a udev rule"
        } else {
            ""
        },
        g = a.group
    );
    Ok(())
}
