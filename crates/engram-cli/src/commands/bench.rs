//! `engram bench`: replays a prompt's prefill and the decode of the tokens
//! that follow it against a compute model, under each asked schedule, and
//! reports the stall each leaves (table, `--json`, `--plot`).

use std::path::{Path, PathBuf};

use engram::io::{Backend, IoConfig};
use engram::model::Model;
use engram::Result;
use engram_replay::compute::ComputeSpec;
use engram_replay::driver::Sweep;
use engram_replay::hints::HintMode;
use engram_replay::schedule::ScheduleKind;
use engram_replay::{plot, prompt, run_bench, BenchConfig, Report};

/// Arguments of `engram bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a ds4 `.gguf` file or a Hugging Face checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// Text file whose tokens (vendored DeepSeek V4 tokenizer) are replayed.
    #[arg(long)]
    pub prompt: PathBuf,
    /// Prompt tokens to prefill (the first N of the file).
    #[arg(long, default_value_t = 8192)]
    pub prefill: usize,
    /// Decode steps: the K tokens that follow the prompt, one at a time.
    #[arg(long, default_value_t = 1000)]
    pub decode: usize,
    /// Compute model: gpu:m4-max-ds4, gpu:custom:PREFILL_US,DECODE_US[,LAYERS],
    /// cpu or cpu:layers=L,dim=D,heads=H,ffn=F,conv=C,seed=S.
    #[arg(long, default_value = "gpu:m4-max-ds4")]
    pub compute: String,
    /// Schedules to run, in order: sync, ds4, overlap, full.
    #[arg(long, default_value = "sync,ds4,overlap,full")]
    pub schedule: String,
    /// Prefill order: layer (every chunk through a layer before the next
    /// layer) or chunk (each chunk through all layers).
    #[arg(long, default_value = "layer")]
    pub sweep: String,
    /// Tokens per prefill chunk.
    #[arg(long, default_value_t = 512)]
    pub ubatch: usize,
    /// Hints for `full`: none, lookup (the engine's prompt lookup) or draft:P
    /// (an MTP-like draft of the next token, right with probability P).
    #[arg(long, default_value = "draft:0.79")]
    pub hints: String,
    /// Evict the table files from the page cache before each schedule.
    #[arg(long)]
    pub cold: bool,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write an SVG of the per-step decode stall and per-chunk prefill stall.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Row cache budget of `full`, MiB.
    #[arg(long, default_value_t = 256)]
    pub cache_mib: u64,
    /// I/O backend of the engine schedules: auto, psync, uring or mmap.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Bypass the page cache in the engine schedules (O_DIRECT / F_NOCACHE).
    #[arg(long)]
    pub direct: bool,
    /// Seed of the draft hints.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Hot-row file (`engram profile`) served before the row cache and
    /// storage in the engine schedules.
    #[arg(long, value_name = "HOT")]
    pub hot: Option<PathBuf>,
}

impl Args {
    fn config(&self) -> Result<BenchConfig> {
        let backend: Backend = self.backend.parse()?;
        Ok(BenchConfig {
            compute: ComputeSpec::parse(&self.compute)?,
            sweep: Sweep::parse(&self.sweep)?,
            ubatch: self.ubatch,
            schedules: ScheduleKind::parse_list(&self.schedule)?,
            hints: HintMode::parse(&self.hints)?,
            cold: self.cold,
            io: IoConfig {
                backend,
                direct: self.direct,
                ..IoConfig::default()
            },
            cache_bytes: self.cache_mib.saturating_mul(1 << 20),
            seed: self.seed,
            hot: self.hot.clone(),
        })
    }
}

/// Runs `engram bench`.
pub fn run(args: &Args) -> Result<()> {
    let config = args.config()?;
    let model = Model::open(&args.model)?;
    let tokens = prompt::file_tokens(&args.prompt, args.prefill + args.decode)?;
    let (prompt, continuation) = tokens.split_at(args.prefill);
    let report = run_bench(&model, &args.model, prompt, continuation, &config, |name| {
        eprintln!("running {name} ...")
    })?;
    finish(&report, args.json, args.plot.as_deref())
}

/// Prints the report (table or JSON) and writes the plot if asked.
pub fn finish(report: &Report, json: bool, plot_path: Option<&Path>) -> Result<()> {
    if let Some(path) = plot_path {
        plot::write_svg(report, path)?;
        eprintln!("plot written to {}", path.display());
    }
    if json {
        crate::emit(&report.to_json());
    } else {
        crate::emit(&report.to_table());
    }
    Ok(())
}
