//! The settings `uzswap run` passes in the environment. Every variable is
//! the runner's; a missing `UZSWAP_BUDGET` means "not under uzswap".
//!
//! | variable | meaning |
//! |---|---|
//! | `UZSWAP_BUDGET` | bytes of resident memory + pool |
//! | `UZSWAP_OWN_MEMORY` | `1`: the budget also counts the process's own memory outside them (`Config::count_own_memory`) |
//! | `UZSWAP_COMPRESSOR` | compressor name (`lz4`, `lzo`, `zstd:3`...) |
//! | `UZSWAP_FOLIO` | chunk bytes (4096 << 0..=9) |
//! | `UZSWAP_SWAP_DIR`, `UZSWAP_SWAP_SIZE` | the writeback device |
//! | `UZSWAP_WRITEBACK` | `redis://HOST:PORT[,HOST:PORT...]`: write back to Redis (the far tier) instead of a file; `file+redis://...`: the file first, Redis for what it cannot take |
//! | `UZSWAP_FAR_SIZE` | size of the far tier behind the file (default: as large as the file) |
//! | `UZSWAP_WRITEBACK_PLAIN` | `1`: pages go to the swap file unsealed (default: AES-256-GCM) |
//! | `UZSWAP_STATS` | file the figures are appended to at exit (`-`: stderr) |
//! | `UZSWAP_STATS_COLLECTED` | `1`: the file is in a directory `uzswap run --json` removes when the run ends; a process that outlives it writes nothing |
//! | `UZSWAP_STATS_EVERY` | also every this many seconds |
//! | `UZSWAP_NO_INHERIT` | programs this one execs run without uzswap |
//! | `UZSWAP_FORK_INSTANCE` | `1`: a forked child takes its memory over with an instance of its own (`fork.rs`) |
//! | `UZSWAP_USER_MODE` | open userfaultfd in user mode only (as an unprivileged user without the device) |
//! | `UZSWAP_HANDLER` | `auto` (default: `block` where /dev/userfaultfd opens, else `signal`), `block`, `spin[:µs]` or `signal`: how faults are resolved |
//! | `UZSWAP_BIND_HANDLERS` | `0`: leave handler threads unbound (`Config::bind_handlers`) |
//! | `UZSWAP_SAMPLE_YOUNG` | `off`, `auto` or `on` (`1`): read the kernel's accessed bits of resident memory (`Config::sample_young`); unset: `auto` (`SampleYoung::FOR_PROGRAMS`) |

use std::path::PathBuf;

#[derive(Clone)]
pub struct Config {
    pub budget: u64,
    pub compressor: Option<String>,
    pub folio_order: u32,
    pub swap_dir: Option<PathBuf>,
    pub swap_size: u64,
    /// The far tier sits behind the file (`UZSWAP_WRITEBACK=file+redis://`).
    pub file_first: bool,
    /// Size of that far tier (`UZSWAP_FAR_SIZE`; 0: as large as the file).
    pub far_size: u64,
    pub writeback_plain: bool,
    pub remote: Option<uzswap::swap::RemoteConfig>,
    pub stats: Option<String>,
    /// `stats` is in a directory `uzswap run --json` made for one run and
    /// removes when it ends (`UZSWAP_STATS_COLLECTED`).
    pub stats_collected: bool,
    pub stats_every: Option<f64>,
    pub no_inherit: bool,
    /// A forked child gets an instance of its own (`UZSWAP_FORK_INSTANCE`).
    pub fork_instance: bool,
    pub user_mode: bool,
    pub handler: uzswap::HandlerMode,
    /// The budget counts the process's own memory too (`UZSWAP_OWN_MEMORY`).
    pub count_own_memory: bool,
    /// Handler threads bound to CPUs (`UZSWAP_BIND_HANDLERS`, default on).
    pub bind_handlers: bool,
    /// Accessed bits sampled from smaps (`UZSWAP_SAMPLE_YOUNG`).
    pub sample_young: uzswap::SampleYoung,
    /// The program may drop region pages with system calls of its own
    /// (`Config::foreign_drops`): set at start for a Go program.
    pub foreign_drops: bool,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn num(name: &str) -> Result<Option<u64>, String> {
    var(name)
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| format!("{name}={v}: not a number of bytes"))
        })
        .transpose()
}

fn handler() -> Result<uzswap::HandlerMode, String> {
    let v = var("UZSWAP_HANDLER").unwrap_or_else(|| "auto".into());
    let spin = |us: &str| {
        us.parse::<u32>()
            .map(|micros| uzswap::HandlerMode::Spin { micros })
            .map_err(|_| format!("UZSWAP_HANDLER={v}: spin:<microseconds>"))
    };
    match v.as_str() {
        "block" => Ok(uzswap::HandlerMode::Block),
        "signal" => Ok(uzswap::HandlerMode::Signal),
        "auto" => Ok(uzswap::HandlerMode::Auto),
        "spin" => spin("50"),
        s => match s.strip_prefix("spin:") {
            Some(us) => spin(us),
            None => Err(format!(
                "UZSWAP_HANDLER={v}: one of auto, block, spin[:µs], signal"
            )),
        },
    }
}

impl Config {
    pub fn from_env() -> Result<Option<Config>, String> {
        let Some(budget) = num("UZSWAP_BUDGET")? else {
            return Ok(None);
        };
        let folio = num("UZSWAP_FOLIO")?.unwrap_or(64 << 10);
        let page = uzswap::PAGE_SIZE as u64;
        if !folio.is_power_of_two() || folio < page || folio > page << uzswap::MAX_ORDER {
            return Err(format!(
                "UZSWAP_FOLIO={folio}: a power of two from 4 KiB to 2 MiB"
            ));
        }
        let stats_every = var("UZSWAP_STATS_EVERY")
            .map(|v| match v.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
                _ => Err(format!(
                    "UZSWAP_STATS_EVERY={v}: a positive number of seconds"
                )),
            })
            .transpose()?;
        // `redis://...`, or `file+redis://...` for Redis behind the file.
        let writeback = var("UZSWAP_WRITEBACK")
            .map(|v| {
                let url = v.strip_prefix("file+");
                uzswap::swap::RemoteConfig::parse(url.unwrap_or(&v))
                    .map(|r| (url.is_some(), r))
                    .map_err(|e| format!("UZSWAP_WRITEBACK: {e}"))
            })
            .transpose()?;
        Ok(Some(Config {
            budget,
            compressor: var("UZSWAP_COMPRESSOR"),
            folio_order: (folio / page).trailing_zeros(),
            swap_dir: var("UZSWAP_SWAP_DIR").map(PathBuf::from),
            swap_size: num("UZSWAP_SWAP_SIZE")?.unwrap_or(0),
            writeback_plain: var("UZSWAP_WRITEBACK_PLAIN").is_some_and(|v| v != "0"),
            file_first: writeback.as_ref().is_some_and(|(first, _)| *first),
            remote: writeback.map(|(_, r)| r),
            far_size: num("UZSWAP_FAR_SIZE")?.unwrap_or(0),
            stats: var("UZSWAP_STATS"),
            stats_collected: var("UZSWAP_STATS_COLLECTED").is_some_and(|v| v != "0"),
            stats_every,
            no_inherit: var("UZSWAP_NO_INHERIT").is_some_and(|v| v != "0"),
            fork_instance: var("UZSWAP_FORK_INSTANCE").is_some_and(|v| v != "0"),
            user_mode: var("UZSWAP_USER_MODE").is_some_and(|v| v != "0"),
            handler: handler()?,
            count_own_memory: var("UZSWAP_OWN_MEMORY").is_some_and(|v| v != "0"),
            bind_handlers: var("UZSWAP_BIND_HANDLERS").is_none_or(|v| v != "0"),
            sample_young: var("UZSWAP_SAMPLE_YOUNG")
                .map(|v| v.parse().map_err(|e| format!("UZSWAP_SAMPLE_YOUNG: {e}")))
                .transpose()?
                .unwrap_or(uzswap::SampleYoung::FOR_PROGRAMS),
            foreign_drops: false,
        }))
    }

    /// The library's settings for a whole program: handler threads (which
    /// serve faults taken inside system calls where the device allows it),
    /// regions registered at once (they are reservations, far larger than
    /// what is touched), and a device big enough for a program that
    /// outgrows its budget many times over.
    pub fn uzswap(&self) -> uzswap::UzswapConfig {
        let mut c = uzswap::UzswapConfig {
            budget: self.budget,
            folio_order: self.folio_order,
            defer_register: false,
            plan_for_mapping: false,
            count_own_memory: self.count_own_memory,
            // glibc's malloc serves only uzswap's threads here (`alloc.rs`).
            trim_own_heap: true,
            user_mode_only: self.user_mode,
            handler: self.handler,
            bind_handlers: self.bind_handlers,
            sample_young: self.sample_young,
            foreign_drops: self.foreign_drops,
            ..Default::default()
        };
        if let Some(name) = &self.compressor {
            c.zswap.compressor = name.clone();
        }
        c.zswap.writeback_encrypted = !self.writeback_plain;
        if let Some(wb) = c.writeback.as_mut() {
            wb.dir = self.swap_dir.clone();
            wb.remote = self.remote.clone();
            wb.file_first = self.file_first;
            wb.far_size_bytes = self.far_size;
            wb.size_bytes = if self.swap_size > 0 {
                self.swap_size
            } else {
                self.budget.saturating_mul(8).max(1 << 30)
            };
        }
        c
    }
}

/// `--no-inherit`: take this library out of `LD_PRELOAD` in our own
/// environment, so programs we exec start without it.
pub fn drop_preload_from_environ() {
    let Some(v) = var("LD_PRELOAD") else { return };
    let kept: Vec<&str> = v
        .split([':', ' '])
        .filter(|s| !s.is_empty() && !s.contains("uzswap_preload"))
        .collect();
    // SAFETY: initialisation runs before the program's main and its
    // threads; nothing else reads the environment meanwhile.
    unsafe {
        if kept.is_empty() {
            std::env::remove_var("LD_PRELOAD");
        } else {
            std::env::set_var("LD_PRELOAD", kept.join(":"));
        }
        std::env::remove_var("UZSWAP_BUDGET");
    }
}
