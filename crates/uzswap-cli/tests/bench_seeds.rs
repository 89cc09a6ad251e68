//! `uzswap bench seeds` at its smoke size: every seed row runs, the JSON
//! has the shape the documentation and scripts read, and every content
//! check (verified pages, accounted slots) passed. Sizes are the hidden
//! `--smoke` ones, a few seconds on 2 cores, so the suite's time budget
//! holds; the figures themselves are too small to judge and are not.

use std::process::Command;

#[test]
fn seeds_smoke_runs_every_row_and_every_check_passes() {
    let dir = std::env::temp_dir().join(format!("uzswap-seeds-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("seeds.png");
    let t0 = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_uzswap"))
        .args(["bench", "seeds", "--smoke", "--json", "--plot"])
        .arg(&png)
        .args(["--swap-dir"])
        .arg(&dir)
        .output()
        .expect("run uzswap");
    let secs = t0.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {stderr}\n{stdout}");
    let line = stdout.lines().last().expect("output");
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON last line");
    assert_eq!(v["bench"], "seeds");
    assert_eq!(v["mode"], "smoke");
    assert_eq!(v["all_checks_passed"], true, "{line}");
    let checks = v["checks"].as_array().expect("checks");
    assert!(!checks.is_empty());
    for c in checks {
        assert_eq!(c["passed"], true, "{c}");
    }
    let seeds = v["seeds"].as_array().expect("seeds");
    let names: Vec<&str> = seeds.iter().filter_map(|s| s["seed"].as_str()).collect();
    assert_eq!(names, ["000", "001", "002", "003", "004"]);
    for s in seeds {
        for k in ["file", "topic", "claim", "ablation", "holds", "why"] {
            assert!(s[k].as_str().is_some_and(|x| !x.is_empty()), "{k}: {s}");
        }
        let figs = s["figures"].as_array().expect("figures");
        assert!(!figs.is_empty(), "{s}");
        for f in figs {
            for k in ["metric", "seed_figure", "verdict"] {
                assert!(f[k].as_str().is_some(), "{k}: {f}");
            }
            for k in ["off", "on", "ratio", "effect", "noise"] {
                assert!(f.get(k).is_some(), "{k}: {f}");
            }
        }
    }
    // The per-order counters of seed 000 saw the 64 KiB folios.
    let mthp = &seeds[0]["details"]["per_order_counters"]["folio"]["hugepages-64kB"];
    assert!(mthp["zswpout"].as_u64().unwrap_or(0) > 0, "{mthp}");
    // usemem cells ran, or were skipped with the reason.
    let cells = v["usemem_cells"].as_u64().unwrap_or(0);
    let skipped = v["skipped"].as_array().map_or(0, |s| s.len());
    assert!(cells > 0 || skipped > 0);
    for s in v["skipped"].as_array().into_iter().flatten() {
        assert!(s["reason"].as_str().is_some_and(|r| !r.is_empty()), "{s}");
    }
    let meta = std::fs::metadata(&png).expect("plot written");
    assert!(meta.len() > 1000);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("bench seeds --smoke: {secs:.1} s");
}
