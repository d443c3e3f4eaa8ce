//! `engram.open` and `engram.Engine`: a thin class over the core's
//! [`OpenEngine`], built by [`EngineBuilder`] from keyword options.

use std::sync::Arc;
use std::time::Duration;

use engram::hot::HotConfig;
use engram::io::fault::FaultPlan;
use engram::io::IoConfig;
use engram::open::{EngineBuilder, OpenEngine};
use engram::prefetch::{PrefetchConfig, RowFormat};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

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

/// Facts about an engine (`Engine.info`).
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
/// `prefetch`, `pipeline` and `batch` left None follow the ENGRAM_PREFETCH,
/// ENGRAM_PIPELINE and ENGRAM_BATCH environment switches (0 off), else on;
/// `prefill_order` ("auto" or "chunk") left None follows ENGRAM_PREFILL_ORDER,
/// else "auto"; `readers` (the reader threads' scheduling class: "normal",
/// "batch", "raised" or "realtime") left None follows ENGRAM_READERS, else
/// "normal".
#[pyfunction]
#[pyo3(signature = (
    path, *, backend = "auto", direct = false, io_depth = 64, cache_bytes = 0,
    format = "f32", chunk_tokens = 1024, ring_chunks = 2, first_chunk_tokens = 128,
    read_batch_tokens = 256, overlap_threshold = 1024, prefetch = None, pipeline = None,
    batch = None, lookup_hints = false, workers = 4, decode_workers = 2,
    reuse_bytes = None, prefill_batches_in_flight = 1, prefill_order = None, readers = None,
    hot = None, hot_mlock = false, inject_latency_us = 0
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn open(
    py: Python<'_>,
    path: std::path::PathBuf,
    backend: &str,
    direct: bool,
    io_depth: usize,
    cache_bytes: u64,
    format: &str,
    chunk_tokens: u32,
    ring_chunks: u32,
    first_chunk_tokens: u32,
    read_batch_tokens: u32,
    overlap_threshold: u32,
    prefetch: Option<bool>,
    pipeline: Option<bool>,
    batch: Option<bool>,
    lookup_hints: bool,
    workers: usize,
    decode_workers: usize,
    reuse_bytes: Option<u64>,
    prefill_batches_in_flight: usize,
    prefill_order: Option<&str>,
    readers: Option<&str>,
    hot: Option<std::path::PathBuf>,
    hot_mlock: bool,
    inject_latency_us: u64,
) -> PyResult<Engine> {
    // None: the ENGRAM_PREFETCH / ENGRAM_PIPELINE / ENGRAM_BATCH switches
    // (as the C ABI's defaults), else on.
    let defaults = PrefetchConfig::from_env();
    let builder = EngineBuilder {
        io: IoConfig {
            backend: convert::backend(backend)?,
            depth: io_depth,
            direct,
            ..IoConfig::default()
        },
        prefetch: PrefetchConfig {
            chunk_tokens,
            ring_chunks,
            first_chunk_tokens,
            read_batch_tokens,
            overlap_threshold,
            prefetch: prefetch.unwrap_or(defaults.prefetch),
            pipeline: pipeline.unwrap_or(defaults.pipeline),
            batch: batch.unwrap_or(defaults.batch),
            lookup_hints,
            format: convert::format(format, "format")?,
            workers,
            decode_workers,
            reuse_bytes: reuse_bytes.unwrap_or(defaults.reuse_bytes),
            prefill_batches_in_flight,
            prefill_order: match prefill_order {
                Some(name) => convert::prefill_order(name)?,
                None => defaults.prefill_order,
            },
            readers: match readers {
                Some(name) => convert::readers(name)?,
                None => defaults.readers,
            },
            ..defaults
        },
        cache_bytes,
        hot: HotConfig {
            path: hot,
            mlock: hot_mlock,
        },
        // A test knob: every pread first sleeps this long.
        faults: (inject_latency_us > 0).then(|| FaultPlan {
            latency: Some(Duration::from_micros(inject_latency_us)),
            ..FaultPlan::default()
        }),
    };
    let opened = py.detach(|| builder.open(&path)).py_err()?;
    Ok(Engine {
        inner: Closable::new(Arc::new(opened)),
    })
}

#[pymethods]
impl Engine {
    /// Facts about the engine: tables, rows per token, vocabulary size, row
    /// dimension, layer ids, format, backend.
    #[getter]
    fn info(&self) -> PyResult<Info> {
        let e = self.get()?;
        let config = e.engine.config();
        let layout = e.engine.layout();
        let source = e.engine.source();
        Ok(Info {
            tables: layout.tables.len(),
            rows_per_token: layout.columns(),
            vocab_size: layout.vocab_size(),
            row_dim: e.row_dim(0),
            layer_ids: layout.tables.iter().map(|t| t.layer_id).collect(),
            table_rows: e.model.tables.iter().map(|t| t.rows).collect(),
            stored_row_bytes: (0..e.tables()).map(|t| source.row_bytes(t)).collect(),
            encodings: e.model.tables.iter().map(|t| t.encoding.name()).collect(),
            table_files: e
                .model
                .tables
                .iter()
                .map(|t| t.first_file().to_path_buf())
                .collect(),
            table_offsets: e.model.tables.iter().map(|t| t.start_offset()).collect(),
            table_split: e
                .model
                .tables
                .iter()
                .map(|t| t.shards.len() > 1 || t.shards[0].parts.len() > 1)
                .collect(),
            format: convert::format_name(config.format),
            backend: e.backend.name(),
            backend_note: e.note.clone(),
            max_wait_tokens: config.ring_tokens(),
            cached: e.cache.is_some(),
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

/// The bytes of an f32 buffer, to read native-endian rows into.
pub(crate) fn f32_bytes(values: &mut [f32]) -> &mut [u8] {
    let len = std::mem::size_of_val(values);
    // SAFETY: any byte pattern is a valid f32; same memory, same lifetime.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) }
}
