//! `uzswap run`: unmodified programs (Python scripts in `tests/programs`)
//! under a budget far below their memory, through both userfaultfd open
//! paths: the device (faults inside system calls served) and user mode only
//! (the library pins system-call buffers), the latter also as a real
//! unprivileged user made for the test. Every script checks its own bytes.

mod common;

use common::{preload, userfaultfd_works, uzswap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn programs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// The distribution's Python (the tests' programs), or None with the
/// reason printed.
fn python() -> Option<&'static str> {
    let p = "/usr/bin/python3";
    if Path::new(p).exists() {
        Some(p)
    } else {
        eprintln!("skipping: {p} not installed (scripts/setup installs it)");
        None
    }
}

fn run(pre: &[&str], args: &[&str]) -> Output {
    let lib = preload();
    let mut c = Command::new(pre.first().copied().unwrap_or(uzswap()));
    if !pre.is_empty() {
        c.args(&pre[1..]).arg(uzswap());
    }
    c.arg("run").arg("--preload").arg(&lib).args(args);
    c.output().expect("uzswap run")
}

fn ok(o: &Output, what: &str) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {:?}\nstdout: {out}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// A successful `uzswap run --json`: the program's standard output and the
/// runner's summary line after it.
fn output_and_summary(o: &Output, what: &str) -> (String, serde_json::Value) {
    let out = ok(o, what);
    let (prog_out, summary) = out.trim_end().rsplit_once('\n').expect("two lines");
    let s = serde_json::from_str(summary).expect("summary JSON");
    (format!("{prog_out}\n"), s)
}

fn script(name: &str) -> String {
    programs().join(name).display().to_string()
}

#[test]
fn a_python_heap_four_times_the_budget_gives_the_same_output() {
    let (Some(py), true) = (python(), userfaultfd_works()) else {
        return;
    };
    let heap = script("heap.py");
    // About 40 MiB of objects under 16 MiB: small enough for CI's two
    // cores, large enough that most of the heap is evicted and read back.
    let n = "100000";
    let plain = Command::new(py).args([&heap, n]).output().unwrap();
    let want = ok(&plain, "plain run");
    for extra in [&[][..], &["--user-mode"][..]] {
        let mut args = vec!["--budget", "16M", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", py, &heap, n]);
        let o = run(&[], &args);
        let (prog_out, s) = output_and_summary(&o, "under uzswap");
        assert_eq!(prog_out, want, "{extra:?}: output differs");
        let p = &s["processes"][0];
        assert!(p["evicted_chunks"].as_u64().unwrap() > 0, "{extra:?}: {p}");
        assert!(
            s["peak_bytes"].as_u64().unwrap() <= 16 << 20,
            "{extra:?}: {s}"
        );
        let served = if extra.is_empty() {
            "served"
        } else {
            "not-served"
        };
        assert_eq!(p["kernel_faults"], served, "{extra:?}");
        // The default handler (`auto`): threads where they serve the
        // kernel's faults, the faulting thread itself where nothing would.
        let handler = if extra.is_empty() { "block" } else { "signal" };
        assert_eq!(p["handler"], handler, "{extra:?}");
    }
}

#[test]
fn count_own_puts_the_process_memory_under_the_budget() {
    let (Some(py), true) = (python(), userfaultfd_works()) else {
        return;
    };
    let heap = script("heap.py");
    let n = "100000";
    let want = ok(
        &Command::new(py).args([&heap, n]).output().unwrap(),
        "plain run",
    );
    let o = run(
        &[],
        &[
            "--budget",
            "32M",
            "--count-own",
            "--json",
            "--",
            py,
            &heap,
            n,
        ],
    );
    let (prog_out, s) = output_and_summary(&o, "under uzswap --count-own");
    assert_eq!(prog_out, want, "output differs");
    let p = &s["processes"][0];
    // uzswap's own heap and buffers at least, and never over half.
    let own = p["own_bytes"].as_u64().unwrap();
    assert!(own > 0 && own <= 16 << 20, "{p}");
    assert!(p["evicted_chunks"].as_u64().unwrap() > 0, "{p}");
}

#[test]
fn system_calls_fork_and_mappings_on_evicted_memory() {
    let (Some(py), true) = (python(), userfaultfd_works()) else {
        return;
    };
    for (name, arg) in [
        ("syscalls.py", "96"),
        ("fork.py", "20000"),
        ("mappings.py", "0"),
    ] {
        for extra in [&[][..], &["--user-mode"][..]] {
            let s = script(name);
            let mut args = vec!["--budget", "32M", "--stats", "/dev/null"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", py, &s, arg]);
            let out = ok(&run(&[], &args), name);
            assert!(out.starts_with("ok"), "{name} {extra:?}: {out}");
        }
    }
}

/// A command prefix (running as another user) and the runner's flags.
type OpenPath<'a> = (&'a [&'static str], &'static [&'static str]);

/// Each way the library can open the userfaultfd and serve faults: through
/// the device, in user mode only, in signal mode, and as `user` (a real
/// unprivileged user) where there is one.
fn every_open_path<'a>(user: &'a Option<[&'static str; 9]>) -> Vec<OpenPath<'a>> {
    let mut v: Vec<OpenPath<'a>> = vec![
        (&[], &[]),
        (&[], &["--user-mode"]),
        (&[], &["--handler", "signal"]),
    ];
    if let Some(pre) = user {
        v.push((&pre[..], &[]));
    }
    v
}

/// `uzswap run --budget BUDGET -- CMD...` on every open path (as `user`
/// too, where there is one), each required to succeed: what ran, and its
/// standard output.
fn on_every_open_path(
    user: &Option<[&'static str; 9]>,
    budget: &str,
    cmd: &[&str],
) -> Vec<(String, String)> {
    every_open_path(user)
        .into_iter()
        .map(|(pre, extra)| {
            let mut a = vec!["--budget", budget, "--stats", "/dev/null"];
            a.extend_from_slice(extra);
            a.push("--");
            a.extend_from_slice(cmd);
            let what = format!("{cmd:?} {pre:?} {extra:?}");
            let out = ok(&run(pre, &a), &what);
            (what, out)
        })
        .collect()
}

/// The test user (made here, without access to /dev/userfaultfd) and the
/// command prefix that runs as it, or None with the reason printed. Every
/// path in `reach` must be reachable by other users.
fn unprivileged_user(reach: &[String]) -> Option<[&'static str; 9]> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: making a test user needs root");
        return None;
    }
    let user = "uzswap-test";
    let _ = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            user,
        ])
        .output();
    let id = Command::new("id").args(["-u", user]).output().unwrap();
    if !id.status.success() {
        eprintln!("skipping: useradd could not make {user}");
        return None;
    }
    let mut all = vec![uzswap().to_string()];
    all.extend_from_slice(reach);
    for p in &all {
        let mut d = Path::new(p).parent();
        while let Some(dir) = d {
            if std::fs::metadata(dir).is_ok_and(|m| {
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o001 == 0
            }) {
                eprintln!(
                    "skipping: {} is not reachable by other users",
                    dir.display()
                );
                return None;
            }
            d = dir.parent();
        }
    }
    Some([
        "setpriv",
        "--reuid",
        user,
        "--regid",
        user,
        "--clear-groups",
        "--reset-env",
        "env",
        "TMPDIR=/tmp",
    ])
}

/// The non-root path: a user made for the test, with no access to
/// /dev/userfaultfd, gets `UFFD_USER_MODE_ONLY`; the library pins the
/// buffers of system calls, and nothing fails.
#[test]
fn an_unprivileged_user_gets_the_same_bytes() {
    let (Some(py), true) = (python(), userfaultfd_works()) else {
        return;
    };
    let Some(pre) = unprivileged_user(&[script("syscalls.py")]) else {
        return;
    };
    for name in ["syscalls.py", "mappings.py"] {
        let s = script(name);
        let o = run(&pre, &["--budget", "32M", "--json", "--", py, &s, "64"]);
        let out = ok(&o, name);
        assert!(out.starts_with("ok"), "{name}: {out}");
        let summary: serde_json::Value =
            serde_json::from_str(out.trim_end().rsplit_once('\n').unwrap().1).unwrap();
        // The script's subprocess (a shell and its commands) reports too.
        let procs = summary["processes"].as_array().unwrap();
        for p in procs {
            assert_eq!(p["uffd_open"], "syscall-user-mode", "{p}");
            assert_eq!(p["kernel_faults"], "not-served", "{p}");
            assert_eq!(p["handler"], "signal", "{p}");
        }
        let py = procs
            .iter()
            .find(|p| p["program"].as_str().unwrap().contains("python"))
            .unwrap_or_else(|| panic!("{name}: no python process: {summary}"));
        assert!(py["evicted_chunks"].as_u64().unwrap() > 0, "{py}");
    }
}

/// glibc's own system calls on region memory, which no wrapper of a
/// dynamic symbol sees: stdio reading and writing large requests straight
/// between the caller's buffer and the kernel, filling and flushing a
/// stream's buffer, `readdir`, `getcwd(NULL, 0)` (`streams.c`), and GNU
/// sort, which `fread`s its input into a fresh heap buffer; and the calls
/// whose arrays, paths and stat buffers are heap memory (`kernel_args.c`:
/// epoll_wait, poll, select, open, stat, readlink...). Where the kernel's
/// faults are not served (user mode only, as root and as a real
/// unprivileged user; signal mode) each of these failed with EFAULT
/// ("sort: read failed: ...: Bad address") before the library kept stdio's
/// and the directory calls' buffers out of its regions and pinned the
/// others.
#[test]
fn stdio_streams_and_kernel_arguments_on_every_open_path() {
    let (Some(cc), true) = (cc(), userfaultfd_works()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("uzswap-streams-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let open = |p: &Path| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap()
    };
    open(&dir);
    let bin = compile(cc, "streams", &["-O1"], &dir);
    let kbin = compile(cc, "kernel_args", &["-O1"], &dir);
    // sort's input: 2 MiB of lines; with its line records and merge space
    // sort uses more than the budget.
    let input = dir.join("input.txt");
    let mut text = String::with_capacity(2 << 20);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while text.len() < 2 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{:016x} {} line {}\n", x, x % 1000, text.len()));
    }
    std::fs::write(&input, &text).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    let want_sorted = lines.join("\n") + "\n";
    let input = input.to_str().unwrap().to_string();
    let user = unprivileged_user(&[bin.clone(), kbin.clone()]);
    for (pre, extra) in every_open_path(&user) {
        let what = format!("{pre:?} {extra:?}");
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        open(&work);
        let mut args = vec!["--budget", "6M", "--stats", "/dev/null"];
        args.extend_from_slice(extra);
        let mut a = args.clone();
        a.extend_from_slice(&["--", &bin, work.to_str().unwrap(), "12"]);
        assert_eq!(ok(&run(pre, &a), &what), "ok\n", "{what}");
        std::fs::remove_dir_all(&work).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        open(&work);
        let mut a = args.clone();
        a.extend_from_slice(&["--", &kbin, work.to_str().unwrap(), "2"]);
        let out = ok(&run(pre, &a), &format!("kernel_args {what}"));
        assert_eq!(out, "ok\n", "kernel_args {what}");
        std::fs::remove_dir_all(&work).unwrap();
        let mut a = args.clone();
        a.extend_from_slice(&["--", "env", "LC_ALL=C", "sort", "-S", "8M", &input]);
        let out = ok(&run(pre, &a), &format!("sort {what}"));
        assert!(out == want_sorted, "sort {what}: output differs");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// io_uring reading a file into an evicted heap (`io_uring.c`). Where the
/// kernel's faults are not served (user mode, signal mode, a real
/// unprivileged user) the kernel's copies into an evicted buffer failed
/// with EFAULT in the completions (the first read already); where they
/// are, direct reads through a ring lost data to evictions during their
/// DMA. `io_uring_setup` made through libc's `syscall` is refused with
/// ENOSYS on every path, and the program reads with `pread`; made with the
/// instruction itself, as liburing makes it, it is refused by the kernel
/// where the process may install a seccomp filter (root).
#[test]
fn io_uring_is_refused_and_the_fallback_reads_every_byte() {
    let Some((dir, bin)) = c_program("io_uring", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (what, out) in on_every_open_path(&user, "16M", &[&bin, "48"]) {
        assert_eq!(out, "ok fallback\n", "{what}");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        for (what, out) in on_every_open_path(&None, "16M", &[&bin, "48", "raw"]) {
            assert_eq!(out, "ok fallback\n", "raw {what}");
        }
    } else {
        eprintln!("skipping: the kernel's filter needs root");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Direct reads (`O_DIRECT`) into heap buffers under pressure
/// (`odirect.c`): the device writes the buffer's pages by DMA, past the
/// page tables, so an eviction during the read stored the old bytes and
/// the data was lost, silently, where the kernel's faults are served (the
/// wrappers pinned nothing there): 58 of 8000 reads came back with the
/// buffer's old bytes. The read wrappers now pin the buffers of a
/// descriptor that reads by DMA on every path.
#[test]
fn direct_reads_into_an_evicted_heap_lose_nothing() {
    let Some((dir, bin)) = c_program("odirect", &["-O1", "-pthread"]) else {
        return;
    };
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let user = unprivileged_user(std::slice::from_ref(&bin));
    let d = dir.to_str().unwrap();
    for (what, out) in on_every_open_path(&user, "24M", &[&bin, d, "128", "4000", "64"]) {
        if let Some(why) = out.strip_prefix("skip: ") {
            eprintln!("skipping: {why} on {}", dir.display());
            break;
        }
        assert_eq!(out, "ok 4000\n", "{what}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program that closes every descriptor from 3 up (a loop of `close`,
/// `close_range`, `closefrom`) or `dup2`s onto each of them, as daemons and
/// shells do, after its heap was evicted. Before the library kept its own
/// descriptors out of reach, each of these closed the userfaultfd (or put
/// another file at its number) and the program died of SIGSEGV reading its
/// heap back. Both open paths, signal mode, and a real unprivileged user.
#[test]
fn a_program_that_closes_every_descriptor_keeps_its_memory() {
    let Some((dir, bin)) = c_program("closers", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for how in ["loop", "range", "from", "dup", "none"] {
        for (what, out) in on_every_open_path(&user, "16M", &[&bin, how, "64"]) {
            assert_eq!(out, "ok\n", "{what}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A new thread reads the global locale's data before the thread library
/// unblocks its signals; where that data was evicted, a signal-mode fault
/// there was a SIGBUS raised while blocked, and the kernel killed the
/// program (rc 135; GNU sort over a large file as an unprivileged user).
#[test]
fn threads_started_after_the_locale_was_evicted_run() {
    let Some((dir, bin)) = c_program("locale_threads", &["-O1", "-pthread"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (what, out) in on_every_open_path(&user, "16M", &[&bin, "64", "8"]) {
        if out == "no-locale\n" {
            eprintln!("skipping: no C.UTF-8 locale installed ({what})");
            continue;
        }
        assert_eq!(out, "ok\n", "{what}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Coroutines on stacks carved from the heap read a heap larger than the
/// budget. In signal mode each fault's SIGBUS frame went on the coroutine's
/// stack, region memory: where the page below the stack pointer was out,
/// the kernel could not write it and killed the program (rc 135). The
/// program's own `sigaltstack` reads back as it set it and is used.
#[test]
fn coroutines_on_heap_stacks_fault_and_run() {
    let Some((dir, bin)) = c_program("coroutine", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (what, out) in on_every_open_path(&user, "16M", &[&bin, "64", "4"]) {
        assert!(out.starts_with("ok "), "{what}: {out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn what_cannot_run_gets_a_clear_message() {
    preload();
    let cases: [(&[&str], &str); 5] = [
        (&["--budget", "64K", "--", "true"], "below the"),
        (&["--bogus-flag", "--", "true"], "--bogus-flag"),
        (
            &["--budget", "64M", "--", "/sbin/ldconfig", "-p"],
            "statically linked",
        ),
        (
            &["--budget", "64M", "--", "no-such-program-here"],
            "command not found",
        ),
        (&["--compressor", "nope", "--", "true"], "--compressor"),
    ];
    for (args, msg) in cases {
        let o = run(&[], args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A set-user-ID program (a copy of `true`, made for the test).
    let dir = std::env::temp_dir().join(format!("uzswap-suid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let suid = dir.join("true");
    std::fs::copy("/bin/true", &suid).unwrap();
    std::fs::set_permissions(&suid, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).unwrap();
    let o = run(&[], &["--", suid.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("set-user-ID"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_exit_status_and_a_killing_signal_are_the_programs() {
    preload();
    if !userfaultfd_works() {
        return;
    }
    let sh = |script: &str| {
        run(
            &[],
            &[
                "--budget",
                "16M",
                "--stats",
                "/dev/null",
                "--",
                "sh",
                "-c",
                script,
            ],
        )
    };
    let o = sh("exit 7");
    assert_eq!(o.status.code(), Some(7));
    let o = sh("kill -TERM $$");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&o.status),
        Some(libc::SIGTERM)
    );
}

/// With `--json` the runner prints its summary after the program's output;
/// a reader gone by then (`| head -1`) leaves the program's exit status
/// and no panic.
#[test]
fn a_summary_nobody_reads_leaves_the_exit_status() {
    use std::io::BufRead;
    preload();
    if !userfaultfd_works() {
        return;
    }
    let mut c = Command::new(uzswap());
    c.args(["run", "--preload"]).arg(preload()).args([
        "--budget",
        "16M",
        "--json",
        "--",
        "sh",
        "-c",
        "echo first; sleep 0.5; exit 3",
    ]);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("uzswap run");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "first\n");
    // The reader is dropped here, before the program exits.
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
}

/// The runner execs the program: no process of its own stays beside it to
/// be charged to the program's memory cgroup, and the program has the
/// runner's process id. With `--json` a parent stays to print the summary.
#[test]
fn the_runner_becomes_the_program() {
    let lib = preload();
    if !userfaultfd_works() {
        return;
    }
    let out = |json: bool| {
        let mut c = Command::new(uzswap());
        c.arg("run").arg("--preload").arg(&lib);
        c.args(["--budget", "16M", "--stats", "/dev/null"]);
        if json {
            c.arg("--json");
        }
        let child = c
            .args(["--", "sh", "-c", "echo $$"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let o = child.wait_with_output().unwrap();
        let first = String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        (pid, first.parse::<u32>().unwrap())
    };
    let (runner, program) = out(false);
    assert_eq!(
        runner, program,
        "the program should be the runner's process"
    );
    let (runner, program) = out(true);
    assert_ne!(
        runner, program,
        "--json keeps a parent to print the summary"
    );
}

/// A C compiler, or None with the reason printed.
fn cc() -> Option<&'static str> {
    compiler("cc", "C")
}

/// The compiler `cmd` (for `language`), or `None` with the skip printed.
fn compiler(cmd: &'static str, language: &str) -> Option<&'static str> {
    let ok = Command::new(cmd)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: no {language} compiler (scripts/setup installs one)");
    }
    ok.then_some(cmd)
}

/// `tests/programs/NAME.c` compiled into a scratch directory of its own,
/// or `None` (the test returns) where there is no C compiler or no
/// userfaultfd.
fn c_program(name: &str, flags: &[&str]) -> Option<(PathBuf, String)> {
    program(cc(), &format!("{name}.c"), flags)
}

/// `tests/programs/SOURCE` compiled by `compiler` into a scratch directory
/// of its own, or `None` (the test returns) where there is no such
/// compiler or no userfaultfd.
fn program(compiler: Option<&str>, source: &str, flags: &[&str]) -> Option<(PathBuf, String)> {
    let (Some(compiler), true) = (compiler, userfaultfd_works()) else {
        return None;
    };
    let stem = Path::new(source).file_stem().unwrap().to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("uzswap-{stem}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = compile_source(compiler, source, flags, &dir);
    Some((dir, bin))
}

/// `tests/programs/NAME.c` compiled with `cc` and `flags` into `dir`; the
/// binary's path.
fn compile(cc: &str, name: &str, flags: &[&str], dir: &Path) -> String {
    compile_source(cc, &format!("{name}.c"), flags, dir)
}

/// `tests/programs/SOURCE` compiled with `compiler` and `flags` into `dir`,
/// named after the source's stem; the binary's path.
fn compile_source(compiler: &str, source: &str, flags: &[&str], dir: &Path) -> String {
    let bin = dir.join(Path::new(source).file_stem().unwrap());
    let st = Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(programs().join(source))
        .status()
        .unwrap();
    assert!(st.success(), "compiling {source}");
    bin.to_str().unwrap().to_string()
}

/// Blocks larger than mimalloc's arenas (mapped by mimalloc on its own)
/// are freed and reallocated as mimalloc's, and a forked child's glibc
/// blocks are measured by glibc even where another allocator's
/// `malloc_usable_size` is loaded after the library (as redis loads
/// jemalloc): both crashed programs before.
#[test]
fn huge_blocks_and_a_childs_blocks_with_another_allocator_loaded() {
    let Some((dir, bin)) = c_program("alloc_edges", &["-O1"]) else {
        return;
    };
    let bin = bin.as_str();
    let args = ["--budget", "32M", "--stats", "/dev/null", "--", bin, "300"];
    assert_eq!(ok(&run(&[], &args), "alloc_edges"), "ok\n");
    // jemalloc as redis loads it (scripts/setup installs redis), after ours.
    let jemalloc = [
        "/lib/x86_64-linux-gnu/libjemalloc.so.2",
        "/usr/lib64/libjemalloc.so.2",
    ]
    .into_iter()
    .find(|p| Path::new(p).exists());
    match jemalloc {
        Some(j) => {
            let pre = ["env", &format!("LD_PRELOAD={j}")];
            assert_eq!(ok(&run(&pre, &args), "alloc_edges with jemalloc"), "ok\n");
        }
        None => eprintln!("no libjemalloc: the case with another allocator is not run"),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Blocks of 2-32 KiB, from the library's best-fit heap (`mid_blocks.c`),
/// evicted under a 16 MiB budget: every byte reads back on every open path,
/// through frees from other threads than the heap's, realloc into and out
/// of those sizes, and a fork whose child reads them all.
#[test]
fn mid_size_blocks_keep_every_byte_across_threads_realloc_and_fork() {
    let Some((dir, bin)) = c_program("mid_blocks", &["-O1", "-pthread"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (what, out) in on_every_open_path(&user, "16M", &[&bin, "4000"]) {
        assert_eq!(out, "ok\n", "{what}");
    }
    // The blocks were evicted and faulted back, not only allocated.
    let args = ["--budget", "16M", "--json", "--", bin.as_str(), "4000"];
    let (out, s) = output_and_summary(&run(&[], &args), "mid_blocks --json");
    assert_eq!(out, "ok\n");
    let p = &s["processes"][0];
    assert!(p["evicted_chunks"].as_u64().unwrap() > 0, "{p}");
    assert!(p["pgmajfault"].as_u64().unwrap() > 0, "{p}");
    assert_eq!(p["fault_errors"], 0, "{p}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tests/programs/NAME.c` (built with -O1 -pthread, run with `args`)
/// under [`under_budget_everywhere`] at `mib` MiB, evicting more than 500
/// chunks.
fn c_program_under_budget_everywhere(name: &str, args: &[&str], mib: u64, want: &str) {
    let Some((dir, bin)) = c_program(name, &["-O1", "-pthread"]) else {
        return;
    };
    let mut cmd = vec![bin.as_str()];
    cmd.extend_from_slice(args);
    under_budget_everywhere(&cmd, mib, want, 500);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `cmd` under `--budget {mib}M --json` on every open path: prints `want`,
/// evicts more than `evicted` chunks, peaks within the budget, and takes
/// no fault error.
fn under_budget_everywhere(cmd: &[&str], mib: u64, want: &str, evicted: u64) {
    for (what, p) in summaries_everywhere(cmd, mib, want) {
        assert!(
            p["evicted_chunks"].as_u64().unwrap() > evicted,
            "{what}: {p}"
        );
        assert!(
            p["peak_bytes"].as_u64().unwrap() <= mib << 20,
            "{what}: {p}"
        );
    }
}

/// `uzswap run --budget MIB --json -- CMD...` on every open path, each
/// required to print `want` and to resolve every fault it took: what ran,
/// and its process's figures.
fn summaries_everywhere(cmd: &[&str], mib: u64, want: &str) -> Vec<(String, serde_json::Value)> {
    let budget = format!("{mib}M");
    every_open_path(&None)
        .into_iter()
        .map(|(pre, extra)| {
            let mut args = vec!["--budget", budget.as_str(), "--json"];
            args.extend_from_slice(extra);
            args.push("--");
            args.extend_from_slice(cmd);
            let what = format!("{cmd:?} {extra:?}");
            let (out, s) = output_and_summary(&run(pre, &args), &what);
            assert_eq!(out, want, "{what}");
            let p = s["processes"][0].clone();
            assert_eq!(p["fault_errors"], 0, "{what}: {p}");
            (what, p)
        })
        .collect()
}

/// With `--fork-instance`, a forked child's memory is under uzswap
/// (`fork_child.c`): it keeps
/// every byte it inherited, reads zeros where it drops inherited memory,
/// and the 128 MiB it allocates itself stay under its budget (its RssAnon,
/// and its own figures at exit), read back intact, in a grandchild too. Before, a child
/// ran detached: its RssAnon grew by all 128 MiB under a 32 MiB budget.
#[test]
fn a_forked_childs_own_memory_is_under_its_budget() {
    let Some((dir, bin)) = c_program("fork_child", &["-O1"]) else {
        return;
    };
    for (pre, extra) in every_open_path(&None) {
        let mut args = vec!["--budget", "32M", "--json", "--fork-instance"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", bin.as_str(), "128"]);
        let (out, s) = output_and_summary(&run(pre, &args), &format!("fork_child {extra:?}"));
        let grew: u64 = out
            .strip_prefix("child grew ")
            .and_then(|r| r.split_once('\n'))
            .and_then(|(n, rest)| (rest == "ok fork_child\n").then(|| n.parse().ok())?)
            .unwrap_or_else(|| panic!("{extra:?}: {out}"));
        assert!(grew < 48, "{extra:?}: the child's memory grew {grew} MiB");
        let procs = s["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 2, "{extra:?}: {s}");
        for p in procs {
            assert_eq!(p["fault_errors"], 0, "{extra:?}: {p}");
        }
        // The child evicted its own memory: more than the parent had. (Its
        // peak is not asserted: its budget is what the parent left, at
        // least a sixteenth, and the evicted memory of its own it hands the
        // grandchild stays in its cache.)
        assert!(
            procs
                .iter()
                .any(|p| p["evicted_chunks"].as_u64().unwrap() > (64 << 20) / 65536),
            "{extra:?}: no process evicted the child's memory: {s}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A stream opened early and left idle while the heap churns under the
/// budget, its FILE evicted, then a fork (`fork_stdio.c`): glibc resets
/// every stream's lock in the child before uzswap registers anything
/// there, and the child died of SIGSEGV inside `fork` reading the evicted
/// FILE as zeros. With a second thread holding the stream's lock across
/// the fork, the child must find it reset and write through the stream.
/// On every open path, as an unprivileged user too (where system calls'
/// faults are not served, streams live outside regions: the fork must
/// still work).
#[test]
fn a_forked_child_writes_through_a_stream_whose_file_was_evicted() {
    let Some((dir, bin)) = c_program("fork_stdio", &["-O1", "-pthread"]) else {
        return;
    };
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (pre, extra) in every_open_path(&user) {
        for mode in ["idle", "held"] {
            let file = dir.join(format!("out-{mode}-{}", pre.len() + extra.len()));
            let file = file.to_str().unwrap();
            let mut args = vec!["--budget", "16M", "--json"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", bin.as_str(), "64", file, mode]);
            let what = format!("fork_stdio {mode} {extra:?} {pre:?}");
            let (out, s) = output_and_summary(&run(pre, &args), &what);
            // The churn must have evicted the FILE, or this proves nothing;
            // where system calls' faults are not served, streams are
            // opened with glibc's heap (`streams.rs`) and never evicted.
            let evicted = if s["processes"][0]["kernel_faults"] == "served" {
                "1"
            } else {
                "0"
            };
            assert_eq!(
                out,
                format!("evicted {evicted}\nok fork_stdio\n"),
                "{what}: {s}"
            );
            for p in s["processes"].as_array().unwrap() {
                assert_eq!(p["fault_errors"], 0, "{what}: {p}");
            }
            let got = std::fs::read_to_string(file).unwrap();
            assert!(
                got.starts_with("child ") && got.ends_with("\nparent\n"),
                "{what}: {got:?}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Forks that do not come through the interposed `fork` symbol, and a
/// program's own fork handlers (`fork_paths.c`), after 48 of 64 MiB were
/// evicted: `daemon` and `forkpty` call glibc's own fork, and their
/// children read every evicted page as zeros (6.6 M of 8.4 M words
/// differed), as did a child of `syscall(SYS_fork)`; a `pthread_atfork` child handler ran before the take-over,
/// read zeros and its write of a zero was lost. And a process that made
/// itself not dumpable, whose `/proc/self/pagemap` an unprivileged user
/// cannot open: its child's take-over failed there, and the child died of
/// SIGSEGV. And copies made without any fork handler: glibc's `clone()`
/// and the clone system calls without `CLONE_VM` (their children read
/// 6.6 M words as zeros), which bring every evicted page in first and
/// leave the child detached. Each child must read every byte, the handler
/// too, and keep what the handler wrote. On every open path, as an
/// unprivileged user too.
#[test]
fn forks_made_inside_glibc_and_fork_handlers_see_every_evicted_byte() {
    let Some((dir, bin)) = c_program("fork_paths", &["-O1", "-pthread"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (pre, extra) in every_open_path(&user) {
        for mode in [
            "atfork", "daemon", "forkpty", "sysfork", "nodump", "clone", "sysclone", "clone3",
        ] {
            let mut args = vec!["--budget", "16M", "--json"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", bin.as_str(), mode]);
            let what = format!("fork_paths {mode} {extra:?} {pre:?}");
            let o = run(pre, &args);
            let out = ok(&o, &what);
            // The daemon's line comes after the summary: its parent, the
            // program's process, exits inside `daemon`.
            let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('{')).collect();
            assert_eq!(lines, [format!("ok fork_paths {mode}")], "{what}: {out}");
            if mode == "daemon" {
                // The daemon outlives the runner, which removed the
                // directory its figures would go to: it writes none, and
                // says nothing (it had left a stale `uzswap-run-PID.json`
                // that a later run with the same process id read).
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(!err.contains("writing figures"), "{what}: {err}");
                continue;
            }
            let s: serde_json::Value =
                serde_json::from_str(out.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
            if mode.contains("clone") {
                assert_brought_in_after_evictions(&s, &what);
            } else {
                assert_shared_after_evictions(&s, &what);
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--json` collects the figures in a directory of the run's own and
/// removes it, also where a process outlives the runner and would write its
/// figures late (a daemon). The runner's file was `uzswap-run-PID.json`, and
/// a daemon's late figures left it behind: a later run given the same
/// process id read that stranger into its summary (a CI run of the fork
/// test found one).
#[test]
fn a_json_run_leaves_no_figures_behind() {
    let Some((dir, bin)) = c_program("fork_paths", &["-O1", "-pthread"]) else {
        return;
    };
    let child = Command::new(uzswap())
        .args(["run", "--preload"])
        .arg(preload())
        .args(["--budget", "16M", "--json", "--", bin.as_str(), "daemon"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("uzswap run");
    let pid = child.id();
    // Returns once the daemon, which keeps the pipes, has exited too.
    let o = child.wait_with_output().unwrap();
    let out = ok(&o, "fork_paths daemon");
    let summary = out.lines().find(|l| l.starts_with('{')).expect("summary");
    let s: serde_json::Value = serde_json::from_str(summary).unwrap();
    // The program's own process ends inside `daemon` (`_exit`, no
    // figures); the daemon's come after the summary. No one else's.
    for p in s["processes"].as_array().unwrap() {
        assert!(p["program"].as_str().unwrap().contains("fork_paths"), "{s}");
    }
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("uzswap-run-{pid}")))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("writing figures"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run's summary `s`: a process made one copy of itself after evicting
/// most of its 64 MiB, bringing every evicted page in first (the child
/// runs detached and reports nothing), and no fault error or checksum
/// failure.
fn assert_brought_in_after_evictions(s: &serde_json::Value, what: &str) {
    let procs = s["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{what}: the detached child reported: {s}");
    let p = &procs[0];
    assert_eq!(p["forks_brought_in"], 1, "{what}: {p}");
    assert_eq!(p["forks_shared"], 0, "{what}: {p}");
    assert_evicted_and_clean(p, procs, what);
}

/// `parent` evicted most of its 64 MiB, and none of `procs` had a fault
/// error or a checksum failure.
fn assert_evicted_and_clean(parent: &serde_json::Value, procs: &[serde_json::Value], what: &str) {
    assert!(
        parent["evicted_chunks"].as_u64().unwrap() > (32 << 20) / 65536,
        "{what}: the parent evicted little: {parent}"
    );
    for p in procs {
        assert_eq!(p["fault_errors"], 0, "{what}: {p}");
        assert_eq!(p["checksum_fail"], 0, "{what}: {p}");
    }
}

/// System calls that read or write a structure, an address or a pair of
/// descriptors in the caller's memory (`syscall_structs.c`: bind, connect,
/// accept, getsockname, getpeername, set/getsockopt, pipe, pipe2,
/// socketpair, epoll_ctl, waitpid, wait4, getrusage, uname, statfs,
/// fstatfs, statvfs, get/set/prlimit, sysinfo, nanosleep,
/// sched_getaffinity, getgroups, sendfile, utimensat), each on memory
/// evicted or never touched, each result checked against the same call on
/// the stack; ioctl (encoded and legacy requests, SIOCGIFCONF's buffer)
/// and fcntl (locks, owner) on evicted structures; then the path calls (chown, lchown, fchownat, fchmodat,
/// linkat, symlinkat, mkfifo, utimes, utime, inotify_add_watch, the
/// extended attribute calls) and getentropy; then thread names (prctl,
/// pthread_setname_np and pthread_getname_np), capget, mincore,
/// copy_file_range, signalfd, eventfd_read, getresuid,
/// sched_rr_get_interval, setgroups (glibc makes it in every thread,
/// uzswap's handlers too: with the list evicted the process hung, on every
/// path), epoll_pwait2, shmctl and msgctl's
/// IPC_STAT, a memfd's name,
/// times, get/setitimer,
/// timer_ and timerfd_ set/gettime, sigprocmask and pthread_sigmask (both
/// masks), splice's offset, sigtimedwait, msgsnd,
/// msgrcv, semop, mq_send and mq_receive; then CPU-time clocks
/// (clock_gettime, clock_getres), pthread_get/setaffinity_np,
/// sched_setscheduler, sched_set/getparam, process_vm_readv/writev,
/// vmsplice, lutimes and futimesat (their paths), each of which failed
/// before, and futimes and mq_notify. In user mode only and signal
/// mode the first of each part failed with EFAULT before. On every open
/// path, as an unprivileged user too.
#[test]
fn calls_that_fill_structures_in_evicted_memory_succeed() {
    let Some((dir, bin)) = c_program("syscall_structs", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (what, out) in on_every_open_path(&user, "16M", &[bin.as_str(), bin.as_str()]) {
        assert_eq!(out, "ok syscall_structs\n", "{what}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Calls that open directories and streams inside libc and call the
/// program back while they run (`walks.c`: scandir, scandirat, nftw and
/// ftw over a tree of 653 entries whose directories take several
/// `getdents64` each, fts, glob, pthread_getattr_np of the main thread,
/// getmntent), their buffers evicted between refills by
/// callbacks that churn 24 MiB under 8 MiB and keep what they allocate.
/// Where the kernel's faults are not served nftw returned EFAULT (or
/// stopped early, in silence), scandir failed with EFAULT and getmntent
/// with a stream error. On every open path, as an unprivileged user too.
#[test]
fn directory_walks_and_the_mount_table_on_evicted_buffers() {
    let Some((dir, bin)) = c_program("walks", &["-O1"]) else {
        return;
    };
    let open = |p: &Path| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap()
    };
    open(&dir);
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (pre, extra) in every_open_path(&user) {
        let what = format!("walks {pre:?} {extra:?}");
        let work = dir.join("tree");
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        open(&work);
        let mut a = vec!["--budget", "8M", "--stats", "/dev/null"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--", &bin, work.to_str().unwrap()]);
        assert_eq!(ok(&run(pre, &a), &what), "ok walks\n", "{what}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Execs whose path, vectors and strings were evicted (`exec_args.c`:
/// 64 variables set, the vector built in the heap, then 64 MiB written
/// under a 16 MiB budget): every member of the family, from the process,
/// a forked child and a `vfork` child, starts the program with every byte
/// of its arguments and environment. In user mode only (and as an
/// unprivileged user) every one of them failed with EFAULT before. On every
/// open path, as an unprivileged user too.
#[test]
fn execs_whose_arguments_were_evicted_start_the_program() {
    let Some((dir, bin)) = c_program("exec_args", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (pre, extra) in every_open_path(&user) {
        for mode in [
            "execve",
            "execv",
            "execvp",
            "execvpe",
            "execl",
            "execlp",
            "execle",
            "fexecve",
            "sysexecve",
            "fork",
            "vfork",
        ] {
            let mut args = vec!["--budget", "16M", "--json"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", bin.as_str(), mode]);
            let what = format!("exec_args {mode} {extra:?} {pre:?}");
            let out = ok(&run(pre, &args), &what);
            let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('{')).collect();
            assert_eq!(lines, [format!("exec-ok {mode}")], "{what}: {out}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run's summary `s`: a process forked once with its evicted memory left
/// to the child (no bring-in), after evicting most of its 64 MiB, and no
/// process had a fault error or a checksum failure.
fn assert_shared_after_evictions(s: &serde_json::Value, what: &str) {
    let procs = s["processes"].as_array().unwrap();
    let parent = procs
        .iter()
        .find(|p| p["forks_shared"] == 1)
        .unwrap_or_else(|| panic!("{what}: no fork shared: {s}"));
    assert_evicted_and_clean(parent, procs, what);
}

/// A program's fork flags on memory evicted at the fork (`fork_flags.c`):
/// a range flagged `MADV_WIPEONFORK` reads zeros in the child (its evicted
/// pages read the parent's bytes, taken over), one flagged `MADV_DONTFORK`
/// is inaccessible there and its addresses stay taken (the child's thread
/// stacks were mapped there, inside region memory, and took the parent's
/// evicted bytes), a flag does not outlive its mapping (a new mapping
/// at the same addresses was wiped in the child), and a mapping moved by
/// `mremap` keeps its flag. On every open path, as an unprivileged user
/// too.
#[test]
fn fork_flags_hold_for_evicted_memory() {
    let Some((dir, bin)) = c_program("fork_flags", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (pre, extra) in every_open_path(&user) {
        for mode in ["wipe", "dontfork", "reuse", "mremap"] {
            let mut args = vec!["--budget", "16M", "--json"];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", bin.as_str(), mode, "held"]);
            let what = format!("fork_flags {mode} {extra:?} {pre:?}");
            let (out, s) = output_and_summary(&run(pre, &args), &what);
            assert_eq!(out, format!("ok fork_flags {mode}\n"), "{what}: {s}");
            assert_shared_after_evictions(&s, &what);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fork after evictions brings nothing in: the child takes the evicted
/// memory over from its copy of the parent's cache (`fork_share.c`), on
/// every open path, as an unprivileged user too. The
/// parent writes all of its 64 MiB again before the child reads any of
/// it, so its pool's objects are freed and reused meanwhile; the child
/// still reads the bytes of the fork, writes half anew, and a grandchild
/// (taking the child's own inherited entries over in turn) reads both
/// halves. The parent's resident + pool never goes past twice its budget
/// (a fork that brought its 64 MiB in took it to about four times), and
/// the child still holds inherited pages at its exit: the half it only
/// read stays in the parent's objects, not in memory of its own.
#[test]
fn a_forked_child_takes_evicted_memory_over_without_a_bring_in() {
    let Some((dir, bin)) = c_program("fork_share", &["-O1"]) else {
        return;
    };
    let user = unprivileged_user(std::slice::from_ref(&bin));
    for (pre, extra) in every_open_path(&user) {
        let mut args = vec!["--budget", "16M", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", bin.as_str(), "2"]);
        let (out, s) = output_and_summary(&run(pre, &args), &format!("fork_share {extra:?}"));
        assert_eq!(out, "ok fork_share\n", "{extra:?}");
        let procs = s["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 2, "{extra:?}: {s}");
        for p in procs {
            assert_eq!(p["fault_errors"], 0, "{extra:?}: {p}");
            assert_eq!(p["checksum_fail"], 0, "{extra:?}: {p}");
        }
        let (child, parent): (Vec<_>, Vec<_>) = procs
            .iter()
            .partition(|p| p["inherited_pages"].as_u64().unwrap() > 0);
        assert_eq!(
            child.len(),
            1,
            "{extra:?}: no child kept inherited pages: {s}"
        );
        // The child evicted under its own budget, and its fork of the
        // grandchild shared in turn (its gate count was its own).
        assert_eq!(child[0]["forks_shared"], 1, "{extra:?}: {}", child[0]);
        let parent = parent[0];
        assert_eq!(
            (&parent["forks_shared"], &parent["forks_brought_in"]),
            (&1.into(), &0.into()),
            "{extra:?}: {parent}"
        );
        assert!(
            parent["evicted_chunks"].as_u64().unwrap() > (32 << 20) / 65536,
            "{extra:?}: the parent evicted little: {parent}"
        );
        assert!(
            parent["peak_bytes"].as_u64().unwrap() < 32 << 20,
            "{extra:?}: the fork brought the parent's memory in: {parent}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `--fork-instance` a child takes its memory over only once it
/// changes it (`fork_defer.c`), where the parent evicted nothing (a
/// child of one that did takes the evicted memory over at the fork): one
/// that allocates 256 KiB stays a single thread, as a shell's child before
/// `exec` (which then pays for no instance: a subshell 1.0-1.3 ms against
/// 2.6-3.1 with the take-over at the fork), and one that allocates 8 MiB
/// has uzswap's threads; both read back every byte.
#[test]
fn a_child_takes_its_memory_over_once_it_allocates() {
    let Some((dir, bin)) = c_program("fork_defer", &["-O1"]) else {
        return;
    };
    for (pre, extra) in every_open_path(&None) {
        let mut args = vec!["--budget", "128M", "--json", "--fork-instance"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", bin.as_str()]);
        let (out, _) = output_and_summary(&run(pre, &args), &format!("fork_defer {extra:?}"));
        assert_eq!(out, "small 1 big 2\nok fork_defer\n", "{extra:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Forks while uzswap's threads fault and evict (`fork_storm.c`: four
/// threads at random over a heap twice the budget, the main thread forking
/// 30 children that each start an instance of their own, taking the
/// evicted heap over from the parent's cache), with `--fork-instance` and
/// without: every child exits, none hangs, every byte checked is right.
/// Before a fork brought uzswap's threads to rest (`quiesce`), a child
/// copied while one of them was inside `parking_lot`'s table waited for
/// ever at its own first contended lock (about one child in fifty of a
/// `multiprocessing` pool's).
#[test]
fn forks_amid_faults_and_evictions_leave_no_child_hung() {
    let Some((dir, bin)) = c_program("fork_storm", &["-O1", "-pthread"]) else {
        return;
    };
    for (pre, extra) in every_open_path(&None) {
        for instance in [&["--fork-instance"][..], &[]] {
            let mut args = vec!["--budget", "8M", "--json"];
            args.extend_from_slice(instance);
            args.extend_from_slice(extra);
            args.extend_from_slice(&["--", bin.as_str(), "30", "16"]);
            let what = format!("fork_storm {instance:?} {extra:?}");
            let (out, s) = output_and_summary(&run(pre, &args), &what);
            assert_eq!(out, "forks=30 hung=0 bad=0\n", "{what}");
            let procs = s["processes"].as_array().unwrap();
            for p in procs {
                assert_eq!(p["fault_errors"], 0, "{what}: {p}");
            }
            // The heap is evicted all along: the children take it over
            // from the parent's cache (all 900 of 30 runs' forks did).
            let shared: u64 = procs
                .iter()
                .map(|p| p["forks_shared"].as_u64().unwrap())
                .sum();
            assert!(shared > 0, "{what}: no fork shared its evicted memory: {s}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Memory a managed runtime takes (`reserve.c`: the JVM commits its heap
/// with `mmap(MAP_FIXED)` over a `PROT_NONE` reservation, V8 with
/// `mprotect`, and both give parts back with `mmap(MAP_FIXED, PROT_NONE)`)
/// is under the budget, keeps every byte, reads zeros where it was given
/// back and still faults where it is not committed. Before, such a
/// reservation passed through: a JVM or Node heap was never evicted and
/// the budget bounded nothing (`evicted_chunks` 0, 272 MiB resident under
/// a 64 MiB budget), and giving back part of one crashed the program.
#[test]
fn a_runtimes_reserved_heap_is_under_the_budget() {
    let Some((dir, bin)) = c_program("reserve", &["-O1"]) else {
        return;
    };
    under_budget_everywhere(&[bin.as_str(), "128"], 32, "ok reserve\n", 1000);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Pages dropped by a raw `madvise` system call, past the library's
/// wrapper, as Go's runtime returns memory (`raw_drops.c`): every page
/// reads back as written, or as zeros where it was dropped, on every open
/// path, and the program ends. Before, the evictor read a dropped page of
/// a chunk it was evicting, and its fault waited on that chunk for ever.
#[test]
fn pages_dropped_by_raw_system_calls_are_evicted_and_read_back() {
    c_program_under_budget_everywhere("raw_drops", &["1"], 32, "ok raw_drops\n");
    // Four threads under half the memory: every handler thread may be
    // waiting at the backstop while the evictor reads a dropped page.
    c_program_under_budget_everywhere("raw_drops", &["4"], 16, "ok raw_drops\n");
}

/// The memory calls made through `syscall(2)` rather than their libc
/// wrappers (`syscall_mem.c`): `madvise`, `munmap`, `mprotect`, `mremap`
/// and a `MAP_FIXED` `mmap` on region memory keep their meaning on every
/// open path. Before they went past the library: the mremap failed with
/// EFAULT, and a page evicted before such a drop read back its old bytes.
#[test]
fn memory_calls_through_syscall_keep_their_meaning() {
    c_program_under_budget_everywhere("syscall_mem", &[], 16, "ok syscall_mem\n");
}

/// glibc's waits (`sync_waits.c`: a mutex, a condition variable with and
/// without a timeout, semaphores, a read-write lock, a barrier, and a
/// futex wait made through `syscall(2)`) on objects in a heap chunk that
/// a third thread pages out over and over: every round is counted, and no
/// futex call fails with EFAULT, on every open path. Before, where the
/// kernel's faults are not served (signal mode, user mode only), the
/// kernel's read of a futex word on an evicted page failed with EFAULT,
/// and glibc ended the process ("The futex facility returned an
/// unexpected error code"); the raw waits failed by the tens of thousands.
#[test]
fn waits_on_objects_in_evicted_pages_never_fail() {
    let Some((dir, bin)) = c_program("sync_waits", &["-O1", "-pthread"]) else {
        return;
    };
    summaries_everywhere(&[bin.as_str(), "20000"], 16, "ok sync_waits\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits pin their objects while they sleep, but all of them together
/// hold at most an eighth of the budget (`many_waiters.c`: 200 threads
/// each waiting on a condition of its own, or parked in a futex wait made
/// through `syscall(2)` as Rust's std parks, while the main thread writes
/// 64 MiB under 8 MiB): the program stays under its budget, on every open
/// path. With every wait pinned, 12.5 MiB of pinned chunks overran the
/// budget on every fault (a peak of 12.6 MiB, 50 times slower).
#[test]
fn sleeping_waiters_leave_the_budget_to_the_program() {
    c_program_under_budget_everywhere("many_waiters", &[], 8, "ok many_waiters\n");
}

/// The same for C++'s objects (`cxx_waits.cpp`: `std::mutex`,
/// `std::condition_variable`, `std::shared_mutex`,
/// `std::counting_semaphore`, `std::barrier` and C++20's atomic wait,
/// which libstdc++ makes through `syscall(2)`). Before, where the kernel's
/// faults are not served, libstdc++ threw `std::system_error` ("Bad
/// address") and the program ended.
#[test]
fn cxx_waits_on_objects_in_evicted_pages_never_fail() {
    let flags = ["-std=c++20", "-O1", "-pthread"];
    let Some((dir, bin)) = program(compiler("c++", "C++"), "cxx_waits.cpp", &flags) else {
        return;
    };
    summaries_everywhere(&[bin.as_str(), "20000"], 16, "ok cxx_waits\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Threads on stacks the program gives them from its heap
/// (`heap_stacks.c`: eight at a time, created and joined 1000 times while
/// another thread pages the stacks out) all run and are all joined, on
/// every open path. Before, the joins hung with handler threads (the
/// thread id the kernel clears at a thread's exit sits on its stack, and
/// an exiting thread's faults are not served) and the threads died of
/// SIGBUS at their start in signal mode.
#[test]
fn threads_on_heap_stacks_run_and_are_joined() {
    let Some((dir, bin)) = c_program("heap_stacks", &["-O1", "-pthread"]) else {
        return;
    };
    summaries_everywhere(&[bin.as_str(), "1000"], 16, "ok heap_stacks\n");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A Go program (here `raw_drops.c` made to look like one: Go's section
/// and its runtime's exported symbol) makes its system calls and sets its
/// signal masks itself: it runs with handler threads even where signal
/// mode is asked for (in signal mode a real one died of a SIGBUS it had
/// blocked), `uzswap run` refuses it where faults in system calls would
/// not be served, and one exec'd there runs without uzswap, saying so.
#[test]
fn a_go_program_gets_handler_threads_or_a_clear_refusal() {
    let (Some(cc), true) = (cc(), userfaultfd_works()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("uzswap-go-like-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = compile(
        cc,
        "raw_drops",
        &["-O1", "-pthread", "-DGO_LIKE", "-rdynamic"],
        &dir,
    );
    let args = [
        "--budget",
        "32M",
        "--json",
        "--handler",
        "signal",
        "--",
        bin.as_str(),
    ];
    let o = run(&[], &args);
    let (out, s) = output_and_summary(&o, "go-like, signal asked");
    assert_eq!(out, "ok raw_drops\n");
    let p = &s["processes"][0];
    assert_eq!(p["handler"], "block", "{p}");
    assert_eq!(p["kernel_faults"], "served", "{p}");
    assert_eq!(p["fault_errors"], 0, "{p}");
    assert!(p["evicted_chunks"].as_u64().unwrap() > 500, "{p}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a Go program sets its own signal masks"),
        "{err}"
    );

    let o = run(&[], &["--budget", "32M", "--user-mode", "--", bin.as_str()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "refused: {err}");
    assert!(o.stdout.is_empty(), "the program must not have run");
    assert!(
        err.contains("is a Go program") && err.contains("uzswap setup"),
        "{err}"
    );

    let o = run(
        &[],
        &[
            "--budget",
            "32M",
            "--user-mode",
            "--",
            "sh",
            "-c",
            bin.as_str(),
        ],
    );
    assert_eq!(ok(&o, "go-like exec'd in user mode"), "ok raw_drops\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("it runs without uzswap"), "{err}");

    // Linked statically (a Go program without cgo): the refusal says how
    // Go links dynamically.
    let st = dir.join("static");
    let built = Command::new(cc)
        .args(["-O1", "-pthread", "-DGO_LIKE", "-static", "-o"])
        .arg(&st)
        .arg(programs().join("raw_drops.c"))
        .status()
        .is_ok_and(|s| s.success());
    if built {
        let o = run(&[], &["--budget", "32M", "--", st.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && o.stdout.is_empty(), "{err}");
        assert!(
            err.contains("statically linked") && err.contains("cgo"),
            "{err}"
        );
    } else {
        eprintln!("no static C library: the statically linked case is not run");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mlock` on memory uzswap holds (`mlock.c`: libsodium's and OpenSSL's
/// secure heaps lock their pages): the piece stays resident and locked
/// while the rest is evicted around it, refuses `MADV_DONTNEED`, moves
/// locked, is evicted once unlocked, and locking past half the budget is
/// refused; `mlockall` locks the code, not the heap, which stays under the
/// budget. Before, the kernel's lock made the evictor's zap fail, its undo
/// marked chunks the kernel had zapped as resident, and the program hung.
#[test]
fn locked_memory_stays_resident_and_the_rest_under_the_budget() {
    c_program_under_budget_everywhere("mlock", &[], 32, "ok mlock\n");
}

/// A plugin opened with `RTLD_DEEPBIND` (PHP opens every extension so)
/// bound its `malloc` and `free` to glibc's, past the library's: freeing
/// what the program allocated aborted it ("free(): invalid pointer"; `php`
/// under `uzswap run` died before its first line). The plugin now shares
/// the program's allocator, its memory is under the budget, and `dlopen`
/// still searches the program's `RUNPATH`.
#[test]
fn a_plugin_opened_with_deepbind_shares_the_programs_allocator() {
    let (Some(cc), true) = (cc(), userfaultfd_works()) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("uzswap-deepbind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = programs().join("deepbind.c");
    let plugin = dir.join("libdeepbind_plugin.so");
    let bin = dir.join("deepbind");
    let built = [
        Command::new(cc)
            .args(["-O1", "-shared", "-fPIC", "-DPLUGIN", "-o"])
            .arg(&plugin)
            .arg(&src)
            .status(),
        Command::new(cc)
            .args(["-O1", "-o"])
            .arg(&bin)
            .arg(&src)
            .args(["-ldl", "-Wl,-rpath,$ORIGIN"])
            .status(),
    ];
    assert!(built.iter().all(|s| s.as_ref().unwrap().success()));
    let bin = bin.to_str().unwrap();
    under_budget_everywhere(&[bin, "48"], 16, "ok deepbind\n", 500);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Address hints are taken as the kernel takes them (`hints.c`): LuaJIT
/// wants its machine code within a jump of its binary and asked again and
/// again while every answer came from a region far off (347 k `mmap` and
/// `munmap` pairs for one script, and the script never compiled); a hint at
/// free memory is where the mapping goes; `MAP_32BIT` memory is low.
#[test]
fn address_hints_are_taken() {
    let Some((dir, bin)) = c_program("hints", &["-O1"]) else {
        return;
    };
    for (pre, extra) in every_open_path(&None) {
        let mut args = vec!["--budget", "16M", "--stats", "/dev/null"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", bin.as_str()]);
        assert_eq!(
            ok(&run(pre, &args), &format!("hints {extra:?}")),
            "ok hints\n"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program that brings its own malloc (`own_malloc.c`, as rustc links
/// jemalloc) keeps its heap in uzswap's regions, and libc calls that
/// allocator too. In signal mode a fault taken inside it, holding its lock,
/// was resolved by a handler that reached the allocator through libc:
/// rustc under `--handler signal` hung on jemalloc's lock, or died of a
/// fault taken with SIGBUS blocked. Such a program gets handler threads
/// on every path, with a line that says so where signal mode was asked
/// for, and its bytes under eviction.
#[test]
fn a_program_with_its_own_malloc_gets_handler_threads() {
    let Some((dir, bin)) = c_program("own_malloc", &["-O1", "-pthread", "-rdynamic"]) else {
        return;
    };
    for (pre, extra) in every_open_path(&None) {
        let mut args = vec!["--budget", "16M", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", bin.as_str(), "16"]);
        let o = run(pre, &args);
        let (out, s) = output_and_summary(&o, &format!("own malloc {extra:?}"));
        assert_eq!(out, "ok own malloc\n", "{extra:?}");
        let p = &s["processes"][0];
        assert_eq!(p["handler"], "block", "{extra:?}: {p}");
        assert!(
            p["evicted_chunks"].as_u64().unwrap() > 500,
            "{extra:?}: {p}"
        );
        assert_eq!(p["fault_errors"], 0, "{extra:?}: {p}");
        let said = String::from_utf8_lossy(&o.stderr).contains("brings its own malloc");
        assert_eq!(said, extra.contains(&"signal"), "{extra:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tmpfs of `size` mounted at a fresh directory named after `name` and
/// this process, or None with the reason printed (mounting needs root).
/// The caller unmounts and removes it.
fn tmpfs(name: &str, size: &str) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("uzswap-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&dir)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "skipping: cannot mount a tmpfs at {} (needs root)",
            dir.display()
        );
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    Some(dir)
}

/// `devfaults.py` under the runner with its swap file on a tmpfs of
/// `fs_size` mounted for the test (None where that is not possible: the
/// reason is printed). `breaker` breaks the device once the program is
/// ready (given the mount point and the program's pid); returns the
/// runner's status, stdout and the per-process stats JSON.
fn devfaults(
    case: &str,
    handler: &str,
    breaker: &dyn Fn(&Path, u32),
) -> Option<(std::process::ExitStatus, String, String)> {
    use std::io::{BufRead, Write};
    let py = python()?;
    let dir = tmpfs(&format!("devfaults-{case}-{handler}"), "96m")?;
    let stats = dir.with_extension("stats");
    let _ = std::fs::remove_file(&stats);
    let lib = preload();
    let mut child = Command::new(uzswap())
        .arg("run")
        .arg("--preload")
        .arg(&lib)
        .args([
            "--budget",
            "16M",
            "--swap-size",
            "64M",
            "--handler",
            handler,
        ])
        .arg("--writeback-dir")
        .arg(&dir)
        .arg("--stats")
        .arg(&stats)
        .args(["--", py, &script("devfaults.py"), "48"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let pid: u32 = line
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("the program did not get ready: {line:?}"))
            .trim()
            .parse()
            .unwrap();
        breaker(&dir, pid);
    }));
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut out, &mut rest);
    let status = child.wait().unwrap();
    let _ = Command::new("umount").arg(&dir).status();
    let _ = std::fs::remove_dir(&dir);
    let json = std::fs::read_to_string(&stats).unwrap_or_default();
    let _ = std::fs::remove_file(&stats);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    Some((status, rest, json))
}

/// The program's swap file, among its descriptors.
fn swap_file_of(pid: u32) -> PathBuf {
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(t) = std::fs::read_link(e.path()) {
            let t = t.to_string_lossy();
            if t.contains("uzswap-devfaults") && t.contains("(deleted)") {
                return e.path();
            }
        }
    }
    panic!("no swap file among process {pid}'s descriptors");
}

/// A full filesystem where the swap file must go: the run does not start,
/// and says why (the file is reserved whole up front, so a filesystem that
/// fills later fails writes with ENOSPC instead, which keeps pages in
/// memory: `crates/uzswap/tests/region_io_faults.rs`). Both handler modes.
#[test]
fn a_full_filesystem_is_refused_at_start_with_the_reason() {
    let (Some(py), true) = (python(), userfaultfd_works()) else {
        return;
    };
    for handler in ["block", "signal"] {
        let Some(dir) = tmpfs(&format!("fullstart-{handler}"), "8m") else {
            return;
        };
        let d = dir.display().to_string();
        let o = run(
            &[],
            &[
                "--budget",
                "16M",
                "--swap-size",
                "64M",
                "--handler",
                handler,
                "--writeback-dir",
                &d,
                "--",
                py,
                "-c",
                "print('ran')",
            ],
        );
        let _ = Command::new("umount").arg(&dir).status();
        let _ = std::fs::remove_dir(&dir);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(125),
            "{handler}: {:?} {err}",
            o.status
        );
        assert!(err.contains("not enough space"), "{handler}: {err}");
        assert!(!String::from_utf8_lossy(&o.stdout).contains("ran"));
    }
}

/// The swap file truncated under a running program (by anyone who can
/// open /proc/PID/fd): its written-back pages cannot be read, and the
/// program dies of SIGBUS at the first, as under the kernel's swap; it
/// does not hang or read zeros.
#[test]
fn a_truncated_swap_file_under_a_running_program_is_sigbus() {
    if !userfaultfd_works() {
        return;
    }
    for handler in ["block", "signal"] {
        let truncate = |_: &Path, pid: u32| {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(swap_file_of(pid))
                .unwrap();
            f.set_len(0).unwrap();
        };
        let Some((status, out, _)) = devfaults("truncated", handler, &truncate) else {
            return;
        };
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(libc::SIGBUS),
            "{handler}: {status:?} {out}"
        );
        assert!(!out.contains("ok"), "{handler}: {out}");
    }
}

/// Threads the program starts, under both handler modes, with most of
/// their heap evicted: the checksum is the plain run's. In signal mode a
/// thread's dynamic thread vector (which the thread library allocates with
/// calloc as it creates the thread, and which every access to uzswap's
/// thread-locals reads) was region memory: once evicted, the fault handler
/// faulted on it with SIGBUS blocked, and the kernel killed the program.
#[test]
fn program_threads_under_both_handler_modes() {
    let Some((dir, bin)) = c_program("threads", &["-O2", "-pthread"]) else {
        return;
    };
    let bin = bin.as_str();
    // 32 MiB of heap under 12 MiB, 4 threads.
    let prog = [bin, "32", "4", "20000"];
    let want = ok(
        &Command::new(bin).args(&prog[1..]).output().unwrap(),
        "plain",
    );
    for handler in ["block", "signal"] {
        let mut args = vec!["--budget", "12M", "--handler", handler, "--json", "--"];
        args.extend_from_slice(&prog);
        let out = ok(&run(&[], &args), handler);
        let (prog_out, summary) = out.trim_end().rsplit_once('\n').expect("two lines");
        assert_eq!(format!("{prog_out}\n"), want, "{handler}: output differs");
        let s: serde_json::Value = serde_json::from_str(summary).expect("summary JSON");
        let p = &s["processes"][0];
        assert!(p["evicted_chunks"].as_u64().unwrap() > 0, "{handler}: {p}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program that installs its own SIGBUS handler and blocks every signal
/// in its threads (`signals.c`), as servers do: in signal mode uzswap's
/// faults are SIGBUS, and they must stay uzswap's. Before the library kept
/// SIGBUS, redis's crash reporter took the first fault on an evicted page
/// (and a thread blocking SIGBUS was killed by its first fault).
#[test]
fn a_program_that_owns_sigbus_and_blocks_signals() {
    let Some((dir, bin)) = c_program("signals", &["-O1", "-pthread"]) else {
        return;
    };
    let bin = bin.as_str();
    for extra in [&[][..], &["--handler", "signal"][..]] {
        let mut args = vec!["--budget", "8M", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", bin, "32"]);
        let (out, s) = output_and_summary(&run(&[], &args), "signals.c");
        assert_eq!(out, "ok\n", "{extra:?}");
        let p = &s["processes"][0];
        assert!(p["evicted_chunks"].as_u64().unwrap() > 0, "{extra:?}: {p}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
