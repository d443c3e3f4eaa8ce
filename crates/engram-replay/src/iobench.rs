//! The harness of `engram iobench`: how fast a machine's storage serves
//! Engram rows through an engine's row source: single rows, decode batches
//! (a token's random rows of one table) and a prefill batch (the rows of
//! 2,048 consecutive tokens of real text, through the real hash); beside
//! them the device's random 4 KiB rate from the probe the bench's floor
//! divides by ([`crate::device`]), so both figures come from one place.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use engram::hash::Hasher;
use engram::io::stats::latency_histogram;
use engram::io::{IoConfig, RowSource};
use engram::layout::{encode, vendored_tokenizer};
use engram::model::Model;
use engram::open::{EngineBuilder, OpenEngine};
use engram::prefetch::PrefetchConfig;
use engram::splitmix::SplitMix64;
use engram::{Error, Result};
use serde::Serialize;

use crate::cputime;
use crate::device::{self, DeviceMode, DeviceReport};

/// Tokens in the prefill batch (one ds4 prefill chunk).
pub const PREFILL_TOKENS: usize = 2048;

/// What `engram iobench` runs.
#[derive(Debug, Clone)]
pub struct IobenchConfig {
    /// How the engine's row source reads.
    pub io: IoConfig,
    /// Evict the table files from the page cache before each phase (and
    /// each prefill repeat), reopening the engine.
    pub cold: bool,
    /// Times the prefill batch is read; the run with the median time is
    /// reported.
    pub repeats: usize,
    /// Single-row reads to time.
    pub singles: usize,
    /// Decode batches to time.
    pub batches: usize,
    /// The text the prefill batch hashes (its first [`PREFILL_TOKENS`]
    /// tokens).
    pub text: String,
    /// Table the prefill batch reads.
    pub table: usize,
    /// Seed of the random rows.
    pub seed: u64,
    /// Idle time before each single read and each decode batch.
    pub gap: Duration,
    /// How the device's random 4 KiB rate is learnt.
    pub device: DeviceMode,
}

/// The `engram iobench` report (its `--json` document).
#[derive(Debug, Serialize)]
pub struct IobenchReport {
    /// The backend actually used.
    pub backend: String,
    /// Reads in flight.
    pub depth: usize,
    /// The order a batch's reads were issued in (`spread` or `sorted`).
    pub read_order: &'static str,
    /// Whether each phase started cold.
    pub cold: bool,
    /// Idle microseconds before each single read and decode batch.
    pub gap_us: u64,
    /// Single-row reads.
    pub single: SingleReport,
    /// Decode batches.
    pub decode_batch: DecodeReport,
    /// The prefill batch.
    pub prefill_batch: PrefillReport,
    /// The device's random 4 KiB uncached rate at `depth`, from the probe
    /// the bench's floor uses (absent when turned off).
    pub device: Option<DeviceReport>,
}

/// Single-row reads, one call each.
#[derive(Debug, Serialize)]
pub struct SingleReport {
    /// Reads timed.
    pub rows: usize,
    /// Median time of one call, microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// Decode batches: one token's rows of one table, one call each.
#[derive(Debug, Serialize)]
pub struct DecodeReport {
    /// Batches timed.
    pub batches: usize,
    /// Rows in each (the layout's columns).
    pub rows_per_batch: usize,
    /// Mean time of one batch, microseconds.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
}

/// The prefill batch, read as one call.
#[derive(Debug, Serialize)]
pub struct PrefillReport {
    /// Tokens hashed.
    pub tokens: usize,
    /// Row ids requested.
    pub rows: usize,
    /// Distinct rows among them.
    pub unique_rows: u64,
    /// Time of the median run, seconds.
    pub seconds: f64,
    /// Distinct rows read per second.
    pub unique_rows_per_s: f64,
    /// Read requests of the median run (rows sharing a page coalesced, a
    /// row spanning two pages one read).
    pub reads: u64,
    /// Read requests per second: the figure to hold against a random
    /// 4 KiB read rate (fio's IOPS, the probe's).
    pub reads_per_s: f64,
    /// Reads in flight on average over the median run, by Little's law:
    /// the sum of its reads' latencies (from the backend's start of a read
    /// to its completion) over the call's wall time. Against `--depth` it
    /// says how much of the depth the backend kept at the device: a pread
    /// pool has `depth` workers and the waiting thread, a ring `depth`
    /// entries.
    pub mean_in_flight: f64,
    /// The process's CPU time (every thread, user and system) over the
    /// median run per read request, microseconds: the figure to hold
    /// against fio's own CPU per read.
    pub cpu_us_per_read: f64,
}

/// Runs the benchmark on the model at `path`; `note` hears progress.
pub fn run_iobench(
    path: &std::path::Path,
    config: &IobenchConfig,
    mut note: impl FnMut(&str),
) -> Result<IobenchReport> {
    let model = Model::open(path)?;
    let prefill_ids = prefill_rows(&model, config.table, &config.text)?;
    // Before any phase: the probe reads uncached, but its cold start
    // should not follow a phase's reads of the same pages.
    let device = device::probe(&model, config.io.depth, &config.device, &mut note)?;
    // The engine as embedders open it, without row cache or hot tier, so
    // every read reaches its row source.
    let builder = EngineBuilder::default()
        .with_io(config.io.clone())
        .with_prefetch(PrefetchConfig::default().with_readers(config.io.readers));
    let engine = builder.build(model.clone())?;
    if let Some(why) = &engine.note {
        note(&format!("note: {why}"));
    }
    note(&format!(
        "{} ({}), depth {}, {} tables",
        path.display(),
        engine.engine.source().name(),
        config.io.depth,
        engine.tables()
    ));
    let backend = engine.backend.name().to_string();
    let bench = Bench {
        engine: RefCell::new(Some(engine)),
        builder,
        model: &model,
        cold: config.cold,
        gap: config.gap,
        note: RefCell::new(&mut note),
    };
    let mut rng = SplitMix64(config.seed);
    let single = bench.singles(config.singles, &mut rng)?;
    let decode_batch = bench.decode_batches(config.batches, &mut rng)?;
    let prefill_batch = bench.prefill(config.table, &prefill_ids, config.repeats)?;
    Ok(IobenchReport {
        backend,
        depth: config.io.depth,
        read_order: config.io.read_order.name(),
        cold: config.cold,
        gap_us: config.gap.as_micros() as u64,
        single,
        decode_batch,
        prefill_batch,
        device,
    })
}

/// Real text for the default prefill batch: sources of the library (real
/// code, the same on every machine).
pub fn own_sources() -> String {
    const SOURCES: &[&str] = &[
        include_str!("../../engram/src/hash.rs"),
        include_str!("../../engram/src/io/batch.rs"),
        include_str!("../../engram/src/io/plan.rs"),
        include_str!("../../engram/src/io/psync.rs"),
        include_str!("../../engram/src/cache.rs"),
    ];
    SOURCES.concat()
}

/// The row ids of table `table` for the first [`PREFILL_TOKENS`] tokens of
/// `text` (vendored tokenizer, the model's layout, the real hash), in token
/// order: the layout's columns per token (24 for V4.1, 16 for Qwen4-Exp).
fn prefill_rows(model: &Model, table: usize, text: &str) -> Result<Vec<u32>> {
    let tokens = encode(vendored_tokenizer()?, text, "vendored")?;
    if tokens.len() < PREFILL_TOKENS {
        return Err(Error::InvalidArgument(format!(
            "the prefill text has {} tokens; iobench needs {PREFILL_TOKENS}",
            tokens.len()
        )));
    }
    if table >= model.tables.len() {
        return Err(Error::InvalidArgument(format!(
            "--table {table}: the model has {} tables",
            model.tables.len()
        )));
    }
    let hasher = Hasher::new(&model.layout)?;
    let mut history = hasher.new_history();
    let mut rows = Vec::new();
    hasher.hash(&mut history, &tokens[..PREFILL_TOKENS], None, &mut rows)?;
    let (columns, per_token) = (hasher.columns(), hasher.rows_per_token());
    Ok(rows
        .chunks_exact(per_token)
        .flat_map(|token| {
            token[table * columns..(table + 1) * columns]
                .iter()
                .copied()
        })
        .collect())
}

struct Bench<'a, N: FnMut(&str)> {
    /// The engine of the phase in progress (`None` between a cold phase's
    /// close and reopen).
    engine: RefCell<Option<OpenEngine>>,
    builder: EngineBuilder,
    model: &'a Model,
    cold: bool,
    /// Idle time before each timed read of the single and decode phases.
    gap: Duration,
    note: RefCell<&'a mut N>,
}

impl<N: FnMut(&str)> Bench<'_, N> {
    fn note(&self, text: &str) {
        (**self.note.borrow_mut())(text);
    }

    /// The row source for the next phase. When cold: the previous engine
    /// is closed first (pages an mmap source has mapped survive eviction),
    /// the files are evicted, and a new engine is opened.
    fn prepare(&self) -> Result<std::sync::Arc<dyn RowSource>> {
        let mut slot = self.engine.borrow_mut();
        if self.cold {
            slot.take();
            device::evict_tables(self.model, |path, what| {
                self.note(&format!("evicted {} ({what})", path.display()));
            })?;
        }
        let engine = match slot.take() {
            Some(engine) => engine,
            None => self.builder.build(self.model.clone())?,
        };
        let source = engine.engine.source().clone();
        *slot = Some(engine);
        Ok(source)
    }

    fn singles(&self, n: usize, rng: &mut SplitMix64) -> Result<SingleReport> {
        let source = self.prepare()?;
        self.note(&format!("{n} single-row reads ..."));
        let reads: Vec<(usize, Vec<u32>)> = (0..n)
            .map(|_| {
                let table = rng.below(source.tables() as u64) as usize;
                (table, vec![rng.below(source.table_rows(table)) as u32])
            })
            .collect();
        let times = time_reads(source.as_ref(), &reads, self.gap)?;
        let h = latency_histogram(&times);
        Ok(SingleReport {
            rows: n,
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
        })
    }

    fn decode_batches(&self, n: usize, rng: &mut SplitMix64) -> Result<DecodeReport> {
        let source = self.prepare()?;
        // Rows a decode step reads from one table (V4.1: 8 heads x orders
        // 2..4 = 24; Qwen4-Exp: 16).
        let per_batch = self.model.layout.columns();
        self.note(&format!("{n} decode batches of {per_batch} rows ..."));
        let reads: Vec<(usize, Vec<u32>)> = (0..n)
            .map(|b| {
                let table = b % source.tables();
                let rows = source.table_rows(table);
                let ids = (0..per_batch).map(|_| rng.below(rows) as u32).collect();
                (table, ids)
            })
            .collect();
        let times = time_reads(source.as_ref(), &reads, self.gap)?;
        let h = latency_histogram(&times);
        let mean = times.iter().sum::<u64>() as f64 / times.len().max(1) as f64;
        Ok(DecodeReport {
            batches: n,
            rows_per_batch: per_batch,
            mean_us: round2(mean / 1000.0),
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
        })
    }

    fn prefill(&self, table: usize, ids: &[u32], repeats: usize) -> Result<PrefillReport> {
        let mut runs = Vec::with_capacity(repeats.max(1));
        for run in 0..repeats.max(1) {
            let source = self.prepare()?;
            self.note(&format!(
                "prefill batch {}: {} rows of table {table} ...",
                run + 1,
                ids.len()
            ));
            let mut out = vec![0u8; ids.len() * source.row_bytes(table)];
            let (started, cpu) = (Instant::now(), cputime::process());
            let stats = source.read_rows(table, ids, &mut out)?;
            let seconds = started.elapsed().as_secs_f64();
            let cpu = cputime::process().saturating_sub(cpu).as_secs_f64();
            self.note(&format!(
                "{} unique rows in {} reads ({} MiB) in {seconds:.3} s",
                stats.rows_unique,
                stats.reads_issued,
                stats.bytes_read >> 20
            ));
            let busy_ns: u64 = stats.read_latencies_ns.iter().sum();
            runs.push((seconds, stats.rows_unique, stats.reads_issued, busy_ns, cpu));
        }
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (seconds, unique, reads, busy_ns, cpu) = runs[runs.len() / 2];
        Ok(PrefillReport {
            tokens: PREFILL_TOKENS,
            rows: ids.len(),
            unique_rows: unique,
            seconds: (seconds * 1e6).round() / 1e6,
            unique_rows_per_s: (unique as f64 / seconds).round(),
            reads,
            reads_per_s: (reads as f64 / seconds).round(),
            mean_in_flight: round2(busy_ns as f64 / 1e9 / seconds),
            cpu_us_per_read: round2(cpu * 1e6 / reads.max(1) as f64),
        })
    }
}

/// Each of `reads` (table, row ids) in turn, timed alone, each after
/// `gap` of sleep (an idle CPU and device, as between decode steps):
/// nanoseconds per read. The requests are drawn beforehand so only the
/// reads are timed.
fn time_reads(
    source: &dyn RowSource,
    reads: &[(usize, Vec<u32>)],
    gap: Duration,
) -> Result<Vec<u64>> {
    let mut out = Vec::new();
    let mut times = Vec::with_capacity(reads.len());
    for (table, ids) in reads {
        out.resize(ids.len() * source.row_bytes(*table), 0);
        if !gap.is_zero() {
            std::thread::sleep(gap);
        }
        let started = Instant::now();
        source.read_rows(*table, ids, &mut out)?;
        times.push(started.elapsed().as_nanos() as u64);
    }
    Ok(times)
}

fn us(ns: u64) -> f64 {
    round2(ns as f64 / 1000.0)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The text of `--text`, or [`own_sources`].
pub fn text_of(path: Option<&std::path::Path>) -> Result<String> {
    match path {
        Some(p) => std::fs::read_to_string(p).map_err(|e| Error::io(p, e)),
        None => Ok(own_sources()),
    }
}
