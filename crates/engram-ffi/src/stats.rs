//! Engine-level stats: the engine keeps a share of each open sequence's
//! stats recorder, and folds a sequence into running totals when it is
//! freed (keeping the last few full snapshots), so memory stays bounded
//! however many sequences a server opens.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use engram::stats::{PhaseStats, Stats, StatsRecorder};
use serde::Serialize;

/// Full snapshots of freed sequences kept for `engram_stats_json`.
const RECENT_CLOSED: usize = 8;

/// The summable part of one table's stats in one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct TableTotals {
    waits: u64,
    tokens: u64,
    stall_total_us: f64,
    rows_requested: u64,
    rows_unique: u64,
    cache_hits: u64,
    reads_issued: u64,
    bytes_read: u64,
    batches: u64,
}

/// Sums over sequences, per phase and table.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Totals {
    prefill: Vec<TableTotals>,
    decode: Vec<TableTotals>,
    hints: Vec<TableTotals>,
}

fn add_phase(into: &mut Vec<TableTotals>, phase: &PhaseStats) {
    if into.len() < phase.tables.len() {
        into.resize(phase.tables.len(), TableTotals::default());
    }
    for (sum, t) in into.iter_mut().zip(&phase.tables) {
        sum.waits += t.waits;
        sum.tokens += t.tokens;
        sum.stall_total_us += t.stall_total_us;
        sum.rows_requested += t.rows_requested;
        sum.rows_unique += t.rows_unique;
        sum.cache_hits += t.cache_hits;
        sum.reads_issued += t.reads_issued;
        sum.bytes_read += t.bytes_read;
        sum.batches += t.batches;
    }
}

impl Totals {
    fn add(&mut self, stats: &Stats) {
        add_phase(&mut self.prefill, &stats.prefill);
        add_phase(&mut self.decode, &stats.decode);
        add_phase(&mut self.hints, &stats.hints);
    }
}

/// One sequence in the engine's report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SeqReport {
    handle: String,
    open: bool,
    stats: Stats,
}

/// What `engram_stats_json` reports about the engine's sequences.
#[derive(Debug, Serialize)]
pub(crate) struct SeqsReport {
    sequences_open: usize,
    sequences_freed: u64,
    /// Sums over every sequence the engine has had, open or freed.
    totals: Totals,
    /// The open sequences, then the most recently freed ones.
    sequences: Vec<SeqReport>,
}

#[derive(Default)]
struct Inner {
    open: Vec<(usize, Arc<StatsRecorder>)>,
    freed: u64,
    freed_totals: Totals,
    recent: VecDeque<SeqReport>,
}

/// The engine's list of its sequences' stats.
#[derive(Default)]
pub(crate) struct SeqRegistry {
    inner: Mutex<Inner>,
}

impl SeqRegistry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each update is a single push/remove/add: consistent after a panic.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sequence opened under `handle`.
    pub fn opened(&self, handle: usize, recorder: Arc<StatsRecorder>) {
        self.lock().open.push((handle, recorder));
    }

    /// The sequence `handle` was freed with final stats `stats`.
    pub fn freed(&self, handle: usize, stats: Stats) {
        let mut inner = self.lock();
        inner.open.retain(|(h, _)| *h != handle);
        inner.freed += 1;
        inner.freed_totals.add(&stats);
        inner.recent.push_front(SeqReport {
            handle: format!("{handle:#x}"),
            open: false,
            stats,
        });
        inner.recent.truncate(RECENT_CLOSED);
    }

    /// Snapshots of every open sequence (without the decode step each may
    /// have in progress) and the freed ones' totals.
    pub fn report(&self) -> SeqsReport {
        let (open, freed, mut totals, recent) = {
            let inner = self.lock();
            (
                inner.open.clone(),
                inner.freed,
                inner.freed_totals.clone(),
                inner.recent.clone(),
            )
        };
        // Snapshot outside the registry lock: each takes its recorder's lock.
        let mut sequences: Vec<SeqReport> = open
            .iter()
            .map(|(handle, recorder)| SeqReport {
                handle: format!("{handle:#x}"),
                open: true,
                stats: recorder.snapshot(),
            })
            .collect();
        for s in &sequences {
            totals.add(&s.stats);
        }
        sequences.extend(recent);
        SeqsReport {
            sequences_open: open.len(),
            sequences_freed: freed,
            totals,
            sequences,
        }
    }
}
