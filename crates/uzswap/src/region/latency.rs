//! A lock-free latency histogram: log-linear buckets (8 per power of two,
//! so any percentile is within 12.5%), one relaxed atomic add per sample.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const SUB: u32 = 3; // 2^3 sub-buckets per octave
const BUCKETS: usize = (64 << SUB) as usize;

pub struct Histogram {
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

/// Percentiles in microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

fn bucket_of(ns: u64) -> usize {
    if ns < (1 << SUB) {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros();
    let mant = (ns >> (log - SUB)) & ((1 << SUB) - 1);
    (((log - SUB + 1) << SUB) as u64 + mant) as usize
}

/// The upper bound of bucket `b` in nanoseconds.
fn bucket_high(b: usize) -> u64 {
    if b < (1 << SUB) {
        return b as u64;
    }
    let log = (b >> SUB) as u32 + SUB - 1;
    let mant = (b & ((1 << SUB) - 1)) as u64;
    ((1u64 << SUB) + mant + 1) << (log - SUB)
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns).min(BUCKETS - 1)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
        self.max_ns.fetch_max(ns, Relaxed);
    }

    /// How many samples there are, and their sum in nanoseconds.
    pub fn totals(&self) -> (u64, u64) {
        let count: u64 = self.buckets.iter().map(|b| b.load(Relaxed)).sum();
        (count, self.sum_ns.load(Relaxed))
    }

    /// The mean of the samples in nanoseconds, if there are any.
    pub fn mean_ns(&self) -> Option<u64> {
        let (count, sum_ns) = self.totals();
        (count > 0).then(|| sum_ns / count)
    }

    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let count: u64 = counts.iter().sum();
        if count == 0 {
            return LatencySummary::default();
        }
        let pct = |p: f64| {
            let want = ((count as f64) * p).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, &c) in counts.iter().enumerate() {
                seen += c;
                if seen >= want {
                    return bucket_high(b) as f64 / 1000.0;
                }
            }
            f64::NAN
        };
        let max = self.max_ns.load(Relaxed) as f64 / 1000.0;
        LatencySummary {
            count,
            mean: self.sum_ns.load(Relaxed) as f64 / count as f64 / 1000.0,
            p50: pct(0.50).min(max),
            p90: pct(0.90).min(max),
            p99: pct(0.99).min(max),
            p999: pct(0.999).min(max),
            max,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_samples() {
        for ns in [0u64, 1, 7, 8, 9, 15, 16, 100, 1000, 12345, 1 << 40] {
            let b = bucket_of(ns);
            assert!(bucket_high(b) >= ns, "{ns} -> {b} -> {}", bucket_high(b));
            assert!(bucket_high(b) as f64 <= ns as f64 * 1.126 + 1.0, "{ns}");
        }
    }

    #[test]
    fn percentiles_follow_the_samples() {
        let h = Histogram::default();
        for i in 1..=1000u64 {
            h.record(i * 1000);
        }
        let s = h.summary();
        assert_eq!(s.count, 1000);
        assert!((s.p50 - 500.0).abs() < 65.0, "{s:?}");
        assert!((s.p99 - 990.0).abs() < 125.0, "{s:?}");
        assert_eq!(s.max, 1000.0);
    }
}
