//! `uzswap bench remote`: usemem with writeback to the local swap file, to
//! one Redis server and to a 3-master Redis Cluster, at a budget small
//! enough that most cold pages leave the pool for the tier under test.
//!
//! Each case is a child `uzswap usemem --verify --json --writeback ...`
//! (so every tier runs in a fresh process with nothing warm but the
//! servers), cases alternate tier by tier for `--runs` rounds, and the
//! report takes medians. The servers are started here, on 127.0.0.1 at
//! free ports, and stopped at the end (also on a panic), unless `--redis` /
//! `--cluster` name servers to use instead.
//!
//! Figures per tier: throughput and its ratio to the file tier's; fault
//! service time (faults served from the pool or the tier) and the tier's
//! own read time per stretch of slots, p50 and p99; bytes on the wire per
//! slot moved either way and, sent, per page written back (values are
//! sealed 4 KiB slots of packed compressed objects, plus a 40-byte header
//! and the key; the file tier counts its 4 KiB slots); CPU seconds per
//! GiB moved, the client's and the servers' (from /proc) apart. No locks,
//! no shared state.

use anyhow::{bail, Context};
use serde_json::{json, Value};
use std::process::Command;
use uzswap_cli::redis_servers::{available, RedisCluster, RedisServer};

#[derive(clap::Args)]
pub struct Args {
    /// Memory usemem touches per pass.
    #[arg(long, default_value = "512M", value_parser = crate::usemem::parse_size)]
    pub size: u64,
    /// Resident memory plus pool (a quarter of the size by default).
    #[arg(long, default_value = "128M", value_parser = crate::usemem::parse_size)]
    pub budget: u64,
    /// Data pattern (see usemem).
    #[arg(long, default_value = "mixed")]
    pub pattern: String,
    /// Passes over the memory per case (write, then read...).
    #[arg(long, default_value_t = 3, value_parser = super::u64_in(1, 100))]
    pub passes: u64,
    /// Rounds of the three cases (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = super::u64_in(1, 50))]
    pub runs: u64,
    /// Compressor.
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// Directory of the local swap file (usemem's default otherwise).
    #[arg(long)]
    pub swap_dir: Option<std::path::PathBuf>,
    /// Use this Redis server instead of starting one (redis://HOST:PORT).
    #[arg(long)]
    pub redis: Option<String>,
    /// Use this cluster instead of starting one (redis://H:P,H:P,...).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Print one JSON object last.
    #[arg(long)]
    pub json: bool,
}

struct Case {
    name: &'static str,
    writeback: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let need_servers = a.redis.is_none() || a.cluster.is_none();
    if need_servers && !available() {
        bail!("bench remote starts its own Redis servers: install redis-server (scripts/setup), or name them with --redis and --cluster");
    }
    let single = a.redis.is_none().then(|| RedisServer::start(&[]));
    let cluster = a.cluster.is_none().then(RedisCluster::start);
    let mut servers: Vec<&RedisServer> = single.iter().collect();
    if let Some(c) = &cluster {
        servers.extend(c.nodes.iter());
    }
    let redis_url = a
        .redis
        .clone()
        .or_else(|| single.as_ref().map(|s| s.url()))
        .expect("a server");
    let cluster_url = a
        .cluster
        .clone()
        .or_else(|| cluster.as_ref().map(|c| c.url()))
        .expect("a cluster");
    let file = match &a.swap_dir {
        Some(d) => format!("file:{}", d.display()),
        None => "file".to_string(),
    };
    let cases = [
        Case {
            name: "file",
            writeback: file,
        },
        Case {
            name: "redis",
            writeback: redis_url.clone(),
        },
        Case {
            name: "redis-cluster",
            writeback: cluster_url.clone(),
        },
    ];
    let exe = std::env::current_exe().context("the uzswap binary")?;
    let mut results: Vec<Vec<(Value, f64)>> = vec![Vec::new(); cases.len()];
    for round in 0..a.runs {
        for (i, c) in cases.iter().enumerate() {
            let cpu0: f64 = servers.iter().map(|s| s.cpu_seconds()).sum();
            let o = Command::new(&exe)
                .args(["usemem", "--json", "--verify"])
                .args(["--size", &a.size.to_string()])
                .args(["--budget", &a.budget.to_string()])
                .args(["--pattern", &a.pattern])
                .args(["--passes", &a.passes.to_string()])
                .args(["--compressor", &a.compressor])
                .args(["--writeback", &c.writeback])
                .output()
                .context("running usemem")?;
            let server_cpu = if c.name == "file" {
                0.0
            } else {
                servers.iter().map(|s| s.cpu_seconds()).sum::<f64>() - cpu0
            };
            let out = String::from_utf8_lossy(&o.stdout);
            if !o.status.success() {
                bail!(
                    "usemem --writeback {} failed ({}): {}",
                    c.writeback,
                    o.status,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            let j: Value = serde_json::from_str(out.trim_end().lines().last().unwrap_or(""))
                .context("usemem's JSON")?;
            if !a.json {
                println!(
                    "round {round} {:<14} {:>7.1} MB/s  mismatches {}",
                    c.name,
                    f(&j["throughput_mbps"]),
                    j["verify"]["mismatches"]
                );
            }
            results[i].push((j, server_cpu));
        }
    }
    let gib = (a.size * a.passes) as f64 / (1u64 << 30) as f64;
    let file_tp = median(
        results[0]
            .iter()
            .map(|(j, _)| f(&j["throughput_mbps"]))
            .collect(),
    );
    let mut tiers = serde_json::Map::new();
    for (c, rs) in cases.iter().zip(&results) {
        let m = |g: &dyn Fn(&Value) -> f64| median(rs.iter().map(|(j, _)| g(j)).collect());
        let tp = m(&|j| f(&j["throughput_mbps"]));
        let s = |j: &Value, k: &str| f(&j["stats"][k]);
        let r = |j: &Value, k: &str| f(&j["stats"]["remote"][k]);
        // Bytes on the wire: keys and values each way. A file "moves" the
        // whole slot per slot.
        let slots = |j: &Value| s(j, "device_slots_written") + s(j, "device_slots_read");
        let wire = |j: &Value| {
            if c.name == "file" {
                slots(j) * 4096.0
            } else {
                r(j, "bytes_out") + r(j, "bytes_in")
            }
        };
        // Written: what went out for each page written back (objects are
        // packed, so less than a page when they compress).
        let out = |j: &Value| {
            if c.name == "file" {
                s(j, "device_slots_written") * 4096.0
            } else {
                r(j, "bytes_out")
            }
        };
        let mismatches: u64 = rs
            .iter()
            .map(|(j, _)| j["verify"]["mismatches"].as_u64().unwrap_or(u64::MAX))
            .sum();
        let v = json!({
            "writeback": c.writeback,
            "throughput_mbps": tp,
            "ratio_to_file": if file_tp > 0.0 { tp / file_tp } else { 0.0 },
            "fault_p50_us": m(&|j| f(&j["stats"]["fault_latency_us"]["p50"])),
            "fault_p99_us": m(&|j| f(&j["stats"]["fault_latency_us"]["p99"])),
            "tier_read_p50_us": m(&|j| f(&j["stats"]["swap_read_latency_us"]["p50"])),
            "tier_read_p99_us": m(&|j| f(&j["stats"]["swap_read_latency_us"]["p99"])),
            "written_back_pages": m(&|j| s(j, "zswpwb")),
            "written_back_fraction": m(&|j| s(j, "zswpwb") / s(j, "zswpout").max(1.0)),
            "wire_bytes_per_slot": m(&|j| wire(j) / slots(j).max(1.0)),
            "wire_bytes_per_page_written_back": m(&|j| out(j) / s(j, "zswpwb").max(1.0)),
            "client_cpu_s_per_gib": m(&|j| (f(&j["user_s"]) + f(&j["sys_s"])) / gib),
            "server_cpu_s_per_gib": median(rs.iter().map(|(_, cpu)| cpu / gib).collect()),
            "mismatches": mismatches,
            "runs": rs.len(),
        });
        tiers.insert(c.name.to_string(), v);
    }
    let report = json!({
        "bench": "remote",
        "size_bytes": a.size,
        "budget_bytes": a.budget,
        "pattern": a.pattern,
        "passes": a.passes,
        "compressor": a.compressor,
        "tiers": tiers,
    });
    if a.json {
        println!("{report}");
    } else {
        println!(
            "{:<14} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "tier",
            "MB/s",
            "ratio",
            "flt p50",
            "flt p99",
            "rd p50",
            "rd p99",
            "B/page",
            "wb frac",
            "cpu/GiB",
            "srv/GiB"
        );
        for (name, t) in &tiers {
            println!(
                "{:<14} {:>9.1} {:>6.2} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>8.0} {:>8.2} {:>8.2} {:>8.2}",
                name,
                f(&t["throughput_mbps"]),
                f(&t["ratio_to_file"]),
                f(&t["fault_p50_us"]),
                f(&t["fault_p99_us"]),
                f(&t["tier_read_p50_us"]),
                f(&t["tier_read_p99_us"]),
                f(&t["wire_bytes_per_page_written_back"]),
                f(&t["written_back_fraction"]),
                f(&t["client_cpu_s_per_gib"]),
                f(&t["server_cpu_s_per_gib"]),
            );
        }
    }
    Ok(())
}
