//! `--writeback redis://...` end to end, against real servers on
//! 127.0.0.1: usemem and `uzswap run` verify every page at 4x the budget
//! with most cold pages on the far tier, on one server and on a 3-master
//! cluster; a server killed or restarted empty mid-run stops the program
//! with SIGBUS and a message (never wrong data, never a clean exit).

mod common;

use common::{preload, userfaultfd_works, uzswap};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use uzswap_cli::redis_servers::{available, RedisCluster, RedisServer};

/// The command with no core dump (a SIGBUS would write the whole heap).
fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(uzswap());
    c.args(args);
    // SAFETY: setrlimit in the child before exec: no allocation, no locks.
    unsafe {
        c.pre_exec(|| {
            let r = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &r);
            Ok(())
        });
    }
    c
}

fn last_json(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{:?}\nstdout: {out}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(out.trim_end().lines().last().unwrap()).unwrap()
}

/// usemem at 4x the budget through `url`: every page verified, most cold
/// pages written to the far tier. Returns the run's remote figures (for
/// the caller's check that nothing was left on the server).
fn usemem_verifies(url: &str, what: &str) -> serde_json::Value {
    let o = cmd(&[
        "usemem",
        "--size",
        "64M",
        "--budget",
        "16M",
        "--verify",
        "--json",
        "--writeback",
        url,
    ])
    .output()
    .unwrap();
    let j = last_json(&o);
    assert_eq!(j["verify"]["mismatches"], 0, "{what}: {j}");
    assert_eq!(j["verify"]["checked_pages"], 16384, "{what}");
    let s = &j["stats"];
    assert_eq!(s["writeback_target"], what);
    assert!(
        s["remote"]["pages_out"].as_u64().unwrap() > 5_000,
        "{what}: {s}"
    );
    assert!(s["remote"]["pages_in"].as_u64().unwrap() > 0, "{what}");
    assert_eq!(s["checksum_fail"], 0);
    s["remote"].clone()
}

#[test]
fn usemem_verifies_every_page_on_one_server_and_on_a_cluster() {
    if !available() || !userfaultfd_works() {
        return;
    }
    let srv = RedisServer::start(&[]);
    let r = usemem_verifies(&srv.url(), "redis");
    assert_eq!(srv.dbsize(), 0, "values left on the server: {r}");
    let c = RedisCluster::start();
    let r = usemem_verifies(&c.url(), "redis-cluster");
    let left: u64 = c.nodes.iter().map(|n| n.dbsize()).sum();
    assert_eq!(left, 0, "values left on the cluster: {r}");
}

/// `uzswap run --json -- uzswap usemem --json`: the runner's summary and
/// usemem's own line, the last two of stdout.
fn run_summary(o: &Output, what: &str) -> (serde_json::Value, serde_json::Value) {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{what}: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut lines = out.trim_end().lines().rev();
    let summary = serde_json::from_str(lines.next().unwrap()).unwrap();
    let usemem = serde_json::from_str(lines.next().unwrap()).unwrap();
    (summary, usemem)
}

/// The process of the summary that wrote back the most (usemem, not the
/// shell or the runner's helpers).
fn busiest(summary: &serde_json::Value) -> &serde_json::Value {
    summary["processes"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|p| p["written_back_pages"].as_u64().unwrap_or(0))
        .unwrap()
}

/// `uzswap run` of usemem's plain backend (the program's own memory, not
/// uzswap's API): the runner's library holds it at a quarter of its size.
#[test]
fn uzswap_run_verifies_every_page_on_one_server_and_on_a_cluster() {
    if !available() || !userfaultfd_works() {
        return;
    }
    let lib = preload();
    let srv = RedisServer::start(&[]);
    let c = RedisCluster::start();
    for (url, kind) in [(srv.url(), "redis"), (c.url(), "redis-cluster")] {
        let o = cmd(&["run", "--budget", "16M", "--json", "--preload"])
            .arg(&lib)
            .args(["--writeback", &url, "--", uzswap()])
            .args(["usemem", "--backend", "none", "--size", "64M"])
            .args(["--verify", "--json"])
            .output()
            .unwrap();
        let (summary, usemem) = run_summary(&o, kind);
        assert_eq!(usemem["verify"]["mismatches"], 0, "{kind}: {usemem}");
        assert_eq!(usemem["verify"]["checked_pages"], 16384);
        let p = busiest(&summary);
        assert_eq!(p["writeback_target"], kind);
        assert!(
            p["remote"]["pages_out"].as_u64().unwrap() > 1000,
            "{kind}: {p}"
        );
        assert!(summary["peak_bytes"].as_u64().unwrap() <= 16 << 20);
    }
    // The library never drops its instance; it clears the server at exit.
    assert_eq!(srv.dbsize(), 0);
    assert_eq!(c.nodes.iter().map(|n| n.dbsize()).sum::<u64>(), 0);
}

/// A server that dies (or comes back empty) while usemem runs: the pages it
/// held cannot be read, and usemem dies of SIGBUS, with the library's line
/// naming the target, instead of reading zeros or finishing.
#[test]
fn a_server_lost_mid_run_stops_the_program_with_sigbus() {
    if !available() || !userfaultfd_works() {
        return;
    }
    for restart in [false, true] {
        let mut srv = RedisServer::start(&[]);
        let url = format!(
            "{}?timeout_ms=300&connect_timeout_ms=300&retries=2&backoff_ms=200",
            srv.url()
        );
        let child = cmd(&[
            "usemem",
            "--size",
            "64M",
            "--budget",
            "16M",
            "--passes",
            "400",
            "--verify",
            "--json",
            "--writeback",
            &url,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        // Long enough for the first passes to write back to the server.
        std::thread::sleep(Duration::from_millis(1000));
        if restart {
            srv.restart();
        } else {
            srv.kill();
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGBUS),
            "restart {restart}: {:?}\n{err}",
            o.status
        );
        // Killed: reads fail after their retries. Restarted: the server
        // answers without the pages ("missing"), unless a read came while
        // it was still down.
        assert!(
            err.contains("after 3 tries") || (restart && err.contains("missing")),
            "restart {restart}: {err}"
        );
        assert!(!String::from_utf8_lossy(&o.stdout).contains("\"mismatches\""));
    }
}

/// The same through `uzswap run`: the library says why, and the runner
/// (the program itself, exec'd) ends with the program's signal.
#[test]
fn uzswap_run_reports_a_lost_server_and_exits_non_zero() {
    if !available() || !userfaultfd_works() {
        return;
    }
    let lib = preload();
    let mut srv = RedisServer::start(&[]);
    let url = format!("{}?timeout_ms=300&retries=1", srv.url());
    let child = cmd(&["run", "--budget", "16M", "--preload"])
        .arg(&lib)
        .args(["--writeback", &url, "--", uzswap()])
        .args(["usemem", "--backend", "none", "--size", "64M"])
        .args(["--passes", "400", "--verify"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    srv.restart();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert_eq!(o.status.signal(), Some(libc::SIGBUS), "{err}");
    assert!(err.contains("gets SIGBUS"), "{err}");
    // Read while the server was down (retries spent) or once it was back
    // empty: either way the library's line names the target and the cause.
    assert!(err.contains("missing") || err.contains("tries"), "{err}");
    assert!(err.contains(&srv.url()["redis://".len()..]), "{err}");
}

/// `--writeback file:DIR+redis://...` (`pool → file → redis`): usemem and
/// `uzswap run` at 4x the budget verify every page with a file too small
/// for the cold pages; the file takes what it can, Redis the rest.
#[test]
fn a_file_then_redis_tier_order_verifies_every_page() {
    if !available() || !userfaultfd_works() {
        return;
    }
    let srv = RedisServer::start(&[]);
    let dir = std::env::temp_dir();
    let spec = format!("file:{}+{}", dir.display(), srv.url());
    let o = cmd(&["usemem", "--size", "64M", "--budget", "16M", "--verify"])
        .args(["--json", "--swap-size", "4M", "--far-size", "64M"])
        .args(["--writeback", &spec])
        .output()
        .unwrap();
    let j = last_json(&o);
    assert_eq!(j["verify"]["mismatches"], 0, "{j}");
    assert_eq!(j["verify"]["checked_pages"], 16384);
    let s = &j["stats"];
    assert_eq!(s["writeback_target"], "file+redis");
    let far = s["remote"]["pages_out"].as_u64().unwrap();
    let all = s["device_slots_written"].as_u64().unwrap();
    // The file (4 MiB: two clusters) is asked first but, once its clusters
    // serve other orders or are full, a run goes to Redis; how much the file
    // takes varies from run to run (350 to 6000 pages seen), so only that
    // both were written is asserted, and that the device is both tiers.
    assert!(far > 1000 && all > far, "file and Redis both used: {s}");
    assert_eq!(s["swap_capacity_pages"], 1024 + 16384, "{s}");
    assert_eq!(s["checksum_fail"], 0);
    assert_eq!(srv.dbsize(), 0, "values left on the server");

    let lib = preload();
    let o = cmd(&["run", "--budget", "16M", "--json", "--preload"])
        .arg(&lib)
        .args([
            "--writeback",
            &spec,
            "--swap-size",
            "4M",
            "--far-size",
            "64M",
        ])
        .args([
            "--",
            uzswap(),
            "usemem",
            "--backend",
            "none",
            "--size",
            "64M",
        ])
        .args(["--verify", "--json"])
        .output()
        .unwrap();
    let (summary, usemem) = run_summary(&o, "file+redis");
    assert_eq!(usemem["verify"]["mismatches"], 0, "{usemem}");
    let p = busiest(&summary);
    assert_eq!(p["writeback_target"], "file+redis", "{p}");
    assert!(p["remote"]["pages_out"].as_u64().unwrap() > 500, "{p}");
    assert_eq!(srv.dbsize(), 0);
}
