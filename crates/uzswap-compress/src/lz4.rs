//! lz4 backend: the lz4 block format (no frame), as the kernel's lz4 crypto
//! driver stores it. The default compressor: fastest to compress and to
//! decompress of the four.
//!
//! Stateless: lz4_flex keeps its hash table on the stack of each call, so the
//! context carries nothing and there is nothing to lock.

use crate::compressor::{CompressCtx, CompressError, Compressor, CompressorId, DecompressError};

pub(crate) struct Lz4;

impl Compressor for Lz4 {
    fn name(&self) -> &'static str {
        "lz4"
    }
    fn id(&self) -> CompressorId {
        CompressorId::Lz4
    }
    fn new_ctx(&self) -> Box<dyn CompressCtx> {
        Box::new(Lz4Ctx)
    }
    fn max_compressed_len(&self, src_len: usize) -> usize {
        lz4_flex::block::get_maximum_output_size(src_len)
    }
}

struct Lz4Ctx;

impl CompressCtx for Lz4Ctx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        lz4_flex::block::compress_into(src, dst).map_err(|e| match e {
            lz4_flex::block::CompressError::OutputTooSmall => {
                CompressError::BufferTooSmall(dst.len())
            }
            e => CompressError::Backend(e.to_string()),
        })
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), DecompressError> {
        // The safe decoder bounds-checks every literal run, match offset and
        // match length against both buffers and reports a violation as an
        // error.
        let got = lz4_flex::block::decompress_into(src, dst)
            .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
        DecompressError::check_len(got, dst.len())
    }
}
