//! The fuzz targets: each takes arbitrary bytes, builds inputs or whole
//! operation sequences from them (`arbitrary`), runs them against uzswap
//! and panics on any behaviour that is wrong — a crash, an out-of-bounds
//! access, or a result that differs from a simple model. Two drivers run
//! them: cargo-fuzz (libFuzzer, `fuzz/fuzz_targets/`, nightly) and a
//! stable-Rust driver (`tests/fuzz.rs`) that replays the corpus in
//! `fuzz/corpus/<target>/` and mutates it for a bounded time, so CI runs
//! them on any toolchain.
//!
//! Owns no shared state: every call builds what it tests (a pool, an
//! instance with its own swap file) and drops it, so a failing input
//! reproduces alone. No locks beyond those of the code under test.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;
use uzswap::compress::{self, CompressorId};
use uzswap::zpool::ZsPool;
use uzswap::zswap::{LoadError, StoreError};
use uzswap::{LoadMode, SwapEntry, Zswap, ZswapConfig, PAGE_SIZE};

/// A target: arbitrary bytes in, a panic on any wrong behaviour.
pub type Target = fn(&[u8]);

/// The targets by name, as the drivers and `scripts/fuzz` call them.
pub const TARGETS: &[(&str, Target)] = &[
    ("decompress", decompress),
    ("zpool", zpool),
    ("zswap", zswap),
    ("cli_parse", cli_parse),
];

// ---------------------------------------------------------------- decompress

const COMPRESSORS: &[&str] = &["lz4", "lzo", "zstd", "deflate"];
const CANARY: u8 = 0xa5;

/// Every decompressor on arbitrary input, into an exact page and into an
/// output of arbitrary length, with canaries around the output: a
/// decompressor must return an error for what it cannot decode, never
/// panic, and never write outside the slice it is given. Then a round
/// trip of the input as a page, and the compressed form with one byte
/// changed (a corrupt object as the pool could hold it).
pub fn decompress(data: &[u8]) {
    let (sel, rest) = match data.split_first() {
        Some((s, r)) => (*s, r),
        None => (0, data),
    };
    let short = (sel as usize * 37) % (2 * PAGE_SIZE + 1);
    for name in COMPRESSORS {
        let c = compress::by_name(name).expect("a built-in compressor");
        let mut ctx = c.new_ctx();
        for len in [PAGE_SIZE, short] {
            let mut buf = vec![CANARY; len + 128];
            let _ = ctx.decompress(rest, &mut buf[64..64 + len]);
            assert!(
                buf[..64]
                    .iter()
                    .chain(&buf[64 + len..])
                    .all(|&b| b == CANARY),
                "{name}: wrote outside its {len}-byte output"
            );
        }
        // Round trip.
        let mut page = vec![0u8; PAGE_SIZE];
        let n = rest.len().min(PAGE_SIZE);
        page[..n].copy_from_slice(&rest[..n]);
        let mut z = vec![0u8; c.max_compressed_len(PAGE_SIZE).max(2 * PAGE_SIZE)];
        let zl = ctx
            .compress(&page, &mut z)
            .unwrap_or_else(|e| panic!("{name}: compressing a page failed: {e}"));
        let mut back = vec![0u8; PAGE_SIZE];
        ctx.decompress(&z[..zl], &mut back)
            .unwrap_or_else(|e| panic!("{name}: round trip failed: {e}"));
        assert!(back == page, "{name}: round trip differs");
        // The same stream into the wrong length is an error, not a page.
        assert!(
            ctx.decompress(&z[..zl], &mut back[..PAGE_SIZE - 1])
                .is_err(),
            "{name}: decoded a page into one byte less"
        );
        // One changed byte: any result but a panic or a stray write.
        if zl > 0 {
            z[sel as usize % zl] ^= rest.first().copied().unwrap_or(1) | 1;
            let mut buf = vec![CANARY; PAGE_SIZE + 128];
            let _ = ctx.decompress(&z[..zl], &mut buf[64..64 + PAGE_SIZE]);
            assert!(
                buf[..64]
                    .iter()
                    .chain(&buf[64 + PAGE_SIZE..])
                    .all(|&b| b == CANARY),
                "{name}: a corrupt stream wrote outside the page"
            );
        }
    }
}

// --------------------------------------------------------------------- zpool

#[derive(Arbitrary, Debug)]
enum PoolOp {
    Store {
        len: u16,
        seed: u8,
    },
    Free {
        at: u16,
    },
    Read {
        at: u16,
    },
    /// Free an object already freed (or read it): refused, nothing changes.
    Stale {
        at: u16,
    },
    Compact,
}

fn object(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(seed | 1) ^ seed)
        .collect()
}

/// Random sequences of store, free, read, stale handles and compaction on
/// a pool, each object checked byte for byte against its copy after every
/// step that could move it; at the end everything is freed and the pool
/// must be empty.
pub fn zpool(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let pool = ZsPool::new();
    let mut live = Vec::new();
    let mut dead = Vec::new();
    let check_all = |live: &Vec<(uzswap::zpool::Handle, Vec<u8>)>| {
        for (h, want) in live {
            pool.read(*h, |got| assert!(got == &want[..], "object changed"));
        }
    };
    while let Ok(op) = PoolOp::arbitrary(&mut u) {
        match op {
            PoolOp::Store { len, seed } => {
                let len = (len as usize % PAGE_SIZE) + 1;
                let obj = object(len, seed);
                let h = pool.store(&obj).expect("a pool stores 1..=4096 bytes");
                live.push((h, obj));
            }
            PoolOp::Free { at } if !live.is_empty() => {
                let (h, _) = live.swap_remove(at as usize % live.len());
                pool.try_free(h).expect("a live handle frees");
                dead.push(h);
            }
            PoolOp::Read { at } if !live.is_empty() => {
                let (h, want) = &live[at as usize % live.len()];
                pool.read(*h, |got| assert!(got == &want[..], "object changed"));
            }
            PoolOp::Stale { at } if !dead.is_empty() => {
                let h = dead[at as usize % dead.len()];
                assert!(pool.try_read(h, |_| ()).is_err(), "read of a freed handle");
                assert!(pool.try_free(h).is_err(), "double free accepted");
            }
            PoolOp::Compact => {
                pool.compact();
                check_all(&live);
            }
            _ => {}
        }
        if live.len() > 4096 {
            break;
        }
    }
    check_all(&live);
    assert_eq!(pool.stats().objects, live.len() as u64);
    for (h, _) in live {
        pool.free(h);
    }
    pool.compact();
    let s = pool.stats();
    assert_eq!((s.objects, s.used_bytes), (0, 0), "{s:?}");
}

// --------------------------------------------------------------------- zswap

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Content {
    Zero,
    Word(u64),
    Text(u8),
    Noise(u16),
}

#[derive(Arbitrary, Debug)]
enum ZswapOp {
    Store {
        key: u8,
        order: u8,
        content: Content,
    },
    Load {
        key: u8,
        order: u8,
        keep: bool,
    },
    Invalidate {
        key: u8,
    },
    InvalidateRange {
        key: u8,
        n: u8,
    },
    Reclaim {
        kib: u16,
    },
    Shrink {
        nr: u8,
    },
    Compact,
    Writeback(bool),
}

/// Keys are 64 pages of one region: small, so operations collide.
const KEYS: u64 = 64;

fn page_of(c: Content, key: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE_SIZE];
    match c {
        Content::Zero => {}
        Content::Word(w) => {
            for ch in p.chunks_exact_mut(8) {
                ch.copy_from_slice(&w.to_le_bytes());
            }
        }
        Content::Text(s) => {
            let words = ["page ", "swap ", "cold ", "zswap ", "lz4 "];
            let mut i = 0;
            let mut at = 0;
            while at < PAGE_SIZE {
                let w = words[(i + s as usize + key as usize) % words.len()].as_bytes();
                let n = w.len().min(PAGE_SIZE - at);
                p[at..at + n].copy_from_slice(&w[..n]);
                at += n;
                i += 1;
            }
        }
        Content::Noise(s) => {
            let mut x = (s as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ key;
            for b in p.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
    }
    p
}

/// Sequences of store (pages and folios), load (exclusive and keep-copy),
/// invalidate, reclaim (writeback to an encrypted device), shrink,
/// compaction and writeback on/off against a model (a map from key to
/// page): every load returns the model's page or the model's "not stored",
/// counts agree, and at the end every page still loads and, once all are
/// invalidated, no pool object or device slot is left behind.
pub fn zswap(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(knobs) = <(u8, bool, bool)>::arbitrary(&mut u) else {
        return;
    };
    let (limit_kib, incompressible, plain_wb) = knobs;
    let z = Zswap::new(ZswapConfig {
        workers: 1,
        batch_size: 4,
        // A small limit so stores hit it and write back, or fail.
        max_pool_bytes: (limit_kib as u64 + 8) << 10,
        store_incompressible: incompressible,
        shrinker_enabled: false,
        psi_trigger: None,
        writeback_compressed: !plain_wb,
        swap_device: Some(uzswap::swap::SwapDeviceConfig {
            size_bytes: 4 << 20,
            ..Default::default()
        }),
        ..Default::default()
    })
    .expect("an instance with a 4 MiB swap file in the temporary directory");
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let key = |i: u64| SwapEntry::new(0, i);
    let mut ops = 0;
    while let Ok(op) = ZswapOp::arbitrary(&mut u) {
        ops += 1;
        if ops > 512 {
            break;
        }
        match op {
            ZswapOp::Store {
                key: k,
                order,
                content,
            } => {
                let order = order as u32 % 3;
                let n = 1u64 << order;
                let first = (k as u64 % KEYS) & !(n - 1);
                let pages: Vec<Vec<u8>> = (0..n).map(|i| page_of(content, first + i)).collect();
                match z.store_folio(key(first), order, &pages.concat()) {
                    Ok(()) => {
                        for (i, p) in pages.into_iter().enumerate() {
                            model.insert(first + i as u64, p);
                        }
                    }
                    Err(StoreError::PoolLimit)
                    | Err(StoreError::CompressPoor)
                    | Err(StoreError::AllocFail) => {
                        // A failed store leaves none of the folio stored.
                        for i in 0..n {
                            model.remove(&(first + i));
                            assert!(!z.contains(key(first + i)), "failed store left a page");
                        }
                    }
                    Err(e) => panic!("store of {first}+{n}: {e}"),
                }
            }
            ZswapOp::Load {
                key: k,
                order,
                keep,
            } => {
                let order = order as u32 % 3;
                let n = 1u64 << order;
                let first = (k as u64 % KEYS) & !(n - 1);
                let mode = if keep {
                    LoadMode::KeepCopy
                } else {
                    LoadMode::Exclusive
                };
                let mut out = vec![0u8; PAGE_SIZE << order];
                let r = z.load_folio(key(first), order, &mut out, mode);
                let missing = (first..first + n).find(|i| !model.contains_key(i));
                match (r, missing) {
                    (Ok(()), None) => {
                        for i in 0..n {
                            let got = &out[i as usize * PAGE_SIZE..][..PAGE_SIZE];
                            assert!(
                                got == &model[&(first + i)][..],
                                "page {} differs",
                                first + i
                            );
                            if !keep {
                                model.remove(&(first + i));
                            }
                        }
                    }
                    (Err(LoadError::NotFound(e)), Some(_)) => {
                        assert!(!model.contains_key(&e.index()), "{e:?} is stored");
                    }
                    (r, m) => panic!("load {first}+{n}: {r:?}, model missing {m:?}"),
                }
            }
            ZswapOp::Invalidate { key: k } => {
                let k = k as u64 % KEYS;
                assert_eq!(z.invalidate(key(k)), model.remove(&k).is_some());
            }
            ZswapOp::InvalidateRange { key: k, n } => {
                let k = k as u64 % KEYS;
                let n = n as u64 % 16;
                let want = (k..k + n).filter(|i| model.remove(i).is_some()).count();
                assert_eq!(z.invalidate_range(key(k), n), want as u64);
            }
            ZswapOp::Reclaim { kib } => {
                z.reclaim((kib as u64) << 10);
            }
            ZswapOp::Shrink { nr } => {
                z.shrink(nr as u64);
            }
            ZswapOp::Compact => {
                z.compact();
            }
            ZswapOp::Writeback(on) => z.set_writeback_enabled(on),
        }
        // `stored_pages` counts the pages in memory, `device_pages` the rest.
        let s = z.stats();
        assert_eq!(
            s.stored_pages + s.device_pages,
            model.len() as u64,
            "stored count"
        );
    }
    let mut out = vec![0u8; PAGE_SIZE];
    for (&k, want) in &model {
        z.load(key(k), &mut out, LoadMode::KeepCopy)
            .unwrap_or_else(|e| panic!("final load of {k}: {e}"));
        assert!(out == *want, "page {k} differs at the end");
    }
    assert_eq!(z.invalidate_range(key(0), KEYS), model.len() as u64);
    let s = z.stats();
    assert_eq!((s.stored_pages, s.device_pages), (0, 0), "{s:?}");
    let dev = z.swap_device().expect("a device").stats();
    assert_eq!(dev.used, 0, "device slots leaked");
    assert_eq!(s.checksum_fail + s.decompress_fail, 0);
}

// ----------------------------------------------------------------- cli_parse

/// The command line's size, duration, thread-count, compressor-name,
/// pattern-name and writeback-target parsers on arbitrary strings: no panic, and what they
/// accept is in range and survives a round trip through its printed form.
pub fn cli_parse(data: &[u8]) {
    use uzswap_cli::parse::{parse_secs, parse_size, parse_threads, MAX_SECS, MAX_THREADS};
    let s = String::from_utf8_lossy(data);
    if let Ok(n) = parse_size(&s) {
        assert_eq!(parse_size(&n.to_string()), Ok(n), "{s:?}");
        if n % 1024 == 0 && n > 0 {
            assert_eq!(parse_size(&format!("{}K", n / 1024)), Ok(n), "{s:?}");
        }
        let t = s.trim();
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            assert_eq!(t.parse::<u64>().ok(), Some(n), "{s:?}");
        }
    }
    if let Ok(v) = parse_secs(&s) {
        assert!(v.is_finite() && v > 0.0 && v <= MAX_SECS, "{s:?} -> {v}");
        let _ = std::time::Duration::from_secs_f64(v);
    }
    if let Ok(t) = parse_threads(&s) {
        assert!((1..=MAX_THREADS).contains(&t), "{s:?} -> {t}");
    }
    if let Ok(c) = compress::by_name(&s) {
        let spec = match c.level() {
            Some(l) => format!("{}:{l}", c.name()),
            None => c.name().to_string(),
        };
        let again = compress::by_name(&spec).unwrap_or_else(|e| panic!("{s:?} -> {spec}: {e}"));
        assert_eq!((again.id(), again.level()), (c.id(), c.level()), "{s:?}");
        assert!(matches!(
            c.id(),
            CompressorId::Lz4 | CompressorId::Lzo | CompressorId::Zstd | CompressorId::Deflate
        ));
    }
    if let Ok(p) = s.parse::<uzswap::Pattern>() {
        assert_eq!(p.to_string().parse::<uzswap::Pattern>(), Ok(p), "{s:?}");
    }
    // `--writeback`: also with the scheme in front, so the URL parser
    // itself sees the arbitrary part.
    for w in [s.to_string(), format!("redis://{s}")] {
        if let Ok(uzswap_cli::parse::WritebackSpec::Remote(r)) =
            uzswap_cli::parse::parse_writeback(&w)
        {
            assert!(!r.nodes.is_empty(), "{w:?}");
            assert!(r.nodes.iter().all(|(h, _)| !h.is_empty()), "{w:?}");
            assert!(r.cluster || r.nodes.len() == 1, "{w:?}");
        }
    }
}
