//! The Engram layout: which rows a token's n-grams land on.
//!
//! A [`Layout`] holds, per Engram table (one per Engram layer, in layer
//! order), the per-head primes, their running offsets, the table's row count
//! and the per-order multipliers, plus the token map that folds the
//! tokenizer's vocabulary into compressed ids. It is derived from a handful of
//! parameters ([`LayoutParams`]) and a `tokenizer.json`, or read from a model
//! file, and then validated.
//!
//! Two families share the one [`Layout`] (and the one hash): DeepSeek's
//! Engram tables ([`Family::DeepSeekEngram`]: folded token ids, NumPy-drawn
//! multipliers, a dead position cuts the history) and Qwen4-Exp's PLE n-gram
//! table ([`Family::Qwen4ExpPle`], derived from [`QwenParams`]: raw token ids,
//! SplitMix64 multipliers, tables padded for storage, EOS cuts the history).
//!
//! Submodules: `numpy_rng` (NumPy's SeedSequence + PCG64 + bounded draws, for
//! the multipliers), `primes` (the prime walk), `token_map` (tokenizer folding),
//! `qwen` (the Qwen4-Exp parameters and derivation), `preset` (named layouts
//! such as `deepseek-v4.1-flash` and `qwen3.8-flash-next`).

use std::sync::Arc;

pub mod numpy_rng;
pub mod preset;
pub mod primes;
pub mod qwen;
pub mod token_map;
mod validate;

pub use preset::{preset, preset_params, PresetParams, PRESETS};
pub use qwen::{derive_qwen_multipliers, QwenParams};
pub use token_map::{
    encode, tokenizer_from_file, vendored_tokenizer, vendored_tokenizer_json, TokenMap,
};

use crate::{Error, Result};

/// Largest n-gram order a layout may use. The reference uses 3 or 4; the
/// bound keeps per-token state on the stack in the hash.
pub const MAX_NGRAM_SIZE: usize = 16;

/// Largest number of heads per n-gram order a layout may use (the
/// reference uses 8); bounds work and memory for untrusted parameters.
pub const MAX_HEADS: usize = 1024;

/// Largest number of Engram tables a layout may have (V4.1 has 2); bounds
/// the prime walk for untrusted parameters.
pub const MAX_TABLES: usize = 256;

/// Multiplier seeds are `seed + LAYER_SEED_STRIDE * layer_id` (the reference's constant).
pub const LAYER_SEED_STRIDE: u64 = 10007;

/// Which model family's hash a [`Layout`] follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// DeepSeek V4.1 Engram tables: tokenizer ids folded into compressed
    /// ids; a dead (masked) position and everything before it read as the
    /// pad id; tables stored exactly `rows` long.
    DeepSeekEngram,
    /// Qwen4-Exp (Qwen3.8-Flash-Next) PLE n-gram tables: raw token ids (an
    /// identity token map); the pad is the EOS token, a masked position is
    /// replaced by EOS, and walking back from a token the first earlier EOS
    /// is kept and everything older reads as EOS; tables stored padded up to
    /// a multiple of `make_ngram_vocab_size_divisible_by` rows.
    Qwen4ExpPle,
}

impl Family {
    /// Every family, in the order of their names in help texts.
    pub const ALL: [Family; 2] = [Family::DeepSeekEngram, Family::Qwen4ExpPle];

    /// The family's short name (`deepseek`, `qwen4exp`), as the CLI's JSON writes it.
    pub fn name(self) -> &'static str {
        match self {
            Family::DeepSeekEngram => "deepseek",
            Family::Qwen4ExpPle => "qwen4exp",
        }
    }

    /// The family named `name` (see [`Family::name`]).
    pub fn from_name(name: &str) -> Option<Family> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters a DeepSeek Engram layout is derived from (as in a
/// checkpoint's `config.json`); Qwen4-Exp layouts come from [`QwenParams`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutParams {
    /// Transformer layer ids that carry an Engram table, in order.
    pub layer_ids: Vec<u32>,
    /// Largest n-gram order; orders 2..=max_ngram_size are hashed.
    pub max_ngram_size: usize,
    /// Hash heads per n-gram order.
    pub n_heads: usize,
    /// Values per row.
    pub head_dim: usize,
    /// Per-head table size the prime walk starts from.
    pub engram_vocab_size: u64,
    /// Seed of the multiplier generator.
    pub seed: u64,
    /// Pad token id (in tokenizer ids, before compression).
    pub pad_token: u32,
}

/// One Engram table's share of the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableLayout {
    /// Transformer layer that consumes this table.
    pub layer_id: u32,
    /// One prime per column, columns ordered by n-gram order then head.
    pub primes: Vec<u32>,
    /// Running sum of `primes` before each column (`offsets[0] == 0`).
    pub offsets: Vec<u32>,
    /// Rows the hash addresses: the sum of `primes`.
    pub rows: u64,
    /// Rows the table holds as stored (`>= rows`): `rows` for DeepSeek;
    /// for Qwen4-Exp `rows` rounded up to a multiple of
    /// `make_ngram_vocab_size_divisible_by`, the pad rows never addressed.
    pub stored_rows: u64,
    /// One odd multiplier per position in the n-gram (`max_ngram_size` values).
    pub multipliers: Vec<u64>,
}

/// The complete, validated layout of a model's Engram (or PLE) tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Whose hash and history rule the tables follow.
    pub family: Family,
    /// Largest n-gram order.
    pub max_ngram_size: usize,
    /// Hash heads per n-gram order.
    pub n_heads: usize,
    /// Values per row.
    pub head_dim: usize,
    /// Tokenizer id -> compressed id (the identity for Qwen4-Exp).
    pub token_map: Arc<[u32]>,
    /// Number of distinct compressed ids (the vocabulary size for Qwen4-Exp).
    pub compressed_vocab_size: u32,
    /// Compressed id that dead positions (masked, before the start) read
    /// as: the pad token's for DeepSeek, the EOS token id for Qwen4-Exp.
    pub pad_compressed_id: u32,
    /// The tables, in layer order.
    pub tables: Vec<TableLayout>,
}

impl TableLayout {
    /// Builds a table from its primes and multipliers, computing offsets and
    /// rows. Fails if the running sums overflow `u64`; validation checks the
    /// rest.
    pub fn from_primes(layer_id: u32, primes: Vec<u32>, multipliers: Vec<u64>) -> Result<Self> {
        let mut offsets = Vec::with_capacity(primes.len());
        let mut rows: u64 = 0;
        for &p in &primes {
            offsets.push(u32::try_from(rows).map_err(|_| {
                Error::layout(
                    format!("table of layer {layer_id}: primes"),
                    format!("running sum {rows} exceeds u32 row ids"),
                )
            })?);
            rows += u64::from(p);
        }
        Ok(TableLayout {
            layer_id,
            primes,
            offsets,
            rows,
            stored_rows: rows,
            multipliers,
        })
    }

    /// The table with `stored_rows` set to `rows` rounded up to a multiple
    /// of `multiple` (as a checkpoint pads it). Fails for `multiple == 0`
    /// or a count past `u64`.
    pub fn padded_to(mut self, multiple: u64) -> Result<Self> {
        let field = format!("table of layer {}: stored rows", self.layer_id);
        if multiple == 0 {
            return Err(Error::layout(field, "the padding multiple is 0"));
        }
        self.stored_rows = self
            .rows
            .div_ceil(multiple)
            .checked_mul(multiple)
            .ok_or_else(|| {
                Error::layout(
                    field,
                    format!(
                        "{} rows padded to a multiple of {multiple} overflow u64",
                        self.rows
                    ),
                )
            })?;
        Ok(self)
    }
}

/// The multipliers of the table at `layer_id`: `2 * r + 1` for each of the
/// `max_ngram_size` draws `r` of NumPy's
/// `default_rng(seed + 10007 * layer_id).integers(0, max(1, (i64::MAX // cvocab) // 2), n)`.
pub fn derive_multipliers(
    seed: u64,
    layer_id: u32,
    max_ngram_size: usize,
    compressed_vocab_size: u32,
) -> Result<Vec<u64>> {
    if compressed_vocab_size == 0 {
        return Err(Error::layout("compressed_vocab_size", "is 0"));
    }
    let half_bound = (i64::MAX / i64::from(compressed_vocab_size) / 2).max(1);
    let stream_seed = u128::from(seed) + u128::from(LAYER_SEED_STRIDE) * u128::from(layer_id);
    let mut rng = numpy_rng::Generator::default_rng(stream_seed);
    // `half_bound >= 1`, so the range [0, half_bound) is never empty.
    let draws = rng
        .integers_i64(0, half_bound, max_ngram_size)
        .unwrap_or_default();
    Ok(draws.into_iter().map(|r| 2 * r as u64 + 1).collect())
}

impl Layout {
    /// Derives the layout from its parameters and a token map, as the
    /// reference does: primes by the walk in [`primes::derive_primes`],
    /// multipliers by [`derive_multipliers`], pad compressed through the map.
    pub fn derive(params: &LayoutParams, token_map: &TokenMap) -> Result<Layout> {
        params.check()?;
        let pad = token_map
            .map
            .get(params.pad_token as usize)
            .ok_or_else(|| {
                Error::layout(
                    "pad_token",
                    format!(
                        "{} is outside the tokenizer's {} tokens",
                        params.pad_token,
                        token_map.len()
                    ),
                )
            })?;
        let primes = primes::derive_primes(
            params.layer_ids.len(),
            params.max_ngram_size,
            params.n_heads,
            params.engram_vocab_size,
        )?;
        let tables = params
            .layer_ids
            .iter()
            .zip(primes)
            .map(|(&layer_id, table_primes)| {
                let multipliers = derive_multipliers(
                    params.seed,
                    layer_id,
                    params.max_ngram_size,
                    token_map.compressed_vocab_size,
                )?;
                TableLayout::from_primes(layer_id, table_primes, multipliers)
            })
            .collect::<Result<Vec<_>>>()?;
        Layout::from_parts(
            params.max_ngram_size,
            params.n_heads,
            params.head_dim,
            token_map.clone(),
            *pad,
            tables,
        )
    }

    /// Assembles a DeepSeek Engram layout from parts read elsewhere (a
    /// model file) and validates it; [`Layout::qwen_from_parts`] is the
    /// Qwen4-Exp counterpart.
    pub fn from_parts(
        max_ngram_size: usize,
        n_heads: usize,
        head_dim: usize,
        token_map: TokenMap,
        pad_compressed_id: u32,
        tables: Vec<TableLayout>,
    ) -> Result<Layout> {
        let layout = Layout {
            family: Family::DeepSeekEngram,
            max_ngram_size,
            n_heads,
            head_dim,
            token_map: token_map.map,
            compressed_vocab_size: token_map.compressed_vocab_size,
            pad_compressed_id,
            tables,
        };
        layout.validate()?;
        Ok(layout)
    }

    /// Number of tokenizer ids the token map covers.
    pub fn vocab_size(&self) -> usize {
        self.token_map.len()
    }

    /// Row ids per token per table: `(max_ngram_size - 1) * n_heads`.
    pub fn columns(&self) -> usize {
        self.max_ngram_size.saturating_sub(1) * self.n_heads
    }

    /// The layer ids of the tables, in order.
    pub fn layer_ids(&self) -> Vec<u32> {
        self.tables.iter().map(|t| t.layer_id).collect()
    }

    /// The token map as a [`TokenMap`].
    pub fn token_map(&self) -> TokenMap {
        TokenMap::new(self.token_map.clone(), self.compressed_vocab_size)
    }
}

impl LayoutParams {
    /// Rejects parameters no layout can be derived from.
    fn check(&self) -> Result<()> {
        if self.layer_ids.is_empty() || self.layer_ids.len() > MAX_TABLES {
            return Err(Error::layout(
                "layer_ids",
                format!(
                    "has {} entries; a layout needs 1..={MAX_TABLES} tables",
                    self.layer_ids.len()
                ),
            ));
        }
        validate::check_hash_shape(self.max_ngram_size, self.n_heads)
    }
}
