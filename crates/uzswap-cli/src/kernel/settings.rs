//! The saved-settings journal: every change a kernel baseline makes to the
//! machine (a sysfs or procfs value, a swap device turned on, a swap file, a
//! cgroup, a zram device, a debugfs mount) is recorded here *before* it is
//! made, in memory and in a state file, so that it can be undone in reverse
//! order when the run ends — normally, on error, on a signal, or, if the run
//! itself died, by the next run (`recover`).
//!
//! Locking: the journal lives behind one mutex (see `kernel::Shared`). A
//! change is recorded and applied under that mutex (`Journal::apply`), so a
//! restore started by the signal thread can never run between the record and
//! the change and leave the change behind.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The state file's name inside the state directory.
pub const STATE_FILE: &str = "kernel-baseline.json";

/// One recorded change, written as the action that undoes it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Undo {
    /// Write `value` back to the file `path` (a sysfs or procfs knob).
    Write { path: PathBuf, value: String },
    /// `swapoff` the swap file or block device `path`.
    Swapoff { path: PathBuf },
    /// Remove the file `path` (a swap file we created).
    RemoveFile { path: PathBuf },
    /// Kill what is left in the cgroup directory `path`, then remove it.
    RemoveCgroup { path: PathBuf },
    /// Reset zram device `dev` (frees its memory; it must be swapped off).
    ZramReset { dev: u32 },
    /// Give back a zram device we hot-added.
    ZramHotRemove { dev: u32 },
    /// Unmount a filesystem we mounted (debugfs).
    Umount { path: PathBuf },
}

impl Undo {
    /// Carry out the undo action. Idempotent where the kernel lets it be:
    /// undoing something already undone is not an error.
    pub fn run(&self) -> Result<()> {
        match self {
            Undo::Write { path, value } => {
                write_value(path, value).with_context(|| format!("restore {}", path.display()))
            }
            Undo::Swapoff { path } => {
                if !swap_is_active(path) {
                    return Ok(());
                }
                super::swap::swapoff(path)
            }
            Undo::RemoveFile { path } => match fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("remove {}", path.display()))
                }
                _ => Ok(()),
            },
            Undo::RemoveCgroup { path } => super::cgroup::remove_dir(path),
            Undo::ZramReset { dev } => {
                let p = PathBuf::from(format!("/sys/block/zram{dev}/reset"));
                if !p.exists() {
                    return Ok(());
                }
                write_value(&p, "1").with_context(|| format!("reset zram{dev}"))
            }
            Undo::ZramHotRemove { dev } => {
                if !Path::new(&format!("/sys/block/zram{dev}")).exists() {
                    return Ok(());
                }
                write_value(
                    Path::new("/sys/class/zram-control/hot_remove"),
                    &dev.to_string(),
                )
                .with_context(|| format!("hot_remove zram{dev}"))
            }
            Undo::Umount { path } => {
                let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
                // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
                let r = unsafe { libc::umount2(c.as_ptr(), 0) };
                if r != 0 {
                    let e = std::io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EINVAL) {
                        return Err(e).with_context(|| format!("umount {}", path.display()));
                    }
                }
                Ok(())
            }
        }
    }
}

/// Is `path` listed in /proc/swaps?
pub fn swap_is_active(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string("/proc/swaps") else {
        return false;
    };
    let want = path.to_string_lossy();
    text.lines()
        .skip(1)
        .any(|l| l.split_whitespace().next() == Some(&*want))
}

/// Read a knob's current setting. For multiple-choice sysfs files
/// ("always [madvise] never", "lzo-rle [lz4]") this is the bracketed choice.
pub fn read_setting(path: &Path) -> Result<String> {
    let text = fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(parse_setting(&text))
}

/// The value a knob's text stands for (see `read_setting`).
pub fn parse_setting(text: &str) -> String {
    if let (Some(a), Some(b)) = (text.find('['), text.find(']')) {
        if a < b {
            return text[a + 1..b].to_string();
        }
    }
    text.trim().to_string()
}

/// Write a value to a sysfs/procfs file (one write, as `echo v > f` does).
pub fn write_value(path: &Path, value: &str) -> Result<()> {
    // O_TRUNC as the shell's `>`: sysfs ignores it, a plain file needs it.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("open {} for writing", path.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("write '{value}' to {}", path.display()))
}

#[derive(Serialize, Deserialize)]
struct State {
    pid: u32,
    undo: Vec<Undo>,
}

/// The journal of one run.
pub struct Journal {
    state_path: PathBuf,
    undo: Vec<Undo>,
}

impl Journal {
    /// Start a journal in `dir` (created if missing). Fails if a state file is
    /// already there: call `recover` first.
    pub fn create(dir: &Path) -> Result<Journal> {
        fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let state_path = dir.join(STATE_FILE);
        if state_path.exists() {
            bail!(
                "{} exists: a kernel baseline run is in progress or was not cleaned up",
                state_path.display()
            );
        }
        let j = Journal {
            state_path,
            undo: Vec::new(),
        };
        j.persist()?;
        Ok(j)
    }

    /// Record `undo`, then make the change `apply`. The record reaches the
    /// state file before the change is attempted; if the change fails the
    /// record stays (undoing a change that did not happen is harmless).
    pub fn apply<T>(&mut self, undo: Undo, apply: impl FnOnce() -> Result<T>) -> Result<T> {
        self.undo.push(undo);
        self.persist()?;
        apply()
    }

    /// Set the knob at `path` to `value`, recording its current setting first.
    /// A knob already at `value` is left alone and not recorded.
    pub fn set(&mut self, path: &Path, value: &str) -> Result<()> {
        let old = read_setting(path)?;
        if old == value {
            return Ok(());
        }
        self.apply(
            Undo::Write {
                path: path.to_path_buf(),
                value: old,
            },
            || write_value(path, value),
        )
    }

    /// The recorded changes, oldest first.
    #[cfg(test)]
    pub fn entries(&self) -> &[Undo] {
        &self.undo
    }

    /// Undo every change, newest first; keep going past failures and return
    /// them. The state file shrinks as changes are undone and is removed when
    /// all succeeded (it stays, naming what is left, if some failed).
    pub fn restore(&mut self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut failed = Vec::new();
        while let Some(u) = self.undo.pop() {
            if let Err(e) = u.run() {
                errors.push(format!("{e:#}"));
                failed.push(u);
            }
            let _ = self.persist_with(&failed);
        }
        if failed.is_empty() {
            let _ = fs::remove_file(&self.state_path);
        } else {
            failed.reverse();
            self.undo = failed;
            let _ = self.persist();
        }
        errors
    }

    fn persist(&self) -> Result<()> {
        self.persist_with(&[])
    }

    /// Write the pending changes plus `extra` (failed undos) to the state file
    /// atomically: a crash leaves either the old or the new list.
    fn persist_with(&self, extra: &[Undo]) -> Result<()> {
        let mut undo = extra.to_vec();
        undo.extend(self.undo.iter().cloned());
        let state = State {
            pid: std::process::id(),
            undo,
        };
        let tmp = self.state_path.with_extension("tmp");
        let mut f = fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        f.write_all(&serde_json::to_vec_pretty(&state)?)?;
        f.sync_all()?;
        fs::rename(&tmp, &self.state_path)
            .with_context(|| format!("rename to {}", self.state_path.display()))
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        for e in self.restore() {
            eprintln!("uzswap: restore: {e}");
        }
    }
}

/// What `recover` found and undid.
pub struct Recovered {
    pub pid: u32,
    pub undone: usize,
    pub errors: Vec<String>,
}

/// Undo what a previous run in `dir` left behind. Fails, touching nothing, if
/// that run is still alive. Returns None if nothing was left.
pub fn recover(dir: &Path) -> Result<Option<Recovered>> {
    let state_path = dir.join(STATE_FILE);
    let text = match fs::read_to_string(&state_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("read {}", state_path.display())),
    };
    let state: State = serde_json::from_str(&text).with_context(|| {
        format!(
            "parse {} (remove it by hand if it is damaged)",
            state_path.display()
        )
    })?;
    if state.pid != std::process::id() && pid_alive(state.pid) {
        bail!(
            "another kernel baseline run (pid {}) is in progress; its state is in {}",
            state.pid,
            state_path.display()
        );
    }
    let undone = state.undo.len();
    let mut j = Journal {
        state_path,
        undo: state.undo,
    };
    let errors = j.restore();
    std::mem::forget(j);
    Ok(Some(Recovered {
        pid: state.pid,
        undone,
        errors,
    }))
}

/// Is process `pid` running (and not a zombie)?
fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(s) => s
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(false),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("uzswap-journal-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn parse_setting_picks_bracketed_choice() {
        assert_eq!(parse_setting("always [madvise] never\n"), "madvise");
        assert_eq!(parse_setting("[lzo-rle] lzo lz4 \n"), "lzo-rle");
        assert_eq!(parse_setting("N\n"), "N");
        assert_eq!(parse_setting("20"), "20");
    }

    #[test]
    fn restore_undoes_in_reverse_and_removes_state() {
        let d = tmpdir("rev");
        let knob = d.join("knob");
        fs::write(&knob, "always [madvise] never\n").unwrap();
        let made = d.join("made");
        {
            let mut j = Journal::create(&d).unwrap();
            j.set(&knob, "first").unwrap();
            j.set(&knob, "second").unwrap();
            // Same value again: not recorded.
            j.set(&knob, "second").unwrap();
            j.apply(Undo::RemoveFile { path: made.clone() }, || {
                Ok(fs::write(&made, "x")?)
            })
            .unwrap();
            assert_eq!(j.entries().len(), 3);
            assert_eq!(fs::read_to_string(&knob).unwrap(), "second");
            assert!(d.join(STATE_FILE).exists());
            let errs = j.restore();
            assert!(errs.is_empty(), "{errs:?}");
        }
        assert_eq!(fs::read_to_string(&knob).unwrap(), "madvise");
        assert!(!made.exists());
        assert!(!d.join(STATE_FILE).exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn recover_restores_after_a_dead_run() {
        let d = tmpdir("crash");
        let knob = d.join("knob");
        fs::write(&knob, "N").unwrap();
        let mut j = Journal::create(&d).unwrap();
        j.set(&knob, "Y").unwrap();
        // Simulate a crash: the journal vanishes without restoring, and its
        // state file names a pid that no longer runs.
        std::mem::forget(j);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let path = d.join(STATE_FILE);
        let mut st: State = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        st.pid = dead;
        fs::write(&path, serde_json::to_vec(&st).unwrap()).unwrap();
        assert!(
            Journal::create(&d).is_err(),
            "a stale state file must block a new journal"
        );

        let r = recover(&d).unwrap().expect("state was left");
        assert_eq!((r.pid, r.undone), (dead, 1));
        assert!(r.errors.is_empty());
        assert_eq!(fs::read_to_string(&knob).unwrap(), "N");
        assert!(recover(&d).unwrap().is_none());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn recover_refuses_while_the_owner_lives() {
        let d = tmpdir("live");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let st = State {
            pid: child.id(),
            undo: vec![],
        };
        fs::write(d.join(STATE_FILE), serde_json::to_vec(&st).unwrap()).unwrap();
        let r = recover(&d);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(r.is_err());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn failed_undo_stays_in_the_state_file() {
        let d = tmpdir("fail");
        let mut j = Journal::create(&d).unwrap();
        let missing = d.join("no-such-dir").join("knob");
        j.apply(
            Undo::Write {
                path: missing,
                value: "1".into(),
            },
            || Ok(()),
        )
        .unwrap();
        let errs = j.restore();
        assert_eq!(errs.len(), 1);
        let st: State =
            serde_json::from_str(&fs::read_to_string(d.join(STATE_FILE)).unwrap()).unwrap();
        assert_eq!(st.undo.len(), 1);
        std::mem::forget(j);
        fs::remove_dir_all(&d).unwrap();
    }
}
