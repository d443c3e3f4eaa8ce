//! What can be wrong with a row's bytes or with the buffers handed to a codec.

use super::Encoding;

/// Why a row could not be decoded, checked or encoded.
///
/// Value indices count from 0 within the row (to 255 for the DeepSeek
/// encodings, to `dim - 1` for the others); groups are the 8 runs of 32
/// values that share one scale byte of a DeepSeek row; blocks are the runs
/// of 32 values of a ggml row or the groups of an `mlx4` row.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum CodecError {
    /// The raw row is not `encoding.row_bytes()` long.
    RawLength {
        /// The encoding the row was read as.
        encoding: Encoding,
        /// Bytes that encoding needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The f32 output buffer has the wrong length.
    OutputLength {
        /// Values the call writes.
        expected: usize,
        /// Values the buffer holds.
        actual: usize,
    },
    /// The destination row of an encode or transcode is the wrong length.
    DestinationLength {
        /// The encoding being written.
        encoding: Encoding,
        /// Bytes that encoding needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// An E4M3FN value byte is one of the NaN codes (0x7f, 0xff).
    NanCode {
        /// Index of the value in the row.
        index: usize,
        /// The byte.
        code: u8,
    },
    /// An E8M0 scale byte is 255, E8M0's NaN.
    NanScale {
        /// Index of the 32-value group.
        group: usize,
        /// The byte (always 255).
        byte: u8,
    },
    /// A valid code times a valid scale overflows to infinity.
    NotFinite {
        /// Index of the value in the row.
        index: usize,
        /// The E4M3 byte.
        code: u8,
        /// The E8M0 scale byte of its group.
        scale: u8,
    },
    /// No representable E5M3 scale pair brackets a group's largest magnitude
    /// (both candidate scales must lie in [2^-17, 30720]).
    ScaleOutOfRange {
        /// Index of the 32-value group.
        group: usize,
        /// The group's largest magnitude.
        amax: f32,
    },
    /// A stored bf16, f16 or f32 value is NaN or infinite.
    NonFiniteValue {
        /// Index of the value in the row.
        index: usize,
        /// The stored format (`bf16`, `f16`, `f32`).
        format: &'static str,
        /// The value's bits as stored (the low 16 for bf16 and f16).
        bits: u32,
    },
    /// A valid E4M3 code times the table's global fp8 scale overflows.
    ScaledNotFinite {
        /// Index of the value in the row.
        index: usize,
        /// The E4M3 byte.
        code: u8,
        /// The table's scale.
        scale: f32,
    },
    /// A block's stored scale or minimum (ggml `d` / `m`, f16) or a group's
    /// scale or bias (`mlx4`, bf16) is NaN or infinite.
    NonFiniteBlockScale {
        /// Index of the 32-value block or group.
        block: usize,
        /// Which field: `d`, `m`, `scale` or `bias`.
        field: &'static str,
        /// Its stored format (`f16`, `bf16`).
        format: &'static str,
        /// Its bits as stored.
        bits: u16,
    },
    /// An `mlx4` value, `code * scale + bias` from finite parts, overflows.
    AffineNotFinite {
        /// Index of the value in the row.
        index: usize,
        /// The 4-bit code.
        code: u8,
        /// Its group's scale.
        scale: f32,
        /// Its group's bias.
        bias: f32,
    },
    /// An encoding's parameters are invalid (a `dim` of 0 or, for a block
    /// format, not a multiple of 32; an fp8 scale not finite and positive).
    InvalidParams {
        /// The encoding as given.
        encoding: Encoding,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The f32 input of an encode has the wrong length.
    InputLength {
        /// The encoding being written.
        encoding: Encoding,
        /// Values that encoding's rows hold.
        expected: usize,
        /// Values given.
        actual: usize,
    },
    /// An encoder input value is NaN or infinite.
    NonFiniteInput {
        /// The encoding being written.
        encoding: Encoding,
        /// Index of the value in the row.
        index: usize,
        /// The value.
        value: f32,
    },
    /// An encoder input value is finite but beyond what the format holds
    /// (it would round to infinity in bf16 or f16, or past 448 in E4M3FN
    /// after the fp8 scale).
    OutOfRange {
        /// The encoding being written.
        encoding: Encoding,
        /// Index of the value in the row.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A block's computed scale or minimum does not fit its f16 (ggml) or
    /// bf16 (`mlx4`) field.
    BlockScaleOutOfRange {
        /// The encoding being written.
        encoding: Encoding,
        /// Index of the 32-value block or group.
        block: usize,
        /// Which field: `d`, `m`, `scale` or `bias`.
        field: &'static str,
        /// The f32 value that does not fit.
        value: f32,
    },
    /// The encoding has no encoder from f32 values (the DeepSeek ones:
    /// their rows come from checkpoints or from [`super::encode_row136`]).
    EncodeUnsupported {
        /// The encoding asked for.
        encoding: Encoding,
    },
    /// A transcode between two encodings that is not implemented.
    Unsupported {
        /// Source encoding.
        from: Encoding,
        /// Requested encoding.
        to: Encoding,
    },
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            CodecError::RawLength {
                encoding,
                expected,
                actual,
            } => write!(
                f,
                "raw row is {actual} bytes, {encoding} rows are {expected}"
            ),
            CodecError::OutputLength { expected, actual } => {
                write!(f, "output holds {actual} f32 values, expected {expected}")
            }
            CodecError::DestinationLength {
                encoding,
                expected,
                actual,
            } => write!(
                f,
                "destination row is {actual} bytes, {encoding} rows are {expected}"
            ),
            CodecError::NanCode { index, code } => {
                write!(f, "value {index}: E4M3 code {code:#04x} is NaN")
            }
            CodecError::NanScale { group, byte } => {
                write!(f, "group {group}: E8M0 scale {byte} is NaN")
            }
            CodecError::NotFinite { index, code, scale } => {
                let sign = if code & 0x80 != 0 { "-" } else { "" };
                write!(
                    f,
                    "value {index} decodes to {sign}inf (E4M3 code {code:#04x} times 2^{})",
                    i32::from(scale) - 127
                )
            }
            CodecError::ScaleOutOfRange { group, amax } => write!(
                f,
                "group {group}: largest magnitude {amax:e} has no pair of E5M3 scales \
                 around it inside [2^-17, 30720]"
            ),
            CodecError::NonFiniteValue {
                index,
                format,
                bits,
            } => write!(
                f,
                "value {index}: stored {format} {bits:#x} is NaN or infinite"
            ),
            CodecError::ScaledNotFinite { index, code, scale } => write!(
                f,
                "value {index} overflows: E4M3 code {code:#04x} times the table scale {scale:e}"
            ),
            CodecError::NonFiniteBlockScale {
                block,
                field,
                format,
                bits,
            } => write!(
                f,
                "block {block} (values {}..{}): {format} {field} {bits:#06x} is NaN or infinite",
                block * 32,
                block * 32 + 32
            ),
            CodecError::AffineNotFinite {
                index,
                code,
                scale,
                bias,
            } => write!(
                f,
                "value {index} overflows: code {code} * scale {scale:e} + bias {bias:e}"
            ),
            CodecError::InvalidParams { encoding, reason } => {
                write!(
                    f,
                    "{encoding} with {} values per row: {reason}",
                    encoding.values()
                )
            }
            CodecError::InputLength {
                encoding,
                expected,
                actual,
            } => write!(f, "{actual} values given, {encoding} rows hold {expected}"),
            CodecError::NonFiniteInput {
                encoding,
                index,
                value,
            } => write!(f, "value {index} ({value}) cannot be encoded as {encoding}"),
            CodecError::OutOfRange {
                encoding,
                index,
                value,
            } => write!(f, "value {index} ({value:e}) is out of {encoding}'s range"),
            CodecError::BlockScaleOutOfRange {
                encoding,
                block,
                field,
                value,
            } => write!(
                f,
                "block {block} (values {}..{}): {field} {value:e} does not fit {encoding}'s field",
                block * 32,
                block * 32 + 32
            ),
            CodecError::EncodeUnsupported { encoding } => {
                write!(f, "{encoding} rows have no encoder from f32 values")
            }
            CodecError::Unsupported { from, to } => write!(
                f,
                "cannot transcode {from} to {to}: only identity copies and \
                 e4m3_e8m0_32_row264 -> lloyd4_e5m3_32_r136 are supported"
            ),
        }
    }
}

impl std::error::Error for CodecError {}

impl CodecError {
    /// Turns this into the library error for row `row` of table `table`
    /// ([`crate::Error::CorruptRow`], the message of `self` as its reason).
    pub fn into_error(self, table: usize, row: u64) -> crate::Error {
        crate::Error::CorruptRow {
            table,
            row,
            reason: self.to_string(),
        }
    }
}

/// A failure inside a batch of rows: which row of the batch, and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowsError {
    /// Index of the row within the batch (0 = first row of the slice).
    pub index: usize,
    /// What was wrong with that row or with the buffers at that row.
    pub error: CodecError,
}

impl std::fmt::Display for RowsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "row {} of the batch: {}", self.index, self.error)
    }
}

impl std::error::Error for RowsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl RowsError {
    /// Turns this into [`crate::Error::CorruptRow`] for table `table`, where
    /// `row` is the table row id the caller placed at batch position
    /// [`RowsError::index`].
    pub fn into_error(self, table: usize, row: u64) -> crate::Error {
        self.error.into_error(table, row)
    }

    /// Turns this into [`crate::Error::CorruptRow`] for table `table`, where
    /// the batch held the rows `ids` in order (`u64::MAX` names a position
    /// past them: a buffer-length mistake rather than a bad row).
    pub fn into_error_at(self, table: usize, ids: &[u32]) -> crate::Error {
        let row = ids.get(self.index).map_or(u64::MAX, |&r| u64::from(r));
        self.into_error(table, row)
    }
}
