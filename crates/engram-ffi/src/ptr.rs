//! Checked access to the caller's pointers: NULL and misalignment become
//! `ENGRAM_NULL_POINTER`, lengths are checked before any byte is touched.
//! What cannot be checked (that a non-NULL pointer points at `len` valid
//! bytes) is the caller's side of each function's contract.

use std::ffi::{c_char, CStr};

use crate::status::{engram_status, FfiError, FfiResult};

fn check<T>(p: *const T, what: &str) -> FfiResult {
    if p.is_null() {
        return Err(FfiError::new(
            engram_status::ENGRAM_NULL_POINTER,
            format!("{what} is NULL"),
        ));
    }
    if !p.is_aligned() {
        return Err(FfiError::new(
            engram_status::ENGRAM_NULL_POINTER,
            format!(
                "{what} ({p:p}) is not aligned to {} bytes",
                std::mem::align_of::<T>()
            ),
        ));
    }
    Ok(())
}

/// Writes `value` through the out-pointer `p`.
///
/// # Safety
/// `p`, if not NULL, points at writable memory for one `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, what: &str, value: T) -> FfiResult {
    check(p.cast_const(), what)?;
    // SAFETY: non-NULL and aligned (checked); writable per the caller.
    unsafe { p.write(value) };
    Ok(())
}

/// Checks an out-pointer before the work that fills it, so a NULL is
/// reported before anything is consumed.
pub(crate) fn check_out<T>(p: *mut T, what: &str) -> FfiResult {
    check(p.cast_const(), what)
}

/// The `n` values at `p` (`p` may be NULL when `n` is 0).
///
/// # Safety
/// `p`, if not NULL, points at `n` initialized values that stay unchanged
/// for the returned lifetime.
pub(crate) unsafe fn slice_in<'a, T>(p: *const T, n: usize, what: &str) -> FfiResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    check(p, what)?;
    byte_len::<T>(n, what)?;
    // SAFETY: non-NULL, aligned, size within isize (checked); valid per the
    // caller.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The caller's output buffer of `n` values (`p` may be NULL when `n` is
/// 0).
///
/// # Safety
/// `p`, if not NULL, points at `n` writable values not otherwise accessed
/// during the call.
pub(crate) unsafe fn slice_out<'a, T>(p: *mut T, n: usize, what: &str) -> FfiResult<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    check(p.cast_const(), what)?;
    byte_len::<T>(n, what)?;
    // SAFETY: non-NULL, aligned, size within isize (checked); writable per
    // the caller.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

fn byte_len<T>(n: usize, what: &str) -> FfiResult<usize> {
    n.checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| FfiError::invalid(format!("{what}: length {n} is too large")))
}

/// A NUL-terminated string argument.
///
/// # Safety
/// `p`, if not NULL, points at a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &str) -> FfiResult<&'a CStr> {
    check(p, what)?;
    // SAFETY: non-NULL; NUL-terminated per the caller.
    Ok(unsafe { CStr::from_ptr(p) })
}
