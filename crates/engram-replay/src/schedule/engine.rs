//! `sync`, `overlap` and `full`: this project's engine under three
//! configurations.

use std::time::{Duration, Instant};

use engram::hot::HotConfig;
use engram::open::{EngineBuilder, OpenEngine};
use engram::prefetch::{Prefill, RowFormat, RowsView, Sequence};
use engram::stats::{PhaseStats, Stats};
use engram::Result;

use super::{
    IoCounters, IoTotals, PhaseIo, PrefillRun, Schedule, ScheduleKind, ScheduleSetup, WarmIo,
};

/// One of the engine-backed schedules.
pub struct EngineSchedule {
    // Declared before the engine: a sequence is dropped (its readers
    // cancelled and joined) before the engine's pool shuts down.
    sequence: Sequence,
    _engine: OpenEngine,
    kind: ScheduleKind,
    f32_rows: bool,
    hold_rows: bool,
}

impl EngineSchedule {
    /// A fresh engine and sequence for `kind` (not `Ds4`).
    pub fn new(kind: ScheduleKind, setup: &ScheduleSetup<'_>) -> Result<EngineSchedule> {
        // Opened as an embedder opens one. The documented switches
        // (ENGRAM_WARM, ENGRAM_READERS, ...) apply to the bench too, so
        // settings can be compared A/B; a bad value is an error.
        let mut builder = EngineBuilder::from_env()?;
        builder.io = setup.io.clone();
        let config = &mut builder.prefetch;
        config.format = if setup.f32_rows {
            RowFormat::F32
        } else {
            RowFormat::Raw
        };
        if std::env::var_os("ENGRAM_PREFILL_ORDER").is_none() {
            config.prefill_order = setup.prefill_order; // the env var wins, for A/B runs
        }
        match kind {
            ScheduleKind::Full => {
                config.lookup_hints = setup.lookup_hints;
                builder.cache_bytes = setup.cache_bytes;
            }
            ScheduleKind::Sync => config.prefetch = false,
            _ => {}
        }
        // In front of the row cache: hot rows never spend its budget.
        builder.hot = HotConfig::loaded(setup.hot.clone());
        let engine = builder.build(setup.model.clone())?;
        Ok(EngineSchedule {
            sequence: engine.engine.sequence(),
            _engine: engine,
            kind,
            f32_rows: setup.f32_rows,
            hold_rows: setup.hold_rows,
        })
    }
}

impl Schedule for EngineSchedule {
    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn prefill<'a>(&'a mut self, tokens: &[u32]) -> Result<Box<dyn PrefillRun + 'a>> {
        let (f32_rows, hold_rows) = (self.f32_rows, self.hold_rows);
        let prefill = self.sequence.prefill(tokens, None)?;
        Ok(Box::new(EnginePrefill {
            prefill,
            f32_rows,
            hold_rows,
        }))
    }

    fn step_begin(&mut self, token: u32, _stall: &mut [Duration]) -> Result<()> {
        // The driver counts the call's time (on table 0).
        self.sequence.step_begin(token)
    }

    fn step_wait(&mut self, table: usize, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        let started = Instant::now();
        let view = self.sequence.step_wait(table)?;
        let stall = started.elapsed();
        copy_rows(&view, rows);
        Ok(stall)
    }

    fn hint(&mut self, hints: &engram::Hints<'_>) -> Result<()> {
        if self.kind == ScheduleKind::Full {
            self.sequence.hint(*hints)?;
        }
        Ok(())
    }

    fn io(&mut self) -> IoCounters {
        counters(&self.sequence.stats())
    }
}

struct EnginePrefill<'a> {
    prefill: Prefill<'a>,
    f32_rows: bool,
    hold_rows: bool,
}

impl PrefillRun for EnginePrefill<'_> {
    fn layer_start(&mut self, _layer: u32, _start: u32) -> Result<()> {
        Ok(())
    }

    fn wait(&mut self, table: usize, upto: u32, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        let started = Instant::now();
        let view = self.prefill.wait(table, upto)?;
        let stall = started.elapsed();
        if self.f32_rows {
            copy_rows(&view, rows);
        }
        // The rows are taken (a GPU host has copied them out): their ring
        // slots go back to the readers while the layer computes.
        if !self.hold_rows {
            self.prefill.release(table)?;
        }
        Ok(stall)
    }
}

fn copy_rows(view: &RowsView<'_>, rows: Option<&mut Vec<f32>>) {
    if let Some(rows) = rows {
        *rows = view.to_f32_vec();
    }
}

/// The engine's counters over all phases and tables.
fn counters(stats: &Stats) -> IoCounters {
    let t = stats.total_counts();
    IoCounters {
        totals: IoTotals {
            // What the consumer asked for: rows the prefill served from its
            // reuse store never reached the source, and rows it read ahead
            // are counted again when their tokens' batch asks for them.
            rows_requested: (t.rows_requested + t.reuse_hits).saturating_sub(t.ahead_rows),
            rows_unique: t.rows_unique,
            cache_hits: t.cache_hits,
            bytes_read: t.bytes_read,
            reads: t.reads_issued,
            hot_hits: t.hot_hits,
        },
        warm: WarmIo {
            warm_rows: t.warm_rows,
            warm_reads: t.warm_reads,
            warm_bytes: t.warm_bytes,
        },
        prefill: Some(phase_io(&[&stats.prefill])),
        // Hints are read between decode steps, for the steps.
        decode: Some(phase_io(&[&stats.decode, &stats.hints])),
        hint_use: Some(stats.hint_use.clone()),
    }
}

fn phase_io(phases: &[&PhaseStats]) -> PhaseIo {
    let mut io = PhaseIo::default();
    for t in phases.iter().flat_map(|p| &p.tables) {
        io.hot_rows += t.hot_hits;
        io.storage_rows += t.rows_unique.saturating_sub(t.cache_hits + t.hot_hits);
        io.storage_reads += t.reads_issued;
        io.warm_rows += t.warm_rows;
        io.warm_reads += t.warm_reads;
        let total_ns =
            |s: &engram::stats::Summary| (s.count as f64 * s.mean_us * 1e3).round() as u64;
        io.read_busy_ns += total_ns(&t.read_latency);
        io.batch_busy_ns += t.batch_busy_ns;
        io.tables_read += u32::from(t.batch_latency.count > 0);
    }
    io
}
