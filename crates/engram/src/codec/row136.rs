//! `lloyd4_e5m3_32_r136`: 128 bytes of 4-bit codes, then 8 E5M3 scale bytes.
//!
//! Element 2i sits in the low nibble of byte i, element 2i+1 in the high
//! nibble; a nibble is `sign << 3 | level`. value = copysign(level * scale)
//! with one f32 multiply, then BF16 rounding. Every byte pattern is valid: the
//! largest magnitude is 1.0 * 30720.

use super::minifloat::{bf16_round, E5M3_TABLE, LLOYD4_LEVELS};
use super::{GROUP, ROW_DIM};

/// Bytes per row.
pub(crate) const ROW_BYTES: usize = ROW_DIM / 2 + ROW_DIM / GROUP;

/// Code bytes per 32-value group.
const GROUP_CODE_BYTES: usize = GROUP / 2;

/// The 16 decoded values a group's nibbles can take under `scale`.
#[inline]
fn group_values(scale: f32) -> [f32; 16] {
    let mut values = [0.0f32; 16];
    for (nibble, value) in values.iter_mut().enumerate() {
        let magnitude = LLOYD4_LEVELS[nibble & 7] * scale;
        let signed = if nibble & 8 != 0 {
            -magnitude
        } else {
            magnitude
        };
        *value = bf16_round(signed);
    }
    values
}

/// Decodes one row to BF16-rounded f32. Infallible: every byte is valid.
///
/// Per group, the 16 possible outputs are computed once (16 multiplies
/// instead of 32), then each code byte is two table lookups.
pub(crate) fn decode(raw: &[u8; ROW_BYTES], out: &mut [f32; ROW_DIM]) {
    let (codes, scales) = raw.split_at(ROW_DIM / 2);
    for ((group_codes, group_out), &scale) in codes
        .chunks_exact(GROUP_CODE_BYTES)
        .zip(out.chunks_exact_mut(GROUP))
        .zip(scales)
    {
        let values = group_values(E5M3_TABLE[scale as usize]);
        for (pair, &byte) in group_out.chunks_exact_mut(2).zip(group_codes) {
            pair[0] = values[(byte & 15) as usize];
            pair[1] = values[(byte >> 4) as usize];
        }
    }
}
