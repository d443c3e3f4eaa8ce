//! A sequence shared by the objects of a binding (a C handle and its
//! prefill handles, a Python `Sequence` and its `Prefill` objects): the
//! sequence and its one live prefill behind one lock, with the rules both
//! bindings enforce.
//!
//! The rules: at most one prefill is live; while it is, decode steps,
//! rollbacks and other prefills are refused; a call that names an ended
//! prefill is refused instead of being served from freed rings; a lock
//! poisoned by a panic refuses every later call (the state may be
//! half-updated); once closed, nothing more starts on the sequence. The
//! bindings keep only the conversion of arguments, results and
//! [`SeqError`]s (each phrases how its callers end a prefill).

use std::sync::{Arc, Mutex, MutexGuard};

use super::registry::SeqRegistry;
use super::slot::PrefillSlot;
use super::OpenEngine;
use crate::prefetch::{Hints, Prefill, RowFormat, RowsView, Sequence};
use crate::stats::Stats;
use crate::Error;

/// The call a live prefill refused, for the binding to name its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqCall {
    /// A second prefill.
    Prefill,
    /// A decode step.
    StepBegin,
    /// A rollback.
    Rollback,
}

/// Why a call on a [`SharedSequence`] failed. It carries facts, not a
/// message: the bindings word each for their callers (`engram_prefill_end`
/// in C, `Prefill.end` in Python).
#[derive(Debug, thiserror::Error)]
pub enum SeqError {
    /// The engine refused or failed the call.
    #[error(transparent)]
    Engine(#[from] Error),
    /// An earlier call panicked while holding the sequence's lock, so its
    /// state may be half-updated.
    #[error("the sequence is unusable after an internal error (panic)")]
    Poisoned,
    /// [`SharedSequence::close`] ran before this call took the lock.
    #[error("sequence {id:#x} was closed before this call got to it")]
    Closed {
        /// The sequence's id.
        id: usize,
    },
    /// `call` is not allowed while the prefill `live` is.
    #[error("{call:?} while prefill {live:#x} is live on this sequence")]
    PrefillLive {
        /// What was refused.
        call: SeqCall,
        /// The live prefill's id.
        live: usize,
    },
    /// The prefill named `id` has ended.
    #[error("prefill {id:#x} has ended")]
    PrefillEnded {
        /// The prefill's id.
        id: usize,
    },
    /// `table` is not one of the model's `tables`.
    #[error("table {table} out of range (the model has {tables})")]
    TableOutOfRange {
        /// The table asked for.
        table: usize,
        /// Tables the model has.
        tables: usize,
    },
    /// The caller's buffer of `have` bytes is smaller than the `need`
    /// bytes of the rows; nothing was consumed.
    #[error("a buffer of {have} bytes; the rows need {need} (nothing was consumed)")]
    BufferTooSmall {
        /// Bytes of the buffer.
        have: usize,
        /// Bytes of the rows.
        need: usize,
    },
}

/// A sequence of an [`OpenEngine`], shared by the objects of a binding
/// that name it and its prefill. Every call takes the one lock
/// ([`SharedSequence::lock`]); a thread that must not block while holding
/// something else (the Python GIL) releases it first.
pub struct SharedSequence {
    id: usize,
    /// Per table: bytes of one delivered row.
    row_bytes: Vec<usize>,
    rows_per_token: usize,
    format: RowFormat,
    registry: Arc<SeqRegistry>,
    state: Mutex<SeqState>,
}

/// The state behind a [`SharedSequence`]'s lock: the sequence and its live
/// prefill. Its methods enforce the rules of the module docs.
pub struct SeqState {
    /// The live prefill. Declared before `seq`: ends (cancels and joins its
    /// readers) before the sequence drops.
    prefill: PrefillSlot<usize>,
    seq: Sequence,
    /// [`SharedSequence::close`] ran: a call that took its share of the
    /// sequence before the close but its lock after it is refused, so
    /// nothing (a prefill above all) starts on a closed sequence.
    closed: bool,
}

impl std::fmt::Debug for SharedSequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedSequence")
            .field("id", &format_args!("{:#x}", self.id))
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

impl SharedSequence {
    /// A new, empty sequence on `engine`, named `id` (the binding's id for
    /// it, unique among the engine's open sequences) in the engine's stats
    /// report.
    pub fn new(engine: &OpenEngine, id: usize) -> SharedSequence {
        let seq = engine.engine.sequence();
        let format = engine.engine.config().format;
        engine.seqs.opened(id, seq.stats_recorder());
        SharedSequence {
            id,
            row_bytes: (0..seq.tables())
                .map(|t| engine.row_bytes(t, format))
                .collect(),
            rows_per_token: seq.rows_per_token(),
            format,
            registry: engine.seqs.clone(),
            state: Mutex::new(SeqState {
                prefill: PrefillSlot::default(),
                seq,
                closed: false,
            }),
        }
    }

    /// The id the sequence was opened with.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The format its waits deliver.
    pub fn format(&self) -> RowFormat {
        self.format
    }

    /// Number of tables.
    pub fn tables(&self) -> usize {
        self.row_bytes.len()
    }

    /// Rows per token of each table.
    pub fn rows_per_token(&self) -> usize {
        self.rows_per_token
    }

    /// Bytes of `tokens` tokens of `table`'s rows, or
    /// [`SeqError::TableOutOfRange`]: the check a binding makes before it
    /// sizes a buffer or waits.
    pub fn rows_bytes(&self, table: usize, tokens: u32) -> Result<usize, SeqError> {
        let row_bytes = self.row_bytes.get(table).ok_or(SeqError::TableOutOfRange {
            table,
            tables: self.row_bytes.len(),
        })?;
        Ok(tokens as usize * self.rows_per_token * row_bytes)
    }

    /// The sequence's state, refused once poisoned or closed.
    pub fn lock(&self) -> Result<MutexGuard<'_, SeqState>, SeqError> {
        let state = self.state.lock().map_err(|_| SeqError::Poisoned)?;
        if state.closed {
            return Err(SeqError::Closed { id: self.id });
        }
        Ok(state)
    }

    /// Runs `f` on the live prefill named `id`, under the lock.
    pub fn with_prefill<R>(
        &self,
        id: usize,
        f: impl FnOnce(&mut Prefill<'static>) -> Result<R, SeqError>,
    ) -> Result<R, SeqError> {
        f(self.lock()?.prefill(id)?)
    }

    /// Blocks until the rows of tokens `[0, upto)` of `table` of the live
    /// prefill named `id` are read, and returns what `f` makes of those of
    /// `[previous upto, upto)` ([`Prefill::wait`]).
    pub fn prefill_wait<R>(
        &self,
        id: usize,
        table: usize,
        upto: u32,
        f: impl FnOnce(&RowsView<'_>) -> R,
    ) -> Result<R, SeqError> {
        self.rows_bytes(table, 0)?;
        self.with_prefill(id, |live| Ok(f(&live.wait(table, upto)?)))
    }

    /// [`SharedSequence::prefill_wait`], copying the rows into the front of
    /// `out`, whose size is checked before waiting (so nothing is consumed
    /// when it is too small). Returns the bytes written.
    pub fn prefill_wait_into(
        &self,
        id: usize,
        table: usize,
        upto: u32,
        out: &mut [u8],
    ) -> Result<usize, SeqError> {
        self.with_prefill(id, |live| {
            // A wait the library will refuse gets its error, not a size
            // complaint.
            let need = self.rows_bytes(table, live.wait_tokens(table, upto)?)?;
            check_room(out, need)?;
            live.wait_into(table, upto, &mut out[..need])?;
            Ok(need)
        })
    }

    /// Hands back the rows of the last wait on `table` of the live prefill
    /// named `id` before the next wait ([`Prefill::release`]): a binding
    /// whose wait copied them out calls it.
    pub fn prefill_release(&self, id: usize, table: usize) -> Result<(), SeqError> {
        self.rows_bytes(table, 0)?;
        self.with_prefill(id, |live| Ok(live.release(table)?))
    }

    /// Blocks until the current step's rows of `table` are read and
    /// returns what `f` makes of them ([`Sequence::step_wait`]).
    pub fn step_wait<R>(
        &self,
        table: usize,
        f: impl FnOnce(&RowsView<'_>) -> R,
    ) -> Result<R, SeqError> {
        self.rows_bytes(table, 1)?;
        Ok(f(&self.lock()?.seq.step_wait(table)?))
    }

    /// [`SharedSequence::step_wait`], copying the rows into the front of
    /// `out`, whose size is checked before waiting. Returns the bytes
    /// written.
    pub fn step_wait_into(&self, table: usize, out: &mut [u8]) -> Result<usize, SeqError> {
        let need = self.rows_bytes(table, 1)?;
        check_room(out, need)?;
        self.lock()?
            .seq
            .step_wait(table)?
            .copy_to(&mut out[..need])?;
        Ok(need)
    }

    /// Closes the sequence: later calls are refused with
    /// [`SeqError::Closed`], a live prefill is ended (its readers cancelled
    /// and joined), and the final stats go to the engine's registry.
    /// `ended` hears the id of that prefill while the lock is still held,
    /// so a binding forgets its name for it before any call can find the
    /// sequence closed. Closing twice does nothing the second time.
    pub fn close(&self, ended: impl FnOnce(usize)) {
        let (mut state, poisoned) = match self.state.lock() {
            Ok(state) => (state, false),
            Err(p) => (p.into_inner(), true),
        };
        if state.closed {
            return;
        }
        state.closed = true;
        if let Some((id, prefill)) = state.prefill.take() {
            ended(id);
            drop(prefill); // cancels and joins its readers
        }
        // A poisoned sequence's stats may be torn: none are kept.
        let stats = if poisoned {
            Stats::default()
        } else {
            state.seq.stats()
        };
        drop(state);
        self.registry.freed(self.id, stats);
    }
}

/// Refuses a buffer smaller than the `need` bytes of the rows.
fn check_room(out: &[u8], need: usize) -> Result<(), SeqError> {
    if out.len() < need {
        return Err(SeqError::BufferTooSmall {
            have: out.len(),
            need,
        });
    }
    Ok(())
}

impl Drop for SharedSequence {
    fn drop(&mut self) {
        // A sequence dropped without close() (a Python object garbage
        // collected) still ends its prefill and reports its stats.
        self.close(|_| {});
    }
}

impl SeqState {
    /// Refuses `call` while a prefill is live.
    fn no_prefill(&self, call: SeqCall) -> Result<(), SeqError> {
        match self.prefill.live() {
            Some(live) => Err(SeqError::PrefillLive { call, live }),
            None => Ok(()),
        }
    }

    /// Appends `tokens` (`mask[i] == true`: token `i` real) and starts
    /// reading their rows; the prefill is live under `id` (the binding's
    /// name for it, unique for the sequence) until
    /// [`SeqState::end_prefill`] or the close. Refused while another is
    /// live.
    pub fn begin_prefill(
        &mut self,
        id: usize,
        tokens: &[u32],
        mask: Option<&[bool]>,
    ) -> Result<(), SeqError> {
        self.no_prefill(SeqCall::Prefill)?;
        let prefill = self.seq.prefill_detached(tokens, mask)?;
        self.prefill.start(id, prefill);
        Ok(())
    }

    /// The live prefill, if it is the one named `id`.
    pub fn prefill(&mut self, id: usize) -> Result<&mut Prefill<'static>, SeqError> {
        self.prefill.get(id).ok_or(SeqError::PrefillEnded { id })
    }

    /// Ends the live prefill (cancels and joins its readers) if it is the
    /// one named `id`; nothing if that one has already ended.
    pub fn end_prefill(&mut self, id: usize) {
        self.prefill.end(id);
    }

    /// Row ids `tokens` would get appended now, without appending them
    /// ([`Sequence::row_ids`]).
    pub fn row_ids(&self, tokens: &[u32], mask: Option<&[bool]>) -> Result<Vec<u32>, SeqError> {
        Ok(self.seq.row_ids(tokens, mask)?)
    }

    /// A decode step ([`Sequence::step_begin`]); refused while a prefill
    /// is live.
    pub fn step_begin(&mut self, token: u32) -> Result<(), SeqError> {
        self.no_prefill(SeqCall::StepBegin)?;
        Ok(self.seq.step_begin(token)?)
    }

    /// Hints: a draft chain, or [`Hints`] with probabilities and
    /// alternatives ([`Sequence::hint`]).
    pub fn hint<'h>(&mut self, hints: impl Into<Hints<'h>>) -> Result<(), SeqError> {
        Ok(self.seq.hint(hints)?)
    }

    /// Drops the last `n` tokens ([`Sequence::rollback`]); refused while a
    /// prefill is live.
    pub fn rollback(&mut self, n: usize) -> Result<(), SeqError> {
        self.no_prefill(SeqCall::Rollback)?;
        Ok(self.seq.rollback(n)?)
    }

    /// Everything measured so far ([`Sequence::stats`]).
    pub fn stats(&mut self) -> Stats {
        self.seq.stats()
    }

    /// Tokens in the sequence.
    pub fn len(&self) -> usize {
        self.seq.len()
    }

    /// Whether the sequence has no token.
    pub fn is_empty(&self) -> bool {
        self.seq.is_empty()
    }
}
