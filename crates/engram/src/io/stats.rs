//! What one batch cost.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::stats::add_fields;

/// Counters and read latencies of one or more batches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Row ids asked for (with duplicates).
    pub rows_requested: u64,
    /// Distinct row ids asked for.
    pub rows_unique: u64,
    /// Distinct rows served from a row cache instead of storage.
    pub cache_hits: u64,
    /// Distinct rows served from the hot tier (`crate::hot`) instead of
    /// the row cache or storage.
    pub hot_hits: u64,
    /// Reads issued to storage (after coalescing).
    pub reads_issued: u64,
    /// Bytes read from storage (whole pages with direct I/O).
    pub bytes_read: u64,
    /// Wall time of the batch call(s).
    pub elapsed: Duration,
    /// Latency of each read issued, in nanoseconds (submit to completion).
    pub read_latencies_ns: Vec<u64>,
}

impl BatchStats {
    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &BatchStats) {
        add_fields!(self, other;
            rows_requested, rows_unique, cache_hits, hot_hits, reads_issued, bytes_read, elapsed,
        );
        self.read_latencies_ns
            .extend_from_slice(&other.read_latencies_ns);
    }

    /// The read latencies as a histogram in nanoseconds (3 significant
    /// digits; values above an hour are clamped).
    pub fn latency_histogram(&self) -> Histogram<u64> {
        latency_histogram(&self.read_latencies_ns)
    }
}

/// A histogram of nanosecond latencies (3 significant digits, 1 ns to 1 h).
pub fn latency_histogram(values_ns: &[u64]) -> Histogram<u64> {
    const HOUR_NS: u64 = 3_600_000_000_000;
    let mut h =
        Histogram::new_with_bounds(1, HOUR_NS, 3).expect("static histogram bounds are valid");
    for &v in values_ns {
        h.saturating_record(v.clamp(1, HOUR_NS));
    }
    h
}
