//! ggml's legacy block formats: `q8_0`, `q5_1`, `q4_0`, `q4_1`, blocks of
//! 32 values, a row a run of blocks.
//!
//! Block layouts (little-endian, as ggml's `block_q*` structs):
//! - `q8_0` (34 B): f16 `d`, 32 signed bytes; value j = q[j] * d.
//! - `q4_0` (18 B): f16 `d`, 16 bytes; element j (j < 16) is the low nibble
//!   of byte j, element j + 16 its high nibble; value = (q - 8) * d.
//! - `q4_1` (20 B): f16 `d`, f16 `m`, 16 bytes as `q4_0`; value = q * d + m.
//! - `q5_1` (24 B): f16 `d`, f16 `m`, u32 `qh`, 16 bytes as `q4_0`; bit j of
//!   `qh` is the fifth (high) bit of element j, so element j is
//!   `nibble | ((qh >> j) & 1) << 4`; value = q * d + m.
//!
//! Decoding does what ggml's reference `dequantize_row_*` does: the f16
//! scales widened exactly, then one f32 multiply and (for `_1`) one f32 add,
//! not fused. The values cannot overflow (|q| <= 128, |d|, |m| <= 65504),
//! so the only corruption is a NaN or infinite `d` or `m`.
//!
//! Encoding is ggml's round-to-nearest `quantize_row_*_ref`: the scale is
//! computed in f32 from the block's extremes, the codes from that f32 scale
//! (not its f16 rounding), and then the scale is stored as f16.

use super::float::check_input;
use super::minifloat::{f16_is_non_finite, f16_to_f32, f32_to_f16};
use super::{CodecError, Encoding};

/// Values per block.
pub(crate) const BLOCK: usize = 32;

/// Which block format a row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Block {
    Q8_0,
    Q5_1,
    Q4_0,
    Q4_1,
}

impl Block {
    /// Bytes per 32-value block.
    pub(crate) const fn bytes(self) -> usize {
        match self {
            Block::Q8_0 => 2 + BLOCK,
            Block::Q5_1 => 2 + 2 + 4 + BLOCK / 2,
            Block::Q4_0 => 2 + BLOCK / 2,
            Block::Q4_1 => 2 + 2 + BLOCK / 2,
        }
    }

    /// Whether the block stores a minimum `m` after `d`.
    const fn has_min(self) -> bool {
        matches!(self, Block::Q5_1 | Block::Q4_1)
    }
}

/// Reads the f16 at `at` of a block.
#[inline(always)]
fn half_at(block: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([block[at], block[at + 1]])
}

/// Validates a row: every block's `d` (and `m`) finite.
pub(crate) fn check(format: Block, raw: &[u8]) -> Result<(), CodecError> {
    // The block's f16 fields, by name and byte offset: `d`, then `m` in the
    // formats that have a minimum.
    let fields: &[(&'static str, usize)] = if format.has_min() {
        &[("d", 0), ("m", 2)]
    } else {
        &[("d", 0)]
    };
    for (block_index, block) in raw.chunks_exact(format.bytes()).enumerate() {
        for &(field, at) in fields {
            let bits = half_at(block, at);
            if f16_is_non_finite(bits) {
                return Err(CodecError::NonFiniteBlockScale {
                    block: block_index,
                    field,
                    format: "f16",
                    bits,
                });
            }
        }
    }
    Ok(())
}

/// Decodes a row that [`check`] accepted.
pub(crate) fn decode(format: Block, raw: &[u8], out: &mut [f32]) {
    for (block, out) in raw
        .chunks_exact(format.bytes())
        .zip(out.chunks_exact_mut(BLOCK))
    {
        let out: &mut [f32; BLOCK] = out.try_into().expect("32-value chunk");
        decode_block(format, block, out);
    }
}

/// Decodes one block (its length is `format.bytes()`).
#[inline(always)]
fn decode_block(format: Block, block: &[u8], out: &mut [f32; BLOCK]) {
    let d = f16_to_f32(half_at(block, 0));
    let (low, high) = out.split_at_mut(BLOCK / 2);
    match format {
        Block::Q8_0 => {
            for (value, &q) in out.iter_mut().zip(&block[2..]) {
                *value = f32::from(q as i8) * d;
            }
        }
        Block::Q4_0 => {
            for ((lo, hi), &byte) in low.iter_mut().zip(high).zip(&block[2..]) {
                *lo = (i32::from(byte & 15) - 8) as f32 * d;
                *hi = (i32::from(byte >> 4) - 8) as f32 * d;
            }
        }
        Block::Q4_1 => {
            let m = f16_to_f32(half_at(block, 2));
            for ((lo, hi), &byte) in low.iter_mut().zip(high).zip(&block[4..]) {
                *lo = f32::from(byte & 15) * d + m;
                *hi = f32::from(byte >> 4) * d + m;
            }
        }
        Block::Q5_1 => {
            let m = f16_to_f32(half_at(block, 2));
            let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
            for (j, ((lo, hi), &byte)) in low.iter_mut().zip(high).zip(&block[8..]).enumerate() {
                let lo_q = u32::from(byte & 15) | ((qh >> j) & 1) << 4;
                let hi_q = u32::from(byte >> 4) | ((qh >> (j + 16)) & 1) << 4;
                *lo = lo_q as f32 * d + m;
                *hi = hi_q as f32 * d + m;
            }
        }
    }
}

/// Quantizes `values` (a multiple of 32 long) into `out` block by block.
pub(crate) fn encode(
    encoding: Encoding,
    format: Block,
    values: &[f32],
    out: &mut [u8],
) -> Result<(), CodecError> {
    check_input(encoding, values)?;
    for (block_index, (block_values, block)) in values
        .chunks_exact(BLOCK)
        .zip(out.chunks_exact_mut(format.bytes()))
        .enumerate()
    {
        let block_values: &[f32; BLOCK] = block_values.try_into().expect("32-value chunk");
        encode_block(encoding, format, block_index, block_values, block)?;
    }
    Ok(())
}

/// `scale` as f16 bits, or the error naming the block when it does not fit
/// (it rounds to infinity).
fn store_half(
    encoding: Encoding,
    block: usize,
    field: &'static str,
    scale: f32,
) -> Result<u16, CodecError> {
    let bits = f32_to_f16(scale);
    if !scale.is_finite() || f16_is_non_finite(bits) {
        return Err(CodecError::BlockScaleOutOfRange {
            encoding,
            block,
            field,
            value: scale,
        });
    }
    Ok(bits)
}

/// The reciprocal ggml multiplies by: `1 / d`, or 0 for an all-zero block.
#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// One block, as `quantize_row_*_ref` writes it.
fn encode_block(
    encoding: Encoding,
    format: Block,
    block_index: usize,
    x: &[f32; BLOCK],
    out: &mut [u8],
) -> Result<(), CodecError> {
    match format {
        Block::Q8_0 => {
            let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = inverse(d);
            out[..2].copy_from_slice(&store_half(encoding, block_index, "d", d)?.to_le_bytes());
            for (q, &v) in out[2..].iter_mut().zip(x) {
                // roundf: halves away from zero, as f32::round.
                *q = (v * id).round() as i8 as u8;
            }
        }
        Block::Q4_0 => {
            // The value of largest magnitude (the first one on a tie), with
            // its sign: it maps to code 0, i.e. -8 * d.
            let (mut amax, mut max) = (0.0f32, 0.0f32);
            for &v in x {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = inverse(d);
            out[..2].copy_from_slice(&store_half(encoding, block_index, "d", d)?.to_le_bytes());
            let (low, high) = x.split_at(BLOCK / 2);
            for ((q, &lo), &hi) in out[2..].iter_mut().zip(low).zip(high) {
                // (int8_t)(x + 8.5f) truncates toward zero, as `as` does.
                let lo = ((lo * id + 8.5) as i8).min(15) as u8;
                let hi = ((hi * id + 8.5) as i8).min(15) as u8;
                *q = lo | hi << 4;
            }
        }
        Block::Q4_1 | Block::Q5_1 => {
            let (mut min, mut max) = (f32::MAX, -f32::MAX);
            for &v in x {
                if v < min {
                    min = v;
                }
                if v > max {
                    max = v;
                }
            }
            let levels = if format == Block::Q4_1 { 15.0 } else { 31.0 };
            let d = (max - min) / levels;
            let id = inverse(d);
            let d_bits = store_half(encoding, block_index, "d", d)?;
            let m_bits = store_half(encoding, block_index, "m", min)?;
            out[..2].copy_from_slice(&d_bits.to_le_bytes());
            out[2..4].copy_from_slice(&m_bits.to_le_bytes());
            let (low, high) = x.split_at(BLOCK / 2);
            if format == Block::Q4_1 {
                for ((q, &lo), &hi) in out[4..].iter_mut().zip(low).zip(high) {
                    let lo = (((lo - min) * id + 0.5) as i8).min(15) as u8;
                    let hi = (((hi - min) * id + 0.5) as i8).min(15) as u8;
                    *q = lo | hi << 4;
                }
            } else {
                let mut qh = 0u32;
                for (j, ((q, &lo), &hi)) in out[8..].iter_mut().zip(low).zip(high).enumerate() {
                    // (uint8_t)(x + 0.5f); ggml does not clamp here, and
                    // for finite input the code cannot pass 31 (the clamp
                    // only keeps a stray bit out of the neighbours).
                    let lo = (((lo - min) * id + 0.5) as u8).min(31);
                    let hi = (((hi - min) * id + 0.5) as u8).min(31);
                    *q = (lo & 15) | (hi & 15) << 4;
                    qh |= u32::from(lo >> 4) << j | u32::from(hi >> 4) << (j + 16);
                }
                out[4..8].copy_from_slice(&qh.to_le_bytes());
            }
        }
    }
    Ok(())
}
