//! Schedules: the ways of getting Engram rows to the forward pass that the
//! replay compares. Each run of a schedule gets a fresh engine, source and
//! cache, so no schedule benefits from another's reads (beyond the page
//! cache, which `--cold` empties).
//!
//! - `sync`: each table's rows are read right before its layer, on the
//!   forward thread (the engine with prefetch off).
//! - `ds4`: the peer's published schedule with its macOS read path
//!   ([`Ds4Schedule`], [`Ds4Flavor::Mac`]): uncached reads, decode batches
//!   in parallel on a persistent pool.
//! - `ds4-linux`: the same schedule with the peer's Linux read path
//!   ([`Ds4Flavor::Linux`]): buffered reads, 16 threads per large batch.
//! - `overlap`: this project's pipeline, without row cache or hints.
//! - `full`: the pipeline with the session row cache and hints.
//! - `llama-lazy`, `llama-readahead`, `omlx`, `ds4-qwen`,
//!   `ds4-qwen-chunked`, `freetoken`: the Qwen4-Exp peers ([`QwenSchedule`],
//!   [`QwenPeer`]), each a runtime's published read path of the PLE table.
//!
//! The peers belong to a family: `ds4` and `ds4-linux` replay a DeepSeek
//! runtime and refuse a Qwen4-Exp model, the Qwen peers the other way round
//! ([`ScheduleKind::family`]); `sync`, `overlap` and `full` run on both.
//! [`ScheduleKind::defaults`] is each family's default list.

mod ds4;
mod engine;
mod qwen;

use std::time::Duration;

use engram::io::IoConfig;
use engram::model::Model;
use engram::{Error, Result};

pub use ds4::{Ds4Flavor, Ds4Schedule};
pub use engine::EngineSchedule;
pub use qwen::{QwenPeer, QwenSchedule};

use engram::layout::Family;

/// The schedules `engram bench` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleKind {
    /// Reads at the wait, no overlap.
    Sync,
    /// The peer's schedule, macOS read path.
    Ds4,
    /// The peer's schedule, Linux read path.
    Ds4Linux,
    /// This project's pipeline.
    Overlap,
    /// The pipeline with row cache and hints.
    Full,
    /// A Qwen4-Exp runtime's read path ([`QwenPeer`]).
    Qwen(QwenPeer),
}

impl ScheduleKind {
    /// Every schedule, in report order.
    pub const ALL: [ScheduleKind; 11] = [
        ScheduleKind::Sync,
        ScheduleKind::Ds4,
        ScheduleKind::Ds4Linux,
        ScheduleKind::Qwen(QwenPeer::LlamaLazy),
        ScheduleKind::Qwen(QwenPeer::LlamaReadahead),
        ScheduleKind::Qwen(QwenPeer::Omlx),
        ScheduleKind::Qwen(QwenPeer::Ds4Qwen),
        ScheduleKind::Qwen(QwenPeer::Ds4QwenChunked),
        ScheduleKind::Qwen(QwenPeer::FreeToken),
        ScheduleKind::Overlap,
        ScheduleKind::Full,
    ];

    /// The family whose runtime a peer schedule replays; `None` for the
    /// engine's schedules, which run on every family.
    pub fn family(self) -> Option<Family> {
        match self {
            ScheduleKind::Ds4 | ScheduleKind::Ds4Linux => Some(Family::DeepSeekEngram),
            ScheduleKind::Qwen(_) => Some(Family::Qwen4ExpPle),
            _ => None,
        }
    }

    /// The schedules `engram bench` runs on a model of `family` unless
    /// told otherwise: `sync`, the family's peers, `overlap`, `full`, in
    /// [`ScheduleKind::ALL`] order.
    pub fn defaults(family: Family) -> Vec<ScheduleKind> {
        ScheduleKind::ALL
            .into_iter()
            .filter(|k| k.family().is_none_or(|f| f == family))
            .collect()
    }

    /// The runtime a peer stands for (the engine's schedules describe
    /// themselves).
    pub fn runtime(self) -> &'static str {
        match self {
            ScheduleKind::Sync => "this engine, reads at the layer (no prefetch)",
            ScheduleKind::Ds4 => "ds4 DeepSeek-V4.1 Engram reader, macOS path",
            ScheduleKind::Ds4Linux => "ds4 DeepSeek-V4.1 Engram reader, Linux path",
            ScheduleKind::Overlap => "this engine's pipeline",
            ScheduleKind::Full => "this engine's pipeline with row cache and hints",
            ScheduleKind::Qwen(peer) => peer.runtime(),
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ScheduleKind::Sync => "sync",
            ScheduleKind::Ds4 => "ds4",
            ScheduleKind::Ds4Linux => "ds4-linux",
            ScheduleKind::Overlap => "overlap",
            ScheduleKind::Full => "full",
            ScheduleKind::Qwen(peer) => peer.name(),
        }
    }

    /// Parses a comma-separated list of [`ScheduleKind::name`]s.
    pub fn parse_list(text: &str) -> Result<Vec<ScheduleKind>> {
        let mut kinds = Vec::new();
        for name in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let kind = ScheduleKind::ALL
                .into_iter()
                .find(|k| k.name() == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = ScheduleKind::ALL.iter().map(|k| k.name()).collect();
                    Error::InvalidArgument(format!(
                        "--schedule: unknown schedule {name:?} (known: {})",
                        known.join(", ")
                    ))
                })?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            return Err(Error::InvalidArgument(
                "--schedule names no schedule".into(),
            ));
        }
        Ok(kinds)
    }
}

/// What a schedule is built from.
#[derive(Debug, Clone)]
pub struct ScheduleSetup<'a> {
    /// The model whose tables are read.
    pub model: &'a Model,
    /// Row I/O options of this project's engine (the `ds4` schedules use
    /// the peer's own read paths instead).
    pub io: IoConfig,
    /// Rows are handed out decoded to f32 (a compute that uses them).
    pub f32_rows: bool,
    /// Row cache budget of `full`, bytes.
    pub cache_bytes: u64,
    /// `full` predicts hints itself from the prompt (prompt lookup).
    pub lookup_hints: bool,
    /// Hot tier of the engine schedules (loaded once, shared read-only).
    pub hot: Option<std::sync::Arc<engram::hot::HotSet>>,
    /// The prefill order the engine schedules are told, as a runtime that
    /// knows its own sweep tells it ([`engram::prefetch::PrefillOrder`]).
    pub prefill_order: engram::prefetch::PrefillOrder,
    /// Tokens per prefill forward call (the replay's ubatch): `freetoken`
    /// issues one fill per call.
    pub ubatch: usize,
    /// The engine schedules keep a prefill wait's rows until the next wait
    /// on the table instead of releasing them once taken
    /// ([`engram::prefetch::Prefill::release`]).
    pub hold_rows: bool,
}

/// The row ids of `tokens` appended to `history` (`[token][table][column]`)
/// and their count: how every reimplemented peer's prefill starts.
pub(crate) fn prompt_ids(
    hasher: &engram::hash::Hasher,
    history: &mut engram::hash::History,
    tokens: &[u32],
) -> Result<(u32, Vec<u32>)> {
    let count = u32::try_from(tokens.len()).map_err(|_| {
        Error::InvalidArgument(format!("a prompt of {} tokens is too long", tokens.len()))
    })?;
    let mut ids = Vec::new();
    hasher.hash(history, tokens, None, &mut ids)?;
    Ok((count, ids))
}

/// An error unless `model` is of `family`, the family of the runtime the
/// schedule `name` replays.
pub(crate) fn check_family(model: &Model, family: Family, name: &str) -> Result<()> {
    let has = model.layout.family;
    if has == family {
        return Ok(());
    }
    let own: Vec<&str> = ScheduleKind::defaults(has)
        .iter()
        .map(|k| k.name())
        .collect();
    Err(Error::InvalidArgument(format!(
        "the {name} schedule replays a {family} runtime, but the model is a {has} one \
         (its schedules: {})",
        own.join(", ")
    )))
}

/// Builds a fresh schedule of `kind`.
pub fn build(kind: ScheduleKind, setup: &ScheduleSetup<'_>) -> Result<Box<dyn Schedule>> {
    Ok(match kind {
        ScheduleKind::Ds4 => Box::new(Ds4Schedule::new(setup, Ds4Flavor::Mac)?),
        ScheduleKind::Ds4Linux => Box::new(Ds4Schedule::new(setup, Ds4Flavor::Linux)?),
        ScheduleKind::Qwen(peer) => Box::new(QwenSchedule::new(setup, peer)?),
        _ => Box::new(EngineSchedule::new(kind, setup)?),
    })
}

/// I/O a schedule did, over its whole run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IoCounters {
    /// All phases and tables together.
    pub totals: IoTotals,
    /// The engine prefill's page-cache warm-up (the peer's path has none).
    pub warm: WarmIo,
    /// The prefill's share (engine schedules; the peer's path does not
    /// split its counters by phase).
    pub prefill: Option<PhaseIo>,
    /// The decode steps' share, with the hint reads made between steps.
    pub decode: Option<PhaseIo>,
    /// What became of the hinted rows, per kind (engine schedules).
    pub hint_use: Option<engram::HintUse>,
}

/// Row and read counts, all phases and tables together (also the totals of
/// the report's `io`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoTotals {
    /// Row ids requested (with duplicates).
    pub rows_requested: u64,
    /// Rows that remained to fetch after deduplication (within a batch,
    /// and across the prompt by the engine's reuse store), served from the
    /// row cache or read from storage.
    pub rows_unique: u64,
    /// Rows served from a row cache.
    pub cache_hits: u64,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Read requests issued to storage.
    pub reads: u64,
    /// Rows served from the hot tier.
    pub hot_hits: u64,
}

/// The engine prefill's page-cache warm-up reads: rows read ahead of the
/// ring only to bring them into the page cache, kept out of the other
/// counts. Its own struct so the report flattens the same fields into its
/// JSON (`io.warm_rows`, ..).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct WarmIo {
    /// Rows read (not in `rows_unique`).
    pub warm_rows: u64,
    /// Read requests of those rows (not in `reads`).
    pub warm_reads: u64,
    /// Bytes those reads moved from storage (not in `bytes_read`, which
    /// holds the ring's later page-cache reads of the same rows).
    pub warm_bytes: u64,
}

/// Where one phase's rows came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PhaseIo {
    /// Rows served from the hot tier.
    pub hot_rows: u64,
    /// Rows read from storage (distinct per batch, neither hot nor cached).
    pub storage_rows: u64,
    /// Read requests issued to storage (rows sharing a page coalesced).
    pub storage_reads: u64,
    /// Rows read only to warm the page cache (not in `storage_rows`).
    pub warm_rows: u64,
    /// Read requests those rows took (not in `storage_reads`).
    pub warm_reads: u64,
    /// The storage reads' latencies summed, nanoseconds: over the phase's
    /// wall time, the reads it kept in flight on average.
    pub read_busy_ns: u64,
    /// Per table, the time a batch call was under way (overlapping calls
    /// of one table counted once), summed over the tables, nanoseconds.
    pub batch_busy_ns: u64,
    /// Tables with at least one batch call.
    pub tables_read: u32,
}

/// One run of a schedule: a sequence that takes a prefill, then decode steps.
pub trait Schedule {
    /// Name in reports.
    fn name(&self) -> &'static str;

    /// Starts the prefill of `tokens`, before layer 0 runs.
    fn prefill<'a>(&'a mut self, tokens: &[u32]) -> Result<Box<dyn PrefillRun + 'a>>;

    /// Appends `token` as a decode step. The driver counts the whole call
    /// as stall; a schedule that reads a table's rows here adds that time
    /// to `stall[table]` so it is put on that table, and the rest goes to
    /// table 0.
    fn step_begin(&mut self, token: u32, stall: &mut [Duration]) -> Result<()>;

    /// Blocks until the current step's rows of `table` are there, at the
    /// table's layer; copies them (f32) into `rows` if given. Returns the
    /// time blocked, not counting the copy.
    fn step_wait(&mut self, table: usize, rows: Option<&mut Vec<f32>>) -> Result<Duration>;

    /// Offers `hints` as guesses of the next tokens (a draft chain and
    /// alternatives). Schedules without hints ignore them.
    fn hint(&mut self, hints: &engram::Hints<'_>) -> Result<()>;

    /// The I/O done so far.
    fn io(&mut self) -> IoCounters;
}

/// A running prefill of one schedule.
pub trait PrefillRun {
    /// The forward pass is about to run `layer` over the chunk that starts
    /// at token `start` (a schedule may start reads here).
    fn layer_start(&mut self, layer: u32, start: u32) -> Result<()>;

    /// Blocks until rows of `table` for tokens up to `upto` are there (waits
    /// on one table ask for increasing `upto`; each covers the tokens since
    /// the previous one) and copies them (f32) into `rows` if given.
    /// Returns the time blocked, not counting the copy.
    fn wait(&mut self, table: usize, upto: u32, rows: Option<&mut Vec<f32>>) -> Result<Duration>;
}
