//! The Qwen4-Exp (Qwen3.8-Flash-Next) PLE n-gram layout: its parameters
//! (the `text_config` keys of a checkpoint) and the derivation of one table
//! per PLE layer.
//!
//! Per table `L` (its index among the sorted PLE layers): the multipliers
//! `m[i] = 2 * (splitmix64(seed + 10007 * L + GAMMA * (i + 1)) % half) + 1`
//! with `half = max(1, (i64::MAX / vocab_size) / 2)`; head `g = L * columns + h`
//! takes the `(g + 1)`-th prime `>= ngram_vocab_size_base`; offsets run
//! within each table; the stored table is padded up to a multiple of
//! `make_ngram_vocab_size_divisible_by` rows. Token ids are hashed raw.

use super::{primes, Family, Layout, TableLayout, TokenMap, LAYER_SEED_STRIDE, MAX_TABLES};
use crate::splitmix;
use crate::{Error, Result};

/// Largest `vocab_size` a Qwen4-Exp layout accepts: its identity token map
/// is allocated at 4 bytes a token, so the bound keeps that below 64 MiB for
/// untrusted parameters (the release has 248,320 tokens).
pub const MAX_QWEN_VOCAB: u32 = 1 << 24;

/// Largest `make_ngram_vocab_size_divisible_by` accepted (the release pads
/// to 128 rows).
pub const MAX_ROW_PADDING: u64 = 1 << 20;

/// Largest row width (`row_dim`) accepted (the release has 160 values).
pub const MAX_ROW_DIM: usize = 1 << 16;

/// The multiplier seed of the release: `seed` is absent from its config and
/// the transformers default is 1234.
pub const DEFAULT_SEED: u64 = 1234;

/// The parameters a Qwen4-Exp PLE layout is derived from: a checkpoint's
/// `text_config` keys, with the PLE layers already made zero-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QwenParams {
    /// Token ids run `0..vocab_size`; bounds the multipliers.
    pub vocab_size: u32,
    /// Largest n-gram order; orders `2..=ngram_size` are hashed.
    pub ngram_size: usize,
    /// Hash heads per n-gram order.
    pub heads_per_ngram: usize,
    /// Every head's prime is at least this.
    pub ngram_vocab_size_base: u64,
    /// Each stored table is padded up to a multiple of this many rows.
    pub make_ngram_vocab_size_divisible_by: u64,
    /// Seed of the multipliers ([`DEFAULT_SEED`] when the config has none).
    pub seed: u64,
    /// The EOS token: pad, mask replacement and history reset.
    pub eos_token_id: u32,
    /// ZERO-based decoder layer ids of the PLE layers, strictly increasing
    /// (the config's `ple_layer_ids` are one-based: see
    /// [`QwenParams::layer_ids_from_one_based`]).
    pub layer_ids: Vec<u32>,
    /// Values per row: `ple_embed_dim` over the heads in total (see
    /// [`QwenParams::row_dim_of`]).
    pub row_dim: usize,
}

impl QwenParams {
    /// The zero-based, sorted, distinct decoder layer ids of a config's
    /// one-based `ple_layer_ids` (tables follow `sorted(set(ids))`, as the
    /// reference indexes them). A `0` is not a one-based id and is refused.
    pub fn layer_ids_from_one_based(one_based: &[u32]) -> Result<Vec<u32>> {
        if let Some(i) = one_based.iter().position(|&id| id == 0) {
            return Err(Error::layout(
                format!("ple_layer_ids[{i}]"),
                "is 0, but ple_layer_ids are one-based decoder layer ids",
            ));
        }
        let mut ids: Vec<u32> = one_based.iter().map(|&id| id - 1).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The row width of a table whose `ple_embed_dim` values are the
    /// concatenation of every head's row: `ple_embed_dim / ((ngram_size - 1)
    /// * heads_per_ngram)`, which must divide exactly.
    pub fn row_dim_of(
        ple_embed_dim: usize,
        ngram_size: usize,
        heads_per_ngram: usize,
    ) -> Result<usize> {
        let heads = ngram_size.saturating_sub(1).saturating_mul(heads_per_ngram);
        if heads == 0 || ple_embed_dim == 0 || ple_embed_dim % heads != 0 {
            return Err(Error::layout(
                "ple_embed_dim",
                format!(
                    "{ple_embed_dim} is not a positive multiple of the {heads} heads \
                     ((ngram_size - 1) * heads_per_ngram)"
                ),
            ));
        }
        Ok(ple_embed_dim / heads)
    }

    /// Rejects parameters no layout can be derived from, naming the field.
    fn check(&self) -> Result<()> {
        if !(1..=MAX_QWEN_VOCAB).contains(&self.vocab_size) {
            return Err(Error::layout(
                "vocab_size",
                format!("{} is outside 1..={MAX_QWEN_VOCAB}", self.vocab_size),
            ));
        }
        if self.eos_token_id >= self.vocab_size {
            return Err(Error::layout(
                "eos_token_id",
                format!(
                    "{} is outside the vocabulary of {} tokens",
                    self.eos_token_id, self.vocab_size
                ),
            ));
        }
        super::validate::check_hash_shape_named(
            ("ngram_size", self.ngram_size),
            ("heads_per_ngram", self.heads_per_ngram),
        )?;
        if self.ngram_vocab_size_base == 0 || self.ngram_vocab_size_base > u64::from(u32::MAX) {
            return Err(Error::layout(
                "ngram_vocab_size_base",
                format!(
                    "{} is outside 1..={} (row ids are u32)",
                    self.ngram_vocab_size_base,
                    u32::MAX
                ),
            ));
        }
        if !(1..=MAX_ROW_PADDING).contains(&self.make_ngram_vocab_size_divisible_by) {
            return Err(Error::layout(
                "make_ngram_vocab_size_divisible_by",
                format!(
                    "{} is outside 1..={MAX_ROW_PADDING}",
                    self.make_ngram_vocab_size_divisible_by
                ),
            ));
        }
        if self.layer_ids.is_empty() || self.layer_ids.len() > MAX_TABLES {
            return Err(Error::layout(
                "layer_ids",
                format!(
                    "has {} entries; a layout needs 1..={MAX_TABLES} PLE layers",
                    self.layer_ids.len()
                ),
            ));
        }
        if let Some(i) =
            (1..self.layer_ids.len()).find(|&i| self.layer_ids[i] <= self.layer_ids[i - 1])
        {
            return Err(Error::layout(
                format!("layer_ids[{i}]"),
                format!(
                    "{} does not follow {} (zero-based PLE layers must be strictly increasing)",
                    self.layer_ids[i],
                    self.layer_ids[i - 1]
                ),
            ));
        }
        if !(1..=MAX_ROW_DIM).contains(&self.row_dim) {
            return Err(Error::layout(
                "row_dim",
                format!("{} is outside 1..={MAX_ROW_DIM}", self.row_dim),
            ));
        }
        Ok(())
    }
}

/// The multipliers of the PLE table at `table_index` (its index among the
/// sorted PLE layers, not its layer id): for `i = 0..ngram_size`,
/// `2 * (splitmix64(seed + 10007 * table_index + GAMMA * (i + 1)) % half) + 1`
/// with `half = max(1, (i64::MAX / vocab_size) / 2)`, all sums mod 2^64.
/// Each is odd and at most `i64::MAX / vocab_size`, so a product with any
/// token id stays below 2^63.
pub fn derive_qwen_multipliers(
    seed: u64,
    table_index: u32,
    ngram_size: usize,
    vocab_size: u32,
) -> Result<Vec<u64>> {
    if vocab_size == 0 {
        return Err(Error::layout("vocab_size", "is 0"));
    }
    let half = (i64::MAX as u64 / u64::from(vocab_size) / 2).max(1);
    let table_seed = seed.wrapping_add(LAYER_SEED_STRIDE.wrapping_mul(u64::from(table_index)));
    Ok((1..=ngram_size as u64)
        .map(|i| {
            let state = table_seed.wrapping_add(splitmix::GAMMA.wrapping_mul(i));
            2 * (splitmix::mix(state) % half) + 1
        })
        .collect())
}

impl Layout {
    /// Derives the Qwen4-Exp PLE layout of `params` (checked first; every
    /// error names the field): one table per PLE layer.
    pub fn derive_qwen(params: &QwenParams) -> Result<Layout> {
        params.check()?;
        let all_primes = primes::derive_primes(
            params.layer_ids.len(),
            params.ngram_size,
            params.heads_per_ngram,
            params.ngram_vocab_size_base,
        )
        .map_err(|e| match e {
            Error::Layout { reason, .. } => Error::layout("ngram_vocab_size_base", reason),
            other => other,
        })?;
        let tables = params
            .layer_ids
            .iter()
            .zip(all_primes)
            .zip(0u32..)
            .map(|((&layer_id, table_primes), index)| {
                let multipliers = derive_qwen_multipliers(
                    params.seed,
                    index,
                    params.ngram_size,
                    params.vocab_size,
                )?;
                TableLayout::from_primes(layer_id, table_primes, multipliers)?
                    .padded_to(params.make_ngram_vocab_size_divisible_by)
            })
            .collect::<Result<Vec<_>>>()?;
        Layout::qwen_from_parts(
            params.ngram_size,
            params.heads_per_ngram,
            params.row_dim,
            params.vocab_size,
            params.eos_token_id,
            tables,
        )
    }

    /// Assembles a Qwen4-Exp layout from parts read elsewhere (a model
    /// file's constants) and validates it: token ids are raw (an identity
    /// map over `vocab_size` tokens) and `eos_token_id` is the pad.
    pub fn qwen_from_parts(
        ngram_size: usize,
        heads_per_ngram: usize,
        row_dim: usize,
        vocab_size: u32,
        eos_token_id: u32,
        tables: Vec<TableLayout>,
    ) -> Result<Layout> {
        if !(1..=MAX_QWEN_VOCAB).contains(&vocab_size) {
            return Err(Error::layout(
                "vocab_size",
                format!("{vocab_size} is outside 1..={MAX_QWEN_VOCAB}"),
            ));
        }
        let token_map = TokenMap::new((0..vocab_size).collect::<Vec<u32>>(), vocab_size);
        let layout = Layout {
            family: Family::Qwen4ExpPle,
            max_ngram_size: ngram_size,
            n_heads: heads_per_ngram,
            head_dim: row_dim,
            token_map: token_map.map,
            compressed_vocab_size: vocab_size,
            pad_compressed_id: eos_token_id,
            tables,
        };
        layout.validate()?;
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_based_layer_ids_become_sorted_zero_based() {
        assert_eq!(QwenParams::layer_ids_from_one_based(&[2]).unwrap(), vec![1]);
        assert_eq!(
            QwenParams::layer_ids_from_one_based(&[9, 2, 9]).unwrap(),
            vec![1, 8]
        );
        let err = QwenParams::layer_ids_from_one_based(&[3, 0]).unwrap_err();
        assert!(err.to_string().contains("ple_layer_ids[1]"), "{err}");
    }

    #[test]
    fn row_dim_is_the_embed_dim_over_all_heads() {
        assert_eq!(QwenParams::row_dim_of(2560, 3, 8).unwrap(), 160);
        for (dim, n, h) in [(2561, 3, 8), (0, 3, 8), (2560, 1, 8), (2560, 3, 0)] {
            let err = QwenParams::row_dim_of(dim, n, h).unwrap_err();
            assert!(err.to_string().contains("ple_embed_dim"), "{err}");
        }
    }

    #[test]
    fn multipliers_are_odd_and_bounded_for_tiny_vocabularies() {
        // vocab_size > i64::MAX / 2 is impossible for u32, but a vocab of 1
        // gives the widest range and still fits.
        for vocab in [1, 2, 3, 248_320, MAX_QWEN_VOCAB] {
            let m = derive_qwen_multipliers(DEFAULT_SEED, 5, 4, vocab).unwrap();
            let limit = i64::MAX as u64 / u64::from(vocab);
            assert!(
                m.iter().all(|&m| m % 2 == 1 && m <= limit),
                "{vocab}: {m:?}"
            );
        }
        assert!(derive_qwen_multipliers(DEFAULT_SEED, 0, 3, 0).is_err());
    }
}
