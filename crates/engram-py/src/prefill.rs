//! `engram.Prefill`: names the prefill that lives inside its sequence (as
//! the C ABI's handle does), so a wait on an ended prefill is refused,
//! never served from freed rings.

use std::sync::Arc;

use engram::prefetch::Prefill as CorePrefill;
use pyo3::prelude::*;

use crate::convert::OutBuffer;
use crate::errors::Fail;
use crate::gil::context_manager;
use crate::rows::OwnedRows;
use crate::sequence::SeqShared;

/// A prefill in progress on a sequence: waits per table, in increasing
/// `upto`. A context manager: leaving the `with` block ends it.
#[pyclass(module = "engram", frozen)]
pub struct Prefill {
    shared: Arc<SeqShared>,
    id: u64,
}

impl Prefill {
    pub(crate) fn new(shared: Arc<SeqShared>, id: u64) -> Prefill {
        Prefill { shared, id }
    }

    /// Runs `f` on the live prefill under the sequence's lock.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut CorePrefill<'static>) -> Result<R, Fail>,
    ) -> Result<R, Fail> {
        let mut inner = self.shared.lock()?;
        let live = inner
            .prefill
            .get(self.id)
            .ok_or_else(|| Fail::State("the prefill has ended".into()))?;
        f(live)
    }

    /// Ends the prefill if it is still the live one (joins its readers).
    fn end_now(&self) {
        if let Ok(mut inner) = self.shared.lock() {
            inner.prefill.end(self.id);
        }
    }
}

context_manager!(Prefill, |prefill, py| prefill.end(py));

#[pymethods]
impl Prefill {
    /// Tokens in the prefill.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(py.detach(|| self.with(|live| Ok(live.tokens())))?)
    }

    /// Most tokens one wait may cover.
    #[getter]
    fn max_wait_tokens(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(py.detach(|| self.with(|live| Ok(live.max_wait_tokens())))?)
    }

    /// Blocks (GIL released) until the rows of prompt tokens [0, upto) of
    /// `table` are read; returns those of [previous upto, upto) as a new
    /// array of shape (tokens, rows_per_token, row_dim) float32 (or
    /// (tokens, rows_per_token, row_bytes) uint8 for raw rows).
    fn wait<'py>(&self, py: Python<'py>, table: usize, upto: u32) -> PyResult<Bound<'py, PyAny>> {
        let rows =
            py.detach(|| self.with(|live| Ok(OwnedRows::copy(&live.wait(table, upto)?)?)))?;
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
        self.shared.rows_bytes(table, 0)?;
        // `_keep` holds the buffer's memory exported until the copy is done.
        let (mut buffer, _keep) = OutBuffer::of(out, self.shared.format, 0)?;
        let written = py.detach(|| {
            self.with(|live| {
                // SAFETY: `_keep` is alive until this closure has returned.
                let out = unsafe { buffer.bytes() };
                // A wait the library will refuse gets its error, not a size
                // complaint.
                let tokens = live.wait_tokens(table, upto)?;
                let need = self.shared.rows_bytes(table, tokens)?;
                if out.len() < need {
                    return Err(Fail::Invalid(format!(
                        "out: {} bytes; the rows need {need} (nothing was consumed)",
                        out.len()
                    )));
                }
                let view = live.wait(table, upto)?;
                view.copy_to(&mut out[..need])?;
                Ok(need)
            })
        })?;
        Ok(written)
    }

    /// Tokens of `table` already read (does not block).
    fn ready_tokens(&self, py: Python<'_>, table: usize) -> PyResult<u32> {
        self.shared.rows_bytes(table, 0)?;
        Ok(py.detach(|| self.with(|live| Ok(live.ready_tokens(table).unwrap_or(0))))?)
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
