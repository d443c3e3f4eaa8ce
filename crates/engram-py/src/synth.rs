//! `engram.synth`: writes a small synthetic model, so tests and examples
//! need no model download and no command-line tool.

use engram::codec::Encoding;
use engram::model::synth::{synth_preset, SynthFormat};
use engram::model::NoProgress;
use pyo3::prelude::*;

use crate::errors::{invalid, IntoPy};

/// Writes a synthetic model of layout `preset` with every per-head table
/// size divided by `scale` into `out` (`out/model.gguf` for format "gguf";
/// the checkpoint directory `out` for "hf"), rows random but valid and a
/// pure function of `seed`. Returns the path `engram.open` takes. The GIL is
/// released while writing. Scale 65536 makes a model of about 3 MB.
#[pyfunction]
#[pyo3(signature = (out, *, preset = "deepseek-v4.1-flash", scale = 65536, encoding = "e4m3_e8m0_32_row264", format = "gguf", seed = 0))]
pub(crate) fn synth(
    py: Python<'_>,
    out: std::path::PathBuf,
    preset: &str,
    scale: u64,
    encoding: &str,
    format: &str,
    seed: u64,
) -> PyResult<std::path::PathBuf> {
    let encoding = Encoding::from_name(encoding).ok_or_else(|| {
        let known: Vec<&str> = Encoding::ALL.iter().map(|e| e.name()).collect();
        invalid(format!(
            "encoding {encoding:?}: expected one of {}",
            known.join(", ")
        ))
    })?;
    let format = match format {
        "gguf" => SynthFormat::Gguf,
        "hf" => SynthFormat::Hf,
        other => {
            return Err(invalid(format!(
                "format {other:?}: expected \"gguf\" or \"hf\""
            )))
        }
    };
    let written = py
        .detach(|| synth_preset(&out, format, preset, scale, encoding, seed, &NoProgress))
        .py_err()?;
    Ok(written.0)
}
