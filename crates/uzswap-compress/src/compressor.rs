//! The `Compressor` trait, its per-thread contexts, and lookup by name.

use std::sync::Arc;

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
/// suffix: "zstd:3", "deflate:6".
pub fn by_name(name: &str) -> Result<Arc<dyn Compressor>, UnknownCompressor> {
    let _ = name;
    todo!("compress helper")
}

/// The compressor that wrote an entry, by id (default level where the level
/// does not matter for decompression).
pub fn by_id(id: CompressorId) -> Arc<dyn Compressor> {
    let _ = id;
    todo!("compress helper")
}
