//! Stall and I/O telemetry: per phase (prefill, decode, hints), per table.
//!
//! Stall is the wall time a consumer spent blocked in a wait (a prefill
//! `wait`, a decode `step_wait`), attributed evenly to the tokens the wait
//! covered. Latency summaries come from HDR histograms (3 significant
//! digits) and are reported in microseconds. [`Stats`] is a plain struct
//! that serializes to JSON with serde; [`StatsRecorder`] is the thread-safe
//! collector the scheduler feeds.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::io::BatchStats;

/// Adds the named counters of `$from` into `$into`, field by field
/// (`into.a += from.a; ...`): the sums of [`BatchStats::merge`],
/// [`StatsRecorder::record_batch`] and [`TableStats::add_counts`], which
/// share most of their counters, written once.
macro_rules! add_fields {
    ($into:expr, $from:expr; $($field:ident),+ $(,)?) => {
        $($into.$field += $from.$field;)+
    };
}
pub(crate) use add_fields;

/// Mean, percentiles and maximum of a latency distribution, in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples (tokens for stalls, reads for read latency).
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest sample.
    pub max_us: f64,
}

impl Summary {
    /// Summarizes a histogram of nanosecond values.
    pub fn from_histogram(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        let us = |ns: u64| ns as f64 / 1_000.0;
        Summary {
            count: h.len(),
            mean_us: h.mean() / 1_000.0,
            p50_us: us(h.value_at_quantile(0.50)),
            p90_us: us(h.value_at_quantile(0.90)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
        }
    }
}

/// What one table cost in one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TableStats {
    /// Table index (layout order).
    pub table: usize,
    /// Waits the consumer made on this table.
    pub waits: u64,
    /// Tokens those waits covered.
    pub tokens: u64,
    /// Total time blocked in those waits, microseconds (a prefill wait
    /// that found its rows ready did not block: it adds no time, and its
    /// call costs about a microsecond).
    pub stall_total_us: f64,
    /// Stall per token (each wait's stall spread over its tokens).
    pub stall_per_token: Summary,
    /// Row ids requested (with duplicates).
    pub rows_requested: u64,
    /// Distinct row ids per batch, summed over batches.
    pub rows_unique: u64,
    /// Rows served from the row cache.
    pub cache_hits: u64,
    /// Rows served from the hot tier (distinct per batch, like
    /// `cache_hits`); rows read from storage are `rows_unique - cache_hits
    /// - hot_hits`.
    #[serde(default)]
    pub hot_hits: u64,
    /// Row ids a prefill served from its whole-prompt reuse store without
    /// asking the source (not counted in `rows_requested`: the rows the
    /// consumer asked for are `rows_requested + reuse_hits`).
    #[serde(default)]
    pub reuse_hits: u64,
    /// Row ids a prefill read ahead into its reuse store (tokens past its
    /// ring, while the ring was full); counted in `rows_requested` too, so
    /// the consumer's rows are `rows_requested - ahead_rows + reuse_hits`.
    #[serde(default)]
    pub ahead_rows: u64,
    /// Rows a prefill read only to bring them into the page cache
    /// (`Priority::Warm`: a later ring read finds them there; the bytes are
    /// dropped), distinct per batch and not served by a row cache or hot
    /// tier. Kept apart from every other row and read count:
    /// `rows_unique`, `reads_issued` and `bytes_read` leave them out, so a
    /// prefill's reads moved `bytes_read + warm_bytes` (a warmed row is in
    /// both: read from storage by the warm-up, then from the page cache by
    /// the ring).
    #[serde(default)]
    pub warm_rows: u64,
    /// Reads issued to storage for those rows.
    #[serde(default)]
    pub warm_reads: u64,
    /// Bytes those reads moved from storage.
    #[serde(default)]
    pub warm_bytes: u64,
    /// Reads issued to storage.
    pub reads_issued: u64,
    /// Bytes read from storage.
    pub bytes_read: u64,
    /// Batches (read calls) issued.
    pub batches: u64,
    /// Latency of each storage read.
    pub read_latency: Summary,
    /// Wall time of each batch call.
    pub batch_latency: Summary,
    /// Wall time, in nanoseconds, while at least one batch call of the
    /// table was under way: calls that overlap (a one-table prefill keeps
    /// two batches in flight) count once.
    #[serde(default)]
    pub batch_busy_ns: u64,
}

/// What one phase cost, per table and in total.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseStats {
    /// One entry per table.
    pub tables: Vec<TableStats>,
    /// Stall per token summed over the tables.
    pub stall_per_token_total: Summary,
}

/// Everything the scheduler measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Prefill waits and reads.
    pub prefill: PhaseStats,
    /// Decode steps.
    pub decode: PhaseStats,
    /// Low-priority hint reads (stall fields stay empty: nobody waits on them).
    pub hints: PhaseStats,
    /// What became of the hinted rows, per kind of hint.
    #[serde(default)]
    pub hint_use: HintUse,
}

/// The kinds of hint a runtime gives ([`crate::prefetch::Hints`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintKind {
    /// A token of a draft chain (a multi-token-prediction head's guesses).
    Draft,
    /// An alternative of the next token (a top-k entry).
    Alternative,
}

/// What became of the hinted rows, per kind of hint. A hint is counted
/// once it is resolved: when the step at its position begins, or when a
/// step, a rollback or a prefill makes it stale (it guessed a token that
/// did not come); hints still outstanding are not counted yet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HintUse {
    /// Tokens of draft chains.
    pub draft: HintKindUse,
    /// Alternatives of the next token.
    pub alternative: HintKindUse,
}

/// One kind's hinted rows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HintKindUse {
    /// Hinted rows whose hint read ran (row-cache hits among them
    /// included: the hint asked for them).
    pub rows_read: u64,
    /// Of those, rows the step at their position asked for.
    pub rows_used: u64,
    /// Hinted rows never read: dropped while queued because a begun step
    /// made them stale, or pushed out of the bounded hint queue.
    pub rows_dropped: u64,
    /// `rows_used / rows_read`; absent while no row was read.
    pub hit_rate: Option<f64>,
}

impl HintKindUse {
    pub(crate) fn add(&mut self, other: &HintKindUse) {
        add_fields!(self, other; rows_read, rows_used, rows_dropped);
        self.hit_rate = rate(self.rows_used, self.rows_read);
    }
}

impl HintUse {
    /// The counts of `kind`.
    pub(crate) fn of_kind_mut(&mut self, kind: HintKind) -> &mut HintKindUse {
        match kind {
            HintKind::Draft => &mut self.draft,
            HintKind::Alternative => &mut self.alternative,
        }
    }

    /// Adds `other`'s counts into `self` (the hit rates recomputed).
    pub fn add_counts(&mut self, other: &HintUse) {
        self.draft.add(&other.draft);
        self.alternative.add(&other.alternative);
    }
}

fn rate(used: u64, read: u64) -> Option<f64> {
    (read > 0).then(|| used as f64 / read as f64)
}

impl TableStats {
    /// Adds `other`'s counts (waits, tokens, total stall, rows, reads,
    /// bytes, batches, busy time) into `self`. Distributions cannot be summed: the
    /// summaries of `self` are left as they are.
    pub fn add_counts(&mut self, other: &TableStats) {
        add_fields!(self, other;
            waits, tokens, stall_total_us,
            rows_requested, rows_unique, cache_hits, hot_hits, reuse_hits,
            ahead_rows, warm_rows, warm_reads, warm_bytes,
            reads_issued, bytes_read, batches, batch_busy_ns,
        );
    }
}

impl PhaseStats {
    /// Adds `other`'s per-table counts into `self`'s tables (table by
    /// table, growing `self` to as many tables); see
    /// [`TableStats::add_counts`].
    pub fn add_counts(&mut self, other: &PhaseStats) {
        for t in &other.tables {
            while self.tables.len() <= t.table {
                let table = self.tables.len();
                self.tables.push(TableStats {
                    table,
                    ..TableStats::default()
                });
            }
            self.tables[t.table].add_counts(t);
        }
    }
}

impl Stats {
    /// Adds `other`'s counts into `self`, phase by phase.
    pub fn add_counts(&mut self, other: &Stats) {
        self.prefill.add_counts(&other.prefill);
        self.decode.add_counts(&other.decode);
        self.hints.add_counts(&other.hints);
        self.hint_use.add_counts(&other.hint_use);
    }

    /// Every phase's per-table counts summed into one [`TableStats`]
    /// (`table` 0, summaries empty).
    pub fn total_counts(&self) -> TableStats {
        let mut total = TableStats::default();
        for phase in [&self.prefill, &self.decode, &self.hints] {
            for t in &phase.tables {
                total.add_counts(t);
            }
        }
        total
    }

    /// The stats as one JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("stats hold only plain numbers")
    }
}

/// Which part of the work a sample belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Prompt processing.
    Prefill,
    /// One token at a time.
    Decode,
    /// Speculative reads into the row cache.
    Hint,
}

struct TableRecord {
    waits: u64,
    tokens: u64,
    stall_total_ns: u64,
    stall_per_token: Histogram<u64>,
    reuse_hits: u64,
    ahead_rows: u64,
    warm: WarmTotals,
    io: BatchStatsTotals,
}

/// Page-cache warm-up reads of one table ([`StatsRecorder::record_warm`]).
#[derive(Default)]
struct WarmTotals {
    rows: u64,
    reads: u64,
    bytes: u64,
}

#[derive(Default)]
struct BatchStatsTotals {
    rows_requested: u64,
    rows_unique: u64,
    cache_hits: u64,
    hot_hits: u64,
    reads_issued: u64,
    bytes_read: u64,
    batches: u64,
    read_latency: Option<Histogram<u64>>,
    batch_latency: Option<Histogram<u64>>,
    busy: BusyTime,
}

/// The union of a table's batch calls' wall times, recorded as each call
/// ends (so in order of their ends, up to the lock's order).
#[derive(Default)]
struct BusyTime {
    total_ns: u64,
    until: Option<Instant>,
}

impl BusyTime {
    /// Adds the call that ran for `elapsed` until `end`: the part of it
    /// after the calls recorded before.
    fn add(&mut self, end: Instant, elapsed: Duration) {
        let start = end.checked_sub(elapsed).unwrap_or(end);
        let from = self.until.map_or(start, |until| until.max(start));
        let new = end.saturating_duration_since(from);
        self.total_ns = self
            .total_ns
            .saturating_add(u64::try_from(new.as_nanos()).unwrap_or(u64::MAX));
        self.until = Some(self.until.map_or(end, |until| until.max(end)));
    }
}

struct PhaseRecord {
    tables: Vec<TableRecord>,
    stall_total: Histogram<u64>,
}

/// Thread-safe collector of [`Stats`] with bounded memory (histograms, not
/// sample lists).
pub struct StatsRecorder {
    phases: Mutex<[PhaseRecord; 3]>,
    hint_use: Mutex<HintUse>,
}

impl std::fmt::Debug for StatsRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatsRecorder").finish_non_exhaustive()
    }
}

const HOUR_NS: u64 = 3_600_000_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HOUR_NS, 3).expect("static histogram bounds are valid")
}

fn record(h: &mut Histogram<u64>, ns: u64, count: u64) {
    // Zero stalls are real samples; the histogram's lowest bucket is 1 ns.
    h.saturating_record_n(ns.clamp(1, HOUR_NS), count);
}

impl StatsRecorder {
    /// A recorder for `tables` tables.
    pub fn new(tables: usize) -> StatsRecorder {
        let phase = || PhaseRecord {
            tables: (0..tables)
                .map(|_| TableRecord {
                    waits: 0,
                    tokens: 0,
                    stall_total_ns: 0,
                    stall_per_token: histogram(),
                    reuse_hits: 0,
                    ahead_rows: 0,
                    warm: WarmTotals::default(),
                    io: BatchStatsTotals::default(),
                })
                .collect(),
            stall_total: histogram(),
        };
        StatsRecorder {
            phases: Mutex::new([phase(), phase(), phase()]),
            hint_use: Mutex::new(HintUse::default()),
        }
    }

    fn with_phase<R>(&self, phase: Phase, f: impl FnOnce(&mut PhaseRecord) -> R) -> R {
        let mut phases = match self.phases.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut phases[phase as usize])
    }

    /// Records a wait on `table` that covered `tokens` tokens and blocked for
    /// `stall`.
    pub fn record_wait(&self, phase: Phase, table: usize, tokens: u64, stall: Duration) {
        let ns = u64::try_from(stall.as_nanos()).unwrap_or(u64::MAX);
        self.with_phase(phase, |p| {
            if let Some(t) = p.tables.get_mut(table) {
                t.waits += 1;
                t.tokens += tokens;
                t.stall_total_ns = t.stall_total_ns.saturating_add(ns);
                if let Some(per) = ns.checked_div(tokens) {
                    record(&mut t.stall_per_token, per, tokens);
                }
            }
        });
    }

    /// Records the total stall (all tables) of `tokens` tokens that each
    /// stalled `per_token`.
    pub fn record_token_total(&self, phase: Phase, per_token: Duration, tokens: u64) {
        let ns = u64::try_from(per_token.as_nanos()).unwrap_or(u64::MAX);
        self.with_phase(phase, |p| record(&mut p.stall_total, ns, tokens));
    }

    /// Records `rows` row ids of `table` served from a prefill's reuse
    /// store.
    pub fn record_reuse(&self, phase: Phase, table: usize, rows: u64) {
        self.with_phase(phase, |p| {
            if let Some(t) = p.tables.get_mut(table) {
                t.reuse_hits += rows;
            }
        });
    }

    /// Records `rows` row ids of `table` read ahead into a prefill's reuse
    /// store.
    pub fn record_ahead(&self, phase: Phase, table: usize, rows: u64) {
        self.with_phase(phase, |p| {
            if let Some(t) = p.tables.get_mut(table) {
                t.ahead_rows += rows;
            }
        });
    }

    /// Records one page-cache warm-up read of `table` (its own counters,
    /// not a batch: see [`TableStats::warm_rows`]).
    pub fn record_warm(&self, phase: Phase, table: usize, batch: &BatchStats) {
        self.with_phase(phase, |p| {
            if let Some(t) = p.tables.get_mut(table) {
                let tiers = batch.cache_hits + batch.hot_hits;
                t.warm.rows += batch.rows_unique.saturating_sub(tiers);
                t.warm.reads += batch.reads_issued;
                t.warm.bytes += batch.bytes_read;
            }
        });
    }

    /// Records a resolved hint of `kind`: `read` of its rows were read, of
    /// which `used` were asked for by the step at its position, and
    /// `dropped` were never read.
    pub fn record_hint_use(&self, kind: HintKind, read: u64, used: u64, dropped: u64) {
        let mut one = HintUse::default();
        one.of_kind_mut(kind).add(&HintKindUse {
            rows_read: read,
            rows_used: used,
            rows_dropped: dropped,
            hit_rate: None,
        });
        self.record_hint_uses(&one);
    }

    /// Records the counts of several resolved hints at once.
    pub fn record_hint_uses(&self, uses: &HintUse) {
        let mut all = match self.hint_use.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        all.add_counts(uses);
    }

    /// Records one batch read of `table`.
    pub fn record_batch(&self, phase: Phase, table: usize, batch: &BatchStats) {
        self.with_phase(phase, |p| {
            if let Some(t) = p.tables.get_mut(table) {
                let io = &mut t.io;
                add_fields!(io, batch;
                    rows_requested, rows_unique, cache_hits, hot_hits, reads_issued, bytes_read,
                );
                io.batches += 1;
                let reads = io.read_latency.get_or_insert_with(histogram);
                for &ns in &batch.read_latencies_ns {
                    record(reads, ns, 1);
                }
                io.busy.add(Instant::now(), batch.elapsed);
                let elapsed = u64::try_from(batch.elapsed.as_nanos()).unwrap_or(u64::MAX);
                record(io.batch_latency.get_or_insert_with(histogram), elapsed, 1);
            }
        });
    }

    /// A snapshot of everything recorded so far.
    pub fn snapshot(&self) -> Stats {
        let phase = |p: Phase| self.with_phase(p, |r| phase_stats(r));
        Stats {
            prefill: phase(Phase::Prefill),
            decode: phase(Phase::Decode),
            hints: phase(Phase::Hint),
            hint_use: match self.hint_use.lock() {
                Ok(g) => g.clone(),
                Err(p) => p.into_inner().clone(),
            },
        }
    }
}

fn phase_stats(r: &PhaseRecord) -> PhaseStats {
    let summary =
        |h: &Option<Histogram<u64>>| h.as_ref().map(Summary::from_histogram).unwrap_or_default();
    PhaseStats {
        tables: r
            .tables
            .iter()
            .enumerate()
            .map(|(table, t)| TableStats {
                table,
                waits: t.waits,
                tokens: t.tokens,
                stall_total_us: t.stall_total_ns as f64 / 1_000.0,
                stall_per_token: Summary::from_histogram(&t.stall_per_token),
                rows_requested: t.io.rows_requested,
                rows_unique: t.io.rows_unique,
                cache_hits: t.io.cache_hits,
                hot_hits: t.io.hot_hits,
                reuse_hits: t.reuse_hits,
                ahead_rows: t.ahead_rows,
                warm_rows: t.warm.rows,
                warm_reads: t.warm.reads,
                warm_bytes: t.warm.bytes,
                reads_issued: t.io.reads_issued,
                bytes_read: t.io.bytes_read,
                batches: t.io.batches,
                read_latency: summary(&t.io.read_latency),
                batch_latency: summary(&t.io.batch_latency),
                batch_busy_ns: t.io.busy.total_ns,
            })
            .collect(),
        stall_per_token_total: Summary::from_histogram(&r.stall_total),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn counts_add_table_by_table_and_phases_total() {
        let table = |table: usize, rows: u64| TableStats {
            table,
            waits: 1,
            rows_requested: rows,
            reuse_hits: 2,
            stall_total_us: 1.5,
            ..TableStats::default()
        };
        let mut a = Stats::default();
        a.prefill.tables = vec![table(0, 10)];
        let mut b = Stats::default();
        b.prefill.tables = vec![table(0, 5), table(1, 7)];
        b.decode.tables = vec![table(0, 1)];
        a.add_counts(&b);
        assert_eq!(a.prefill.tables.len(), 2);
        assert_eq!(a.prefill.tables[0].rows_requested, 15);
        assert_eq!(a.prefill.tables[0].reuse_hits, 4);
        assert_eq!(a.prefill.tables[1].table, 1);
        assert_eq!(a.decode.tables[0].waits, 1);
        let total = a.total_counts();
        assert_eq!(total.rows_requested, 23);
        assert_eq!(total.waits, 4);
        assert!((total.stall_total_us - 6.0).abs() < 1e-9);
    }

    use super::*;

    #[test]
    fn warm_reads_have_their_own_counters_and_older_json_still_parses() {
        let rec = StatsRecorder::new(1);
        let warm = BatchStats {
            rows_requested: 10,
            rows_unique: 10,
            cache_hits: 3,
            reads_issued: 6,
            bytes_read: 6 * 4096,
            ..BatchStats::default()
        };
        rec.record_warm(Phase::Prefill, 0, &warm);
        rec.record_warm(Phase::Prefill, 0, &warm);
        let s = rec.snapshot();
        let t = &s.prefill.tables[0];
        // Rows a tier served are not device reads.
        assert_eq!(
            (t.warm_rows, t.warm_reads, t.warm_bytes),
            (14, 12, 12 * 4096)
        );
        assert_eq!(
            (t.rows_unique, t.reads_issued, t.bytes_read, t.batches),
            (0, 0, 0, 0)
        );
        assert_eq!(s.total_counts().warm_bytes, 12 * 4096);
        // A document written before the warm counters existed reads as 0.
        let mut old: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        for key in ["warm_rows", "warm_reads", "warm_bytes"] {
            old["prefill"]["tables"][0]
                .as_object_mut()
                .unwrap()
                .remove(key);
        }
        let back: Stats = serde_json::from_value(old).unwrap();
        assert_eq!(back.prefill.tables[0].warm_bytes, 0);
    }

    #[test]
    fn stall_spreads_over_tokens_and_serializes() {
        let rec = StatsRecorder::new(2);
        rec.record_wait(Phase::Prefill, 0, 4, Duration::from_micros(400));
        rec.record_wait(Phase::Prefill, 0, 4, Duration::ZERO);
        rec.record_wait(Phase::Decode, 1, 1, Duration::from_micros(50));
        rec.record_batch(
            Phase::Decode,
            1,
            &BatchStats {
                rows_requested: 24,
                rows_unique: 20,
                cache_hits: 3,
                hot_hits: 2,
                reads_issued: 17,
                bytes_read: 17 * 4096,
                elapsed: Duration::from_micros(90),
                read_latencies_ns: vec![80_000; 17],
            },
        );
        let s = rec.snapshot();
        let t0 = &s.prefill.tables[0];
        assert_eq!((t0.waits, t0.tokens), (2, 8));
        assert_eq!(t0.stall_per_token.count, 8);
        assert!((t0.stall_per_token.max_us - 100.0).abs() < 0.5);
        assert!((t0.stall_per_token.mean_us - 50.0).abs() < 0.5);
        assert!((t0.stall_total_us - 400.0).abs() < 1e-9);
        let d1 = &s.decode.tables[1];
        assert_eq!(
            (d1.rows_requested, d1.rows_unique, d1.cache_hits),
            (24, 20, 3)
        );
        assert!((d1.read_latency.p99_us - 80.0).abs() < 0.1);
        let back: Stats = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn hint_use_is_counted_per_kind_with_its_hit_rate() {
        let rec = StatsRecorder::new(2);
        assert_eq!(rec.snapshot().hint_use.draft.hit_rate, None);
        rec.record_hint_use(HintKind::Draft, 48, 48, 0);
        rec.record_hint_use(HintKind::Draft, 48, 0, 0);
        rec.record_hint_use(HintKind::Alternative, 24, 0, 24);
        let u = rec.snapshot().hint_use;
        assert_eq!((u.draft.rows_read, u.draft.rows_used), (96, 48));
        assert_eq!(u.draft.hit_rate, Some(0.5));
        assert_eq!(
            (u.alternative.rows_read, u.alternative.rows_dropped),
            (24, 24)
        );
        assert_eq!(u.alternative.hit_rate, Some(0.0));
        let mut sum = Stats::default();
        sum.add_counts(&rec.snapshot());
        sum.add_counts(&rec.snapshot());
        assert_eq!(sum.hint_use.draft.rows_read, 192);
        assert_eq!(sum.hint_use.draft.hit_rate, Some(0.5));
        // A document written before hint_use existed reads as none.
        let mut old: serde_json::Value = serde_json::from_str(&rec.snapshot().to_json()).unwrap();
        old.as_object_mut().unwrap().remove("hint_use");
        let back: Stats = serde_json::from_value(old).unwrap();
        assert_eq!(back.hint_use, HintUse::default());
    }

    #[test]
    fn busy_time_counts_overlapping_calls_once() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut busy = BusyTime::default();
        busy.add(t0 + ms(10), ms(10)); // 0..10
        busy.add(t0 + ms(14), ms(8)); // 6..14: 4 new
        busy.add(t0 + ms(14), ms(2)); // 12..14: inside
        busy.add(t0 + ms(30), ms(5)); // 25..30: after a gap
        assert_eq!(busy.total_ns, ms(19).as_nanos() as u64);
    }
}
