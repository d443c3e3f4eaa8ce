//! Property tests: no input makes a codec panic, validation agrees with
//! decoding, and every encodable row264 encodes to the row the spec defines.
// Index loops mirror the formats' index arithmetic (value j, group j / 32).
#![allow(clippy::needless_range_loop)]

mod codec_model;

use codec_model::{e4m3, e5m3, e8m0, exact_values, lloyd_value, naive_encode, LEVELS};
use engram::codec::{encode_row136, transcode_row, CodecError, Encoding, RowsError, ROW_DIM};
use proptest::prelude::*;

const R264: Encoding = Encoding::E4m3E8m0Row264;
const R136: Encoding = Encoding::Lloyd4E5m3Row136;

/// A non-NaN E4M3 code.
fn valid_code() -> impl Strategy<Value = u8> {
    any::<u8>().prop_map(|c| if c & 0x7f == 0x7f { c ^ 1 } else { c })
}

/// A row264 with valid codes (zeros and sign mixes frequent) and scales
/// mostly inside the window where E5M3 can represent the group, sometimes
/// anywhere (never 255).
fn valid_row264() -> impl Strategy<Value = Vec<u8>> {
    let code = prop_oneof![6 => valid_code(), 1 => Just(0u8), 1 => Just(0x80u8)];
    let scale = prop_oneof![8 => 100u8..=140, 1 => 0u8..=254];
    (
        prop::collection::vec(code, 256),
        prop::collection::vec(scale, 8),
    )
        .prop_map(|(mut codes, scales)| {
            codes.extend(scales);
            codes
        })
}

/// Largest E5M3 scale strictly below `s` and smallest at or above `amax`,
/// found by enumerating all 256 bytes.
fn scale_pair(amax: f64) -> Option<(u8, u8)> {
    let up = (0..=255u8)
        .filter(|&b| e5m3(b) >= amax)
        .min_by(|&a, &b| e5m3(a).total_cmp(&e5m3(b)))?;
    let down = (0..=255u8)
        .filter(|&b| e5m3(b) < e5m3(up))
        .max_by(|&a, &b| e5m3(a).total_cmp(&e5m3(b)))?;
    Some((up, down))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(raw in prop::collection::vec(any::<u8>(), 0..600), out_len in 0usize..800) {
        let mut out = vec![0.0f32; out_len];
        let mut bytes = vec![0u8; out_len];
        for encoding in Encoding::ALL {
            let _ = encoding.decode_row(&raw, &mut out);
            let _ = encoding.decode_rows(&raw, &mut out);
            let _ = encoding.check_row(&raw);
            let _ = encoding.copy_raw(&raw, &mut bytes);
            for to in Encoding::ALL {
                let _ = transcode_row(encoding, to, &raw, &mut bytes);
            }
        }
        let _ = encode_row136(&raw, &mut bytes);
    }

    /// Full-length rows of arbitrary bytes: check_row and decode_row agree,
    /// success means every value is finite, failure names a real culprit.
    #[test]
    fn check_agrees_with_decode_on_arbitrary_rows(raw in prop::collection::vec(any::<u8>(), 264)) {
        let mut out = vec![0.0f32; ROW_DIM];
        let decoded = R264.decode_row(&raw, &mut out);
        prop_assert_eq!(R264.check_row(&raw), decoded);
        match decoded {
            Ok(()) => prop_assert!(out.iter().all(|v| v.is_finite())),
            Err(CodecError::NanCode { index, code }) => {
                prop_assert_eq!(raw[index], code);
                prop_assert!(e4m3(code).is_none());
            }
            Err(CodecError::NanScale { group, byte }) => {
                prop_assert_eq!((raw[256 + group], byte), (255, 255));
            }
            Err(CodecError::NotFinite { index, code, scale }) => {
                prop_assert_eq!((raw[index], raw[256 + index / 32]), (code, scale));
                let value = e4m3(code).unwrap() * e8m0(scale).unwrap();
                prop_assert!(value.abs() >= 2f64.powi(128));
            }
            Err(other) => prop_assert!(false, "unexpected {other}"),
        }
        let mut batch = vec![0.0f32; 2 * ROW_DIM];
        let two_rows = [raw.clone(), raw.clone()].concat();
        prop_assert_eq!(
            R264.decode_rows(&two_rows, &mut batch),
            decoded.map_err(|error| RowsError { index: 0, error })
        );
    }

    /// Every row136 byte pattern decodes, to the model's value.
    #[test]
    fn every_row136_decodes(raw in prop::collection::vec(any::<u8>(), 136)) {
        let mut out = vec![0.0f32; ROW_DIM];
        R136.decode_row(&raw, &mut out).unwrap();
        for (j, &value) in out.iter().enumerate() {
            let nibble = (raw[j / 2] >> (4 * (j % 2))) & 15;
            prop_assert_eq!(value.to_bits(), lloyd_value(nibble, raw[128 + j / 32]).to_bits());
        }
    }

    /// Every valid row264 either encodes, or fails exactly when a group's
    /// scales fall outside E5M3; an encoded row matches the literal spec,
    /// picks one of the two scales around amax, the nearest level for that
    /// scale, the better of the two errors, and decodes to level * scale.
    #[test]
    fn valid_rows_encode_as_specified(src in valid_row264()) {
        let values = exact_values(&src);
        if let Some(index) = values.iter().position(|v| v.is_infinite()) {
            let result = encode_row136(&src, &mut [0u8; 136]);
            prop_assert!(matches!(result, Err(CodecError::NotFinite { .. })), "{:?}", result);
            prop_assert_eq!(result.unwrap_err(), R264.check_row(&src).unwrap_err());
            let reported = match result {
                Err(CodecError::NotFinite { index, .. }) => Some(index),
                _ => None,
            };
            prop_assert_eq!(reported, Some(index));
            return Ok(());
        }
        let first_bad_group = (0..8).find(|&g| {
            let amax = values[g * 32..g * 32 + 32].iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
            amax != 0.0 && scale_pair(amax).is_none()
        });
        let mut dst = vec![0u8; 136];
        let result = encode_row136(&src, &mut dst);
        if let Some(group) = first_bad_group {
            let failed_group = match result {
                Err(CodecError::ScaleOutOfRange { group, .. }) => Some(group),
                _ => None,
            };
            prop_assert_eq!(failed_group, Some(group));
            return Ok(());
        }
        prop_assert_eq!(result, Ok(()));
        prop_assert_eq!(Some(dst.clone()), naive_encode(&src));

        let mut out = vec![0.0f32; ROW_DIM];
        R136.decode_row(&dst, &mut out).unwrap();
        for group in 0..8 {
            let v = &values[group * 32..group * 32 + 32];
            let amax = v.iter().fold(0.0f64, |m, x| m.max(f64::from(x.abs())));
            let byte = dst[128 + group];
            if amax == 0.0 {
                prop_assert_eq!(byte, 0);
            } else {
                let (up, down) = scale_pair(amax).unwrap();
                prop_assert!(byte == up || byte == down, "group {}: byte {} not in {:?}", group, byte, (up, down));
                let error = |b: u8| -> f64 {
                    let s = e5m3(b);
                    v.iter().map(|&x| {
                        let x = f64::from(x.abs());
                        LEVELS.iter().map(|&l| (f64::from(l) * s - x).powi(2)).fold(f64::INFINITY, f64::min)
                    }).sum()
                };
                let (chosen, other) = if byte == up { (error(up), error(down)) } else { (error(down), error(up)) };
                prop_assert!(chosen <= other * (1.0 + 1e-4) + 1e-30, "group {}: chosen error {} vs {}", group, chosen, other);
            }
            let s = e5m3(byte);
            for j in 0..32 {
                let index = group * 32 + j;
                let nibble = (dst[index / 2] >> (4 * (index % 2))) & 15;
                prop_assert_eq!(nibble >> 3 == 1, v[j].is_sign_negative());
                if amax != 0.0 {
                    let x = f64::from(v[j].abs()) / s;
                    let mine = (f64::from(LEVELS[usize::from(nibble & 7)]) - x).abs();
                    let best = LEVELS.iter().map(|&l| (f64::from(l) - x).abs()).fold(f64::INFINITY, f64::min);
                    prop_assert!(mine <= best + 1e-6, "value {}: level {} for x = {}", index, nibble & 7, x);
                }
                prop_assert_eq!(out[index].to_bits(), lloyd_value(nibble, byte).to_bits());
            }
        }
    }
}
