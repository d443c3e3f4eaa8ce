//! The encodings of any width (bf16, f16, f32, fp8_e4m3, q8_0, q5_1, q4_0,
//! q4_1, mlx4): sizes and names, hand-made rows decoded against values
//! worked out from the format definitions, random rows against the f64
//! model, refusals of corrupt rows, bad lengths and bad parameters.
#![allow(clippy::needless_range_loop)]

mod codec_model;

use engram::splitmix::SplitMix64;

use codec_model::dim::{dense_row, fp8_row, ggml_row, mlx4_row};
use engram::codec::{CodecError, Encoding, RowsError};

const DIM: usize = 160;

fn enc(name: &str) -> Encoding {
    Encoding::with_values(name, DIM).unwrap()
}

fn decode(encoding: Encoding, raw: &[u8]) -> Result<Vec<f32>, CodecError> {
    let mut out = vec![f32::NAN; encoding.values()];
    encoding.decode_row(raw, &mut out).map(|()| out)
}

/// `n` random bytes.
fn random_bytes(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

#[test]
fn sizes_names_and_parts_for_160_values() {
    let expected = [
        ("bf16", 320),
        ("f16", 320),
        ("f32", 640),
        ("fp8_e4m3", 160),
        ("q8_0", 170),
        ("q5_1", 120),
        ("q4_0", 90),
        ("q4_1", 100),
        ("mlx4", 100),
    ];
    for (name, bytes) in expected {
        let e = enc(name);
        assert_eq!((e.name(), e.values(), e.row_bytes()), (name, DIM, bytes));
        assert!(!e.bf16_rounded(), "{name}");
        assert_eq!(e.to_string(), name);
        let parts = e.parts();
        assert_eq!(parts.iter().sum::<usize>(), bytes);
        assert_eq!(parts.len(), e.part_names().len());
        if name == "mlx4" {
            assert_eq!(&*parts, &[80, 10, 10]);
            assert_eq!(e.part_names(), &["weight", "scales", "biases"]);
        } else {
            assert_eq!(&*parts, &[bytes]);
        }
    }
    assert_eq!(
        Encoding::all_with_values(DIM)
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>(),
        Encoding::DIM_NAMES
    );
    for e in Encoding::ALL {
        assert_eq!((e.values(), e.bf16_rounded()), (256, true));
        assert_eq!(Encoding::with_values(e.name(), 256), Ok(e));
        assert_eq!(Encoding::from_name(e.name()), Some(e));
        assert_eq!(e.parts().as_slice(), &[e.row_bytes()]);
    }
    assert_eq!(Encoding::all_with_values(256).len(), 11);
    // from_name stays the DeepSeek parser (GGUF metadata of that dialect).
    assert_eq!(Encoding::from_name("q4_0"), None);
    assert_eq!(enc("fp8_e4m3").fp8_scale(), Some(1.0));
    assert_eq!(enc("q4_0").fp8_scale(), None);
}

#[test]
fn bad_widths_names_and_scales_are_refused() {
    for name in ["q8_0", "q5_1", "q4_0", "q4_1", "mlx4"] {
        for dim in [1, 16, 33, 100, 161] {
            let error = Encoding::with_values(name, dim).unwrap_err();
            assert!(error.contains("multiple of 32"), "{name} {dim}: {error}");
        }
        assert!(Encoding::with_values(name, 32).is_ok());
    }
    for name in Encoding::DIM_NAMES {
        assert!(Encoding::with_values(name, 0).is_err(), "{name}");
        assert!(Encoding::with_values(name, 65_536).is_err(), "{name}");
    }
    for name in ["bf16", "f16", "f32", "fp8_e4m3"] {
        assert_eq!(Encoding::with_values(name, 7).unwrap().values(), 7);
    }
    let error = Encoding::with_values("e4m3_e8m0_32_row264", 160).unwrap_err();
    assert!(error.contains("256"), "{error}");
    let error = Encoding::with_values("q4_k", 160).unwrap_err();
    assert!(error.contains("q4_k") && error.contains("mlx4"), "{error}");
    for scale in [0.0, -1.0, f32::NAN, f32::INFINITY, -0.0] {
        assert!(Encoding::fp8_e4m3(DIM, scale).is_err(), "{scale}");
    }
    let e = Encoding::fp8_e4m3(DIM, 0.125).unwrap();
    assert_eq!(e.fp8_scale(), Some(0.125));

    // A hand-built variant with a bad width is refused by every call.
    let bad = Encoding::Q4_0 { dim: 33 };
    let invalid = CodecError::InvalidParams {
        encoding: bad,
        reason: "values per row must be a multiple of 32",
    };
    let expected = Err(invalid);
    let raw = vec![0u8; bad.row_bytes()];
    let mut out = vec![0f32; 33];
    assert_eq!(bad.decode_row(&raw, &mut out), expected);
    assert_eq!(bad.check_row(&raw), expected);
    assert_eq!(bad.copy_raw(&raw, &mut raw.clone()), expected);
    assert_eq!(bad.encode_row(&out, &mut raw.clone()), expected);
    assert_eq!(
        bad.decode_rows(&raw, &mut out),
        Err(RowsError {
            index: 0,
            error: invalid
        })
    );
    let bad = Encoding::Fp8E4m3 {
        dim: 4,
        scale_bits: f32::NAN.to_bits(),
    };
    assert!(matches!(
        bad.check_row(&[0; 4]),
        Err(CodecError::InvalidParams { .. })
    ));
    assert!(matches!(
        Encoding::F32 { dim: 0 }.check_row(&[]),
        Err(CodecError::InvalidParams { .. })
    ));
}

/// Dense rows by hand: the values the bits define, with no BF16 rounding.
#[test]
fn dense_rows_decode_to_their_exact_values() {
    let e = Encoding::with_values("f16", 6).unwrap();
    let halves: [u16; 6] = [0x3c00, 0xc000, 0x0001, 0x7bff, 0x8400, 0x3555];
    let raw: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let want = [
        1.0,
        -2.0,
        2f32.powi(-24),
        65504.0,
        -(2f32.powi(-14)),
        (1.0 + 341.0 / 1024.0) / 4.0, // 0x3555: exponent 13, mantissa 0x155
    ];
    assert_eq!(decode(e, &raw).unwrap(), want);

    let e = Encoding::with_values("bf16", 4).unwrap();
    let halves: [u16; 4] = [0x3f80, 0xbf81, 0x0001, 0x7f7f];
    let raw: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let want = [
        1.0,
        -(1.0 + 1.0 / 128.0),
        f32::from_bits(0x0001_0000), // 2^-133, a subnormal
        f32::from_bits(0x7f7f_0000),
    ];
    assert_eq!(decode(e, &raw).unwrap(), want);

    // f32 values the BF16 rounding would change come back unchanged.
    let e = Encoding::with_values("f32", 3).unwrap();
    let want = [1.0 + 2f32.powi(-20), f32::from_bits(1), -3.3e38];
    let raw: Vec<u8> = want.iter().flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(decode(e, &raw).unwrap(), want);
}

#[test]
fn fp8_rows_are_code_times_the_global_scale() {
    let scale = 1.0 + 2f32.powi(-20); // not a BF16: no rounding may hide it
    let e = Encoding::fp8_e4m3(4, scale).unwrap();
    // 0x38 = 1.0, 0xc4 = -(1 + 4/8) * 2^(8 - 7) = -3, 0x01 = 2^-9, 0x7e = 448.
    let out = decode(e, &[0x38, 0xc4, 0x01, 0x7e]).unwrap();
    assert_eq!(
        out,
        [scale, -3.0 * scale, 2f32.powi(-9) * scale, 448.0 * scale]
    );
    assert_eq!(
        decode(e, &[0x38, 0x7f, 0x00, 0x00]),
        Err(CodecError::NanCode {
            index: 1,
            code: 0x7f
        })
    );
    let big = Encoding::fp8_e4m3(2, 1e36).unwrap();
    assert_eq!(
        decode(big, &[0x38, 0x01]).unwrap(),
        [1e36, 2f32.powi(-9) * 1e36]
    );
    assert_eq!(
        decode(big, &[0x38, 0xfe]),
        Err(CodecError::ScaledNotFinite {
            index: 1,
            code: 0xfe,
            scale: 1e36
        })
    );
}

/// One block of each ggml format, built byte by byte, against values worked
/// out from the layout.
#[test]
fn ggml_blocks_by_hand() {
    let e = Encoding::with_values("q8_0", 32).unwrap();
    let mut block = vec![0u8; 34];
    block[..2].copy_from_slice(&0x3555u16.to_le_bytes()); // d = 1365/4096
    let d = 1365.0f32 / 4096.0;
    for (j, q) in [(0, -128i8), (1, -1), (2, 1), (31, 127)] {
        block[2 + j] = q as u8;
    }
    let out = decode(e, &block).unwrap();
    assert_eq!(out[0], -128.0 * d);
    assert_eq!(out[1], -d);
    assert_eq!(out[2], d);
    assert_eq!(out[31], 127.0 * d);
    assert!(out[3..31].iter().all(|&v| v == 0.0));

    // q4_0: d = -0.5; byte 0 = 0xf0 holds element 0 (low nibble, 0) and
    // element 16 (high nibble, 15); every other nibble is 8 (value 0).
    let e = Encoding::with_values("q4_0", 32).unwrap();
    let mut block = vec![0x88u8; 18];
    block[..2].copy_from_slice(&0xb800u16.to_le_bytes());
    block[2] = 0xf0;
    block[2 + 15] = 0x19; // element 15 = 9, element 31 = 1
    let out = decode(e, &block).unwrap();
    assert_eq!(out[0], (0.0 - 8.0) * -0.5);
    assert_eq!(out[16], (15.0 - 8.0) * -0.5);
    assert_eq!(out[15], (9.0 - 8.0) * -0.5);
    assert_eq!(out[31], (1.0 - 8.0) * -0.5);
    assert_eq!(out.iter().filter(|&&v| v == 0.0).count(), 28);

    // q4_1: d = 0.25, m = -1; byte 0 = 0xa3: element 0 = 3, element 16 = 10.
    let e = Encoding::with_values("q4_1", 32).unwrap();
    let mut block = vec![0u8; 20];
    block[..2].copy_from_slice(&0x3400u16.to_le_bytes());
    block[2..4].copy_from_slice(&0xbc00u16.to_le_bytes());
    block[4] = 0xa3;
    let out = decode(e, &block).unwrap();
    assert_eq!((out[0], out[16]), (3.0 * 0.25 - 1.0, 10.0 * 0.25 - 1.0));
    assert!(out
        .iter()
        .enumerate()
        .all(|(j, &v)| j == 0 || j == 16 || v == -1.0));

    // q5_1: d = 1, m = 0.5; qh bits 0, 16 and 31 set: elements 0, 16, 31
    // gain 16. Byte 0 = 0x21 (element 0 = 1, element 16 = 2), byte 15 =
    // 0xf0 (element 15 = 0, element 31 = 15).
    let e = Encoding::with_values("q5_1", 32).unwrap();
    let mut block = vec![0u8; 24];
    block[..2].copy_from_slice(&0x3c00u16.to_le_bytes());
    block[2..4].copy_from_slice(&0x3800u16.to_le_bytes());
    block[4..8].copy_from_slice(&(1u32 | 1 << 16 | 1 << 31).to_le_bytes());
    block[8] = 0x21;
    block[8 + 15] = 0xf0;
    let out = decode(e, &block).unwrap();
    assert_eq!(out[0], 17.5);
    assert_eq!(out[16], 18.5);
    assert_eq!(out[15], 0.5);
    assert_eq!(out[31], 31.5);
    assert_eq!(out.iter().filter(|&&v| v == 0.5).count(), 29);
}

/// mlx4 by hand: word 0 = 0xf000_0021 gives elements 0..8 the codes 1, 2,
/// 0, 0, 0, 0, 0, 15; group 1 (values 32..64) has its own scale and bias.
#[test]
fn mlx4_rows_by_hand() {
    let e = Encoding::with_values("mlx4", 64).unwrap();
    assert_eq!(&*e.parts(), &[32, 4, 4]);
    let mut raw = vec![0u8; 40];
    raw[..4].copy_from_slice(&0xf000_0021u32.to_le_bytes());
    raw[16] = 0x09; // element 32 (group 1's first) = 9
    raw[32..34].copy_from_slice(&0x3f00u16.to_le_bytes()); // scale 0.5
    raw[34..36].copy_from_slice(&0xc040u16.to_le_bytes()); // scale -3
    raw[36..38].copy_from_slice(&0xbf80u16.to_le_bytes()); // bias -1
    raw[38..40].copy_from_slice(&0x4120u16.to_le_bytes()); // bias 10
    let out = decode(e, &raw).unwrap();
    assert_eq!(&out[..8], &[-0.5, 0.0, -1.0, -1.0, -1.0, -1.0, -1.0, 6.5]);
    assert!(out[8..32].iter().all(|&v| v == -1.0));
    assert_eq!(out[32], 9.0 * -3.0 + 10.0);
    assert!(out[33..].iter().all(|&v| v == 10.0));
}

/// Random rows of every format against the f64 model. Stored scales that
/// would be NaN or infinite are replaced first; mlx4's scales and biases
/// are kept within a few binades of each other so the model's f64 sums
/// are exact.
#[test]
fn random_rows_match_the_model() {
    let mut rng = SplitMix64(0x9e37_79b9_7f4a_7c15);
    for _ in 0..400 {
        for name in ["q8_0", "q5_1", "q4_0", "q4_1"] {
            let e = enc(name);
            let mut raw = random_bytes(&mut rng, e.row_bytes());
            let block = e.row_bytes() / 5;
            for b in 0..5 {
                for field in 0..if name.ends_with("_1") { 2 } else { 1 } {
                    let at = b * block + 2 * field;
                    raw[at + 1] &= 0xbf; // exponent field below 31: finite
                }
            }
            let want = ggml_row(name, &raw).unwrap();
            assert_eq!(decode(e, &raw).unwrap(), want, "{name}");
            assert_eq!(e.check_row(&raw), Ok(()));
        }
        let e = enc("mlx4");
        let mut raw = random_bytes(&mut rng, 100);
        for half in raw[80..].chunks_exact_mut(2) {
            // Sign and low bits random, exponent within 2^-8 .. 2^7.
            let exponent = 119 + (rng.next_u64() % 16) as u16;
            let bits = u16::from_le_bytes([half[0], half[1]]) & 0x807f | exponent << 7;
            half.copy_from_slice(&bits.to_le_bytes());
        }
        assert_eq!(decode(e, &raw).unwrap(), mlx4_row(&raw, DIM).unwrap());
        for name in ["bf16", "f16", "f32"] {
            let e = enc(name);
            let raw = random_bytes(&mut rng, e.row_bytes());
            match dense_row(name, &raw) {
                Some(want) => assert_eq!(decode(e, &raw).unwrap(), want, "{name}"),
                None => assert!(
                    matches!(decode(e, &raw), Err(CodecError::NonFiniteValue { .. })),
                    "{name}"
                ),
            }
        }
        let scale = f32::from_bits(0x3000_0000 | (rng.next_u64() as u32 & 0x0fff_ffff));
        let e = Encoding::fp8_e4m3(DIM, scale).unwrap();
        let raw: Vec<u8> = random_bytes(&mut rng, DIM)
            .into_iter()
            .map(|c| if c & 0x7f == 0x7f { c ^ 1 } else { c })
            .collect();
        assert_eq!(decode(e, &raw).unwrap(), fp8_row(&raw, scale).unwrap());
    }
}

/// Every stored NaN or infinity is an error naming its value or block, and
/// the output is left as it was.
#[test]
fn non_finite_stored_values_are_refused() {
    for (name, index, bits) in [
        ("bf16", 7usize, 0x7f80u32),
        ("bf16", 159, 0xffc1),
        ("f16", 3, 0x7c00),
        ("f16", 100, 0xfe00),
    ] {
        let e = enc(name);
        let mut raw = vec![0u8; e.row_bytes()];
        raw[2 * index..][..2].copy_from_slice(&(bits as u16).to_le_bytes());
        let want = Err(CodecError::NonFiniteValue {
            index,
            format: name,
            bits,
        });
        let mut out = vec![7.0f32; DIM];
        assert_eq!(e.decode_row(&raw, &mut out), want);
        assert!(out.iter().all(|&v| v == 7.0));
        assert_eq!(e.check_row(&raw), want);
    }
    let e = enc("f32");
    for (index, value) in [(0usize, f32::NAN), (159, f32::NEG_INFINITY)] {
        let mut raw = vec![0u8; e.row_bytes()];
        raw[4 * index..][..4].copy_from_slice(&value.to_le_bytes());
        let want: Result<(), _> = Err(CodecError::NonFiniteValue {
            index,
            format: "f32",
            bits: value.to_bits(),
        });
        assert_eq!(decode(e, &raw), want.map(|()| Vec::new()));
        assert_eq!(e.check_row(&raw), want);
    }

    // ggml block scales: d of block 3, m of block 4.
    for (name, field, at) in [
        ("q8_0", "d", 0),
        ("q4_0", "d", 0),
        ("q4_1", "d", 0),
        ("q4_1", "m", 2),
        ("q5_1", "d", 0),
        ("q5_1", "m", 2),
    ] {
        let e = enc(name);
        let block_bytes = e.row_bytes() / 5;
        for (block, bits) in [(3usize, 0x7c00u16), (4, 0xfd00)] {
            let mut raw = vec![0u8; e.row_bytes()];
            raw[block * block_bytes + at..][..2].copy_from_slice(&bits.to_le_bytes());
            let want = Err(CodecError::NonFiniteBlockScale {
                block,
                field,
                format: "f16",
                bits,
            });
            let mut out = vec![7.0f32; DIM];
            assert_eq!(e.decode_row(&raw, &mut out), want, "{name} {field}");
            assert!(out.iter().all(|&v| v == 7.0));
            assert_eq!(e.check_row(&raw), want);
        }
    }

    // mlx4: a NaN scale of group 2, an infinite bias of group 4, and a
    // finite scale whose product overflows.
    let e = enc("mlx4");
    let mut raw = vec![0u8; 100];
    raw[80 + 4..][..2].copy_from_slice(&0x7fc0u16.to_le_bytes());
    assert_eq!(
        decode(e, &raw),
        Err(CodecError::NonFiniteBlockScale {
            block: 2,
            field: "scale",
            format: "bf16",
            bits: 0x7fc0
        })
    );
    let mut raw = vec![0u8; 100];
    raw[90 + 8..][..2].copy_from_slice(&0xff80u16.to_le_bytes());
    assert_eq!(
        e.check_row(&raw),
        Err(CodecError::NonFiniteBlockScale {
            block: 4,
            field: "bias",
            format: "bf16",
            bits: 0xff80
        })
    );
    let mut raw = vec![0u8; 100];
    let huge = f32::from_bits(0x7f7f_0000); // largest finite bf16
    raw[80 + 2..][..2].copy_from_slice(&0x7f7fu16.to_le_bytes()); // group 1
    raw[16 + 3] = 0x20; // element 32 + 7 = 2: 2 * huge overflows
    let want: Result<(), _> = Err(CodecError::AffineNotFinite {
        index: 39,
        code: 2,
        scale: huge,
        bias: 0.0,
    });
    assert_eq!(decode(e, &raw), want.map(|()| Vec::new()));
    assert_eq!(e.check_row(&raw), want);
    raw[16 + 3] = 0x10; // code 1: huge itself, finite
    assert_eq!(decode(e, &raw).unwrap()[39], huge);
}

#[test]
fn wrong_lengths_are_errors_not_panics() {
    for e in Encoding::all_with_values(DIM) {
        let bytes = e.row_bytes();
        let raw = vec![0u8; bytes];
        let mut out = vec![0f32; DIM];
        assert_eq!(
            e.decode_row(&raw[..bytes - 1], &mut out),
            Err(CodecError::RawLength {
                encoding: e,
                expected: bytes,
                actual: bytes - 1
            })
        );
        assert_eq!(
            e.decode_row(&raw, &mut out[..DIM - 1]),
            Err(CodecError::OutputLength {
                expected: DIM,
                actual: DIM - 1
            })
        );
        assert!(e.check_row(&[0u8; 1]).is_err());
        let mut dst = vec![0u8; bytes + 1];
        assert!(matches!(
            e.copy_raw(&raw, &mut dst),
            Err(CodecError::DestinationLength { .. })
        ));
        assert_eq!(e.copy_raw(&raw, &mut dst[..bytes]), Ok(()));
        assert_eq!(
            e.encode_row(&out[..DIM - 1], &mut dst[..bytes]),
            Err(CodecError::InputLength {
                encoding: e,
                expected: DIM,
                actual: DIM - 1
            })
        );
        assert!(matches!(
            e.encode_row(&out, &mut dst),
            Err(CodecError::DestinationLength { .. })
        ));
        // decode_rows: two rows, then a partial one and a short output.
        let two = vec![0u8; 2 * bytes];
        let mut values = vec![1f32; 2 * DIM];
        assert_eq!(e.decode_rows(&two, &mut values), Ok(()));
        assert!(values.iter().all(|&v| v == 0.0), "{e}");
        let error = e
            .decode_rows(&two[..2 * bytes - 1], &mut values)
            .unwrap_err();
        assert_eq!(error.index, 1);
        let error = e.decode_rows(&two, &mut values[..DIM]).unwrap_err();
        assert_eq!(error.index, 1);
    }
}

#[test]
fn decode_rows_stops_at_the_first_bad_row() {
    let e = enc("q4_0");
    let mut raw = vec![0u8; 3 * 90];
    raw[90 + 18..][..2].copy_from_slice(&0x7c00u16.to_le_bytes()); // row 1, block 1
    let mut out = vec![9f32; 3 * DIM];
    let error = e.decode_rows(&raw, &mut out).unwrap_err();
    assert_eq!(error.index, 1);
    assert!(matches!(
        error.error,
        CodecError::NonFiniteBlockScale { block: 1, .. }
    ));
    assert!(out[..DIM].iter().all(|&v| v == 0.0));
    assert!(out[DIM..].iter().all(|&v| v == 9.0));
}
