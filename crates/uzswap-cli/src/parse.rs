//! The command line's value parsers (sizes, durations, thread counts):
//! shared by the `uzswap` command and the fuzz targets, which feed them
//! arbitrary strings. Each returns an error for anything it does not
//! accept, never panics. No state, no locks.

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
    // Whole numbers exactly (an f64 holds integers only up to 2^53), with
    // the multiplication checked.
    if let Ok(n) = num.trim().parse::<u64>() {
        return n
            .checked_mul(mul)
            .ok_or_else(|| format!("size '{s}' is too large (more than 2^64 - 1 bytes)"));
    }
    let n: f64 = num.trim().parse().map_err(|_| format!("bad size '{s}'"))?;
    // `as u64` saturates: infinity, or 1e30, would become u64::MAX, which
    // means "no budget" downstream.
    if !n.is_finite() || n < 0.0 {
        return Err(format!("bad size '{s}': not a finite, non-negative number"));
    }
    let bytes = n * mul as f64;
    // 2^64 is the first f64 above every u64.
    if bytes >= 18_446_744_073_709_551_616.0 {
        return Err(format!(
            "size '{s}' is too large (more than 2^64 - 1 bytes)"
        ));
    }
    Ok(bytes as u64)
}

/// Longest `--secs` accepted: a benchmark case longer than an hour is a
/// typo, and `Duration::from_secs_f64` panics on values past its range.
pub const MAX_SECS: f64 = 3600.0;

/// Most threads a benchmark may start: well above any machine these run on,
/// far below where spawning fails (each thread has its own stack).
pub const MAX_THREADS: usize = 1024;

/// A duration in seconds: finite, above zero, at most [`MAX_SECS`].
pub fn parse_secs(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 || v > MAX_SECS {
        return Err(format!(
            "{s} seconds is out of range: must be above 0 and at most {MAX_SECS}"
        ));
    }
    Ok(v)
}

/// A thread count, 1..=[`MAX_THREADS`].
pub fn parse_threads(s: &str) -> Result<usize, String> {
    let v: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a thread count"))?;
    if !(1..=MAX_THREADS).contains(&v) {
        return Err(format!("{v} threads is out of range 1..={MAX_THREADS}"));
    }
    Ok(v)
}

/// Where `--writeback` sends the coldest pages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WritebackSpec {
    /// The local swap file, in this directory (`None`: the default one).
    File(Option<std::path::PathBuf>),
    /// The far tier: Redis, or Redis Cluster with more than one node.
    Remote(uzswap::swap::RemoteConfig),
    /// The tier order `pool → file → redis`: the local file first (in this
    /// directory, `None`: the default one), the far tier for what it
    /// cannot take.
    FileThenRemote(Option<std::path::PathBuf>, uzswap::swap::RemoteConfig),
}

/// `file`, `file:DIR` or `redis://HOST:PORT[,HOST:PORT...][?OPTIONS]`, or
/// a file followed by the far tier: `file[:DIR]+redis://...`.
pub fn parse_writeback(s: &str) -> Result<WritebackSpec, String> {
    if let Some(i) = s.find("+redis://") {
        let far = match parse_writeback(&s[i + 1..])? {
            WritebackSpec::Remote(r) => r,
            _ => unreachable!("a redis:// URL parses as the far tier"),
        };
        return match parse_writeback(&s[..i]) {
            Ok(WritebackSpec::File(dir)) => Ok(WritebackSpec::FileThenRemote(dir, far)),
            Err(e) => Err(e),
            Ok(_) => Err(format!(
                "--writeback {s:?}: only a file (file or file:DIR) can come before +redis://"
            )),
        };
    }
    if s == "file" {
        return Ok(WritebackSpec::File(None));
    }
    if let Some(dir) = s.strip_prefix("file:") {
        if dir.is_empty() {
            return Err("--writeback file:DIR needs a directory".into());
        }
        return Ok(WritebackSpec::File(Some(dir.into())));
    }
    if s.starts_with("redis://") {
        return uzswap::swap::RemoteConfig::parse(s).map(WritebackSpec::Remote);
    }
    Err(format!(
        "--writeback {s:?}: one of file, file:DIR, redis://HOST:PORT[,HOST:PORT...], \
         file[:DIR]+redis://..."
    ))
}
