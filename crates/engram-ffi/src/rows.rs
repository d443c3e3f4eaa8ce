//! `engram_rows`: a wait's rows, pointing into the engine's buffers; and
//! what the `_into` variants (which copy into a caller's buffer) report.

use std::ffi::c_void;

use engram::prefetch::RowsView;

use crate::options::{ENGRAM_FORMAT_F32, ENGRAM_FORMAT_RAW};
use crate::ptr::write_out;
use crate::status::{engram_status, FfiError, FfiResult};

/// Rows of consecutive tokens of one table, in the engine's buffers:
/// token-major, per token `rows_per_token` rows of `row_bytes` bytes, in at
/// most two contiguous parts (`data[1]` is non-empty only where a prefill
/// ring wrapped). Valid until the next wait on the same table of the same
/// prefill, the prefill's end, or (decode) the next `engram_step_begin` or
/// the sequence's free; read-only.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct engram_rows {
    /// The parts, in token order (`data[1]` NULL when `bytes[1]` is 0).
    pub data: [*const c_void; 2],
    /// Bytes in each part.
    pub bytes: [usize; 2],
    /// Index in the sequence's prefill (prefill) or the sequence (decode)
    /// of the first token.
    pub first_token: u32,
    /// Tokens covered.
    pub n_tokens: u32,
    /// Rows per token.
    pub rows_per_token: u32,
    /// Bytes per row.
    pub row_bytes: u32,
    /// `ENGRAM_FORMAT_RAW` or `ENGRAM_FORMAT_F32` (native-endian floats).
    pub format: u32,
}

impl engram_rows {
    /// Describes `view`; the pointers stay valid as long as its memory
    /// does (see the type's docs).
    pub(crate) fn from_view(view: &RowsView<'_>) -> engram_rows {
        let (a, b) = view.parts();
        let ptr = |part: &[u8]| {
            if part.is_empty() {
                std::ptr::null()
            } else {
                part.as_ptr().cast::<c_void>()
            }
        };
        engram_rows {
            data: [ptr(a), ptr(b)],
            bytes: [a.len(), b.len()],
            first_token: view.first_token(),
            n_tokens: view.len() as u32,
            rows_per_token: view.rows_per_token() as u32,
            row_bytes: view.row_bytes() as u32,
            format: if view.is_f32() {
                ENGRAM_FORMAT_F32
            } else {
                ENGRAM_FORMAT_RAW
            },
        }
    }
}

/// The error for an `_into` buffer smaller than `need` bytes.
pub(crate) fn too_small(have: usize, need: usize) -> FfiError {
    FfiError::new(
        engram_status::ENGRAM_BUFFER_TOO_SMALL,
        format!("out_len is {have} bytes; the rows need {need} (nothing was consumed)"),
    )
}

/// Reports the bytes an `_into` call wrote through `*written`.
///
/// # Safety
/// `written` is NULL (not wanted) or writable.
pub(crate) unsafe fn write_written(written: *mut usize, n: usize) -> FfiResult {
    if !written.is_null() {
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(written, "written", n) }?;
    }
    Ok(())
}
