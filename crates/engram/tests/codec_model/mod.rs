//! An independent model of the row formats for the codec tests: written from
//! the format definitions in f64 (or as a literal, unoptimized reading of the
//! encoder spec), sharing no code with `engram::codec`.
#![allow(dead_code)]

/// Lloyd codebook magnitudes, as the f32 constants the format defines.
pub const LEVELS: [f32; 8] = [0.0, 0.095, 0.1901, 0.2944, 0.4126, 0.5586, 0.7484, 1.0];

/// E4M3FN from the definition: sign bit 7, exponent bits 6..3 (bias 7),
/// mantissa bits 2..0, exponent 0 subnormal. `None` for the NaN codes.
pub fn e4m3(code: u8) -> Option<f64> {
    if code & 0x7f == 0x7f {
        return None;
    }
    let exponent = i32::from((code >> 3) & 0xf);
    let mantissa = f64::from(code & 7);
    let magnitude = if exponent == 0 {
        mantissa / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + mantissa / 8.0) * 2f64.powi(exponent - 7)
    };
    Some(if code & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    })
}

/// E8M0: 2^(byte - 127); `None` for 255.
pub fn e8m0(byte: u8) -> Option<f64> {
    (byte != 255).then(|| 2f64.powi(i32::from(byte) - 127))
}

/// E5M3 byte E << 3 | M: (8 + M) / 16 * 2^(E - 16).
pub fn e5m3(byte: u8) -> f64 {
    f64::from(8 + (byte & 7)) / 16.0 * 2f64.powi(i32::from(byte >> 3) - 16)
}

/// Rounds `x` (any f64 whose value an f32 could hold, or larger) to BF16 with
/// ties to even, in the value domain: 8 significant bits for normal values,
/// a fixed quantum of 2^-133 below 2^-126. Values that round to 2^128 or more
/// are infinite. The sign of zero is kept.
pub fn bf16(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let magnitude = x.abs();
    let exponent = ((magnitude.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let quantum = 2f64.powi(exponent.max(-126) - 7);
    let rounded = (magnitude / quantum).round_ties_even() * quantum;
    let rounded = if rounded >= 2f64.powi(128) {
        f64::INFINITY
    } else {
        rounded
    };
    rounded.copysign(x)
}

/// The BF16 rounding as the format states it on f32 bits.
pub fn bf16_bits(value: f32) -> f32 {
    let bits = value.to_bits();
    f32::from_bits(bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000)
}

/// What `lloyd4_e5m3_32_r136` decodes nibble `nibble` under scale byte
/// `scale` to: one f32 multiply, the sign, then BF16.
pub fn lloyd_value(nibble: u8, scale: u8) -> f32 {
    let magnitude = LEVELS[usize::from(nibble & 7)] * e5m3(scale) as f32;
    let signed = if nibble & 8 != 0 {
        -magnitude
    } else {
        magnitude
    };
    bf16_bits(signed)
}

/// A row264 with every code `code` and every scale `scale`.
pub fn uniform_row264(code: u8, scale: u8) -> Vec<u8> {
    let mut row = vec![code; 256];
    row.extend([scale; 8]);
    row
}

/// The exact f32 values of a valid row264 (no BF16 rounding).
pub fn exact_values(row: &[u8]) -> Vec<f32> {
    (0..256)
        .map(|i| (e4m3(row[i]).unwrap() * e8m0(row[256 + i / 32]).unwrap()) as f32)
        .collect()
}

/// m in [0.5, 1) and e with x = m * 2^e, by repeated halving/doubling.
fn frexp_slow(x: f32) -> (f32, i32) {
    let (mut m, mut e) = (f64::from(x), 0i32);
    while m >= 1.0 {
        m /= 2.0;
        e += 1;
    }
    while m < 0.5 {
        m *= 2.0;
        e -= 1;
    }
    (m as f32, e)
}

/// The E5M3 byte of `mantissa16 / 16 * 2^e` (mantissa16 in 8..=15), if E fits.
fn e5m3_byte(mantissa16: i32, e: i32) -> Option<u8> {
    ((0..=31).contains(&(e + 16))).then(|| ((e + 16) << 3 | (mantissa16 - 8)) as u8)
}

/// The row264 -> row136 encoder read literally from its specification: full
/// scan of the 8 levels with a strict `<`, errors summed one value at a time
/// with a fused multiply-add (see `add_square` in the encoder for why).
/// `None` when a group has no representable scale pair.
pub fn naive_encode(row: &[u8]) -> Option<Vec<u8>> {
    let values = exact_values(row);
    let mut out = vec![0u8; 136];
    for group in 0..8 {
        let v = &values[group * 32..group * 32 + 32];
        let mut amax = 0.0f32;
        for x in v {
            if x.abs() > amax {
                amax = x.abs();
            }
        }
        let mut idx = [0u8; 32];
        let mut byte = 0u8;
        if amax != 0.0 {
            let (m, e) = frexp_slow(amax);
            let n = (m * 16.0).ceil() as i32;
            let (up_n, up_e) = if n == 16 { (8, e + 1) } else { (n, e) };
            let (down_n, down_e) = if up_n == 8 {
                (15, up_e - 1)
            } else {
                (up_n - 1, up_e)
            };
            let up_byte = e5m3_byte(up_n, up_e)?;
            let down_byte = e5m3_byte(down_n, down_e)?;
            let quantize = |s: f32, idx: &mut [u8; 32]| {
                let mut err = 0.0f32;
                for j in 0..32 {
                    let x = v[j].abs() / s;
                    let mut best = 0;
                    for k in 1..8 {
                        if (LEVELS[k] - x).abs() < (LEVELS[best] - x).abs() {
                            best = k;
                        }
                    }
                    idx[j] = best as u8;
                    let d = (LEVELS[best] * s).copysign(v[j]) - v[j];
                    // `err += d * d` as clang compiles it (contracted to an FMA).
                    err = d.mul_add(d, err);
                }
                err
            };
            let mut idx_down = [0u8; 32];
            let err_up = quantize(e5m3(up_byte) as f32, &mut idx);
            let err_down = quantize(e5m3(down_byte) as f32, &mut idx_down);
            byte = up_byte;
            if err_down < err_up {
                idx = idx_down;
                byte = down_byte;
            }
        }
        for j in 0..32 {
            let k = group * 32 + j;
            let nibble = (u8::from(v[j].is_sign_negative()) << 3) | idx[j];
            out[k / 2] |= nibble << (4 * (k % 2));
        }
        out[128 + group] = byte;
    }
    Some(out)
}

/// SplitMix64, for deterministic test data without extra crates.
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit();
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// The E4M3 code nearest to `x` (ties to the smaller magnitude), by search.
pub fn nearest_e4m3(x: f64) -> u8 {
    let mut best = 0u8;
    for code in 0..=0x7eu8 {
        let value = e4m3(code).unwrap();
        if (value - x.abs()).abs() < (e4m3(best).unwrap() - x.abs()).abs() {
            best = code;
        }
    }
    if x.is_sign_negative() {
        best | 0x80
    } else {
        best
    }
}

/// A realistic row264: Gaussian values of standard deviation `sigma`,
/// quantized the way an FP8 checkpoint is (per-group power-of-two scale so
/// the group's largest magnitude fits under 448).
pub fn gaussian_row264(rng: &mut SplitMix, sigma: f64) -> Vec<u8> {
    let mut row = vec![0u8; 264];
    for group in 0..8 {
        let values: Vec<f64> = (0..32).map(|_| rng.normal() * sigma).collect();
        let amax = values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let exponent = (amax / 448.0).log2().ceil() as i32;
        let scale_byte = (exponent + 127).clamp(0, 254) as u8;
        let scale = e8m0(scale_byte).unwrap();
        for (j, v) in values.iter().enumerate() {
            row[group * 32 + j] = nearest_e4m3(v / scale);
        }
        row[256 + group] = scale_byte;
    }
    row
}

pub mod dim;
