//! Page content patterns for workloads, tests and benchmarks.
//!
//! Every pattern is a pure function of (pattern, page index, seed), so a
//! verifier recomputes what a page must hold without keeping a copy. All but
//! `zero` and `same` stamp the page index and seed into the page, so a page
//! returned at the wrong index or from an older pass is caught.

use crate::PAGE_SIZE;
use std::str::FromStr;
use std::sync::OnceLock;

/// The patterns of DESIGN.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// vm-scalability usemem: each 8-byte word holds its (global) index.
    Index,
    /// All zero.
    Zero,
    /// One repeated non-zero 8-byte word (same-filled, not zero).
    Same,
    /// Compressible text, about 3x with lz4.
    Text,
    /// Incompressible.
    Random,
    /// A blend: 20% zero, 5% same, 45% text, 20% index, 10% random.
    Mixed,
    /// Zeros with one word in sixteen set to a random value, as many heap
    /// pages are (structures mostly zero, arrays partly written): the zero
    /// runs are matches that overlap their own output, the case a
    /// decoder's match copy decides.
    Sparse,
}

impl Pattern {
    pub const ALL: [Pattern; 7] = [
        Pattern::Index,
        Pattern::Zero,
        Pattern::Same,
        Pattern::Text,
        Pattern::Random,
        Pattern::Mixed,
        Pattern::Sparse,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Index => "index",
            Pattern::Zero => "zero",
            Pattern::Same => "same",
            Pattern::Text => "text",
            Pattern::Random => "random",
            Pattern::Mixed => "mixed",
            Pattern::Sparse => "sparse",
        }
    }

    /// Fill `page` (exactly PAGE_SIZE bytes) with page `index` of this pattern.
    pub fn fill(self, index: u64, seed: u64, page: &mut [u8]) {
        assert_eq!(page.len(), PAGE_SIZE);
        match self {
            Pattern::Index => fill_index(index, seed, page),
            Pattern::Zero => page.fill(0),
            Pattern::Same => fill_word(page, same_word(index, seed)),
            Pattern::Text => fill_text(index, seed, page),
            Pattern::Random => fill_random(index, seed, page),
            Pattern::Mixed => match mix(index ^ seed.rotate_left(17)) % 100 {
                0..=19 => page.fill(0),
                20..=24 => fill_word(page, same_word(index, seed)),
                25..=69 => fill_text(index, seed, page),
                70..=89 => fill_index(index, seed, page),
                _ => fill_random(index, seed, page),
            },
            Pattern::Sparse => fill_sparse(index, seed, page),
        }
    }

    /// True when `page` holds exactly what `fill(index, seed)` writes.
    pub fn verify(self, index: u64, seed: u64, page: &[u8]) -> bool {
        let mut want = [0u8; PAGE_SIZE];
        self.fill(index, seed, &mut want);
        want[..] == page[..]
    }
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Pattern::ALL
            .iter()
            .copied()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let valid: Vec<_> = Pattern::ALL.iter().map(|p| p.name()).collect();
                format!("unknown pattern '{s}' (valid: {})", valid.join(", "))
            })
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// splitmix64 finaliser: a cheap, well-mixed hash of a u64.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn same_word(index: u64, seed: u64) -> u64 {
    mix(index ^ seed) | 1
}

fn fill_word(page: &mut [u8], word: u64) {
    for w in page.chunks_exact_mut(8) {
        w.copy_from_slice(&word.to_ne_bytes());
    }
}

fn stamp(page: &mut [u8], index: u64, seed: u64) {
    page[..8].copy_from_slice(&index.to_le_bytes());
    page[8..16].copy_from_slice(&seed.to_le_bytes());
}

fn fill_index(index: u64, seed: u64, page: &mut [u8]) {
    let base = index * (PAGE_SIZE as u64 / 8);
    for (i, w) in page.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&(base + i as u64).to_le_bytes());
    }
    // The seed goes in the second word only: the page stays an index page.
    page[8..16].copy_from_slice(&(base + 1 + seed).to_le_bytes());
}

fn fill_sparse(index: u64, seed: u64, page: &mut [u8]) {
    page.fill(0);
    let words = PAGE_SIZE / 8;
    let mut s = mix(index ^ seed.rotate_left(29)) | 1;
    for _ in 0..words / 16 {
        s = mix(s);
        let w = (s as usize >> 8) % words;
        page[w * 8..w * 8 + 8].copy_from_slice(&mix(s).to_le_bytes());
    }
    stamp(page, index, seed);
}

fn fill_random(index: u64, seed: u64, page: &mut [u8]) {
    let mut s = mix(index.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ seed) | 1;
    for w in page.chunks_exact_mut(8) {
        // xorshift64*
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        w.copy_from_slice(&s.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    stamp(page, index, seed);
}

const CORPUS_LEN: usize = 1 << 20;

/// A megabyte of pseudo-English, made once. Pages are slices of it at a
/// per-page offset, so text pages are cheap to make and differ from each other.
fn corpus() -> &'static [u8] {
    static CORPUS: OnceLock<Vec<u8>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        const WORDS: &[&str] = &[
            "the",
            "page",
            "memory",
            "swap",
            "zswap",
            "folio",
            "compressed",
            "of",
            "and",
            "cluster",
            "kernel",
            "slot",
            "a",
            "to",
            "in",
            "is",
            "for",
            "reclaim",
            "lru",
            "writeback",
            "pool",
            "entry",
            "that",
            "with",
            "on",
            "allocator",
            "size",
            "class",
            "fault",
            "region",
            "cold",
            "hot",
            "evict",
            "store",
            "load",
            "as",
            "be",
            "this",
            "shrinker",
            "cgroup",
            "pressure",
            "device",
            "order",
            "free",
            "list",
            "lock",
            "batch",
            "engine",
            "worker",
            "thread",
            "count",
            "stat",
            "anon",
            "file",
            "mapping",
            "userfaultfd",
            "budget",
            "resident",
            "ratio",
            "zero",
            "filled",
            "same",
            "it",
            "which",
            "from",
            "by",
            "we",
            "are",
            "not",
            "will",
            "can",
            "when",
            "there",
        ];
        let mut out = Vec::with_capacity(CORPUS_LEN + 64);
        let mut s = 0x1234_5678_9abc_def1u64;
        let mut sentence = 0;
        while out.len() < CORPUS_LEN + 64 {
            s = mix(s);
            // Skew toward the first words, as in real text.
            let r = (s % 1000) as usize;
            let w = WORDS[(r * r / 1000) * WORDS.len() / 1000];
            if sentence == 0 {
                let mut cap = w.as_bytes().to_vec();
                cap[0] = cap[0].to_ascii_uppercase();
                out.extend_from_slice(&cap);
            } else {
                out.extend_from_slice(w.as_bytes());
            }
            sentence += 1;
            if sentence > 6 + (s >> 60) as usize {
                out.extend_from_slice(if s & 0x100 != 0 { b".\n" } else { b". " });
                sentence = 0;
            } else {
                out.push(if s & 0x7000 == 0 { b',' } else { b' ' });
                if s & 0x7000 == 0 {
                    out.push(b' ');
                }
            }
            if s & 0xff_0000 == 0 {
                // A number now and then, as logs and documents have.
                out.extend_from_slice(format!("{} ", (s >> 32) % 100_000).as_bytes());
            }
        }
        out.truncate(CORPUS_LEN);
        out
    })
}

fn fill_text(index: u64, seed: u64, page: &mut [u8]) {
    let c = corpus();
    let off = (mix(index ^ seed.rotate_left(7)) as usize) % (CORPUS_LEN - PAGE_SIZE);
    page.copy_from_slice(&c[off..off + PAGE_SIZE]);
    stamp(page, index, seed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_are_deterministic_and_distinct_by_index() {
        for p in Pattern::ALL {
            let mut a = [0u8; PAGE_SIZE];
            let mut b = [0u8; PAGE_SIZE];
            p.fill(7, 1, &mut a);
            p.fill(7, 1, &mut b);
            assert_eq!(a, b, "{p}");
            assert!(p.verify(7, 1, &a), "{p}");
            if matches!(
                p,
                Pattern::Index | Pattern::Text | Pattern::Random | Pattern::Sparse
            ) {
                assert!(!p.verify(8, 1, &a), "{p} page 7 must not verify as page 8");
                assert!(!p.verify(7, 2, &a), "{p} seed 1 must not verify as seed 2");
            }
        }
    }

    #[test]
    fn zero_and_same_are_same_filled() {
        let mut a = [1u8; PAGE_SIZE];
        Pattern::Zero.fill(3, 0, &mut a);
        assert!(a.iter().all(|&b| b == 0));
        Pattern::Same.fill(3, 0, &mut a);
        assert!(a.chunks_exact(8).all(|w| w == &a[..8]));
        assert_ne!(&a[..8], &[0u8; 8]);
    }

    #[test]
    fn sparse_is_mostly_zero_words() {
        let mut a = [1u8; PAGE_SIZE];
        Pattern::Sparse.fill(5, 9, &mut a);
        let set = a
            .chunks_exact(8)
            .filter(|w| w.iter().any(|&b| b != 0))
            .count();
        assert!((8..=34).contains(&set), "{set} words set");
    }

    #[test]
    fn parse_names() {
        for p in Pattern::ALL {
            assert_eq!(p.name().parse::<Pattern>().unwrap(), p);
        }
        let e = "nope".parse::<Pattern>().unwrap_err();
        assert!(e.contains("index") && e.contains("mixed"), "{e}");
    }
}
