//! `e4m3_e8m0_32_row264`: 256 E4M3FN value bytes, then 8 E8M0 scale bytes.
//!
//! value = e4m3(code) * 2^(scale - 127). The product is exact in f32 (4
//! significant bits; the smallest magnitude, 2^-136, is an f32 subnormal with
//! room to spare) unless it overflows, so decoding is one table lookup, one
//! multiply and the BF16 rounding per value.

use super::minifloat::{bf16_round_bits, E4M3_TABLE, E8M0_TABLE};
use super::{CodecError, GROUP, GROUPS, ROW_DIM};

/// Bytes per row.
pub(crate) const ROW_BYTES: usize = ROW_DIM + ROW_DIM / GROUP;

/// Bits of an f32 with the sign cleared at or above which it is inf or NaN.
const NON_FINITE: u32 = 0x7f80_0000;

/// Validates a row: no NaN code, no NaN scale, no overflow.
///
/// Fast path: E4M3 magnitudes grow with `code & 0x7f`, so a group overflows
/// or holds a NaN code exactly when its largest masked code times its scale
/// is not finite. That is one vectorizable max per group and one multiply;
/// the value-by-value scan only runs to name the culprit of a bad row.
pub(crate) fn check(raw: &[u8; ROW_BYTES]) -> Result<(), CodecError> {
    let (codes, scales) = raw.split_at(ROW_DIM);
    let mut worst = 0u32;
    for (group_codes, &scale) in codes.chunks_exact(GROUP).zip(scales) {
        let largest = group_codes.iter().fold(0u8, |m, &c| m.max(c & 0x7f));
        let bound = E4M3_TABLE[largest as usize] * E8M0_TABLE[scale as usize];
        worst = worst.max(bound.to_bits() & 0x7fff_ffff);
    }
    if worst >= NON_FINITE {
        return locate_corruption(raw);
    }
    Ok(())
}

/// The first value (in row order) that does not decode to a finite number,
/// and why. Uses the same arithmetic as [`decode_valid`], so it agrees with it.
fn locate_corruption(raw: &[u8; ROW_BYTES]) -> Result<(), CodecError> {
    let (codes, scales) = raw.split_at(ROW_DIM);
    for (index, &code) in codes.iter().enumerate() {
        let group = index / GROUP;
        let scale = scales[group];
        let bits =
            bf16_round_bits((E4M3_TABLE[code as usize] * E8M0_TABLE[scale as usize]).to_bits());
        if bits & 0x7fff_ffff < NON_FINITE {
            continue;
        }
        return Err(if super::minifloat::e4m3_is_nan(code) {
            CodecError::NanCode { index, code }
        } else if scale == 255 {
            CodecError::NanScale { group, byte: scale }
        } else {
            CodecError::NotFinite { index, code, scale }
        });
    }
    Ok(())
}

/// Decodes a row that [`check`] accepted: BF16-rounded f32 per value.
///
/// Branch-free: a lookup, a multiply, the rounding adds and a store per value.
#[inline]
pub(crate) fn decode_valid(raw: &[u8; ROW_BYTES], out: &mut [f32; ROW_DIM]) {
    let (codes, scales) = raw.split_at(ROW_DIM);
    for ((group_codes, group_out), &scale) in codes
        .chunks_exact(GROUP)
        .zip(out.chunks_exact_mut(GROUP))
        .zip(scales)
    {
        let scale = E8M0_TABLE[scale as usize];
        for (value, &code) in group_out.iter_mut().zip(group_codes) {
            let exact = E4M3_TABLE[code as usize] * scale;
            *value = f32::from_bits(bf16_round_bits(exact.to_bits()));
        }
    }
}

/// Decodes a row that [`check`] accepted to exact f32 (no BF16 rounding),
/// group by group: the input of the 136-byte encoder.
pub(crate) fn decode_exact(raw: &[u8; ROW_BYTES], out: &mut [[f32; GROUP]; GROUPS]) {
    let (codes, scales) = raw.split_at(ROW_DIM);
    for ((group_codes, group_out), &scale) in codes.chunks_exact(GROUP).zip(out).zip(scales) {
        let scale = E8M0_TABLE[scale as usize];
        for (value, &code) in group_out.iter_mut().zip(group_codes) {
            *value = E4M3_TABLE[code as usize] * scale;
        }
    }
}

/// Checks then decodes one row; `out` is untouched when the row is corrupt.
pub(crate) fn decode(raw: &[u8; ROW_BYTES], out: &mut [f32; ROW_DIM]) -> Result<(), CodecError> {
    check(raw)?;
    decode_valid(raw, out);
    Ok(())
}
