//! Shared helpers of the prefetch tests: a tiny layout, the reference rows
//! and model files; the in-memory row source with fault injection is
//! `engram::testing::MemSource`.
#![allow(dead_code)]

use std::sync::Arc;

use engram::layout::{Family, Layout, TableLayout};
use engram::prefetch::source::RowSource;

// Not every test binary that includes this module uses each of these.
#[allow(unused_imports)]
pub use engram::testing::{row_bytes_of, within, MemSource, ROW_BYTES};

pub const VOCAB: u32 = 50;

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
            stored_rows: u64::from(sum),
            multipliers: m.to_vec(),
        }
    };
    Layout {
        family: Family::DeepSeekEngram,
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
