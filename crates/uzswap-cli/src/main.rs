//! The `uzswap` command: usemem workloads against uzswap or the kernel's own
//! compressed swap, and the benchmarks of each layer.

use clap::{Parser, Subcommand};

mod bench;
mod kernel;
mod random_access;
mod usemem;

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
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Usemem(a) => usemem::run(a),
        Cmd::Bench(b) => bench::run(b),
    };
    if let Err(e) = r {
        eprintln!("uzswap: error: {e:#}");
        std::process::exit(1);
    }
}
