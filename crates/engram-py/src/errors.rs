//! The one error bridge: every [`engram::Error`] becomes an exception of
//! the `engram.Error` hierarchy with its facts (path, field, table, row,
//! offset) as attributes; argument errors of this crate are `ValueError` /
//! `TypeError` subclasses of it.
//!
//! The classes are made at import with `type(name, bases, namespace)`, so
//! the argument errors can derive from both `engram.Error` and the builtin
//! they refine (`except ValueError` and `except engram.Error` both catch
//! them), which a single-base exception macro cannot express.

use engram::{Error, ErrorKind, SeqCall, SeqError};
use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The exception classes, in the order of [`CLASSES`].
static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

/// One exception class of the package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// `engram.Error`: the base of all.
    Base,
    /// `engram.IoError`: an OS error on a named file (`path`, `errno`).
    Io,
    /// `engram.FormatError`: a malformed model file, layout or tokenizer.
    Format,
    /// `engram.RowReadError`: a row read that failed (an `IoError`).
    RowRead,
    /// `engram.CorruptRowError`: a row whose bytes do not decode.
    CorruptRow,
    /// `engram.CancelledError`: the prefill, sequence or engine ended.
    Cancelled,
    /// `engram.InvalidArgumentError`: a bad value (a `ValueError`).
    InvalidArgument,
    /// `engram.ArgumentTypeError`: a value of the wrong type (a `TypeError`).
    ArgumentType,
    /// `engram.StateError`: a call not allowed now (a `RuntimeError`).
    State,
    /// `engram.InternalError`: a bug in the engine (a reader task panicked).
    Internal,
}

/// (class, name, bases beyond the package's own, doc).
const CLASSES: [(Class, &str, &str); 10] = [
    (Class::Base, "Error", "Base of every error raised by engram."),
    (
        Class::Io,
        "IoError",
        "An operating-system I/O error on a file: `path` names it, `errno` is the OS code (or None).",
    ),
    (
        Class::Format,
        "FormatError",
        "A malformed model file, layout or tokenizer: `path` (None for a layout) and `field` say where.",
    ),
    (
        Class::RowRead,
        "RowReadError",
        "A row read that failed: `table`, `row`, `path` and byte `offset` say which; `errno` why.",
    ),
    (
        Class::CorruptRow,
        "CorruptRowError",
        "A row whose bytes do not decode to finite values: `table` and `row` say which.",
    ),
    (
        Class::Cancelled,
        "CancelledError",
        "The prefill, sequence or engine was ended while (or before) the call waited.",
    ),
    (
        Class::InvalidArgument,
        "InvalidArgumentError",
        "A value outside what the call accepts (also a ValueError).",
    ),
    (
        Class::ArgumentType,
        "ArgumentTypeError",
        "An argument of a type the call does not take (also a TypeError).",
    ),
    (
        Class::State,
        "StateError",
        "A call not allowed in the object's current state, e.g. a decode step while a prefill is open (also a RuntimeError).",
    ),
    (
        Class::Internal,
        "InternalError",
        "A bug in the engine: a reader task panicked. The prefill or sequence it hit answers this error from then on instead of waiting.",
    ),
];

/// Makes the classes and adds them to the module `m`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let mut made: Vec<Py<PyType>> = Vec::with_capacity(CLASSES.len());
    for (class, name, doc) in CLASSES {
        let base = |c: Class| made[c as usize].bind(py).clone().into_any();
        let bases: Vec<Bound<'_, PyAny>> = match class {
            Class::Base => vec![py.get_type::<PyException>().into_any()],
            Class::RowRead => vec![base(Class::Io)],
            Class::InvalidArgument => {
                vec![base(Class::Base), py.get_type::<PyValueError>().into_any()]
            }
            Class::ArgumentType => vec![base(Class::Base), py.get_type::<PyTypeError>().into_any()],
            Class::State => vec![
                base(Class::Base),
                py.get_type::<PyRuntimeError>().into_any(),
            ],
            _ => vec![base(Class::Base)],
        };
        let namespace = PyDict::new(py);
        namespace.set_item("__doc__", doc)?;
        namespace.set_item("__module__", "engram")?;
        let ty = py
            .get_type::<PyType>()
            .call1((name, PyTuple::new(py, bases)?, namespace))?
            .cast_into::<PyType>()?;
        m.add(name, &ty)?;
        made.push(ty.unbind());
    }
    TYPES
        .set(py, made)
        .map_err(|_| PyRuntimeError::new_err("engram's exception classes were made twice"))
}

/// Values for the exception's attributes.
#[derive(Default)]
struct Facts {
    path: Option<String>,
    field: Option<String>,
    table: Option<usize>,
    row: Option<u64>,
    offset: Option<u64>,
    errno: Option<i32>,
}

/// An exception of `class` with `message` and the `facts` as attributes
/// (every attribute the class documents is set, None when unknown).
fn raise(class: Class, message: String, facts: Facts) -> PyErr {
    Python::attach(|py| {
        let made = || -> PyResult<PyErr> {
            let types = TYPES
                .get(py)
                .ok_or_else(|| PyRuntimeError::new_err("engram is not initialized"))?;
            let exc = types[class as usize].bind(py).call1((message.clone(),))?;
            match class {
                Class::Io | Class::RowRead | Class::Format => {
                    exc.setattr("path", facts.path)?;
                }
                _ => {}
            }
            match class {
                Class::Io | Class::RowRead => exc.setattr("errno", facts.errno)?,
                Class::Format => exc.setattr("field", facts.field)?,
                _ => {}
            }
            if matches!(class, Class::RowRead | Class::CorruptRow) {
                exc.setattr("table", facts.table)?;
                exc.setattr("row", facts.row)?;
            }
            if class == Class::RowRead {
                exc.setattr("offset", facts.offset)?;
            }
            Ok(PyErr::from_value(exc))
        };
        made().unwrap_or_else(|e| e)
    })
}

/// An `engram.InvalidArgumentError` (a `ValueError`).
pub(crate) fn invalid(message: impl Into<String>) -> PyErr {
    raise(Class::InvalidArgument, message.into(), Facts::default())
}

/// An `engram.ArgumentTypeError` (a `TypeError`).
pub(crate) fn wrong_type(message: impl Into<String>) -> PyErr {
    raise(Class::ArgumentType, message.into(), Facts::default())
}

/// An `engram.StateError` (a `RuntimeError`).
pub(crate) fn state(message: impl Into<String>) -> PyErr {
    raise(Class::State, message.into(), Facts::default())
}

/// An `engram.Error` for a function this build leaves out (its cargo
/// feature was off when the wheel was built). Unused in the `testing`
/// build, which has every function.
#[cfg(not(feature = "testing"))]
pub(crate) fn not_built(message: impl Into<String>) -> PyErr {
    raise(Class::Base, message.into(), Facts::default())
}

/// The exception for a library error.
pub(crate) fn to_py(e: Error) -> PyErr {
    let message = e.to_string();
    // The class comes from the exhaustive kind: a new kind does not
    // compile until it is given a class here.
    let class = match e.kind() {
        ErrorKind::Io => Class::Io,
        ErrorKind::Format | ErrorKind::Layout | ErrorKind::Tokenizer => Class::Format,
        ErrorKind::RowRead => Class::RowRead,
        ErrorKind::CorruptRow => Class::CorruptRow,
        ErrorKind::InvalidArgument => Class::InvalidArgument,
        ErrorKind::Cancelled => Class::Cancelled,
        ErrorKind::Internal => Class::Internal,
    };
    // The facts: only variants that carry some (the enum is
    // non_exhaustive outside its crate, so the rest falls through).
    let mut facts = match &e {
        Error::Io { path, .. } => Facts {
            path: Some(path.display().to_string()),
            ..Facts::default()
        },
        Error::Format { file, field, .. } => Facts {
            path: Some(file.display().to_string()),
            field: Some(field.clone()),
            ..Facts::default()
        },
        Error::Layout { field, .. } => Facts {
            field: Some(field.clone()),
            ..Facts::default()
        },
        Error::Tokenizer { source_name, .. } => Facts {
            path: Some(source_name.clone()),
            field: Some("tokenizer".into()),
            ..Facts::default()
        },
        Error::RowRead {
            table,
            row,
            file,
            offset,
            ..
        } => Facts {
            path: Some(file.display().to_string()),
            table: Some(*table),
            row: Some(*row),
            offset: Some(*offset),
            ..Facts::default()
        },
        Error::CorruptRow { table, row, .. } => Facts {
            table: Some(*table),
            row: Some(*row),
            ..Facts::default()
        },
        _ => Facts::default(),
    };
    // The OS error of every variant that wraps one (`Io`, `RowRead`): it is
    // the error's source.
    facts.errno = std::error::Error::source(&e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error);
    raise(class, message, facts)
}

/// `.map_err(to_py)` for library results.
pub(crate) trait IntoPy<T> {
    /// The result with its error as an exception.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for engram::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

impl<T> IntoPy<T> for Result<T, SeqError> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(seq_to_py)
    }
}

/// The exception for a refused or failed call on a sequence, worded for
/// Python callers (how they end a prefill: `Prefill.end` or its `with`
/// block). The match is exhaustive: a new refusal does not compile until it
/// is worded here.
fn seq_to_py(e: SeqError) -> PyErr {
    match e {
        SeqError::Engine(e) => to_py(e),
        SeqError::Poisoned => {
            state("the sequence is unusable after an internal error (panic); close it")
        }
        SeqError::Closed { .. } => state("the sequence is closed"),
        SeqError::PrefillLive { call, .. } => {
            let what = match call {
                SeqCall::Prefill => {
                    return state("a prefill is still open on this sequence: end it first")
                }
                SeqCall::StepBegin => "step_begin",
                SeqCall::Rollback => "rollback",
            };
            state(format!(
                "{what} while a prefill is open on this sequence: end it first (Prefill.end or its with block)"
            ))
        }
        SeqError::PrefillEnded { .. } => state("the prefill has ended"),
        e @ SeqError::TableOutOfRange { .. } => invalid(e.to_string()),
        SeqError::BufferTooSmall { have, need } => invalid(format!(
            "out: {have} bytes; the rows need {need} (nothing was consumed)"
        )),
    }
}
