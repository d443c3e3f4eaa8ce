//! `engram.synth`: writes a small synthetic model, so tests and examples
//! need no model download and no command-line tool.

use engram::model::synth::synth_named;
use engram::model::NoProgress;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// Writes a synthetic model of layout `preset` with every per-head table
/// size divided by `scale` into `out`, rows random but valid and a pure
/// function of `seed`: `out/model.gguf` for format "gguf", the checkpoint
/// directory `out` for "hf" and "mlx" (Qwen4-Exp presets only). `encoding`
/// None takes the format's default. Returns the path `engram.open` takes.
/// The GIL is released while writing. Scale 65536 makes a DeepSeek model
/// of about 3 MB.
#[pyfunction]
#[pyo3(signature = (out, *, preset = "deepseek-v4.1-flash", scale = 65536, encoding = None, format = "gguf", seed = 0))]
pub(crate) fn synth(
    py: Python<'_>,
    out: std::path::PathBuf,
    preset: &str,
    scale: u64,
    encoding: Option<&str>,
    format: &str,
    seed: u64,
) -> PyResult<std::path::PathBuf> {
    let written = py
        .detach(|| synth_named(&out, format, preset, scale, encoding, seed, &NoProgress))
        .py_err()?;
    Ok(written.path)
}
