//! The benchmark: every asked schedule replayed in turn, each on a fresh
//! engine and compute model, the table files evicted first when cold.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engram::hot::HotSet;
use engram::io::IoConfig;
use engram::model::Model;
use engram::{Error, Result};

use engram::hash::Hasher;

use crate::compute::ComputeSpec;
use crate::device::{self, DeviceMode};
use crate::driver::{replay, Drive, Measured, Sweep};
use crate::floor::{self, UniqueRows};
use crate::hints::HintMode;
use crate::prompt::Prompt;
use crate::report::{
    CpuReport, DecodeReport, HotReport, IoReport, PrefillReport, PromptReport, Report,
    ScheduleReport, StallSummary,
};
use crate::schedule::{self, ScheduleKind, ScheduleSetup};
use crate::{rss, summary};

/// Settings of one benchmark run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Compute model.
    pub compute: ComputeSpec,
    /// Prefill order.
    pub sweep: Sweep,
    /// Tokens per prefill chunk of the sweep.
    pub ubatch: usize,
    /// Tokens one prefill wait asks for at least (0: one chunk; see
    /// [`Drive::wait_tokens`]).
    pub wait_tokens: usize,
    /// The engine schedules keep a prefill wait's rows until the next wait
    /// on the table (a host computing on them in place) instead of handing
    /// them back once taken (a host copying them out).
    pub hold_rows: bool,
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
    /// per bench and shared by every run.
    pub hot: Option<PathBuf>,
    /// Runs of each schedule per prompt, interleaved.
    pub repeat: usize,
    /// How the device's IOPS (the floor's divisor) is learnt.
    pub device: DeviceMode,
    /// Cores the process was pinned to, for the report (pinning itself is
    /// [`crate::cores::pin_process`], before any thread starts).
    pub cores: Option<usize>,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            compute: ComputeSpec::Gpu(crate::compute::GpuProfile::m4_max_ds4()),
            sweep: Sweep::Layer,
            ubatch: 512,
            wait_tokens: 0,
            hold_rows: false,
            schedules: ScheduleKind::ALL.to_vec(),
            hints: HintMode::DEFAULT,
            cold: true,
            io: IoConfig::default(),
            cache_bytes: 256 << 20,
            seed: 1,
            hot: None,
            repeat: 1,
            device: DeviceMode::Off,
            cores: None,
        }
    }
}

impl BenchConfig {
    /// Checks the settings that need no model: repeats, device mode.
    pub fn validate(&self) -> Result<()> {
        if self.repeat == 0 {
            return Err(Error::InvalidArgument("--repeat must be at least 1".into()));
        }
        if self.schedules.is_empty() {
            return Err(Error::InvalidArgument(
                "--schedule names no schedule".into(),
            ));
        }
        self.device.validate()
    }
}

/// What the benchmark tells its caller as it goes.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// A note (the device measurement).
    Note(&'a str),
    /// A schedule starts a run on a prompt.
    Run {
        /// Prompt name.
        prompt: &'a str,
        /// Repeat, from 0.
        repeat: usize,
        /// Schedule name.
        schedule: &'a str,
    },
}

/// Replays each of `prompts` on `model` (opened from `model_path`) under
/// each schedule of `config`, `config.repeat` times, interleaved: every
/// schedule once, then every schedule again. `progress` hears each run as it
/// starts.
pub fn run_bench(
    model: &Model,
    model_path: &Path,
    prompts: &[Prompt],
    config: &BenchConfig,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Report> {
    config.validate()?;
    if prompts.is_empty() {
        return Err(Error::InvalidArgument("the benchmark has no prompt".into()));
    }
    let device = device::probe(model, config.io.depth, &config.device, |note| {
        progress(Progress::Note(note))
    })?;
    // Loaded once: every engine schedule of every prompt and repeat serves
    // the same rows, and the load time is reported once.
    let hot = match &config.hot {
        Some(path) => Some(Arc::new(HotSet::load(path, model, false)?)),
        None => None,
    };
    let mut reports = Vec::with_capacity(prompts.len());
    for p in prompts {
        let unique = unique_rows(model, &p.prompt)?;
        let mut repeats = Vec::with_capacity(config.repeat);
        for repeat in 0..config.repeat {
            let mut runs = Vec::with_capacity(config.schedules.len());
            for &kind in &config.schedules {
                progress(Progress::Run {
                    prompt: &p.name,
                    repeat,
                    schedule: kind.name(),
                });
                let mut report = run_one(model, kind, p, config, hot.as_ref())?;
                if let (Some(d), false) = (&device, p.prompt.is_empty()) {
                    let stall = report.schedule.prefill.stall_seconds;
                    report.schedule.floor =
                        Some(floor::report(&report.waits, &unique, d.iops, stall));
                }
                runs.push(report.schedule);
            }
            repeats.push(runs);
        }
        let schedules = (0..config.schedules.len())
            .map(|s| {
                let runs: Vec<&ScheduleReport> = repeats.iter().map(|r| &r[s]).collect();
                summary::summarize(&runs)
            })
            .collect();
        reports.push(PromptReport {
            prompt: p.name.clone(),
            prefill_tokens: p.prompt.len(),
            decode_tokens: p.continuation.len(),
            schedules,
            ratios: summary::ratios(&repeats),
            repeats,
        });
    }
    Ok(Report {
        about: crate::table::about(),
        model: model_path.display().to_string(),
        compute: config.compute.label(),
        sweep: config.sweep.name().to_string(),
        ubatch: config.ubatch,
        wait_tokens: config.wait_tokens,
        hold_rows: config.hold_rows,
        hints: config.hints.label(),
        cold: config.cold,
        direct: config.io.direct,
        repeat: config.repeat,
        cores: config.cores,
        device,
        hot: hot.as_deref().map(HotReport::of),
        geomean: summary::geomean(&reports),
        prompts: reports,
    })
}

/// One schedule's run and the waits the floor needs.
struct RunOutcome {
    schedule: ScheduleReport,
    waits: Vec<crate::floor::WaitPoint>,
}

/// One fresh, cold run of `kind` on prompt `p`.
fn run_one(
    model: &Model,
    kind: ScheduleKind,
    p: &Prompt,
    config: &BenchConfig,
    hot: Option<&Arc<HotSet>>,
) -> Result<RunOutcome> {
    let drive = Drive {
        sweep: config.sweep,
        ubatch: config.ubatch,
        wait_tokens: config.wait_tokens,
        engram_layers: model.layout.layer_ids(),
        hints: config.hints,
        vocab: u32::try_from(model.layout.vocab_size()).unwrap_or(u32::MAX),
        seed: config.seed,
    };
    let setup = ScheduleSetup {
        model,
        io: config.io.clone(),
        f32_rows: matches!(config.compute, ComputeSpec::Cpu(_)),
        cache_bytes: config.cache_bytes,
        lookup_hints: config.hints == HintMode::Lookup,
        hot: hot.cloned(),
        prefill_order: config.sweep.prefill_order(),
        ubatch: config.ubatch,
        hold_rows: config.hold_rows,
    };
    if config.cold {
        device::evict_tables(model, |_, _| {})?;
    }
    rss::reset_peak();
    let mut compute = config.compute.build(&drive.engram_layers)?;
    let mut schedule = schedule::build(kind, &setup)?;
    let measured = replay(
        &drive,
        schedule.as_mut(),
        compute.as_mut(),
        &p.prompt,
        &p.continuation,
    )?;
    let io = schedule.io();
    drop(schedule);
    Ok(RunOutcome {
        schedule: ScheduleReport {
            name: kind.name().to_string(),
            output_checksum: compute.output_checksum(),
            io: IoReport::new(
                &io,
                p.prompt.len(),
                measured.prefill_wall,
                p.continuation.len(),
            ),
            peak_rss_bytes: rss::peak_bytes().unwrap_or(0),
            ..summarize(&measured, p.prompt.len(), p.continuation.len())
        },
        waits: measured.prefill_waits,
    })
}

/// Per table, the unique reads of every prefix of `prompt`: rows whose
/// bytes start in the same 4 KiB page of the table's file are one read.
fn unique_rows(model: &Model, prompt: &[u32]) -> Result<UniqueRows> {
    let hasher = Hasher::new(&model.layout)?;
    let mut history = hasher.new_history();
    let mut ids = Vec::new();
    hasher.hash(&mut history, prompt, None, &mut ids)?;
    // A read is keyed by the 4 KiB page a part of a row starts in, tagged
    // with the part's file: a row stored in several parts (values and
    // scales, MLX codes, scales and biases) counts one read per part, as a
    // reader of those arrays issues them.
    let files: Vec<Vec<&Path>> = model.tables.iter().map(|t| t.files()).collect();
    let page = |table: usize, row: u32| -> Vec<u64> {
        match model.tables.get(table) {
            None => vec![u64::from(row)],
            Some(t) => t
                .spans(u64::from(row))
                .iter()
                .map(|s| {
                    let file = files[table].iter().position(|f| *f == s.file).unwrap_or(0);
                    ((file as u64) << 48) | (s.offset / engram::io::PAGE)
                })
                .collect(),
        }
    };
    Ok(UniqueRows::of_reads(
        &ids,
        model.tables.len(),
        hasher.columns(),
        page,
    ))
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
            hint_call_us: StallSummary::of(&m.hint_call),
            step_begin_us: StallSummary::of(&m.step_begin),
        },
        io: Default::default(),
        cpu: cpu_report(m, prefill_tokens, decode_tokens),
        floor: None,
        peak_rss_bytes: 0,
        output_checksum: None,
        chunk_stall_seconds: m.chunk_stall.iter().map(secs).collect(),
        step_stall_us: per_step.iter().map(|d| secs(d) * 1e6).collect(),
    }
}

/// The CPU the schedule cost outside the compute model, per phase.
fn cpu_report(m: &Measured, prefill_tokens: usize, decode_tokens: usize) -> CpuReport {
    let outside = |phase: usize| {
        m.cpu[phase]
            .saturating_sub(m.compute_cpu[phase])
            .as_secs_f64()
    };
    let per = |seconds: f64, n: usize| {
        if n == 0 {
            0.0
        } else {
            seconds * 1e6 / n as f64
        }
    };
    let (prefill, decode) = (outside(0), outside(1));
    CpuReport {
        prefill_seconds: prefill,
        decode_seconds: decode,
        prefill_us_per_token: per(prefill, prefill_tokens),
        decode_us_per_step: per(decode, decode_tokens),
        compute_seconds: [
            m.compute_cpu[0].as_secs_f64(),
            m.compute_cpu[1].as_secs_f64(),
        ],
    }
}
