//! Row ids of a sequence's tokens, from the sequence's own token history.
//!
//! Implements the Engram hash as DESIGN.md states it (compressed ids, pad for
//! the first dead position and everything older, multiply-xor mix, per-head
//! prime modulo plus column offset). The crate's `hash` module is the
//! canonical implementation; this one keeps the scheduler independent of its
//! API so a sequence can roll back by truncating its token list.

use crate::layout::Layout;
use crate::{Error, Result};

/// Appends to `out` the row ids of the token at `pos` for every table,
/// `[table][column]`, given the sequence's tokens and liveness so far
/// (`live[i] == false`: token `i` is masked out).
pub(crate) fn hash_position(
    layout: &Layout,
    tokens: &[u32],
    live: &[bool],
    pos: usize,
    out: &mut Vec<u32>,
) -> Result<()> {
    let n = layout.max_ngram_size;
    let mut ids = [0u64; 8];
    if n == 0 || n > ids.len() {
        return Err(Error::layout(
            "max_ngram_size",
            format!("{n} outside 1..={}", ids.len()),
        ));
    }
    let pad = u64::from(layout.pad_compressed_id);
    let mut dead = false;
    for (k, id) in ids.iter_mut().enumerate().take(n) {
        dead = dead || k > pos || !live[pos - k];
        *id = if dead {
            pad
        } else {
            let token = tokens[pos - k];
            let compressed = layout.token_map.get(token as usize).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "token {token} at position {} outside the vocabulary of {} tokens",
                    pos - k,
                    layout.token_map.len()
                ))
            })?;
            u64::from(*compressed)
        };
    }
    for table in &layout.tables {
        let mut mix = ids[0].wrapping_mul(table.multipliers[0]);
        for (k, (&id, &m)) in ids
            .iter()
            .zip(&table.multipliers)
            .enumerate()
            .take(n)
            .skip(1)
        {
            mix ^= id.wrapping_mul(m);
            for h in 0..layout.n_heads {
                let col = (k - 1) * layout.n_heads + h;
                let prime = u64::from(table.primes[col]);
                out.push((mix % prime) as u32 + table.offsets[col]);
            }
        }
    }
    Ok(())
}

/// Columns (rows per token) of each table.
pub(crate) fn columns(layout: &Layout) -> usize {
    layout.max_ngram_size.saturating_sub(1) * layout.n_heads
}
