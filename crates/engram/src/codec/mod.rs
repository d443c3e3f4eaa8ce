//! Row encodings: decode to f32 or raw bytes, check, encode and transcode.
//!
//! Two families of tables:
//! - DeepSeek's Engram rows, 256 values each: `e4m3_e8m0_32_row264` and
//!   `lloyd4_e5m3_32_r136`. They decode to f32 values rounded to BF16
//!   (round to nearest even), as the model consumes them.
//! - Rows of any width `dim` (Qwen4-Exp's PLE table has 160): `bf16`,
//!   `f16`, `f32`, `fp8_e4m3` (one global scale), ggml's `q8_0`, `q5_1`,
//!   `q4_0`, `q4_1` and MLX's affine `mlx4`. They decode to the format's
//!   exact value computed in f32, with no BF16 rounding
//!   ([`Encoding::bf16_rounded`] says which).
//!
//! Per row:
//! - [`Encoding::decode_row`] / [`Encoding::decode_rows`]: rows to f32.
//! - [`Encoding::check_row`]: validation alone (for raw reads).
//! - [`Encoding::copy_raw`]: the bytes as stored.
//! - [`Encoding::encode_row`]: f32 values to a row of a `dim` encoding.
//! - [`encode_row136`] / [`transcode_row`]: row264 -> row136, as the
//!   reference converter does it.
//!
//! Corrupt bytes (an E4M3 NaN code, an E8M0 NaN scale, a stored NaN or
//! infinity, a NaN or infinite block scale, a value that overflows) are a
//! [`CodecError`], never a NaN or infinity passed on.
//!
//! Files: `row264` / `row136` / `encode` the DeepSeek encodings, `float`
//! the dense ones and fp8, `ggml` the block formats, `mlx` the affine
//! format, `minifloat` the small number formats they share; this module
//! dispatches.

mod encode;
mod error;
mod float;
mod ggml;
mod minifloat;
mod mlx;
mod row136;
mod row264;

pub use encode::{encode_row136, transcode_row};
pub use error::{CodecError, RowsError};
pub use minifloat::{
    bf16_round, bf16_round_bits, bf16_to_f32, e4m3_is_nan, e4m3_table, e4m3_to_f32, e5m3_scale,
    e8m0_scale, f16_to_f32, f32_to_bf16, f32_to_e4m3, f32_to_f16, nearest_lloyd_level,
    E5M3_MAX_SCALE, E5M3_MIN_SCALE, LLOYD4_LEVELS,
};

use float::Dense;
use ggml::Block;

/// Values per row of the DeepSeek encodings (`e4m3_e8m0_32_row264`,
/// `lloyd4_e5m3_32_r136`); [`Encoding::values`] gives any encoding's.
pub const ROW_DIM: usize = 256;

/// Values that share one scale byte in the DeepSeek encodings.
pub const GROUP: usize = 32;

/// Scale groups per row of the DeepSeek encodings.
pub const GROUPS: usize = ROW_DIM / GROUP;

/// Values per block of the ggml formats and per group of `mlx4`: a `dim`
/// of those encodings must be a multiple of it.
pub const BLOCK: usize = 32;

/// How a table's rows are encoded on disk.
///
/// The `dim` variants carry their values per row; build them with
/// [`Encoding::with_values`] or [`Encoding::fp8_e4m3`], which check it. A
/// hand-built variant with a bad `dim` (0, or not a multiple of [`BLOCK`]
/// for the block formats) or a bad fp8 scale is refused by every codec
/// call with [`CodecError::InvalidParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `e4m3_e8m0_32_row264`: 256 E4M3 bytes then 8 E8M0 scale bytes.
    E4m3E8m0Row264,
    /// `lloyd4_e5m3_32_r136`: 128 bytes of sign+3-bit Lloyd level nibbles
    /// (low nibble first), then 8 E5M3 scale bytes.
    Lloyd4E5m3Row136,
    /// `bf16`: `2 * dim` bytes, little-endian BF16 values.
    Bf16 {
        /// Values per row.
        dim: u16,
    },
    /// `f16`: `2 * dim` bytes, little-endian IEEE binary16 values.
    F16 {
        /// Values per row.
        dim: u16,
    },
    /// `f32`: `4 * dim` bytes, little-endian f32 values.
    F32 {
        /// Values per row.
        dim: u16,
    },
    /// `fp8_e4m3`: `dim` float8_e4m3fn bytes; value = e4m3(code) * scale,
    /// one global f32 scale for the whole table.
    Fp8E4m3 {
        /// Values per row.
        dim: u16,
        /// The table's scale as f32 bits (so the type stays `Eq + Hash`);
        /// see [`Encoding::fp8_scale`].
        scale_bits: u32,
    },
    /// ggml `q8_0`: per 32 values an f16 scale and 32 signed bytes (34 B).
    Q8_0 {
        /// Values per row, a multiple of 32.
        dim: u16,
    },
    /// ggml `q5_1`: per 32 values f16 `d`, f16 `m`, u32 high bits and 16
    /// nibble bytes (24 B).
    Q5_1 {
        /// Values per row, a multiple of 32.
        dim: u16,
    },
    /// ggml `q4_0`: per 32 values an f16 scale and 16 nibble bytes (18 B).
    Q4_0 {
        /// Values per row, a multiple of 32.
        dim: u16,
    },
    /// ggml `q4_1`: per 32 values f16 `d`, f16 `m` and 16 nibble bytes (20 B).
    Q4_1 {
        /// Values per row, a multiple of 32.
        dim: u16,
    },
    /// `mlx4`: MLX affine 4-bit, groups of 32: `dim / 2` bytes of codes
    /// (u32 words, lowest nibble first), `dim / 32` bf16 scales, `dim / 32`
    /// bf16 biases, stored as three arrays ([`Encoding::parts`]).
    Mlx4 {
        /// Values per row, a multiple of 32.
        dim: u16,
    },
}

/// How many bytes of a row each stored array holds, in row order: one part
/// for most encodings, three for `mlx4` (codes, scales, biases). A reader
/// of a multi-array table reads each part from its array and lays them end
/// to end, which is the row the codec takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowParts {
    lens: [usize; 3],
    count: usize,
}

impl RowParts {
    fn one(bytes: usize) -> RowParts {
        RowParts {
            lens: [bytes, 0, 0],
            count: 1,
        }
    }

    /// The parts' byte counts.
    pub fn as_slice(&self) -> &[usize] {
        &self.lens[..self.count]
    }
}

impl std::ops::Deref for RowParts {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        self.as_slice()
    }
}

/// What an encoding is, for the dispatch: one of the codec modules'
/// formats with its parameters.
enum Kind {
    Row264,
    Row136,
    Dense(Dense),
    Fp8(f32),
    Block(Block),
    Mlx4,
}

impl Encoding {
    /// The DeepSeek encodings: every encoding a name alone determines (256
    /// values per row), the ones [`Encoding::from_name`] parses and a
    /// DeepSeek model file may declare. The `dim` encodings are named by
    /// [`Encoding::DIM_NAMES`] and listed for one width by
    /// [`Encoding::all_with_values`].
    pub const ALL: [Encoding; 2] = [Encoding::E4m3E8m0Row264, Encoding::Lloyd4E5m3Row136];

    /// The names of the encodings parameterised by their values per row,
    /// as [`Encoding::with_values`] takes them.
    pub const DIM_NAMES: [&'static str; 9] = [
        "bf16", "f16", "f32", "fp8_e4m3", "q8_0", "q5_1", "q4_0", "q4_1", "mlx4",
    ];

    /// The name model files use for this encoding.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::E4m3E8m0Row264 => "e4m3_e8m0_32_row264",
            Encoding::Lloyd4E5m3Row136 => "lloyd4_e5m3_32_r136",
            Encoding::Bf16 { .. } => "bf16",
            Encoding::F16 { .. } => "f16",
            Encoding::F32 { .. } => "f32",
            Encoding::Fp8E4m3 { .. } => "fp8_e4m3",
            Encoding::Q8_0 { .. } => "q8_0",
            Encoding::Q5_1 { .. } => "q5_1",
            Encoding::Q4_0 { .. } => "q4_0",
            Encoding::Q4_1 { .. } => "q4_1",
            Encoding::Mlx4 { .. } => "mlx4",
        }
    }

    /// Parses a DeepSeek encoding's name as written in model files (one of
    /// [`Encoding::ALL`]); the `dim` encodings need their width too, see
    /// [`Encoding::with_values`].
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The encoding `name` with `dim` values per row. A DeepSeek name takes
    /// only `dim` 256; the block formats and `mlx4` need a multiple of 32;
    /// every `dim` is 1..=65535. `fp8_e4m3` gets scale 1.0 (see
    /// [`Encoding::fp8_e4m3`] for another).
    pub fn with_values(name: &str, dim: usize) -> Result<Encoding, String> {
        if let Some(encoding) = Encoding::from_name(name) {
            return if dim == ROW_DIM {
                Ok(encoding)
            } else {
                Err(format!("{name} rows hold {ROW_DIM} values, not {dim}"))
            };
        }
        let width = u16::try_from(dim)
            .ok()
            .filter(|&d| d > 0)
            .ok_or_else(|| format!("{name}: {dim} values per row is outside 1..=65535"))?;
        let encoding = match name {
            "bf16" => Encoding::Bf16 { dim: width },
            "f16" => Encoding::F16 { dim: width },
            "f32" => Encoding::F32 { dim: width },
            "fp8_e4m3" => Encoding::Fp8E4m3 {
                dim: width,
                scale_bits: 1f32.to_bits(),
            },
            "q8_0" => Encoding::Q8_0 { dim: width },
            "q5_1" => Encoding::Q5_1 { dim: width },
            "q4_0" => Encoding::Q4_0 { dim: width },
            "q4_1" => Encoding::Q4_1 { dim: width },
            "mlx4" => Encoding::Mlx4 { dim: width },
            _ => {
                let known: Vec<&str> = Encoding::ALL
                    .iter()
                    .map(|e| e.name())
                    .chain(Encoding::DIM_NAMES)
                    .collect();
                return Err(format!(
                    "unknown row encoding {name:?} (known: {})",
                    known.join(", ")
                ));
            }
        };
        encoding.validate().map_err(|e| e.to_string())?;
        Ok(encoding)
    }

    /// `fp8_e4m3` with `dim` values per row and the table's global `scale`,
    /// which must be finite and positive.
    pub fn fp8_e4m3(dim: usize, scale: f32) -> Result<Encoding, String> {
        let Encoding::Fp8E4m3 { dim, .. } = Encoding::with_values("fp8_e4m3", dim)? else {
            unreachable!("with_values(\"fp8_e4m3\") builds Fp8E4m3");
        };
        let encoding = Encoding::Fp8E4m3 {
            dim,
            scale_bits: scale.to_bits(),
        };
        encoding.validate().map_err(|e| e.to_string())?;
        Ok(encoding)
    }

    /// The global scale of an `fp8_e4m3` encoding; `None` for the others.
    pub fn fp8_scale(self) -> Option<f32> {
        match self {
            Encoding::Fp8E4m3 { scale_bits, .. } => Some(f32::from_bits(scale_bits)),
            _ => None,
        }
    }

    /// Every encoding with `dim` values per row: the DeepSeek ones when
    /// `dim` is 256, then each `dim` encoding that accepts it (in
    /// [`Encoding::DIM_NAMES`] order; `fp8_e4m3` with scale 1.0).
    pub fn all_with_values(dim: usize) -> Vec<Encoding> {
        let deepseek = Encoding::ALL.into_iter().filter(|_| dim == ROW_DIM);
        deepseek
            .chain(
                Encoding::DIM_NAMES
                    .into_iter()
                    .filter_map(|name| Encoding::with_values(name, dim).ok()),
            )
            .collect()
    }

    /// Values per row: 256 for the DeepSeek encodings, `dim` for the others.
    pub fn values(self) -> usize {
        match self {
            Encoding::E4m3E8m0Row264 | Encoding::Lloyd4E5m3Row136 => ROW_DIM,
            Encoding::Bf16 { dim }
            | Encoding::F16 { dim }
            | Encoding::F32 { dim }
            | Encoding::Fp8E4m3 { dim, .. }
            | Encoding::Q8_0 { dim }
            | Encoding::Q5_1 { dim }
            | Encoding::Q4_0 { dim }
            | Encoding::Q4_1 { dim }
            | Encoding::Mlx4 { dim } => usize::from(dim),
        }
    }

    /// True for the encodings whose decoded values are rounded to BF16 (the
    /// DeepSeek ones); the others decode to their exact value.
    pub fn bf16_rounded(self) -> bool {
        matches!(self, Encoding::E4m3E8m0Row264 | Encoding::Lloyd4E5m3Row136)
    }

    /// Bytes per row on disk (all parts together, see [`Encoding::parts`]).
    /// For 160 values: bf16/f16 320, f32 640, fp8 160, q8_0 170, q5_1 120,
    /// q4_0 90, q4_1 100, mlx4 100.
    pub fn row_bytes(self) -> usize {
        let dim = self.values();
        match self.kind() {
            Kind::Row264 => row264::ROW_BYTES,
            Kind::Row136 => row136::ROW_BYTES,
            Kind::Dense(Dense::Bf16 | Dense::F16) => 2 * dim,
            Kind::Dense(Dense::F32) => 4 * dim,
            Kind::Fp8(_) => dim,
            Kind::Block(block) => dim / BLOCK * block.bytes(),
            Kind::Mlx4 => mlx::parts(dim).iter().sum(),
        }
    }

    /// How a row's bytes split across the arrays that store them: `mlx4`'s
    /// codes, scales and biases (`[dim / 2, dim / 16, dim / 16]`), one part
    /// of [`Encoding::row_bytes`] for the others.
    pub fn parts(self) -> RowParts {
        match self.kind() {
            Kind::Mlx4 => RowParts {
                lens: mlx::parts(self.values()),
                count: 3,
            },
            _ => RowParts::one(self.row_bytes()),
        }
    }

    /// Names of the parts of [`Encoding::parts`], as mlx-vlm names the
    /// arrays (`weight`, `scales`, `biases`); `row` for one part.
    pub fn part_names(self) -> &'static [&'static str] {
        match self {
            Encoding::Mlx4 { .. } => &["weight", "scales", "biases"],
            _ => &["row"],
        }
    }

    /// Checks the parameters of a `dim` encoding: `dim` not 0, a multiple of
    /// 32 for the block formats and `mlx4`, an fp8 scale finite and > 0.
    pub fn validate(self) -> Result<(), CodecError> {
        let dim = self.values();
        let bad = |reason| {
            Err(CodecError::InvalidParams {
                encoding: self,
                reason,
            })
        };
        match self.kind() {
            Kind::Row264 | Kind::Row136 => Ok(()),
            _ if dim == 0 => bad("a row needs at least one value"),
            Kind::Block(_) | Kind::Mlx4 if dim % BLOCK != 0 => {
                bad("values per row must be a multiple of 32")
            }
            Kind::Fp8(scale) if !(scale.is_finite() && scale > 0.0) => {
                bad("the fp8 scale must be finite and positive")
            }
            _ => Ok(()),
        }
    }

    fn kind(self) -> Kind {
        match self {
            Encoding::E4m3E8m0Row264 => Kind::Row264,
            Encoding::Lloyd4E5m3Row136 => Kind::Row136,
            Encoding::Bf16 { .. } => Kind::Dense(Dense::Bf16),
            Encoding::F16 { .. } => Kind::Dense(Dense::F16),
            Encoding::F32 { .. } => Kind::Dense(Dense::F32),
            Encoding::Fp8E4m3 { scale_bits, .. } => Kind::Fp8(f32::from_bits(scale_bits)),
            Encoding::Q8_0 { .. } => Kind::Block(Block::Q8_0),
            Encoding::Q5_1 { .. } => Kind::Block(Block::Q5_1),
            Encoding::Q4_0 { .. } => Kind::Block(Block::Q4_0),
            Encoding::Q4_1 { .. } => Kind::Block(Block::Q4_1),
            Encoding::Mlx4 { .. } => Kind::Mlx4,
        }
    }

    /// Decodes one row (`raw`, [`Encoding::row_bytes`] long) into
    /// [`Encoding::values`] f32 values (BF16-rounded for the DeepSeek
    /// encodings, exact for the others). On error `out` is left untouched.
    pub fn decode_row(self, raw: &[u8], out: &mut [f32]) -> Result<(), CodecError> {
        self.validate()?;
        if out.len() != self.values() {
            return Err(CodecError::OutputLength {
                expected: self.values(),
                actual: out.len(),
            });
        }
        match self.kind() {
            Kind::Row264 => {
                let out: &mut [f32; ROW_DIM] = out.try_into().expect("length checked");
                row264::decode(self.raw_row(raw)?, out)
            }
            Kind::Row136 => {
                let out: &mut [f32; ROW_DIM] = out.try_into().expect("length checked");
                row136::decode(self.raw_row(raw)?, out);
                Ok(())
            }
            kind => {
                let raw = self.sized_row(raw)?;
                // Checked before anything is written, so a corrupt row
                // leaves `out` as it was.
                check_kind(&kind, raw, self.values())?;
                match kind {
                    Kind::Dense(format) => float::decode_dense(format, raw, out),
                    Kind::Fp8(scale) => float::decode_fp8(raw, scale, out),
                    Kind::Block(block) => ggml::decode(block, raw, out),
                    Kind::Mlx4 => mlx::decode(raw, self.values(), out),
                    Kind::Row264 | Kind::Row136 => unreachable!("handled above"),
                }
                Ok(())
            }
        }
    }

    /// Decodes `raw.len() / row_bytes` consecutive rows into `out`, which
    /// must hold exactly [`Encoding::values`] values per row. Stops at the
    /// first bad row; rows before it are decoded, it and later rows are
    /// untouched.
    pub fn decode_rows(self, raw: &[u8], out: &mut [f32]) -> Result<(), RowsError> {
        self.validate()
            .map_err(|error| RowsError { index: 0, error })?;
        let row_bytes = self.row_bytes();
        let values = self.values();
        let rows = raw.len() / row_bytes;
        let partial = raw.len() % row_bytes;
        if partial != 0 {
            let error = CodecError::RawLength {
                encoding: self,
                expected: row_bytes,
                actual: partial,
            };
            return Err(RowsError { index: rows, error });
        }
        if out.len() != rows * values {
            let error = CodecError::OutputLength {
                expected: rows * values,
                actual: out.len(),
            };
            let index = rows.min(out.len() / values);
            return Err(RowsError { index, error });
        }
        raw.chunks_exact(row_bytes)
            .zip(out.chunks_exact_mut(values))
            .enumerate()
            .try_for_each(|(index, (row, values))| {
                self.decode_row(row, values)
                    .map_err(|error| RowsError { index, error })
            })
    }

    /// Checks that a row decodes to finite values without decoding it.
    /// Always succeeds for `lloyd4_e5m3_32_r136` rows of the right length.
    pub fn check_row(self, raw: &[u8]) -> Result<(), CodecError> {
        self.validate()?;
        match self.kind() {
            Kind::Row264 => row264::check(self.raw_row(raw)?),
            Kind::Row136 => self.raw_row::<{ row136::ROW_BYTES }>(raw).map(|_| ()),
            kind => check_kind(&kind, self.sized_row(raw)?, self.values()),
        }
    }

    /// Copies a row's bytes as stored; only the lengths are checked.
    pub fn copy_raw(self, raw: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
        self.validate()?;
        let expected = self.row_bytes();
        if out.len() != expected {
            return Err(CodecError::DestinationLength {
                encoding: self,
                expected,
                actual: out.len(),
            });
        }
        if raw.len() != expected {
            return Err(self.wrong_length(raw));
        }
        out.copy_from_slice(raw);
        Ok(())
    }

    /// Encodes [`Encoding::values`] f32 values as one row (`out`,
    /// [`Encoding::row_bytes`] long) of a `dim` encoding:
    ///
    /// - `bf16`, `f16`: round to nearest even; `f32`: the bits as given;
    /// - `fp8_e4m3`: the E4M3FN code nearest `value / scale` (ties to even);
    /// - `q8_0`, `q5_1`, `q4_0`, `q4_1`: ggml's reference
    ///   `quantize_row_*_ref` (round to nearest);
    /// - `mlx4`: `mx.quantize(w, group_size=32, bits=4)` (see the `mlx`
    ///   module), scales and biases stored as bf16.
    ///
    /// A NaN or infinite input, a value the format cannot hold, or a block
    /// scale that does not fit its f16/bf16 field is an error (then `out`
    /// may be partly written). The DeepSeek encodings have no f32 encoder
    /// here ([`CodecError::EncodeUnsupported`]; see [`encode_row136`]).
    pub fn encode_row(self, values: &[f32], out: &mut [u8]) -> Result<(), CodecError> {
        self.validate()?;
        if values.len() != self.values() {
            return Err(CodecError::InputLength {
                encoding: self,
                expected: self.values(),
                actual: values.len(),
            });
        }
        if out.len() != self.row_bytes() {
            return Err(CodecError::DestinationLength {
                encoding: self,
                expected: self.row_bytes(),
                actual: out.len(),
            });
        }
        match self.kind() {
            Kind::Row264 | Kind::Row136 => Err(CodecError::EncodeUnsupported { encoding: self }),
            Kind::Dense(format) => float::encode_dense(self, format, values, out),
            Kind::Fp8(scale) => float::encode_fp8(self, scale, values, out),
            Kind::Block(block) => ggml::encode(self, block, values, out),
            Kind::Mlx4 => mlx::encode(self, values, self.values(), out),
        }
    }

    /// `raw` as a fixed-size row, or the length error for this encoding.
    fn raw_row<const N: usize>(self, raw: &[u8]) -> Result<&[u8; N], CodecError> {
        debug_assert_eq!(N, self.row_bytes());
        raw.try_into().map_err(|_| self.wrong_length(raw))
    }

    /// `raw` if it is [`Encoding::row_bytes`] long.
    fn sized_row(self, raw: &[u8]) -> Result<&[u8], CodecError> {
        if raw.len() == self.row_bytes() {
            Ok(raw)
        } else {
            Err(self.wrong_length(raw))
        }
    }

    fn wrong_length(self, raw: &[u8]) -> CodecError {
        CodecError::RawLength {
            encoding: self,
            expected: self.row_bytes(),
            actual: raw.len(),
        }
    }
}

/// Validates a row of a `dim` encoding (its length already checked).
fn check_kind(kind: &Kind, raw: &[u8], dim: usize) -> Result<(), CodecError> {
    match *kind {
        Kind::Dense(format) => float::check_dense(format, raw),
        Kind::Fp8(scale) => float::check_fp8(raw, scale),
        Kind::Block(block) => ggml::check(block, raw),
        Kind::Mlx4 => mlx::check(raw, dim),
        Kind::Row264 | Kind::Row136 => unreachable!("the DeepSeek rows are checked apart"),
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
