//! Re-encoding rows: `e4m3_e8m0_32_row264` -> `lloyd4_e5m3_32_r136`, and
//! identity copies.
//!
//! The choices below (candidate scales, f32 distances with ties to the lower
//! level, error summed in f32 in element order, `down` only on a strictly
//! smaller error) follow the reference converter, so a file transcoded here
//! is byte-identical to one it produced.

use super::minifloat::{e5m3_scale, nearest_lloyd, LLOYD4_LEVELS};
use super::{row136, row264, CodecError, Encoding, GROUP, GROUPS, ROW_DIM};

/// An E5M3 scale as `mantissa / 16 * 2^exponent`, mantissa in 8..=15.
/// The exponent is unbounded here so out-of-range candidates can be named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ScaleCandidate {
    mantissa: u32,
    exponent: i32,
}

impl ScaleCandidate {
    /// The smallest 4-bit-mantissa value at or above `amax` (finite, > 0):
    /// frexp mantissa m in [0.5, 1), rounded up to a multiple of 1/16.
    fn round_up(amax: f32) -> ScaleCandidate {
        let (m, exponent) = frexp(amax);
        // m * 16 is exact (a power-of-two scaling) and lies in [8, 16).
        let mantissa = (m * 16.0).ceil() as u32;
        if mantissa == 16 {
            ScaleCandidate {
                mantissa: 8,
                exponent: exponent + 1,
            }
        } else {
            ScaleCandidate { mantissa, exponent }
        }
    }

    /// The next 4-bit-mantissa value below this one.
    fn next_below(self) -> ScaleCandidate {
        if self.mantissa > 8 {
            ScaleCandidate {
                mantissa: self.mantissa - 1,
                ..self
            }
        } else {
            ScaleCandidate {
                mantissa: 15,
                exponent: self.exponent - 1,
            }
        }
    }

    /// The E5M3 byte `E << 3 | M` (E = exponent + 16, M = mantissa - 8), if E
    /// fits in 0..=31.
    fn byte(self) -> Option<u8> {
        let biased = self.exponent + 16;
        (0..=31)
            .contains(&biased)
            .then(|| ((biased as u8) << 3) | (self.mantissa - 8) as u8)
    }
}

/// Splits a positive finite f32 into m in [0.5, 1) and e with x = m * 2^e,
/// subnormals included.
fn frexp(x: f32) -> (f32, i32) {
    let (bits, bias_shift) = if x.to_bits() >> 23 == 0 {
        // Subnormal: scale by 2^32 (exact) so it has a normal exponent field.
        ((x * 4_294_967_296.0).to_bits(), 32)
    } else {
        (x.to_bits(), 0)
    };
    let exponent_field = ((bits >> 23) & 0xff) as i32;
    let m = f32::from_bits((bits & 0x007f_ffff) | (126 << 23));
    (m, exponent_field - 126 - bias_shift)
}

/// One group quantized under one candidate scale.
struct Quantized {
    levels: [u8; GROUP],
    squared_errors: [f32; GROUP],
}

/// Gives each value its nearest level under `scale` and the f32 squared
/// error of its decoded value. No sums here: the loop is elementwise so it
/// vectorizes; the caller sums in element order.
fn quantize(values: &[f32; GROUP], scale: f32) -> Quantized {
    let mut quantized = Quantized {
        levels: [0; GROUP],
        squared_errors: [0.0; GROUP],
    };
    for ((level, squared_error), &value) in quantized
        .levels
        .iter_mut()
        .zip(&mut quantized.squared_errors)
        .zip(values)
    {
        let (index, magnitude) = nearest_lloyd(value.abs() / scale);
        *level = index as u8;
        let difference = (magnitude * scale).copysign(value) - value;
        *squared_error = difference * difference;
    }
    quantized
}

/// Quantizes one 32-value group: fills `levels` (0..=7) and returns the
/// E5M3 scale byte.
fn encode_group(
    group: usize,
    values: &[f32; GROUP],
    levels: &mut [u8; GROUP],
) -> Result<u8, CodecError> {
    let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        // All zeros: scale byte 0, level 0; the signs are kept by the caller.
        *levels = [0; GROUP];
        return Ok(0);
    }
    // The top level is 1.0, so the scale that maps amax onto it is amax itself.
    let up = ScaleCandidate::round_up(amax / LLOYD4_LEVELS[7]);
    let down = up.next_below();
    let out_of_range = CodecError::ScaleOutOfRange { group, amax };
    let (up_byte, down_byte) = (
        up.byte().ok_or(out_of_range)?,
        down.byte().ok_or(out_of_range)?,
    );
    let up_quantized = quantize(values, e5m3_scale(up_byte));
    let down_quantized = quantize(values, e5m3_scale(down_byte));
    // Summed in element order in f32, as the reference does; both sums in
    // one loop so the two dependency chains overlap.
    let (mut up_error, mut down_error) = (0.0f32, 0.0f32);
    for (up_square, down_square) in up_quantized
        .squared_errors
        .iter()
        .zip(&down_quantized.squared_errors)
    {
        up_error += up_square;
        down_error += down_square;
    }
    if down_error < up_error {
        *levels = down_quantized.levels;
        Ok(down_byte)
    } else {
        *levels = up_quantized.levels;
        Ok(up_byte)
    }
}

/// Encodes one `e4m3_e8m0_32_row264` row (`src`, 264 bytes) as a
/// `lloyd4_e5m3_32_r136` row (`dst`, 136 bytes).
///
/// Per 32-value group: the two E5M3 scales around the largest magnitude are
/// tried, each value takes its nearest Lloyd level, and the scale with the
/// smaller squared error wins (the upper one on a tie). A corrupt source row
/// (NaN code, NaN scale, overflow) or a group whose scales fall outside
/// E5M3's range is an error, and `dst` is then left untouched.
pub fn encode_row136(src: &[u8], dst: &mut [u8]) -> Result<(), CodecError> {
    let src: &[u8; row264::ROW_BYTES] = Encoding::E4m3E8m0Row264.raw_row(src)?;
    let actual = dst.len();
    let dst: &mut [u8; row136::ROW_BYTES] =
        dst.try_into().map_err(|_| CodecError::DestinationLength {
            encoding: Encoding::Lloyd4E5m3Row136,
            expected: row136::ROW_BYTES,
            actual,
        })?;
    row264::check(src)?;
    let mut values = [[0.0f32; GROUP]; GROUPS];
    row264::decode_exact(src, &mut values);

    let mut levels = [[0u8; GROUP]; GROUPS];
    let mut scale_bytes = [0u8; GROUPS];
    for (group, ((group_values, group_levels), scale_byte)) in values
        .iter()
        .zip(&mut levels)
        .zip(&mut scale_bytes)
        .enumerate()
    {
        *scale_byte = encode_group(group, group_values, group_levels)?;
    }

    let (codes, scales) = dst.split_at_mut(ROW_DIM / 2);
    let levels = levels.as_flattened();
    let values = values.as_flattened();
    for ((byte, pair_levels), pair_values) in codes
        .iter_mut()
        .zip(levels.chunks_exact(2))
        .zip(values.chunks_exact(2))
    {
        *byte =
            nibble(pair_levels[0], pair_values[0]) | nibble(pair_levels[1], pair_values[1]) << 4;
    }
    scales.copy_from_slice(&scale_bytes);
    Ok(())
}

/// `sign << 3 | level`, the sign taken from the value's sign bit (so -0.0
/// keeps a sign).
fn nibble(level: u8, value: f32) -> u8 {
    u8::from(value.is_sign_negative()) << 3 | level
}

/// Re-encodes one row from `from` to `to`.
///
/// Supported: the identity for either encoding (the row is validated, then
/// copied, so corrupt rows are never passed on) and row264 -> row136 through
/// [`encode_row136`]. row136 -> row264 is not implemented and returns
/// [`CodecError::Unsupported`].
pub fn transcode_row(
    from: Encoding,
    to: Encoding,
    src: &[u8],
    dst: &mut [u8],
) -> Result<(), CodecError> {
    match (from, to) {
        (Encoding::E4m3E8m0Row264, Encoding::Lloyd4E5m3Row136) => encode_row136(src, dst),
        _ if from == to => {
            from.check_row(src)?;
            from.copy_raw(src, dst)
        }
        _ => Err(CodecError::Unsupported { from, to }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frexp_matches_definition() {
        assert_eq!(frexp(1.0), (0.5, 1));
        assert_eq!(frexp(0.75), (0.75, 0));
        assert_eq!(frexp(f32::from_bits(1)), (0.5, -148));
        assert_eq!(frexp(f32::MAX).1, 128);
    }

    #[test]
    fn candidates_round_up_and_step_down() {
        let up = ScaleCandidate::round_up(1.0);
        assert_eq!(
            up,
            ScaleCandidate {
                mantissa: 8,
                exponent: 1
            }
        );
        assert_eq!(
            up.next_below(),
            ScaleCandidate {
                mantissa: 15,
                exponent: 0
            }
        );
        // 0.97 -> m = 0.97, ceil(15.52) = 16 -> carries into the exponent.
        assert_eq!(
            ScaleCandidate::round_up(0.97),
            ScaleCandidate {
                mantissa: 8,
                exponent: 1
            }
        );
        assert_eq!(
            ScaleCandidate::round_up(0.53),
            ScaleCandidate {
                mantissa: 9,
                exponent: 0
            }
        );
        assert_eq!(up.byte(), Some(17 << 3));
        assert_eq!(
            ScaleCandidate {
                mantissa: 8,
                exponent: -17
            }
            .byte(),
            None
        );
        assert_eq!(
            ScaleCandidate {
                mantissa: 15,
                exponent: 15
            }
            .byte(),
            Some(0xff)
        );
        assert_eq!(
            ScaleCandidate {
                mantissa: 8,
                exponent: 16
            }
            .byte(),
            None
        );
    }
}
