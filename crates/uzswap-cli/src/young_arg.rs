//! `--sample-young[=MODE]`, the one option of every command that runs an
//! instance (`run`, `usemem`, `soak`, `bench programs`' uzswap cells).

/// The accessed-bit sampler's mode (`Config::sample_young`).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct SampleYoungArg {
    /// Read the kernel's accessed bits of resident memory
    /// (`/proc/self/smaps`, paced by the eviction CLOCK), so that memory
    /// read often without faulting is kept. Pays where a read-mostly hot
    /// set sits apart from data streamed through; costs milliseconds a
    /// sample, more with more resident memory (docs/BENCHMARKS.md,
    /// "Accessed bits from smaps"). While it samples, half of the sampled
    /// memory is marked `MADV_DONTDUMP` (it splits the mappings), so a core
    /// dump then leaves it out. `--sample-young` alone is `on`;
    /// `--sample-young=auto` samples in trials and goes on only while the
    /// faults the marks save (measured against an eighth of the memory,
    /// held out of the marks) are worth the samples' time. The default:
    /// `auto` for `run` and `bench programs`, `off` for `usemem` and
    /// `soak`.
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "on",
        value_name = "MODE"
    )]
    pub sample_young: Option<uzswap::SampleYoung>,
}

impl SampleYoungArg {
    /// The mode asked for, or the library's default (`usemem`, `soak`).
    pub fn mode(self) -> uzswap::SampleYoung {
        self.sample_young.unwrap_or_default()
    }

    /// The mode asked for, or a whole program's default (`uzswap run`,
    /// `bench programs`' uzswap cells: `SampleYoung::FOR_PROGRAMS`).
    pub fn program_mode(self) -> uzswap::SampleYoung {
        self.sample_young
            .unwrap_or(uzswap::SampleYoung::FOR_PROGRAMS)
    }
}
