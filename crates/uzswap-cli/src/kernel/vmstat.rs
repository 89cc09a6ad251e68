//! Kernel counters around a run: /proc/vmstat deltas, the per-size mTHP
//! stats under /sys/kernel/mm/transparent_hugepage/hugepages-*kB/stats, and
//! the gauges (/proc/meminfo, zswap's debugfs files, zram's mm_stat) sampled
//! while the workload runs.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The /proc/vmstat counters a run reports.
pub const VMSTAT_KEYS: [&str; 8] = [
    "pswpin",
    "pswpout",
    "zswpin",
    "zswpout",
    "zswpwb",
    "pgmajfault",
    "thp_swpout",
    "thp_swpout_fallback",
];

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// Parse "key value" lines (vmstat, memory.stat) and "Key: value kB" lines
/// (meminfo; values in kB are turned into bytes). Lines that do not parse
/// are skipped.
pub fn parse_kv(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let mut w = line.split_whitespace();
        let (Some(k), Some(v)) = (w.next(), w.next()) else {
            continue;
        };
        let Ok(mut v) = v.parse::<u64>() else {
            continue;
        };
        if w.next() == Some("kB") {
            v *= 1024;
        }
        m.insert(k.trim_end_matches(':').to_string(), v);
    }
    m
}

/// The counters at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub vmstat: BTreeMap<String, u64>,
    /// "hugepages-64kB" -> { "swpout" -> n, ... }
    pub mthp: BTreeMap<String, BTreeMap<String, u64>>,
}

impl Snapshot {
    pub fn take() -> Snapshot {
        let vmstat = parse_kv(&fs::read_to_string("/proc/vmstat").unwrap_or_default());
        let mut mthp = BTreeMap::new();
        if let Ok(rd) = fs::read_dir(THP) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !name.starts_with("hugepages-") {
                    continue;
                }
                mthp.insert(name, read_dir_numbers(&e.path().join("stats")));
            }
        }
        Snapshot { vmstat, mthp }
    }

    /// What grew from `before` to `self`: the vmstat keys always (missing
    /// ones as 0), the mTHP stats where non-zero.
    pub fn delta(
        &self,
        before: &Snapshot,
    ) -> (
        BTreeMap<String, u64>,
        BTreeMap<String, BTreeMap<String, u64>>,
    ) {
        let vm = VMSTAT_KEYS
            .iter()
            .map(|k| {
                let d = self
                    .vmstat
                    .get(*k)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(before.vmstat.get(*k).copied().unwrap_or(0));
                (k.to_string(), d)
            })
            .collect();
        let mut mthp = BTreeMap::new();
        for (size, stats) in &self.mthp {
            let b = before.mthp.get(size);
            let d: BTreeMap<String, u64> = stats
                .iter()
                .filter_map(|(k, v)| {
                    let d = v.saturating_sub(b.and_then(|b| b.get(k)).copied().unwrap_or(0));
                    (d > 0).then(|| (k.clone(), d))
                })
                .collect();
            if !d.is_empty() {
                mthp.insert(size.clone(), d);
            }
        }
        (vm, mthp)
    }
}

/// Every file in `dir` whose content is one number: name -> number.
pub fn read_dir_numbers(dir: &Path) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if let Ok(s) = fs::read_to_string(e.path()) {
                if let Ok(v) = s.trim().parse::<u64>() {
                    m.insert(e.file_name().to_string_lossy().into_owned(), v);
                }
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vmstat_and_meminfo() {
        let m = parse_kv("pswpin 3\npswpout 10\nbad line\nzswpout x\n");
        assert_eq!(m.get("pswpin"), Some(&3));
        assert_eq!(m.get("pswpout"), Some(&10));
        assert!(!m.contains_key("zswpout"));
        let m = parse_kv("MemTotal:       24000 kB\nZswap:     8 kB\nHugePages_Total:   0\n");
        assert_eq!(m.get("Zswap"), Some(&8192));
        assert_eq!(m.get("HugePages_Total"), Some(&0));
    }

    #[test]
    fn delta_reports_every_key_and_nonzero_mthp() {
        let mut a = Snapshot::default();
        a.vmstat.insert("pswpout".into(), 5);
        a.mthp.insert(
            "hugepages-64kB".into(),
            [("swpout".to_string(), 1), ("zswpout".to_string(), 2)].into(),
        );
        let mut b = a.clone();
        b.vmstat.insert("pswpout".into(), 12);
        b.vmstat.insert("zswpout".into(), 7);
        b.mthp
            .get_mut("hugepages-64kB")
            .unwrap()
            .insert("zswpout".into(), 9);
        let (vm, mthp) = b.delta(&a);
        assert_eq!(vm.len(), VMSTAT_KEYS.len());
        assert_eq!(vm["pswpout"], 7);
        assert_eq!(vm["zswpout"], 7);
        assert_eq!(vm["pswpin"], 0);
        assert_eq!(mthp["hugepages-64kB"].len(), 1);
        assert_eq!(mthp["hugepages-64kB"]["zswpout"], 7);
    }
}
