//! Dropping objects whose drop joins reader threads (an engine, a sequence)
//! without holding the GIL, so other Python threads run meanwhile.

use pyo3::prelude::*;

/// Drops `value` with the GIL released (`None` costs nothing). Callable
/// with or without the GIL held, e.g. from a class's `Drop`.
pub(crate) fn drop_detached<T: Send>(value: Option<T>) {
    if value.is_some() {
        Python::attach(|py| py.detach(move || drop(value)));
    }
}
