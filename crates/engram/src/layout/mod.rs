//! The Engram layout: which rows a token's n-grams land on.
//!
//! A [`Layout`] holds, per Engram table (one per Engram layer, in layer
//! order), the per-head primes, their running offsets, the table's row count
//! and the per-order multipliers, plus the token map that folds the
//! tokenizer's vocabulary into compressed ids. It is derived from a handful of
//! parameters ([`LayoutParams`]) and a `tokenizer.json`, or read from a model
//! file, and then validated.
//!
//! Submodules: `numpy_rng` (NumPy's SeedSequence + PCG64 + bounded draws, for
//! the multipliers), `primes` (the prime walk), `token_map` (tokenizer folding),
//! `preset` (named layouts such as `deepseek-v4.1-flash`).

use std::sync::Arc;

/// The parameters a layout is derived from (as in a checkpoint's `config.json`).
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
    /// Rows in the table: the sum of `primes`.
    pub rows: u64,
    /// One odd multiplier per position in the n-gram (`max_ngram_size` values).
    pub multipliers: Vec<u64>,
}

/// The complete, validated layout of a model's Engram tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Largest n-gram order.
    pub max_ngram_size: usize,
    /// Hash heads per n-gram order.
    pub n_heads: usize,
    /// Values per row.
    pub head_dim: usize,
    /// Tokenizer id -> compressed id.
    pub token_map: Arc<[u32]>,
    /// Number of distinct compressed ids.
    pub compressed_vocab_size: u32,
    /// Compressed id that dead positions (masked, before the start) read as.
    pub pad_compressed_id: u32,
    /// The tables, in layer order.
    pub tables: Vec<TableLayout>,
}
