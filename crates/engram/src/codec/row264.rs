//! `e4m3_e8m0_32_row264`: 256 E4M3FN value bytes, then 8 E8M0 scale bytes.
//!
//! value = e4m3(code) * 2^(scale - 127). The product is exact in f32 (4
//! significant bits; the smallest magnitude, 2^-136, is an f32 subnormal with
//! room to spare) unless it overflows, so decoding is one table lookup and
//! one multiply per value, plus the BF16 rounding for the tiny scales where
//! it can change a value.

use super::minifloat::{bf16_round_bits, pow2, E4M3_TABLE, E8M0_TABLE};
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

/// Smallest scale byte from which BF16 rounding changes no product.
///
/// Every E4M3 magnitude is a multiple of 2^-9 with at most 4 significant
/// bits, so under scale byte s every product is a multiple of 2^(s - 136)
/// with at most 4 significant bits. BF16 holds 8 significant bits for normal
/// values and multiples of 2^-133 below 2^-126, so it holds every product
/// exactly once s - 136 >= -133. At s = 2 it does not: 3 * 2^-134 rounds.
const EXACT_IN_BF16_FROM_SCALE: u8 = 3;

/// 2^120, the gap between the biases of E4M3 (7) and f32 (127).
const REBIAS: f32 = pow2(120);

/// The E4M3 value of a non-NaN `code`, from its bits: its exponent and
/// mantissa fields moved into an f32's read as the value times 2^-120
/// (E4M3 subnormals land on f32 subnormals, so they too), and the multiply
/// by [`REBIAS`] is exact. Equal to `E4M3_TABLE[code]` bit for bit (a test
/// checks every code), but a shift and a mask instead of a load, so a
/// row's loop vectorizes: a table lookup per value cannot, and it was
/// most of the cost of delivering f32 rows (callgrind, docs/bench.md).
#[inline(always)]
fn e4m3_from_bits(code: u8) -> f32 {
    let code = u32::from(code);
    f32::from_bits(((code & 0x80) << 24) | ((code & 0x7f) << 20)) * REBIAS
}

/// Decodes a row that [`check`] accepted: BF16-rounded f32 per value.
///
/// Branch-free per value: bit moves, two multiplies and a store. The BF16
/// rounding only runs for groups whose scale byte is below
/// [`EXACT_IN_BF16_FROM_SCALE`]; for all others it is the identity, and
/// skipping it makes the common case about 40% faster.
#[inline]
pub(crate) fn decode_valid(raw: &[u8; ROW_BYTES], out: &mut [f32; ROW_DIM]) {
    let (codes, scales) = raw.split_at(ROW_DIM);
    for ((group_codes, group_out), &scale_byte) in codes
        .chunks_exact(GROUP)
        .zip(out.chunks_exact_mut(GROUP))
        .zip(scales)
    {
        let scale = E8M0_TABLE[scale_byte as usize];
        if scale_byte >= EXACT_IN_BF16_FROM_SCALE {
            for (value, &code) in group_out.iter_mut().zip(group_codes) {
                *value = e4m3_from_bits(code) * scale;
            }
        } else {
            for (value, &code) in group_out.iter_mut().zip(group_codes) {
                let exact = e4m3_from_bits(code) * scale;
                *value = f32::from_bits(bf16_round_bits(exact.to_bits()));
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bit_decode_of_every_non_nan_code_is_the_tables() {
        for code in 0..=255u8 {
            if super::super::minifloat::e4m3_is_nan(code) {
                continue;
            }
            assert_eq!(
                e4m3_from_bits(code).to_bits(),
                E4M3_TABLE[code as usize].to_bits(),
                "code {code:#04x}"
            );
        }
    }
}
