//! Bounds every model reader applies before trusting a layout from a file.

use std::path::Path;

use crate::layout::Layout;
use crate::{Error, Result};

/// Most Engram tables a model may declare (V4.1 has 2).
pub const MAX_TABLES: usize = 64;

/// Largest n-gram order accepted.
pub const MAX_NGRAM: u64 = 16;

/// Most hash heads per order accepted.
pub const MAX_HEADS: u64 = 256;

/// Most hash columns (tables x orders x heads) a model may declare (V4.1
/// has 48). Bounds the work of deriving primes for a file that lacks them.
pub const MAX_TOTAL_COLUMNS: u64 = 4096;

/// Fails unless `tables` tables of `(max_ngram_size - 1) * n_heads` columns
/// stay within [`MAX_TOTAL_COLUMNS`]; `field` names what is reported.
pub fn total_columns(
    path: &Path,
    field: &str,
    tables: usize,
    max_ngram_size: u64,
    n_heads: u64,
) -> Result<()> {
    let total = (tables as u64)
        .saturating_mul(max_ngram_size.saturating_sub(1))
        .saturating_mul(n_heads);
    if total > MAX_TOTAL_COLUMNS {
        return Err(Error::format(
            path,
            field,
            format!("{tables} tables x {} orders x {n_heads} heads = {total} hash columns (limit {MAX_TOTAL_COLUMNS})", max_ngram_size.saturating_sub(1)),
        ));
    }
    Ok(())
}

/// Checks a layout read from `path` and returns it. Inconsistencies are
/// reported as [`Error::Format`] on `path`, naming the layout field.
pub fn validated(path: &Path, layout: Layout) -> Result<Layout> {
    match crate::model::derive::validate(&layout) {
        Ok(()) => Ok(layout),
        Err(Error::Layout { field, reason }) => Err(Error::format(path, field, reason)),
        Err(e) => Err(e),
    }
}

/// Fails unless a token map read from `path` (field `field`) has one entry per
/// token of a vocabulary of `vocab` tokens.
pub fn token_map_len(path: &Path, field: &str, map_len: usize, vocab: u64) -> Result<()> {
    if map_len as u64 != vocab {
        return Err(Error::format(
            path,
            field,
            format!("has {map_len} entries, but the vocabulary has {vocab} tokens"),
        ));
    }
    Ok(())
}
