//! Row I/O: every way this crate reads Engram rows from storage, behind one
//! small object-safe trait, [`RowSource`].
//!
//! The split follows the engine/device separation of storage engines such as
//! foyer: the part that knows *what* to read (validation, sort by offset,
//! dedup, page coalescing, bounded sub-batches, scatter back into request
//! order: [`plan`] and [`batch`]) is written once, and a small internal
//! engine trait knows only *how* to read a list of `(file, offset, length)`
//! spans. Engines:
//!
//! - [`psync`]: a persistent pool of reader threads doing `pread`;
//! - `uring` (Linux): one io_uring ring with a deep queue kept full;
//! - [`mmap`]: the lazy-mmap baseline (page faults on access), for comparison.
//!
//! Platform cache control lives in [`cachectl`]; a fault-injecting file layer
//! for tests in `fault` (feature `test_utils`). [`open_source`] picks a
//! backend per platform.

pub mod batch;
pub mod cachectl;
// Test knobs only: a production build cannot inject a fault.
#[cfg(any(test, feature = "test_utils"))]
pub mod fault;
pub mod files;
pub mod mmap;
pub mod order;
pub mod plan;
pub mod psync;
pub mod stats;
pub mod threads;
#[cfg(target_os = "linux")]
pub mod uring;

use std::str::FromStr;
use std::sync::Arc;

pub use batch::BatchSource;
pub use order::ReadOrder;
pub use stats::BatchStats;

use crate::model::TableLocation;
use crate::{Error, Result};

/// Device page size rows are coalesced on, and the alignment of `O_DIRECT`.
pub const PAGE: u64 = 4096;

/// How urgently a batch is needed.
///
/// Demand reads are what a consumer is (or soon will be) blocked on; hint
/// reads are speculative (rows a draft or lookup predicts) and must never
/// delay demand reads. Backends serve demand work first and give hint work
/// only a bounded share of their depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Priority {
    /// Needed now: served first.
    #[default]
    Demand,
    /// Speculative: served with what demand work leaves free.
    Hint,
    /// A prefill's rows: served as [`Priority::Demand`], but most of a
    /// prompt's rows are not needed again after it (the prefill's own reuse
    /// store serves its repeats), so a row cache in front of the source
    /// keeps such a row only from the second time it reads it (a
    /// doorkeeper), while demand and hint rows it always keeps.
    Prefill,
    /// A prefill's rows read ahead only to bring them into the page cache
    /// (the bytes are dropped): a row cache in front of the source neither
    /// keeps them nor counts them as seen, and the file sources over
    /// buffered files only advise the kernel to read them (leaving the
    /// output buffer as it was). Read later at [`Priority::Prefill`], they
    /// come from the page cache.
    Warm,
    /// A prefill's rows needed after those of another batch the same
    /// prefill has in flight (the next table's ring while the consumer is
    /// blocked on the first): served only with the depth that demand and
    /// prefill work leave free, as hints are but without their share cap,
    /// and kept by a row cache as [`Priority::Prefill`] rows are. So a
    /// second batch keeps the device's queue full through the first one's
    /// tail and the gap before the next, without taking the device from
    /// the rows needed first (reads in deadline order). A source serves
    /// these batches in the order they came: a prefill queues a table's
    /// consecutive batches at this priority, the earlier needed first.
    PrefillLater,
}

/// One table as a source serves it: how many rows, how many bytes each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableShape {
    /// Rows in the table (valid row ids are `0..rows`; ids are `u32`, as the
    /// hash produces them: Engram tables have well under 2^32 rows).
    pub rows: u64,
    /// Bytes per delivered row (for split tables: values + scales).
    pub row_bytes: usize,
}

/// One read asked of a [`RowSource`]: which rows of which table, and how
/// urgently.
#[derive(Debug, Clone, Copy)]
pub struct RowRequest<'a> {
    /// The table read.
    pub table: usize,
    /// Row ids, in the order their bytes are delivered; they may repeat and
    /// come in any order.
    pub rows: &'a [u32],
    /// How urgently the rows are needed.
    pub priority: Priority,
}

/// A source of Engram rows: one or more tables of fixed-size rows.
///
/// Object safe, `Send + Sync`: a scheduler calls [`RowSource::read_rows`]
/// concurrently from one thread per table. An implementation says three
/// things (its name, its tables' shapes, how it reads a request), so a
/// wrapper forwards three methods; the rest is derived from them.
pub trait RowSource: Send + Sync {
    /// A short name of the backend (`psync`, `uring`, `mmap`, `cached(..)`).
    fn name(&self) -> String;

    /// Each table's shape, indexed by table.
    fn shapes(&self) -> &[TableShape];

    /// Reads `request.rows` of `request.table` at `request.priority` into
    /// `out`, in request order: row `rows[i]` lands at
    /// `out[i * row_bytes..(i + 1) * row_bytes]`. `out` must be exactly
    /// `rows.len() * row_bytes` long. A row id outside the table is an
    /// [`Error::InvalidArgument`]; a failed read is an [`Error::RowRead`]
    /// naming the table, a row and the file offset.
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats>;

    /// Number of tables.
    fn tables(&self) -> usize {
        self.shapes().len()
    }

    /// Rows in `table` (0 for a table that does not exist).
    fn table_rows(&self, table: usize) -> u64 {
        self.shapes().get(table).map_or(0, |s| s.rows)
    }

    /// Bytes per delivered row of `table` (0 for a table that does not exist).
    fn row_bytes(&self, table: usize) -> usize {
        self.shapes().get(table).map_or(0, |s| s.row_bytes)
    }

    /// [`RowSource::read`] with the request spelled out.
    fn read_rows_at(
        &self,
        table: usize,
        rows: &[u32],
        out: &mut [u8],
        priority: Priority,
    ) -> Result<BatchStats> {
        let request = RowRequest {
            table,
            rows,
            priority,
        };
        self.read(request, out)
    }

    /// [`RowSource::read_rows_at`] at [`Priority::Demand`].
    fn read_rows(&self, table: usize, rows: &[u32], out: &mut [u8]) -> Result<BatchStats> {
        self.read_rows_at(table, rows, out, Priority::Demand)
    }
}

impl<S: RowSource + ?Sized> RowSource for Arc<S> {
    fn name(&self) -> String {
        (**self).name()
    }
    fn shapes(&self) -> &[TableShape] {
        (**self).shapes()
    }
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        (**self).read(request, out)
    }
}

/// Which backend to read with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The platform's best: io_uring for direct I/O on Linux when the kernel
    /// allows it, else the pread pool.
    #[default]
    Auto,
    /// Persistent pread thread pool.
    Psync,
    /// io_uring (Linux only).
    Uring,
    /// Lazy mmap, rows copied out (the baseline).
    Mmap,
}

impl Backend {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Psync => "psync",
            Backend::Uring => "uring",
            Backend::Mmap => "mmap",
        }
    }
}

impl FromStr for Backend {
    type Err = Error;
    fn from_str(s: &str) -> Result<Backend> {
        match s {
            "auto" => Ok(Backend::Auto),
            "psync" => Ok(Backend::Psync),
            "uring" | "io_uring" => Ok(Backend::Uring),
            "mmap" => Ok(Backend::Mmap),
            other => Err(Error::InvalidArgument(format!(
                "unknown I/O backend {other:?} (expected auto, psync, uring or mmap)"
            ))),
        }
    }
}

/// Configuration of a row source: `IoConfig::default()` and the `with_*`
/// setters (non-exhaustive, so a new option is not a breaking change).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct IoConfig {
    /// Backend to use.
    pub backend: Backend,
    /// Reads in flight at once: pool threads (psync) or queue depth (uring).
    pub depth: usize,
    /// Bypass the page cache: `O_DIRECT` on Linux, `F_NOCACHE` on macOS.
    /// Reads then cover whole aligned pages through aligned bounce buffers.
    pub direct: bool,
    /// Tell the kernel access is random (`POSIX_FADV_RANDOM`, `MADV_RANDOM`)
    /// so it does not read ahead around each row.
    pub advise_random: bool,
    /// Upper bound on the bounce memory of one batch call; larger batches
    /// are processed as a pipeline of two sub-batches of half this size.
    pub max_batch_bytes: usize,
    /// Largest single read; longer coalesced runs are split.
    pub max_read_bytes: usize,
    /// Scheduling class of the pread pool's workers (see
    /// [`threads::ReaderSched`]).
    pub readers: threads::ReaderSched,
    /// The order a batch's reads are issued in (see [`order`]).
    pub read_order: ReadOrder,
}

impl Default for IoConfig {
    fn default() -> Self {
        IoConfig {
            backend: Backend::Auto,
            depth: 64,
            direct: false,
            advise_random: true,
            max_batch_bytes: 16 << 20,
            max_read_bytes: 128 << 10,
            readers: threads::ReaderSched::default(),
            read_order: ReadOrder::default(),
        }
    }
}

// Setters, one per field: the struct is `#[non_exhaustive]`, so other
// crates start from `IoConfig::default()` and chain these.
impl IoConfig {
    /// Returns the config with [`IoConfig::backend`] set to `backend`.
    #[must_use]
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Returns the config with [`IoConfig::depth`] set to `depth`.
    #[must_use]
    pub fn with_depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// Returns the config with [`IoConfig::direct`] set to `direct`.
    #[must_use]
    pub fn with_direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        self
    }

    /// Returns the config with [`IoConfig::advise_random`] set to `advise_random`.
    #[must_use]
    pub fn with_advise_random(mut self, advise_random: bool) -> Self {
        self.advise_random = advise_random;
        self
    }

    /// Returns the config with [`IoConfig::max_batch_bytes`] set to `max_batch_bytes`.
    #[must_use]
    pub fn with_max_batch_bytes(mut self, max_batch_bytes: usize) -> Self {
        self.max_batch_bytes = max_batch_bytes;
        self
    }

    /// Returns the config with [`IoConfig::max_read_bytes`] set to `max_read_bytes`.
    #[must_use]
    pub fn with_max_read_bytes(mut self, max_read_bytes: usize) -> Self {
        self.max_read_bytes = max_read_bytes;
        self
    }

    /// Returns the config with [`IoConfig::readers`] set to `readers`.
    #[must_use]
    pub fn with_readers(mut self, readers: threads::ReaderSched) -> Self {
        self.readers = readers;
        self
    }

    /// Returns the config with [`IoConfig::read_order`] set to `read_order`.
    #[must_use]
    pub fn with_read_order(mut self, read_order: ReadOrder) -> Self {
        self.read_order = read_order;
        self
    }
}

impl IoConfig {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<()> {
        if self.depth == 0 || self.depth > 4096 {
            return Err(Error::InvalidArgument(format!(
                "I/O depth {} out of range 1..=4096",
                self.depth
            )));
        }
        if self.max_read_bytes < PAGE as usize || self.max_batch_bytes < 2 * self.max_read_bytes {
            return Err(Error::InvalidArgument(format!(
                "max_read_bytes {} must be >= {PAGE} and at most half of max_batch_bytes {}",
                self.max_read_bytes, self.max_batch_bytes
            )));
        }
        Ok(())
    }
}

/// An opened row source and, when the automatic choice had to fall back,
/// why.
pub struct Opened {
    /// The source.
    pub source: Arc<dyn RowSource>,
    /// The backend actually used.
    pub backend: Backend,
    /// A note for the user when the requested backend was not available.
    pub note: Option<String>,
}

/// Opens a row source over `tables` with the configured backend.
///
/// `Backend::Auto` is io_uring for direct I/O on Linux when a ring can be
/// set up (seccomp or `io_uring_disabled` can forbid it; the fallback comes
/// with a note), else the pread pool; on macOS the pread pool.
pub fn open_source(tables: &[TableLocation], config: &IoConfig) -> Result<Opened> {
    config.validate()?;
    let files = Arc::new(files::TableFiles::open(tables, config)?);
    match config.backend {
        Backend::Psync => Ok(opened(psync_source(files, config)?, Backend::Psync, None)),
        Backend::Mmap => {
            let engine = mmap::MmapEngine::new(&files, config.advise_random)?;
            Ok(opened(
                BatchSource::new(files, engine, config),
                Backend::Mmap,
                None,
            ))
        }
        Backend::Uring => open_uring(files, config).map(|s| opened(s, Backend::Uring, None)),
        Backend::Auto => auto_source(files, config),
    }
}

/// The automatic choice: io_uring for direct I/O on Linux when the kernel
/// lets us set up a ring, else the pread pool.
///
/// Buffered reads stay on the pread pool even on Linux: a buffered
/// io_uring read that misses the page cache is handed to the kernel's
/// io-wq worker threads, which measured slower than our own pool on a
/// cold 11.8 GiB table (see the `iobench` notes in `docs/iobench.md`).
fn auto_source(files: Arc<files::TableFiles>, config: &IoConfig) -> Result<Opened> {
    if !cfg!(target_os = "linux") || !config.direct {
        return Ok(opened(psync_source(files, config)?, Backend::Psync, None));
    }
    match open_uring(files.clone(), config) {
        Ok(s) => Ok(opened(s, Backend::Uring, None)),
        Err(e) => Ok(opened(
            psync_source(files, config)?,
            Backend::Psync,
            Some(format!("io_uring unavailable ({e}); using the pread pool")),
        )),
    }
}

fn opened<S: RowSource + 'static>(source: S, backend: Backend, note: Option<String>) -> Opened {
    Opened {
        source: Arc::new(source),
        backend,
        note,
    }
}

fn psync_source(
    files: Arc<files::TableFiles>,
    config: &IoConfig,
) -> Result<BatchSource<psync::PsyncEngine>> {
    let engine = psync::PsyncEngine::new(
        files.positional(),
        config.depth,
        files.direct,
        config.readers,
        config.read_order,
    )
    .map_err(|e| Error::io("pread pool", e))?;
    Ok(BatchSource::new(files, engine, config))
}

#[cfg(target_os = "linux")]
fn open_uring(
    files: Arc<files::TableFiles>,
    config: &IoConfig,
) -> Result<BatchSource<uring::UringEngine>> {
    let engine = uring::UringEngine::new(files.clone(), config.depth, config.readers, config.read_order)?;
    Ok(BatchSource::new(files, engine, config))
}

#[cfg(not(target_os = "linux"))]
fn open_uring(
    files: Arc<files::TableFiles>,
    config: &IoConfig,
) -> Result<BatchSource<psync::PsyncEngine>> {
    let _ = (files, config);
    Err(Error::InvalidArgument(
        "the uring backend needs Linux".to_string(),
    ))
}
