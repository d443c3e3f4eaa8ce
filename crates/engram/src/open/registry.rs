//! Engine-level stats: the engine keeps a share of each open sequence's
//! stats recorder, and folds a sequence into running totals when it is
//! freed (keeping the last few full snapshots), so memory stays bounded
//! however many sequences a server opens.
//!
//! Sequences are named by an id of the embedder's choosing (the C ABI's
//! handle value, the Python object's id), shown in hex as `handle`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::stats::{PhaseStats, Stats, StatsRecorder, TableStats};
use serde::Serialize;

/// Full snapshots of freed sequences kept for the report.
const RECENT_CLOSED: usize = 8;

/// Sums over sequences, per phase and table: the counts of
/// [`Stats::add_counts`]; the distributions are left empty (count 0), since
/// they cannot be summed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    prefill: Vec<TableStats>,
    decode: Vec<TableStats>,
    hints: Vec<TableStats>,
}

impl Totals {
    fn add(&mut self, stats: &Stats) {
        add_phase(&mut self.prefill, &stats.prefill);
        add_phase(&mut self.decode, &stats.decode);
        add_phase(&mut self.hints, &stats.hints);
    }
}

fn add_phase(into: &mut Vec<TableStats>, phase: &PhaseStats) {
    let mut sum = PhaseStats {
        tables: std::mem::take(into),
        ..PhaseStats::default()
    };
    sum.add_counts(phase);
    *into = sum.tables;
}

/// One sequence in the engine's report.
#[derive(Debug, Clone, Serialize)]
pub struct SeqReport {
    handle: String,
    open: bool,
    stats: Stats,
}

/// What the engine's stats report says about its sequences.
#[derive(Debug, Serialize)]
pub struct SeqsReport {
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
pub struct SeqRegistry {
    inner: Mutex<Inner>,
}

impl SeqRegistry {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Each update is a single push/remove/add: consistent after a panic.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sequence opened under `handle` (the embedder's id for it).
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
