//! The small number formats inside rows: E4M3FN values, E8M0 and E5M3 group
//! scales, the Lloyd 4-bit codebook, BF16 rounding, and the IEEE half and
//! BF16 conversions of the dense and block formats.
//!
//! Every table here is built at compile time from the format definition, so
//! the hot decode loops are plain lookups with no per-value branching.

/// The Lloyd codebook of `lloyd4_e5m3_32_r136`: magnitudes for level index
/// 0..=7 (the sign is a separate bit). These exact f32 constants are what
/// the reference runtime multiplies by.
pub const LLOYD4_LEVELS: [f32; 8] = [0.0, 0.095, 0.1901, 0.2944, 0.4126, 0.5586, 0.7484, 1.0];

/// Smallest E5M3 scale, `(8 + 0) / 16 * 2^(0 - 16)` = 2^-17 (scale byte 0x00).
pub const E5M3_MIN_SCALE: f32 = pow2(-17);

/// Largest E5M3 scale, `(8 + 7) / 16 * 2^(31 - 16)` = 30720 (scale byte 0xff).
pub const E5M3_MAX_SCALE: f32 = 30720.0;

/// Exactly 2^exp for exp in -149..=127 (f32 subnormals included), built from
/// bits so it is usable in const tables.
pub(crate) const fn pow2(exp: i32) -> f32 {
    if exp >= -126 {
        f32::from_bits(((exp + 127) as u32) << 23)
    } else {
        f32::from_bits(1u32 << (exp + 149))
    }
}

/// True for the two E4M3FN NaN encodings (0x7f and 0xff); E4M3FN has no infinity.
pub const fn e4m3_is_nan(code: u8) -> bool {
    code & 0x7f == 0x7f
}

/// The E4M3FN value of `code` (sign bit 7, 4 exponent bits with bias 7,
/// 3 mantissa bits; exponent 0 is subnormal). NaN codes give f32 NaN.
const fn e4m3_value(code: u8) -> f32 {
    if e4m3_is_nan(code) {
        return f32::NAN;
    }
    let exponent = ((code >> 3) & 15) as i32;
    let mantissa = (code & 7) as u32;
    // mantissa / 8 * 2^-6 for subnormals, (8 + mantissa) / 8 * 2^(exponent - 7)
    // otherwise: both products are exact in f32.
    let magnitude = if exponent == 0 {
        mantissa as f32 * pow2(-9)
    } else {
        (8 + mantissa) as f32 * pow2(exponent - 10)
    };
    if code & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

const fn build_e4m3_table() -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut code = 0;
    while code < 256 {
        table[code] = e4m3_value(code as u8);
        code += 1;
    }
    table
}

const fn build_e8m0_table() -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut byte = 0;
    while byte < 255 {
        table[byte] = pow2(byte as i32 - 127);
        byte += 1;
    }
    // Scale byte 255 is E8M0's NaN: it poisons every product it touches, which
    // is how the decoder notices it without a branch.
    table[255] = f32::NAN;
    table
}

const fn build_e5m3_table() -> [f32; 256] {
    let mut table = [0.0f32; 256];
    let mut byte = 0;
    while byte < 256 {
        // (8 + M) / 16 * 2^(E - 16) = (8 + M) * 2^(E - 20): exact in f32.
        table[byte] = (8 + (byte & 7)) as f32 * pow2((byte >> 3) as i32 - 20);
        byte += 1;
    }
    table
}

/// E4M3FN code -> f32 value; NaN at the NaN codes.
pub(crate) static E4M3_TABLE: [f32; 256] = build_e4m3_table();

/// E8M0 scale byte -> 2^(byte - 127); NaN at 255.
pub(crate) static E8M0_TABLE: [f32; 256] = build_e8m0_table();

/// E5M3 scale byte -> (8 + M) / 16 * 2^(E - 16).
pub(crate) static E5M3_TABLE: [f32; 256] = build_e5m3_table();

/// The value of every E4M3FN code, indexed by code; the NaN codes
/// (`code & 0x7f == 0x7f`) hold f32 NaN. Useful to callers that build their
/// own decode kernels (for example on a GPU).
pub fn e4m3_table() -> &'static [f32; 256] {
    &E4M3_TABLE
}

/// The E4M3FN value of `code`, or `None` for a NaN code.
pub fn e4m3_to_f32(code: u8) -> Option<f32> {
    (!e4m3_is_nan(code)).then(|| E4M3_TABLE[code as usize])
}

/// The E8M0 scale 2^(byte - 127), or `None` for byte 255 (NaN).
/// Byte 0 is 2^-127, an f32 subnormal, represented exactly.
pub fn e8m0_scale(byte: u8) -> Option<f32> {
    (byte != 255).then(|| E8M0_TABLE[byte as usize])
}

/// The E5M3 scale of byte `E << 3 | M`: `(8 + M) / 16 * 2^(E - 16)`, exact.
/// Every byte is valid: 0x00 is 2^-17, 0xff is 30720.
pub fn e5m3_scale(byte: u8) -> f32 {
    E5M3_TABLE[byte as usize]
}

/// Rounds f32 bits to BF16 (round to nearest, ties to even) and returns them
/// as f32 bits with the low 16 bits clear: `bits + 0x7fff + ((bits >> 16) & 1)`,
/// high half kept. The add wraps rather than panics; only NaNs with the top
/// payload bits set could wrap, and the decoders never return NaNs.
#[inline(always)]
pub fn bf16_round_bits(bits: u32) -> u32 {
    bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000
}

/// Rounds `value` to the nearest BF16 (ties to even) and returns it as f32.
/// Finite values near f32::MAX round to infinity, as BF16 would.
#[inline(always)]
pub fn bf16_round(value: f32) -> f32 {
    f32::from_bits(bf16_round_bits(value.to_bits()))
}

/// The exact f32 value of IEEE binary16 bits (1 sign, 5 exponent bits with
/// bias 15, 10 mantissa bits); every half is an f32, subnormals included.
/// Infinities and NaNs map to the f32 ones (callers check for them first).
#[inline(always)]
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exponent = u32::from(bits >> 10) & 0x1f;
    let mantissa = u32::from(bits & 0x3ff);
    let magnitude = match exponent {
        // mantissa * 2^-24: exact (at most 10 significant bits).
        0 => mantissa as f32 * pow2(-24),
        31 => f32::from_bits(0x7f80_0000 | mantissa << 13),
        // The fields moved into an f32's, exponent rebiased from 15 to 127.
        _ => f32::from_bits((exponent + 112) << 23 | mantissa << 13),
    };
    f32::from_bits(magnitude.to_bits() | sign)
}

/// True when half bits are an infinity or a NaN (exponent field all ones).
#[inline(always)]
pub const fn f16_is_non_finite(bits: u16) -> bool {
    bits & 0x7c00 == 0x7c00
}

/// The half nearest `value` (ties to even), as bits; values at or beyond
/// 65520 in magnitude round to infinity, NaN stays a (quiet) NaN. This is
/// the conversion ggml's `GGML_FP32_TO_FP16` performs (F16C `vcvtps2ph`
/// with round-to-nearest-even, or its software fallback).
pub fn f32_to_f16(value: f32) -> u16 {
    let bits = value.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let magnitude = bits & 0x7fff_ffff;
    if magnitude > 0x7f80_0000 {
        return sign | 0x7e00;
    }
    // Below 2^-14 (f32 bits 0x3880_0000) the half is subnormal: a multiple
    // of 2^-24. magnitude = m * 2^(e - 150) with the implicit bit in m, so
    // the half mantissa is m * 2^(e - 126), rounded.
    let (truncated, dropped_bits, dropped) = if magnitude < 0x3880_0000 {
        let e = magnitude >> 23;
        if e < 102 {
            // Below 2^-25: at most half of the smallest subnormal. Exactly
            // 2^-25 (e = 102, m = 2^23) is handled below as a tie to 0.
            return sign;
        }
        let m = (magnitude & 0x007f_ffff) | 0x0080_0000;
        let shift = 126 - e; // 14..=24
        (m >> shift, shift, m & ((1 << shift) - 1))
    } else {
        // Normal: drop 13 mantissa bits and rebias the exponent; a carry out
        // of the mantissa moves into the exponent, up to infinity (0x7c00).
        let rebiased = (magnitude >> 13).saturating_sub((127 - 15) << 10);
        if rebiased >= 0x7c00 {
            return sign | 0x7c00;
        }
        (rebiased, 13, magnitude & 0x1fff)
    };
    let half = 1u32 << (dropped_bits - 1);
    let round_up = dropped > half || (dropped == half && truncated & 1 == 1);
    let rounded = (truncated + u32::from(round_up)).min(0x7c00);
    sign | rounded as u16
}

/// The f32 value of BF16 bits: the high half of an f32, exact.
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// True when BF16 bits are an infinity or a NaN.
#[inline(always)]
pub const fn bf16_is_non_finite(bits: u16) -> bool {
    bits & 0x7f80 == 0x7f80
}

/// The BF16 nearest `value` (ties to even), as bits; see [`bf16_round_bits`].
#[inline(always)]
pub fn f32_to_bf16(value: f32) -> u16 {
    if value.is_nan() {
        return ((value.to_bits() >> 16) as u16) | 0x0040;
    }
    (bf16_round_bits(value.to_bits()) >> 16) as u16
}

/// The E4M3FN code nearest `value` (ties to the even code), or `None` when
/// `value` is NaN or its magnitude is above 464, the midpoint between 448
/// (the largest finite E4M3FN value) and 480 (which would be the NaN code):
/// E4M3FN has no infinity to round to. A tie at 464 goes to 448 (even).
pub fn f32_to_e4m3(value: f32) -> Option<u8> {
    let magnitude = value.abs();
    if magnitude.is_nan() || magnitude > 464.0 {
        return None;
    }
    // Codes 0x00..=0x7e are the non-negative finite values in ascending
    // order: find the last one at or below the magnitude, then compare it
    // with the next one up.
    let finite = &E4M3_TABLE[..0x7f];
    let below = finite.partition_point(|&v| v <= magnitude) - 1;
    let code = if below == 0x7e {
        0x7e
    } else {
        let (low, high) = (finite[below], finite[below + 1]);
        let (to_low, to_high) = (magnitude - low, high - magnitude);
        if to_high < to_low || (to_high == to_low && below & 1 == 1) {
            below + 1
        } else {
            below
        }
    };
    Some(code as u8 | if value.is_sign_negative() { 0x80 } else { 0 })
}

/// Index of the Lloyd level nearest to `x` (a magnitude already divided by
/// its scale, so `x >= 0`). Distances are compared in f32 and ties go to the
/// lower index, which is what makes transcoded files byte-identical to the
/// reference converter's.
///
/// The reference scans all 8 levels for the first smallest `|level - x|`.
/// Because the levels are at least 0.095 apart, the computed distances fall
/// strictly on each side of `x`, so only the two levels around `x` can win:
/// find them with a branch-free count, then compare those two exactly.
#[inline]
pub fn nearest_lloyd_level(x: f32) -> u8 {
    nearest_lloyd(x).0 as u8
}

/// [`nearest_lloyd_level`] as (index, level value), written with selects
/// only so loops over a group vectorize.
#[inline(always)]
pub(crate) fn nearest_lloyd(x: f32) -> (u32, f32) {
    // Levels ascend, so the last level <= x is the one below x and the
    // smallest level > x is the one above; 1.0 stands in when none is above.
    let mut below_index = 0u32;
    let mut below = LLOYD4_LEVELS[0];
    let mut above = LLOYD4_LEVELS[7];
    for &level in &LLOYD4_LEVELS[1..] {
        let at_or_below = level <= x;
        below_index += u32::from(at_or_below);
        below = if at_or_below { level } else { below };
        above = if at_or_below { above } else { above.min(level) };
    }
    if (above - x).abs() < (below - x).abs() {
        (below_index + 1, above)
    } else {
        (below_index, below)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_covers_subnormals_and_normals() {
        assert_eq!(pow2(0), 1.0);
        assert_eq!(pow2(-126), f32::MIN_POSITIVE);
        assert_eq!(pow2(-149).to_bits(), 1);
        assert_eq!(pow2(127), 2f32.powi(127));
    }

    #[test]
    fn e4m3_landmarks() {
        assert_eq!(E4M3_TABLE[0x00], 0.0);
        assert!(E4M3_TABLE[0x80].is_sign_negative() && E4M3_TABLE[0x80] == 0.0);
        assert_eq!(E4M3_TABLE[0x01], 2f32.powi(-9));
        assert_eq!(E4M3_TABLE[0x38], 1.0);
        assert_eq!(E4M3_TABLE[0x7e], 448.0);
        assert_eq!(E4M3_TABLE[0xfe], -448.0);
        assert!(E4M3_TABLE[0x7f].is_nan() && E4M3_TABLE[0xff].is_nan());
    }

    #[test]
    fn scale_tables_edges() {
        assert_eq!(E8M0_TABLE[127], 1.0);
        assert_eq!(E8M0_TABLE[0].to_bits(), 1 << 22);
        assert_eq!(E8M0_TABLE[254], 2f32.powi(127));
        assert!(E8M0_TABLE[255].is_nan());
        assert_eq!(E5M3_TABLE[0], E5M3_MIN_SCALE);
        assert_eq!(E5M3_TABLE[255], E5M3_MAX_SCALE);
        assert_eq!(E5M3_TABLE[16 << 3], 0.5);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_round_bits(0x3f80_8000), 0x3f80_0000); // tie, even stays
        assert_eq!(bf16_round_bits(0x3f81_8000), 0x3f82_0000); // tie, odd rounds up
        assert_eq!(bf16_round_bits(0x3f80_8001), 0x3f81_0000);
        assert_eq!(bf16_round_bits(0x7f7f_ffff), 0x7f80_0000); // f32::MAX -> inf
        assert_eq!(bf16_round_bits(0x7fc0_0000), 0x7fc0_0000); // quiet NaN stays NaN
        assert_eq!(bf16_round_bits(0xffc0_0000), 0xffc0_0000);
        assert_eq!(bf16_round_bits(0x0000_8000), 0); // smallest subnormal tie -> 0
        assert_eq!(bf16_round_bits(0x8001_8000), 0x8002_0000); // negative subnormal
    }

    /// Every half widens to the value its fields define (computed in f64),
    /// and converting it back gives the same bits (NaNs stay NaN).
    #[test]
    fn every_half_widens_exactly_and_round_trips() {
        for bits in 0..=u16::MAX {
            let value = f16_to_f32(bits);
            let exponent = i32::from((bits >> 10) & 31);
            let mantissa = f64::from(bits & 0x3ff);
            let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
            match exponent {
                31 if mantissa == 0.0 => assert_eq!(f64::from(value), sign * f64::INFINITY),
                31 => assert!(value.is_nan() && f32_to_f16(value) & 0x7fff > 0x7c00),
                _ => {
                    let expected = if exponent == 0 {
                        mantissa * 2f64.powi(-24)
                    } else {
                        (1024.0 + mantissa) * 2f64.powi(exponent - 25)
                    };
                    assert_eq!(f64::from(value), sign * expected, "{bits:#06x}");
                    assert_eq!(f32_to_f16(value), bits, "{bits:#06x}");
                }
            }
        }
    }

    /// Between two neighbouring halves: the midpoint (exact in f32) goes to
    /// the even one, a hair either side to the nearer one.
    #[test]
    fn f16_rounding_is_to_nearest_even() {
        for bits in 0..0x7bffu16 {
            let (low, high) = (f16_to_f32(bits), f16_to_f32(bits + 1));
            let mid = ((f64::from(low) + f64::from(high)) / 2.0) as f32;
            assert_eq!(f64::from(mid), (f64::from(low) + f64::from(high)) / 2.0);
            let even = if bits & 1 == 0 { bits } else { bits + 1 };
            assert_eq!(f32_to_f16(mid), even, "midpoint above {bits:#06x}");
            assert_eq!(f32_to_f16(-mid), even | 0x8000);
            assert_eq!(f32_to_f16(f32::from_bits(mid.to_bits() - 1)), bits);
            assert_eq!(f32_to_f16(f32::from_bits(mid.to_bits() + 1)), bits + 1);
        }
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65519.99), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00); // the tie goes to "even" infinity
        assert_eq!(f32_to_f16(1e30), 0x7c00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0); // tie with the smallest subnormal
        assert_eq!(f32_to_f16(f32::from_bits(2f32.powi(-25).to_bits() + 1)), 1);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(f32::from_bits(1)), 0);
    }

    #[test]
    fn bf16_conversions() {
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
        assert!(bf16_is_non_finite(f32_to_bf16(f32::NAN)));
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert!(!bf16_is_non_finite(0x7f7f) && bf16_is_non_finite(0xff80));
    }

    /// Each finite E4M3 value encodes to its own code; midpoints go to the
    /// even code; beyond 464 is refused.
    #[test]
    fn e4m3_encoding_is_nearest_even() {
        for code in 0..=255u8 {
            if e4m3_is_nan(code) {
                continue;
            }
            let value = E4M3_TABLE[code as usize];
            assert_eq!(f32_to_e4m3(value), Some(code), "{code:#04x}");
        }
        for code in 0..0x7eu8 {
            let (low, high) = (E4M3_TABLE[code as usize], E4M3_TABLE[code as usize + 1]);
            let mid = (low + high) / 2.0;
            let even = if code & 1 == 0 { code } else { code + 1 };
            assert_eq!(f32_to_e4m3(mid), Some(even), "midpoint above {code:#04x}");
            assert_eq!(f32_to_e4m3(-mid), Some(even | 0x80));
            assert_eq!(
                f32_to_e4m3(f32::from_bits(mid.to_bits() + 1)),
                Some(code + 1)
            );
        }
        assert_eq!(f32_to_e4m3(464.0), Some(0x7e));
        assert_eq!(f32_to_e4m3(-460.0), Some(0xfe));
        assert_eq!(f32_to_e4m3(464.1), None);
        assert_eq!(f32_to_e4m3(f32::INFINITY), None);
        assert_eq!(f32_to_e4m3(f32::NAN), None);
    }
}
