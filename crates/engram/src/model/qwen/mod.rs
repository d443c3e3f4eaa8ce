//! The Qwen4-Exp family (Qwen3.8-Flash-Next): per-layer-embedding (PLE)
//! n-gram tables in Hugging Face, MLX and llama.cpp GGUF files.
//!
//! `config` reads a checkpoint's `config.json`, `names` the tensor names of
//! every converter, `dir` opens checkpoint directories (HF and MLX) in
//! place, `gguf` llama.cpp's files, and `synth` writes small synthetic
//! models of all three kinds.

pub mod config;
pub mod dir;
pub mod gguf;
pub mod names;
// Writes models: a tool (feature `tools`).
#[cfg(feature = "tools")]
pub mod synth;

use std::path::Path;

use crate::layout::{Layout, QwenParams};
use crate::{Error, Result};

/// `general.architecture` of a Qwen4-Exp GGUF, and its key prefix.
pub const ARCH: &str = "qwen4exp";

/// The layout `params` derive, with a bad parameter reported as a format
/// error of the file at `path` that held it.
pub fn derive_layout(path: &Path, params: &QwenParams) -> Result<Layout> {
    Layout::derive_qwen(params).map_err(|e| match e {
        Error::Layout { field, reason } => Error::format(path, field, reason),
        other => other,
    })
}
