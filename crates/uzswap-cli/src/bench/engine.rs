//! `uzswap bench engine`.

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON object with the figures as the last line of stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("bench engine: not built yet")
}
