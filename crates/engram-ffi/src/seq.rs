//! The sequence handle: tokens, decode steps, hints, per-sequence stats.
//! It names the core's [`SharedSequence`]: the sequence and its live
//! prefill (at most one) behind one lock, with the rules the Python package
//! enforces too, so a prefill can never outlive them; this file converts
//! the C arguments and results.
use std::ffi::{c_char, c_void};
use std::sync::Arc;

use engram::open::SharedSequence;
use engram::stats::Summary;

use crate::engine::{engram_engine, EngineObj};
use crate::handles::{self, call_filling, call_making, call_on};
use crate::prefill::PrefillObj;
use crate::ptr::{slice_in, slice_out};
use crate::rows::{engram_rows, too_small, write_written};
use crate::status::{call, engram_status, FfiError, FfiResult};
use crate::text::call_json;

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
        let handle = handles::fresh();
        let new = Arc::new(SharedSequence::new(&obj.0, handle));
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
        let Some(obj) = handles::take::<SharedSequence, _>(seq)? else {
            return Ok(());
        };
        // Under the sequence's lock: a prefill_begin that already holds a
        // share of the sequence either ran before (its prefill is ended
        // here, its handle forgotten) or finds it closed.
        obj.close(|prefill| {
            let _ = handles::remove::<PrefillObj>(prefill);
        });
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
        let row_ids = obj.lock()?.row_ids(tokens, mask.as_deref())?;
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
        Ok(obj.lock()?.step_begin(token)?)
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
    let wait =
        |obj: Arc<SharedSequence>| Ok(obj.step_wait(table as usize, engram_rows::from_view)?);
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
        let need = obj.rows_bytes(table as usize, 1)?;
        // Before the pointer is checked: a short buffer is the status a
        // caller sizing it needs, whatever the pointer.
        if out_len < need {
            return Err(too_small(out_len, need));
        }
        // SAFETY: forwarded from the caller's contract.
        let out = unsafe { slice_out(out.cast::<u8>(), out_len, "out") }?;
        let n = obj.step_wait_into(table as usize, out)?;
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_written(written, n) }
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
        Ok(obj.lock()?.hint(tokens)?)
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
        Ok(obj.lock()?.hint(hints)?)
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
    let document = |obj: &SharedSequence| {
        let stats = obj.lock()?.stats();
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
    let summary = |obj: Arc<SharedSequence>| {
        let stats = obj.lock()?.stats();
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
