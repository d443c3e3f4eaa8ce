//! Strings handed to the caller (JSON documents) and their one free
//! function. Live strings are tracked by address, so freeing one twice or
//! freeing a pointer this library did not return is reported, not
//! undefined.

use std::collections::HashSet;
use std::ffi::{c_char, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::handles::{call_filling, Handle};
use crate::status::{call, engram_status, FfiError, FfiResult};

fn live() -> MutexGuard<'static, HashSet<usize>> {
    static LIVE: OnceLock<Mutex<HashSet<usize>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `text` as a string the caller owns (freed with [`engram_string_free`]).
fn hand_over(text: String) -> FfiResult<*mut c_char> {
    let text = CString::new(text)
        .map_err(|_| FfiError::new(engram_status::ENGRAM_INTERNAL, "text holds a NUL byte"))?;
    let raw = text.into_raw();
    live().insert(raw as usize);
    Ok(raw)
}

/// Runs an entry point that hands the caller, through `json`, a JSON
/// document made from the live object behind `handle` (`json` is checked
/// before the document is made).
///
/// # Safety
/// `json` is NULL or points at a writable `char *`.
pub(crate) unsafe fn call_json<H: Handle>(
    name: &str,
    handle: *mut H,
    json: *mut *mut c_char,
    document: impl FnOnce(&H::Obj) -> FfiResult<String>,
) -> engram_status {
    let text = |obj: Arc<H::Obj>| hand_over(document(&obj)?);
    // SAFETY: forwarded from the caller's contract.
    unsafe { call_filling(name, handle, json, "json", text) }
}

/// Frees a string returned by this library (`engram_stats_json`, ...).
/// NULL is accepted and does nothing. A pointer that is not a live string
/// of this library (already freed, or never returned) is refused with
/// `ENGRAM_INVALID_HANDLE` and left alone; if the allocator has since
/// handed the same address out for a newer string, that one is freed, so
/// set your pointer to NULL after freeing.
///
/// # Safety
/// None beyond passing a pointer value: it is looked up, not dereferenced,
/// unless it is a live string of this library.
#[no_mangle]
pub unsafe extern "C" fn engram_string_free(text: *mut c_char) -> engram_status {
    call("engram_string_free", || {
        if text.is_null() {
            return Ok(());
        }
        if !live().remove(&(text as usize)) {
            return Err(FfiError::new(
                engram_status::ENGRAM_INVALID_HANDLE,
                format!("{text:p} is not a live string of this library (freed twice?)"),
            ));
        }
        // SAFETY: the address came from CString::into_raw in `hand_over` and was
        // live until the removal above, which only one caller can win.
        drop(unsafe { CString::from_raw(text) });
        Ok(())
    })
}
