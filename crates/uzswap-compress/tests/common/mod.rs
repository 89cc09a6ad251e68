//! Page contents for the tests: the same kinds as the workload patterns
//! (index, zero, same, text, random, mixed), made locally.

#![allow(dead_code)]

pub const PAGE_SIZE: usize = uzswap_compress::PAGE_SIZE;

pub const PATTERNS: [&str; 6] = ["index", "zero", "same", "text", "random", "mixed"];

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const WORDS: &[&str] = &[
    "the",
    "page",
    "memory",
    "swap",
    "cache",
    "folio",
    "compressed",
    "of",
    "and",
    "pool",
    "store",
    "load",
    "entry",
    "reclaim",
    "a",
    "to",
    "is",
    "in",
    "kernel",
    "writeback",
];

pub fn page(pattern: &str, index: u64) -> Vec<u8> {
    let mut p = vec![0u8; PAGE_SIZE];
    match pattern {
        "index" => {
            for (i, w) in p.chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&(index * 512 + i as u64).to_le_bytes());
            }
        }
        "zero" => {}
        "same" => {
            let w = mix(index) | 1;
            for c in p.chunks_exact_mut(8) {
                c.copy_from_slice(&w.to_ne_bytes());
            }
        }
        "text" => {
            let mut s = mix(index);
            let mut out = Vec::with_capacity(PAGE_SIZE + 16);
            while out.len() < PAGE_SIZE {
                s = mix(s);
                out.extend_from_slice(WORDS[(s % WORDS.len() as u64) as usize].as_bytes());
                out.push(if s % 11 == 3 { b'\n' } else { b' ' });
            }
            p.copy_from_slice(&out[..PAGE_SIZE]);
        }
        "random" => {
            let mut s = mix(index ^ 0x5555);
            for c in p.chunks_exact_mut(8) {
                s = mix(s);
                c.copy_from_slice(&s.to_le_bytes());
            }
        }
        "mixed" => {
            let kinds = ["zero", "same", "text", "index", "random"];
            let k = kinds[(mix(index ^ 77) % kinds.len() as u64) as usize];
            return page(k, index);
        }
        other => panic!("unknown test pattern {other}"),
    }
    p
}

/// Every compressor the tests exercise, levels included.
pub const COMPRESSORS: [&str; 10] = [
    "lz4",
    "zstd",
    "zstd:-7",
    "zstd:-1",
    "zstd:1",
    "zstd:19",
    "lzo",
    "deflate",
    "deflate:1",
    "deflate:12",
];
