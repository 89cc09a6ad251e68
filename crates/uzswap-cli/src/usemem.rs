//! `uzswap usemem`: the vm-scalability usemem workload. Workers each write
//! their share of the working set (pass 1), then read it back (later passes),
//! against one backend.

use uzswap::Pattern;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// uzswap regions under a budget.
    Uzswap,
    /// The kernel's zswap in front of a swap file, in a memory cgroup.
    KernelZswap,
    /// A zram swap device, in a memory cgroup.
    Zram,
    /// A plain swap file, in a memory cgroup.
    Swapfile,
    /// Plain memory, no budget.
    None,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Uzswap => "uzswap",
            Backend::KernelZswap => "kernel-zswap",
            Backend::Zram => "zram",
            Backend::Swapfile => "swapfile",
            Backend::None => "none",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    Seq,
    Skew,
}

/// Parse a size with an optional K/M/G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mul = match c.to_ascii_lowercase() {
                'k' => 1u64 << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                't' => 1 << 40,
                _ => return Err(format!("bad size suffix in '{s}' (use K, M, G or T)")),
            };
            (&s[..i], mul)
        }
        _ => (s, 1),
    };
    let n: f64 = num.parse().map_err(|_| format!("bad size '{s}'"))?;
    if !(n >= 0.0) {
        return Err(format!("bad size '{s}'"));
    }
    Ok((n * mul as f64) as u64)
}

#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Worker threads.
    #[arg(short = 'n', long = "workers", default_value_t = 2)]
    pub workers: usize,
    /// Total working set (all workers together), e.g. 512M, 4G.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    pub size: u64,
    /// Page content pattern: index, zero, same, text, random, mixed.
    #[arg(long, default_value = "mixed")]
    pub pattern: Pattern,
    /// Passes over the working set: the first writes, the rest read.
    #[arg(long, default_value_t = 2)]
    pub passes: u32,
    /// Memory budget (resident + pool), e.g. 256M. Default: half the size.
    #[arg(long, value_parser = parse_size)]
    pub budget: Option<u64>,
    /// Compressor: lz4, zstd[:level], lzo, deflate[:level].
    #[arg(long, default_value = "lz4")]
    pub compressor: String,
    /// Folio (chunk) size, 4K..2M, a power of two.
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    pub folio: u64,
    #[arg(long, value_enum, default_value = "uzswap")]
    pub backend: Backend,
    /// Read passes' access order: `seq` reads every page in order; `skew`
    /// reads as many pages, 80% of them from a hot 20% of the working set.
    #[arg(long, value_enum, default_value = "seq")]
    pub access: Access,
    /// Check every page read against the pattern; any mismatch fails the run.
    #[arg(long)]
    pub verify: bool,
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.backend {
        Backend::KernelZswap | Backend::Zram | Backend::Swapfile => crate::kernel::run_usemem(&args),
        Backend::Uzswap | Backend::None => anyhow::bail!("usemem: not built yet"),
    }
}
