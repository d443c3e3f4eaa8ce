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

use std::path::{Path, PathBuf};

pub mod checks;
pub mod derive;
pub mod ds4;
pub mod gguf;
pub mod hf;
// The writers are tools (feature `tools`): an engine that only reads models
// links none of them.
#[cfg(feature = "tools")]
pub mod output;
pub mod qwen;
mod rows;
pub use rows::sample_rows;
#[cfg(feature = "tools")]
pub mod convert;
#[cfg(feature = "tools")]
pub mod stream;
#[cfg(feature = "tools")]
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
    /// An MLX checkpoint directory (safetensors with quantized rows).
    Mlx,
}

/// One stored array of a table's rows inside one shard: `bytes_per_row`
/// bytes for each of the shard's rows, row after row, from `offset` in
/// `file`. A delivered row is its shard's parts concatenated in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowPart {
    /// File holding the array.
    pub file: PathBuf,
    /// Byte offset of the shard's first row in `file`.
    pub offset: u64,
    /// Bytes of this part per row.
    pub bytes_per_row: u32,
}

/// A run of consecutive rows stored together: rows
/// `first_row..first_row + rows` of the table, in one or more parts.
///
/// A packed GGUF table is one shard of one part; a DeepSeek checkpoint
/// table one shard of two parts (E4M3 values, then E8M0 scales); a Qwen4-Exp
/// checkpoint `split_ngram_parts` shards of one part (MLX: three parts,
/// codes, scales and biases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowShard {
    /// Table row id of the shard's first row.
    pub first_row: u64,
    /// Rows in the shard.
    pub rows: u64,
    /// The stored arrays, in the order their bytes make up a delivered row.
    pub parts: Vec<RowPart>,
}

/// Where one table's rows live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLocation {
    /// Layer that consumes the table.
    pub layer_id: u32,
    /// Rows stored (valid row ids are `0..rows`): the layout's rows, plus
    /// the padding rows a format stores after them.
    pub rows: u64,
    /// Row encoding of the delivered (reassembled) row.
    pub encoding: Encoding,
    /// The shards, in row order, covering `0..rows` without gaps; every
    /// shard has the same number of parts with the same `bytes_per_row`.
    pub shards: Vec<RowShard>,
}

/// Where one part of one row is: file, byte offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartSpan<'a> {
    /// File holding the bytes.
    pub file: &'a Path,
    /// Byte offset of the row's part.
    pub offset: u64,
    /// Bytes of the part.
    pub len: usize,
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
            if qwen::gguf::is_qwen(&header) {
                qwen::gguf::model_from_header(path, &header)
            } else {
                ds4::model_from_header(path, &header)
            }
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
    /// A table of `rows` packed rows of `encoding` at `offset` in `file`:
    /// one shard, one part.
    pub fn packed(
        layer_id: u32,
        file: PathBuf,
        offset: u64,
        rows: u64,
        encoding: Encoding,
    ) -> TableLocation {
        let bytes_per_row = encoding.row_bytes() as u32;
        let part = RowPart {
            file,
            offset,
            bytes_per_row,
        };
        TableLocation::unsharded(layer_id, rows, encoding, vec![part])
    }

    /// A table of `rows` rows of `encoding` in one shard whose rows are
    /// stored in `parts`, in delivered order.
    pub fn unsharded(
        layer_id: u32,
        rows: u64,
        encoding: Encoding,
        parts: Vec<RowPart>,
    ) -> TableLocation {
        TableLocation {
            layer_id,
            rows,
            encoding,
            shards: vec![RowShard {
                first_row: 0,
                rows,
                parts,
            }],
        }
    }

    /// Bytes of one delivered row (the sum of a shard's parts).
    pub fn full_row_bytes(&self) -> usize {
        self.shards.first().map_or(0, |s| {
            s.parts.iter().map(|p| p.bytes_per_row as usize).sum()
        })
    }

    /// The shard holding `row`, if any.
    pub fn shard_of(&self, row: u64) -> Option<&RowShard> {
        let i = self.shards.partition_point(|s| s.first_row <= row);
        let shard = self.shards.get(i.checked_sub(1)?)?;
        (row - shard.first_row < shard.rows).then_some(shard)
    }

    /// Where each part of `row` is stored, in delivered order; empty for a
    /// row outside the table.
    pub fn spans(&self, row: u64) -> Vec<PartSpan<'_>> {
        let Some(shard) = self.shard_of(row) else {
            return Vec::new();
        };
        let local = row - shard.first_row;
        shard
            .parts
            .iter()
            .map(|p| PartSpan {
                file: &p.file,
                offset: p.offset + local * u64::from(p.bytes_per_row),
                len: p.bytes_per_row as usize,
            })
            .collect()
    }

    /// Every file the table reads, each once, in first-use order.
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = Vec::new();
        for part in self.shards.iter().flat_map(|s| &s.parts) {
            if !files.contains(&part.file.as_path()) {
                files.push(&part.file);
            }
        }
        files
    }

    /// The file of the first part of the first shard (where the table
    /// starts), for messages.
    pub fn first_file(&self) -> &Path {
        self.shards
            .first()
            .and_then(|s| s.parts.first())
            .map_or(Path::new(""), |p| &p.file)
    }

    /// Byte offset of row 0's first part in [`TableLocation::first_file`].
    pub fn start_offset(&self) -> u64 {
        self.shards
            .first()
            .and_then(|s| s.parts.first())
            .map_or(0, |p| p.offset)
    }

    /// Checks the shards are what [`TableLocation::shards`] promises:
    /// in order, covering `0..rows`, with parts of one shape whose bytes
    /// add up to the encoding's row. `path` names the model in the error.
    pub fn check_shape(&self, path: &Path) -> Result<()> {
        let field = |what: &str| format!("table of layer {} {what}", self.layer_id);
        let Some(first) = self.shards.first() else {
            return Err(Error::format(path, field("shards"), "there are none"));
        };
        let widths: Vec<u32> = first.parts.iter().map(|p| p.bytes_per_row).collect();
        let mut next = 0u64;
        for (i, shard) in self.shards.iter().enumerate() {
            let shard_widths: Vec<u32> = shard.parts.iter().map(|p| p.bytes_per_row).collect();
            if shard_widths != widths {
                return Err(Error::format(
                    path,
                    field(&format!("shard {i}")),
                    format!("part widths {shard_widths:?} differ from shard 0's {widths:?}"),
                ));
            }
            if shard.first_row != next || shard.rows == 0 {
                return Err(Error::format(
                    path,
                    field(&format!("shard {i}")),
                    format!(
                        "holds rows {}..{}, expected to start at row {next} with at least one row",
                        shard.first_row,
                        shard.first_row.saturating_add(shard.rows)
                    ),
                ));
            }
            next = shard.first_row.saturating_add(shard.rows);
        }
        if next != self.rows {
            return Err(Error::format(
                path,
                field("shards"),
                format!("cover {next} rows, the table has {}", self.rows),
            ));
        }
        let row_bytes = self.full_row_bytes();
        if row_bytes != self.encoding.row_bytes() {
            return Err(Error::format(
                path,
                field("row_bytes"),
                format!(
                    "{row_bytes} bytes per row, but encoding {} has {}",
                    self.encoding,
                    self.encoding.row_bytes()
                ),
            ));
        }
        Ok(())
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
