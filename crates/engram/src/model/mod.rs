//! Model files: ds4 GGUF (both metadata dialects), Hugging Face safetensors
//! checkpoint directories, and the synthetic-model writer.
//!
//! [`Model::open`] reads either kind into a validated [`Layout`] and one
//! [`TableLocation`] per table; [`Model::read_raw_rows`] and
//! [`Model::read_rows_f32`] are simple synchronous readers for tools and
//! tests (the prefetch engine has its own). Submodules: `gguf` (the file
//! format), `ds4` (Engram metadata in GGUF), `hf` (checkpoint directories),
//! `synth` (synthetic models), `pack` and `transcode` (GGUF writers fed from
//! another model), `output` (temp-name-then-rename outputs).

use std::fs::File;
use std::path::{Path, PathBuf};

pub mod checks;
pub mod derive;
pub mod ds4;
pub mod gguf;
pub mod hf;
pub mod output;
mod rows;
pub use rows::sample_rows;
pub mod convert;
pub mod stream;
pub mod synth;

use crate::codec::Encoding;
use crate::layout::Layout;
use crate::{Error, Result};

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

impl Model {
    /// Opens a model: a `.gguf` file, or a Hugging Face checkpoint directory.
    pub fn open(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            hf::open(path)
        } else {
            let header = gguf::read_header(path)?;
            ds4::model_from_header(path, &header)
        }
    }

    /// The location of table `table`, or an invalid-argument error.
    pub fn table(&self, table: usize) -> Result<&TableLocation> {
        self.tables.get(table).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table {table} does not exist (the model has {})",
                self.tables.len()
            ))
        })
    }
}

impl TableLocation {
    /// Bytes of one reassembled row (values plus split scales, if any).
    pub fn full_row_bytes(&self) -> usize {
        self.row_bytes as usize + self.scales.as_ref().map_or(0, |s| s.bytes_per_row as usize)
    }

    /// Opens the files this table reads from (values, then scales if split).
    pub fn open_files(&self) -> Result<(File, Option<File>)> {
        let values = File::open(&self.file).map_err(|e| Error::io(&self.file, e))?;
        let scales = match &self.scales {
            Some(s) => Some(File::open(&s.file).map_err(|e| Error::io(&s.file, e))?),
            None => None,
        };
        Ok((values, scales))
    }
}

/// Receives progress of long operations (synth, pack, transcode) in bytes.
pub trait Progress: Sync {
    /// Work of `total` bytes starts.
    fn start(&self, total: u64);
    /// `bytes` more are done.
    fn advance(&self, bytes: u64);
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _total: u64) {}
    fn advance(&self, _bytes: u64) {}
}
