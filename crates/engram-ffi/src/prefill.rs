//! The prefill handle. The prefill itself lives inside its sequence (see
//! `seq.rs`); the handle names it, so a wait on an ended prefill finds no
//! live handle and is refused, never served from freed rings.

use std::ffi::c_void;
use std::sync::Arc;

use engram::open::SharedSequence;

use crate::handles::{self, call_filling, call_making, call_on};
use crate::ptr::{slice_out, write_out};
use crate::rows::{engram_rows, write_written};
use crate::seq::{engram_seq, tokens_in};
use crate::status::{call, engram_status};

/// A prefill in progress on a sequence (opaque).
#[allow(non_camel_case_types)]
pub struct engram_prefill {
    _opaque: [u8; 0],
}

/// The prefill handle's object: the name of the prefill that lives inside
/// its sequence.
pub(crate) struct PrefillObj {
    handle: usize,
    seq: Arc<SharedSequence>,
}

/// Appends `tokens[0..n]` to the sequence and starts reading their rows
/// ahead of the waits. `mask` may be NULL (every token real); otherwise
/// `mask[i] != 0` marks token `i` real and `mask[i] == 0` dead (padding), so
/// a Hugging Face `attention_mask` (as uint8) passes straight through. On success `*pf` is the prefill's handle (NULL on
/// failure); until `engram_prefill_end`, the sequence refuses decode steps
/// and other prefills with `ENGRAM_STATE`. A token outside the vocabulary
/// is `ENGRAM_INVALID_ARGUMENT` and leaves the sequence unchanged.
///
/// # Safety
/// `tokens` and `mask` are NULL or point at `n` readable values; `pf` is
/// NULL or points at a writable `engram_prefill *`.
#[no_mangle]
pub unsafe extern "C" fn engram_prefill_begin(
    seq: *mut engram_seq,
    tokens: *const u32,
    n: usize,
    mask: *const u8,
    pf: *mut *mut engram_prefill,
) -> engram_status {
    let make = |obj: Arc<SharedSequence>| {
        // SAFETY: forwarded from the caller's contract.
        let (tokens, mask) = unsafe { tokens_in(tokens, n, mask) }?;
        let mut state = obj.lock()?;
        let handle = handles::fresh();
        state.begin_prefill(handle, tokens, mask.as_deref())?;
        // Registered before the sequence's lock is released: an
        // `engram_seq_free` racing this call takes the lock after it and
        // so finds (and ends) the handle; registered after, the handle
        // would outlive the prefill the free ended.
        let pf_obj = Arc::new(PrefillObj {
            handle,
            seq: obj.clone(),
        });
        // SAFETY: forwarded from the caller's contract.
        let given = unsafe { handles::hand_out(pf, "pf", handle, pf_obj) };
        drop(state);
        given
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_making("engram_prefill_begin", seq, pf, "pf", make) }
}

/// Tokens in the prefill and the most one wait may cover (either out
/// pointer may be NULL).
///
/// # Safety
/// `tokens` and `max_wait_tokens` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn engram_prefill_info(
    pf: *mut engram_prefill,
    tokens: *mut u32,
    max_wait_tokens: *mut u32,
) -> engram_status {
    call_on("engram_prefill_info", pf, |obj| {
        let (n, max) = obj.seq.with_prefill(obj.handle, |live| {
            Ok((live.tokens(), live.max_wait_tokens()))
        })?;
        if !tokens.is_null() {
            // SAFETY: forwarded from the caller's contract.
            unsafe { write_out(tokens, "tokens", n) }?;
        }
        if !max_wait_tokens.is_null() {
            // SAFETY: forwarded from the caller's contract.
            unsafe { write_out(max_wait_tokens, "max_wait_tokens", max) }?;
        }
        Ok(())
    })
}

/// Blocks until the rows of prompt tokens `[0, upto)` of `table` are read
/// and describes those of `[previous upto, upto)` in `*rows` (engine
/// memory, valid until the next wait on this table, or the prefill's end).
/// Waits on one table advance: `upto` never goes back, and one wait covers
/// at most `max_wait_tokens` (see `engram_prefill_info`). Call right before
/// the table's layer. Ends with the rows, an I/O error naming table, row
/// and offset, or `ENGRAM_CANCELLED`.
///
/// # Safety
/// `rows` is NULL or points at a writable `engram_rows`.
#[no_mangle]
pub unsafe extern "C" fn engram_prefill_wait(
    pf: *mut engram_prefill,
    table: u32,
    upto: u32,
    rows: *mut engram_rows,
) -> engram_status {
    let wait = |obj: Arc<PrefillObj>| {
        let (table, handle) = (table as usize, obj.handle);
        Ok(obj
            .seq
            .prefill_wait(handle, table, upto, engram_rows::from_view)?)
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_filling("engram_prefill_wait", pf, rows, "rows", wait) }
}

/// `engram_prefill_wait`, copying the rows into `out` (e.g. a Metal shared
/// buffer's contents or pinned host memory), token-major and contiguous.
/// `ENGRAM_BUFFER_TOO_SMALL` (before waiting; nothing is consumed) if
/// `out_len` is smaller than the rows. `*written` (if not NULL) gets the
/// bytes written.
///
/// # Safety
/// `out` is NULL or points at `out_len` writable bytes; `written` is NULL
/// or writable.
#[no_mangle]
pub unsafe extern "C" fn engram_prefill_wait_into(
    pf: *mut engram_prefill,
    table: u32,
    upto: u32,
    out: *mut c_void,
    out_len: usize,
    written: *mut usize,
) -> engram_status {
    call_on("engram_prefill_wait_into", pf, |obj| {
        obj.seq.rows_bytes(table as usize, 0)?;
        // SAFETY: forwarded from the caller's contract.
        let out = unsafe { slice_out(out.cast::<u8>(), out_len, "out") }?;
        let n = obj
            .seq
            .prefill_wait_into(obj.handle, table as usize, upto, out)?;
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_written(written, n) }
    })
}

/// Hands back the rows the last `engram_prefill_wait` on `table` described
/// before the next wait on it: they become invalid, and the readers may
/// refill their slots at once. A host that copies its rows out (to the GPU,
/// say) and waits as wide as `max_wait_tokens` calls it after the copy, so
/// the next rows are read while it works; otherwise a wait's rows are held,
/// and the ring with them, until the next wait. `engram_prefill_wait_into`
/// does this itself. Releasing twice, or before any wait, does nothing.
///
/// # Safety
/// None: the handle is looked up, not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn engram_prefill_release(
    pf: *mut engram_prefill,
    table: u32,
) -> engram_status {
    call_on("engram_prefill_release", pf, |obj| {
        Ok(obj.seq.prefill_release(obj.handle, table as usize)?)
    })
}

/// Ends a prefill: cancels reads still pending, joins the readers, frees the
/// rings (rows from its waits become invalid) and lets the sequence step.
/// NULL is accepted and does nothing; a prefill already ended (or ended by
/// `engram_seq_free`) is refused with `ENGRAM_INVALID_HANDLE`.
///
/// # Safety
/// None: the handle is looked up, not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn engram_prefill_end(pf: *mut engram_prefill) -> engram_status {
    call("engram_prefill_end", || {
        let Some(obj) = handles::take::<PrefillObj, _>(pf)? else {
            return Ok(());
        };
        // Cancels and joins the readers, unless the prefill already ended.
        obj.seq.lock()?.end_prefill(obj.handle);
        Ok(())
    })
}
