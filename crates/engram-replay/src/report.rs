//! What a replay measured, as the JSON document of `engram bench --json` and
//! as the terminal table.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use std::collections::BTreeMap;

use crate::device::DeviceReport;
use crate::floor::FloorReport;
use crate::schedule::{IoCounters, IoTotals, PhaseIo, WarmIo};

/// The whole benchmark: its settings, the device, and per prompt every
/// repeat of every schedule with the median and spread of each figure.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// What the fields mean, for a reader of the JSON alone.
    pub about: BTreeMap<&'static str, &'static str>,
    /// Model file or directory.
    pub model: String,
    /// Compute model (`gpu:m4-max-ds4`, `cpu:16x64`).
    pub compute: String,
    /// Prefill sweep (`layer` or `chunk`).
    pub sweep: String,
    /// Tokens per prefill chunk of the sweep.
    pub ubatch: usize,
    /// Tokens one prefill wait asks for at least (0: one chunk).
    pub wait_tokens: usize,
    /// The engine schedules kept each prefill wait's rows until the next
    /// wait (`--hold-rows`) instead of handing them back once taken.
    pub hold_rows: bool,
    /// Hints given to `full`.
    pub hints: String,
    /// Table files evicted from the page cache before each schedule.
    pub cold: bool,
    /// Uncached reads in the engine schedules (`--direct`).
    pub direct: bool,
    /// Runs of each schedule per prompt (interleaved: s1, s2, .., s1, s2, ..).
    pub repeat: usize,
    /// Cores the process was pinned to (`--cores`), if any.
    pub cores: Option<usize>,
    /// The device's measured random-read rate, the floor's divisor.
    pub device: Option<DeviceReport>,
    /// The hot tier of the engine schedules, if any (loaded once per bench,
    /// shared by every run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot: Option<HotReport>,
    /// One entry per prompt, in the order run.
    pub prompts: Vec<PromptReport>,
    /// Per ratio, the geometric mean over prompts of its per-prompt median.
    pub geomean: Vec<RatioReport>,
}

/// One prompt's runs.
#[derive(Debug, Clone, Serialize)]
pub struct PromptReport {
    /// Where its tokens came from.
    pub prompt: String,
    /// Prompt tokens prefilled.
    pub prefill_tokens: usize,
    /// Decode steps after it.
    pub decode_tokens: usize,
    /// Per schedule, every figure of [`ScheduleReport`] over the repeats as
    /// `{"median", "min", "max"}` (per-chunk and per-step series left out).
    pub schedules: Vec<serde_json::Value>,
    /// Ratios between schedules, each taken within a repeat.
    pub ratios: Vec<RatioReport>,
    /// `repeats[r][s]`: repeat `r` of schedule `s`, every figure.
    pub repeats: Vec<Vec<ScheduleReport>>,
}

/// The median and spread of one figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Median (the mean of the middle two for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// Of `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

/// One ratio between two schedules' figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatioReport {
    /// The figure, as a path into [`ScheduleReport`]'s JSON
    /// (`prefill.stall_seconds`).
    pub figure: String,
    /// The schedule on top.
    pub schedule: String,
    /// The schedule below.
    pub over: String,
    /// Over the repeats of a prompt (or, in `geomean`, the geometric mean
    /// of the prompts' medians with their smallest and largest); absent
    /// when the figure below is 0 in every repeat.
    pub value: Option<Spread>,
    /// Repeats (or prompts) it was defined in.
    pub count: usize,
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
    /// CPU time outside the compute model.
    pub cpu: CpuReport,
    /// The physical floor of the prefill (when the device is known).
    pub floor: Option<FloorReport>,
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
    /// Per step, microseconds the forward thread spent in the hint call
    /// (`full` with draft hints; zero for the other schedules): not in the
    /// stall, but a host pays it before it launches the step's layers.
    pub hint_call_us: StallSummary,
    /// Per step, microseconds the forward thread spent in `step_begin`
    /// (part of the stall): the hash, the reads' hand-off and whatever the
    /// schedule reads there.
    pub step_begin_us: StallSummary,
}

/// CPU time (user + system, every thread of the process) a schedule cost
/// outside the compute model: the process's CPU time over a phase minus the
/// forward thread's CPU time inside the compute model's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuReport {
    /// Prefill, seconds.
    pub prefill_seconds: f64,
    /// Decode, seconds.
    pub decode_seconds: f64,
    /// Prefill, microseconds per prompt token.
    pub prefill_us_per_token: f64,
    /// Decode, microseconds per step.
    pub decode_us_per_step: f64,
    /// The compute model's own CPU time that was subtracted, prefill and
    /// decode, seconds.
    pub compute_seconds: [f64; 2],
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
    /// The run's counts (flattened: `io.rows_requested`, ...).
    #[serde(flatten)]
    pub totals: IoTotals,
    /// The prefill's page-cache warm-up (engine schedules), as
    /// `warm_rows`, `warm_reads` and `warm_bytes` beside the others.
    #[serde(flatten)]
    pub warm: WarmIo,
    /// Rows per prefill token, by where they came from (engine schedules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_per_token: Option<PhaseRates>,
    /// Rows per decode step (hint reads between steps included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_per_step: Option<PhaseRates>,
    /// What became of the hinted rows, per kind: `draft` and
    /// `alternative`, each with `rows_read`, `rows_used`, `rows_dropped`
    /// and `hit_rate` (used over read; engine schedules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hints: Option<engram::HintUse>,
    /// Storage reads in flight on average over the prefill's wall time
    /// (Little's law: the reads' summed latencies over it; engine
    /// schedules): against the engine's depth, how busy the prefill kept
    /// the device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_mean_in_flight: Option<f64>,
    /// Storage reads in flight on average while a prefill batch was being
    /// read: the reads' summed latencies over the batch calls' summed wall
    /// times (engine schedules, one table read: batches of two tables
    /// overlap in time and share the depth). Near the depth with a low
    /// `prefill_mean_in_flight`: the device waited between batches; well
    /// below it: the backend kept fewer reads at the device than it may.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_batch_in_flight: Option<f64>,
    /// The prefill's batch calls' wall times summed, seconds (engine
    /// schedules): against its wall time, how long reads were under way.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_batch_seconds: Option<f64>,
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
    /// Rows read only to warm the page cache (not in `storage_rows`).
    pub warm_rows: f64,
    /// Read requests of those rows (not in `storage_reads`).
    pub warm_reads: f64,
}

impl PhaseRates {
    fn of(io: &PhaseIo, per: usize) -> PhaseRates {
        let per = per.max(1) as f64;
        PhaseRates {
            hot_rows: io.hot_rows as f64 / per,
            storage_rows: io.storage_rows as f64 / per,
            storage_reads: io.storage_reads as f64 / per,
            warm_rows: io.warm_rows as f64 / per,
            warm_reads: io.warm_reads as f64 / per,
        }
    }
}

/// `x` to two decimals.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

impl IoReport {
    /// The report of `c` for a prefill of `prefill_tokens` over
    /// `prefill_wall` and `decode_steps` steps.
    pub fn new(
        c: &IoCounters,
        prefill_tokens: usize,
        prefill_wall: Duration,
        decode_steps: usize,
    ) -> IoReport {
        let wall = prefill_wall.as_secs_f64();
        IoReport {
            totals: c.totals,
            warm: c.warm,
            prefill_per_token: c.prefill.map(|p| PhaseRates::of(&p, prefill_tokens)),
            decode_per_step: c.decode.map(|d| PhaseRates::of(&d, decode_steps)),
            hints: c.hint_use.clone(),
            prefill_mean_in_flight: c
                .prefill
                .filter(|_| wall > 0.0)
                .map(|p| round2(p.read_busy_ns as f64 / 1e9 / wall)),
            prefill_batch_in_flight: c
                .prefill
                .filter(|p| p.batch_busy_ns > 0 && p.tables_read == 1)
                .map(|p| round2(p.read_busy_ns as f64 / p.batch_busy_ns as f64)),
            prefill_batch_seconds: c.prefill.map(|p| p.batch_busy_ns as f64 / 1e9),
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

    #[test]
    fn warm_up_counts_are_new_fields_beside_the_old_ones() {
        let counters = IoCounters {
            totals: IoTotals {
                bytes_read: 8192,
                reads: 2,
                ..IoTotals::default()
            },
            warm: WarmIo {
                warm_rows: 30,
                warm_reads: 20,
                warm_bytes: 4096 * 20,
            },
            prefill: Some(PhaseIo {
                storage_reads: 2,
                warm_rows: 30,
                warm_reads: 20,
                read_busy_ns: 3_000_000_000,
                batch_busy_ns: 500_000_000,
                tables_read: 1,
                ..PhaseIo::default()
            }),
            ..IoCounters::default()
        };
        let json =
            serde_json::to_value(IoReport::new(&counters, 10, Duration::from_secs(2), 1)).unwrap();
        // The old fields keep their names and values; the warm-up's are
        // beside them, not added into them.
        assert_eq!(json["bytes_read"], 8192);
        assert_eq!(json["reads"], 2);
        assert_eq!(json["warm_bytes"], 4096 * 20);
        assert_eq!(json["warm_reads"], 20);
        assert_eq!(json["prefill_per_token"]["storage_reads"], 0.2);
        assert_eq!(json["prefill_per_token"]["warm_rows"], 3.0);
        assert!(json.get("warm").is_none(), "flattened: {json}");
        // 3 s of read latency over a 2 s prefill: 1.5 reads in flight.
        assert_eq!(json["prefill_mean_in_flight"], 1.5);
        // ... read in batches taking 0.5 s in all: 6 in flight within them.
        assert_eq!(json["prefill_batch_in_flight"], 6.0);
        assert_eq!(json["prefill_batch_seconds"], 0.5);
        // No engine counters (a peer), no figure.
        let peer = serde_json::to_value(IoReport::new(
            &IoCounters::default(),
            10,
            Duration::from_secs(2),
            1,
        ))
        .unwrap();
        for key in [
            "prefill_mean_in_flight",
            "prefill_batch_in_flight",
            "prefill_batch_seconds",
        ] {
            assert!(peer.get(key).is_none(), "{key}: {peer}");
        }
    }
}
