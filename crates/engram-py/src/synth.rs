//! `engram.synth`: writes a small synthetic model, so tests and examples
//! need no model download and no command-line tool.
//!
//! The writer is one of the core's tools (feature `testing` of this crate):
//! the shipped wheel leaves it out, so `engram.synth` there raises an
//! `engram.Error` saying how to get it (`engram synth` on the command line,
//! or a wheel built with `--features testing`).

#[cfg(feature = "testing")]
use engram::model::synth::synth_named;
#[cfg(feature = "testing")]
use engram::model::NoProgress;
use pyo3::prelude::*;

#[cfg(feature = "testing")]
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
    #[cfg(feature = "testing")]
    {
        let written = py
            .detach(|| synth_named(&out, format, preset, scale, encoding, seed, &NoProgress))
            .py_err()?;
        Ok(written.path)
    }
    #[cfg(not(feature = "testing"))]
    {
        let _ = (py, out, preset, scale, encoding, format, seed);
        Err(crate::errors::not_built(
            "engram.synth is not in this build of engram (the wheel was built without the \
             `testing` feature, to leave the model writers out): write the model with \
             `engram synth`, or build the wheel with MATURIN_PEP517_ARGS=\"--features testing\"",
        ))
    }
}
