//! `engram.open` and `engram.Engine`: a thin class over the core's
//! [`OpenEngine`], built by [`EngineBuilder`] from keyword options.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::time::Duration;

#[cfg(feature = "testing")]
use engram::io::fault::FaultPlan;
use engram::open::{EngineBuilder, OpenEngine, TableInfo};
use engram::prefetch::RowFormat;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert;
use crate::errors::{state, IntoPy};
use crate::gil::{context_manager, Closable};
use crate::json::to_python;
use crate::sequence::Sequence;

/// An open model and its prefetch engine. Safe to use from any number of
/// threads at once; each thread should run its own sequences.
#[pyclass(module = "engram", frozen)]
pub struct Engine {
    inner: Closable<Arc<OpenEngine>>,
}

impl Engine {
    /// The engine, or a `StateError` once closed.
    pub(crate) fn get(&self) -> PyResult<Arc<OpenEngine>> {
        self.inner
            .get()
            .ok_or_else(|| state("the engine is closed"))
    }
}

context_manager!(Engine, |engine, _py| engine.close());

/// Facts about an engine (`Engine.info`): the core's
/// [`engram::EngineInfo`], its tables' facts as one list per field.
#[pyclass(module = "engram", frozen, get_all)]
pub struct Info {
    /// Engram tables, in layer order (table t is consumed by `layer_ids[t]`).
    tables: usize,
    /// Rows per token of each table (hash heads times n-gram orders).
    rows_per_token: usize,
    /// Token ids accepted are `0..vocab_size`.
    vocab_size: usize,
    /// Values of a decoded row (f32 format).
    row_dim: usize,
    /// The transformer layer of each table.
    layer_ids: Vec<u32>,
    /// Rows in each table.
    table_rows: Vec<u64>,
    /// Bytes of a row as stored (raw format), per table.
    stored_row_bytes: Vec<usize>,
    /// How each table's rows are encoded, by the name model files use
    /// (`"e4m3_e8m0_32_row264"` or `"lloyd4_e5m3_32_r136"`): what a host
    /// that takes raw rows and decodes them itself (on a GPU, say) needs.
    encodings: Vec<&'static str>,
    /// The file holding each table's rows (for a checkpoint: the values).
    table_files: Vec<std::path::PathBuf>,
    /// Byte offset of each table's row 0 in its file; row r of a packed
    /// table is at `offset + r * stored_row_bytes`.
    table_offsets: Vec<u64>,
    /// Whether each table keeps its scales apart from its values (a Hugging
    /// Face checkpoint), so a row is not one contiguous range of the file.
    table_split: Vec<bool>,
    /// The format waits deliver: "f32" or "raw".
    format: &'static str,
    /// The I/O backend in use: "psync", "uring" or "mmap".
    backend: &'static str,
    /// Why the backend differs from the one asked for, or None.
    backend_note: Option<String>,
    /// Most tokens one prefill wait may cover.
    max_wait_tokens: u32,
    /// Whether the engine has a row cache.
    cached: bool,
}

#[pymethods]
impl Info {
    fn __repr__(&self) -> String {
        format!(
            "engram.Info(tables={}, rows_per_token={}, vocab_size={}, row_dim={}, layer_ids={:?}, format={:?}, backend={:?})",
            self.tables, self.rows_per_token, self.vocab_size, self.row_dim, self.layer_ids, self.format, self.backend
        )
    }
}

/// Opens the model at `path` (a ds4 .gguf file or a Hugging Face checkpoint
/// directory) and starts an engine on it. Releases the GIL while opening.
/// Every keyword of `options` is an engine option of the core's one table
/// (`engram::open::OPTIONS`, `engram.options()`), by the same name and with
/// the same default as in Rust and C; None leaves the default. `env=True`
/// applies the ENGRAM_* environment variables first (a value that does not
/// parse is an error); by default none is read.
#[pyfunction]
#[pyo3(signature = (path, *, env = false, inject_latency_us = 0, **options))]
pub(crate) fn open(
    py: Python<'_>,
    path: std::path::PathBuf,
    env: bool,
    inject_latency_us: u64,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Engine> {
    let mut builder = EngineBuilder::default();
    if env {
        builder.apply_env().py_err()?;
    }
    for (name, value) in options.into_iter().flatten() {
        let name: String = name.extract()?;
        if engram::open::option(&name).is_none() {
            return Err(PyTypeError::new_err(format!(
                "open() got an unexpected keyword argument {name:?}"
            )));
        }
        if let Some(text) = convert::option_text(&name, &value)? {
            builder.set(&name, &text).py_err()?;
        }
    }
    // A test knob: every pread first sleeps this long. Fault injection is
    // the core's `test_utils`, in the `testing` build only.
    #[cfg(feature = "testing")]
    {
        builder.faults = (inject_latency_us > 0).then(|| FaultPlan {
            latency: Some(Duration::from_micros(inject_latency_us)),
            ..FaultPlan::default()
        });
    }
    #[cfg(not(feature = "testing"))]
    if inject_latency_us > 0 {
        return Err(crate::errors::not_built(
            "inject_latency_us is a test knob, not in this build of engram (built without \
             the `testing` feature)",
        ));
    }
    let opened = py.detach(|| builder.open(&path)).py_err()?;
    Ok(Engine {
        inner: Closable::new(Arc::new(opened)),
    })
}

/// The engine options (`engram.options()`): a dict of each option's name
/// to its default (as text) and what it sets, in the order the docs list
/// them.
#[pyfunction]
pub(crate) fn options(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    for o in engram::open::OPTIONS {
        dict.set_item(o.name, (o.default_value(), o.doc, o.values))?;
    }
    Ok(dict)
}

#[pymethods]
impl Engine {
    /// Facts about the engine: tables, rows per token, vocabulary size, row
    /// dimension, layer ids, format, backend.
    #[getter]
    fn info(&self) -> PyResult<Info> {
        let info = self.get()?.info();
        Ok(Info {
            tables: info.tables.len(),
            rows_per_token: info.rows_per_token,
            vocab_size: info.vocab_size,
            row_dim: info.row_dim,
            layer_ids: each(&info.tables, |t| t.layer_id),
            table_rows: each(&info.tables, |t| t.rows),
            stored_row_bytes: each(&info.tables, |t| t.stored_row_bytes),
            encodings: each(&info.tables, |t| t.encoding.name()),
            table_files: each(&info.tables, |t| t.file.clone()),
            table_offsets: each(&info.tables, |t| t.offset),
            table_split: each(&info.tables, |t| t.split),
            format: info.format.name(),
            backend: info.backend.name(),
            backend_note: info.backend_note.clone(),
            max_wait_tokens: info.max_wait_tokens,
            cached: info.cached,
        })
    }

    /// Reads rows `ids` of `table` synchronously (not through the prefetch
    /// schedule), in `format` ("f32" or "raw"; None: the engine's format):
    /// a new array of shape (len(ids), 256) float32 or (len(ids), row_bytes)
    /// uint8. Releases the GIL while reading.
    #[pyo3(signature = (table, ids, format = None))]
    fn rows<'py>(
        &self,
        py: Python<'py>,
        table: usize,
        ids: &Bound<'py, PyAny>,
        format: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let e = self.get()?;
        let format = match format {
            Some(f) => convert::format(f, "format")?,
            None => e.engine.config().format,
        };
        let ids = convert::tokens(ids, "ids")?;
        let table = e.check_table(table).py_err()?;
        let row_bytes = e.row_bytes(table, format);
        let n = ids.len();
        match format {
            RowFormat::F32 => {
                let dim = e.row_dim(table);
                let mut values = vec![0f32; n * dim];
                py.detach(|| e.read_rows(table, &ids, format, f32_bytes(&mut values)))
                    .py_err()?;
                Ok(PyArray1::from_vec(py, values).reshape([n, dim])?.into_any())
            }
            RowFormat::Raw => {
                let mut bytes = vec![0u8; n * row_bytes];
                py.detach(|| e.read_rows(table, &ids, format, &mut bytes))
                    .py_err()?;
                Ok(PyArray1::from_vec(py, bytes)
                    .reshape([n, row_bytes])?
                    .into_any())
            }
        }
    }

    /// The engine's stats as a dict: backend, row cache, totals over all
    /// its sequences per phase and table, and each sequence's stats.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let e = self.get()?;
        to_python(py, &e.stats_json())
    }

    /// The options the engine was opened with: a dict of each option's name
    /// (as `engram.options()` lists them) to its value as text.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let e = self.get()?;
        let dict = PyDict::new(py);
        for o in engram::open::OPTIONS {
            dict.set_item(o.name, e.options().get(o.name))?;
        }
        Ok(dict)
    }

    /// A new, empty sequence on this engine.
    fn sequence(&self) -> PyResult<Sequence> {
        Sequence::new(self.get()?)
    }

    /// Closes the engine: reader threads stop and are joined (the GIL is
    /// released meanwhile) once no sequence of it is mid-call. Sequences
    /// still open then raise CancelledError. Closing twice is allowed.
    fn close(&self) {
        // Dropping the last share joins the readers: not with the GIL.
        self.inner.close();
    }

    fn __repr__(&self) -> String {
        match self.get() {
            Ok(e) => format!("engram.Engine({})", e.engine.source().name()),
            Err(_) => "engram.Engine(closed)".into(),
        }
    }
}

/// One fact of every table, in table order.
fn each<T>(tables: &[TableInfo], fact: impl Fn(&TableInfo) -> T) -> Vec<T> {
    tables.iter().map(fact).collect()
}

/// The bytes of an f32 buffer, to read native-endian rows into.
pub(crate) fn f32_bytes(values: &mut [f32]) -> &mut [u8] {
    let len = std::mem::size_of_val(values);
    // SAFETY: any byte pattern is a valid f32; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) }
}
