//! `engram.Prefill`: names the prefill that lives inside its sequence (as
//! the C ABI's handle does), so a wait on an ended prefill is refused,
//! never served from freed rings.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use engram::open::{SeqError, SharedSequence};
use engram::prefetch::Prefill as CorePrefill;
use pyo3::prelude::*;

use crate::convert::OutBuffer;
use crate::errors::IntoPy;
use crate::gil::context_manager;
use crate::rows::OwnedRows;

/// A fresh name for a prefill: never reused in the process, so a `Prefill`
/// object whose prefill ended can never name a later one of its sequence.
pub(crate) fn fresh_id() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A prefill in progress on a sequence: waits per table, in increasing
/// `upto`. A context manager: leaving the `with` block ends it.
#[pyclass(module = "engram", frozen)]
pub struct Prefill {
    shared: Arc<SharedSequence>,
    id: usize,
}

impl Prefill {
    pub(crate) fn new(shared: Arc<SharedSequence>, id: usize) -> Prefill {
        Prefill { shared, id }
    }

    /// Runs `f` on the live prefill under the sequence's lock, with the GIL
    /// released.
    fn with<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut CorePrefill<'static>) -> R + Send,
    ) -> PyResult<R> {
        py.detach(|| self.shared.with_prefill(self.id, |live| Ok(f(live))))
            .py_err()
    }

    /// Ends the prefill if it is still the live one (joins its readers).
    fn end_now(&self) {
        if let Ok(mut state) = self.shared.lock() {
            state.end_prefill(self.id);
        }
    }
}

context_manager!(Prefill, |prefill, py| prefill.end(py));

#[pymethods]
impl Prefill {
    /// Tokens in the prefill.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |live| live.tokens())
    }

    /// Most tokens one wait may cover.
    #[getter]
    fn max_wait_tokens(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, |live| live.max_wait_tokens())
    }

    /// Blocks (GIL released) until the rows of prompt tokens [0, upto) of
    /// `table` are read; returns those of [previous upto, upto) as a new
    /// array of shape (tokens, rows_per_token, row_dim) float32 (or
    /// (tokens, rows_per_token, row_bytes) uint8 for raw rows).
    fn wait<'py>(&self, py: Python<'py>, table: usize, upto: u32) -> PyResult<Bound<'py, PyAny>> {
        let rows = py
            .detach(|| -> Result<engram::Result<OwnedRows>, SeqError> {
                let rows = self
                    .shared
                    .prefill_wait(self.id, table, upto, OwnedRows::copy)?;
                if rows.is_ok() {
                    // Copied: their ring slots may be refilled now.
                    self.shared.prefill_release(self.id, table)?;
                }
                Ok(rows)
            })
            .py_err()?
            .py_err()?;
        rows.into_array(py)
    }

    /// `wait`, copying the rows into `out` (a writable C-contiguous numpy
    /// array, CPU tensor, bytearray or memoryview; float32 or bytes for f32
    /// rows, bytes for raw rows) from its start. Its type and size are
    /// checked before waiting (nothing is consumed on error). Returns the
    /// bytes written.
    fn wait_into(
        &self,
        py: Python<'_>,
        table: usize,
        upto: u32,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        self.shared.rows_bytes(table, 0).py_err()?;
        // `_keep` holds the buffer's memory exported until the copy is done.
        let (mut buffer, _keep) = OutBuffer::of(out, self.shared.format(), 0)?;
        py.detach(|| {
            // SAFETY: `_keep` is alive until this closure has returned.
            let out = unsafe { buffer.bytes() };
            self.shared.prefill_wait_into(self.id, table, upto, out)
        })
        .py_err()
    }

    /// Tokens of `table` already read (does not block).
    fn ready_tokens(&self, py: Python<'_>, table: usize) -> PyResult<u32> {
        self.shared.rows_bytes(table, 0).py_err()?;
        self.with(py, |live| live.ready_tokens(table).unwrap_or(0))
    }

    /// Ends the prefill: pending reads are cancelled, the readers joined
    /// (GIL released), and the sequence may step again. Arrays returned by
    /// its waits stay valid (they own their data). Ending twice is allowed.
    fn end(&self, py: Python<'_>) {
        py.detach(|| self.end_now());
    }
}

impl Drop for Prefill {
    fn drop(&mut self) {
        // A prefill dropped without end() (garbage collected) ends here,
        // without holding the GIL while its readers are joined.
        Python::attach(|py| py.detach(|| self.end_now()));
    }
}
