//! `engram synth --preset P --scale DIV --out DIR [--format gguf|hf]
//! [--encoding E] [--seed S]`: a complete synthetic model, as a converter
//! writes it, with random valid rows (deterministic from the seed).

use std::path::PathBuf;
use std::time::Instant;

use engram::codec::Encoding;
use engram::model::synth::{self, SynthFormat};

/// Output kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// DIR/model.gguf (ds4 dialect, packed rows).
    Gguf,
    /// DIR is a Hugging Face checkpoint (config.json, tokenizer.json, safetensors).
    Hf,
}

/// Arguments of `engram synth`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Layout preset, e.g. deepseek-v4.1-flash.
    #[arg(long)]
    preset: String,
    /// Divide every per-head table size by DIV (1 = full size).
    #[arg(long, default_value_t = 1)]
    scale: u64,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "gguf")]
    format: Format,
    /// Row encoding (GGUF only; checkpoints are always e4m3_e8m0_32_row264).
    #[arg(long, value_parser = super::parse_encoding, default_value = "e4m3_e8m0_32_row264")]
    encoding: Encoding,
    /// Seed of the row generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs `engram synth`.
pub fn run(args: Args) -> engram::Result<()> {
    let format = match args.format {
        Format::Gguf => SynthFormat::Gguf,
        Format::Hf => SynthFormat::Hf,
    };
    let bar = crate::progress::Bar::new("synth", args.quiet);
    let start = Instant::now();
    let (path, layout) = synth::synth_preset(
        &args.out,
        format,
        &args.preset,
        args.scale,
        args.encoding,
        args.seed,
        &bar,
    )?;
    bar.finish();
    let secs = start.elapsed().as_secs_f64();
    let rows: u64 = layout.tables.iter().map(|t| t.rows).sum();
    let bytes = rows * args.encoding.row_bytes() as u64;
    eprintln!(
        "wrote {} ({} tables, {rows} rows, {:.1} MB of rows in {secs:.2} s: {:.0} MB/s)",
        path.display(),
        layout.tables.len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}
