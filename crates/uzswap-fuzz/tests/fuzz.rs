//! The stable-Rust fuzz driver: replays each target's corpus
//! (`fuzz/corpus/<target>/`, seeds and every input that once failed), then
//! runs mutations of it (bit flips, byte sets, inserts, deletes, splices)
//! from a seeded generator. Not coverage-guided like libFuzzer
//! (`scripts/fuzz` runs that where nightly Rust and cargo-fuzz exist), but
//! it runs the same targets on any toolchain, in CI.
//!
//! Environment: `UZSWAP_FUZZ_SECS` (per target; default: a fixed count of
//! `UZSWAP_FUZZ_ITERS` inputs, 300), `UZSWAP_FUZZ_SEED` (default 1, so a
//! plain `cargo test` is deterministic), `UZSWAP_FUZZ_TARGET` (one target
//! only). A failing input is written to `target/fuzz-failures/` and the
//! test fails naming it; put it in the corpus with the fix.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = root().join("fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

/// xorshift64*: reproducible from the seed alone.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, pool: &[Vec<u8>]) -> Vec<u8> {
    let mut v = if pool.is_empty() || rng.below(8) == 0 {
        Vec::new()
    } else {
        pool[rng.below(pool.len())].clone()
    };
    for _ in 0..1 + rng.below(4) {
        match rng.below(7) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = [0, 0xff, 0x7f, 0x80, 1][rng.below(5)] ^ (rng.next() as u8 & 1);
            }
            2 => {
                let at = rng.below(v.len() + 1);
                let n = 1 + rng.below(64);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                v.splice(at..at, bytes);
            }
            3 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = (a + 1 + rng.below(64)).min(v.len());
                v.drain(a..b);
            }
            4 if !v.is_empty() => {
                let a = rng.below(v.len());
                let b = (a + 1 + rng.below(256)).min(v.len());
                let copy = v[a..b].to_vec();
                let at = rng.below(v.len() + 1);
                v.splice(at..at, copy);
            }
            5 if !pool.is_empty() => {
                let other = &pool[rng.below(pool.len())];
                let cut = rng.below(v.len() + 1);
                let from = rng.below(other.len() + 1);
                v.truncate(cut);
                v.extend_from_slice(&other[from..]);
            }
            _ => {
                let n = rng.below(512);
                v.extend((0..n).map(|_| rng.next() as u8));
            }
        }
    }
    v.truncate(64 << 10);
    v
}

fn fail(target: &str, input: &[u8], why: String) -> ! {
    let dir = root().join("target/fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{target}-{:016x}", fxhash(input)));
    let _ = std::fs::write(&path, input);
    panic!(
        "fuzz target {target} failed on {} ({} bytes): {why}",
        path.display(),
        input.len()
    );
}

fn fxhash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn run(target: &str) {
    if std::env::var("UZSWAP_FUZZ_TARGET").is_ok_and(|t| t != target) {
        return;
    }
    let f = uzswap_fuzz::TARGETS
        .iter()
        .find(|(n, _)| *n == target)
        .expect("a target")
        .1;
    let one = |input: &[u8]| {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(input))) {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            fail(target, input, why);
        }
    };
    let pool = corpus(target);
    assert!(!pool.is_empty(), "fuzz/corpus/{target} has no seeds");
    for input in &pool {
        one(input);
    }
    let seed = env_u64("UZSWAP_FUZZ_SEED").unwrap_or(1);
    let mut rng = Rng(seed.max(1) ^ fxhash(target.as_bytes()));
    let secs = env_u64("UZSWAP_FUZZ_SECS");
    let iters = env_u64("UZSWAP_FUZZ_ITERS").unwrap_or(300);
    let t0 = Instant::now();
    let mut n = 0u64;
    loop {
        match secs {
            Some(s) if t0.elapsed() >= Duration::from_secs(s) => break,
            None if n >= iters => break,
            _ => {}
        }
        one(&mutate(&mut rng, &pool));
        n += 1;
    }
    eprintln!(
        "fuzz {target}: {} corpus inputs, {n} mutations in {:.1} s (seed {seed}), no failure",
        pool.len(),
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn decompress() {
    run("decompress");
}

#[test]
fn zpool() {
    run("zpool");
}

#[test]
fn zswap() {
    run("zswap");
}

#[test]
fn cli_parse() {
    run("cli_parse");
}

/// Writes the seed corpus (`cargo test -p uzswap-fuzz --release --
/// --ignored make_corpus`): compressed pages of every compressor, random
/// operation streams, and the strings the command line documents. Files
/// already there (inputs that once failed, libFuzzer's finds) are kept.
#[test]
#[ignore]
fn make_corpus() {
    use uzswap::{compress, Pattern, PAGE_SIZE};
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root().join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
    };
    let mut page = vec![0u8; PAGE_SIZE];
    for (ci, name) in ["lz4", "lzo", "zstd", "deflate"].iter().enumerate() {
        let c = compress::by_name(name).unwrap();
        let mut ctx = c.new_ctx();
        for (pi, p) in [
            Pattern::Text,
            Pattern::Zero,
            Pattern::Index,
            Pattern::Random,
        ]
        .iter()
        .enumerate()
        {
            p.fill(pi as u64, 7, &mut page);
            let mut z = vec![0u8; c.max_compressed_len(PAGE_SIZE).max(2 * PAGE_SIZE)];
            let n = ctx.compress(&page, &mut z).unwrap();
            let mut input = vec![(ci * 4 + pi) as u8];
            input.extend_from_slice(&z[..n]);
            put("decompress", &format!("{name}-{p}"), &input);
        }
    }
    let mut rng = Rng(0x5eed);
    for target in ["zpool", "zswap"] {
        for i in 0..8 {
            let len = 64 << (i % 6);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            put(target, &format!("random-{i}"), &bytes);
        }
    }
    for (i, s) in [
        "256M",
        "1.5G",
        "0",
        "64K",
        "4096",
        " 12 ",
        "1e30",
        "inf",
        "nan",
        "-1",
        "1T",
        "18446744073709551615",
        "16777216T",
        "0.5k",
        "3600",
        "0.001",
        "1024",
        "lz4",
        "lzo",
        "zstd",
        "zstd:3",
        "zstd:-1",
        "zstd:0",
        "deflate:9",
        "deflate:13",
        "text",
        "zero",
        "random",
        "index",
    ]
    .iter()
    .enumerate()
    {
        put("cli_parse", &format!("{i:02}"), s.as_bytes());
    }
}
