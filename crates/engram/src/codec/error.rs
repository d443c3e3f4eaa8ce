//! What can be wrong with a row's bytes or with the buffers handed to a codec.

use super::Encoding;

/// Why a row could not be decoded, checked or encoded.
///
/// Value indices count from 0 to 255 within the row; groups are the 8 runs
/// of 32 values that share one scale byte.
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
