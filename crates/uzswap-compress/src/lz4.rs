//! lz4 backend: the lz4 block format (no frame), as the kernel's lz4 crypto
//! driver stores it. The default compressor: fastest to compress and to
//! decompress of the four.
//!
//! The context owns the encoder's 8 KiB hash table, so a page costs one clear
//! of it rather than an allocation, a clear and a free.

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
        Box::new(Lz4Ctx {
            table: lz4_flex::block::CompressTable::small(),
        })
    }
    fn max_compressed_len(&self, src_len: usize) -> usize {
        lz4_flex::block::get_maximum_output_size(src_len)
    }
}

struct Lz4Ctx {
    /// 16-bit positions: every input here is far below 64 KiB (a larger
    /// one upgrades the table once, inside lz4_flex).
    table: lz4_flex::block::CompressTable,
}

impl CompressCtx for Lz4Ctx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        lz4_flex::block::compress_into_with_table(src, dst, &mut self.table).map_err(|e| match e {
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
