//! Adapters from model files to the layout module: what a reader derives
//! when a file leaves part of the layout out, with layout errors re-labelled
//! as format errors on the file and field they came from.

use std::path::Path;

use crate::layout::{self, Layout, LayoutParams, TokenMap};
use crate::{Error, Result};

/// The token map of the vendored DeepSeek V4 tokenizer (built once per process).
pub fn vendored_token_map() -> Result<Vec<u32>> {
    Ok(TokenMap::vendored()?.map.to_vec())
}

/// Multipliers of the tables at `layer_ids` (flattened, table-major) for `seed`.
pub fn multipliers(
    layer_ids: &[u32],
    max_ngram: usize,
    cvocab: u32,
    seed: u64,
) -> Result<Vec<u64>> {
    let mut out = Vec::with_capacity(layer_ids.len() * max_ngram);
    for &l in layer_ids {
        out.extend(layout::derive_multipliers(seed, l, max_ngram, cvocab)?);
    }
    Ok(out)
}

/// Primes of `n_tables` tables (flattened) walking up from `vocab - 1`.
pub fn primes(n_tables: usize, max_ngram: usize, n_heads: usize, vocab: u64) -> Result<Vec<u32>> {
    Ok(
        layout::primes::derive_primes(n_tables, max_ngram, n_heads, vocab)?
            .into_iter()
            .flatten()
            .collect(),
    )
}

/// Checks a layout's internal consistency.
pub fn validate(layout: &Layout) -> Result<()> {
    layout.validate()
}

/// The token map of a `tokenizer.json` document read from `path`.
///
/// A document byte-identical to the vendored DeepSeek V4 tokenizer (what
/// DeepSeek checkpoints and synthetic models ship) reuses the process-wide
/// vendored map instead of normalizing 129K tokens again: same bytes, same map.
pub fn token_map_from_tokenizer_json(path: &Path, json: &[u8]) -> Result<TokenMap> {
    if let Ok(vendored) = layout::vendored_tokenizer_json() {
        if vendored == json {
            return Ok(TokenMap::vendored()?.clone());
        }
    }
    TokenMap::from_tokenizer_json(json, &path.display().to_string())
}

/// The layout derived from `params` (read from the config at `config`) and a
/// token map; a layout error is reported on the config field it concerns.
pub fn layout(config: &Path, params: &LayoutParams, token_map: &TokenMap) -> Result<Layout> {
    Layout::derive(params, token_map).map_err(|e| match e {
        Error::Layout { field, reason } => {
            let field = match field.as_str() {
                "layer_ids" => "engram_layer_ids".to_string(),
                "max_ngram_size" => "engram_max_ngram_size".to_string(),
                "n_heads" => "engram_n_heads".to_string(),
                "head_dim" => "engram_head_dim".to_string(),
                "engram_vocab_size" => "engram_vocab_size".to_string(),
                "pad_token" => "engram_pad_id".to_string(),
                other => other.to_string(),
            };
            Error::format(config, field, reason)
        }
        other => other,
    })
}

/// The layout and parameters of preset `name` at `scale`.
pub fn preset(name: &str, scale: u64) -> Result<(Layout, LayoutParams)> {
    Ok((
        layout::preset(name, scale)?,
        layout::preset_params(name, scale)?.into_deepseek("a synthetic model")?,
    ))
}

/// The vendored DeepSeek V4 `tokenizer.json`.
pub fn vendored_tokenizer_json() -> Result<Vec<u8>> {
    layout::vendored_tokenizer_json()
}
