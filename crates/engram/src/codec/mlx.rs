//! `mlx4`: MLX's affine 4-bit quantization with groups of 32 values, as
//! mlx-vlm saves a quantized embedding (three arrays per table).
//!
//! A delivered row is the three arrays' parts of it concatenated:
//! - codes: `dim / 8` little-endian u32 words, 8 four-bit codes a word, the
//!   lowest bits the lowest element (so byte b holds element 2b in its low
//!   nibble and 2b + 1 in its high nibble);
//! - `dim / 32` bf16 scales, one per group;
//! - `dim / 32` bf16 biases, one per group.
//!
//! value = code * scale + bias in f32, a plain multiply then an add (no
//! fused multiply-add), the scale and bias widened exactly from bf16.

use super::float::{check_input, halves};
use super::minifloat::{bf16_is_non_finite, bf16_to_f32, f32_to_bf16};
use super::{CodecError, Encoding};

/// Values per group (one scale and one bias).
pub(crate) const GROUP: usize = 32;

/// The largest code (4 bits).
const LEVELS: f32 = 15.0;

/// Bytes of each part of a `dim`-value row: codes, scales, biases.
pub(crate) const fn parts(dim: usize) -> [usize; 3] {
    [dim / 2, dim / GROUP * 2, dim / GROUP * 2]
}

/// The row's codes, scales and biases.
fn split(raw: &[u8], dim: usize) -> (&[u8], &[u8], &[u8]) {
    let [codes, scales, _] = parts(dim);
    let (code_bytes, rest) = raw.split_at(codes);
    let (scale_bytes, bias_bytes) = rest.split_at(scales);
    (code_bytes, scale_bytes, bias_bytes)
}

/// Validates a row: finite scales and biases, and no group whose largest
/// possible value overflows. `|q * s + b| <= 15 * |s| + |b|` and f32
/// rounding is monotonic, so a finite bound means no value overflows.
pub(crate) fn check(raw: &[u8], dim: usize) -> Result<(), CodecError> {
    let (codes, scales, biases) = split(raw, dim);
    for (group, (s, b)) in halves(scales).zip(halves(biases)).enumerate() {
        for (field, bits) in [("scale", s), ("bias", b)] {
            if bf16_is_non_finite(bits) {
                return Err(CodecError::NonFiniteBlockScale {
                    block: group,
                    field,
                    format: "bf16",
                    bits,
                });
            }
        }
        let (scale, bias) = (bf16_to_f32(s), bf16_to_f32(b));
        if (LEVELS * scale.abs() + bias.abs()).is_finite() {
            continue;
        }
        // Name the first value that does overflow, computed as decode does.
        let group_codes = &codes[group * GROUP / 2..][..GROUP / 2];
        for (pair, &byte) in group_codes.iter().enumerate() {
            for (half, code) in [(0, byte & 15), (1, byte >> 4)] {
                if !(f32::from(code) * scale + bias).is_finite() {
                    return Err(CodecError::AffineNotFinite {
                        index: group * GROUP + 2 * pair + half,
                        code,
                        scale,
                        bias,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Decodes a row that [`check`] accepted.
pub(crate) fn decode(raw: &[u8], dim: usize, out: &mut [f32]) {
    let (codes, scales, biases) = split(raw, dim);
    for (((group_codes, group_out), s), b) in codes
        .chunks_exact(GROUP / 2)
        .zip(out.chunks_exact_mut(GROUP))
        .zip(halves(scales))
        .zip(halves(biases))
    {
        let (scale, bias) = (bf16_to_f32(s), bf16_to_f32(b));
        for (pair, &byte) in group_out.chunks_exact_mut(2).zip(group_codes) {
            pair[0] = f32::from(byte & 15) * scale + bias;
            pair[1] = f32::from(byte >> 4) * scale + bias;
        }
    }
}

/// Quantizes `values` as the CPU path of `mx.quantize(w, group_size=32,
/// bits=4)` (mode "affine") does, per group of 32, all in f32:
///
/// - `scale = max((max - min) / 15, 1e-7)`, negated unless `|min| > |max|`;
///   the *edge* is the extreme of larger magnitude (`min` on that test,
///   else `max`);
/// - `q0 = rint(edge / scale)`; when `q0 != 0`, `scale = edge / q0` and
///   `bias = edge`, else `bias = 0` (so the dominant edge decodes exactly);
/// - code = `rint((w - bias) / scale)` clamped to 0..=15 (`rint`: ties to
///   even), with the f32 scale and bias; both are then stored as bf16.
///
/// A group whose scale or bias does not fit in bf16 is refused.
pub(crate) fn encode(
    encoding: Encoding,
    values: &[f32],
    dim: usize,
    out: &mut [u8],
) -> Result<(), CodecError> {
    check_input(encoding, values)?;
    let [code_len, scale_len, _] = parts(dim);
    let (codes, rest) = out.split_at_mut(code_len);
    let (scales, biases) = rest.split_at_mut(scale_len);
    for (group, (((x, group_codes), scale_out), bias_out)) in values
        .chunks_exact(GROUP)
        .zip(codes.chunks_exact_mut(GROUP / 2))
        .zip(scales.chunks_exact_mut(2))
        .zip(biases.chunks_exact_mut(2))
        .enumerate()
    {
        let (scale, bias) = group_params(x);
        for (field, value) in [("scale", scale), ("bias", bias)] {
            if !value.is_finite() || bf16_is_non_finite(f32_to_bf16(value)) {
                return Err(CodecError::BlockScaleOutOfRange {
                    encoding,
                    block: group,
                    field,
                    value,
                });
            }
        }
        for (byte, pair) in group_codes.iter_mut().zip(x.chunks_exact(2)) {
            let code = |w: f32| ((w - bias) / scale).round_ties_even().clamp(0.0, LEVELS) as u8;
            *byte = code(pair[0]) | code(pair[1]) << 4;
        }
        scale_out.copy_from_slice(&f32_to_bf16(scale).to_le_bytes());
        bias_out.copy_from_slice(&f32_to_bf16(bias).to_le_bytes());
    }
    Ok(())
}

/// A group's f32 scale and bias, as `mx.quantize` computes them.
fn group_params(x: &[f32]) -> (f32, f32) {
    let (mut w_min, mut w_max) = (f32::INFINITY, f32::NEG_INFINITY);
    for &w in x {
        // std::max / std::min on finite values.
        w_max = w_max.max(w);
        w_min = w_min.min(w);
    }
    let min_edge = w_min.abs() > w_max.abs();
    let mut scale = ((w_max - w_min) / LEVELS).max(1e-7);
    if !min_edge {
        scale = -scale;
    }
    let edge = if min_edge { w_min } else { w_max };
    let q0 = (edge / scale).round_ties_even();
    if q0 != 0.0 {
        (edge / q0, edge)
    } else {
        (scale, 0.0)
    }
}
