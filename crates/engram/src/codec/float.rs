//! Dense float rows: `bf16`, `f16`, `f32` (little-endian, one value each)
//! and `fp8_e4m3` (one E4M3FN byte each, times one global f32 scale).
//!
//! Every function takes the row's bytes already checked for length; they
//! decode to the format's exact value in f32 (no BF16 rounding). A stored
//! NaN or infinity, an E4M3 NaN code, or a product with the scale that
//! overflows is a [`CodecError`] naming the value.

use super::minifloat::{
    bf16_is_non_finite, bf16_to_f32, e4m3_is_nan, f16_is_non_finite, f16_to_f32, f32_to_bf16,
    f32_to_e4m3, f32_to_f16, E4M3_TABLE,
};
use super::{CodecError, Encoding};

/// Which dense float format a row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dense {
    Bf16,
    F16,
    F32,
}

impl Dense {
    /// The format's name in errors.
    fn format(self) -> &'static str {
        match self {
            Dense::Bf16 => "bf16",
            Dense::F16 => "f16",
            Dense::F32 => "f32",
        }
    }
}

/// The first non-finite stored value of a dense row.
pub(crate) fn check_dense(format: Dense, raw: &[u8]) -> Result<(), CodecError> {
    // A fold over all values, no early exit, so the common (valid) case is
    // one vectorizable pass; the scan that names the culprit runs only for
    // a bad row.
    let bad = match format {
        Dense::Bf16 => halves(raw).fold(false, |bad, h| bad | bf16_is_non_finite(h)),
        Dense::F16 => halves(raw).fold(false, |bad, h| bad | f16_is_non_finite(h)),
        Dense::F32 => words(raw).fold(false, |bad, w| bad | (w & 0x7f80_0000 == 0x7f80_0000)),
    };
    if !bad {
        return Ok(());
    }
    let (index, bits) = match format {
        Dense::Bf16 => halves(raw)
            .map(u32::from)
            .enumerate()
            .find(|&(_, h)| bf16_is_non_finite(h as u16)),
        Dense::F16 => halves(raw)
            .map(u32::from)
            .enumerate()
            .find(|&(_, h)| f16_is_non_finite(h as u16)),
        Dense::F32 => words(raw)
            .enumerate()
            .find(|&(_, w)| w & 0x7f80_0000 == 0x7f80_0000),
    }
    .expect("a non-finite value was seen");
    Err(CodecError::NonFiniteValue {
        index,
        format: format.format(),
        bits,
    })
}

/// Decodes a dense row that [`check_dense`] accepted.
pub(crate) fn decode_dense(format: Dense, raw: &[u8], out: &mut [f32]) {
    match format {
        Dense::Bf16 => out
            .iter_mut()
            .zip(halves(raw))
            .for_each(|(v, h)| *v = bf16_to_f32(h)),
        Dense::F16 => out
            .iter_mut()
            .zip(halves(raw))
            .for_each(|(v, h)| *v = f16_to_f32(h)),
        Dense::F32 => out
            .iter_mut()
            .zip(words(raw))
            .for_each(|(v, w)| *v = f32::from_bits(w)),
    }
}

/// Encodes `values` as a dense row: bf16 and f16 round to nearest even;
/// a value that is not finite, or that rounds to infinity, is refused.
pub(crate) fn encode_dense(
    encoding: Encoding,
    format: Dense,
    values: &[f32],
    out: &mut [u8],
) -> Result<(), CodecError> {
    check_input(encoding, values)?;
    match format {
        Dense::Bf16 | Dense::F16 => {
            for (index, (&value, dst)) in values.iter().zip(out.chunks_exact_mut(2)).enumerate() {
                let bits = if format == Dense::Bf16 {
                    f32_to_bf16(value)
                } else {
                    f32_to_f16(value)
                };
                let infinite = if format == Dense::Bf16 {
                    bf16_is_non_finite(bits)
                } else {
                    f16_is_non_finite(bits)
                };
                if infinite {
                    return Err(CodecError::OutOfRange {
                        encoding,
                        index,
                        value,
                    });
                }
                dst.copy_from_slice(&bits.to_le_bytes());
            }
        }
        Dense::F32 => {
            for (&value, dst) in values.iter().zip(out.chunks_exact_mut(4)) {
                dst.copy_from_slice(&value.to_le_bytes());
            }
        }
    }
    Ok(())
}

/// Validates an `fp8_e4m3` row under `scale`: no NaN code and no product
/// that overflows. The magnitude grows with `code & 0x7f`, so the largest
/// masked code bounds the row (one pass, no early exit).
pub(crate) fn check_fp8(raw: &[u8], scale: f32) -> Result<(), CodecError> {
    let largest = raw.iter().fold(0u8, |m, &c| m.max(c & 0x7f));
    if (E4M3_TABLE[largest as usize] * scale).is_finite() {
        return Ok(());
    }
    for (index, &code) in raw.iter().enumerate() {
        if e4m3_is_nan(code) {
            return Err(CodecError::NanCode { index, code });
        }
        if !(E4M3_TABLE[code as usize] * scale).is_finite() {
            return Err(CodecError::ScaledNotFinite { index, code, scale });
        }
    }
    Ok(())
}

/// Decodes an `fp8_e4m3` row that [`check_fp8`] accepted: one f32
/// multiply of the exact E4M3 value by the scale.
pub(crate) fn decode_fp8(raw: &[u8], scale: f32, out: &mut [f32]) {
    for (value, &code) in out.iter_mut().zip(raw) {
        *value = E4M3_TABLE[code as usize] * scale;
    }
}

/// Encodes `values` as E4M3FN codes of `value / scale` (one f32 division,
/// then round to nearest even); a quotient beyond E4M3FN's range (above
/// 464 in magnitude, which would round past 448) is refused.
pub(crate) fn encode_fp8(
    encoding: Encoding,
    scale: f32,
    values: &[f32],
    out: &mut [u8],
) -> Result<(), CodecError> {
    check_input(encoding, values)?;
    for (index, (&value, dst)) in values.iter().zip(out.iter_mut()).enumerate() {
        *dst = f32_to_e4m3(value / scale).ok_or(CodecError::OutOfRange {
            encoding,
            index,
            value,
        })?;
    }
    Ok(())
}

/// Refuses an encoder input that is NaN or infinite, naming the first.
pub(crate) fn check_input(encoding: Encoding, values: &[f32]) -> Result<(), CodecError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(index) => Err(CodecError::NonFiniteInput {
            encoding,
            index,
            value: values[index],
        }),
    }
}

/// A row's little-endian 16-bit words.
#[inline(always)]
pub(crate) fn halves(raw: &[u8]) -> impl Iterator<Item = u16> + '_ {
    raw.chunks_exact(2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

/// A row's little-endian 32-bit words.
#[inline(always)]
fn words(raw: &[u8]) -> impl Iterator<Item = u32> + '_ {
    raw.chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}
