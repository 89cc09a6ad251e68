//! `uzswap bench ...`: one module per benchmark.

use clap::Subcommand;

pub mod alloc;
pub mod compare;
pub mod engine;
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
}

pub fn run(cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Engine(a) => engine::run(a),
        BenchCmd::Alloc(a) => alloc::run(a),
        BenchCmd::Shrinker(a) => shrinker::run(a),
        BenchCmd::Compare(a) => compare::run(a),
    }
}
