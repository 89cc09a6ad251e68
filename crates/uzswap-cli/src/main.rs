//! The `uzswap` command: usemem workloads against uzswap or the kernel's own
//! compressed swap, and the benchmarks of each layer.

use clap::{Parser, Subcommand};

mod bench;
mod kernel;
mod random_access;
mod run;
mod soak;
mod usemem;
mod young_arg;

#[derive(Parser)]
#[command(
    name = "uzswap",
    version,
    about = "Userspace compressed swap: workloads and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the usemem workload (vm-scalability style) against a backend.
    Usemem(usemem::Args),
    /// Benchmarks of each layer; each prints one JSON object last with --json.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Run an unmodified program with its memory under a uzswap budget.
    Run(run::Args),
    /// A long randomized run over several regions at 2-4x the budget,
    /// checking every byte against a shadow copy (fails on any mismatch).
    Soak(soak::Args),
    /// Grant a group access to /dev/userfaultfd (root, once), so its
    /// members get system calls on evicted memory served.
    Setup(run::SetupArgs),
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Usemem(a) => usemem::run(a),
        Cmd::Bench(b) => bench::run(b),
        Cmd::Run(a) => run::run(a),
        Cmd::Soak(a) => soak::run(a),
        Cmd::Setup(a) => run::setup(a),
    };
    if let Err(e) = r {
        eprintln!("uzswap: error: {e:#}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::usemem::parse_size;

    #[test]
    fn parse_size_suffixes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 2g "), Ok(2 << 30));
        assert_eq!(parse_size("16777215T"), Ok(16_777_215 << 40));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    /// Non-finite and overflowing sizes were saturated to u64::MAX, which a
    /// budget reads as "no budget".
    #[test]
    fn parse_size_rejects_non_finite_and_overflow() {
        for bad in [
            "1e30",
            "infK",
            "inf",
            "-inf",
            "NaN",
            "nanM",
            "16777216T",
            "2e7T",
            "-1",
            "1X",
            "",
        ] {
            let r = parse_size(bad);
            assert!(r.is_err(), "{bad:?} parsed as {r:?}");
        }
        assert!(parse_size("1e30").unwrap_err().contains("too large"));
        assert!(parse_size("infK").unwrap_err().contains("finite"));
    }
}
