//! `uzswap bench programs` on its cheapest program, without the kernel
//! cells (nothing on the machine changes): the plain run, the run under
//! `uzswap run` at half its peak RSS, and the byte-identical check between
//! them, as the JSON reports them.

mod common;

use common::{preload, userfaultfd_works, uzswap};
use std::path::Path;
use std::process::Command;

fn usable() -> bool {
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipping: /usr/bin/python3 not installed (scripts/setup installs it)");
        return false;
    }
    if !userfaultfd_works() {
        return false;
    }
    preload().exists()
}

#[test]
fn python_plain_and_under_uzswap_with_identical_output() {
    if !usable() {
        return;
    }
    let o = Command::new(uzswap())
        .args([
            "bench",
            "programs",
            "--quick",
            "--only",
            "python",
            "--no-kernel",
            "--json",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}\n{out}\n{err}", o.status);
    let j: serde_json::Value =
        serde_json::from_str(out.trim_end().lines().last().unwrap()).expect("JSON last");
    assert_eq!(j["bench"], "programs");
    assert_eq!(j["failed_cells"], 0);
    assert_eq!(j["kernel_cells"].as_array().unwrap().len(), 0);
    assert!(j["targets"].as_array().unwrap().is_empty(), "no zram cell");
    let cells = j["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "{cells:?}");
    let (plain, uz) = (&cells[0], &cells[1]);
    assert_eq!(
        (plain["cell"].as_str(), uz["cell"].as_str()),
        (Some("plain"), Some("uzswap-lz4"))
    );
    assert_eq!(plain["ok"], true);
    assert_eq!(uz["ok"], true, "{uz}");
    assert_eq!(uz["identical"], true);
    assert_eq!(uz["output_digest"], plain["output_digest"]);
    assert!(plain["output_bytes"].as_u64().unwrap() > 0);
    // The budget: half the plain run's peak RSS, in whole MiB.
    let rss = plain["rss_peak_bytes"].as_u64().unwrap();
    let budget = uz["limit_bytes"].as_u64().unwrap();
    assert_eq!(j["programs"][0]["budget_bytes"].as_u64(), Some(budget));
    assert!(
        budget >= rss / 2 && budget <= rss / 2 + (1 << 20),
        "{budget} of {rss}"
    );
    // The program was really under pressure, and uzswap held the budget.
    let f = &uz["uzswap"];
    assert!(f["evicted_chunks"].as_u64().unwrap() > 0, "{f}");
    assert!(f["peak_bytes"].as_u64().unwrap() <= budget, "{f}");
    assert!(uz["major_faults"].as_u64().unwrap() >= f["pgmajfault"].as_u64().unwrap());
    let s = uz["slowdown"].as_f64().unwrap();
    assert!(
        s > 0.0
            && (s - uz["elapsed_s"].as_f64().unwrap() / plain["elapsed_s"].as_f64().unwrap()).abs()
                < 1e-9
    );
    assert_eq!(plain["peak_source"], "rusage");
    assert!(
        out.contains("| python | uzswap-lz4 |") && out.contains("| identical |"),
        "{out}"
    );
}
