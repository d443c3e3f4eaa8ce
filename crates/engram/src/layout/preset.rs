//! Named layouts of released models, derived with the vendored tokenizer.
//!
//! A `scale` divides the engram vocab size (integer division) and changes
//! nothing else, so small test models keep the real token map, multipliers and
//! hash.

use super::{Layout, LayoutParams, TokenMap};
use crate::{Error, Result};

/// DeepSeek V4.1-Flash: Engram tables at layers 1 and 14.
pub const DEEPSEEK_V4_1_FLASH: &str = "deepseek-v4.1-flash";

/// Names accepted by [`preset`] and [`preset_params`].
pub const PRESETS: &[&str] = &[DEEPSEEK_V4_1_FLASH];

/// The parameters of preset `name` with its engram vocab size divided by `scale`.
pub fn preset_params(name: &str, scale: u64) -> Result<LayoutParams> {
    if scale == 0 {
        return Err(Error::InvalidArgument(
            "scale 0: the engram vocab size is divided by scale, which must be at least 1".into(),
        ));
    }
    let params = match name {
        DEEPSEEK_V4_1_FLASH => LayoutParams {
            layer_ids: vec![1, 14],
            max_ngram_size: 4,
            n_heads: 8,
            head_dim: 256,
            engram_vocab_size: 16_000_000,
            seed: 0,
            pad_token: 2,
        },
        _ => {
            return Err(Error::InvalidArgument(format!(
                "unknown preset {name:?}; known presets: {}",
                PRESETS.join(", ")
            )))
        }
    };
    let engram_vocab_size = params.engram_vocab_size / scale;
    if engram_vocab_size == 0 {
        return Err(Error::InvalidArgument(format!(
            "scale {scale} divides the engram vocab size {} of {name} to 0",
            params.engram_vocab_size
        )));
    }
    Ok(LayoutParams {
        engram_vocab_size,
        ..params
    })
}

/// The layout of preset `name` at `scale`, with the vendored tokenizer's map.
pub fn preset(name: &str, scale: u64) -> Result<Layout> {
    let params = preset_params(name, scale)?;
    Layout::derive(&params, TokenMap::vendored()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_divides_only_the_engram_vocab() {
        let full = preset_params(DEEPSEEK_V4_1_FLASH, 1).unwrap();
        let small = preset_params(DEEPSEEK_V4_1_FLASH, 1024).unwrap();
        assert_eq!(small.engram_vocab_size, 16_000_000 / 1024);
        assert_eq!(
            LayoutParams {
                engram_vocab_size: full.engram_vocab_size,
                ..small
            },
            full
        );
    }

    #[test]
    fn bad_names_and_scales_are_errors() {
        let err = preset_params("nope", 1).unwrap_err().to_string();
        assert!(
            err.contains("nope") && err.contains(DEEPSEEK_V4_1_FLASH),
            "{err}"
        );
        assert!(preset_params(DEEPSEEK_V4_1_FLASH, 0)
            .unwrap_err()
            .to_string()
            .contains("scale 0"));
        assert!(preset_params(DEEPSEEK_V4_1_FLASH, 16_000_001).is_err());
    }
}
