//! Shared helpers of the model tests: a small hand-made layout.

#![allow(dead_code)]

use std::sync::Arc;

use std::path::Path;

use engram::layout::{Family, Layout, TableLayout};
use engram::model::Model;
use engram::Error;

/// A table layout from primes (offsets are running sums).
pub fn table(layer_id: u32, primes: &[u32], multipliers: &[u64]) -> TableLayout {
    let mut offsets = Vec::new();
    let mut sum = 0u64;
    for &p in primes {
        offsets.push(sum as u32);
        sum += u64::from(p);
    }
    TableLayout {
        layer_id,
        primes: primes.to_vec(),
        offsets,
        rows: sum,
        stored_rows: sum,
        multipliers: multipliers.to_vec(),
    }
}

/// Two tables (layers 1 and 5), n-grams up to 3, 2 heads: 4 columns each,
/// a few thousand rows; 12 tokens folded into 6 compressed ids.
pub fn tiny_layout() -> Layout {
    Layout {
        family: Family::DeepSeekEngram,
        max_ngram_size: 3,
        n_heads: 2,
        head_dim: 256,
        token_map: Arc::from(vec![0u32, 1, 2, 3, 1, 4, 5, 2, 0, 3, 4, 5]),
        compressed_vocab_size: 6,
        pad_compressed_id: 2,
        tables: vec![
            table(1, &[1009, 1013, 1019, 1021], &[3, 5, 7]),
            table(5, &[1031, 1033, 1039, 1049], &[9, 11, 13]),
        ],
    }
}

/// Asserts that opening a malformed model (`r`) failed with a format error
/// naming `file` and a field containing `field`, with a reason.
pub fn assert_format(r: engram::Result<Model>, file: &Path, field: &str) {
    match r {
        Err(Error::Format {
            file: named,
            field: f,
            reason,
        }) => {
            assert_eq!(named, file, "error names the file ({f}: {reason})");
            assert!(
                f.contains(field),
                "field {f:?} (reason {reason:?}) should name {field:?}"
            );
            assert!(!reason.is_empty());
            eprintln!("{}: {f}: {reason}", file.display());
        }
        Err(other) => panic!("expected a format error on {field}, got {other}"),
        Ok(_) => panic!("the malformed model ({field}) was accepted"),
    }
}
