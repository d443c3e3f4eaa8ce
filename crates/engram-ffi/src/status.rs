//! Status codes, the thread-local last error, and the wrapper every entry
//! point runs its body in (no panic crosses the boundary).

use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Declares [`engram_status`] from one table: each status's name (the
/// variant, the C enumerator and what [`engram_status_name`] returns), its
/// value and its meaning (the variant's docs and, through
/// [`engram_status::meaning`], the header's comment: cbindgen does not see
/// into macros, so the header test writes this enum from the table).
macro_rules! statuses {
    (
        $(#[doc = $doc:literal])*
        enum engram_status;
        $($name:ident = $value:literal: $meaning:literal;)*
    ) => {
        $(#[doc = $doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum engram_status {
            $(#[doc = $meaning] $name = $value,)*
        }

        impl engram_status {
            /// Every status, by value.
            pub const ALL: &'static [engram_status] = &[$(engram_status::$name),*];

            /// The type's own docs, a line each (for the header).
            pub const DOC: &'static [&'static str] = &[$($doc),*];

            /// The status's name as C spells it (`ENGRAM_OK`).
            pub fn name(self) -> &'static CStr {
                match self {
                    $(engram_status::$name => const {
                        let bytes = concat!(stringify!($name), "\0").as_bytes();
                        match CStr::from_bytes_with_nul(bytes) {
                            Ok(name) => name,
                            Err(_) => panic!("a status name holds a NUL"),
                        }
                    },)*
                }
            }

            /// What the status means, as one line of text.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(engram_status::$name => $meaning,)*
                }
            }
        }
    };
}

statuses! {
    /// What a call returned. Every function of the C ABI returns one; on
    /// anything but `ENGRAM_OK`, `engram_last_error` tells what was wrong.
    enum engram_status;
    ENGRAM_OK = 0: "Success.";
    ENGRAM_INVALID_ARGUMENT = 1: "A value outside what the call accepts (a table index out of \
        range, a token outside the vocabulary, a bad option, a wait that goes back).";
    ENGRAM_NULL_POINTER = 2: "A required pointer was NULL, or misaligned for its type.";
    ENGRAM_INVALID_HANDLE = 3: "A handle that is not live: already freed or ended, never \
        returned by this library, or of another kind (a sequence passed as a prefill).";
    ENGRAM_STATE = 4: "The call is not allowed in the object's current state (a decode step or \
        a second prefill while a prefill is live).";
    ENGRAM_BUFFER_TOO_SMALL = 5: "The caller's output buffer is smaller than the rows to write; \
        nothing was consumed, the call can be repeated with a larger buffer.";
    ENGRAM_IO = 6: "An operating-system I/O error (opening the model, reading a row).";
    ENGRAM_FORMAT = 7: "A malformed model file, layout or tokenizer.";
    ENGRAM_CORRUPT_ROW = 8: "A row whose bytes do not decode (f32 output only).";
    ENGRAM_CANCELLED = 9: "The prefill, sequence or engine was ended while the call waited.";
    ENGRAM_PANIC = 10: "A bug in the library: a panic was caught at the boundary or in a reader \
        task. The object it happened on may refuse further calls with this status.";
    ENGRAM_INTERNAL = 11: "An error of a kind this version does not classify.";
}

use engram_status::*;

/// An error on its way to the C caller: a status and the message
/// [`engram_last_error`] will return.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub status: engram_status,
    pub message: String,
}

/// Shorthand for the result of an entry point's body.
pub(crate) type FfiResult<T = ()> = Result<T, FfiError>;

impl FfiError {
    pub fn new(status: engram_status, message: impl Into<String>) -> FfiError {
        FfiError {
            status,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> FfiError {
        FfiError::new(ENGRAM_INVALID_ARGUMENT, message)
    }

    pub fn state(message: impl Into<String>) -> FfiError {
        FfiError::new(ENGRAM_STATE, message)
    }
}

impl From<engram::Error> for FfiError {
    fn from(e: engram::Error) -> FfiError {
        use engram::ErrorKind as K;
        // The kind is matched exhaustively: a new kind does not compile
        // until it is given a status here.
        let status = match e.kind() {
            K::Io | K::RowRead => ENGRAM_IO,
            K::Format | K::Layout | K::Tokenizer => ENGRAM_FORMAT,
            K::CorruptRow => ENGRAM_CORRUPT_ROW,
            K::InvalidArgument => ENGRAM_INVALID_ARGUMENT,
            K::Cancelled => ENGRAM_CANCELLED,
            // A reader task panicked: the same bug class as a panic caught
            // at the boundary.
            K::Internal => ENGRAM_PANIC,
        };
        FfiError::new(status, e.to_string())
    }
}

impl From<engram::SeqError> for FfiError {
    fn from(e: engram::SeqError) -> FfiError {
        use engram::{SeqCall, SeqError as E};
        // Exhaustive: a new refusal does not compile until it is given a
        // status and C's wording (how a C caller ends a prefill) here.
        match e {
            E::Engine(e) => e.into(),
            E::Poisoned => FfiError::new(
                ENGRAM_PANIC,
                "the sequence is unusable after an internal error (panic) in an earlier call; free it",
            ),
            E::Closed { id } => FfiError::new(
                ENGRAM_INVALID_HANDLE,
                format!(
                    "engram_seq handle {id:#x} was freed (by engram_seq_free on another thread) before this call got to it"
                ),
            ),
            E::PrefillLive { call, live } => {
                let what = match call {
                    SeqCall::Prefill => {
                        return FfiError::state(format!(
                            "prefill {live:#x} is still live on this sequence: call engram_prefill_end first"
                        ))
                    }
                    SeqCall::StepBegin => "engram_step_begin",
                    // The C ABI has no rollback; named for completeness.
                    SeqCall::Rollback => "rollback",
                };
                FfiError::state(format!(
                    "{what} while prefill {live:#x} is live on this sequence: call engram_prefill_end first"
                ))
            }
            E::PrefillEnded { id } => FfiError::state(format!("prefill {id:#x} has ended")),
            e @ E::TableOutOfRange { .. } => FfiError::invalid(e.to_string()),
            E::BufferTooSmall { have, need } => crate::rows::too_small(have, need),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: String) {
    // A message with a NUL inside would be cut short in C: blank the NULs.
    let bytes: Vec<u8> = message
        .into_bytes()
        .into_iter()
        .map(|b| if b == 0 { b' ' } else { b })
        .collect();
    let text = CString::new(bytes).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; the status
    // still reaches the caller.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
}

/// Runs an entry point's body: catches panics, sets the thread's last error
/// (empty on success) and turns the outcome into a status.
pub(crate) fn call(name: &str, body: impl FnOnce() -> FfiResult) -> engram_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => {
            set_last_error(String::new());
            ENGRAM_OK
        }
        Ok(Err(e)) => {
            set_last_error(format!("{name}: {}", e.message));
            e.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            set_last_error(format!("{name}: internal error (panic): {what}"));
            ENGRAM_PANIC
        }
    }
}

/// The message of the last call on this thread that failed, or an empty
/// string if the last call succeeded. Never NULL. The text stays valid
/// until the next call into the library on the same thread; copy it to
/// keep it.
#[no_mangle]
pub extern "C" fn engram_last_error() -> *const c_char {
    // Read without a call() wrapper: that would clear the message.
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// A static name for a status value ("ENGRAM_OK", ...), or
/// "ENGRAM_UNKNOWN_STATUS" for a value this version does not define. Takes
/// an int so any value is safe to pass.
#[no_mangle]
pub extern "C" fn engram_status_name(status: i32) -> *const c_char {
    let name = match engram_status::ALL.iter().find(|s| **s as i32 == status) {
        Some(known) => known.name(),
        None => c"ENGRAM_UNKNOWN_STATUS",
    };
    name.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_each_status_its_value_name_and_meaning() {
        for (i, status) in engram_status::ALL.iter().enumerate() {
            assert_eq!(*status as usize, i, "{status:?}: values follow the table");
            assert_eq!(status.name().to_str(), Ok(format!("{status:?}").as_str()));
            assert!(status.meaning().ends_with('.'), "{status:?}");
        }
    }

    #[test]
    fn a_reader_task_panic_is_engram_panic() {
        let e = FfiError::from(engram::Error::Internal(
            "the decode reader of table 1 panicked: boom".into(),
        ));
        assert_eq!(e.status, ENGRAM_PANIC);
        assert!(e.message.contains("table 1"), "{}", e.message);
    }
}
