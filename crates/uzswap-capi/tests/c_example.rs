//! Builds `examples/c/example.c` with the system C compiler against
//! libuzswap.a, runs it, and checks that it verified every byte and printed
//! the stats JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (this crate is `crates/uzswap-capi`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// libuzswap.a of this build. The test binary is
/// `<target>/<profile>/deps/<name>-<hash>`, and cargo built this crate's
/// library (all its crate types) before it, into `deps/`, and copies it up
/// to `<target>/<profile>/` on a `cargo build`, wherever the target
/// directory is. The newer of the two: a `cargo test` after a change
/// rebuilds `deps/` but leaves the copy as the last build made it.
fn staticlib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    let candidates = [
        deps.parent().map(|p| p.join("libuzswap.a")),
        Some(deps.join("libuzswap.a")),
    ];
    candidates
        .into_iter()
        .flatten()
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("libuzswap.a not found next to {}", deps.display()))
}

#[test]
fn c_example_builds_runs_and_verifies() {
    let root = repo_root();
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("uzswap-c-example");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join("example");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = Command::new(&cc)
        .arg("-O2")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("examples/c/example.c"))
        .arg(staticlib())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run the C compiler `{cc}` ({e}): install one (e.g. gcc) or set CC")
        });
    assert!(
        build.status.success(),
        "compiling examples/c/example.c failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );

    let run = Command::new(&exe).output().expect("run the C example");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the C example failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        run.status
    );
    assert!(stdout.contains("all 33554432 bytes verified"), "{stdout}");

    let json = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no stats JSON in the output:\n{stdout}"));
    let stats: serde_json::Value = serde_json::from_str(json).expect("stats line is JSON");
    assert_eq!(stats["budget_bytes"], 8u64 << 20, "{json}");
    assert_eq!(stats["young_mode"], "auto", "{json}");
    // 32 MiB through 8 MiB, then paged out: chunks were evicted, and read
    // back from the pool or the device.
    assert!(stats["evicted_chunks"].as_u64().unwrap() > 0, "{json}");
    assert!(stats["pgmajfault"].as_u64().unwrap() > 0, "{json}");
}
