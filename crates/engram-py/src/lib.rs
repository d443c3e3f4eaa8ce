//! Python bindings of engram-prefetch: the `engram._engram` extension
//! module behind the `engram` package. This file only declares the module
//! tree; each class is a thin newtype over a core type (see `docs/python.md`).

mod convert;
mod engine;
mod errors;
mod gil;
mod json;
mod prefill;
mod rows;
mod sequence;
mod synth;

use pyo3::prelude::*;

/// The extension module: classes, functions and exception classes.
#[pymodule]
fn _engram(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rows come back as numpy arrays: without numpy (a `pip install
    // --no-deps`) the first array would panic deep in the bindings, so the
    // import fails here instead, saying what is missing.
    if let Err(e) = m.py().import("numpy") {
        return Err(pyo3::exceptions::PyImportError::new_err(format!(
            "engram needs numpy (pip install 'numpy>=1.21'): {e}"
        )));
    }
    m.add_class::<engine::Engine>()?;
    m.add_class::<engine::Info>()?;
    m.add_class::<sequence::Sequence>()?;
    m.add_class::<prefill::Prefill>()?;
    m.add_function(wrap_pyfunction!(engine::open, m)?)?;
    m.add_function(wrap_pyfunction!(engine::options, m)?)?;
    m.add_function(wrap_pyfunction!(synth::synth, m)?)?;
    m.add("ROW_DIM", engram::codec::ROW_DIM)?;
    errors::register(m)
}
