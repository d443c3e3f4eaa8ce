//! Consistency checks of a [`Layout`], whatever its origin (derived or read
//! from a model file). Each failure names the value and says why it is wrong.

use super::{primes::is_prime, Family, Layout, TableLayout, MAX_HEADS, MAX_NGRAM_SIZE};
use crate::{Error, Result};

/// Row ids are `u32`, so a table may hold at most 2^32 rows.
const MAX_ROWS: u64 = 1 << 32;

/// The n-gram size and head count every layout (and every set of
/// parameters one is derived from) must stay within.
pub(super) fn check_hash_shape(max_ngram_size: usize, n_heads: usize) -> Result<()> {
    check_hash_shape_named(("max_ngram_size", max_ngram_size), ("n_heads", n_heads))
}

/// [`check_hash_shape`] with the fields named as the parameters' source
/// names them (`ngram_size`, `heads_per_ngram` in a Qwen4-Exp config).
pub(super) fn check_hash_shape_named(
    (ngram_field, max_ngram_size): (&str, usize),
    (heads_field, n_heads): (&str, usize),
) -> Result<()> {
    if !(2..=MAX_NGRAM_SIZE).contains(&max_ngram_size) {
        return Err(Error::layout(
            ngram_field,
            format!("{max_ngram_size} is outside 2..={MAX_NGRAM_SIZE}"),
        ));
    }
    if !(1..=MAX_HEADS).contains(&n_heads) {
        return Err(Error::layout(
            heads_field,
            format!("{n_heads} is outside 1..={MAX_HEADS}"),
        ));
    }
    Ok(())
}

impl Layout {
    /// Checks every invariant the hash relies on: shapes, primes, offsets,
    /// rows (and stored rows: equal for DeepSeek, at least as many for
    /// Qwen4-Exp), odd multipliers that cannot overflow `i64` with any
    /// compressed id, and a token map and pad inside the compressed
    /// vocabulary (for Qwen4-Exp, the identity map).
    pub fn validate(&self) -> Result<()> {
        self.validate_shape()?;
        self.validate_token_map()?;
        let mut seen_layers = None;
        for (index, table) in self.tables.iter().enumerate() {
            if seen_layers.is_some_and(|prev| table.layer_id <= prev) {
                return Err(Error::layout(
                    format!("tables[{index}].layer_id"),
                    format!(
                        "{} does not follow layer {} (tables must be in increasing layer order)",
                        table.layer_id,
                        seen_layers.unwrap_or_default()
                    ),
                ));
            }
            seen_layers = Some(table.layer_id);
            self.validate_table(index, table)?;
        }
        Ok(())
    }

    /// Checks that the token map covers exactly `expected` tokenizer ids
    /// (when the tokenizer's vocabulary size is known).
    pub fn validate_vocab_size(&self, expected: usize) -> Result<()> {
        if self.token_map.len() != expected {
            return Err(Error::layout(
                "token_map",
                format!(
                    "has {} entries but the tokenizer has {expected} tokens",
                    self.token_map.len()
                ),
            ));
        }
        Ok(())
    }

    fn validate_shape(&self) -> Result<()> {
        check_hash_shape(self.max_ngram_size, self.n_heads)?;
        if self.tables.is_empty() {
            return Err(Error::layout("tables", "there are none"));
        }
        Ok(())
    }

    fn validate_token_map(&self) -> Result<()> {
        let cvocab = self.compressed_vocab_size;
        if cvocab == 0 {
            return Err(Error::layout("compressed_vocab_size", "is 0"));
        }
        if self.token_map.is_empty() {
            return Err(Error::layout("token_map", "is empty"));
        }
        if let Some((token, &id)) = self
            .token_map
            .iter()
            .enumerate()
            .find(|(_, &id)| id >= cvocab)
        {
            return Err(Error::layout(
                format!("token_map[{token}]"),
                format!("compressed id {id} is outside the compressed vocab of {cvocab}"),
            ));
        }
        if self.family == Family::Qwen4ExpPle {
            if self.token_map.len() != cvocab as usize {
                return Err(Error::layout(
                    "token_map",
                    format!(
                        "has {} entries, but a qwen4exp layout hashes raw ids: the vocab is {cvocab}",
                        self.token_map.len()
                    ),
                ));
            }
            if let Some(token) =
                (0..self.token_map.len()).find(|&t| self.token_map[t] as usize != t)
            {
                return Err(Error::layout(
                    format!("token_map[{token}]"),
                    format!(
                        "is {}, but a qwen4exp layout hashes raw ids (the identity map)",
                        self.token_map[token]
                    ),
                ));
            }
        }
        if self.pad_compressed_id >= cvocab {
            return Err(Error::layout(
                "pad_compressed_id",
                format!(
                    "{} is outside the compressed vocab of {cvocab}",
                    self.pad_compressed_id
                ),
            ));
        }
        Ok(())
    }

    fn validate_table(&self, index: usize, table: &TableLayout) -> Result<()> {
        let name = |field: &str| format!("tables[{index}] (layer {}).{field}", table.layer_id);
        let columns = self.columns();
        if table.primes.len() != columns {
            return Err(Error::layout(
                name("primes"),
                format!(
                    "has {} primes, expected {columns} ((max_ngram_size - 1) * n_heads)",
                    table.primes.len()
                ),
            ));
        }
        if table.offsets.len() != columns {
            return Err(Error::layout(
                name("offsets"),
                format!("has {} offsets, expected {columns}", table.offsets.len()),
            ));
        }
        let mut running: u64 = 0;
        for (col, (&prime, &offset)) in table.primes.iter().zip(&table.offsets).enumerate() {
            if prime < 2 || !is_prime(u64::from(prime)) {
                return Err(Error::layout(
                    name(&format!("primes[{col}]")),
                    format!("{prime} is not a prime"),
                ));
            }
            if u64::from(offset) != running {
                return Err(Error::layout(
                    name(&format!("offsets[{col}]")),
                    format!("is {offset}, but the primes before it sum to {running}"),
                ));
            }
            running += u64::from(prime);
        }
        if table.rows != running {
            return Err(Error::layout(
                name("rows"),
                format!("is {}, but its primes sum to {running}", table.rows),
            ));
        }
        if table.rows > MAX_ROWS {
            return Err(Error::layout(
                name("rows"),
                format!("{} rows do not fit u32 row ids", table.rows),
            ));
        }
        self.validate_stored_rows(table, &name)?;
        self.validate_multipliers(table, &name)
    }

    fn validate_stored_rows(
        &self,
        table: &TableLayout,
        name: &dyn Fn(&str) -> String,
    ) -> Result<()> {
        if table.stored_rows < table.rows {
            return Err(Error::layout(
                name("stored_rows"),
                format!(
                    "is {}, fewer than the {} rows the hash addresses",
                    table.stored_rows, table.rows
                ),
            ));
        }
        if table.stored_rows > MAX_ROWS {
            return Err(Error::layout(
                name("stored_rows"),
                format!("{} rows do not fit u32 row ids", table.stored_rows),
            ));
        }
        if self.family == Family::DeepSeekEngram && table.stored_rows != table.rows {
            return Err(Error::layout(
                name("stored_rows"),
                format!(
                    "is {}, but a deepseek table is stored exactly its {} rows",
                    table.stored_rows, table.rows
                ),
            ));
        }
        Ok(())
    }

    fn validate_multipliers(
        &self,
        table: &TableLayout,
        name: &dyn Fn(&str) -> String,
    ) -> Result<()> {
        if table.multipliers.len() != self.max_ngram_size {
            return Err(Error::layout(
                name("multipliers"),
                format!(
                    "has {} multipliers, expected max_ngram_size = {}",
                    table.multipliers.len(),
                    self.max_ngram_size
                ),
            ));
        }
        let limit = i64::MAX as u64 / u64::from(self.compressed_vocab_size);
        for (k, &m) in table.multipliers.iter().enumerate() {
            if m % 2 == 0 {
                return Err(Error::layout(
                    name(&format!("multipliers[{k}]")),
                    format!("{m} is even; multipliers must be odd"),
                ));
            }
            if m > limit {
                return Err(Error::layout(
                    name(&format!("multipliers[{k}]")),
                    format!(
                        "{m} can overflow int64 with a compressed vocab of {} (limit {limit})",
                        self.compressed_vocab_size
                    ),
                ));
            }
        }
        Ok(())
    }
}
