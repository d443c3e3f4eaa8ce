//! Reads batches of random 264-byte rows from a raw file of packed rows with
//! each backend and prints throughput and batch latency: a quick check of
//! the I/O engines without a model file.
//!
//! `cargo run --release -p engram --example random_rows -- FILE [BATCH] [DEPTH] [direct]`

mod args;

use std::time::Instant;

use engram::codec::Encoding;
use engram::io::{cachectl, open_source, stats::latency_histogram, Backend, IoConfig};
use engram::model::TableLocation;

fn main() -> engram::Result<()> {
    let args = args::Args::new("random_rows FILE [BATCH] [DEPTH] [direct]");
    let path = args.required(1);
    let batch: usize = args.number(2, "BATCH", 24);
    let depth: usize = args.number(3, "DEPTH", 64);
    let direct = args.optional(4) == Some("direct");
    let len = std::fs::metadata(path)
        .map_err(|e| engram::Error::io(path, e))?
        .len();
    let table = TableLocation::packed(0, path.into(), 0, len / 264, Encoding::E4m3E8m0Row264);
    let mut x = 0x1234_5678_9abc_def1u64;
    for backend in [Backend::Uring, Backend::Psync, Backend::Mmap] {
        let config = IoConfig::default()
            .with_backend(backend)
            .with_depth(depth)
            .with_direct(direct);
        let source = match open_source(std::slice::from_ref(&table), &config) {
            Ok(o) => o.source,
            Err(e) => {
                eprintln!("{backend:?}: {e}");
                continue;
            }
        };
        let file = std::fs::File::open(path).map_err(|e| engram::Error::io(path, e))?;
        cachectl::evict(&file).map_err(|e| engram::Error::io(path, e))?;
        let rounds = (200_000 / batch).clamp(3, 2000);
        let mut times = Vec::new();
        let mut unique = 0;
        let mut reads = engram::io::BatchStats::default();
        let started = Instant::now();
        let mut out = vec![0u8; batch * 264];
        for _ in 0..rounds {
            let ids: Vec<u32> = (0..batch)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % table.rows) as u32
                })
                .collect();
            let t = Instant::now();
            let stats = source.read_rows(0, &ids, &mut out)?;
            times.push(t.elapsed().as_nanos() as u64);
            unique += stats.rows_unique;
            reads.merge(&stats);
        }
        let secs = started.elapsed().as_secs_f64();
        let h = latency_histogram(&times);
        let reads_h = reads.latency_histogram();
        println!(
            "{:<14} batch {batch:>6} depth {depth:>3}: {:>9.0} unique rows/s  batch p50 {:>9.1} us  p99 {:>9.1} us  read mean {:>7.1} us p50 {:>7.1} us ({} reads)",
            source.name(),
            unique as f64 / secs,
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
            reads_h.mean() / 1e3,
            reads_h.value_at_quantile(0.5) as f64 / 1e3,
            reads.reads_issued
        );
    }
    Ok(())
}
