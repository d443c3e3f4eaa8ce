//! Stats documents to Python objects: the library's JSON through
//! `json.loads`, so Python sees exactly the document the C ABI returns.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `json.loads(text)`.
pub(crate) fn to_python<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let loads = LOADS.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("json")?.getattr("loads")?.unbind())
    })?;
    loads.bind(py).call1((text,))
}
