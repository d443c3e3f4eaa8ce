//! `engram.Sequence`: a thin class over the core's [`SharedSequence`] (the
//! sequence, its live prefill and the rules on them, shared with the C ABI).
//!
//! Every call converts its arguments with the GIL held, then releases the
//! GIL and only then takes the sequence's lock, so a thread blocked in a
//! wait never holds the GIL and a thread holding the GIL never waits for
//! the lock while its holder needs the GIL back.

use std::sync::Arc;

use engram::open::{OpenEngine, SeqError, SeqState, SharedSequence};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

use crate::convert::{self, OutBuffer};
use crate::errors::{invalid, IntoPy};
use crate::gil::{context_manager, Closable};
use crate::json::to_python;
use crate::prefill::Prefill;
use crate::rows::OwnedRows;

/// One sequence of tokens on an engine: a prefill over a prompt, then decode
/// steps. Calls on one sequence are serialized; use one thread per sequence
/// for overlap.
#[pyclass(module = "engram", frozen)]
pub struct Sequence {
    shared: Closable<Arc<SharedSequence>>,
}

impl Sequence {
    pub(crate) fn new(engine: Arc<OpenEngine>) -> PyResult<Sequence> {
        let shared = Arc::new_cyclic(|weak: &std::sync::Weak<SharedSequence>| {
            // The id names the sequence in the engine's stats report.
            SharedSequence::new(&engine, weak.as_ptr() as usize)
        });
        Ok(Sequence {
            shared: Closable::new(shared),
        })
    }

    /// Runs `f` on the sequence's state with the GIL released (the lock is
    /// taken only after it is).
    fn locked<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut SeqState) -> Result<R, SeqError> + Send,
    ) -> PyResult<R> {
        let shared = self.shared()?;
        py.detach(|| f(&mut *shared.lock()?)).py_err()
    }

    fn shared(&self) -> PyResult<Arc<SharedSequence>> {
        self.shared
            .get()
            .ok_or_else(|| crate::errors::state("the sequence is closed"))
    }
}

context_manager!(Sequence, |seq, _py| seq.close());

#[pymethods]
impl Sequence {
    /// Row ids that `tokens` (mask: nonzero / True a real token, 0 padding;
    /// None: all real) would get appended now, without appending them: a
    /// new uint32 array of shape (len(tokens), tables, rows_per_token).
    #[pyo3(signature = (tokens, mask = None))]
    fn row_ids<'py>(
        &self,
        py: Python<'py>,
        tokens: &Bound<'py, PyAny>,
        mask: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (tokens, mask) = (convert::tokens(tokens, "tokens")?, convert::mask(mask)?);
        let shared = self.shared()?;
        let ids = py
            .detach(|| shared.lock()?.row_ids(&tokens, mask.as_deref()))
            .py_err()?;
        Ok(PyArray1::from_vec(py, ids)
            .reshape([tokens.len(), shared.tables(), shared.rows_per_token()])?
            .into_any())
    }

    /// Appends `tokens` (mask as in `row_ids`) and starts reading their rows
    /// ahead of the waits. Returns the Prefill (a context manager that ends
    /// it); until it ends, decode steps and other prefills are refused with
    /// StateError.
    #[pyo3(signature = (tokens, mask = None))]
    fn prefill(
        &self,
        py: Python<'_>,
        tokens: &Bound<'_, PyAny>,
        mask: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Prefill> {
        let (tokens, mask) = (convert::tokens(tokens, "tokens")?, convert::mask(mask)?);
        let shared = self.shared()?;
        let id = crate::prefill::fresh_id();
        py.detach(|| shared.lock()?.begin_prefill(id, &tokens, mask.as_deref()))
            .py_err()?;
        Ok(Prefill::new(shared, id))
    }

    /// Appends `token` and issues both tables' reads of its rows without
    /// blocking (it blocks only while the previous step's reads still run).
    /// Call as soon as the token is sampled.
    fn step_begin(&self, py: Python<'_>, token: &Bound<'_, PyAny>) -> PyResult<()> {
        let token = convert::token(token)?;
        self.locked(py, |state| state.step_begin(token))
    }

    /// Blocks (GIL released) until the current step's rows of `table` are
    /// read; returns them as a new array of shape (1, rows_per_token, row_dim)
    /// float32 (or (1, rows_per_token, row_bytes) uint8 for raw rows).
    fn step_wait<'py>(&self, py: Python<'py>, table: usize) -> PyResult<Bound<'py, PyAny>> {
        let shared = self.shared()?;
        let rows = py
            .detach(|| shared.step_wait(table, OwnedRows::copy))
            .py_err()?
            .py_err()?;
        rows.into_array(py)
    }

    /// `step_wait`, copying the rows into `out` (a writable C-contiguous
    /// numpy array, CPU tensor, bytearray or memoryview; float32 or bytes
    /// for f32 rows, bytes for raw rows), checked before waiting. Returns
    /// the bytes written.
    fn step_wait_into(
        &self,
        py: Python<'_>,
        table: usize,
        out: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let shared = self.shared()?;
        let need = shared.rows_bytes(table, 1).py_err()?;
        // `_keep` holds the buffer's memory exported until the copy is done.
        let (mut buffer, _keep) = OutBuffer::of(out, shared.format(), need)?;
        py.detach(|| {
            // SAFETY: `_keep` is alive until this closure has returned.
            shared.step_wait_into(table, unsafe { buffer.bytes() })
        })
        .py_err()
    }

    /// Reads, at low priority into the row cache, the rows of guessed next
    /// tokens. Nothing waits on hints; useful only with a row cache.
    ///
    /// `tokens` is a draft chain: `tokens[i]` guesses the token `i + 1`
    /// positions ahead, hashed after `tokens[:i]` (at most 16).
    /// `draft_probs` gives each its probability given the chain before it
    /// (default 1 each). `alternatives` are other guesses of the next
    /// token (a top-k, at most 32), with `alternative_probs` (required,
    /// one each). Probabilities are in [0, 1]. The likeliest rows are read
    /// first; a step that begins drops the hints it makes stale.
    /// `stats()["hint_use"]` counts each kind's rows read, used, dropped.
    #[pyo3(signature = (tokens=None, *, draft_probs=None, alternatives=None, alternative_probs=None))]
    fn hint(
        &self,
        py: Python<'_>,
        tokens: Option<&Bound<'_, PyAny>>,
        draft_probs: Option<&Bound<'_, PyAny>>,
        alternatives: Option<&Bound<'_, PyAny>>,
        alternative_probs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        /// An argument given and not None.
        fn some<'a, 'py>(o: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
            o.filter(|o| !o.is_none())
        }
        let draft = match some(tokens) {
            Some(t) => convert::tokens(t, "tokens")?,
            None => Vec::new(),
        };
        let alternatives = match some(alternatives) {
            Some(t) => convert::tokens(t, "alternatives")?,
            None => Vec::new(),
        };
        let draft_probs = convert::probs(some(draft_probs), "draft_probs")?;
        let alternative_probs = convert::probs(some(alternative_probs), "alternative_probs")?;
        self.locked(py, |state| {
            let hints = engram::Hints::draft(&draft)
                .with_draft_probs(&draft_probs)
                .with_alternatives(&alternatives, &alternative_probs);
            state.hint(hints)
        })
    }

    /// Drops the last `n` tokens (rejected draft tokens).
    fn rollback(&self, py: Python<'_>, n: usize) -> PyResult<()> {
        self.locked(py, |state| state.rollback(n))
    }

    /// Everything measured on this sequence so far, as a dict (prefill,
    /// decode, hints; per table waits, stall, rows, reads, bytes, latency).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.locked(py, |state| Ok(state.stats().to_json()))?;
        to_python(py, &json)
    }

    /// The stall of `phase` ("prefill" or "decode") as a dict: per table
    /// waits and time blocked, and `stall_per_token_total` (count, mean,
    /// p50, p90, p99, max in microseconds).
    fn stall<'py>(&self, py: Python<'py>, phase: &str) -> PyResult<Bound<'py, PyAny>> {
        if phase != "prefill" && phase != "decode" {
            return Err(invalid(format!(
                "phase {phase:?}: expected \"prefill\" or \"decode\""
            )));
        }
        let stats = self.stats(py)?;
        stats.get_item(phase)
    }

    /// Tokens in the sequence so far.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.locked(py, |state| Ok(state.len()))
    }

    /// Ends the sequence: an open prefill is ended, pending reads are
    /// cancelled and joined (GIL released). Closing twice is allowed.
    fn close(&self) {
        self.shared.close();
    }
}
