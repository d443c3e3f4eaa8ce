//! `engram demo`: the README's main command. Builds (once) a small synthetic
//! DeepSeek V4.1-Flash-shaped model, takes this repository's own sources and
//! docs as the prompt (or the files of `--corpus DIR`), and runs `engram
//! bench` on them: `sync`, `ds4`, `overlap` and `full`, cold, against the
//! `gpu:m4-max-ds4` stand-in compute. Every schedule reads uncached, as on a
//! Mac (the peer's macOS path; `--direct` for the engine's), so a model small
//! enough to build in seconds does not flatter a buffered schedule through
//! the page cache. Prints the table (with the device floor) and writes the
//! plot.

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::io::IoConfig;
use engram::layout::preset;
use engram::model::{synth, Model};
use engram::{Error, Result};
use engram_replay::device::DeviceMode;
use engram_replay::schedule::ScheduleKind;
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
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs the demo.
pub fn run(args: &Args) -> Result<()> {
    let path = ensure_model(&args.dir, args.scale)?;
    let model = Model::open(&path)?;
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
    let config = BenchConfig {
        schedules: vec![
            ScheduleKind::Sync,
            ScheduleKind::Ds4,
            ScheduleKind::Overlap,
            ScheduleKind::Full,
        ],
        io: IoConfig {
            direct: true,
            ..IoConfig::default()
        },
        repeat: args.repeat,
        device: DeviceMode::default_measure(),
        ..BenchConfig::default()
    };
    eprintln!(
        "model {} ({} + {} rows), {} prompt(s) of {} tokens, {} decode steps, compute {}, \
         {} sweep, hints {}, cold, every schedule uncached (ds4: the peer's macOS path; \
         the engine: direct I/O)",
        path.display(),
        model.tables[0].rows,
        model.tables.get(1).map_or(0, |t| t.rows),
        prompts.len(),
        args.prefill,
        args.decode,
        config.compute.label(),
        config.sweep.name(),
        config.hints.label(),
    );
    let report = run_bench(&model, &path, &prompts, &config, |event| {
        super::bench::say(event, prompts.len(), config.repeat)
    })?;
    let plot = args.dir.join("demo.svg");
    super::bench::finish(&report, args.json, Some(&plot))
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
