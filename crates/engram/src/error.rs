//! The one error type of the library.
//!
//! Every variant names what it is about (file, field, table, row, offset) so a
//! message printed as-is tells the user what was wrong and where.

use std::path::PathBuf;

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A model or data file whose contents are malformed.
    #[error("{}: {field}: {reason}", file.display())]
    Format {
        /// The file that is malformed.
        file: PathBuf,
        /// The field, key or tensor that is wrong.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A layout (primes, multipliers, token map, ...) that is inconsistent.
    #[error("layout: {field}: {reason}")]
    Layout {
        /// The layout value that is wrong.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A tokenizer that could not be loaded or used.
    #[error("tokenizer {source_name}: {reason}")]
    Tokenizer {
        /// Where the tokenizer came from (a path, or "vendored").
        source_name: String,
        /// What went wrong.
        reason: String,
    },
    /// A row whose bytes do not decode (a NaN code, a NaN scale, a non-finite value).
    #[error("corrupt row {row} of table {table}: {reason}")]
    CorruptRow {
        /// Table index (0-based, in layer order).
        table: usize,
        /// Row id inside the table.
        row: u64,
        /// What is wrong with the bytes.
        reason: String,
    },
    /// A row read that failed at the device.
    #[error("reading row {row} of table {table} from {} at offset {offset}: {source}", file.display())]
    RowRead {
        /// Table index (0-based, in layer order).
        table: usize,
        /// Row id inside the table.
        row: u64,
        /// The file read from.
        file: PathBuf,
        /// Byte offset of the failed read.
        offset: u64,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A caller passed a value outside what the call accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The operation was cancelled (its sequence, prefill or engine was dropped).
    #[error("cancelled")]
    Cancelled,
    /// A bug in the library: a reader task panicked. The message names the
    /// task and table; the prefill or sequence it happened on answers this
    /// error from then on instead of waiting for work that will not come.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Builds an [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds an [`Error::Format`] for `file`, `field` and `reason`.
    pub fn format(
        file: impl Into<PathBuf>,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Format {
            file: file.into(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::Layout`] for `field` and `reason`.
    pub fn layout(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Layout {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// What kind of failure an [`Error`] is, for embedders that map errors to
/// their own types (C status codes, Python exceptions). Not
/// `non_exhaustive` on purpose: a new kind is a compile error in every
/// mapping, so none silently files it under a catch-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`Error::Io`].
    Io,
    /// [`Error::Format`].
    Format,
    /// [`Error::Layout`].
    Layout,
    /// [`Error::Tokenizer`].
    Tokenizer,
    /// [`Error::CorruptRow`].
    CorruptRow,
    /// [`Error::RowRead`].
    RowRead,
    /// [`Error::InvalidArgument`].
    InvalidArgument,
    /// [`Error::Cancelled`].
    Cancelled,
    /// [`Error::Internal`].
    Internal,
}

impl Error {
    /// The error's kind. The match is exhaustive (this crate may match its
    /// own `non_exhaustive` enum without a wildcard), so a new variant must
    /// be given a kind here.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { .. } => ErrorKind::Io,
            Error::Format { .. } => ErrorKind::Format,
            Error::Layout { .. } => ErrorKind::Layout,
            Error::Tokenizer { .. } => ErrorKind::Tokenizer,
            Error::CorruptRow { .. } => ErrorKind::CorruptRow,
            Error::RowRead { .. } => ErrorKind::RowRead,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }
}
