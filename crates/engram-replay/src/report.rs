//! What a replay measured, as the JSON document of `engram bench --json` and
//! as the terminal table.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::schedule::{IoCounters, PhaseIo};

/// The whole benchmark: its settings and one entry per schedule.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Model file or directory.
    pub model: String,
    /// Compute model (`gpu:m4-max-ds4`, `cpu:16x64`).
    pub compute: String,
    /// Prefill sweep (`layer` or `chunk`).
    pub sweep: String,
    /// Tokens per prefill chunk of the sweep.
    pub ubatch: usize,
    /// Hints given to `full`.
    pub hints: String,
    /// Table files evicted from the page cache before each schedule.
    pub cold: bool,
    /// The hot tier of the engine schedules, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot: Option<HotReport>,
    /// One entry per schedule, in the order run.
    pub schedules: Vec<ScheduleReport>,
}

/// What one schedule measured.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleReport {
    /// Schedule name.
    pub name: String,
    /// Prompt processing.
    pub prefill: PrefillReport,
    /// Decode steps.
    pub decode: DecodeReport,
    /// I/O over the whole run.
    pub io: IoReport,
    /// Peak resident memory during this schedule (the high-water mark is
    /// reset before it where the platform allows).
    pub peak_rss_bytes: u64,
    /// Digest of the cpu compute's final hidden states (cpu compute only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_checksum: Option<String>,
    /// Prefill stall of each chunk of the sweep, seconds (both tables).
    pub chunk_stall_seconds: Vec<f64>,
    /// Decode stall of each step, microseconds (both tables).
    pub step_stall_us: Vec<f64>,
}

/// Prefill timings.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillReport {
    /// Prompt tokens.
    pub tokens: usize,
    /// Wall time from the prefill's start to its last layer.
    pub seconds: f64,
    /// Time the compute model spent computing.
    pub compute_seconds: f64,
    /// Time blocked waiting on rows, all tables.
    pub stall_seconds: f64,
    /// The same per table.
    pub stall_seconds_table: Vec<f64>,
}

/// Decode timings.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeReport {
    /// Decode steps.
    pub tokens: usize,
    /// Wall time of all steps.
    pub seconds: f64,
    /// Time the compute model spent computing.
    pub compute_seconds: f64,
    /// Steps per second of wall time.
    pub tokens_per_s: f64,
    /// Stall per step, all tables.
    pub stall_us: StallSummary,
    /// Stall per step, per table.
    pub stall_us_table: Vec<StallSummary>,
}

/// Distribution of a per-token stall, microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StallSummary {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl StallSummary {
    /// Summarizes per-step stalls (HDR histogram, 3 significant digits;
    /// the mean is exact).
    pub fn of(stalls: &[Duration]) -> StallSummary {
        if stalls.is_empty() {
            return StallSummary::default();
        }
        // Up to an hour per step; longer stalls saturate at the top.
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3)
            .expect("the bounds and 3 significant digits are valid");
        for s in stalls {
            h.saturating_record(s.as_nanos().min(u128::from(u64::MAX)) as u64);
        }
        let total: Duration = stalls.iter().sum();
        let us = |ns: u64| ns as f64 / 1e3;
        StallSummary {
            mean: total.as_secs_f64() * 1e6 / stalls.len() as f64,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            max: us(h.max()),
        }
    }
}

/// I/O counters of one schedule.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IoReport {
    /// Row ids requested, with duplicates.
    pub rows_requested: u64,
    /// Rows left to fetch after deduplication.
    pub rows_unique: u64,
    /// Rows served from a row cache.
    pub cache_hits: u64,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Read requests issued.
    pub reads: u64,
    /// Rows served from the hot tier.
    pub hot_hits: u64,
    /// Rows per prefill token, by where they came from (engine schedules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_per_token: Option<PhaseRates>,
    /// Rows per decode step (hint reads between steps included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_per_step: Option<PhaseRates>,
}

/// Rows of one phase per token or step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseRates {
    /// Rows served by the hot tier.
    pub hot_rows: f64,
    /// Rows read from storage (distinct per batch; not hot, not cached).
    pub storage_rows: f64,
    /// Read requests issued to storage.
    pub storage_reads: f64,
}

impl PhaseRates {
    fn of(io: &PhaseIo, per: usize) -> PhaseRates {
        let per = per.max(1) as f64;
        PhaseRates {
            hot_rows: io.hot_rows as f64 / per,
            storage_rows: io.storage_rows as f64 / per,
            storage_reads: io.storage_reads as f64 / per,
        }
    }
}

impl IoReport {
    /// The report of `c` for a prefill of `prefill_tokens` and
    /// `decode_steps` steps.
    pub fn new(c: &IoCounters, prefill_tokens: usize, decode_steps: usize) -> IoReport {
        IoReport {
            rows_requested: c.rows_requested,
            rows_unique: c.rows_unique,
            cache_hits: c.cache_hits,
            bytes_read: c.bytes_read,
            reads: c.reads,
            hot_hits: c.hot_hits,
            prefill_per_token: c.prefill.map(|p| PhaseRates::of(&p, prefill_tokens)),
            decode_per_step: c.decode.map(|d| PhaseRates::of(&d, decode_steps)),
        }
    }
}

/// The hot tier a run used.
#[derive(Debug, Clone, Serialize)]
pub struct HotReport {
    /// The hot-row file.
    pub file: String,
    /// Its size.
    pub file_bytes: u64,
    /// Hot rows per table.
    pub rows: Vec<usize>,
    /// Corpus tokens it was profiled from.
    pub profile_tokens: u64,
    /// Time to load and check it.
    pub load_seconds: f64,
    /// File bytes per second of that load.
    pub load_bytes_per_s: f64,
}

impl HotReport {
    /// What `hot` is and how long it took to load.
    pub fn of(hot: &engram::hot::HotSet) -> HotReport {
        let secs = hot.load_time().as_secs_f64();
        HotReport {
            file: hot.path().display().to_string(),
            file_bytes: hot.file_bytes(),
            rows: hot.tables().iter().map(|t| t.len()).collect(),
            profile_tokens: hot.profile().tokens,
            load_seconds: secs,
            load_bytes_per_s: hot.file_bytes() as f64 / secs.max(1e-9),
        }
    }
}

impl Report {
    /// The report as one JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report holds only plain values")
    }

    /// The terminal table: one line per schedule, then what the columns mean.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<8} | {:>9} {:>9} {:>9} | {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} | {:>9} {:>7} {:>9}",
            "schedule",
            "prefill s",
            "compute s",
            "stall s",
            "decode/s",
            "floor/s",
            "mean us",
            "p50 us",
            "p99 us",
            "max us",
            "MB read",
            "hits",
            "peak MB"
        );
        for s in &self.schedules {
            let d = &s.decode;
            let floor = if d.compute_seconds > 0.0 {
                d.tokens as f64 / d.compute_seconds
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "{:<8} | {:>9.2} {:>9.2} {:>9.3} | {:>8.2} {:>8.2} {:>9.0} {:>9.0} {:>9.0} {:>9.0} | {:>9.1} {:>7} {:>9.0}",
                s.name,
                s.prefill.seconds,
                s.prefill.compute_seconds,
                s.prefill.stall_seconds,
                d.tokens_per_s,
                floor,
                d.stall_us.mean,
                d.stall_us.p50,
                d.stall_us.p99,
                d.stall_us.max,
                s.io.bytes_read as f64 / 1e6,
                s.io.cache_hits,
                s.peak_rss_bytes as f64 / 1e6,
            );
            if let Some(sum) = &s.output_checksum {
                let _ = writeln!(out, "{:<8}   output checksum {sum}", "");
            }
        }
        let _ = writeln!(
            out,
            "\nprefill: wall, compute and time blocked on rows (seconds); decode: steps/s against \
             the compute-only floor, and the per-step stall over both tables (us)."
        );
        self.rows_table(&mut out);
        out
    }
}

impl Report {
    /// Where rows came from, per prefill token and per decode step (engine
    /// schedules), and the hot set's load.
    fn rows_table(&self, out: &mut String) {
        if let Some(h) = &self.hot {
            let _ = writeln!(
                out,
                "\nhot set {}: {:?} rows, {:.1} MB loaded in {:.2} s ({:.0} MB/s)",
                h.file,
                h.rows,
                h.file_bytes as f64 / 1e6,
                h.load_seconds,
                h.load_bytes_per_s / 1e6
            );
        }
        let _ = writeln!(
            out,
            "\n{:<8} | {:>10} {:>10} {:>10} | {:>10} {:>10} {:>10}",
            "rows", "hot/tok", "stor/tok", "reads/tok", "hot/step", "stor/step", "reads/step"
        );
        for s in &self.schedules {
            let (Some(p), Some(d)) = (&s.io.prefill_per_token, &s.io.decode_per_step) else {
                continue;
            };
            let _ = writeln!(
                out,
                "{:<8} | {:>10.2} {:>10.2} {:>10.2} | {:>10.2} {:>10.2} {:>10.2}",
                s.name,
                p.hot_rows,
                p.storage_rows,
                p.storage_reads,
                d.hot_rows,
                d.storage_rows,
                d.storage_reads
            );
        }
        let _ = writeln!(
            out,
            "rows served by the hot tier, rows read from storage (distinct per batch, neither hot \
             nor cached) and read requests, per prefill token and per decode step (hint reads \
             between steps included)."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_follow_the_samples() {
        let stalls: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = StallSummary::of(&stalls);
        assert!((s.mean - 50.5).abs() < 1e-9);
        assert!((s.p50 - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p99 - 99.0).abs() < 0.1, "{s:?}");
        assert!((s.max - 100.0).abs() < 0.1, "{s:?}");
        assert_eq!(StallSummary::of(&[]), StallSummary::default());
    }
}
