//! Named layouts of released models: DeepSeek's derived with the vendored
//! tokenizer, Qwen4-Exp's from its released config (it hashes raw token
//! ids, so it needs no tokenizer).
//!
//! A `scale` divides the per-head table size the primes start from
//! (DeepSeek's `engram_vocab_size`, Qwen4-Exp's `ngram_vocab_size_base`) by
//! integer division and changes nothing else, so small test models keep the
//! real token map, multipliers and hash.

use super::qwen::DEFAULT_SEED;
use super::{Family, Layout, LayoutParams, QwenParams, TokenMap};
use crate::{Error, Result};

/// DeepSeek V4.1-Flash: Engram tables at layers 1 and 14.
pub const DEEPSEEK_V4_1_FLASH: &str = "deepseek-v4.1-flash";

/// Qwen3.8-Flash-Next (Qwen4-Exp): one PLE n-gram table, at decoder layer 1
/// (zero-based; `ple_layer_ids = [2]` in its config).
pub const QWEN3_8_FLASH_NEXT: &str = "qwen3.8-flash-next";

/// Names accepted by [`preset`] and [`preset_params`].
pub const PRESETS: &[&str] = &[DEEPSEEK_V4_1_FLASH, QWEN3_8_FLASH_NEXT];

/// The parameters of a preset, in its family's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresetParams {
    /// A DeepSeek Engram preset (derived with the vendored tokenizer's map).
    DeepSeek(LayoutParams),
    /// A Qwen4-Exp PLE preset.
    Qwen(QwenParams),
}

impl PresetParams {
    /// The family of the preset.
    pub fn family(&self) -> Family {
        match self {
            PresetParams::DeepSeek(_) => Family::DeepSeekEngram,
            PresetParams::Qwen(_) => Family::Qwen4ExpPle,
        }
    }

    /// Derives the preset's layout (DeepSeek's with the vendored token map).
    pub fn layout(&self) -> Result<Layout> {
        match self {
            PresetParams::DeepSeek(p) => Layout::derive(p, TokenMap::vendored()?),
            PresetParams::Qwen(p) => Layout::derive_qwen(p),
        }
    }

    /// The DeepSeek parameters, for what only DeepSeek layouts support
    /// (writing DeepSeek checkpoint configs); `what` names it in the error.
    pub fn into_deepseek(self, what: &str) -> Result<LayoutParams> {
        match self {
            PresetParams::DeepSeek(p) => Ok(p),
            PresetParams::Qwen(_) => Err(Error::InvalidArgument(format!(
                "{what} needs a DeepSeek Engram preset; {QWEN3_8_FLASH_NEXT} is a {} layout",
                Family::Qwen4ExpPle
            ))),
        }
    }
}

/// The released Qwen3.8-Flash-Next parameters (`text_config` of its
/// `config.json`; `seed` is absent there and defaults to 1234).
fn qwen3_8_flash_next() -> QwenParams {
    QwenParams {
        vocab_size: 248_320,
        ngram_size: 3,
        heads_per_ngram: 8,
        ngram_vocab_size_base: 20_000_000,
        make_ngram_vocab_size_divisible_by: 128,
        seed: DEFAULT_SEED,
        eos_token_id: 248_044,
        layer_ids: vec![1],
        // ple_embed_dim 2560 over 16 heads.
        row_dim: 160,
    }
}

/// The parameters of preset `name` with its per-head table size divided by `scale`.
pub fn preset_params(name: &str, scale: u64) -> Result<PresetParams> {
    if scale == 0 {
        return Err(Error::InvalidArgument(
            "scale 0: the engram vocab size is divided by scale, which must be at least 1".into(),
        ));
    }
    let scaled = |field: &str, size: u64| {
        let divided = size / scale;
        if divided == 0 {
            return Err(Error::InvalidArgument(format!(
                "scale {scale} divides the {field} {size} of {name} to 0"
            )));
        }
        Ok(divided)
    };
    match name {
        DEEPSEEK_V4_1_FLASH => {
            let params = LayoutParams {
                layer_ids: vec![1, 14],
                max_ngram_size: 4,
                n_heads: 8,
                head_dim: 256,
                engram_vocab_size: 16_000_000,
                seed: 0,
                pad_token: 2,
            };
            Ok(PresetParams::DeepSeek(LayoutParams {
                engram_vocab_size: scaled("engram vocab size", params.engram_vocab_size)?,
                ..params
            }))
        }
        QWEN3_8_FLASH_NEXT => {
            let params = qwen3_8_flash_next();
            Ok(PresetParams::Qwen(QwenParams {
                ngram_vocab_size_base: scaled(
                    "ngram_vocab_size_base",
                    params.ngram_vocab_size_base,
                )?,
                ..params
            }))
        }
        _ => Err(Error::InvalidArgument(format!(
            "unknown preset {name:?}; known presets: {}",
            PRESETS.join(", ")
        ))),
    }
}

/// The layout of preset `name` at `scale` (DeepSeek's with the vendored
/// tokenizer's map).
pub fn preset(name: &str, scale: u64) -> Result<Layout> {
    preset_params(name, scale)?.layout()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deepseek(name: &str, scale: u64) -> LayoutParams {
        preset_params(name, scale)
            .unwrap()
            .into_deepseek("test")
            .unwrap()
    }

    #[test]
    fn scale_divides_only_the_engram_vocab() {
        let full = deepseek(DEEPSEEK_V4_1_FLASH, 1);
        let small = deepseek(DEEPSEEK_V4_1_FLASH, 1024);
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
    fn qwen_scale_divides_only_the_base() {
        let PresetParams::Qwen(small) = preset_params(QWEN3_8_FLASH_NEXT, 4096).unwrap() else {
            panic!("not a qwen preset");
        };
        assert_eq!(small.ngram_vocab_size_base, 20_000_000 / 4096);
        assert_eq!(
            QwenParams {
                ngram_vocab_size_base: 20_000_000,
                ..small
            },
            qwen3_8_flash_next()
        );
        let err = preset_params(QWEN3_8_FLASH_NEXT, 20_000_001).unwrap_err();
        assert!(err.to_string().contains("ngram_vocab_size_base"), "{err}");
        let err = preset_params(QWEN3_8_FLASH_NEXT, 1)
            .unwrap()
            .into_deepseek("engram synth")
            .unwrap_err();
        assert!(err.to_string().contains("engram synth"), "{err}");
    }

    #[test]
    fn bad_names_and_scales_are_errors() {
        let err = preset_params("nope", 1).unwrap_err().to_string();
        assert!(
            err.contains("nope")
                && err.contains(DEEPSEEK_V4_1_FLASH)
                && err.contains(QWEN3_8_FLASH_NEXT),
            "{err}"
        );
        assert!(preset_params(DEEPSEEK_V4_1_FLASH, 0)
            .unwrap_err()
            .to_string()
            .contains("scale 0"));
        assert!(preset_params(DEEPSEEK_V4_1_FLASH, 16_000_001).is_err());
    }
}
