//! Shared helpers of the prefetch tests: a tiny layout and an in-memory row
//! source with fault injection.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use engram::layout::{Layout, TableLayout};
use engram::prefetch::source::{BatchStats, Priority, RowRequest, RowSource, TableShape};
use engram::{Error, Result};

// Not every test binary that includes this module waits on a thread.
#[allow(unused_imports)]
pub use engram::testing::within;

pub const VOCAB: u32 = 50;
pub const ROW_BYTES: usize = 16;

/// A 2-table layout, orders 2..=3, 2 heads: 4 rows per token.
pub fn tiny_layout() -> Layout {
    let table = |layer_id: u32, primes: [u32; 4], m: [u64; 3]| {
        let mut offsets = Vec::new();
        let mut sum = 0;
        for p in primes {
            offsets.push(sum);
            sum += p;
        }
        TableLayout {
            layer_id,
            primes: primes.to_vec(),
            offsets,
            rows: u64::from(sum),
            multipliers: m.to_vec(),
        }
    };
    Layout {
        max_ngram_size: 3,
        n_heads: 2,
        head_dim: 8,
        token_map: (0..VOCAB).map(|t| t % 40).collect::<Vec<_>>().into(),
        compressed_vocab_size: 40,
        pad_compressed_id: 2,
        tables: vec![
            table(1, [61, 59, 53, 47], [1_000_003, 77_777, 123_457]),
            table(14, [43, 41, 37, 31], [998_244_353, 4_093, 65_537]),
        ],
    }
}

/// The deterministic bytes of a row: any mix-up of table, row or position
/// shows as a mismatch.
pub fn row_bytes_of(table: usize, row: u64) -> [u8; ROW_BYTES] {
    let mut out = [0u8; ROW_BYTES];
    let mut x = (row + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((table as u64 + 1) << 56);
    for b in &mut out {
        x ^= x >> 29;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        *b = (x >> 40) as u8;
    }
    out
}

/// An in-memory row source: rows computed by [`row_bytes_of`].
#[derive(Default)]
pub struct MemSource {
    pub shapes: Vec<TableShape>,
    /// Fail every read that includes this (table, row).
    pub fail_row: Option<(usize, u64)>,
    /// Panic on every read that includes this (table, row).
    pub panic_row: Option<(usize, u64)>,
    /// Added latency per call.
    pub delay: Option<Duration>,
    pub calls: AtomicUsize,
    pub hint_calls: AtomicUsize,
}

impl MemSource {
    pub fn for_layout(layout: &Layout) -> MemSource {
        MemSource {
            shapes: layout
                .tables
                .iter()
                .map(|t| TableShape {
                    rows: t.rows,
                    row_bytes: ROW_BYTES,
                })
                .collect(),
            ..MemSource::default()
        }
    }
}

impl RowSource for MemSource {
    fn name(&self) -> String {
        "mem".into()
    }
    fn shapes(&self) -> &[TableShape] {
        &self.shapes
    }
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        let (table, rows, priority) = (request.table, request.rows, request.priority);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if priority == Priority::Hint {
            self.hint_calls.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(d) = self.delay {
            std::thread::sleep(d); // stands in for device latency
        }
        assert_eq!(out.len(), rows.len() * ROW_BYTES, "caller sized out wrong");
        for (row, dst) in rows
            .iter()
            .map(|&r| u64::from(r))
            .zip(out.chunks_exact_mut(ROW_BYTES))
        {
            if row >= self.shapes[table].rows {
                return Err(Error::InvalidArgument(format!(
                    "row {row} outside table {table}"
                )));
            }
            if self.panic_row == Some((table, row)) {
                panic!("injected panic at row {row}");
            }
            if self.fail_row == Some((table, row)) {
                return Err(Error::RowRead {
                    table,
                    row,
                    file: "mem.gguf".into(),
                    offset: row * ROW_BYTES as u64,
                    source: std::io::Error::from_raw_os_error(5),
                });
            }
            dst.copy_from_slice(&row_bytes_of(table, row));
        }
        let mut unique = rows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        Ok(BatchStats {
            rows_requested: rows.len() as u64,
            rows_unique: unique.len() as u64,
            reads_issued: unique.len() as u64,
            bytes_read: (unique.len() * ROW_BYTES) as u64,
            ..BatchStats::default()
        })
    }
}

/// The reference: rows of `ids` (`[token][table][col]`) for `table`, read
/// one by one.
pub fn reference(
    ids: &[u32],
    tables: usize,
    cols: usize,
    table: usize,
    from: usize,
    to: usize,
) -> Vec<u8> {
    let mut out = Vec::new();
    for t in from..to {
        for c in 0..cols {
            let row = ids[t * tables * cols + table * cols + c];
            out.extend_from_slice(&row_bytes_of(table, u64::from(row)));
        }
    }
    out
}

pub fn source_arc(s: MemSource) -> (Arc<MemSource>, Arc<dyn RowSource>) {
    let s = Arc::new(s);
    let d: Arc<dyn RowSource> = s.clone();
    (s, d)
}

/// The tiny layout with 256-value rows, as a model file stores them.
pub fn file_layout() -> Layout {
    Layout {
        head_dim: engram::codec::ROW_DIM,
        ..tiny_layout()
    }
}

/// Writes a synthetic model of [`file_layout`] (264-byte rows, seed 7) to
/// `dir/m.gguf` and opens it.
pub fn write_file_model(dir: &std::path::Path) -> engram::model::Model {
    use engram::model::{synth, Model, NoProgress};
    let path = dir.join("m.gguf");
    let encoding = engram::codec::Encoding::E4m3E8m0Row264;
    synth::write_gguf(&path, &file_layout(), encoding, 7, &NoProgress).unwrap();
    Model::open(&path).unwrap()
}
