//! zstd backend: one zstd frame per page, level configurable ("zstd:3", or
//! a fast level: "zstd:-1").
//!
//! A zstd CCtx / DCtx is expensive to create (hundreds of KiB of tables), so
//! each `CompressCtx` keeps one of each for its whole life and only resets
//! the session per call, as the kernel's per-CPU zstd workspace does.

use crate::compressor::{CompressCtx, CompressError, Compressor, CompressorId, DecompressError};

/// zstd's fast levels are negative ("zstd:-1"): faster than level 1 and,
/// on page-sized inputs, much denser than lz4 (docs/BENCHMARKS.md). 0 is
/// not a level (zstd reads it as "the default"), so it is refused.
pub(crate) const MIN_LEVEL: i32 = -7;
pub(crate) const MAX_LEVEL: i32 = 22;
/// zstd's own default, and the kernel's.
pub(crate) const DEFAULT_LEVEL: i32 = 3;

pub(crate) struct Zstd {
    level: i32,
}

impl Zstd {
    pub(crate) fn new(level: i32) -> Self {
        Zstd { level }
    }
}

impl Compressor for Zstd {
    fn name(&self) -> &'static str {
        "zstd"
    }
    fn id(&self) -> CompressorId {
        CompressorId::Zstd
    }
    fn level(&self) -> Option<i32> {
        Some(self.level)
    }
    fn new_ctx(&self) -> Box<dyn CompressCtx> {
        Box::new(ZstdCtx {
            level: self.level,
            cctx: None,
            dctx: None,
        })
    }
    fn max_compressed_len(&self, src_len: usize) -> usize {
        zstd::zstd_safe::compress_bound(src_len)
    }
}

/// The contexts are made on first use: a context used only for loads never
/// pays for a CCtx, and creation failure (out of memory) becomes an error of
/// the call rather than a panic at `new_ctx`.
struct ZstdCtx {
    level: i32,
    cctx: Option<zstd::bulk::Compressor<'static>>,
    dctx: Option<zstd::bulk::Decompressor<'static>>,
}

impl CompressCtx for ZstdCtx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        if self.cctx.is_none() {
            let c = zstd::bulk::Compressor::new(self.level)
                .map_err(|e| CompressError::Backend(e.to_string()))?;
            self.cctx = Some(c);
        }
        let Some(cctx) = self.cctx.as_mut() else {
            unreachable!("set just above")
        };
        cctx.compress_to_buffer(src, dst).map_err(|e| {
            if dst.len() < zstd::zstd_safe::compress_bound(src.len()) {
                CompressError::BufferTooSmall(dst.len())
            } else {
                CompressError::Backend(e.to_string())
            }
        })
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), DecompressError> {
        if self.dctx.is_none() {
            let d = zstd::bulk::Decompressor::new()
                .map_err(|e| DecompressError::Corrupt(format!("zstd context: {e}")))?;
            self.dctx = Some(d);
        }
        let Some(dctx) = self.dctx.as_mut() else {
            unreachable!("set just above")
        };
        let got = dctx
            .decompress_to_buffer(src, dst)
            .map_err(|e| DecompressError::Corrupt(e.to_string()))?;
        DecompressError::check_len(got, dst.len())
    }
}
