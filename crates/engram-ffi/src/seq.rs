//! The sequence handle: tokens, decode steps, hints, per-sequence stats. A
//! sequence owns its live prefill (at most one), so the two share one lock
//! and a prefill can never outlive the rules its sequence enforces.

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

use engram::prefetch::Sequence;
use engram::stats::{Stats, Summary};

use crate::engine::{engram_engine, EngineObj};
use crate::handles::{self, call_filling, call_making, call_on};
use crate::prefill::PrefillObj;
use crate::ptr::{slice_in, slice_out};
use crate::rows::{copy_into, engram_rows, too_small};
use crate::status::{call, engram_status, FfiError, FfiResult};
use crate::text::call_json;
use engram::open::{PrefillSlot, SeqRegistry};

/// One sequence of tokens on an engine (opaque). Calls on one sequence and
/// its prefill are serialized (one runs at a time, the others wait); use
/// one thread per sequence for overlap.
#[allow(non_camel_case_types)]
pub struct engram_seq {
    _opaque: [u8; 0],
}

/// `engram_seq_stall` phase: prompt processing.
pub const ENGRAM_PHASE_PREFILL: u32 = 0;
/// `engram_seq_stall` phase: decode steps.
pub const ENGRAM_PHASE_DECODE: u32 = 1;

/// Stall of one phase of a sequence: the wall time its consumer spent
/// blocked in waits, per token summed over the tables.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct engram_stall {
    /// Tokens with a stall sample.
    pub tokens: u64,
    /// Waits made (all tables).
    pub waits: u64,
    /// Total time blocked in those waits, all tables, microseconds.
    pub total_us: f64,
    /// Mean stall per token, microseconds.
    pub mean_us: f64,
    /// Median stall per token.
    pub p50_us: f64,
    /// 99th percentile stall per token.
    pub p99_us: f64,
    /// Largest stall of one token.
    pub max_us: f64,
}

pub(crate) struct SeqInner {
    /// The live prefill, named by its handle. Declared before `seq`: ends
    /// (cancels and joins) before it drops.
    pub prefill: PrefillSlot<usize>,
    pub seq: Sequence,
    /// `engram_seq_free` ran: a call that took its share of the sequence
    /// before the free but its lock after it is refused, so nothing (a
    /// prefill handle above all) is started on a freed sequence.
    freed: bool,
}

pub(crate) struct SeqObj {
    pub handle: usize,
    /// Per table: bytes of one delivered row.
    pub row_bytes: Vec<usize>,
    pub rows_per_token: usize,
    registry: Arc<SeqRegistry>,
    inner: Mutex<SeqInner>,
}

impl SeqObj {
    /// The sequence's state; `ENGRAM_PANIC` if an earlier call panicked
    /// while holding it (its state may be half-updated),
    /// `ENGRAM_INVALID_HANDLE` once it was freed.
    pub fn lock(&self) -> FfiResult<MutexGuard<'_, SeqInner>> {
        let inner = self.lock_even_freed()?;
        if inner.freed {
            return Err(FfiError::new(
                engram_status::ENGRAM_INVALID_HANDLE,
                format!(
                    "engram_seq handle {:#x} was freed (by engram_seq_free on another thread) before this call got to it",
                    self.handle
                ),
            ));
        }
        Ok(inner)
    }

    fn lock_even_freed(&self) -> FfiResult<MutexGuard<'_, SeqInner>> {
        self.inner.lock().map_err(|_| {
            FfiError::new(
                engram_status::ENGRAM_PANIC,
                "the sequence is unusable after an internal error (panic) in an earlier call; free it",
            )
        })
    }

    /// Checks `table` and returns the bytes of `tokens` tokens of its rows.
    pub fn rows_bytes(&self, table: u32, tokens: u32) -> FfiResult<usize> {
        let row_bytes = self.row_bytes.get(table as usize).ok_or_else(|| {
            FfiError::invalid(format!(
                "table {table} out of range (the model has {})",
                self.row_bytes.len()
            ))
        })?;
        Ok(tokens as usize * self.rows_per_token * row_bytes)
    }
}

impl SeqInner {
    fn no_prefill(&self, what: &str) -> FfiResult {
        match self.prefill.live() {
            Some(handle) => Err(FfiError::state(format!(
                "{what} while prefill {handle:#x} is live on this sequence: call engram_prefill_end first"
            ))),
            None => Ok(()),
        }
    }
}

/// The `tokens[0..n]` and `mask` arguments of `engram_prefill_begin` and
/// `engram_seq_row_ids`. The mask from C bytes: nonzero marks a real
/// token, 0 a dead one (padding), as a Hugging Face `attention_mask` does;
/// NULL: every token real.
///
/// # Safety
/// `tokens` and `mask` are NULL or point at `n` readable values.
pub(crate) unsafe fn tokens_in<'a>(
    tokens: *const u32,
    n: usize,
    mask: *const u8,
) -> FfiResult<(&'a [u32], Option<Vec<bool>>)> {
    // SAFETY: forwarded from the caller's contract.
    let tokens = unsafe { slice_in(tokens, n, "tokens") }?;
    if mask.is_null() {
        return Ok((tokens, None));
    }
    // SAFETY: forwarded from the caller's contract.
    let bytes = unsafe { slice_in(mask, n, "mask") }?;
    Ok((tokens, Some(bytes.iter().map(|&b| b != 0).collect())))
}

/// Creates an empty sequence on `engine`; `*seq` is the new handle (NULL on
/// failure).
///
/// # Safety
/// `seq` is NULL or points at a writable `engram_seq *`.
#[no_mangle]
pub unsafe extern "C" fn engram_seq_new(
    engine: *mut engram_engine,
    seq: *mut *mut engram_seq,
) -> engram_status {
    let make = |obj: Arc<EngineObj>| {
        let sequence = obj.engine.sequence();
        let format = obj.engine.config().format;
        let handle = handles::fresh();
        obj.seqs.opened(handle, sequence.stats_recorder());
        let new = Arc::new(SeqObj {
            handle,
            row_bytes: (0..sequence.tables())
                .map(|t| obj.row_bytes(t, format))
                .collect(),
            rows_per_token: sequence.rows_per_token(),
            registry: obj.seqs.clone(),
            inner: Mutex::new(SeqInner {
                prefill: PrefillSlot::default(),
                seq: sequence,
                freed: false,
            }),
        });
        // SAFETY: forwarded from the caller's contract.
        unsafe { handles::hand_out(seq, "seq", handle, new) }
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_making("engram_seq_new", engine, seq, "seq", make) }
}

/// Frees a sequence. NULL is accepted and does nothing; a handle already
/// freed is refused with `ENGRAM_INVALID_HANDLE`. A prefill still live on
/// the sequence is ended first (its handle becomes invalid). Pending reads
/// are cancelled and joined before the buffers go; the sequence's final
/// stats stay in the engine's `engram_stats_json`.
///
/// # Safety
/// None: the handle is looked up, not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn engram_seq_free(seq: *mut engram_seq) -> engram_status {
    call("engram_seq_free", || {
        let Some(obj) = handles::take::<SeqObj, _>(seq)? else {
            return Ok(());
        };
        let stats = match obj.lock_even_freed() {
            Ok(mut inner) => {
                // Under the lock: a prefill_begin that already holds a
                // share of the sequence either ran before (its prefill is
                // ended here) or finds it freed.
                inner.freed = true;
                if let Some((handle, prefill)) = inner.prefill.take() {
                    let _ = handles::remove::<PrefillObj>(handle);
                    drop(prefill); // cancels and joins its readers
                }
                inner.seq.stats()
            }
            Err(_) => Stats::default(), // poisoned: the stats may be torn
        };
        obj.registry.freed(obj.handle, stats);
        Ok(())
    })
}

/// Writes the row ids that `tokens[0..n]` (mask as in
/// `engram_prefill_begin`, may be NULL) would get appended to the sequence
/// now, without appending them: `ids[(token * tables + table) *
/// rows_per_token + column]`. `ids_len` (in ids) must be at least `n *
/// tables * rows_per_token`. For checks against `engram_rows_read`.
///
/// # Safety
/// `tokens` and `mask` are NULL or point at `n` readable values; `ids` is
/// NULL or points at `ids_len` writable ids.
#[no_mangle]
pub unsafe extern "C" fn engram_seq_row_ids(
    seq: *mut engram_seq,
    tokens: *const u32,
    n: usize,
    mask: *const u8,
    ids: *mut u32,
    ids_len: usize,
) -> engram_status {
    call_on("engram_seq_row_ids", seq, |obj| {
        // SAFETY: forwarded from the caller's contract.
        let (tokens, mask) = unsafe { tokens_in(tokens, n, mask) }?;
        let row_ids = obj.lock()?.seq.row_ids(tokens, mask.as_deref())?;
        if ids_len < row_ids.len() {
            return Err(FfiError::new(
                engram_status::ENGRAM_BUFFER_TOO_SMALL,
                format!(
                    "ids_len is {ids_len}; the tokens have {} row ids",
                    row_ids.len()
                ),
            ));
        }
        // SAFETY: forwarded from the caller's contract.
        let out = unsafe { slice_out(ids, ids_len, "ids") }?;
        out[..row_ids.len()].copy_from_slice(&row_ids);
        Ok(())
    })
}

/// Appends `token` and issues both tables' reads of its rows without
/// blocking (it blocks only while the previous step's reads still run).
/// Call as soon as the token is sampled. Invalidates the rows of the
/// previous step. `ENGRAM_STATE` while a prefill is live;
/// `ENGRAM_INVALID_ARGUMENT` for a token outside the vocabulary (the
/// sequence is then unchanged).
///
/// # Safety
/// None: the handle is looked up, not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn engram_step_begin(seq: *mut engram_seq, token: u32) -> engram_status {
    call_on("engram_step_begin", seq, |obj| {
        let mut inner = obj.lock()?;
        inner.no_prefill("engram_step_begin")?;
        inner.seq.step_begin(token)?;
        Ok(())
    })
}

/// Blocks until the current step's rows of `table` are read and describes
/// them in `*rows` (engine memory, valid until the next
/// `engram_step_begin` or the sequence's free). Call right before the
/// table's layer.
///
/// # Safety
/// `rows` is NULL or points at a writable `engram_rows`.
#[no_mangle]
pub unsafe extern "C" fn engram_step_wait(
    seq: *mut engram_seq,
    table: u32,
    rows: *mut engram_rows,
) -> engram_status {
    let wait = |obj: Arc<SeqObj>| {
        obj.rows_bytes(table, 1)?;
        let mut inner = obj.lock()?;
        let view = inner.seq.step_wait(table as usize)?;
        Ok(engram_rows::from_view(&view))
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_filling("engram_step_wait", seq, rows, "rows", wait) }
}

/// `engram_step_wait`, copying the rows into `out` (e.g. a Metal shared
/// buffer's contents or pinned host memory): `rows_per_token * row_bytes`
/// bytes. `ENGRAM_BUFFER_TOO_SMALL` (before waiting) if `out_len` is
/// smaller. `*written` (if not NULL) gets the bytes written.
///
/// # Safety
/// `out` is NULL or points at `out_len` writable bytes; `written` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn engram_step_wait_into(
    seq: *mut engram_seq,
    table: u32,
    out: *mut c_void,
    out_len: usize,
    written: *mut usize,
) -> engram_status {
    call_on("engram_step_wait_into", seq, |obj| {
        let need = obj.rows_bytes(table, 1)?;
        if out_len < need {
            return Err(too_small(out_len, need));
        }
        // SAFETY: forwarded from the caller's contract.
        let out = unsafe { slice_out(out.cast::<u8>(), out_len, "out") }?;
        let mut inner = obj.lock()?;
        let view = inner.seq.step_wait(table as usize)?;
        // SAFETY: forwarded from the caller's contract.
        unsafe { copy_into(&view, out, written) }
    })
}

/// Reads, at low priority into the row cache, the rows of a draft chain:
/// `tokens[i]` guesses the token `i + 1` positions after the sequence's
/// last one, hashed after `tokens[0..i]` (as a multi-token-prediction head
/// drafts; `engram_hint_ex` adds probabilities and alternatives). At most
/// 16 tokens. Nothing waits on hints; useful only with a row cache. A step
/// that begins drops the hints it makes stale.
///
/// # Safety
/// `tokens` is NULL or points at `n` readable ids.
#[no_mangle]
pub unsafe extern "C" fn engram_hint(
    seq: *mut engram_seq,
    tokens: *const u32,
    n: usize,
) -> engram_status {
    call_on("engram_hint", seq, |obj| {
        // SAFETY: forwarded from the caller's contract.
        let tokens = unsafe { slice_in(tokens, n, "tokens") }?;
        obj.lock()?.seq.hint(tokens)?;
        Ok(())
    })
}

/// What `engram_hint_ex` reads: a draft chain and alternatives of the next
/// token, with probabilities. A pointer may be NULL when its count is 0.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct engram_hints {
    /// The draft chain: `draft[i]` guesses the token `i + 1` positions
    /// after the sequence's last one (at most 16).
    pub draft: *const u32,
    /// Tokens in `draft`.
    pub n_draft: usize,
    /// Per draft token, its probability given the chain before it, in
    /// [0, 1]; NULL and 0 for 1 each, else `n_draft` of them.
    pub draft_probs: *const f32,
    /// Values in `draft_probs` (0 or `n_draft`).
    pub n_draft_probs: usize,
    /// Other guesses of the next token (a top-k; at most 32).
    pub alternatives: *const u32,
    /// Tokens in `alternatives`.
    pub n_alternatives: usize,
    /// Per alternative, its probability in [0, 1].
    pub alternative_probs: *const f32,
    /// Values in `alternative_probs` (`n_alternatives`).
    pub n_alternative_probs: usize,
}

/// Reads, at low priority into the row cache, the rows of `hints`: the
/// draft chain's tokens (each needed with the product of the chain's
/// probabilities up to it) and the alternatives (each needed with its own
/// probability), likeliest first. A token given twice for one position is
/// read once. A step that begins drops the hints it makes stale (those of
/// its position, and those after a guess of it that was wrong); a rollback
/// or a prefill drops them all. The stats JSON counts each kind's hinted
/// rows read, used and dropped (`hint_use`).
///
/// `ENGRAM_INVALID_ARGUMENT`, naming the field, for more than 16 draft
/// tokens or 32 alternatives, probability counts that do not match, a
/// probability outside [0, 1] or NaN, or a token outside the vocabulary;
/// nothing is read then.
///
/// # Safety
/// `hints` is NULL or points at a readable `engram_hints` whose non-NULL
/// pointers point at as many readable values as their counts say.
#[no_mangle]
pub unsafe extern "C" fn engram_hint_ex(
    seq: *mut engram_seq,
    hints: *const engram_hints,
) -> engram_status {
    call_on("engram_hint_ex", seq, |obj| {
        // SAFETY: forwarded from the caller's contract (checked for NULL).
        let h = unsafe { slice_in(hints, 1, "hints") }?[0];
        // SAFETY: forwarded from the caller's contract.
        let draft = unsafe { slice_in(h.draft, h.n_draft, "hints.draft") }?;
        // SAFETY: forwarded from the caller's contract.
        let draft_probs = unsafe { slice_in(h.draft_probs, h.n_draft_probs, "hints.draft_probs") }?;
        // SAFETY: forwarded from the caller's contract.
        let alternatives =
            unsafe { slice_in(h.alternatives, h.n_alternatives, "hints.alternatives") }?;
        // SAFETY: forwarded from the caller's contract.
        let alternative_probs = unsafe {
            slice_in(
                h.alternative_probs,
                h.n_alternative_probs,
                "hints.alternative_probs",
            )
        }?;
        let hints = engram::Hints::draft(draft)
            .with_draft_probs(draft_probs)
            .with_alternatives(alternatives, alternative_probs);
        obj.lock()?.seq.hint(hints)?;
        Ok(())
    })
}

/// Sets `*json` to a JSON document of this sequence's stats (prefill,
/// decode, hints; per table: waits, stall per token, rows, reads, bytes,
/// latencies). Free it with `engram_string_free`.
///
/// # Safety
/// `json` is NULL or points at a writable `char *`.
#[no_mangle]
pub unsafe extern "C" fn engram_seq_stats_json(
    seq: *mut engram_seq,
    json: *mut *mut c_char,
) -> engram_status {
    let document = |obj: &SeqObj| {
        let stats = obj.lock()?.seq.stats();
        Ok(stats.to_json())
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_json("engram_seq_stats_json", seq, json, document) }
}

/// Fills `*stall` with the stall of `phase` (`ENGRAM_PHASE_PREFILL` or
/// `ENGRAM_PHASE_DECODE`) of the sequence so far.
///
/// # Safety
/// `stall` is NULL or points at a writable `engram_stall`.
#[no_mangle]
pub unsafe extern "C" fn engram_seq_stall(
    seq: *mut engram_seq,
    phase: u32,
    stall: *mut engram_stall,
) -> engram_status {
    let summary = |obj: Arc<SeqObj>| {
        let stats = obj.lock()?.seq.stats();
        let phase = match phase {
            ENGRAM_PHASE_PREFILL => &stats.prefill,
            ENGRAM_PHASE_DECODE => &stats.decode,
            p => {
                return Err(FfiError::invalid(format!(
                    "phase {p} is not ENGRAM_PHASE_PREFILL (0) or ENGRAM_PHASE_DECODE (1)"
                )))
            }
        };
        let per_token: &Summary = &phase.stall_per_token_total;
        Ok(engram_stall {
            tokens: per_token.count,
            waits: phase.tables.iter().map(|t| t.waits).sum(),
            total_us: phase.tables.iter().map(|t| t.stall_total_us).sum(),
            mean_us: per_token.mean_us,
            p50_us: per_token.p50_us,
            p99_us: per_token.p99_us,
            max_us: per_token.max_us,
        })
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_filling("engram_seq_stall", seq, stall, "stall", summary) }
}
