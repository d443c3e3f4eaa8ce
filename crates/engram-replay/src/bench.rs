//! The benchmark: every asked schedule replayed in turn, each on a fresh
//! engine and compute model, the table files evicted first when cold.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engram::hot::HotSet;
use engram::io::{cachectl, IoConfig};
use engram::model::Model;
use engram::{Error, Result};

use crate::compute::ComputeSpec;
use crate::driver::{replay, Drive, Measured, Sweep};
use crate::hints::HintMode;
use crate::report::{
    DecodeReport, HotReport, IoReport, PrefillReport, Report, ScheduleReport, StallSummary,
};
use crate::rss;
use crate::schedule::{self, ScheduleKind, ScheduleSetup};

/// Settings of one benchmark run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Compute model.
    pub compute: ComputeSpec,
    /// Prefill order.
    pub sweep: Sweep,
    /// Tokens per prefill chunk of the sweep.
    pub ubatch: usize,
    /// Schedules, in the order run.
    pub schedules: Vec<ScheduleKind>,
    /// Hints offered to `full`.
    pub hints: HintMode,
    /// Evict the table files from the page cache before each schedule.
    pub cold: bool,
    /// Row I/O options of the engine schedules.
    pub io: IoConfig,
    /// Row cache budget of `full`, bytes.
    pub cache_bytes: u64,
    /// Seed of the draft hints.
    pub seed: u64,
    /// Hot-row file of the engine schedules (`engram profile`), loaded once
    /// before the first schedule.
    pub hot: Option<PathBuf>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            compute: ComputeSpec::Gpu(crate::compute::GpuProfile::m4_max_ds4()),
            sweep: Sweep::Layer,
            ubatch: 512,
            schedules: ScheduleKind::ALL.to_vec(),
            hints: HintMode::DEFAULT,
            cold: true,
            io: IoConfig::default(),
            cache_bytes: 256 << 20,
            seed: 1,
            hot: None,
        }
    }
}

/// Replays `prompt` then `continuation` on `model` (opened from
/// `model_path`) under each schedule of `config`. `progress` hears each
/// schedule's name as it starts.
pub fn run_bench(
    model: &Model,
    model_path: &Path,
    prompt: &[u32],
    continuation: &[u32],
    config: &BenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<Report> {
    let drive = Drive {
        sweep: config.sweep,
        ubatch: config.ubatch,
        engram_layers: model.layout.layer_ids(),
        hints: config.hints,
        vocab: u32::try_from(model.layout.vocab_size()).unwrap_or(u32::MAX),
        seed: config.seed,
    };
    let hot = match &config.hot {
        Some(path) => Some(Arc::new(HotSet::load(path, model, false)?)),
        None => None,
    };
    let setup = ScheduleSetup {
        model,
        io: config.io.clone(),
        f32_rows: matches!(config.compute, ComputeSpec::Cpu(_)),
        cache_bytes: config.cache_bytes,
        lookup_hints: config.hints == HintMode::Lookup,
        hot: hot.clone(),
    };
    let mut schedules = Vec::new();
    for &kind in &config.schedules {
        progress(kind.name());
        if config.cold {
            evict_tables(model)?;
        }
        rss::reset_peak();
        let mut compute = config.compute.build(&drive.engram_layers)?;
        let mut schedule = schedule::build(kind, &setup)?;
        let measured = replay(
            &drive,
            schedule.as_mut(),
            compute.as_mut(),
            prompt,
            continuation,
        )?;
        let io = schedule.io();
        drop(schedule);
        schedules.push(ScheduleReport {
            name: kind.name().to_string(),
            output_checksum: compute.output_checksum(),
            io: IoReport::new(&io, prompt.len(), continuation.len()),
            peak_rss_bytes: rss::peak_bytes().unwrap_or(0),
            ..summarize(&measured, prompt.len(), continuation.len())
        });
    }
    Ok(Report {
        model: model_path.display().to_string(),
        compute: config.compute.label(),
        sweep: config.sweep.name().to_string(),
        ubatch: config.ubatch,
        hints: config.hints.label(),
        cold: config.cold,
        hot: hot.as_deref().map(HotReport::of),
        schedules,
    })
}

/// Drops every table file's cached pages.
fn evict_tables(model: &Model) -> Result<()> {
    let files: BTreeSet<&Path> = model
        .tables
        .iter()
        .flat_map(|t| {
            std::iter::once(t.file.as_path()).chain(t.scales.as_ref().map(|s| s.file.as_path()))
        })
        .collect();
    for path in files {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        cachectl::evict(&file).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

/// The timing part of a schedule's report.
fn summarize(m: &Measured, prefill_tokens: usize, decode_tokens: usize) -> ScheduleReport {
    let secs = Duration::as_secs_f64;
    let tables = m.prefill_stall_table.len();
    let per_step: Vec<Duration> = m.step_stall.iter().map(|s| s.iter().sum()).collect();
    let per_table = (0..tables)
        .map(|t| StallSummary::of(&m.step_stall.iter().map(|s| s[t]).collect::<Vec<_>>()))
        .collect();
    ScheduleReport {
        name: String::new(),
        prefill: PrefillReport {
            tokens: prefill_tokens,
            seconds: secs(&m.prefill_wall),
            compute_seconds: secs(&m.prefill_compute),
            stall_seconds: m.prefill_stall_table.iter().map(secs).sum(),
            stall_seconds_table: m.prefill_stall_table.iter().map(secs).collect(),
        },
        decode: DecodeReport {
            tokens: decode_tokens,
            seconds: secs(&m.decode_wall),
            compute_seconds: secs(&m.decode_compute),
            tokens_per_s: if m.decode_wall.is_zero() {
                0.0
            } else {
                decode_tokens as f64 / secs(&m.decode_wall)
            },
            stall_us: StallSummary::of(&per_step),
            stall_us_table: per_table,
        },
        io: Default::default(),
        peak_rss_bytes: 0,
        output_checksum: None,
        chunk_stall_seconds: m.chunk_stall.iter().map(secs).collect(),
        step_stall_us: per_step.iter().map(|d| secs(d) * 1e6).collect(),
    }
}
