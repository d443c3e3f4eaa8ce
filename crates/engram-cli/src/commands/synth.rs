//! `engram synth --preset P --scale DIV --out DIR [--format gguf|hf|mlx]
//! [--encoding E] [--seed S]`: a complete synthetic model, as a converter
//! writes it, with random valid rows (deterministic from the seed). A
//! DeepSeek preset writes a ds4 GGUF or a checkpoint; a Qwen4-Exp preset a
//! llama.cpp GGUF, a Hugging Face checkpoint or an MLX checkpoint.

use std::path::PathBuf;
use std::time::Instant;

use engram::model::synth;

/// Output kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// DIR/model.gguf (ds4 dialect, packed rows).
    Gguf,
    /// DIR is a Hugging Face checkpoint (config.json, safetensors; DeepSeek: tokenizer.json too).
    Hf,
    /// DIR is an MLX checkpoint (Qwen4-Exp presets: 4-bit affine rows).
    Mlx,
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
    /// Row encoding. DeepSeek: e4m3_e8m0_32_row264 (default) or
    /// lloyd4_e5m3_32_r136 (GGUF only). Qwen4-Exp: bf16 (default), f16, f32,
    /// fp8_e4m3 (hf); f32, f16, bf16, q8_0, q5_1, q4_0, q4_1 (gguf); mlx4 (mlx,
    /// the default there).
    #[arg(long)]
    encoding: Option<String>,
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
        Format::Gguf => "gguf",
        Format::Hf => "hf",
        Format::Mlx => "mlx",
    };
    let bar = crate::progress::Bar::new("synth", args.quiet);
    let start = Instant::now();
    let written = synth::synth_named(
        &args.out,
        format,
        &args.preset,
        args.scale,
        args.encoding.as_deref(),
        args.seed,
        &bar,
    )?;
    bar.finish();
    let secs = start.elapsed().as_secs_f64();
    let (layout, encoding) = (&written.layout, written.encoding);
    let rows: u64 = layout.tables.iter().map(|t| t.stored_rows).sum();
    let bytes = rows * encoding.row_bytes() as u64;
    eprintln!(
        "wrote {} ({} tables, {rows} rows of {encoding}, {:.1} MB of rows in {secs:.2} s: {:.0} MB/s)",
        written.path.display(),
        layout.tables.len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}
