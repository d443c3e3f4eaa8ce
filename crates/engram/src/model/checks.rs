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
