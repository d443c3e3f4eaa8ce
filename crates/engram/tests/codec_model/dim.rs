//! An f64 model of the `dim` encodings (bf16, f16, f32, fp8_e4m3, ggml's
//! q8_0 / q5_1 / q4_0 / q4_1, mlx4), written from their definitions: each
//! element located by its own index arithmetic, each value computed in f64
//! (where every product and sum below is exact) and rounded once to f32.
//! `None` where the definition has no finite value.

use super::e4m3;

/// IEEE binary16 from its fields.
pub fn f16(bits: u16) -> Option<f64> {
    let exponent = i32::from((bits >> 10) & 31);
    let mantissa = f64::from(bits & 0x3ff);
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    match exponent {
        31 => None,
        0 => Some(sign * mantissa / 1024.0 * 2f64.powi(-14)),
        _ => Some(sign * (1.0 + mantissa / 1024.0) * 2f64.powi(exponent - 15)),
    }
}

/// BF16 from its fields (the high half of an f32).
pub fn bf16_value(bits: u16) -> Option<f64> {
    let value = f32::from_bits(u32::from(bits) << 16);
    value.is_finite().then_some(f64::from(value))
}

fn le16(raw: &[u8], at: usize) -> u16 {
    u16::from(raw[at]) | u16::from(raw[at + 1]) << 8
}

/// Rounds an exact f64 value to f32; `None` if that overflows.
fn to_f32(x: f64) -> Option<f32> {
    let value = x as f32;
    value.is_finite().then_some(value)
}

/// The 4-bit code of element `j` (0..32) of a ggml block's 16 code bytes:
/// elements 0..16 are the low nibbles, 16..32 the high nibbles.
fn ggml_nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 15
    } else {
        qs[j - 16] >> 4
    }
}

/// A ggml block of `format` ("q8_0", "q4_0", "q4_1", "q5_1") to 32 values.
pub fn ggml_block(format: &str, block: &[u8]) -> Option<Vec<f32>> {
    let d = f16(le16(block, 0))?;
    (0..32)
        .map(|j| match format {
            "q8_0" => to_f32(f64::from(block[2 + j] as i8) * d),
            "q4_0" => to_f32((f64::from(ggml_nibble(&block[2..], j)) - 8.0) * d),
            "q4_1" => {
                let m = f16(le16(block, 2))?;
                to_f32(f64::from(ggml_nibble(&block[4..], j)) * d + m)
            }
            "q5_1" => {
                let m = f16(le16(block, 2))?;
                let qh = u32::from_le_bytes(block[4..8].try_into().unwrap());
                let fifth = (qh >> j) & 1;
                let q = f64::from(ggml_nibble(&block[8..], j)) + 16.0 * f64::from(fifth);
                to_f32(q * d + m)
            }
            _ => panic!("no model for {format}"),
        })
        .collect()
}

/// Bytes per ggml block.
pub fn ggml_block_bytes(format: &str) -> usize {
    match format {
        "q8_0" => 34,
        "q4_0" => 18,
        "q4_1" => 20,
        "q5_1" => 24,
        _ => panic!("no model for {format}"),
    }
}

/// A ggml row: its blocks in order.
pub fn ggml_row(format: &str, raw: &[u8]) -> Option<Vec<f32>> {
    let mut out = Vec::new();
    for block in raw.chunks(ggml_block_bytes(format)) {
        out.extend(ggml_block(format, block)?);
    }
    Some(out)
}

/// An mlx4 row of `dim` values: code of element i is bits 4*(i%8).. of
/// little-endian u32 word i/8; scale and bias of group i/32 are bf16.
pub fn mlx4_row(raw: &[u8], dim: usize) -> Option<Vec<f32>> {
    let words = &raw[..dim / 2];
    let scales = &raw[dim / 2..dim / 2 + dim / 16];
    let biases = &raw[dim / 2 + dim / 16..];
    (0..dim)
        .map(|i| {
            let word = u32::from_le_bytes(words[i / 8 * 4..][..4].try_into().unwrap());
            let code = (word >> (4 * (i % 8))) & 15;
            let scale = bf16_value(le16(scales, i / 32 * 2))?;
            let bias = bf16_value(le16(biases, i / 32 * 2))?;
            // Exact in f64 while the scale's and bias's exponents are within
            // about 40 of each other (the tests' rows keep them so); one
            // rounding to f32 is then what an f32 multiply (exact: 4 x 8
            // significant bits) and an f32 add give.
            to_f32(f64::from(code) * scale + bias)
        })
        .collect()
}

/// A dense row of `format` ("bf16", "f16", "f32").
pub fn dense_row(format: &str, raw: &[u8]) -> Option<Vec<f32>> {
    match format {
        "bf16" => raw
            .chunks(2)
            .map(|b| bf16_value(le16(b, 0)).map(|v| v as f32))
            .collect(),
        "f16" => raw
            .chunks(2)
            .map(|b| f16(le16(b, 0)).map(|v| v as f32))
            .collect(),
        "f32" => raw
            .chunks(4)
            .map(|b| {
                let v = f32::from_le_bytes(b.try_into().unwrap());
                v.is_finite().then_some(v)
            })
            .collect(),
        _ => panic!("no model for {format}"),
    }
}

/// An fp8_e4m3 row under `scale`.
pub fn fp8_row(raw: &[u8], scale: f32) -> Option<Vec<f32>> {
    raw.iter()
        .map(|&code| to_f32(e4m3(code)? * f64::from(scale)))
        .collect()
}
