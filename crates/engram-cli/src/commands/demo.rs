//! `engram demo`: the README's main command. Builds (once) a small synthetic
//! DeepSeek V4.1-Flash-shaped model, takes this repository's own sources and
//! docs as the prompt, and runs `engram bench` on them: the four schedules,
//! cold, against the `gpu:m4-max-ds4` stand-in compute. Prints the table and
//! writes the plot.

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::layout::preset;
use engram::model::{synth, Model};
use engram::{Error, Result};
use engram_replay::{prompt, run_bench, BenchConfig};

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
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs the demo.
pub fn run(args: &Args) -> Result<()> {
    let path = ensure_model(&args.dir, args.scale)?;
    let model = Model::open(&path)?;
    let need = args.prefill + args.decode;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = prompt::repository_text(&root, need)?;
    let tokens = prompt::tokenize(&text)?;
    if tokens.len() < need {
        return Err(Error::InvalidArgument(format!(
            "the repository's sources give {} tokens; --prefill plus --decode asks for {need}",
            tokens.len()
        )));
    }
    let (prompt, continuation) = tokens[..need].split_at(args.prefill);
    let config = BenchConfig::default();
    eprintln!(
        "model {} ({} + {} rows), prompt {} tokens of this repository, {} decode steps, \
         compute {}, {} sweep, hints {}, cold",
        path.display(),
        model.tables[0].rows,
        model.tables.get(1).map_or(0, |t| t.rows),
        prompt.len(),
        continuation.len(),
        config.compute.label(),
        config.sweep.name(),
        config.hints.label(),
    );
    let report = run_bench(&model, &path, prompt, continuation, &config, |name| {
        eprintln!("running {name} ...")
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
