//! `engram iobench`: how fast this machine's storage serves Engram rows
//! through each backend. The flags become an [`IobenchConfig`]; the
//! harness (single rows, decode batches, the prefill batch, and the device
//! probe the bench's floor also uses) is [`engram_replay::iobench`].

use std::path::PathBuf;
use std::time::Duration;

use engram::io::{Backend, IoConfig, ReadOrder};
use engram::{Error, Result};
use engram_replay::iobench::{run_iobench, text_of, IobenchConfig, IobenchReport};

use super::bench::DeviceArgs;

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
    /// Order of a batch's reads: sorted (by file offset) or spread (one
    /// from each of `--depth` runs of the sorted batch in turn).
    #[arg(long, default_value = "sorted")]
    pub read_order: String,
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
    /// How the device's random 4 KiB rate (the probe the bench's floor
    /// divides by) is learnt; `--no-floor` leaves it out.
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Runs the benchmark.
pub fn run(args: &IobenchArgs) -> Result<()> {
    let backend: Backend = args.backend.parse()?;
    let read_order = ReadOrder::parse(&args.read_order).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "--read-order {:?}: expected spread or sorted",
            args.read_order
        ))
    })?;
    let io = IoConfig::default()
        .with_backend(backend)
        .with_read_order(read_order)
        .with_depth(args.depth)
        .with_direct(args.direct)
        .with_max_batch_bytes(args.max_batch_mib.saturating_mul(1 << 20));
    let config = IobenchConfig {
        io,
        cold: args.cold,
        repeats: args.repeats,
        singles: args.singles,
        batches: args.batches,
        text: text_of(args.text.as_deref())?,
        table: args.table,
        seed: args.seed,
        gap: Duration::from_micros(args.gap_us),
        device: args.device.mode(),
    };
    let report = run_iobench(&args.model, &config, |note| eprintln!("iobench: {note}"))?;
    print_report(&report, args.json)
}

fn print_report(r: &IobenchReport, json: bool) -> Result<()> {
    if json {
        let doc = serde_json::to_string_pretty(r)
            .map_err(|e| Error::InvalidArgument(format!("JSON output: {e}")))?;
        crate::emit(&doc);
        return Ok(());
    }
    crate::emit(&format!(
        "backend {}  depth {}  read order {}  cold {}  gap {} us",
        r.backend, r.depth, r.read_order, r.cold, r.gap_us
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
        "prefill batch  {} tokens  {} rows  {} unique  {} reads  {:.3} s  {:.0} unique rows/s  \
         {:.0} reads/s  {:.1} reads in flight  {:.1} us CPU a read",
        p.tokens,
        p.rows,
        p.unique_rows,
        p.reads,
        p.seconds,
        p.unique_rows_per_s,
        p.reads_per_s,
        p.mean_in_flight,
        p.cpu_us_per_read
    ));
    if let Some(d) = &r.device {
        crate::emit(&format!(
            "device         random 4 KiB uncached  {:.0} reads/s at depth {} ({})",
            d.iops, d.depth, d.source
        ));
    }
    Ok(())
}
