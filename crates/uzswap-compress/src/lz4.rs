//! lz4 backend: the lz4 block format (no frame), as the kernel's lz4 crypto
//! driver stores it. The default compressor: fastest to compress and to
//! decompress of the four.
//!
//! Both directions run the reference C implementation (`lz4-sys`, lz4 1.10,
//! the code the kernel's lz4 is taken from). Compression: on 4 KiB pages it
//! compressed 4-12% faster than `lz4_flex` here, with the same output size
//! (docs/BENCHMARKS.md, "Another machine; the reference lz4 for
//! compression"), and compression is the largest single share of a
//! swapping workload's CPU. Decompression: `LZ4_decompress_safe`, the
//! decoder the library makes for untrusted input (it never reads past the
//! source nor writes past the destination; malformed input is a negative
//! return), as the kernel's zram and zswap use it. `lz4_flex`'s checked
//! decoder, used before, copies a match that overlaps its own output (an
//! offset shorter than the match: a run of zeros, a repeated word) a byte
//! at a time, where the C decoder copies eight at a time: a page of zeros
//! with a few words set, common in a real heap, took it 2-6 µs against
//! 0.3-0.8 (2.5-13x), while it was 16% faster only on the index pattern's
//! short non-overlapping matches (docs/BENCHMARKS.md, "The reference lz4
//! for decompression too").
//!
//! The context owns the encoder's state (the hash table, 16 KiB), so a page
//! costs one reset of it rather than an allocation, a reset and a free.

use crate::compressor::{CompressCtx, CompressError, Compressor, CompressorId, DecompressError};
use std::os::raw::{c_char, c_int, c_void};
// Linked for the C library it builds; its own declarations are not used
// (they lack the entry points below).
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
    fn LZ4_decompress_safe(
        src: *const c_char,
        dst: *mut c_char,
        compressed_size: c_int,
        dst_capacity: c_int,
    ) -> c_int;
    fn LZ4_compressBound(input_size: c_int) -> c_int;
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
        // SAFETY: a pure function of its argument. It is 0 past the
        // format's input limit, where `compress` refuses the input anyway.
        let bound = c_int::try_from(src_len).map_or(0, |n| unsafe { LZ4_compressBound(n) });
        if bound > 0 {
            bound as usize
        } else {
            src_len + src_len / 255 + 16
        }
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
        let (Ok(n), Ok(cap)) = (c_int::try_from(src.len()), c_int::try_from(dst.len())) else {
            return Err(DecompressError::Corrupt(format!(
                "lz4: {} bytes into {} is past the format's limit",
                src.len(),
                dst.len()
            )));
        };
        // SAFETY: the safe decoder bounds-checks every literal run, match
        // offset and match length: it reads at most `n` bytes of `src` and
        // writes at most `cap` bytes of `dst`, both live borrows, whatever
        // the input; malformed input returns a negative number.
        let got =
            unsafe { LZ4_decompress_safe(src.as_ptr().cast(), dst.as_mut_ptr().cast(), n, cap) };
        if got < 0 {
            return Err(DecompressError::Corrupt(format!(
                "lz4: malformed input (stopped at byte {} of {})",
                -(got + 1),
                src.len()
            )));
        }
        DecompressError::check_len(got as usize, dst.len())
    }
}
