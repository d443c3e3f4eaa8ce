//! Facts about an open engine, gathered once here for every embedder (the
//! C ABI's `engram_engine_info` / `engram_table_info`, Python's
//! `Engine.info`), so no binding assembles them from the engine's parts.

use std::path::PathBuf;

use super::OpenEngine;
use crate::codec::Encoding;
use crate::io::Backend;
use crate::prefetch::RowFormat;
use crate::Result;

/// Facts about an engine ([`OpenEngine::info`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EngineInfo {
    /// Rows per token of each table (hash heads times n-gram orders).
    pub rows_per_token: usize,
    /// Token ids accepted are `0..vocab_size`.
    pub vocab_size: usize,
    /// Values of a decoded row of table 0 (the f32 format).
    pub row_dim: usize,
    /// Most tokens one prefill wait may cover (`chunk_tokens *
    /// ring_chunks`); with the pipeline off a wait may cover the whole
    /// prompt.
    pub max_wait_tokens: u32,
    /// The format waits deliver.
    pub format: RowFormat,
    /// The backend actually used (never [`Backend::Auto`]).
    pub backend: Backend,
    /// Why the backend differs from the one asked for, if it does.
    pub backend_note: Option<String>,
    /// Whether the engine has a row cache.
    pub cached: bool,
    /// Each table, in layer order.
    pub tables: Vec<TableInfo>,
}

/// Facts about one table of an engine ([`OpenEngine::table_info`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableInfo {
    /// The transformer layer that consumes the table.
    pub layer_id: u32,
    /// Rows in the table.
    pub rows: u64,
    /// Bytes of a row as stored (the raw format), e.g. 264.
    pub stored_row_bytes: usize,
    /// Bytes of a row as waits deliver it in the engine's format.
    pub row_bytes: usize,
    /// How the stored rows are encoded: what a host that takes raw rows
    /// and decodes them itself (on a GPU, say) needs.
    pub encoding: Encoding,
    /// The file holding the table's rows (for a checkpoint: the values).
    pub file: PathBuf,
    /// Byte offset of row 0 in `file`; row `r` of a packed table is at
    /// `offset + r * stored_row_bytes`.
    pub offset: u64,
    /// Whether the table's rows are stored in several arrays or shards (a
    /// Hugging Face checkpoint keeps scales apart from values), so a row
    /// is not one contiguous range of `file`.
    pub split: bool,
}

impl OpenEngine {
    /// Facts about the engine and each of its tables.
    pub fn info(&self) -> EngineInfo {
        let config = self.engine.config();
        let layout = self.engine.layout();
        EngineInfo {
            rows_per_token: layout.columns(),
            vocab_size: layout.vocab_size(),
            row_dim: self.row_dim(0),
            max_wait_tokens: config.ring_tokens(),
            format: config.format,
            backend: self.backend,
            backend_note: self.note.clone(),
            cached: self.cache.is_some(),
            tables: (0..self.tables()).map(|t| self.table_facts(t)).collect(),
        }
    }

    /// Facts about table `table`, or an error naming the range.
    pub fn table_info(&self, table: usize) -> Result<TableInfo> {
        Ok(self.table_facts(self.check_table(table)?))
    }

    /// [`OpenEngine::table_info`] of a table already checked.
    fn table_facts(&self, table: usize) -> TableInfo {
        let loc = &self.model.tables[table];
        TableInfo {
            layer_id: loc.layer_id,
            rows: loc.rows,
            stored_row_bytes: self.engine.source().row_bytes(table),
            row_bytes: self.row_bytes(table, self.engine.config().format),
            encoding: loc.encoding,
            file: loc.first_file().to_path_buf(),
            offset: loc.start_offset(),
            split: loc.shards.len() > 1 || loc.shards.iter().any(|s| s.parts.len() > 1),
        }
    }
}
