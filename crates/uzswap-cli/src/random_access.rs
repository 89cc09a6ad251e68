//! The pieces of `usemem --access random`: a Zipf sampler for page ranks, a
//! bijection that scatters ranks over the region, and the word versions that
//! let readers verify pages other threads are writing at the same time.
//!
//! Verification without a copy and without locks: a word's content is a pure
//! function of (page, word, version). Version 0 is the data pattern's word
//! (what the fill pass wrote); a write moves the word from version v to v+1
//! with a compare-exchange, so versions only grow and a concurrent reader
//! always sees *some* complete version. Version v >= 1 is self-describing:
//! the version in the high 32 bits, a 32-bit hash of (page, word, version) in
//! the low ones, so neither a write nor the check of a written word needs the
//! pattern, and a corrupted word passes only by a 2^-32 chance.

use rand::Rng;

/// Zipf-distributed ranks in `0..n`: rank k (0-based) with probability
/// proportional to 1/(k+1)^s. Rejection-inversion (Hörmann and Derflinger,
/// "Rejection-inversion to generate variates from monotone discrete
/// distributions", 1996): O(1) per sample and no table, so the sampler takes
/// no memory that a cgroup would charge and uzswap's budget would not.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    sc: f64,
}

impl Zipf {
    /// `n` >= 1 ranks, exponent `s` >= 0 (0: uniform).
    pub fn new(n: u64, s: f64) -> Zipf {
        assert!(n >= 1 && s >= 0.0 && s.is_finite());
        let mut z = Zipf {
            n: n as f64,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            sc: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n as f64 + 0.5);
        z.sc = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// A rank in `0..n`.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u64 {
        if self.s == 0.0 {
            return rng.gen_range(0..self.n as u64);
        }
        loop {
            let u = self.h_n + rng.gen::<f64>() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            // Accept at once where the hat is tight, else test exactly.
            if k - x <= self.sc || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64 - 1;
            }
        }
    }

    /// The probability of rank 0 (for tests and reports): 1 / H(n, s).
    pub fn p_first(&self) -> f64 {
        let h: f64 = (1..=self.n as u64).map(|k| (k as f64).powf(-self.s)).sum();
        1.0 / h
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// The integral of h from 1 to x, shifted: ((x^(1-s)) - 1) / (1 - s), or
    /// ln x at s = 1, computed without cancellation near s = 1.
    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }

    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1 + x) / x, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// A fixed bijection of `0..n`: rank -> page. Multiplying by an odd constant
/// and adding one permutes `0..2^k`; walking the cycle until the value falls
/// below `n` restricts that to `0..n`. Hot ranks land scattered over the
/// region instead of packed at its start, so they share no chunk by design.
#[derive(Clone, Copy, Debug)]
pub struct Scatter {
    n: u64,
    mask: u64,
}

impl Scatter {
    const MUL: u64 = 0x9e37_79b9_7f4a_7c15; // odd
    const ADD: u64 = 0x6a09_e667_f3bc_c909;

    pub fn new(n: u64) -> Scatter {
        assert!(n >= 1);
        Scatter {
            n,
            mask: n.next_power_of_two() - 1,
        }
    }

    pub fn map(&self, rank: u64) -> u64 {
        debug_assert!(rank < self.n);
        let mut x = rank;
        loop {
            // Each step is a permutation of 0..=mask; the walk ends within
            // fewer than 2 steps on average (n > mask / 2).
            x = x.wrapping_mul(Self::MUL).wrapping_add(Self::ADD) & self.mask;
            if x < self.n {
                return x;
            }
        }
    }
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The content of word `word` of page `page` at version `v` >= 1.
pub fn written_word(page: u64, word: u64, v: u32) -> u64 {
    debug_assert!(v >= 1);
    let h = mix(page.wrapping_mul(512).wrapping_add(word) ^ (u64::from(v) << 40)) as u32;
    (u64::from(v) << 32) | u64::from(h)
}

/// The version a word holds if it is a written version no higher than
/// `max_v`; None for anything else (the pattern's word, or corruption).
pub fn written_version(page: u64, word: u64, x: u64, max_v: u32) -> Option<u32> {
    let v = (x >> 32) as u32;
    (v >= 1 && v <= max_v && written_word(page, word, v) == x).then_some(v)
}

/// Whether `x` is a valid version of the word whose pattern content is
/// `pattern` (version 0) or any written version up to `max_v`.
pub fn word_ok(page: u64, word: u64, x: u64, pattern: u64, max_v: u32) -> bool {
    x == pattern || written_version(page, word, x, max_v).is_some()
}

/// Move the word at `w` one version up; returns the version written, or
/// Err(content) if the word held neither the pattern's word (`pattern`,
/// when known) nor a written version: corruption, which the write leaves in
/// place for the final check to report. Without a pattern (no `--verify`),
/// anything that is not a written version counts as version 0.
pub fn bump(
    w: &std::sync::atomic::AtomicU64,
    page: u64,
    word: u64,
    pattern: Option<u64>,
    max_v: u32,
) -> Result<u32, u64> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut x = w.load(Relaxed);
    loop {
        let v = match written_version(page, word, x, max_v) {
            Some(v) => v,
            None if pattern.is_none_or(|p| p == x) => 0,
            None => return Err(x),
        };
        // Relaxed: each word is verified on its own; no other memory is
        // published through it.
        match w.compare_exchange_weak(x, written_word(page, word, v + 1), Relaxed, Relaxed) {
            Ok(_) => return Ok(v + 1),
            Err(now) => x = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

    #[test]
    fn zipf_rank_frequencies_match_theory() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
        for (n, s) in [(1000u64, 0.99), (262_144, 0.99), (1000, 1.2), (1000, 0.5)] {
            let z = Zipf::new(n, s);
            let draws = 400_000;
            let mut c = [0u64; 3];
            for _ in 0..draws {
                let k = z.sample(&mut rng);
                assert!(k < n);
                if k < 3 {
                    c[k as usize] += 1;
                }
            }
            let p1 = z.p_first();
            let f1 = c[0] as f64 / draws as f64;
            assert!(
                (f1 / p1 - 1.0).abs() < 0.03,
                "n {n} s {s}: rank 1 frequency {f1:.4}, theory {p1:.4}"
            );
            // Rank 2 at 2^-s of rank 1, rank 3 at 3^-s.
            let f2 = c[1] as f64 / draws as f64;
            let f3 = c[2] as f64 / draws as f64;
            assert!(
                (f2 / (p1 * 2f64.powf(-s)) - 1.0).abs() < 0.05,
                "rank 2: {f2}"
            );
            assert!(
                (f3 / (p1 * 3f64.powf(-s)) - 1.0).abs() < 0.06,
                "rank 3: {f3}"
            );
        }
        // s = 0: uniform over every rank.
        let z = Zipf::new(10, 0.0);
        let mut c = [0u32; 10];
        for _ in 0..100_000 {
            c[z.sample(&mut rng) as usize] += 1;
        }
        assert!(c.iter().all(|&x| (9_000..11_000).contains(&x)), "{c:?}");
        // One rank: always it.
        assert_eq!(Zipf::new(1, 0.99).sample(&mut rng), 0);
    }

    #[test]
    fn scatter_is_a_bijection_that_spreads_hot_ranks() {
        for n in [1u64, 2, 3, 1000, 4096, 5000] {
            let s = Scatter::new(n);
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let p = s.map(r) as usize;
                assert!(!seen[p], "n {n}: page {p} twice");
                seen[p] = true;
            }
        }
        // The 16 hottest ranks of 1 GiB of pages fall in 16 different 64 KiB
        // chunks, not in the first one.
        let s = Scatter::new(262_144);
        let mut chunks: Vec<u64> = (0..16).map(|r| s.map(r) / 16).collect();
        chunks.sort();
        chunks.dedup();
        assert_eq!(chunks.len(), 16);
    }

    #[test]
    fn versions_decode_and_reject_corruption() {
        let pat = 0x1234_5678_9abc_def0u64;
        assert!(word_ok(7, 3, pat, pat, 10));
        for v in 1..=10 {
            let x = written_word(7, 3, v);
            assert_eq!(written_version(7, 3, x, 10), Some(v));
            assert!(word_ok(7, 3, x, pat, 10));
            // Another word's version, or a flipped bit, is not valid here.
            assert!(!word_ok(7, 4, x, pat, 10));
            assert!(!word_ok(8, 3, x, pat, 10));
            assert!(!word_ok(7, 3, x ^ 1, pat, 10));
        }
        // Above the number of writes that could have happened: invalid.
        assert!(!word_ok(7, 3, written_word(7, 3, 11), pat, 10));
        assert!(!word_ok(7, 3, 0, pat, 10));
    }

    /// Writers bump shared words while readers check them: no false
    /// mismatch, every write counted, and a corrupted word is caught both by
    /// a reader and by the final check.
    #[test]
    fn concurrent_writers_and_readers_verify_shared_words() {
        const WORDS: u64 = 64;
        const WRITES: u32 = 20_000;
        let pattern = |w: u64| mix(w ^ 0xfeed);
        let words: Vec<AtomicU64> = (0..WORDS).map(|w| AtomicU64::new(pattern(w))).collect();
        let max_v = WRITES * 2;
        let done = AtomicBool::new(false);
        let bad_reads = AtomicU64::new(0);
        let finished = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (words, finished) = (&words, &finished);
                s.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t);
                    for _ in 0..WRITES {
                        let w = rng.gen_range(0..WORDS);
                        bump(&words[w as usize], 1, w, Some(pattern(w)), max_v).unwrap();
                    }
                    finished.fetch_add(1, Relaxed);
                });
            }
            for t in 0..2u64 {
                let (words, done, bad_reads) = (&words, &done, &bad_reads);
                s.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(100 + t);
                    while !done.load(Relaxed) {
                        for _ in 0..1000 {
                            let w = rng.gen_range(0..WORDS);
                            let x = words[w as usize].load(Relaxed);
                            if !word_ok(1, w, x, pattern(w), max_v) {
                                bad_reads.fetch_add(1, Relaxed);
                            }
                        }
                    }
                });
            }
            // Let the writers finish, then stop the readers.
            while finished.load(Relaxed) < 2 {
                std::thread::yield_now();
            }
            done.store(true, Relaxed);
        });
        assert_eq!(bad_reads.load(Relaxed), 0, "no false mismatch");
        // Every write is one version step: the versions add up to the writes.
        let total: u64 = words
            .iter()
            .enumerate()
            .map(|(w, x)| written_version(1, w as u64, x.load(Relaxed), max_v).map_or(0, u64::from))
            .sum();
        assert_eq!(total, 2 * u64::from(WRITES));
        // Corrupt one word: the final check and the next write catch it.
        words[5].fetch_xor(1 << 7, Relaxed);
        let bad: Vec<u64> = (0..WORDS)
            .filter(|&w| !word_ok(1, w, words[w as usize].load(Relaxed), pattern(w), max_v))
            .collect();
        assert_eq!(bad, vec![5]);
        assert!(bump(&words[5], 1, 5, Some(pattern(5)), max_v).is_err());
        // A word whose pattern content is corrupted is caught too.
        let w = AtomicU64::new(pattern(9) ^ 1);
        assert!(!word_ok(1, 9, w.load(Relaxed), pattern(9), max_v));
        assert!(bump(&w, 1, 9, Some(pattern(9)), max_v).is_err());
    }
}
