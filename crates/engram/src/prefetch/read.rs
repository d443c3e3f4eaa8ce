//! Reading a list of rows into a buffer, batched or one at a time, with the
//! stats recorded and a panicking source turned into an error.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::guard::panic_message;
use super::source::{BatchStats, Priority, RowSource};
use crate::codec::Encoding;
use crate::stats::{Phase, StatsRecorder};
use crate::{Error, Result};

/// Where a read's rows come from and where its stats go.
pub(crate) struct ReadCtx<'a> {
    pub source: &'a Arc<dyn RowSource>,
    pub stats: &'a StatsRecorder,
    pub phase: Phase,
    pub priority: Priority,
    /// `false`: one request per row (ENGRAM_BATCH=0).
    pub batch: bool,
}

impl ReadCtx<'_> {
    /// Reads `rows` of `table` into `out` (`rows.len() * row_bytes` bytes).
    pub(crate) fn read(&self, table: usize, rows: &[u32], out: &mut [u8]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| self.read_unguarded(table, rows, out)));
        outcome.unwrap_or_else(|panic| {
            let message = panic_message(&*panic);
            Err(Error::io(
                format!("row source {}", self.source.name()),
                std::io::Error::other(format!("reading table {table} panicked: {message}")),
            ))
        })
    }

    /// Reads `rows` of `table` and decodes them (stored as `encoding`) into
    /// `out` (`rows.len() * encoding.values()` values). A corrupt row is an
    /// [`Error::CorruptRow`] naming it. The stored bytes pass through the
    /// caller's `raw`, grown as needed and kept: a prefill reads thousands
    /// of rows a batch, and a fresh zeroed buffer each time cost it more
    /// instructions than the reads (callgrind, an f32 prefill of 4,096
    /// tokens).
    pub(crate) fn read_f32_via(
        &self,
        table: usize,
        rows: &[u32],
        encoding: Encoding,
        out: &mut [f32],
        raw: &mut Vec<u8>,
    ) -> Result<()> {
        let raw = grown(raw, rows.len() * encoding.row_bytes());
        self.read(table, rows, raw)?;
        encoding
            .decode_rows(raw, out)
            .map_err(|e| e.into_error_at(table, rows))
    }

    fn read_unguarded(&self, table: usize, rows: &[u32], out: &mut [u8]) -> Result<()> {
        if self.batch {
            let stats = self.source.read_rows_at(table, rows, out, self.priority)?;
            self.stats.record_batch(self.phase, table, &stats);
            return Ok(());
        }
        let row_bytes = out.len() / rows.len();
        let mut total = BatchStats::default();
        for (row, dst) in rows.iter().zip(out.chunks_exact_mut(row_bytes)) {
            let one =
                self.source
                    .read_rows_at(table, std::slice::from_ref(row), dst, self.priority)?;
            total.merge(&one);
        }
        self.stats.record_batch(self.phase, table, &total);
        Ok(())
    }
}

/// The first `len` bytes of `buf`, grown to hold them; its allocation and
/// length are kept for the next use.
///
/// Why not cleared to `len` zero bytes each time: every read whose bytes
/// are looked at writes all of the `len` bytes it is given (a warm-up's
/// may write none, and nobody reads them), and zeroing a prefill's scratch
/// was 14% of a prefill token's instructions (callgrind, docs/bench.md "CPU
/// cost").
pub(crate) fn grown(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len {
        buf.resize(len, 0);
    }
    &mut buf[..len]
}
