//! Decoding both row encodings, checked against an independent f64 model of
//! the formats, with hand-built rows for every edge the formats have.
// Index loops mirror the formats' index arithmetic (value j, group j / 32).
#![allow(clippy::needless_range_loop)]

mod codec_model;

use codec_model::{bf16, e4m3, e5m3, e8m0, lloyd_value, uniform_row264};
use engram::codec::{CodecError, Encoding, RowsError, ROW_DIM};

const R264: Encoding = Encoding::E4m3E8m0Row264;
const R136: Encoding = Encoding::Lloyd4E5m3Row136;

fn decode(encoding: Encoding, raw: &[u8]) -> Result<Vec<f32>, CodecError> {
    let mut out = vec![f32::NAN; ROW_DIM];
    encoding.decode_row(raw, &mut out).map(|()| out)
}

/// Every E4M3 code under every E8M0 scale, one code per row at value index
/// `code` (so all 8 groups and both nibble halves of the row are exercised),
/// against e4m3(code) * 2^(scale - 127) rounded to BF16 in f64.
#[test]
fn every_code_under_every_scale_matches_the_f64_model() {
    let mut checked = 0;
    for scale in 0..=254u8 {
        for code in 0..=255u8 {
            let index = usize::from(code);
            let mut row = uniform_row264(0, scale);
            row[index] = code;
            let result = decode(R264, &row);
            let Some(value) = e4m3(code) else {
                assert_eq!(result, Err(CodecError::NanCode { index, code }));
                continue;
            };
            let expected = bf16(value * e8m0(scale).unwrap());
            if expected.is_infinite() {
                assert_eq!(result, Err(CodecError::NotFinite { index, code, scale }));
                assert_eq!(R264.check_row(&row), result.map(|_| ()));
                continue;
            }
            let out = result.unwrap_or_else(|e| panic!("code {code:#x} scale {scale}: {e}"));
            assert_eq!(
                out[index].to_bits(),
                (expected as f32).to_bits(),
                "code {code:#04x} scale {scale}: got {:e}, want {expected:e}",
                out[index]
            );
            assert!(out
                .iter()
                .enumerate()
                .all(|(i, v)| i == index || v.to_bits() == 0));
            checked += 1;
        }
    }
    // 254 non-NaN codes x 255 scales, minus the overflowing combinations.
    assert!(
        checked > 60_000,
        "only {checked} finite combinations checked"
    );
}

#[test]
fn e4m3_landmarks_decode_exactly() {
    let cases = [
        (0x38, 1.0),         // exponent 7, bias 7
        (0x7e, 448.0),       // largest E4M3FN
        (0xfe, -448.0),      // and its negative
        (0x01, 0.001953125), // smallest subnormal 2^-9
        (0x08, 0.015625),    // smallest normal 2^-6
        (0x07, 0.013671875), // largest subnormal 7/8 * 2^-6
    ];
    for (code, want) in cases {
        let out = decode(R264, &uniform_row264(code, 127)).unwrap();
        assert!(out.iter().all(|&v| v == want), "code {code:#04x}");
    }
    let negative_zero = decode(R264, &uniform_row264(0x80, 127)).unwrap();
    assert!(negative_zero.iter().all(|v| v.to_bits() == 0x8000_0000));
}

#[test]
fn nan_codes_are_errors_naming_the_value() {
    for code in [0x7f, 0xff] {
        let mut row = uniform_row264(0x38, 127);
        row[17] = code;
        let err = decode(R264, &row).unwrap_err();
        assert_eq!(err, CodecError::NanCode { index: 17, code });
        assert_eq!(R264.check_row(&row), Err(err));
    }
    let mut row = uniform_row264(0, 127);
    row[17] = 0x7f;
    assert_eq!(
        R264.check_row(&row).unwrap_err().to_string(),
        "value 17: E4M3 code 0x7f is NaN"
    );
}

#[test]
fn scale_255_is_an_error_naming_the_group() {
    // A zero code under a NaN scale is still corrupt: the reference rejects
    // the scale byte, whatever the values.
    let mut row = uniform_row264(0, 127);
    row[256 + 3] = 255;
    let err = decode(R264, &row).unwrap_err();
    assert_eq!(
        err,
        CodecError::NanScale {
            group: 3,
            byte: 255
        }
    );
    assert_eq!(err.to_string(), "group 3: E8M0 scale 255 is NaN");
    // The earliest bad value is the one reported.
    row[40] = 0xff;
    assert_eq!(
        R264.check_row(&row),
        Err(CodecError::NanCode {
            index: 40,
            code: 0xff
        })
    );
}

#[test]
fn overflow_to_infinity_is_an_error() {
    // At scale 2^127 (byte 254), 1.875 is the largest finite value and 2.0
    // overflows.
    let mut row = uniform_row264(0x3f, 254);
    assert!(decode(R264, &row)
        .unwrap()
        .iter()
        .all(|&v| v == 1.875 * 2f32.powi(127)));
    row[5] = 0x40;
    let err = decode(R264, &row).unwrap_err();
    assert_eq!(
        err,
        CodecError::NotFinite {
            index: 5,
            code: 0x40,
            scale: 254
        }
    );
    assert_eq!(
        err.to_string(),
        "value 5 decodes to inf (E4M3 code 0x40 times 2^127)"
    );
    row[5] = 0xfe;
    assert!(decode(R264, &row).unwrap_err().to_string().contains("-inf"));
}

/// Results below 2^-126 are f32 subnormals carrying more bits than BF16
/// keeps: rounding to nearest even applies there too.
#[test]
fn subnormal_results_round_to_nearest_even_bf16() {
    let cases: [(u8, u8, u32); 6] = [
        (0x01, 0, 0x0000_0000), // 2^-136: far below half a BF16 step -> +0
        (0x81, 0, 0x8000_0000), // and its negative -> -0
        (0x01, 3, 0x0001_0000), // 2^-133: the smallest BF16 subnormal, exact
        (0x03, 2, 0x0002_0000), // 3 * 2^-134 = 1.5 steps: tie, rounds up to even 2
        (0x0a, 1, 0x0002_0000), // 5 * 2^-134 = 2.5 steps: tie, rounds down to even 2
        (0x0b, 1, 0x0003_0000), // 5.5 * 2^-134 = 2.75 steps -> 3
    ];
    for (code, scale, bits) in cases {
        let mut row = uniform_row264(0, scale);
        row[200] = code;
        let out = decode(R264, &row).unwrap();
        assert_eq!(out[200].to_bits(), bits, "code {code:#04x} scale {scale}");
    }
}

#[test]
fn lloyd_nibble_order_low_nibble_first() {
    let mut row = vec![0u8; 136];
    row[0] = 0x21; // element 0: level 1, element 1: level 2
    row[127] = 0x7f; // element 254: level 7, negative; element 255: level 7
    row[128..].fill(16 << 3); // scale 0.5
    let out = decode(R136, &row).unwrap();
    assert_eq!(out[0], lloyd_value(0x1, 16 << 3));
    assert_eq!(out[1], lloyd_value(0x2, 16 << 3));
    assert_eq!(out[254], -0.5);
    assert_eq!(out[255], 0.5);
    assert!(out[2..254].iter().all(|v| v.to_bits() == 0));
    assert!(out[0] > 0.0 && out[1] > out[0]);
}

#[test]
fn lloyd_sign_bit_gives_negative_values_and_negative_zero() {
    let mut row = vec![0x88u8; 136];
    row[128..].fill(0xff);
    let out = decode(R136, &row).unwrap();
    assert!(out.iter().all(|v| v.to_bits() == 0x8000_0000));
    row[..128].fill(0xfd); // low: sign + level 5, high: sign + level 7
    let out = decode(R136, &row).unwrap();
    assert_eq!(out[0], lloyd_value(0xd, 0xff));
    assert!(out[0] < 0.0);
    assert_eq!(out[1], -30720.0);
}

/// Every nibble under every scale byte, 0x00 and 0xff included.
#[test]
fn lloyd_every_nibble_under_every_scale() {
    for first_scale in (0..=255u8).step_by(8) {
        let mut row = vec![0u8; 136];
        for i in 0..128 {
            let nibble = (i % 16) as u8;
            row[i] = nibble | (15 - nibble) << 4;
        }
        for group in 0..8 {
            row[128 + group] = first_scale + group as u8;
        }
        assert_eq!(R136.check_row(&row), Ok(()));
        let out = decode(R136, &row).unwrap();
        for (j, &value) in out.iter().enumerate() {
            let byte = row[j / 2];
            let nibble = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
            let scale = row[128 + j / 32];
            assert_eq!(value.to_bits(), lloyd_value(nibble, scale).to_bits());
        }
    }
}

#[test]
fn e5m3_scale_edges() {
    assert_eq!(e5m3(0x00), 2f64.powi(-17));
    assert_eq!(e5m3(0xff), 30720.0);
    assert_eq!(f64::from(engram::codec::e5m3_scale(0x00)), e5m3(0x00));
    assert_eq!(f64::from(engram::codec::e5m3_scale(0xff)), e5m3(0xff));
    let mut row = vec![0x77u8; 136]; // level 7 everywhere
    row[128] = 0x00;
    row[135] = 0xff;
    let out = decode(R136, &row).unwrap();
    assert_eq!(out[0], 2f32.powi(-17));
    assert_eq!(out[255], 30720.0);
}

#[test]
fn wrong_lengths_are_errors_not_panics() {
    let mut out = vec![0.0f32; ROW_DIM];
    assert_eq!(
        R264.decode_row(&[0; 263], &mut out),
        Err(CodecError::RawLength {
            encoding: R264,
            expected: 264,
            actual: 263
        })
    );
    assert_eq!(
        R136.decode_row(&[0; 136], &mut out[..255]),
        Err(CodecError::OutputLength {
            expected: 256,
            actual: 255
        })
    );
    assert!(R136.check_row(&[0; 264]).is_err());
    let mut raw_out = [0u8; 135];
    assert!(R136.copy_raw(&[0; 136], &mut raw_out).is_err());
    let err = R264.decode_row(&[], &mut out).unwrap_err().to_string();
    assert_eq!(err, "raw row is 0 bytes, e4m3_e8m0_32_row264 rows are 264");
}

#[test]
fn decode_rows_matches_decode_row_and_names_the_bad_row() {
    let mut raw = Vec::new();
    for code in [0x38u8, 0xb0, 0x01] {
        raw.extend(uniform_row264(code, 120));
    }
    let mut batch = vec![0.0f32; 3 * ROW_DIM];
    R264.decode_rows(&raw, &mut batch).unwrap();
    for (i, row) in raw.chunks(264).enumerate() {
        assert_eq!(
            &batch[i * ROW_DIM..(i + 1) * ROW_DIM],
            &decode(R264, row).unwrap()[..]
        );
    }

    raw[264 + 100] = 0x7f;
    let err = R264.decode_rows(&raw, &mut batch).unwrap_err();
    assert_eq!(
        err,
        RowsError {
            index: 1,
            error: CodecError::NanCode {
                index: 100,
                code: 0x7f
            }
        }
    );
    assert_eq!(
        err.to_string(),
        "row 1 of the batch: value 100: E4M3 code 0x7f is NaN"
    );
    let engram::Error::CorruptRow { table, row, reason } = err.into_error(1, 123_456) else {
        panic!("want CorruptRow");
    };
    assert_eq!((table, row), (1, 123_456));
    assert_eq!(reason, "value 100: E4M3 code 0x7f is NaN");

    // Ragged input and mismatched output are errors too.
    assert_eq!(
        R264.decode_rows(&raw[..500], &mut batch).unwrap_err().index,
        1
    );
    assert!(R264.decode_rows(&raw, &mut batch[..512]).is_err());
    assert_eq!(R264.decode_rows(&[], &mut []), Ok(()));
}

#[test]
fn a_corrupt_row_leaves_the_output_untouched() {
    let mut row = uniform_row264(0x38, 127);
    row[263] = 255;
    let mut out = vec![7.0f32; ROW_DIM];
    assert!(R264.decode_row(&row, &mut out).is_err());
    assert!(out.iter().all(|&v| v == 7.0));
}

#[test]
fn codec_error_becomes_corrupt_row() {
    let err = CodecError::NanScale {
        group: 3,
        byte: 255,
    }
    .into_error(0, 42);
    assert_eq!(
        err.to_string(),
        "corrupt row 42 of table 0: group 3: E8M0 scale 255 is NaN"
    );
}

#[test]
fn copy_raw_is_the_bytes() {
    let row: Vec<u8> = (0..136).map(|i| i as u8).collect();
    let mut out = vec![0u8; 136];
    R136.copy_raw(&row, &mut out).unwrap();
    assert_eq!(out, row);
    // Raw copies do not validate: a NaN code passes through untouched.
    let corrupt = uniform_row264(0x7f, 255);
    let mut out = vec![0u8; 264];
    R264.copy_raw(&corrupt, &mut out).unwrap();
    assert_eq!(out, corrupt);
}
