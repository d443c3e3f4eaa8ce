//! The hash layout a GGUF file's Engram keys describe: read as the ds4
//! dialect gives it, or derived where the other converters leave it out,
//! then assembled and checked against the keys that restate it.

use std::sync::Arc;

use super::meta::Meta;
use super::Dialect;
use crate::codec::ROW_DIM;
use crate::layout::{Family, Layout, TableLayout};
use crate::model::gguf::Value;
use crate::model::{checks, derive};
use crate::{Error, Result};

/// Per-table shape of the hash: columns and n-gram positions.
struct Shape {
    n_tables: usize,
    max_ngram_size: usize,
    n_heads: usize,
}

impl Shape {
    fn columns(&self) -> usize {
        (self.max_ngram_size - 1) * self.n_heads
    }
}

/// The layout `meta` describes: the layer ids, then the hash parameters as
/// the dialect gives or derives them, assembled and checked once.
pub(super) fn layout(meta: &Meta) -> Result<Layout> {
    let layer_ids = meta.layer_ids()?;
    let hash = match meta.dialect {
        Dialect::Deepseek41 => hash_ds41(meta, layer_ids.len())?,
        Dialect::Deepseek4 => hash_ds4(meta, &layer_ids)?,
    };
    assemble(meta, &layer_ids, hash)
}

/// The hash parameters beyond the layer ids, flattened table-major.
struct Hash {
    shape: Shape,
    primes: Vec<u32>,
    multipliers: Vec<u64>,
    token_map: Vec<u32>,
    pad_id: u64,
}

/// The ds4 dialect: everything is in the file.
fn hash_ds41(meta: &Meta, n_tables: usize) -> Result<Hash> {
    let primes = meta.req_ints("primes")?;
    let multipliers = meta.req_ints("multipliers")?;
    let shape = shape_from(meta, n_tables, primes.len(), multipliers.len())?;
    Ok(Hash {
        primes: meta.u32s("primes", primes, n_tables * shape.columns())?,
        token_map: meta.token_map()?.ok_or_else(|| meta.missing("token_map"))?,
        pad_id: meta.req_int("pad_id")?,
        multipliers,
        shape,
    })
}

/// The other converters' dialect: derive what the file lacks.
fn hash_ds4(meta: &Meta, layer_ids: &[u32]) -> Result<Hash> {
    let n_tables = layer_ids.len();
    let max_ngram_size = meta.req_int("max_ngram_size")?;
    let n_heads = meta.req_int("head_count")?;
    let shape = checked_shape(meta, n_tables, max_ngram_size, n_heads)?;
    let rows = meta.req_ints("num_embeddings")?;
    if rows.len() != n_tables {
        return Err(meta.bad(
            "num_embeddings",
            format!(
                "has {} elements, expected one per table ({n_tables})",
                rows.len()
            ),
        ));
    }
    let primes = ds4_primes(meta, layer_ids, &shape, &rows)?;
    let token_map = match meta.token_map()? {
        Some(m) => m,
        None => derive::vendored_token_map()?,
    };
    let pad_id = match meta.int("pad_id")? {
        Some(p) => p,
        None => meta
            .header
            .get("tokenizer.ggml.padding_token_id")
            .and_then(Value::as_u64)
            .ok_or_else(|| meta.missing("pad_id"))?,
    };
    let multipliers = match meta.ints("multipliers")? {
        Some(m) => m,
        None => {
            let seed = meta.int("seed")?.unwrap_or(0);
            let cvocab = compressed_vocab(meta, &token_map)?;
            derive::multipliers(layer_ids, shape.max_ngram_size, cvocab, seed)?
        }
    };
    Ok(Hash {
        shape,
        primes,
        multipliers,
        token_map,
        pad_id,
    })
}

/// Primes of the deepseek4 dialect: given, from offsets, or derived.
fn ds4_primes(meta: &Meta, layer_ids: &[u32], shape: &Shape, rows: &[u64]) -> Result<Vec<u32>> {
    let cols = shape.columns();
    let total = shape.n_tables * cols;
    if let Some(p) = meta.ints("primes")? {
        return meta.u32s("primes", p, total);
    }
    if let Some(offsets) = meta.ints("offsets")? {
        let offsets = meta.u32s("offsets", offsets, total)?;
        let mut primes = Vec::with_capacity(total);
        for (t, table) in offsets.chunks(cols).enumerate() {
            for c in 0..cols {
                let end = if c + 1 < cols {
                    u64::from(table[c + 1])
                } else {
                    rows[t]
                };
                let p = end
                    .checked_sub(u64::from(table[c]))
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|&p| p > 0)
                    .ok_or_else(|| {
                        meta.bad(
                            "offsets",
                            format!("table {t} column {c}: offsets do not increase up to num_embeddings"),
                        )
                    })?;
                primes.push(p);
            }
        }
        return Ok(primes);
    }
    let vocab = meta.int("vocab_size")?.ok_or_else(|| {
        Error::format(
            meta.path,
            meta.key("vocab_size"),
            "missing: needed to derive the primes (no primes or offsets either)",
        )
    })?;
    derive::primes(layer_ids.len(), shape.max_ngram_size, shape.n_heads, vocab)
}

fn compressed_vocab(meta: &Meta, token_map: &[u32]) -> Result<u32> {
    match meta.int("compressed_vocab_size")? {
        Some(c) => u32::try_from(c)
            .map_err(|_| meta.bad("compressed_vocab_size", format!("{c} exceeds u32"))),
        None => token_map
            .iter()
            .max()
            .map(|&m| m + 1)
            .ok_or_else(|| meta.bad("token_map", "is empty")),
    }
}

/// Works out heads and n-gram size from the flattened array lengths, checked
/// against `head_count` / `max_ngram_size` when present.
fn shape_from(meta: &Meta, n_tables: usize, n_primes: usize, n_mult: usize) -> Result<Shape> {
    if n_mult % n_tables != 0 {
        return Err(meta.bad(
            "multipliers",
            format!("{n_mult} elements do not split into {n_tables} tables"),
        ));
    }
    if n_primes % n_tables != 0 {
        return Err(meta.bad(
            "primes",
            format!("{n_primes} elements do not split into {n_tables} tables"),
        ));
    }
    let max_ngram_size = match meta.int("max_ngram_size")? {
        Some(n) => n,
        None => (n_mult / n_tables) as u64,
    };
    let n_heads = match meta.int("head_count")? {
        Some(h) => h,
        None => {
            let orders = max_ngram_size.saturating_sub(1).max(1);
            (n_primes / n_tables) as u64 / orders
        }
    };
    checked_shape(meta, n_tables, max_ngram_size, n_heads)
}

fn checked_shape(meta: &Meta, n_tables: usize, max_ngram_size: u64, n_heads: u64) -> Result<Shape> {
    if !(2..=checks::MAX_NGRAM).contains(&max_ngram_size) {
        return Err(meta.bad(
            "max_ngram_size",
            format!("{max_ngram_size} is outside 2..={}", checks::MAX_NGRAM),
        ));
    }
    if !(1..=checks::MAX_HEADS).contains(&n_heads) {
        return Err(meta.bad(
            "head_count",
            format!("{n_heads} is outside 1..={}", checks::MAX_HEADS),
        ));
    }
    let field = meta
        .find("head_count")
        .map_or_else(|| meta.key("head_count"), |(k, _)| k);
    checks::total_columns(meta.path, &field, n_tables, max_ngram_size, n_heads)?;
    Ok(Shape {
        n_tables,
        max_ngram_size: max_ngram_size as usize,
        n_heads: n_heads as usize,
    })
}

/// Builds the layout from flattened arrays and checks what ties them together.
fn assemble(meta: &Meta, layer_ids: &[u32], hash: Hash) -> Result<Layout> {
    let Hash {
        shape,
        primes,
        multipliers,
        token_map,
        pad_id,
    } = hash;
    let cols = shape.columns();
    if multipliers.len() != shape.n_tables * shape.max_ngram_size {
        return Err(meta.bad(
            "multipliers",
            format!(
                "has {} elements, expected {} tables x {} positions",
                multipliers.len(),
                shape.n_tables,
                shape.max_ngram_size
            ),
        ));
    }
    if primes.len() != shape.n_tables * cols {
        return Err(meta.bad(
            "primes",
            format!(
                "has {} elements, expected {} tables x {cols} columns",
                primes.len(),
                shape.n_tables
            ),
        ));
    }
    let cvocab = compressed_vocab(meta, &token_map)?;
    if let Some(bad) = token_map.iter().position(|&c| c >= cvocab) {
        return Err(meta.bad(
            "token_map",
            format!(
                "entry {bad} is {} but compressed_vocab_size is {cvocab}",
                token_map[bad]
            ),
        ));
    }
    let pad_compressed_id = usize::try_from(pad_id)
        .ok()
        .and_then(|i| token_map.get(i).copied())
        .ok_or_else(|| {
            meta.bad(
                "pad_id",
                format!(
                    "{pad_id} is not a token id (the token map has {})",
                    token_map.len()
                ),
            )
        })?;
    let tables = layer_ids
        .iter()
        .zip(primes.chunks(cols))
        .zip(multipliers.chunks(shape.max_ngram_size))
        .map(|((&layer_id, p), m)| {
            TableLayout::from_primes(layer_id, p.to_vec(), m.to_vec())
                .map_err(|e| meta.bad("primes", e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    check_rows_and_offsets(meta, &tables)?;
    Ok(Layout {
        family: Family::DeepSeekEngram,
        max_ngram_size: shape.max_ngram_size,
        n_heads: shape.n_heads,
        head_dim: ROW_DIM,
        token_map: Arc::from(token_map),
        compressed_vocab_size: cvocab,
        pad_compressed_id,
        tables,
    })
}

/// The optional `rows` / `num_embeddings` and `offsets` keys must agree with the primes.
fn check_rows_and_offsets(meta: &Meta, tables: &[TableLayout]) -> Result<()> {
    for key in ["rows", "num_embeddings"] {
        if let Some(rows) = meta.ints(key)? {
            let derived: Vec<u64> = tables.iter().map(|t| t.rows).collect();
            if rows != derived {
                return Err(meta.bad(
                    key,
                    format!("{rows:?} disagrees with the sums of the primes {derived:?}"),
                ));
            }
        }
    }
    if let Some(offsets) = meta.ints("offsets")? {
        let derived: Vec<u64> = tables
            .iter()
            .flat_map(|t| t.offsets.iter().map(|&o| u64::from(o)))
            .collect();
        if offsets != derived {
            return Err(meta.bad("offsets", "disagree with the running sums of the primes"));
        }
    }
    Ok(())
}
