//! Model files: ds4 GGUF (both metadata dialects), Hugging Face safetensors
//! checkpoint directories, and the synthetic-model writer.

use std::path::PathBuf;

use crate::codec::Encoding;
use crate::layout::Layout;

/// Which kind of file a model was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    /// A single `.gguf` file with packed rows.
    Gguf,
    /// A Hugging Face checkpoint directory with safetensors shards.
    HuggingFace,
}

/// Where a table's scale bytes live when they are stored apart from the
/// value bytes (Hugging Face checkpoints: `.scale` tensors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitScales {
    /// File holding the scale tensor.
    pub file: PathBuf,
    /// Byte offset of row 0's scales in that file.
    pub offset: u64,
    /// Scale bytes per row (8 for 256 values in groups of 32).
    pub bytes_per_row: u32,
}

/// Where one Engram table's rows live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLocation {
    /// Layer that consumes the table.
    pub layer_id: u32,
    /// File holding the rows (for split tables: the value bytes).
    pub file: PathBuf,
    /// Byte offset of row 0 in `file`.
    pub offset: u64,
    /// Number of rows.
    pub rows: u64,
    /// Row encoding (for split tables: the encoding of the reassembled row).
    pub encoding: Encoding,
    /// Bytes per row at `offset` in `file` (for split tables: value bytes only).
    pub row_bytes: u32,
    /// Scale bytes stored apart, if any. A read of row `r` then reads
    /// `row_bytes` at `offset + r * row_bytes` and `bytes_per_row` at
    /// `scales.offset + r * bytes_per_row`, and concatenates them.
    pub scales: Option<SplitScales>,
}

/// An opened model: its layout and where each table's rows are.
#[derive(Debug, Clone)]
pub struct Model {
    /// The file format it came from.
    pub format: ModelFormat,
    /// Metadata dialect (`deepseek41`, `deepseek4` or `hf`).
    pub dialect: String,
    /// The Engram layout.
    pub layout: Layout,
    /// One location per table, in layout order.
    pub tables: Vec<TableLocation>,
}
