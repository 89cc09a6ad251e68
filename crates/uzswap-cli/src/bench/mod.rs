//! `uzswap bench ...`: one module per benchmark, and the value parsers
//! their arguments share. No shared state, no locks.
//!
//! Arguments are range-checked when parsed: a value no benchmark can run
//! with (a NaN duration, a hundred thousand threads) is a clear usage
//! error at once, not a panic or an abort halfway through a run.

use clap::Subcommand;

pub mod alloc;
pub mod bars;
pub mod compare;
pub mod engine;
pub mod programs;
pub mod remote;
pub mod seeds;
pub mod shrinker;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Compressors raw vs the zswap engine, per compressor and pattern.
    Engine(engine::Args),
    /// Swap slot allocation: cluster allocator vs a global-lock baseline.
    Alloc(alloc::Args),
    /// The shrinker on vs off on a hot/cold workload.
    Shrinker(shrinker::Args),
    /// usemem against uzswap, kernel zswap, zram and disk swap side by side.
    Compare(compare::Args),
    /// Real programs plain, under `uzswap run` and under the kernel's
    /// zswap and zram at the same memory: slowdown, peak memory, output.
    Programs(programs::Args),
    /// Each seed's headline claim reproduced here, beside the seed's figure.
    Seeds(seeds::Args),
    /// Writeback to the local file vs one Redis server vs a Redis Cluster.
    Remote(remote::Args),
}

pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Engine(a) => engine::run(a),
        BenchCmd::Alloc(a) => alloc::run(a),
        BenchCmd::Shrinker(a) => shrinker::run(a),
        BenchCmd::Compare(a) => compare::run(a),
        BenchCmd::Programs(a) => programs::run(a),
        BenchCmd::Seeds(a) => seeds::run(a),
        BenchCmd::Remote(a) => remote::run(a),
    }
}

pub use uzswap_cli::parse::{parse_secs, parse_threads};

/// A count in `lo..=hi`, for `value_parser = usize_in(lo, hi)`.
pub fn usize_in(
    lo: usize,
    hi: usize,
) -> impl Fn(&str) -> Result<usize, String> + Clone + Send + Sync + 'static {
    move |s| {
        let v: usize = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a whole number"))?;
        if !(lo..=hi).contains(&v) {
            return Err(format!("{v} is out of range {lo}..={hi}"));
        }
        Ok(v)
    }
}

/// A count in `lo..=hi`, for `value_parser = u64_in(lo, hi)`.
pub fn u64_in(
    lo: u64,
    hi: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| {
        let v: u64 = s
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not a whole number"))?;
        if !(lo..=hi).contains(&v) {
            return Err(format!("{v} is out of range {lo}..={hi}"));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secs_must_be_finite_positive_and_bounded() {
        assert_eq!(parse_secs("1.5"), Ok(1.5));
        assert_eq!(parse_secs("3600"), Ok(3600.0));
        for bad in [
            "nan", "NaN", "inf", "-inf", "0", "-1", "3601", "1e300", "x", "",
        ] {
            assert!(parse_secs(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn counts_are_bounded() {
        assert_eq!(usize_in(1, 10)("10"), Ok(10));
        assert!(usize_in(1, 10)("0").is_err());
        assert!(usize_in(1, 10)("11").is_err());
        assert_eq!(u64_in(0, 100)("0"), Ok(0));
        assert!(u64_in(1, 1 << 24)("18446744073709551615").is_err());
        assert!(u64_in(1, 1 << 24)("18446744073709551616").is_err());
    }

    #[test]
    fn threads_are_bounded() {
        assert_eq!(parse_threads("1"), Ok(1));
        assert_eq!(parse_threads("1024"), Ok(1024));
        for bad in ["0", "1025", "100000", "-1", "18446744073709551616", "two"] {
            assert!(parse_threads(bad).is_err(), "{bad} accepted");
        }
    }
}
