//! lzo backend: LZO1X-1, the format of the kernel's "lzo" compressor.
//!
//! Compression uses the `rust-lzo` crate, a line-by-line port of the
//! kernel's lzo1x_compress.c. Its compressor writes without checking the
//! output length (as the kernel's does: callers must provide
//! lzo1x_worst_compress() bytes), so a `dst` shorter than that bound is
//! never handed to it: the page is compressed into the context's scratch
//! buffer and copied out if it fits.
//!
//! Decompression does NOT use the crate: its decoder is a mechanical
//! translation of lzo1x_decompress_safe.c full of raw pointer arithmetic,
//! whose bounds checks we cannot audit to the standard "corrupt input never
//! reads or writes out of bounds" asks for. `lzo1x_decompress_safe` below is
//! the same algorithm written over slices: every read and write is checked
//! by the language, and every check the C code makes (NEED_IP, NEED_OP,
//! TEST_LB, the MAX_255_COUNT overflow guard) is made explicitly first, so
//! a bad stream is an error, never a panic.

use crate::compressor::{CompressCtx, CompressError, Compressor, CompressorId, DecompressError};

pub(crate) struct Lzo;

impl Compressor for Lzo {
    fn name(&self) -> &'static str {
        "lzo"
    }
    fn id(&self) -> CompressorId {
        CompressorId::Lzo
    }
    fn new_ctx(&self) -> Box<dyn CompressCtx> {
        Box::new(LzoCtx {
            wrk: None,
            scratch: Vec::new(),
        })
    }
    fn max_compressed_len(&self, src_len: usize) -> usize {
        rust_lzo::worst_compress(src_len)
    }
}

/// `rust_lzo::LZOContext` owns its malloc'd work memory through a raw
/// pointer, which makes it `!Send` although nothing ties it to a thread.
struct WorkMem(rust_lzo::LZOContext);

// SAFETY: the LZOContext exclusively owns a heap block (the LZO1X-1
// dictionary) that it only touches through `&mut self`; no thread-local or
// thread-affine state is involved, so moving it to another thread is sound.
unsafe impl Send for WorkMem {}

struct LzoCtx {
    /// Made on first compression: load-only contexts skip the 128 KiB.
    wrk: Option<WorkMem>,
    /// Output for a `dst` shorter than the worst case (see the module doc).
    scratch: Vec<u8>,
}

impl CompressCtx for LzoCtx {
    fn compress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, CompressError> {
        let worst = rust_lzo::worst_compress(src.len());
        let wrk = &mut self
            .wrk
            .get_or_insert_with(|| WorkMem(rust_lzo::LZOContext::new()))
            .0;
        if dst.len() >= worst {
            let (out, err) = wrk.compress_to_slice(src, dst);
            if err != rust_lzo::LZOError::OK {
                return Err(CompressError::Backend("lzo1x_1_compress failed".into()));
            }
            return Ok(out.len());
        }
        self.scratch.resize(worst, 0);
        let (out, err) = wrk.compress_to_slice(src, &mut self.scratch);
        if err != rust_lzo::LZOError::OK {
            return Err(CompressError::Backend("lzo1x_1_compress failed".into()));
        }
        let n = out.len();
        if n > dst.len() {
            return Err(CompressError::BufferTooSmall(dst.len()));
        }
        dst[..n].copy_from_slice(&self.scratch[..n]);
        Ok(n)
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<(), DecompressError> {
        let got = lzo1x_decompress_safe(src, dst)
            .map_err(|e| DecompressError::Corrupt(format!("lzo: {e}")))?;
        DecompressError::check_len(got, dst.len())
    }
}

/// The decoder's error codes, as LZO_E_* in the kernel.
#[derive(Debug, PartialEq, Eq)]
enum LzoError {
    Error,
    InputOverrun,
    OutputOverrun,
    LookbehindOverrun,
    InputNotConsumed,
}

impl std::fmt::Display for LzoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LzoError::Error => "bad stream",
            LzoError::InputOverrun => "input overrun",
            LzoError::OutputOverrun => "output overrun",
            LzoError::LookbehindOverrun => "lookbehind overrun",
            LzoError::InputNotConsumed => "input not consumed",
        })
    }
}

const M2_MAX_OFFSET: usize = 0x0800;
/// The longest run of zero length bytes that cannot overflow `t`.
const MAX_255_COUNT: usize = usize::MAX / 255 - 2;

/// Where the decoder resumes: the labels of the C code's gotos.
enum Step {
    /// The top of the loop: read an instruction byte.
    Instruction,
    /// copy_literal_run: copy `t` literals, then state 4.
    LiteralRun,
    /// match_next: copy the 0..=3 trailing literals of the last match.
    MatchNext,
}

/// Copy `n` literal bytes `src[ip..]` to `dst[op..]` (the caller checked
/// both ranges). Runs of up to 16 bytes, most of them, are one fixed-size
/// copy where both slices have 16 bytes of room, instead of a call to
/// `memcpy` for a handful of bytes (the kernel's COPY8 fast path): the
/// bytes past `op + n` it writes are output not produced yet, which the
/// decoder writes again before anything reads it (a match reads only
/// before `op`).
#[inline(always)]
fn copy_literals(dst: &mut [u8], op: usize, src: &[u8], ip: usize, n: usize) {
    if n <= 16 && op + 16 <= dst.len() && ip + 16 <= src.len() {
        dst[op..op + 16].copy_from_slice(&src[ip..ip + 16]);
    } else {
        dst[op..op + n].copy_from_slice(&src[ip..ip + n]);
    }
}

/// Copy the `t`-byte match that starts `back` bytes before `op` (the
/// caller checked `back <= op` and room for `t`). Where the match is at
/// least 8 bytes back and `dst` has room, it goes 8 bytes at a time: each
/// block reads only bytes already final (they end at or before the
/// block's own start), and overshoot is rewritten as for literals.
#[inline(always)]
fn copy_match(dst: &mut [u8], op: usize, back: usize, t: usize) {
    let from = op - back;
    if back >= 8 && op + t + 8 <= dst.len() {
        let mut k = 0;
        while k < t {
            let block: [u8; 8] = dst[from + k..from + k + 8]
                .try_into()
                .expect("an 8-byte range");
            dst[op + k..op + k + 8].copy_from_slice(&block);
            k += 8;
        }
    } else if back >= t {
        dst.copy_within(from..from + t, op);
    } else {
        // Overlapping: each byte may be one this copy just wrote.
        for k in 0..t {
            dst[op + k] = dst[from + k];
        }
    }
}

/// lzo1x_decompress_safe(): decode `src` into `dst`, returning the number of
/// bytes written. Every bound is checked; `dst` longer than the stream's
/// output is fine (the caller compares the length).
fn lzo1x_decompress_safe(src: &[u8], dst: &mut [u8]) -> Result<usize, LzoError> {
    let mut ip = 0usize;
    let mut op = 0usize;
    let mut state = 0usize;
    let mut next = 0usize;
    let mut t: usize;

    let byte = |ip: usize| {
        src.get(ip)
            .map(|&b| b as usize)
            .ok_or(LzoError::InputOverrun)
    };
    // NEED_IP(x) / NEED_OP(x): at least x bytes left.
    let need_ip = |ip: usize, x: usize| {
        if src.len().saturating_sub(ip) >= x {
            Ok(())
        } else {
            Err(LzoError::InputOverrun)
        }
    };
    let need_op = |op: usize, x: usize, dlen: usize| {
        if dlen.saturating_sub(op) >= x {
            Ok(())
        } else {
            Err(LzoError::OutputOverrun)
        }
    };
    // A run of zero bytes then a non-zero one encodes a long length:
    // 255 per zero byte plus the last byte.
    let long_len = |ip: &mut usize| -> Result<usize, LzoError> {
        let start = *ip;
        while byte(*ip)? == 0 {
            *ip += 1;
        }
        let zeros = *ip - start;
        if zeros > MAX_255_COUNT {
            return Err(LzoError::Error);
        }
        let last = byte(*ip)?;
        *ip += 1;
        Ok(zeros * 255 + last)
    };

    if src.len() < 3 {
        return Err(LzoError::InputOverrun);
    }
    let mut step = if src[0] > 17 {
        t = src[0] as usize - 17;
        ip = 1;
        if t < 4 {
            next = t;
            Step::MatchNext
        } else {
            Step::LiteralRun
        }
    } else {
        t = 0;
        Step::Instruction
    };

    loop {
        match step {
            Step::LiteralRun => {
                need_op(op, t, dst.len())?;
                need_ip(ip, t.checked_add(3).ok_or(LzoError::Error)?)?;
                copy_literals(dst, op, src, ip, t);
                op += t;
                ip += t;
                state = 4;
                step = Step::Instruction;
                continue;
            }
            Step::MatchNext => {
                state = next;
                t = next;
                need_ip(ip, t + 3)?;
                need_op(op, t, dst.len())?;
                copy_literals(dst, op, src, ip, t);
                op += t;
                ip += t;
                step = Step::Instruction;
                continue;
            }
            Step::Instruction => {}
        }

        t = byte(ip)?;
        ip += 1;
        // `back` is the match distance: the match starts at op - back.
        let back;
        if t < 16 {
            if state == 0 {
                if t == 0 {
                    t = long_len(&mut ip)?.checked_add(15).ok_or(LzoError::Error)?;
                }
                t += 3;
                step = Step::LiteralRun;
                continue;
            } else if state != 4 {
                // A 2-byte match within 1 KiB, after 1..=3 literals.
                next = t & 3;
                let back = 1 + (t >> 2) + (byte(ip)? << 2);
                ip += 1;
                if back > op {
                    return Err(LzoError::LookbehindOverrun);
                }
                need_op(op, 2, dst.len())?;
                dst[op] = dst[op - back];
                dst[op + 1] = dst[op + 1 - back];
                op += 2;
                step = Step::MatchNext;
                continue;
            } else {
                // A 3-byte match 2..3 KiB back, after a literal run.
                next = t & 3;
                back = 1 + M2_MAX_OFFSET + (t >> 2) + (byte(ip)? << 2);
                ip += 1;
                t = 3;
            }
        } else if t >= 64 {
            // M2: 3..=8 bytes within 2 KiB.
            next = t & 3;
            back = 1 + ((t >> 2) & 7) + (byte(ip)? << 3);
            ip += 1;
            t = (t >> 5) - 1 + 2;
        } else if t >= 32 {
            // M3: any length within 16 KiB.
            t = (t & 31) + 2;
            if t == 2 {
                t = long_len(&mut ip)?
                    .checked_add(31 + 2)
                    .ok_or(LzoError::Error)?;
            }
            need_ip(ip, 2)?;
            let v = byte(ip)? | (byte(ip + 1)? << 8);
            ip += 2;
            back = 1 + (v >> 2);
            next = v & 3;
        } else {
            // M4: any length 16..48 KiB back; distance 0 marks the end.
            let high = (t & 8) << 11;
            t = (t & 7) + 2;
            if t == 2 {
                t = long_len(&mut ip)?
                    .checked_add(7 + 2)
                    .ok_or(LzoError::Error)?;
            }
            need_ip(ip, 2)?;
            let v = byte(ip)? | (byte(ip + 1)? << 8);
            ip += 2;
            next = v & 3;
            let dist = high + (v >> 2);
            if dist == 0 {
                // eof_found: the end marker is exactly 0x11 0x00 0x00.
                if t != 3 {
                    return Err(LzoError::Error);
                }
                return match ip.cmp(&src.len()) {
                    std::cmp::Ordering::Equal => Ok(op),
                    std::cmp::Ordering::Less => Err(LzoError::InputNotConsumed),
                    std::cmp::Ordering::Greater => Err(LzoError::InputOverrun),
                };
            }
            back = dist + 0x4000;
        }

        // TEST_LB, NEED_OP, then the (possibly overlapping) match copy.
        if back > op {
            return Err(LzoError::LookbehindOverrun);
        }
        need_op(op, t, dst.len())?;
        copy_match(dst, op, back, t);
        op += t;
        step = Step::MatchNext;
    }
}
