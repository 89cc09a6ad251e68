//! The memory cgroup a kernel baseline's workload runs in: its limit is the
//! budget, so the kernel reclaims (swaps) the workload's pages exactly as
//! uzswap's budget makes it evict. cgroup v1's memory controller where it is
//! mounted, else cgroup v2 with the memory controller.
//!
//! What the limit covers differs: v2 charges zswap's compressed pool to the
//! cgroup (so it counts against the limit and shows in memory.peak), v1 does
//! not (see `kernel::zswap_pool_charged`); zram's memory is charged in
//! neither.
//!
//! The child joins the cgroup between fork and exec (see `kernel::mod`),
//! through a `cgroup.procs` fd opened here beforehand.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::settings::{write_value, Journal, Undo};

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    V1,
    V2,
}

pub struct Cgroup {
    pub dir: PathBuf,
    pub version: Version,
}

/// Find the memory controller: the v1 hierarchy's root, or a v2 mount whose
/// root offers "memory".
pub fn detect() -> Result<(PathBuf, Version)> {
    let mounts = fs::read_to_string("/proc/self/mountinfo").context("read /proc/self/mountinfo")?;
    let mut v2 = None;
    for line in mounts.lines() {
        // mountinfo: ... mount_point ... - fstype source super_options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mp = left.split_whitespace().nth(4).unwrap_or("");
        let mut r = right.split_whitespace();
        let fstype = r.next().unwrap_or("");
        let opts = r.nth(1).unwrap_or("");
        if fstype == "cgroup" && opts.split(',').any(|o| o == "memory") {
            return Ok((PathBuf::from(mp), Version::V1));
        }
        if fstype == "cgroup2" && v2.is_none() {
            let ctl =
                fs::read_to_string(Path::new(mp).join("cgroup.controllers")).unwrap_or_default();
            if ctl.split_whitespace().any(|c| c == "memory") {
                v2 = Some(PathBuf::from(mp));
            }
        }
    }
    match v2 {
        Some(p) => Ok((p, Version::V2)),
        None => bail!("no memory cgroup controller mounted (neither cgroup v1 'memory' nor cgroup2 with memory)"),
    }
}

impl Cgroup {
    /// Create `<root>/<name>` with its memory limit at `limit` bytes (swap
    /// left unlimited); without a limit the cgroup only measures.
    pub fn create(j: &mut Journal, name: &str, limit: Option<u64>) -> Result<Cgroup> {
        let (root, version) = detect()?;
        if version == Version::V2 {
            let sub = root.join("cgroup.subtree_control");
            let on = fs::read_to_string(&sub).unwrap_or_default();
            if !on.split_whitespace().any(|c| c == "memory") {
                j.apply(
                    Undo::Write {
                        path: sub.clone(),
                        value: "-memory".into(),
                    },
                    || write_value(&sub, "+memory"),
                )?;
            }
        }
        let dir = root.join(name);
        j.apply(Undo::RemoveCgroup { path: dir.clone() }, || {
            fs::create_dir(&dir).with_context(|| format!("create cgroup {}", dir.display()))
        })?;
        let cg = Cgroup { dir, version };
        match (version, limit) {
            (_, None) => {}
            (Version::V1, Some(limit)) => {
                write_value(&cg.dir.join("memory.limit_in_bytes"), &limit.to_string())?
            }
            (Version::V2, Some(limit)) => {
                write_value(&cg.dir.join("memory.max"), &limit.to_string())?;
                // memory.high stays at max: reclaim happens at the limit, as in v1.
            }
        }
        Ok(cg)
    }

    /// Keep the kernel from swapping the cgroup's anonymous memory (its
    /// page cache is still reclaimed at the limit). The setting goes with
    /// the cgroup when it is removed.
    pub fn forbid_swap(&self) -> Result<()> {
        match self.version {
            Version::V1 => write_value(&self.dir.join("memory.swappiness"), "0"),
            Version::V2 => write_value(&self.dir.join("memory.swap.max"), "0"),
        }
    }

    pub fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The file with the memory the cgroup is charged now.
    pub fn usage_file(&self) -> PathBuf {
        self.dir.join(match self.version {
            Version::V1 => "memory.usage_in_bytes",
            Version::V2 => "memory.current",
        })
    }

    /// The most memory the cgroup was charged since it was made.
    pub fn max_usage(&self) -> Option<u64> {
        let f = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        fs::read_to_string(self.dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn stat(&self) -> BTreeMap<String, u64> {
        super::vmstat::parse_kv(
            &fs::read_to_string(self.dir.join("memory.stat")).unwrap_or_default(),
        )
    }
}

/// Kill whatever still runs in the cgroup `dir`, wait for it to leave, and
/// remove the directory. A missing directory is not an error.
pub fn remove_dir(dir: &Path) -> Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        let pids: Vec<i32> = procs
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            // SAFETY: kill() has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if Instant::now() > deadline {
            bail!("processes still in cgroup {} after SIGKILL", dir.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // rmdir can briefly fail with EBUSY while the last task is exiting.
    loop {
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e).with_context(|| format!("remove cgroup {}", dir.display())),
        }
    }
}
