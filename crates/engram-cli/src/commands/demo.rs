//! `engram demo`: the README's main command. Builds (once) a small synthetic
//! model of each asked family (`--family deepseek|qwen|all`), takes this
//! repository's own sources and docs as the prompt (or the files of
//! `--corpus DIR`), and runs `engram bench` on them, cold: DeepSeek
//! V4.1-Flash with `sync`, `ds4`, `overlap` and `full` against the
//! `gpu:m4-max-ds4` stand-in compute; Qwen3.8-Flash-Next with its peers
//! (`llama-lazy`, `llama-readahead`, `omlx`, `ds4-qwen`, `ds4-qwen-chunked`,
//! `freetoken` on Linux), `overlap` and `full` against `gpu:m4-max-qwen38`,
//! each peer named with the runtime it stands for. Every schedule reads uncached, as on a
//! Mac (the peer's macOS path; `--direct` for the engine's), so a model small
//! enough to build in seconds does not flatter a buffered schedule through
//! the page cache. Prints the table (with the device floor) and writes the
//! plot.

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::io::IoConfig;
use engram::layout::{preset, Family};
use engram::model::{synth, Model};
use engram::{Error, Result};
use engram_replay::compute::ComputeSpec;
use engram_replay::device::DeviceMode;
use engram_replay::schedule::{QwenPeer, ScheduleKind};
use engram_replay::{prompt, run_bench, BenchConfig, Prompt};

use crate::progress::Bar;

/// Arguments of `engram demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the synthetic model and the plot are kept between runs.
    #[arg(long, default_value = "target/engram-demo")]
    dir: PathBuf,
    /// Scale divisor of the synthetic model (256: two tables of ~396 MB).
    #[arg(long, default_value_t = 256)]
    scale: u64,
    /// Prompt tokens to prefill.
    #[arg(long, default_value_t = 2048)]
    prefill: usize,
    /// Decode steps replayed after the prompt.
    #[arg(long, default_value_t = 64)]
    decode: usize,
    /// Runs of each schedule, interleaved; medians and min-max reported.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Prompts from this corpus directory (scripts/corpus.py) instead of
    /// this repository's sources.
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Print one JSON document instead of the table (one per family).
    #[arg(long)]
    json: bool,
    /// Which families to run, each against its own peers.
    #[arg(long, value_enum, default_value = "all")]
    family: DemoFamily,
    /// Scale divisor of the synthetic Qwen3.8-Flash-Next model (1024: one
    /// table of 312,448 bf16 rows, 100 MB).
    #[arg(long, default_value_t = 1024)]
    qwen_scale: u64,
}

/// Which families `engram demo` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DemoFamily {
    /// DeepSeek V4.1-Flash against the ds4 peer.
    Deepseek,
    /// Qwen3.8-Flash-Next against its runtimes' read paths.
    Qwen,
    /// Both, DeepSeek first.
    All,
}

/// Runs the demo.
pub fn run(args: &Args) -> Result<()> {
    let prompts = match &args.corpus {
        Some(dir) => prompt::corpus(dir, args.prefill, args.decode)?,
        None => {
            let need = args.prefill + args.decode;
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let text = prompt::repository_text(&root, need)?;
            let tokens = prompt::tokenize(&text)?;
            let name = "this repository's sources";
            vec![Prompt::split(name, tokens, args.prefill, args.decode)?]
        }
    };
    let families: &[DemoFamily] = match args.family {
        DemoFamily::All => &[DemoFamily::Deepseek, DemoFamily::Qwen],
        DemoFamily::Deepseek => &[DemoFamily::Deepseek],
        DemoFamily::Qwen => &[DemoFamily::Qwen],
    };
    for &family in families {
        let (path, schedules, compute) = match family {
            DemoFamily::Qwen => {
                let mut peers = ScheduleKind::defaults(Family::Qwen4ExpPle);
                // The engine's pipeline against the peers; `sync` is the
                // DeepSeek part's baseline, and FreeToken needs io_uring.
                peers.retain(|k| {
                    *k != ScheduleKind::Sync
                        && (cfg!(target_os = "linux")
                            || *k != ScheduleKind::Qwen(QwenPeer::FreeToken))
                });
                (
                    ensure_qwen_model(&args.dir, args.qwen_scale)?,
                    peers,
                    "gpu:m4-max-qwen38",
                )
            }
            _ => (
                ensure_model(&args.dir, args.scale)?,
                vec![
                    ScheduleKind::Sync,
                    ScheduleKind::Ds4,
                    ScheduleKind::Overlap,
                    ScheduleKind::Full,
                ],
                "gpu:m4-max-ds4",
            ),
        };
        let model = Model::open(&path)?;
        let config = BenchConfig {
            compute: ComputeSpec::parse(compute)?,
            schedules,
            io: IoConfig::default().with_direct(true),
            repeat: args.repeat,
            device: DeviceMode::default_measure(),
            ..BenchConfig::default()
        };
        eprintln!(
            "{} model {} ({} rows), {} prompt(s) of {} tokens, {} decode steps, compute {}, \
             {} sweep, hints {}, cold, the engine with direct I/O",
            model.layout.family,
            path.display(),
            model
                .tables
                .iter()
                .map(|t| t.rows.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            prompts.len(),
            args.prefill,
            args.decode,
            config.compute.label(),
            config.sweep.name(),
            config.hints.label(),
        );
        for kind in &config.schedules {
            eprintln!("  {:<17} {}", kind.name(), kind.runtime());
        }
        let report = run_bench(&model, &path, &prompts, &config, |event| {
            super::bench::say(event, prompts.len(), config.repeat)
        })?;
        let plot = args.dir.join(match family {
            DemoFamily::Qwen => "demo-qwen.svg",
            _ => "demo.svg",
        });
        super::bench::finish(&report, args.json, Some(&plot))?;
    }
    Ok(())
}

/// The Qwen demo model (a bf16 GGUF), built on first use.
fn ensure_qwen_model(dir: &Path, scale: u64) -> Result<PathBuf> {
    let out = dir.join(format!("qwen38-scale{scale}"));
    let path = out.join(synth::GGUF_FILE);
    if path.exists() {
        return Ok(path);
    }
    let bar = Bar::new("building Qwen demo model", false);
    let written = synth::synth_named(&out, "gguf", "qwen3.8-flash-next", scale, None, 1, &bar)?;
    bar.finish();
    Ok(written.path)
}

/// The demo model, built on first use (temporary name, then renamed).
fn ensure_model(dir: &Path, scale: u64) -> Result<PathBuf> {
    let path = dir.join(format!("v41-flash-scale{scale}.gguf"));
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let layout = preset("deepseek-v4.1-flash", scale)?;
    let bar = Bar::new("building demo model", false);
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 1, &bar)?;
    bar.finish();
    Ok(path)
}
