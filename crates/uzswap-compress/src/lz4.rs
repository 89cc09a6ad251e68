//! lz4 backend: the lz4 block format (no frame), as the kernel's lz4 crypto
//! driver stores it. The default compressor: fastest to compress and to
//! decompress of the four.
//!
//! Compression runs the reference C implementation (`lz4-sys`, the code the
//! kernel's lz4 is taken from): on 4 KiB pages it compressed 4-12% faster
//! than `lz4_flex` here, with the same output size (docs/BENCHMARKS.md,
//! "Another machine; the reference lz4 for compression"), and compression
//! is the largest single share of a swapping workload's CPU. Decompression
//! stays with `lz4_flex`'s checked decoder: faster than the C library's
//! on index pages, 5% slower on text, and Rust all through on the path
//! that reads what could be corrupt.
//!
//! The context owns the encoder's state (the hash table, 16 KiB), so a page
//! costs one reset of it rather than an allocation, a reset and a free.

use crate::compressor::{CompressCtx, CompressError, Compressor, CompressorId, DecompressError};
use std::os::raw::{c_char, c_int, c_void};
// Linked for the C library it builds; its own declarations are not used.
use lz4_sys as _;

pub(crate) struct Lz4;

/// The kernel's and the library's default acceleration: 1, full search.
const ACCELERATION: c_int = 1;

// `lz4-sys` builds the library but does not declare this stable entry point
// (lz4.h, `LZ4LIB_API`), which compresses with caller-owned state.
extern "C" {
    fn LZ4_compress_fast_extState(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        acceleration: c_int,
    ) -> c_int;
    fn LZ4_sizeofState() -> c_int;
}

impl Compressor for Lz4 {
    fn name(&self) -> &'static str {
        "lz4"
    }
    fn id(&self) -> CompressorId {
        CompressorId::Lz4
    }
    fn new_ctx(&self) -> Box<dyn CompressCtx> {
        // SAFETY: a pure function of the library's build.
        let bytes = unsafe { LZ4_sizeofState() } as usize;
        // u64 words: LZ4_stream_t wants 8-byte alignment.
        Box::new(Lz4Ctx {
            state: vec![0u64; bytes.div_ceil(8)].into_boxed_slice(),
        })
    }
    fn max_compressed_len(&self, src_len: usize) -> usize {
        lz4_flex::block::get_maximum_output_size(src_len)
    }
}

struct Lz4Ctx {
    /// `LZ4_stream_t`, reset by every call.
    state: Box<[u64]>,
}

impl CompressCtx for Lz4Ctx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        let (Ok(n), Ok(cap)) = (c_int::try_from(src.len()), c_int::try_from(dst.len())) else {
            return Err(CompressError::Backend(format!(
                "lz4: input of {} bytes is past the format's limit",
                src.len()
            )));
        };
        // SAFETY: `state` is LZ4_sizeofState() bytes, 8-byte aligned, and
        // ours alone (&mut self); the library reads `n` bytes of `src` and
        // writes at most `cap` bytes of `dst`, both live borrows.
        let got = unsafe {
            LZ4_compress_fast_extState(
                self.state.as_mut_ptr().cast(),
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                n,
                cap,
                ACCELERATION,
            )
        };
        // 0: the output did not fit in `cap` bytes (nothing else fails for
        // an input below LZ4_MAX_INPUT_SIZE).
        if got <= 0 {
            return Err(CompressError::BufferTooSmall(dst.len()));
        }
        Ok(got as usize)
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
