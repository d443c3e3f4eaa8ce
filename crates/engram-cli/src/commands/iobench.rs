//! `engram iobench`: how fast this machine's storage serves Engram rows
//! through each backend: single rows, decode batches (a token's random rows of one
//! table) and a prefill batch (the rows of 2,048 consecutive tokens of real
//! text, through the real hash).

use std::cell::RefCell;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::hash::Hasher;
use engram::io::{cachectl, open_source, stats::latency_histogram, Backend, IoConfig, RowSource};
use engram::layout::{encode, vendored_tokenizer};
use engram::model::{Model, TableLocation};
use engram::splitmix::SplitMix64;
use engram::{Error, Result};
use serde::Serialize;

/// Tokens in the prefill batch (one ds4 prefill chunk).
const PREFILL_TOKENS: usize = 2048;

/// Arguments of `engram iobench`.
#[derive(Debug, clap::Args)]
pub struct IobenchArgs {
    /// Model: a ds4 `.gguf` file or a Hugging Face checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// I/O backend: auto, psync, uring or mmap.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Reads in flight: pool threads (psync) or queue depth (uring).
    #[arg(long, default_value_t = 64)]
    pub depth: usize,
    /// Evict the table files from the page cache before each phase
    /// (Linux: fsync + POSIX_FADV_DONTNEED; macOS: F_NOCACHE, no eviction).
    #[arg(long)]
    pub cold: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Bypass the page cache on every read (O_DIRECT / F_NOCACHE).
    #[arg(long)]
    pub direct: bool,
    /// Bound on the bounce memory of one batch, in MiB (larger batches are
    /// read in sub-batches).
    #[arg(long, default_value_t = 16)]
    pub max_batch_mib: usize,
    /// Times the prefill batch is read (evicted before each with --cold);
    /// the run with the median time is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Single-row reads to time.
    #[arg(long, default_value_t = 2000)]
    pub singles: usize,
    /// Decode batches to time.
    #[arg(long, default_value_t = 500)]
    pub batches: usize,
    /// Text for the prefill batch (default: this program's own sources).
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// Table the prefill batch reads.
    #[arg(long, default_value_t = 0)]
    pub table: usize,
    /// Seed of the random rows.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Idle time before each single read and each decode batch, in
    /// microseconds: the forward pass a decode step computes between its
    /// reads (e.g. 13300 for a 13.3 ms step). Some devices serve a read
    /// after an idle gap more slowly than one of a back-to-back stream.
    #[arg(long, default_value_t = 0)]
    pub gap_us: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    backend: String,
    depth: usize,
    cold: bool,
    /// Idle microseconds before each single read and decode batch.
    gap_us: u64,
    single: SingleReport,
    decode_batch: DecodeReport,
    prefill_batch: PrefillReport,
}

#[derive(Debug, Serialize)]
struct SingleReport {
    rows: usize,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Serialize)]
struct DecodeReport {
    batches: usize,
    rows_per_batch: usize,
    mean_us: f64,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Serialize)]
struct PrefillReport {
    tokens: usize,
    rows: usize,
    unique_rows: u64,
    seconds: f64,
    unique_rows_per_s: f64,
}

/// Runs the benchmark.
pub fn run(args: &IobenchArgs) -> Result<()> {
    let model = Model::open(&args.model)?;
    let backend: Backend = args.backend.parse()?;
    let config = IoConfig::default()
        .with_backend(backend)
        .with_depth(args.depth)
        .with_direct(args.direct)
        .with_max_batch_bytes(args.max_batch_mib.saturating_mul(1 << 20));
    let opened = open_source(&model.tables, &config)?;
    if let Some(note) = &opened.note {
        eprintln!("iobench: note: {note}");
    }
    let source = opened.source;
    eprintln!(
        "iobench: {} ({}), depth {}, {} tables",
        args.model.display(),
        source.name(),
        args.depth,
        source.tables()
    );
    let text = prefill_text(args.text.as_deref())?;
    let prefill_ids = prefill_rows(&model, args.table, &text)?;
    let mut rng = SplitMix64(args.seed);
    let bench = Bench {
        source: RefCell::new(Some(source)),
        tables: &model.tables,
        decode_rows: model.layout.columns(),
        config,
        cold: args.cold,
        gap: Duration::from_micros(args.gap_us),
    };
    let single = bench.singles(args.singles, &mut rng)?;
    let decode_batch = bench.decode_batches(args.batches, &mut rng)?;
    let prefill_batch = bench.prefill(args.table, &prefill_ids, args.repeats)?;
    let report = Report {
        backend: opened.backend.name().to_string(),
        depth: args.depth,
        cold: args.cold,
        gap_us: args.gap_us,
        single,
        decode_batch,
        prefill_batch,
    };
    print_report(&report, args.json)
}

/// The text the prefill batch hashes: `--text`, else this program's own
/// library sources (real code, the same on every machine).
fn prefill_text(path: Option<&Path>) -> Result<String> {
    match path {
        Some(p) => std::fs::read_to_string(p).map_err(|e| Error::io(p, e)),
        None => Ok(OWN_SOURCES.concat()),
    }
}

/// Real text for the default prefill batch: sources of the library.
const OWN_SOURCES: &[&str] = &[
    include_str!("../../../engram/src/hash.rs"),
    include_str!("../../../engram/src/io/batch.rs"),
    include_str!("../../../engram/src/io/plan.rs"),
    include_str!("../../../engram/src/io/psync.rs"),
    include_str!("../../../engram/src/cache.rs"),
];

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

struct Bench<'a> {
    source: RefCell<Option<Arc<dyn RowSource>>>,
    tables: &'a [TableLocation],
    /// Rows a decode step reads from one table (V4.1: 8 heads x orders
    /// 2..4 = 24; Qwen4-Exp: 16).
    decode_rows: usize,
    config: IoConfig,
    cold: bool,
    /// Idle time before each timed read of the single and decode phases.
    gap: Duration,
}

impl Bench<'_> {
    /// The source for the next phase. With `--cold`: the previous source
    /// is closed first (pages an mmap source has mapped survive eviction),
    /// the files are evicted, and a new source is opened.
    fn prepare(&self) -> Result<Arc<dyn RowSource>> {
        let mut slot = self.source.borrow_mut();
        if self.cold {
            slot.take();
            self.maybe_evict()?;
        }
        let source = match slot.take() {
            Some(source) => source,
            None => open_source(self.tables, &self.config)?.source,
        };
        *slot = Some(source.clone());
        Ok(source)
    }

    /// Evicts every table file when `--cold`.
    fn maybe_evict(&self) -> Result<()> {
        if !self.cold {
            return Ok(());
        }
        let mut paths: Vec<&Path> = Vec::new();
        for t in self.tables {
            paths.extend(t.files());
        }
        paths.sort();
        paths.dedup();
        for path in paths {
            let file = File::open(path).map_err(|e| Error::io(path, e))?;
            let what = cachectl::evict(&file).map_err(|e| Error::io(path, e))?;
            eprintln!("iobench: evicted {} ({what})", path.display());
        }
        Ok(())
    }

    fn singles(&self, n: usize, rng: &mut SplitMix64) -> Result<SingleReport> {
        let source = self.prepare()?;
        eprintln!("iobench: {n} single-row reads ...");
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
        eprintln!(
            "iobench: {n} decode batches of {} rows ...",
            self.decode_rows
        );
        let reads: Vec<(usize, Vec<u32>)> = (0..n)
            .map(|b| {
                let table = b % source.tables();
                let rows = source.table_rows(table);
                let ids = (0..self.decode_rows)
                    .map(|_| rng.below(rows) as u32)
                    .collect();
                (table, ids)
            })
            .collect();
        let times = time_reads(source.as_ref(), &reads, self.gap)?;
        let h = latency_histogram(&times);
        let mean = times.iter().sum::<u64>() as f64 / times.len().max(1) as f64;
        Ok(DecodeReport {
            batches: n,
            rows_per_batch: self.decode_rows,
            mean_us: round2(mean / 1000.0),
            p50_us: us(h.value_at_quantile(0.5)),
            p99_us: us(h.value_at_quantile(0.99)),
        })
    }

    fn prefill(&self, table: usize, ids: &[u32], repeats: usize) -> Result<PrefillReport> {
        let mut runs = Vec::with_capacity(repeats.max(1));
        for run in 0..repeats.max(1) {
            let source = self.prepare()?;
            eprintln!(
                "iobench: prefill batch {}: {} rows of table {table} ...",
                run + 1,
                ids.len()
            );
            let mut out = vec![0u8; ids.len() * source.row_bytes(table)];
            let started = Instant::now();
            let stats = source.read_rows(table, ids, &mut out)?;
            let seconds = started.elapsed().as_secs_f64();
            eprintln!(
                "iobench: {} unique rows in {} reads ({} MiB) in {seconds:.3} s",
                stats.rows_unique,
                stats.reads_issued,
                stats.bytes_read >> 20
            );
            runs.push((seconds, stats.rows_unique));
        }
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (seconds, unique) = runs[runs.len() / 2];
        Ok(PrefillReport {
            tokens: PREFILL_TOKENS,
            rows: ids.len(),
            unique_rows: unique,
            seconds: (seconds * 1e6).round() / 1e6,
            unique_rows_per_s: (unique as f64 / seconds).round(),
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

fn print_report(r: &Report, json: bool) -> Result<()> {
    if json {
        let doc = serde_json::to_string_pretty(r)
            .map_err(|e| Error::InvalidArgument(format!("JSON output: {e}")))?;
        crate::emit(&doc);
        return Ok(());
    }
    crate::emit(&format!(
        "backend {}  depth {}  cold {}  gap {} us",
        r.backend, r.depth, r.cold, r.gap_us
    ));
    crate::emit(&format!(
        "single rows    {:>8}  p50 {:>9.1} us  p99 {:>9.1} us",
        r.single.rows, r.single.p50_us, r.single.p99_us
    ));
    let d = &r.decode_batch;
    crate::emit(&format!(
        "decode batches {:>8}  x{} rows  mean {:.1} us  p50 {:.1} us  p99 {:.1} us",
        d.batches, d.rows_per_batch, d.mean_us, d.p50_us, d.p99_us
    ));
    let p = &r.prefill_batch;
    crate::emit(&format!(
        "prefill batch  {} tokens  {} rows  {} unique  {:.3} s  {:.0} unique rows/s",
        p.tokens, p.rows, p.unique_rows, p.seconds, p.unique_rows_per_s
    ));
    Ok(())
}
