//! The row-source contract the scheduler reads through.
//!
//! This mirrors `engram::io::RowSource` (the row I/O engine, developed on
//! its own branch) signature for signature, so the scheduler compiles and is
//! tested before that module is merged; at the merge this file becomes a
//! re-export of `crate::io`.

use std::sync::Arc;
use std::time::Duration;

use crate::Result;

/// How urgently a batch is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Needed now: served first.
    #[default]
    Demand,
    /// Speculative: served with what demand work leaves free.
    Hint,
}

/// Counters and read latencies of one or more batches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Row ids asked for (with duplicates).
    pub rows_requested: u64,
    /// Distinct row ids asked for.
    pub rows_unique: u64,
    /// Distinct rows served from a row cache instead of storage.
    pub cache_hits: u64,
    /// Reads issued to storage (after coalescing).
    pub reads_issued: u64,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Wall time of the batch call(s).
    pub elapsed: Duration,
    /// Latency of each read issued, in nanoseconds.
    pub read_latencies_ns: Vec<u64>,
}

/// A source of Engram rows: one or more tables of fixed-size rows.
pub trait RowSource: Send + Sync {
    /// A short name of the backend.
    fn name(&self) -> String;
    /// Number of tables.
    fn tables(&self) -> usize;
    /// Rows in `table`.
    fn table_rows(&self, table: usize) -> u64;
    /// Bytes per delivered row of `table`.
    fn row_bytes(&self, table: usize) -> usize;
    /// Reads `rows` of `table` into `out` in request order
    /// (`out.len() == rows.len() * row_bytes`).
    fn read_rows_at(
        &self,
        table: usize,
        rows: &[u64],
        out: &mut [u8],
        priority: Priority,
    ) -> Result<BatchStats>;
    /// [`RowSource::read_rows_at`] at [`Priority::Demand`].
    fn read_rows(&self, table: usize, rows: &[u64], out: &mut [u8]) -> Result<BatchStats> {
        self.read_rows_at(table, rows, out, Priority::Demand)
    }
}

impl<S: RowSource + ?Sized> RowSource for Arc<S> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn tables(&self) -> usize {
        (**self).tables()
    }
    fn table_rows(&self, table: usize) -> u64 {
        (**self).table_rows(table)
    }
    fn row_bytes(&self, table: usize) -> usize {
        (**self).row_bytes(table)
    }
    fn read_rows_at(
        &self,
        table: usize,
        rows: &[u64],
        out: &mut [u8],
        priority: Priority,
    ) -> Result<BatchStats> {
        (**self).read_rows_at(table, rows, out, priority)
    }
}
