//! The programs `bench programs` runs: what each needs made once (a
//! script, generated data, a compiled binary) and how each cell starts it.
//! Every program's output depends only on its parameters, so that each
//! cell's output can be compared byte for byte with the plain run's; data
//! comes from a seeded generator, never from a clock or /dev/urandom.
//!
//! Sizes: the full run gives each program a heap of a few hundred MiB,
//! `--quick` a few tens of MiB (see `Size`).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::exec::Invocation;
use super::redis::Redis;

/// Every program, in the order they run.
pub const NAMES: [&str; 5] = ["python", "sqlite", "sort", "threads", "redis"];

/// The tests' Python heap program (builds a dict and lists, reads a skewed
/// subset, prints a digest).
const HEAP_PY: &str = include_str!("../../../tests/programs/heap.py");
/// The tests' multi-threaded C program.
const THREADS_C: &str = include_str!("../../../tests/programs/threads.c");

/// The full run's and `--quick`'s parameters of each program.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// heap.py's element count (1M: about 300 MiB of objects).
    pub python_n: u64,
    /// Rows of the sqlite table (about 200 bytes each with its indexes).
    pub sqlite_rows: u64,
    /// Bytes of input to sort.
    pub sort_bytes: u64,
    /// The C program's heap in MiB, its threads, operations per thread.
    pub threads_mib: u64,
    pub threads: u32,
    pub threads_ops: u64,
    /// Keys loaded into redis, GETs redis-benchmark sends.
    pub redis_keys: u64,
    pub redis_gets: u64,
}

impl Size {
    /// Every size times `f` (at least 1 of each unit).
    pub fn scaled(&self, f: f64) -> Size {
        let s = |v: u64| ((v as f64 * f).round() as u64).max(1);
        Size {
            python_n: s(self.python_n),
            sqlite_rows: s(self.sqlite_rows),
            sort_bytes: s(self.sort_bytes),
            threads_mib: s(self.threads_mib),
            threads: self.threads,
            threads_ops: s(self.threads_ops),
            redis_keys: s(self.redis_keys),
            redis_gets: s(self.redis_gets),
        }
    }

    /// About 300 MiB of objects for Python (the issue's ~256 MiB program),
    /// a 256 MiB heap for the C program and about as much for redis; sort
    /// and sqlite smaller: uzswap runs them 20-100 times slower than plain
    /// at half their RSS, and the whole run is to stay near ten minutes on
    /// two CPUs.
    pub const FULL: Size = Size {
        python_n: 1_000_000,
        sqlite_rows: 200_000,
        sort_bytes: 32 << 20,
        threads_mib: 256,
        threads: 4,
        threads_ops: 500_000,
        redis_keys: 1_000_000,
        redis_gets: 500_000,
    };
    /// Tens of MiB each, a few minutes in all.
    pub const QUICK: Size = Size {
        python_n: 100_000,
        sqlite_rows: 25_000,
        sort_bytes: 8 << 20,
        threads_mib: 32,
        threads: 4,
        threads_ops: 100_000,
        redis_keys: 50_000,
        redis_gets: 20_000,
    };
}

/// A program made ready to run in any cell.
pub struct Program {
    pub name: &'static str,
    /// What it does, in a line.
    pub what: String,
    pub params: Value,
    pub inv: Invocation,
    /// Files it writes that are part of its output (hashed after each run).
    pub outputs: Vec<PathBuf>,
    /// Files removed before each run, so every cell starts alike.
    pub scratch: Vec<PathBuf>,
    /// The redis program's clients.
    pub redis: Option<Redis>,
}

/// splitmix64's finaliser: the seeded generator of every data set here.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A program by name from $PATH (the distribution's, which scripts/setup
/// installs), trying each name in turn; absolute names first.
pub fn tool(names: &[&str]) -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    for n in names {
        let p = Path::new(n);
        if p.is_absolute() {
            if p.is_file() {
                return Ok(p.to_path_buf());
            }
            continue;
        }
        if let Some(c) = std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|c| c.is_file())
        {
            return Ok(c);
        }
    }
    bail!(
        "{} not found (scripts/setup installs it)",
        names.last().copied().unwrap_or("program")
    )
}

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

/// Make program `name` ready in `dir` (its own directory, created here).
pub fn prepare(name: &str, dir: &Path, size: &Size) -> Result<Program> {
    if !NAMES.contains(&name) {
        bail!("unknown program '{name}' (known: {})", NAMES.join(", "));
    }
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    match name {
        "python" => python(&dir, size),
        "sqlite" => sqlite(&dir, size),
        "sort" => sort(&dir, size),
        "threads" => threads(&dir, size),
        _ => super::redis::program(&dir, size),
    }
}

fn invocation(dir: &Path, argv: Vec<OsString>) -> Invocation {
    Invocation {
        argv,
        cwd: dir.to_path_buf(),
        hash_stdout: true,
        ..Default::default()
    }
}

/// heap.py: a large dict and lists of objects, then a skewed subset read.
fn python(dir: &Path, size: &Size) -> Result<Program> {
    // The distribution's Python: a version manager's shim is a shell script
    // that would run under the memory tier too.
    let py = tool(&["/usr/bin/python3", "python3"])?;
    let script = dir.join("heap.py");
    std::fs::write(&script, HEAP_PY)?;
    let n = size.python_n;
    Ok(Program {
        name: "python",
        what: format!("python3 heap.py {n}: a dict and lists of {n} objects, then a skewed read"),
        params: json!({"n": n, "interpreter": py}),
        inv: invocation(dir, vec![py.into(), script.into(), os(n.to_string())]),
        outputs: vec![],
        scratch: vec![],
        redis: None,
    })
}

/// The sqlite3 shell: load a table, index it, query it, all in a page cache
/// large enough for the whole database, so that the cache (the shell's
/// heap) is the memory under pressure; the database is a file on disk.
fn sqlite(dir: &Path, size: &Size) -> Result<Program> {
    let bin = tool(&["sqlite3"])?;
    let rows = size.sqlite_rows;
    let lookups = rows / 2;
    // 1 KiB of cache per row: several times the database, so every page
    // stays in the cache (allocated as used, so the bound costs nothing).
    let cache_kib = rows.max(64 << 10);
    let sql = format!(
        "PRAGMA cache_size = -{cache_kib};
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
PRAGMA mmap_size = 0;
PRAGMA temp_store = MEMORY;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, name TEXT, payload TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {rows})
INSERT INTO t SELECT x, (x * 2654435761) % 1000003, printf('name-%010d', (x * 7919) % {rows}),
  printf('%016x%016x-%d-%.*c', x * 2654435761, x * x * 40503, x, x % 97, '.') FROM c;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(k), sum(length(payload)) FROM t;
UPDATE t SET k = k + 1 WHERE id % 7 = 0;
SELECT k % 1000 AS b, count(*), sum(length(name)) FROM t GROUP BY b ORDER BY 2 DESC, 1 LIMIT 3;
WITH RECURSIVE q(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM q WHERE i < {lookups})
SELECT count(*), sum(length(t.payload)), sum(t.k) FROM q
  JOIN t ON t.name = printf('name-%010d', (i * i) % {rows});
SELECT name, k, substr(payload, 1, 24) FROM t ORDER BY name DESC LIMIT 3;
SELECT count(*), sum(k) FROM t WHERE k BETWEEN 1000 AND 200000;
"
    );
    let script = dir.join("bench.sql");
    std::fs::write(&script, sql)?;
    let db = dir.join("bench.db");
    let mut inv = invocation(dir, vec![bin.into(), db.clone().into()]);
    inv.stdin = Some(script);
    Ok(Program {
        name: "sqlite",
        what: format!(
            "sqlite3: {rows} rows loaded and indexed, {lookups} index lookups, scans, an update; \
             page cache {} MiB",
            cache_kib >> 10
        ),
        params: json!({"rows": rows, "lookups": lookups, "cache_kib": cache_kib}),
        inv,
        outputs: vec![db.clone()],
        scratch: vec![db],
        redis: None,
    })
}

/// Words of the sort input's lines.
const WORDS: [&str; 16] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa",
];

/// Lines of about 90 bytes, in random order of their first field.
pub fn write_sort_input(path: &Path, bytes: u64) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    let (mut written, mut i) = (0u64, 0u64);
    while written < bytes {
        let x = mix(i);
        let w_ = |s: u32| WORDS[((x >> s) % WORDS.len() as u64) as usize];
        let line = format!(
            "{x:016x} {} {} {:>10} {}-{}-{} {i}\n",
            w_(8),
            w_(16),
            x % 1_000_000_000,
            w_(24),
            w_(32),
            w_(40)
        );
        w.write_all(line.as_bytes())?;
        written += line.len() as u64;
        i += 1;
    }
    w.flush()?;
    Ok(())
}

/// GNU sort over generated lines, with `-S` large enough to sort them all
/// in memory (the buffer is the memory under pressure, not temp files).
fn sort(dir: &Path, size: &Size) -> Result<Program> {
    let bin = tool(&["sort"])?;
    let input = dir.join("input.txt");
    write_sort_input(&input, size.sort_bytes)?;
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let buffer = size.sort_bytes * 2;
    let mut inv = invocation(
        dir,
        vec![
            bin.into(),
            os("-S"),
            os(format!("{}K", buffer >> 10)),
            os("-T"),
            tmp.into(),
            input.into(),
        ],
    );
    // Byte order: fast, and the same on every machine.
    inv.env.push((os("LC_ALL"), os("C")));
    Ok(Program {
        name: "sort",
        what: format!(
            "GNU sort -S {} MiB over {} MiB of generated lines",
            buffer >> 20,
            size.sort_bytes >> 20
        ),
        params: json!({"input_bytes": size.sort_bytes, "buffer_bytes": buffer}),
        inv,
        outputs: vec![],
        scratch: vec![],
        redis: None,
    })
}

/// threads.c, compiled here: threads over one shared heap, skewed random
/// reads and writes, a checksum at the end.
fn threads(dir: &Path, size: &Size) -> Result<Program> {
    let cc = tool(&["cc", "gcc"])?;
    let src = dir.join("threads.c");
    std::fs::write(&src, THREADS_C)?;
    let bin = dir.join("threads");
    let out = std::process::Command::new(&cc)
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .with_context(|| format!("run {}", cc.display()))?;
    if !out.status.success() {
        bail!(
            "compiling threads.c failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (mib, t, ops) = (size.threads_mib, size.threads, size.threads_ops);
    Ok(Program {
        name: "threads",
        what: format!(
            "C, {t} threads over a {mib} MiB heap of 64 KiB blocks, {ops} skewed reads \
             (a quarter with an atomic write) each"
        ),
        params: json!({"heap_mib": mib, "threads": t, "ops_per_thread": ops}),
        inv: invocation(
            dir,
            vec![
                bin.into(),
                os(mib.to_string()),
                os(t.to_string()),
                os(ops.to_string()),
            ],
        ),
        outputs: vec![],
        scratch: vec![],
        redis: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_input_is_deterministic_and_sized() {
        let d = std::env::temp_dir().join(format!("uzswap-sortin-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (a, b) = (d.join("a"), d.join("b"));
        write_sort_input(&a, 100_000).unwrap();
        write_sort_input(&b, 100_000).unwrap();
        let (x, y) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(x, y);
        assert!(x.len() >= 100_000 && x.len() < 100_200, "{}", x.len());
        assert!(x.ends_with(b"\n"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unknown_programs_are_named() {
        let e = prepare("emacs", &std::env::temp_dir(), &Size::QUICK)
            .err()
            .unwrap();
        assert!(e.to_string().contains("python, sqlite"), "{e}");
    }

    #[test]
    fn scaling_multiplies_every_size_but_the_thread_count() {
        let h = Size::FULL.scaled(0.5);
        assert_eq!(h.python_n, Size::FULL.python_n / 2);
        assert_eq!(h.sort_bytes, Size::FULL.sort_bytes / 2);
        assert_eq!(h.threads, Size::FULL.threads);
        assert_eq!(Size::QUICK.scaled(1e-9).redis_keys, 1);
    }

    #[test]
    fn quick_is_smaller_everywhere() {
        let (f, q) = (Size::FULL, Size::QUICK);
        assert!(q.python_n < f.python_n && q.sqlite_rows < f.sqlite_rows);
        assert!(q.sort_bytes < f.sort_bytes && q.threads_mib < f.threads_mib);
        assert!(q.redis_keys < f.redis_keys && q.redis_gets < f.redis_gets);
    }
}
