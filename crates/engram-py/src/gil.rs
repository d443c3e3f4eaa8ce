//! Dropping objects whose drop joins reader threads (an engine, a sequence)
//! without holding the GIL, so other Python threads run meanwhile; the
//! slot a closable class keeps its core object in; and the context-manager
//! protocol those classes share.

use std::sync::RwLock;

use pyo3::prelude::*;

/// Drops `value` with the GIL released (`None` costs nothing). Callable
/// with or without the GIL held, e.g. from a class's `Drop`.
pub(crate) fn drop_detached<T: Send>(value: Option<T>) {
    if value.is_some() {
        Python::attach(|py| py.detach(move || drop(value)));
    }
}

/// What a closable class (`Engine`, `Sequence`) holds: a share of its core
/// object until `close()`, then nothing. Closing, and dropping unclosed
/// (garbage collected without `close()`), drop the share with the GIL
/// released, since the last share joins reader threads.
pub(crate) struct Closable<T: Clone + Send>(RwLock<Option<T>>);

impl<T: Clone + Send> Closable<T> {
    /// Holds `value` until closed.
    pub(crate) fn new(value: T) -> Closable<T> {
        Closable(RwLock::new(Some(value)))
    }

    /// A share of the object, or `None` once closed.
    pub(crate) fn get(&self) -> Option<T> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops the share (GIL released); closing twice is allowed.
    pub(crate) fn close(&self) {
        drop_detached(self.0.write().unwrap_or_else(|p| p.into_inner()).take());
    }
}

impl<T: Clone + Send> Drop for Closable<T> {
    fn drop(&mut self) {
        drop_detached(self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take());
    }
}

/// Makes `$class` a context manager whose `with` block ends with
/// `$end` (run on `$this`, the object, with `$py`, the GIL token):
/// `__enter__` returns the object itself, `__exit__` ends it and returns
/// False, so an exception raised in the block propagates. A second
/// `#[pymethods]` block of the class (pyo3's `multiple-pymethods`).
macro_rules! context_manager {
    ($class:ty, |$this:ident, $py:ident| $end:expr) => {
        #[pyo3::pymethods]
        impl $class {
            fn __enter__(slf: pyo3::Py<Self>) -> pyo3::Py<Self> {
                slf
            }

            #[pyo3(signature = (*_args))]
            fn __exit__(
                &self,
                $py: pyo3::Python<'_>,
                _args: &pyo3::Bound<'_, pyo3::types::PyTuple>,
            ) -> bool {
                let $this = self;
                $end;
                false
            }
        }
    };
}
pub(crate) use context_manager;
