//! One run of a cell's program, measured: wall time from spawn to exit;
//! CPU time, peak RSS and major faults of the whole process tree from
//! wait4(); a digest of what it printed; a time limit. The program runs in
//! its own process group, so that the time limit and the signal thread
//! (`kernel::set_child`) end the whole tree (the program under `uzswap run`
//! included), and in a memory cgroup when one is given.
//!
//! A driver (a server's clients) runs on the calling thread while the
//! program runs; its bytes are part of the output.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::kernel;

/// A program and how it is started.
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// A file on its standard input (else /dev/null).
    pub stdin: Option<PathBuf>,
    pub cwd: PathBuf,
    /// Whether its standard output is its result (hashed); a server's is
    /// its log, and is discarded.
    pub hash_stdout: bool,
}

/// A digest of some output: xxh3-128 of the bytes, and their count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    pub hash: u128,
    pub bytes: u64,
}

impl Digest {
    pub fn of(b: &[u8]) -> Digest {
        Digest {
            hash: twox_hash::XxHash3_128::oneshot(b),
            bytes: b.len() as u64,
        }
    }

    /// Everything `r` yields.
    pub fn read(mut r: impl Read) -> std::io::Result<Digest> {
        let mut h = twox_hash::XxHash3_128::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut bytes = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.write(&buf[..n]);
            bytes += n as u64;
        }
        Ok(Digest {
            hash: h.finish_128(),
            bytes,
        })
    }

    /// Several digests as one (in order).
    pub fn combine(parts: &[Digest]) -> Digest {
        let mut h = twox_hash::XxHash3_128::new();
        for p in parts {
            h.write(&p.hash.to_le_bytes());
            h.write(&p.bytes.to_le_bytes());
        }
        Digest {
            hash: h.finish_128(),
            bytes: parts.iter().map(|p| p.bytes).sum(),
        }
    }

    pub fn hex(&self) -> String {
        format!("{:032x}", self.hash)
    }
}

/// The program while it runs, as a driver sees it.
pub struct Running {
    pid: i32,
    deadline: Instant,
}

impl Running {
    /// Whether the program has ended (it is left for `run` to reap).
    pub fn ended(&self) -> bool {
        // SAFETY: siginfo_t is plain data that waitid fills.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: our own child; WNOWAIT leaves it unreaped.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: waitid filled `info` (si_pid stays 0 while it runs).
        r != 0 || unsafe { info.si_pid() } != 0
    }

    /// When the cell's time limit ends the program.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// Runs beside the program (see `run`).
pub type Driver<'a> = &'a dyn Fn(&Running) -> Result<Driven>;

/// What a driver gives back: bytes that are part of the output, and
/// figures for the report (not compared).
#[derive(Default)]
pub struct Driven {
    pub output: Vec<u8>,
    pub info: serde_json::Value,
}

/// One run's figures.
#[derive(Debug, Default)]
pub struct Finished {
    pub elapsed_s: f64,
    pub cpu_s: f64,
    /// The largest RSS of any process of the tree (wait4's ru_maxrss).
    pub maxrss_bytes: u64,
    pub major_faults: u64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Standard output, when it is the result.
    pub stdout: Option<Digest>,
    /// The driver's output and figures, or why it failed.
    pub driven: Option<std::result::Result<(Vec<u8>, serde_json::Value), String>>,
    /// The end of its standard error, for error messages.
    pub stderr_tail: String,
}

impl Finished {
    /// Exited with status 0, in time, its driver content.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !matches!(self.driven, Some(Err(_)))
    }

    /// Why the run failed, if it did.
    pub fn failure(&self) -> Option<String> {
        if self.success() {
            return None;
        }
        let mut why = if self.timed_out {
            format!("killed at the time limit after {:.0} s", self.elapsed_s)
        } else if let Some(Err(e)) = &self.driven {
            format!("driver: {e}")
        } else {
            match (self.exit_code, self.signal) {
                (Some(c), _) => format!("exited with status {c}"),
                (_, Some(s)) => format!("killed by signal {s}"),
                _ => "ended abnormally".into(),
            }
        };
        let tail: Vec<&str> = self
            .stderr_tail
            .lines()
            .filter(|l| !l.trim_start().starts_with('{'))
            .collect();
        if !tail.is_empty() {
            let last = &tail[tail.len().saturating_sub(3)..];
            why += &format!("; stderr: {}", last.join(" | "));
        }
        Some(why)
    }
}

/// Bytes of standard error kept for error messages.
const STDERR_TAIL: usize = 8 << 10;

/// Run `inv` behind `wrapper` (what comes before the program's argv:
/// `uzswap run ... --`, or nothing), inside `cg` when given, with the
/// signal mask `mask` given back, ended after `limit`. `driver` runs on
/// this thread once the program started.
pub fn run(
    inv: &Invocation,
    wrapper: &[OsString],
    cg: Option<&kernel::cgroup::Cgroup>,
    mask: libc::sigset_t,
    limit: Duration,
    driver: Option<Driver<'_>>,
) -> Result<Finished> {
    let argv: Vec<&OsString> = wrapper.iter().chain(&inv.argv).collect();
    let (prog, args) = argv.split_first().context("no program to run")?;
    let mut cmd = Command::new(prog);
    cmd.args(args).current_dir(&inv.cwd);
    for (k, v) in &inv.env {
        cmd.env(k, v);
    }
    cmd.stdin(match &inv.stdin {
        Some(p) => {
            Stdio::from(std::fs::File::open(p).with_context(|| format!("open {}", p.display()))?)
        }
        None => Stdio::null(),
    });
    cmd.stdout(if inv.hash_stdout {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stderr(Stdio::piped());
    cmd.process_group(0);
    let procs = kernel::child_setup(&mut cmd, cg, mask)?;
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("start {}", prog.to_string_lossy()))?;
    drop(procs);
    let pid = child.id() as i32;
    kernel::set_child(-pid);
    let out = child.stdout.take();
    let out_t = std::thread::spawn(move || out.map(Digest::read).transpose());
    let mut err = child.stderr.take();
    let err_t = std::thread::spawn(move || {
        let mut tail = Vec::new();
        let mut buf = [0u8; 4096];
        while let Some(Ok(n @ 1..)) = err.as_mut().map(|e| e.read(&mut buf)) {
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * STDERR_TAIL {
                tail.drain(..tail.len() - STDERR_TAIL);
            }
        }
        let from = tail.len().saturating_sub(STDERR_TAIL);
        String::from_utf8_lossy(&tail[from..]).into_owned()
    });
    let (stop, stopped) = mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        let late = matches!(
            stopped.recv_timeout(limit),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        if late {
            // SAFETY: kill() has no memory-safety preconditions.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        late
    });
    let driven = driver.map(|d| {
        let r = d(&Running {
            pid,
            deadline: t0 + limit,
        });
        if r.is_err() {
            // The program cannot finish without its driver.
            // SAFETY: as above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        r.map(|d| (d.output, d.info)).map_err(|e| format!("{e:#}"))
    });
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data the call fills.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: `pid` is our unreaped child; status and ru are valid out
        // pointers.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        break r;
    };
    let elapsed = t0.elapsed().as_secs_f64();
    let _ = stop.send(());
    let timed_out = dog.join().unwrap_or(false);
    kernel::set_child(0);
    // What the program left in its group (a daemonised helper) goes too.
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    if r != pid {
        return Err(std::io::Error::last_os_error()).context("wait4");
    }
    let stdout = out_t
        .join()
        .map_err(|_| anyhow::anyhow!("stdout reader panicked"))?
        .context("read the program's output")?;
    let stderr_tail = err_t.join().unwrap_or_default();
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Finished {
        elapsed_s: elapsed,
        cpu_s: tv(ru.ru_utime) + tv(ru.ru_stime),
        maxrss_bytes: ru.ru_maxrss as u64 * 1024,
        major_faults: ru.ru_majflt as u64,
        exit_code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        timed_out,
        stdout,
        driven,
        stderr_tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Invocation {
        Invocation {
            argv: vec!["sh".into(), "-c".into(), script.into()],
            cwd: std::env::temp_dir(),
            hash_stdout: true,
            ..Default::default()
        }
    }

    fn mask() -> libc::sigset_t {
        // SAFETY: plain data; sigemptyset initialises it.
        let mut m: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a valid sigset.
        unsafe { libc::sigemptyset(&mut m) };
        m
    }

    #[test]
    fn digests_stdout_and_reports_the_exit() {
        let limit = Duration::from_secs(30);
        let a = run(
            &sh("echo hello; echo oops >&2"),
            &[],
            None,
            mask(),
            limit,
            None,
        )
        .unwrap();
        assert!(a.success(), "{a:?}");
        assert_eq!(a.stdout, Some(Digest::of(b"hello\n")));
        assert!(a.maxrss_bytes > 0);
        let b = run(&sh("echo hello; exit 3"), &[], None, mask(), limit, None).unwrap();
        assert_eq!(b.exit_code, Some(3));
        assert_eq!(b.stdout, a.stdout, "same output, other status");
        let e = b.failure().unwrap();
        assert!(e.contains("status 3"), "{e}");
        let c = run(
            &sh("echo oops >&2; kill -9 $$"),
            &[],
            None,
            mask(),
            limit,
            None,
        )
        .unwrap();
        assert_eq!(c.signal, Some(9));
        assert!(c.failure().unwrap().contains("oops"));
    }

    #[test]
    fn the_time_limit_ends_the_whole_group() {
        let t = Instant::now();
        let r = run(
            &sh("sleep 30 & sleep 30; wait"),
            &[],
            None,
            mask(),
            Duration::from_millis(300),
            None,
        )
        .unwrap();
        assert!(r.timed_out);
        assert!(!r.success());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    }

    #[test]
    fn a_driver_runs_beside_the_program() {
        let limit = Duration::from_secs(30);
        let dir = std::env::temp_dir().join(format!("uzswap-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let flag = dir.join("go");
        let mut inv = sh(&format!(
            "while [ ! -e {0} ]; do sleep 0.01; done; echo done",
            flag.display()
        ));
        inv.cwd = dir.clone();
        let drive = |r: &Running| -> Result<Driven> {
            assert!(!r.ended());
            std::fs::write(&flag, "")?;
            while !r.ended() {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(Driven {
                output: b"driven".to_vec(),
                info: serde_json::json!({"n": 1}),
            })
        };
        let f = run(&inv, &[], None, mask(), limit, Some(&drive)).unwrap();
        assert!(f.success(), "{f:?}");
        assert_eq!(f.stdout, Some(Digest::of(b"done\n")));
        let (out, info) = f.driven.unwrap().unwrap();
        assert_eq!(
            (out.as_slice(), info["n"].as_u64()),
            (&b"driven"[..], Some(1))
        );
        // A failed driver ends the program and fails the run.
        let _ = std::fs::remove_file(&flag);
        let fail = |_: &Running| -> Result<Driven> { anyhow::bail!("no server") };
        let f = run(&inv, &[], None, mask(), limit, Some(&fail)).unwrap();
        assert!(f.failure().unwrap().contains("no server"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn digests_combine_in_order() {
        let (a, b) = (Digest::of(b"a"), Digest::of(b"bc"));
        assert_eq!(Digest::combine(&[a, b]).bytes, 3);
        assert_ne!(Digest::combine(&[a, b]), Digest::combine(&[b, a]));
        assert_eq!(Digest::read(&b"bc"[..]).unwrap(), b);
        assert_eq!(a.hex().len(), 32);
    }
}
