//! The bridge to the layout module: derivations a model reader needs when a
//! file leaves part of the layout out, and layout validation.

use crate::layout::Layout;
use crate::{Error, Result};

/// The token map of the vendored DeepSeek V4 tokenizer.
pub fn vendored_token_map() -> Result<Vec<u32>> {
    Err(Error::InvalidArgument(
        "deriving the token map needs the layout module (not merged yet)".into(),
    ))
}

/// Multipliers of `layer_ids` (flattened, table-major) for `seed`.
pub fn multipliers(
    _layer_ids: &[u32],
    _max_ngram: usize,
    _cvocab: u32,
    _seed: u64,
) -> Result<Vec<u64>> {
    Err(Error::InvalidArgument(
        "deriving multipliers needs the layout module (not merged yet)".into(),
    ))
}

/// Primes of `n_tables` tables (flattened) walking up from `vocab - 1`.
pub fn primes(
    _n_tables: usize,
    _max_ngram: usize,
    _n_heads: usize,
    _vocab: u64,
) -> Result<Vec<u32>> {
    Err(Error::InvalidArgument(
        "deriving primes needs the layout module (not merged yet)".into(),
    ))
}

/// Checks a layout's internal consistency.
pub fn validate(layout: &Layout) -> Result<()> {
    let cols = (layout.max_ngram_size - 1) * layout.n_heads;
    for (i, t) in layout.tables.iter().enumerate() {
        if t.primes.len() != cols || t.offsets.len() != cols {
            return Err(Error::layout(
                format!("tables[{i}].primes"),
                "wrong column count",
            ));
        }
        if t.multipliers.len() != layout.max_ngram_size || t.multipliers.iter().any(|m| m % 2 == 0)
        {
            return Err(Error::layout(
                format!("tables[{i}].multipliers"),
                "must be odd, one per position",
            ));
        }
        if t.primes.contains(&0) || t.rows != t.primes.iter().map(|&p| u64::from(p)).sum::<u64>() {
            return Err(Error::layout(
                format!("tables[{i}].rows"),
                "not the sum of the primes",
            ));
        }
    }
    if layout.pad_compressed_id >= layout.compressed_vocab_size {
        return Err(Error::layout(
            "pad_compressed_id",
            "outside the compressed vocabulary",
        ));
    }
    Ok(())
}

/// The token map of a `tokenizer.json` document read from `path`.
pub fn token_map_from_tokenizer_json(_path: &std::path::Path, _json: &[u8]) -> Result<Vec<u32>> {
    Err(Error::InvalidArgument(
        "deriving the token map needs the layout module (not merged yet)".into(),
    ))
}

/// The layout derived from `params` and a token map.
pub fn layout(_params: &crate::layout::LayoutParams, _token_map: Vec<u32>) -> Result<Layout> {
    Err(Error::InvalidArgument(
        "deriving a layout needs the layout module (not merged yet)".into(),
    ))
}
