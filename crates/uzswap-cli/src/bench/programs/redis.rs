//! The redis program. redis-server holds the data and is the process under
//! each cell's memory tier; its clients run plain beside it (the driver):
//! `redis-cli --pipe` loads a generated data set, `redis-benchmark` sends
//! random GETs over every key, then BGSAVE forks the server, whose child
//! writes the dump.
//!
//! What is compared across cells is the data set's digest (`DEBUG DIGEST`,
//! which does not depend on hash-table order) as the live server holds it
//! after the fork and as the dump holds it, loaded back into a plain server
//! after the run. The dump's bytes themselves differ from run to run: its
//! header has the time and the memory used, and keys are written in
//! hash-table order, which redis seeds at random.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use super::exec::{Driven, Invocation, Running};
use super::workloads::{mix, tool, Program, Size};

/// Clients redis-benchmark opens, and requests each has in flight.
const BENCH_CLIENTS: u32 = 4;
const BENCH_PIPELINE: u32 = 16;
/// How often the driver asks whether the server is up or the save done.
const POLL: Duration = Duration::from_millis(20);
/// How long the plain server that loads the dump back may take.
const CHECK_LIMIT: Duration = Duration::from_secs(600);

pub struct Redis {
    server: PathBuf,
    cli: PathBuf,
    benchmark: PathBuf,
    dir: PathBuf,
    keys: u64,
    gets: u64,
}

/// The server's command line: a unix socket only, no saves of its own, the
/// dump and the log in `dir`, DEBUG allowed from local clients.
fn server_argv(server: &Path, dir: &Path, socket: &str, log: &str) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec![server.into()];
    for a in [
        "--port",
        "0",
        "--unixsocket",
        socket,
        "--unixsocketperm",
        "700",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dbfilename",
        "dump.rdb",
        "--enable-debug-command",
        "local",
        "--logfile",
        log,
        "--daemonize",
        "no",
        "--dir",
    ] {
        v.push(a.into());
    }
    v.push(dir.into());
    v
}

/// Key `i`, as redis-benchmark's `-r` names them (`key:` and 12 digits),
/// so that its GETs find the loaded keys.
fn key(i: u64) -> String {
    format!("key:{i:012}")
}

/// Value of key `i`: a seeded unit repeated 1 to 12 times (about 160
/// bytes on average; compressible as a cache's values often are).
fn value(i: u64) -> String {
    // A seed of its own ("redis"), so keys and other data sets differ.
    let h = mix(i ^ 0x0072_6564_6973);
    format!("{h:016x}-{i}-").repeat(1 + (h % 12) as usize)
}

pub fn program(dir: &Path, size: &Size) -> Result<Program> {
    let r = Redis {
        server: tool(&["redis-server"])?,
        cli: tool(&["redis-cli"])?,
        benchmark: tool(&["redis-benchmark"])?,
        dir: dir.to_path_buf(),
        keys: size.redis_keys,
        gets: size.redis_gets,
    };
    let inv = Invocation {
        argv: server_argv(&r.server, dir, "live.sock", "live.log"),
        cwd: dir.to_path_buf(),
        // Its standard output is a log.
        hash_stdout: false,
        ..Default::default()
    };
    Ok(Program {
        name: "redis",
        what: format!(
            "redis-server: {} keys loaded by redis-cli --pipe, {} random GETs from \
             redis-benchmark, BGSAVE (fork), the dump loaded back",
            r.keys, r.gets
        ),
        params: json!({"keys": r.keys, "gets": r.gets, "bench_clients": BENCH_CLIENTS,
            "bench_pipeline": BENCH_PIPELINE}),
        inv,
        outputs: vec![],
        scratch: [
            "dump.rdb",
            "live.sock",
            "check.sock",
            "live.log",
            "check.log",
        ]
        .iter()
        .map(|f| dir.join(f))
        .collect(),
        redis: Some(r),
    })
}

/// A `name:value` line of an INFO reply.
fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
}

/// The requests per second of redis-benchmark's last `GET:` report.
fn bench_rps(out: &str) -> Option<f64> {
    let at = out.rfind("GET: ")?;
    out[at + 5..].split_whitespace().next()?.parse().ok()
}

impl Redis {
    fn socket(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// One redis-cli command; its reply, or why it failed.
    fn cli(&self, socket: &Path, args: &[&str]) -> Result<String> {
        let o = Command::new(&self.cli)
            .arg("-s")
            .arg(socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {}", self.cli.display()))?;
        let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !o.status.success() || out.starts_with("ERR") || out.starts_with("(error)") {
            bail!(
                "redis-cli {}: {out} {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Ok(out)
    }

    /// Wait until the server on `socket` answers PING (not while it still
    /// loads a dump), it ended, or `deadline` passed.
    fn wait_ready(
        &self,
        socket: &Path,
        ended: &mut dyn FnMut() -> bool,
        deadline: Instant,
    ) -> Result<()> {
        loop {
            if ended() {
                bail!("redis-server ended before it answered");
            }
            if Instant::now() > deadline {
                bail!("redis-server did not answer in time");
            }
            if self.cli(socket, &["PING"]).is_ok_and(|r| r == "PONG") {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    }

    /// Every key through `redis-cli --pipe`, generated as it goes.
    fn load(&self, socket: &Path) -> Result<()> {
        let mut c = Command::new(&self.cli)
            .arg("-s")
            .arg(socket)
            .arg("--pipe")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("run {} --pipe", self.cli.display()))?;
        let stdin = c.stdin.take().context("redis-cli's stdin")?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, stdin);
        for i in 0..self.keys {
            let (k, v) = (key(i), value(i));
            write!(
                w,
                "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                k.len(),
                v.len()
            )
            .context("write to redis-cli --pipe")?;
        }
        drop(w);
        let o = c.wait_with_output()?;
        let out = String::from_utf8_lossy(&o.stdout);
        let want = format!("errors: 0, replies: {}", self.keys);
        if !o.status.success() || !out.contains(&want) {
            bail!(
                "redis-cli --pipe: {} {}",
                out.trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Ok(())
    }

    /// The clients' part of a cell: load, GETs, BGSAVE, the digest, then
    /// SHUTDOWN so that the server (the cell's program) ends.
    pub fn drive(&self, r: &Running) -> Result<Driven> {
        let sock = self.socket("live.sock");
        self.wait_ready(&sock, &mut || r.ended(), r.deadline())?;
        let t = Instant::now();
        self.load(&sock)?;
        let load_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let o = Command::new(&self.benchmark)
            .arg("-s")
            .arg(&sock)
            .args(["-t", "get", "-q"])
            .args(["-n", &self.gets.to_string(), "-r", &self.keys.to_string()])
            .args(["-c", &BENCH_CLIENTS.to_string()])
            .args(["-P", &BENCH_PIPELINE.to_string()])
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {}", self.benchmark.display()))?;
        let bench = String::from_utf8_lossy(&o.stdout);
        if !o.status.success() {
            bail!("redis-benchmark: {}", bench.trim());
        }
        let gets_s = t.elapsed().as_secs_f64();
        let stats = self.cli(&sock, &["INFO", "stats"])?;
        let stat = |n: &str| info_field(&stats, n).and_then(|v| v.parse::<u64>().ok());
        let t = Instant::now();
        let reply = self.cli(&sock, &["BGSAVE"])?;
        if !reply.contains("Background saving started") {
            bail!("BGSAVE: {reply}");
        }
        loop {
            if r.ended() {
                bail!("redis-server ended during BGSAVE");
            }
            if Instant::now() > r.deadline() {
                bail!("BGSAVE did not finish in time");
            }
            let p = self.cli(&sock, &["INFO", "persistence"])?;
            if info_field(&p, "rdb_bgsave_in_progress") == Some("0") {
                let st = info_field(&p, "rdb_last_bgsave_status").unwrap_or("?");
                if st != "ok" {
                    bail!("BGSAVE status {st}");
                }
                break;
            }
            std::thread::sleep(POLL);
        }
        let bgsave_s = t.elapsed().as_secs_f64();
        let dbsize = self.cli(&sock, &["DBSIZE"])?;
        let digest = self.cli(&sock, &["DEBUG", "DIGEST"])?;
        // The server closes the connection as it ends; that is no error.
        let _ = self.cli(&sock, &["SHUTDOWN", "NOSAVE"]);
        Ok(Driven {
            output: format!("dbsize {dbsize}\nlive digest {digest}\n").into_bytes(),
            info: json!({
                "load_s": load_s, "gets_s": gets_s, "get_rps": bench_rps(&bench),
                "keyspace_hits": stat("keyspace_hits"), "keyspace_misses": stat("keyspace_misses"),
                "bgsave_s": bgsave_s,
            }),
        })
    }

    /// After a cell: its dump loaded into a plain server (no memory tier,
    /// no cgroup); the key count and digest it holds.
    pub fn check_dump(&self, mask: libc::sigset_t) -> Result<Vec<u8>> {
        let dump = self.dir.join("dump.rdb");
        if !dump.is_file() {
            bail!("BGSAVE wrote no {}", dump.display());
        }
        let sock = self.socket("check.sock");
        let mut cmd = Command::new(&self.server);
        cmd.args(&server_argv(&self.server, &self.dir, "check.sock", "check.log")[1..])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        crate::kernel::child_setup(&mut cmd, None, mask)?;
        let mut child = cmd
            .spawn()
            .with_context(|| format!("start {}", self.server.display()))?;
        let r = (|| {
            let mut ended = || child.try_wait().map_or(true, |s| s.is_some());
            self.wait_ready(&sock, &mut ended, Instant::now() + CHECK_LIMIT)?;
            let dbsize = self.cli(&sock, &["DBSIZE"])?;
            let digest = self.cli(&sock, &["DEBUG", "DIGEST"])?;
            let _ = self.cli(&sock, &["SHUTDOWN", "NOSAVE"]);
            Ok(format!("dump dbsize {dbsize}\ndump digest {digest}\n").into_bytes())
        })();
        if r.is_err() {
            let _ = child.kill();
        }
        let _ = child.wait();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_redis_benchmark_and_values_are_seeded() {
        assert_eq!(key(42), "key:000000000042");
        assert_eq!(value(7), value(7));
        assert_ne!(value(7), value(8));
        let avg = (0..1000).map(|i| value(i).len()).sum::<usize>() / 1000;
        assert!((100..250).contains(&avg), "{avg}");
    }

    #[test]
    fn replies_parse() {
        let p = "# Persistence\r\nloading:0\r\nrdb_bgsave_in_progress:0\r\nrdb_last_bgsave_status:ok\r\n";
        assert_eq!(info_field(p, "rdb_bgsave_in_progress"), Some("0"));
        assert_eq!(info_field(p, "rdb_last_bgsave_status"), Some("ok"));
        assert_eq!(info_field(p, "rdb_bgsave"), None);
        let b = "GET: rps=0.0 (overall: 83.9) avg_msec=0.031\rGET: 1428571.38 requests per second, p50=0.047 msec\n";
        assert_eq!(bench_rps(b), Some(1428571.38));
        assert_eq!(bench_rps("nothing"), None);
    }

    #[test]
    fn the_server_has_a_socket_and_no_saves_of_its_own() {
        let v = server_argv(
            Path::new("/usr/bin/redis-server"),
            Path::new("/d"),
            "s",
            "l",
        );
        let at = |k: &str| {
            v[v.iter().position(|x| x == k).unwrap() + 1]
                .to_string_lossy()
                .into_owned()
        };
        assert_eq!(at("--port"), "0");
        assert_eq!(at("--save"), "");
        assert_eq!(at("--unixsocket"), "s");
        assert_eq!(at("--dir"), "/d");
    }
}
