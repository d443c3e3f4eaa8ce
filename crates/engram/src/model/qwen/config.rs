//! The PLE fields of a Qwen4-Exp `config.json` (Hugging Face and MLX
//! checkpoints alike).
//!
//! The document is either a multimodal config (`model_type` `qwen4_exp`)
//! whose `text_config` holds the fields, or a text-only one (`model_type`
//! `qwen4_exp_text`) that holds them itself. Absent fields take
//! transformers' defaults, except `split_ngram_parts`, whose library
//! default (512) is wrong for the release (128) and so must be in the file
//! when the table is sharded, and `eos_token_id` and `ple_layer_ids`, which
//! have no usable default.

use std::path::Path;

use serde_json::{Map, Value as Json};

use crate::layout::QwenParams;
use crate::{Error, Result};

/// `model_type` of a multimodal Qwen4-Exp config (fields in `text_config`).
pub const MODEL_TYPE: &str = "qwen4_exp";
/// `model_type` of a text-only Qwen4-Exp config.
pub const TEXT_MODEL_TYPE: &str = "qwen4_exp_text";

/// Most PLE layers a config may declare (the release has one).
const MAX_PLE_LAYERS: usize = 64;

/// An MLX checkpoint's `quantization` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MlxQuantization {
    /// Bits per code.
    pub bits: u64,
    /// Values that share one scale and bias.
    pub group_size: u64,
}

/// What a Qwen4-Exp checkpoint's config says about its PLE tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QwenConfig {
    /// The hash parameters (PLE layer ids zero-based).
    pub params: QwenParams,
    /// `split_ngram_parts`, if the file has it.
    pub split_ngram_parts: Option<u64>,
    /// `quantization` (MLX checkpoints), if present.
    pub quantization: Option<MlxQuantization>,
}

/// Whether the JSON document `json` is a Qwen4-Exp config.
pub fn is_qwen(json: &Json) -> bool {
    matches!(
        json.get("model_type").and_then(Json::as_str),
        Some(MODEL_TYPE | TEXT_MODEL_TYPE)
    )
}

impl QwenConfig {
    /// Parses the PLE fields of `json`, read from `path` (for errors).
    pub fn parse(path: &Path, json: &Json) -> Result<QwenConfig> {
        let top = json
            .as_object()
            .ok_or_else(|| Error::format(path, "config.json", "is not a JSON object"))?;
        let (text, prefix) = match top.get("model_type").and_then(Json::as_str) {
            Some(MODEL_TYPE) => {
                let text = top
                    .get("text_config")
                    .and_then(Json::as_object)
                    .ok_or_else(|| {
                        Error::format(path, "text_config", "missing or not an object (model_type qwen4_exp keeps the PLE fields there)")
                    })?;
                (text, "text_config.")
            }
            Some(TEXT_MODEL_TYPE) => (top, ""),
            other => {
                return Err(Error::format(
                    path,
                    "model_type",
                    format!("{other:?} is not {MODEL_TYPE:?} or {TEXT_MODEL_TYPE:?}"),
                ))
            }
        };
        let fields = Fields {
            path,
            obj: text,
            prefix,
        };
        let vocab_size = fields.int_or("vocab_size", 248_320)?;
        let ngram_size = fields.int_or("ngram_size", 3)?;
        let heads_per_ngram = fields.int_or("heads_per_ngram", 8)?;
        let base = fields.int_or("ngram_vocab_size_base", 20_000_000)?;
        let divisible_by = fields.int_or("make_ngram_vocab_size_divisible_by", 128)?;
        let seed = fields.int_or("seed", 1234)?;
        let eos = fields.eos()?;
        let ple_layers = fields.ple_layer_ids()?;
        let heads = ngram_size
            .checked_sub(1)
            .and_then(|orders| orders.checked_mul(heads_per_ngram))
            .filter(|&h| h > 0)
            .ok_or_else(|| {
                fields.err(
                    "ngram_size",
                    format!(
                        "{ngram_size} with {heads_per_ngram} heads per order gives no hash head"
                    ),
                )
            })?;
        let embed_dim = match fields.opt_int("ple_embed_dim")? {
            Some(d) => d,
            None => fields.opt_int("hidden_size")?.ok_or_else(|| {
                fields.err(
                    "ple_embed_dim",
                    "missing (and no hidden_size to default to)",
                )
            })?,
        };
        if embed_dim == 0 || embed_dim % heads != 0 {
            return Err(fields.err(
                "ple_embed_dim",
                format!("{embed_dim} is not a positive multiple of the {heads} hash heads (rows are ple_embed_dim / heads values)"),
            ));
        }
        let narrow = |name: &str, v: u64, max: u64| -> Result<u64> {
            if v > max {
                Err(fields.err(name, format!("{v} is larger than {max}")))
            } else {
                Ok(v)
            }
        };
        let params = QwenParams {
            vocab_size: narrow("vocab_size", vocab_size, u64::from(u32::MAX))? as u32,
            ngram_size: narrow("ngram_size", ngram_size, 64)? as usize,
            heads_per_ngram: narrow("heads_per_ngram", heads_per_ngram, 1024)? as usize,
            ngram_vocab_size_base: base,
            make_ngram_vocab_size_divisible_by: divisible_by,
            seed,
            eos_token_id: narrow("eos_token_id", eos, u64::from(u32::MAX))? as u32,
            layer_ids: ple_layers,
            row_dim: narrow("ple_embed_dim", embed_dim / heads, 1 << 16)? as usize,
        };
        let split_ngram_parts = fields.opt_int("split_ngram_parts")?;
        let quantization = match top.get("quantization") {
            None | Some(Json::Null) => None,
            Some(q) => Some(parse_quantization(path, q)?),
        };
        Ok(QwenConfig {
            params,
            split_ngram_parts,
            quantization,
        })
    }
}

fn parse_quantization(path: &Path, q: &Json) -> Result<MlxQuantization> {
    let obj = q
        .as_object()
        .ok_or_else(|| Error::format(path, "quantization", "is not an object"))?;
    let int = |name: &str| {
        obj.get(name).and_then(Json::as_u64).ok_or_else(|| {
            Error::format(
                path,
                format!("quantization.{name}"),
                "missing or not a non-negative integer",
            )
        })
    };
    if let Some(mode) = obj.get("mode") {
        if mode.as_str() != Some("affine") {
            return Err(Error::format(
                path,
                "quantization.mode",
                format!("{mode} is not \"affine\" (the only MLX mode read)"),
            ));
        }
    }
    Ok(MlxQuantization {
        bits: int("bits")?,
        group_size: int("group_size")?,
    })
}

/// Typed access to one object of the config, naming fields in errors.
struct Fields<'a> {
    path: &'a Path,
    obj: &'a Map<String, Json>,
    prefix: &'static str,
}

impl Fields<'_> {
    fn err(&self, name: &str, reason: impl Into<String>) -> Error {
        Error::format(self.path, format!("{}{name}", self.prefix), reason)
    }

    fn opt_int(&self, name: &str) -> Result<Option<u64>> {
        match self.obj.get(name) {
            None | Some(Json::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                self.err(name, format!("expected a non-negative integer, found {v}"))
            }),
        }
    }

    fn int_or(&self, name: &str, default: u64) -> Result<u64> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    /// `eos_token_id`: a scalar, or a list whose first entry is taken (as
    /// transformers does).
    fn eos(&self) -> Result<u64> {
        let v = self
            .obj
            .get("eos_token_id")
            .ok_or_else(|| self.err("eos_token_id", "missing (the PLE hash resets on it)"))?;
        let first = match v {
            Json::Array(list) => list
                .first()
                .ok_or_else(|| self.err("eos_token_id", "is an empty list"))?,
            other => other,
        };
        first
            .as_u64()
            .ok_or_else(|| self.err("eos_token_id", format!("expected a token id, found {v}")))
    }

    /// `ple_layer_ids` (one-based in the file) as zero-based decoder layer
    /// ids, sorted and without repeats.
    fn ple_layer_ids(&self) -> Result<Vec<u32>> {
        let v = self
            .obj
            .get("ple_layer_ids")
            .ok_or_else(|| self.err("ple_layer_ids", "missing (no PLE table)"))?;
        let list = v.as_array().ok_or_else(|| {
            self.err(
                "ple_layer_ids",
                format!("expected a list of layer ids, found {v}"),
            )
        })?;
        if list.is_empty() || list.len() > MAX_PLE_LAYERS {
            return Err(self.err(
                "ple_layer_ids",
                format!("has {} entries; expected 1..={MAX_PLE_LAYERS}", list.len()),
            ));
        }
        let mut ids = list
            .iter()
            .map(|x| match x.as_u64() {
                Some(one_based @ 1..=0xffff_ffff) => Ok(one_based as u32 - 1),
                _ => Err(self.err(
                    "ple_layer_ids",
                    format!("{x} is not a one-based layer id (1 or more)"),
                )),
            })
            .collect::<Result<Vec<u32>>>()?;
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }
}
