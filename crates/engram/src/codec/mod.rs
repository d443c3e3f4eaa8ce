//! Row encodings: decode to BF16-rounded f32 or raw bytes, encode and transcode.
//!
//! - [`Encoding::decode_row`] / [`Encoding::decode_rows`]: rows to f32 values
//!   rounded to BF16 (round to nearest even), as the model consumes them.
//! - [`Encoding::check_row`]: validation alone (for raw reads).
//! - [`Encoding::copy_raw`]: the bytes as stored.
//! - [`encode_row136`] / [`transcode_row`]: row264 -> row136, as the
//!   reference converter does it.
//!
//! Corrupt bytes (an E4M3 NaN code, an E8M0 NaN scale, a value that
//! overflows) are a [`CodecError`], never a NaN or infinity passed on.

mod encode;
mod error;
mod minifloat;
mod row136;
mod row264;

pub use encode::{encode_row136, transcode_row};
pub use error::{CodecError, RowsError};
pub use minifloat::{
    bf16_round, bf16_round_bits, e4m3_is_nan, e4m3_table, e4m3_to_f32, e5m3_scale, e8m0_scale,
    nearest_lloyd_level, E5M3_MAX_SCALE, E5M3_MIN_SCALE, LLOYD4_LEVELS,
};

/// Values per Engram row.
pub const ROW_DIM: usize = 256;

/// Values that share one scale byte.
pub const GROUP: usize = 32;

/// Scale groups per row.
pub const GROUPS: usize = ROW_DIM / GROUP;

/// How a table's rows are encoded on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `e4m3_e8m0_32_row264`: 256 E4M3 bytes then 8 E8M0 scale bytes.
    E4m3E8m0Row264,
    /// `lloyd4_e5m3_32_r136`: 128 bytes of sign+3-bit Lloyd level nibbles
    /// (low nibble first), then 8 E5M3 scale bytes.
    Lloyd4E5m3Row136,
}

impl Encoding {
    /// Every encoding this crate reads.
    pub const ALL: [Encoding; 2] = [Encoding::E4m3E8m0Row264, Encoding::Lloyd4E5m3Row136];

    /// The name model files use for this encoding.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::E4m3E8m0Row264 => "e4m3_e8m0_32_row264",
            Encoding::Lloyd4E5m3Row136 => "lloyd4_e5m3_32_r136",
        }
    }

    /// Parses a name as written in model files.
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Bytes per row on disk.
    pub fn row_bytes(self) -> usize {
        match self {
            Encoding::E4m3E8m0Row264 => ROW_DIM + ROW_DIM / GROUP,
            Encoding::Lloyd4E5m3Row136 => ROW_DIM / 2 + ROW_DIM / GROUP,
        }
    }

    /// Decodes one row (`raw`, [`Encoding::row_bytes`] long) into `ROW_DIM`
    /// BF16-rounded f32 values. On error `out` is left untouched.
    pub fn decode_row(self, raw: &[u8], out: &mut [f32]) -> Result<(), CodecError> {
        let actual = out.len();
        let out: &mut [f32; ROW_DIM] = out.try_into().map_err(|_| CodecError::OutputLength {
            expected: ROW_DIM,
            actual,
        })?;
        match self {
            Encoding::E4m3E8m0Row264 => row264::decode(self.raw_row(raw)?, out),
            Encoding::Lloyd4E5m3Row136 => {
                row136::decode(self.raw_row(raw)?, out);
                Ok(())
            }
        }
    }

    /// Decodes `raw.len() / row_bytes` consecutive rows into `out`, which
    /// must hold exactly `ROW_DIM` values per row. Stops at the first bad
    /// row; rows before it are decoded, it and later rows are untouched.
    pub fn decode_rows(self, raw: &[u8], out: &mut [f32]) -> Result<(), RowsError> {
        let row_bytes = self.row_bytes();
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
        if out.len() != rows * ROW_DIM {
            let error = CodecError::OutputLength {
                expected: rows * ROW_DIM,
                actual: out.len(),
            };
            let index = rows.min(out.len() / ROW_DIM);
            return Err(RowsError { index, error });
        }
        raw.chunks_exact(row_bytes)
            .zip(out.chunks_exact_mut(ROW_DIM))
            .enumerate()
            .try_for_each(|(index, (row, values))| {
                self.decode_row(row, values)
                    .map_err(|error| RowsError { index, error })
            })
    }

    /// Checks that a row decodes to finite values without decoding it.
    /// Always succeeds for `lloyd4_e5m3_32_r136` rows of the right length.
    pub fn check_row(self, raw: &[u8]) -> Result<(), CodecError> {
        match self {
            Encoding::E4m3E8m0Row264 => row264::check(self.raw_row(raw)?),
            Encoding::Lloyd4E5m3Row136 => self.raw_row::<{ row136::ROW_BYTES }>(raw).map(|_| ()),
        }
    }

    /// Copies a row's bytes as stored; only the lengths are checked.
    pub fn copy_raw(self, raw: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
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

    /// `raw` as a fixed-size row, or the length error for this encoding.
    fn raw_row<const N: usize>(self, raw: &[u8]) -> Result<&[u8; N], CodecError> {
        debug_assert_eq!(N, self.row_bytes());
        raw.try_into().map_err(|_| self.wrong_length(raw))
    }

    fn wrong_length(self, raw: &[u8]) -> CodecError {
        CodecError::RawLength {
            encoding: self,
            expected: self.row_bytes(),
            actual: raw.len(),
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
