//! Opening an engine from a model path: the model, its row source (with the
//! row cache in front when asked), the prefetch [`Engine`] and the registry
//! of its sequences' stats, built in one place for every embedder (the C
//! ABI, the Python package, the replay harness).
//!
//! [`EngineBuilder`] holds the options as typed values; [`EngineBuilder::open`]
//! validates them once and returns an [`OpenEngine`], which also answers the
//! questions every embedder asks (its facts, [`OpenEngine::info`]; bytes of a
//! delivered row; synchronous row reads in either format; the engine's stats
//! document). A binding's sequence is a [`SharedSequence`]: the sequence and
//! its live prefill behind one lock, with the rules both bindings enforce.

mod info;
mod options;
mod registry;
mod shared;
mod slot;

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::cache::{CachedSource, RowCache};
use crate::hot::{HotConfig, HotSet};
#[cfg(any(test, feature = "test_utils"))]
use crate::io::fault::{FaultPlan, FaultSource};
use crate::io::{open_source, Backend, IoConfig, Opened, RowSource};
use crate::model::Model;
use crate::prefetch::{Engine, PrefetchConfig, RowFormat};
use crate::{Error, Result};

pub use info::{EngineInfo, TableInfo};
pub use options::{option, EngineOption, ENV_VARS, OPTIONS};
use registry::{SeqRegistry, SeqsReport};
pub use shared::{SeqCall, SeqError, SeqState, SharedSequence};

/// The options of an engine: how rows are read, how they are scheduled and
/// the row cache budget. Every option also has a name in [`OPTIONS`], the
/// one the C and Python bindings use ([`EngineBuilder::set`]). The
/// defaults read no environment; [`EngineBuilder::apply_env`] applies it.
/// In Rust: `EngineBuilder::default()` and the `with_*` setters (the
/// struct is non-exhaustive, so a new option is not a breaking change).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EngineBuilder {
    /// How the row source reads. Its `readers` is not used: the source's
    /// threads take `prefetch.readers`, so one setting classes every
    /// reader thread of the engine.
    pub io: IoConfig,
    /// How the scheduler prefetches and what format it hands out.
    pub prefetch: PrefetchConfig,
    /// Row cache budget in bytes shared by the engine's sequences (0: none).
    pub cache_bytes: u64,
    /// The hot tier: a hot-row file served from memory in front of the row
    /// cache and storage (`path: None`: none).
    pub hot: HotConfig,
    /// Faults to inject below the reads (tests only: latency, errors); the
    /// source is then always the pread pool. Only with the `test_utils`
    /// feature: a production build has no way to inject one.
    #[cfg(any(test, feature = "test_utils"))]
    pub faults: Option<FaultPlan>,
}

// Setters, one per field: the struct is `#[non_exhaustive]`, so other
// crates start from `EngineBuilder::default()` and chain these.
impl EngineBuilder {
    /// Returns the builder with [`EngineBuilder::io`] set to `io`.
    #[must_use]
    pub fn with_io(mut self, io: IoConfig) -> Self {
        self.io = io;
        self
    }

    /// Returns the builder with [`EngineBuilder::prefetch`] set to `prefetch`.
    #[must_use]
    pub fn with_prefetch(mut self, prefetch: PrefetchConfig) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Returns the builder with [`EngineBuilder::cache_bytes`] set to `cache_bytes`.
    #[must_use]
    pub fn with_cache_bytes(mut self, cache_bytes: u64) -> Self {
        self.cache_bytes = cache_bytes;
        self
    }

    /// Returns the builder with [`EngineBuilder::hot`] set to `hot`.
    #[must_use]
    pub fn with_hot(mut self, hot: HotConfig) -> Self {
        self.hot = hot;
        self
    }

    /// Returns the builder with [`EngineBuilder::faults`] set to `faults`.
    #[cfg(any(test, feature = "test_utils"))]
    #[must_use]
    pub fn with_faults(mut self, faults: Option<FaultPlan>) -> Self {
        self.faults = faults;
        self
    }
}

impl EngineBuilder {
    /// Checks every option (before anything is opened).
    pub fn validate(&self) -> Result<()> {
        self.io.validate()?;
        self.prefetch.validate()
    }

    /// Opens the model at `path` (a ds4 `.gguf` file or a Hugging Face
    /// checkpoint directory) and starts an engine on it.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<OpenEngine> {
        self.validate()?;
        self.build(Model::open(path.as_ref())?)
    }

    /// Starts an engine on an already opened `model`.
    pub fn build(&self, model: Model) -> Result<OpenEngine> {
        self.validate()?;
        // Why from `prefetch`: the embedders (C, Python) set the class
        // there, and a source left at its own default had its pread workers
        // at `normal` under ENGRAM_READERS=batch.
        let io = IoConfig {
            readers: self.prefetch.readers,
            ..self.io.clone()
        };
        let opened = self.open_source(&model, &io)?;
        let (source, cache) = if self.cache_bytes == 0 {
            (opened.source, None)
        } else {
            let row_bytes = (0..opened.source.tables())
                .map(|t| opened.source.row_bytes(t))
                .max()
                .unwrap_or(0);
            let cache = Arc::new(RowCache::new(self.cache_bytes, row_bytes));
            let cached = CachedSource::new(opened.source, cache.clone());
            (Arc::new(cached) as Arc<dyn RowSource>, Some(cache))
        };
        // The hot tier goes in front of the row cache: hot rows never reach
        // it, so its budget goes to the rest.
        let (source, hot) = crate::hot::layer(&model, source, &self.hot)?;
        let mut prefetch = self.prefetch.clone();
        // Direct I/O keeps no page cache to warm.
        prefetch.warm_page_cache &= !self.io.direct;
        let engine = Engine::for_model(&model, source, prefetch)?;
        Ok(OpenEngine {
            engine,
            model,
            backend: opened.backend,
            note: opened.note,
            cache,
            hot,
            seqs: Arc::default(),
            options: self.without_faults(),
        })
    }

    /// The row source of `model`'s tables: the faulty pread pool when the
    /// builder injects faults.
    #[cfg(any(test, feature = "test_utils"))]
    fn open_source(&self, model: &Model, io: &IoConfig) -> Result<Opened> {
        match &self.faults {
            None => open_source(&model.tables, io),
            Some(plan) => Ok(Opened {
                source: Arc::new(FaultSource::open(&model.tables, io, plan.clone())?),
                backend: Backend::Psync,
                note: Some("fault injection: the pread pool over faulty files".into()),
            }),
        }
    }

    /// The row source of `model`'s tables.
    #[cfg(not(any(test, feature = "test_utils")))]
    fn open_source(&self, model: &Model, io: &IoConfig) -> Result<Opened> {
        open_source(&model.tables, io)
    }

    /// This builder with no fault injected (what [`OpenEngine::options`]
    /// reports: the faults are a test's, not an option).
    fn without_faults(&self) -> EngineBuilder {
        #[cfg(any(test, feature = "test_utils"))]
        return EngineBuilder {
            faults: None,
            ..self.clone()
        };
        #[cfg(not(any(test, feature = "test_utils")))]
        self.clone()
    }
}

/// An engine on an opened model, with what its embedders report about it.
pub struct OpenEngine {
    /// The prefetch engine.
    pub engine: Engine,
    /// The model it reads.
    pub model: Model,
    /// The backend actually used (never [`Backend::Auto`]).
    pub backend: Backend,
    /// Why the backend differs from the one asked for, if it does.
    pub note: Option<String>,
    /// The row cache, when the engine has one.
    pub cache: Option<Arc<RowCache>>,
    /// The hot set, when the engine has a hot tier.
    pub hot: Option<Arc<HotSet>>,
    /// Stats of the engine's sequences, open and closed (each
    /// [`SharedSequence`] reports to it).
    seqs: Arc<SeqRegistry>,
    /// The options it was opened with (fault injection left out).
    options: EngineBuilder,
}

impl std::fmt::Debug for OpenEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenEngine")
            .field("engine", &self.engine)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// The row cache's state in [`OpenEngine::stats_json`].
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// The byte budget.
    pub budget_bytes: u64,
    /// Bytes held now.
    pub bytes: u64,
    /// Rows held now.
    pub rows: usize,
    /// Lookups served from the cache.
    pub hits: u64,
    /// Lookups that went to the source.
    pub misses: u64,
}

#[derive(Serialize)]
struct Report<'a> {
    source: String,
    backend: &'static str,
    backend_note: Option<&'a str>,
    cache: Option<CacheReport>,
    #[serde(flatten)]
    sequences: SeqsReport,
}

impl OpenEngine {
    /// The options the engine was opened with (as asked: direct I/O turns
    /// the page-cache warm-up off whatever `warm_page_cache` says); each
    /// by name through [`EngineBuilder::get`].
    pub fn options(&self) -> &EngineBuilder {
        &self.options
    }

    /// Number of tables.
    pub fn tables(&self) -> usize {
        self.model.tables.len()
    }

    /// `table` as an index, or an error naming the range.
    pub fn check_table(&self, table: usize) -> Result<usize> {
        let tables = self.tables();
        if table >= tables {
            return Err(Error::InvalidArgument(format!(
                "table {table} out of range (the model has {tables})"
            )));
        }
        Ok(table)
    }

    /// Values in one f32 row of `table` (0 for a table that does not
    /// exist).
    pub fn row_dim(&self, table: usize) -> usize {
        self.model
            .tables
            .get(table)
            .map_or(0, |t| t.encoding.values())
    }

    /// Bytes of one delivered row of `table` in `format`.
    pub fn row_bytes(&self, table: usize, format: RowFormat) -> usize {
        match format {
            RowFormat::Raw => self.engine.source().row_bytes(table),
            RowFormat::F32 => self.row_dim(table) * 4,
        }
    }

    /// Reads rows `ids` of `table` synchronously into the front of `out`
    /// (row `i` at `i * row_bytes`) in `format`, whatever the engine's
    /// format; f32 values are native-endian. Does not go through the
    /// prefetch schedule: for checks and tools.
    pub fn read_rows(
        &self,
        table: usize,
        ids: &[u32],
        format: RowFormat,
        out: &mut [u8],
    ) -> Result<()> {
        let table = self.check_table(table)?;
        let need = ids.len() * self.row_bytes(table, format);
        if out.len() < need {
            return Err(Error::InvalidArgument(format!(
                "output buffer of {} bytes; {} rows need {need}",
                out.len(),
                ids.len()
            )));
        }
        let source = self.engine.source();
        match format {
            RowFormat::Raw => {
                source.read_rows(table, ids, &mut out[..need])?;
            }
            RowFormat::F32 => {
                let encoding = self.model.table(table)?.encoding;
                let mut raw = vec![0u8; ids.len() * source.row_bytes(table)];
                source.read_rows(table, ids, &mut raw)?;
                let mut values = vec![0f32; ids.len() * encoding.values()];
                encoding
                    .decode_rows(&raw, &mut values)
                    .map_err(|e| e.into_error_at(table, ids))?;
                for (dst, v) in out[..need].chunks_exact_mut(4).zip(values) {
                    dst.copy_from_slice(&v.to_ne_bytes());
                }
            }
        }
        Ok(())
    }

    /// The row cache's state, when there is one.
    pub fn cache_report(&self) -> Option<CacheReport> {
        self.cache.as_ref().map(|c| CacheReport {
            budget_bytes: c.budget(),
            bytes: c.bytes(),
            rows: c.len(),
            hits: c.hits(),
            misses: c.misses(),
        })
    }

    /// A JSON document of the engine's stats: source, backend (and why it
    /// fell back), row cache, totals over all its sequences (open and
    /// closed) per phase and table, each open sequence's stats and the last
    /// few closed ones'.
    pub fn stats_json(&self) -> String {
        let report = Report {
            source: self.engine.source().name(),
            backend: self.backend.name(),
            backend_note: self.note.as_deref(),
            cache: self.cache_report(),
            sequences: self.seqs.report(),
        };
        serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}
