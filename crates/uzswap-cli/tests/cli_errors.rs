//! Bad command lines end with a clear message and a non-zero exit, never a
//! panic or an abort; errors print each cause once; swap directories that
//! cannot hold a swap file, or hold it in memory, are named as such.

use std::process::{Command, Output};

fn uzswap(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uzswap"))
        .args(args)
        .output()
        .expect("run the uzswap binary")
}

/// The command failed as a usage or runtime error does: exit status 1 or 2
/// (clap's), not 101 (a panic) or a signal (an abort), with `want` in the
/// message.
fn assert_clean_failure(args: &[&str], want: &str) {
    let out = uzswap(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    assert!(
        matches!(code, Some(1) | Some(2)),
        "{args:?}: exit {:?} (want 1 or 2)\nstderr:\n{stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    assert!(stderr.contains(want), "{args:?}: no {want:?} in:\n{stderr}");
}

#[test]
fn bench_alloc_bad_secs_and_threads() {
    assert_clean_failure(&["bench", "alloc", "--secs", "nan"], "out of range");
    assert_clean_failure(&["bench", "alloc", "--secs", "1e300"], "out of range");
    assert_clean_failure(&["bench", "alloc", "--threads", "100000"], "out of range");
    assert_clean_failure(&["bench", "alloc", "--threads", "1,0"], "out of range");
}

#[test]
fn bench_shrinker_huge_sets() {
    let max = u64::MAX.to_string();
    assert_clean_failure(&["bench", "shrinker", "--hot", &max], "out of range");
    assert_clean_failure(
        &["bench", "shrinker", "--cold-factor", &max],
        "out of range",
    );
    // Each in range, too many pages together: refused before any work.
    assert_clean_failure(
        &[
            "bench",
            "shrinker",
            "--hot",
            "16777216",
            "--cold-factor",
            "1024",
        ],
        "more than 67108864 pages",
    );
}

#[test]
fn bench_engine_huge_size() {
    assert_clean_failure(&["bench", "engine", "--size", "100T"], "out of range");
}

#[test]
fn usemem_budget_must_be_finite() {
    for budget in ["1e30", "infK", "nan"] {
        assert_clean_failure(&["usemem", "--size", "8M", "--budget", budget], "--budget");
    }
}

/// One pass is the write (fill) pass alone: it runs and verifies, with no
/// read pass to share `--ops` among (that division once panicked).
#[test]
fn usemem_one_pass_is_the_fill_alone() {
    let out = uzswap(&[
        "usemem", "--size", "8M", "--budget", "4M", "--passes", "1", "--verify", "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON object");
    assert_eq!(v["passes"], 1, "{stdout}");
    assert_eq!(v["pass_s"].as_array().map(Vec::len), Some(1), "{stdout}");
}

#[test]
fn swap_dir_on_procfs_says_why() {
    let out = uzswap(&[
        "usemem",
        "--size",
        "8M",
        "--budget",
        "4M",
        "--swap-dir",
        "/proc",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("swap directory /proc cannot hold a swap file")
            && stderr.contains("procfs"),
        "{stderr}"
    );
    assert!(!stderr.contains("No such file or directory"), "{stderr}");
}

/// A tmpfs swap directory works, but writes back into RAM: a warning says
/// so. (Checked on /dev/shm, which is tmpfs on the systems this runs on;
/// the test fails, rather than passing vacuously, where it is not.)
#[test]
fn swap_dir_on_tmpfs_warns() {
    let dir = std::path::Path::new("/dev/shm");
    assert_eq!(
        uzswap::swap::memory_backed_fs(dir),
        Some("tmpfs"),
        "/dev/shm is expected to be tmpfs here"
    );
    let out = uzswap(&[
        "usemem",
        "--size",
        "8M",
        "--budget",
        "4M",
        "--swap-dir",
        "/dev/shm",
        "--verify",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: swap directory /dev/shm is on tmpfs"),
        "{stderr}"
    );
}

#[test]
fn bench_programs_bad_arguments() {
    let p = ["bench", "programs", "--no-kernel"];
    let with =
        |extra: &[&'static str]| -> Vec<&'static str> { p.iter().chain(extra).copied().collect() };
    assert_clean_failure(
        &with(&["--only", "emacs"]),
        "python, sqlite, sort, threads, redis",
    );
    assert_clean_failure(&with(&["--budget-share", "0"]), "out of range");
    assert_clean_failure(&with(&["--budget-share", "nan"]), "out of range");
    assert_clean_failure(&with(&["--folio", "3K"]), "power of two");
    assert_clean_failure(&with(&["--compressor", "nope"]), "--compressor");
    assert_clean_failure(&with(&["--repeat", "0"]), "not in 1..=9");
    assert_clean_failure(&with(&["--repeat", "10"]), "not in 1..=9");
    assert_clean_failure(
        &["bench", "programs", "--kernel", "uzswap-lz4"],
        "not a kernel backend",
    );
}

#[test]
fn bad_writeback_targets() {
    assert_clean_failure(
        &["usemem", "--writeback", "memcached://h:1"],
        "one of file, file:DIR, redis://",
    );
    assert_clean_failure(&["usemem", "--writeback", "redis://h"], "HOST:PORT");
    assert_clean_failure(
        &["usemem", "--writeback", "redis://h:1?nope=1"],
        "unknown option",
    );
    assert_clean_failure(&["usemem", "--writeback", "file:"], "needs a directory");
    assert_clean_failure(
        &["usemem", "--writeback", "redis://h:1+redis://h:2"],
        "only a file",
    );
    assert_clean_failure(
        &["usemem", "--writeback", "file:+redis://h:1"],
        "needs a directory",
    );
    assert_clean_failure(&["usemem", "--far-size", "8M"], "--writeback");
    assert_clean_failure(
        &["usemem", "--writeback", "file", "--no-writeback"],
        "cannot be used with",
    );
    assert_clean_failure(
        &["run", "--writeback", "redis://h:x", "--", "true"],
        "no valid port",
    );
    // Nothing listens there: an error at start naming the address.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}?connect_timeout_ms=200");
    assert_clean_failure(
        &[
            "usemem",
            "--size",
            "8M",
            "--budget",
            "4M",
            "--writeback",
            &url,
        ],
        &format!("127.0.0.1:{port}: cannot connect"),
    );
}
