//! Real Redis servers for the far tier's tests and `bench remote`: each on
//! 127.0.0.1 on a free port, in a temporary directory, with no
//! persistence, killed (SIGKILL, and also when the thread that started it
//! dies) and its directory removed on drop, panics included. A 3-master
//! cluster is made with `redis-cli --cluster create`. The tests of the
//! lower crates include this file by path (they cannot depend on this
//! crate). Owns only its child processes; no locks.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `redis-server` and `redis-cli` run; if not, the reason is
/// printed (the tests then skip).
pub fn available() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("redis-cli")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping: redis-server / redis-cli not installed (scripts/setup installs them)");
    }
    ok
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One request in the inline protocol; the reply's first line.
fn request(port: u16, line: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &format!("127.0.0.1:{port}").parse().unwrap(),
        Duration::from_millis(200),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{line}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

impl RedisServer {
    /// A server with these extra `--name value` arguments.
    pub fn start(extra: &[&str]) -> RedisServer {
        // A directory of its own: tests start servers in parallel threads
        // of one process, and a name from a free port could repeat (the
        // kernel hands a released port out again), so that one server's
        // drop removed another's directory, and a cluster node whose
        // config file was gone exited as `--cluster create` waited on it.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "uzswap-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = RedisServer {
            child: None,
            port: 0,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        // A port found free can be taken before the server binds it: try
        // a few, each from a clean directory (a cluster node's config
        // names the port it was made with).
        for _ in 0..5 {
            s.port = free_port();
            let _ = std::fs::remove_file(s.dir.join("nodes.conf"));
            if s.spawn() {
                return s;
            }
        }
        let log = std::fs::read_to_string(s.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(10)..];
        panic!(
            "redis-server did not start; its log ends:\n{}",
            tail.join("\n")
        );
    }

    fn spawn(&mut self) -> bool {
        let mut c = Command::new("redis-server");
        c.args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .args(["--loglevel", "warning"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl in the child before exec: no allocation, no locks.
        unsafe {
            c.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = c.spawn().expect("redis-server");
        self.child = Some(child);
        let t = Instant::now();
        // Generous: a loaded 2-CPU machine (a build beside the tests)
        // starts a server in well under a second, but not always.
        let pid = format!("process_id:{}\r", self.child.as_ref().map_or(0, |c| c.id()));
        while t.elapsed() < Duration::from_secs(15) {
            if request(self.port, "PING").is_some_and(|r| r.starts_with("+PONG")) {
                // The server that answered must be ours: where another
                // test's server took the port first, ours failed to bind
                // and exits, and that one answers.
                if request(self.port, "INFO server").is_some_and(|r| r.contains(&pid)) {
                    return true;
                }
                self.kill();
                return false;
            }
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    /// CPU seconds (user + system) the server has used so far, from
    /// /proc: what a benchmark adds to the client's own time.
    pub fn cpu_seconds(&self) -> f64 {
        let Some(pid) = self.child.as_ref().map(|c| c.id()) else {
            return 0.0;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return 0.0;
        };
        // Fields after the command's closing parenthesis; utime and stime
        // are the 14th and 15th of the whole line.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11..13).map_or(0.0, |t| {
            t.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
        });
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        ticks / hz
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// SIGKILL: the server's data is gone, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again, empty, on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(self.dir.join("nodes.conf"));
        assert!(
            self.spawn(),
            "redis-server did not restart on {}",
            self.port
        );
    }

    /// `redis-cli -p PORT ARGS...`, its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let o = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    /// `redis-cli` reading a binary value raw (`--no-raw` would escape it).
    pub fn get_raw(&self, key: &str) -> Vec<u8> {
        let o = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "--raw", "GET", key])
            .output()
            .expect("redis-cli");
        o.stdout
    }

    pub fn dbsize(&self) -> u64 {
        self.cli(&["DBSIZE"]).parse().unwrap_or(0)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters, no replicas, slots spread by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| n.addr()).collect();
        // Bounded: `--cluster create` waits for ever on a node that died.
        let mut create = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli --cluster create");
        let t = Instant::now();
        let status = loop {
            if let Some(st) = create.try_wait().expect("wait for redis-cli") {
                break Some(st);
            }
            if t.elapsed() > Duration::from_secs(60) {
                let _ = create.kill();
                let _ = create.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        if let Some(mut o) = create.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        assert!(
            status.is_some_and(|s| s.success()),
            "cluster create ({status:?}, 60 s at most): {out}"
        );
        let t = Instant::now();
        while !nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "cluster never became ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisCluster { nodes }
    }

    pub fn url(&self) -> String {
        let a: Vec<String> = self.nodes.iter().map(|n| n.addr()).collect();
        format!("redis://{}", a.join(","))
    }
}
