//! Opaque handles that are never dereferenced.
//!
//! A handle the C caller holds is a number (dressed as a pointer to an
//! incomplete struct) that keys a process-wide table of live objects. Every
//! call looks its handle up in the table and takes a share (`Arc`) of the
//! object for the call's duration, so:
//!
//! - a freed, ended, foreign or wrong-kind handle is reported
//!   (`ENGRAM_INVALID_HANDLE`), never dereferenced: double frees and
//!   use-after-free are detected, not undefined;
//! - a free racing a call on another thread removes the handle at once but
//!   the object lives until that call returns;
//! - handle values are never reused within a process (a 64-bit counter), so
//!   a stale handle cannot name a newer object.
//!
//! The table's lock is held only for the lookup, never across a wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::engine::{engram_engine, EngineObj};
use crate::prefill::{engram_prefill, PrefillObj};
use crate::ptr::{check_out, write_out};
use crate::seq::engram_seq;
use crate::status::{call, engram_status, FfiError, FfiResult};
use engram::open::SharedSequence;

/// A live object behind a handle.
#[derive(Clone)]
pub(crate) enum Object {
    Engine(Arc<EngineObj>),
    Seq(Arc<SharedSequence>),
    Prefill(Arc<PrefillObj>),
}

impl Object {
    fn kind(&self) -> &'static str {
        match self {
            Object::Engine(_) => "an engram_engine",
            Object::Seq(_) => "an engram_seq",
            Object::Prefill(_) => "an engram_prefill",
        }
    }
}

/// A kind of object handed out through a handle.
pub(crate) trait Kind: Sized {
    /// The C type name, for messages.
    const NAME: &'static str;
    fn wrap(obj: Arc<Self>) -> Object;
    fn unwrap(obj: &Object) -> Option<&Arc<Self>>;
}

/// A C handle type (`engram_seq`, ...): which kind of object it names, so
/// a lookup from a handle needs no type spelled out.
pub(crate) trait Handle {
    type Obj: Kind;
}

macro_rules! kind {
    ($handle:ident => $ty:ty, $variant:ident) => {
        impl Handle for $handle {
            type Obj = $ty;
        }

        impl Kind for $ty {
            const NAME: &'static str = stringify!($handle);
            fn wrap(obj: Arc<Self>) -> Object {
                Object::$variant(obj)
            }
            fn unwrap(obj: &Object) -> Option<&Arc<Self>> {
                match obj {
                    Object::$variant(o) => Some(o),
                    _ => None,
                }
            }
        }
    };
}

kind!(engram_engine => EngineObj, Engine);
kind!(engram_seq => SharedSequence, Seq);
kind!(engram_prefill => PrefillObj, Prefill);

fn table() -> MutexGuard<'static, HashMap<usize, Object>> {
    static TABLE: OnceLock<Mutex<HashMap<usize, Object>>> = OnceLock::new();
    // The table is consistent after every statement, so a poisoned lock
    // (a panic elsewhere while it was held) is safe to keep using.
    TABLE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A fresh handle value: never 0, never reused, 16-aligned so it looks like
/// a pointer to debuggers and sanitizers that print it.
pub(crate) fn fresh() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0x1000);
    NEXT.fetch_add(0x10, Ordering::Relaxed)
}

/// Sets the caller's out-handle to NULL, so it is NULL on every failure.
///
/// # Safety
/// `out` is NULL (reported) or points at a writable handle.
pub(crate) unsafe fn clear_out<T>(out: *mut *mut T, what: &str) -> FfiResult {
    // SAFETY: forwarded from the caller's contract.
    unsafe { write_out(out, what, std::ptr::null_mut()) }
}

/// Registers `obj` under `handle` and writes the handle to the caller's
/// out-handle (already checked by [`clear_out`]).
///
/// # Safety
/// `out` points at a writable handle.
pub(crate) unsafe fn hand_out<K: Kind, T>(
    out: *mut *mut T,
    what: &str,
    handle: usize,
    obj: Arc<K>,
) -> FfiResult {
    insert(handle, obj);
    // SAFETY: forwarded from the caller's contract.
    unsafe { write_out(out, what, std::ptr::without_provenance_mut(handle)) }
}

/// Registers `obj` under `handle` (from [`fresh`]; objects that name
/// their own handle take it before they are built).
pub(crate) fn insert<K: Kind>(handle: usize, obj: Arc<K>) {
    table().insert(handle, K::wrap(obj));
}

fn not_live(handle: usize, name: &str) -> FfiError {
    FfiError::new(
        engram_status::ENGRAM_INVALID_HANDLE,
        format!("{name} handle {handle:#x} is not live (already freed or ended, or never returned by this library)"),
    )
}

fn wrong_kind(handle: usize, name: &str, found: &Object) -> FfiError {
    FfiError::new(
        engram_status::ENGRAM_INVALID_HANDLE,
        format!("handle {handle:#x} is {}, not an {name}", found.kind()),
    )
}

/// A share of the live object behind `handle`.
fn get<K: Kind>(handle: usize) -> FfiResult<Arc<K>> {
    if handle == 0 {
        return Err(FfiError::new(
            engram_status::ENGRAM_NULL_POINTER,
            format!("the {} handle is NULL", K::NAME),
        ));
    }
    let table = table();
    let obj = table
        .get(&handle)
        .ok_or_else(|| not_live(handle, K::NAME))?;
    K::unwrap(obj)
        .cloned()
        .ok_or_else(|| wrong_kind(handle, K::NAME, obj))
}

/// A share of the live object behind the C handle `handle`.
pub(crate) fn of<H: Handle>(handle: *mut H) -> FfiResult<Arc<H::Obj>> {
    get(handle.addr())
}

/// Runs an entry point's body as [`call`] does, on a share of the live
/// object behind `handle`: the lookup every call on an existing object
/// starts with.
pub(crate) fn call_on<H: Handle>(
    name: &str,
    handle: *mut H,
    body: impl FnOnce(Arc<H::Obj>) -> FfiResult,
) -> engram_status {
    call(name, || body(of(handle)?))
}

/// Runs an entry point that fills the caller's `*out` with what `body`
/// makes from the live object behind `handle` (the lookup of
/// [`call_on`]): `out` is checked before the body runs, so a NULL is
/// reported before a wait consumes anything, and written only on success.
///
/// # Safety
/// `out` is NULL (reported) or points at a writable `T`.
pub(crate) unsafe fn call_filling<H: Handle, T>(
    name: &str,
    handle: *mut H,
    out: *mut T,
    what: &str,
    body: impl FnOnce(Arc<H::Obj>) -> FfiResult<T>,
) -> engram_status {
    call_on(name, handle, |obj| {
        check_out(out, what)?;
        let value = body(obj)?;
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(out, what, value) }
    })
}

/// Runs an entry point that makes an object on the live `parent` and hands
/// it out through `out` (with [`hand_out`]): `*out` is set to NULL first,
/// so it is NULL on every failure (a bad `parent` included), then the
/// lookup of [`call_on`].
///
/// # Safety
/// `out` is NULL (reported) or points at a writable handle.
pub(crate) unsafe fn call_making<H: Handle, T>(
    name: &str,
    parent: *mut H,
    out: *mut *mut T,
    what: &str,
    body: impl FnOnce(Arc<H::Obj>) -> FfiResult,
) -> engram_status {
    call(name, || {
        // SAFETY: forwarded from the caller's contract.
        unsafe { clear_out(out, what) }?;
        body(of(parent)?)
    })
}

/// The object of a handle being freed, removed from the table: `None` for
/// NULL (freeing NULL does nothing), an error for a handle not live or of
/// another kind.
pub(crate) fn take<K: Kind, H>(handle: *mut H) -> FfiResult<Option<Arc<K>>> {
    if handle.is_null() {
        return Ok(None);
    }
    remove(handle.addr()).map(Some)
}

/// Removes `handle` from the table and returns its object (the last share
/// drops it once calls in progress return).
pub(crate) fn remove<K: Kind>(handle: usize) -> FfiResult<Arc<K>> {
    let mut table = table();
    let obj = table
        .get(&handle)
        .ok_or_else(|| not_live(handle, K::NAME))?;
    let found = K::unwrap(obj)
        .cloned()
        .ok_or_else(|| wrong_kind(handle, K::NAME, obj))?;
    table.remove(&handle);
    Ok(found)
}
