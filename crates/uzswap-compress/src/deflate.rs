//! deflate backend: raw DEFLATE (RFC 1951, no zlib or gzip wrapper) through
//! libdeflate, level configurable ("deflate:6"). The slowest and densest of
//! the four; the algorithm the seed-002 hardware offload implements.
//!
//! libdeflate's compressor allocates its match-finder tables once; each
//! `CompressCtx` keeps one compressor and one decompressor for its life.

use crate::compressor::{CompressCtx, CompressError, Compressor, CompressorId, DecompressError};
use libdeflater::{CompressionLvl, DecompressionError};

pub(crate) const MIN_LEVEL: i32 = 1;
pub(crate) const MAX_LEVEL: i32 = 12;
pub(crate) const DEFAULT_LEVEL: i32 = 6;

pub(crate) struct Deflate {
    level: i32,
}

impl Deflate {
    pub(crate) fn new(level: i32) -> Self {
        Deflate { level }
    }
}

impl Compressor for Deflate {
    fn name(&self) -> &'static str {
        "deflate"
    }
    fn id(&self) -> CompressorId {
        CompressorId::Deflate
    }
    fn level(&self) -> Option<i32> {
        Some(self.level)
    }
    fn new_ctx(&self) -> Box<dyn CompressCtx> {
        Box::new(DeflateCtx {
            level: self.level,
            comp: None,
            decomp: None,
        })
    }
    fn max_compressed_len(&self, src_len: usize) -> usize {
        // libdeflate_deflate_compress_bound(): the compressor falls back to
        // stored blocks of at least 5000 bytes, 5 bytes of header each.
        src_len + 5 * src_len.div_ceil(5000).max(1)
    }
}

/// Made on first use, so a load-only context never builds match-finder tables.
struct DeflateCtx {
    level: i32,
    comp: Option<libdeflater::Compressor>,
    decomp: Option<libdeflater::Decompressor>,
}

impl CompressCtx for DeflateCtx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        let level = self.level;
        let comp = self.comp.get_or_insert_with(|| {
            let lvl = CompressionLvl::new(level).unwrap_or_default();
            libdeflater::Compressor::new(lvl)
        });
        comp.deflate_compress(src, dst)
            .map_err(|_| CompressError::BufferTooSmall(dst.len()))
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), DecompressError> {
        let d = self
            .decomp
            .get_or_insert_with(libdeflater::Decompressor::new);
        match d.deflate_decompress(src, dst) {
            Ok(got) if got == dst.len() => Ok(()),
            Ok(got) => Err(DecompressError::WrongLength {
                got,
                expected: dst.len(),
            }),
            Err(DecompressionError::BadData) => {
                Err(DecompressError::Corrupt("deflate: bad data".into()))
            }
            Err(DecompressionError::InsufficientSpace) => Err(DecompressError::Corrupt(format!(
                "deflate: decodes to more than {} bytes",
                dst.len()
            ))),
        }
    }
}
