//! The `Compressor` trait, its per-thread contexts, and lookup by name.

use std::sync::{Arc, OnceLock};

/// A stable small id per algorithm, stored in every zswap entry so a load
/// decompresses with the algorithm that compressed, whatever the instance's
/// current setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CompressorId {
    Lz4 = 1,
    Zstd = 2,
    Lzo = 3,
    Deflate = 4,
}

/// Compression failed (not "compressed poorly": that is the caller's policy).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompressError {
    #[error("output buffer too small ({0} bytes)")]
    BufferTooSmall(usize),
    #[error("compressor error: {0}")]
    Backend(String),
}

/// Decompression failed: corrupt, truncated or wrong-sized input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecompressError {
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
    #[error("decompressed {got} bytes, expected {expected}")]
    WrongLength { got: usize, expected: usize },
}

impl DecompressError {
    /// A decoder's output must fill the page exactly: a short or long
    /// output means the stream is not the page that was stored.
    pub fn check_len(got: usize, expected: usize) -> Result<(), DecompressError> {
        if got == expected {
            Ok(())
        } else {
            Err(DecompressError::WrongLength { got, expected })
        }
    }
}

/// An unknown compressor name; the message lists the valid ones.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown compressor '{name}' (valid: {valid})")]
pub struct UnknownCompressor {
    pub name: String,
    pub valid: String,
}

/// A compression algorithm. Shared by all threads; the state of one running
/// compression lives in the `CompressCtx` it hands out.
pub trait Compressor: Send + Sync + 'static {
    /// The name the user selects it by ("lz4", "zstd", "lzo", "deflate").
    fn name(&self) -> &'static str;
    fn id(&self) -> CompressorId;
    /// A fresh context for one thread's use.
    fn new_ctx(&self) -> Box<dyn CompressCtx>;
    /// The compression level, for the algorithms that have one.
    fn level(&self) -> Option<i32> {
        None
    }
    /// A `dst` length that always suffices to compress `src_len` bytes.
    fn max_compressed_len(&self, src_len: usize) -> usize {
        2 * src_len + 64
    }
}

/// One thread's compression state.
pub trait CompressCtx: Send {
    /// Compress `src` into `dst`, returning the compressed length. `dst` of
    /// `2 * PAGE_SIZE` bytes always suffices for a page. Must not panic.
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError>;
    /// Decompress `src` into exactly `dst.len()` bytes. Corrupt or truncated
    /// input is an error; never panics, never touches memory outside `dst`.
    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), DecompressError>;
}

/// The valid compressor names, default first.
pub fn names() -> &'static [&'static str] {
    &["lz4", "zstd", "lzo", "deflate"]
}

/// Look a compressor up by name. "zstd" and "deflate" take an optional level
/// suffix: "zstd:3", "zstd:-1" (a fast level), "deflate:6".
pub fn by_name(name: &str) -> Result<Arc<dyn Compressor>, UnknownCompressor> {
    let unknown = || UnknownCompressor {
        name: name.to_string(),
        valid: format!(
            "{} (zstd:LEVEL with LEVEL {}..=-1 or 1..={}, deflate:LEVEL with LEVEL {}..={})",
            names().join(", "),
            crate::zstd::MIN_LEVEL,
            crate::zstd::MAX_LEVEL,
            crate::deflate::MIN_LEVEL,
            crate::deflate::MAX_LEVEL
        ),
    };
    let (algo, level) = match name.split_once(':') {
        Some((a, l)) => (a, Some(l.trim().parse::<i32>().map_err(|_| unknown())?)),
        None => (name, None),
    };
    let c: Arc<dyn Compressor> = match (algo.trim(), level) {
        ("lz4", None) => Arc::new(crate::lz4::Lz4),
        ("lzo", None) => Arc::new(crate::lzo::Lzo),
        ("zstd", l) => {
            let l = l.unwrap_or(crate::zstd::DEFAULT_LEVEL);
            if l == 0 || !(crate::zstd::MIN_LEVEL..=crate::zstd::MAX_LEVEL).contains(&l) {
                return Err(unknown());
            }
            Arc::new(crate::zstd::Zstd::new(l))
        }
        ("deflate", l) => {
            let l = l.unwrap_or(crate::deflate::DEFAULT_LEVEL);
            if !(crate::deflate::MIN_LEVEL..=crate::deflate::MAX_LEVEL).contains(&l) {
                return Err(unknown());
            }
            Arc::new(crate::deflate::Deflate::new(l))
        }
        _ => return Err(unknown()),
    };
    Ok(c)
}

/// The compressor that wrote an entry, by id (default level where the level
/// does not matter for decompression).
pub fn by_id(id: CompressorId) -> Arc<dyn Compressor> {
    // One shared instance per algorithm: loads look the decompressor up on
    // every call, so this must not allocate.
    static BY_ID: OnceLock<[Arc<dyn Compressor>; 4]> = OnceLock::new();
    let all = BY_ID.get_or_init(|| {
        [
            Arc::new(crate::lz4::Lz4),
            Arc::new(crate::zstd::Zstd::new(crate::zstd::DEFAULT_LEVEL)),
            Arc::new(crate::lzo::Lzo),
            Arc::new(crate::deflate::Deflate::new(crate::deflate::DEFAULT_LEVEL)),
        ]
    });
    all[id as usize - 1].clone()
}

impl CompressorId {
    /// The id stored in an entry back to the enum; `None` for a byte no
    /// compressor ever wrote.
    pub fn from_u8(v: u8) -> Option<CompressorId> {
        match v {
            1 => Some(CompressorId::Lz4),
            2 => Some(CompressorId::Zstd),
            3 => Some(CompressorId::Lzo),
            4 => Some(CompressorId::Deflate),
            _ => None,
        }
    }
}
