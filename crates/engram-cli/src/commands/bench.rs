//! `engram bench`: replays a prompt's prefill and the decode of the tokens
//! that follow it against a compute model, under each asked schedule, and
//! reports the stall each leaves (table, `--json`, `--plot`).

use std::path::{Path, PathBuf};

use engram::io::{Backend, IoConfig};
use engram::layout::Family;
use engram::model::Model;
use engram::{Error, Result};
use engram_replay::compute::ComputeSpec;
use engram_replay::device::{default_cache, DeviceMode};
use engram_replay::driver::Sweep;
use engram_replay::hints::HintMode;
use engram_replay::schedule::ScheduleKind;
use engram_replay::{cores, plot, prompt, run_bench, BenchConfig, Progress, Prompt, Report};

/// Arguments of `engram bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a ds4 `.gguf` file or a Hugging Face checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// Text file whose tokens are replayed. Tokenized with the vendored
    /// DeepSeek V4 tokenizer for both families: for a Qwen4-Exp model it is
    /// a stand-in (the Qwen tokenizer is not vendored) whose ids, all below
    /// 129,280, are hashed as they are (Qwen's vocabulary has 248,320).
    #[arg(long, required_unless_present = "corpus", conflicts_with = "corpus")]
    pub prompt: Option<PathBuf>,
    /// Directory of prompt files (scripts/corpus.py builds one): every file
    /// is replayed, one result per prompt and the geometric mean of each
    /// ratio between schedules.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Runs of each schedule per prompt, interleaved (s1, s2, .., s1, s2, ..),
    /// each fresh and cold; figures are reported as median and min-max.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Pin the whole process to N cores (Linux; an error on macOS, which
    /// has no affinity API).
    #[arg(long, value_name = "N")]
    pub cores: Option<usize>,
    /// Hot-row file (`engram profile`) served before the row cache and
    /// storage in the engine schedules; loaded once for the whole bench.
    #[arg(long, value_name = "HOT")]
    pub hot: Option<PathBuf>,
    /// How the floor learns the device's read rate.
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Prompt tokens to prefill (the first N of the file).
    #[arg(long, default_value_t = 8192)]
    pub prefill: usize,
    /// Decode steps: the K tokens that follow the prompt, one at a time.
    #[arg(long, default_value_t = 1000)]
    pub decode: usize,
    /// Compute model: gpu:m4-max-ds4, gpu:flash, gpu:m4-max-qwen38, gpu:m1-max-qwen38,
    /// gpu:h200-transformers-qwen38,
    /// gpu:custom:PREFILL_US,DECODE_US[,LAYERS], cpu or
    /// cpu:layers=L,dim=D,heads=H,ffn=F,conv=C,seed=S. Default:
    /// gpu:m4-max-ds4 for a DeepSeek model, gpu:m4-max-qwen38 for a
    /// Qwen4-Exp one.
    #[arg(long)]
    pub compute: Option<String>,
    /// Schedules to run, in order. The engine's sync, overlap and full run
    /// on every model; the peers on their family's models only. DeepSeek:
    /// ds4 (the peer on macOS), ds4-linux (on Linux). Qwen4-Exp:
    /// llama-lazy, llama-readahead, omlx, ds4-qwen, ds4-qwen-chunked,
    /// freetoken (Linux only). Default: sync, the model family's peers,
    /// overlap, full.
    #[arg(long)]
    pub schedule: Option<String>,
    /// Prefill order: layer (every chunk through a layer before the next
    /// layer) or chunk (each chunk through all layers).
    #[arg(long, default_value = "layer")]
    pub sweep: String,
    /// Tokens per prefill chunk.
    #[arg(long, default_value_t = 512)]
    pub ubatch: usize,
    /// Tokens one prefill wait asks for at least (0: one chunk): the host
    /// waits once for this many tokens of a table, then runs their chunks
    /// through its layer. At most the engine's ring (2,048 by default).
    #[arg(long, default_value_t = 0)]
    pub wait_tokens: usize,
    /// Keep each prefill wait's rows until the next wait on the table, as
    /// a host that computes on the engine's memory in place does. By
    /// default the replay hands them back once it has taken them, as a
    /// host that copies them out (to a GPU) does.
    #[arg(long)]
    pub hold_rows: bool,
    /// Hints for `full`: none, lookup (the engine's prompt lookup),
    /// draft:P (an MTP-like draft chain of the next 2 tokens, each right
    /// with probability P) or draft:P,Q (the same, and the next token's
    /// alternatives 2 and 3, the true token within the top 3 with
    /// probability Q).
    #[arg(long, default_value = "draft:0.79,0.95")]
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
}

/// The flags that choose how the bench (the floor's divisor) and iobench
/// learn the device's random read rate: one probe, one cache.
#[derive(Debug, clap::Args)]
pub struct DeviceArgs {
    /// Device random 4 KiB reads per second for the floor, instead of
    /// measuring them.
    #[arg(long, value_name = "IOPS")]
    pub device_iops: Option<f64>,
    /// Seconds the device measurement runs (cached per model file and
    /// machine in $XDG_CACHE_HOME/engram/device.json).
    #[arg(long, default_value_t = 3.0)]
    pub device_seconds: f64,
    /// Measure the device anew, neither reading nor writing the cache: on
    /// a device whose rate drifts between runs, the floor then divides by
    /// a rate measured just before the run.
    #[arg(long, conflicts_with = "device_iops")]
    pub device_fresh: bool,
    /// No device measurement and no floor.
    #[arg(long, conflicts_with_all = ["device_iops", "device_fresh"])]
    pub no_floor: bool,
}

impl DeviceArgs {
    pub(crate) fn mode(&self) -> DeviceMode {
        match (self.no_floor, self.device_iops) {
            (true, _) => DeviceMode::Off,
            (false, Some(iops)) => DeviceMode::Iops(iops),
            (false, None) => DeviceMode::Measure {
                seconds: self.device_seconds,
                cache: if self.device_fresh {
                    None
                } else {
                    default_cache()
                },
            },
        }
    }
}

impl Args {
    fn config(&self, family: Family) -> Result<BenchConfig> {
        let backend: Backend = self.backend.parse()?;
        let schedules = match self.schedule.as_deref() {
            Some(list) => ScheduleKind::parse_list(list)?,
            None => ScheduleKind::defaults(family),
        };
        let compute = self.compute.as_deref().unwrap_or(match family {
            Family::DeepSeekEngram => "gpu:m4-max-ds4",
            Family::Qwen4ExpPle => "gpu:m4-max-qwen38",
        });
        let io = IoConfig::default()
            .with_backend(backend)
            .with_direct(self.direct);
        Ok(BenchConfig {
            compute: ComputeSpec::parse(compute)?,
            sweep: Sweep::parse(&self.sweep)?,
            ubatch: self.ubatch,
            wait_tokens: self.wait_tokens,
            hold_rows: self.hold_rows,
            schedules,
            hints: HintMode::parse(&self.hints)?,
            cold: self.cold,
            io,
            cache_bytes: self.cache_mib.saturating_mul(1 << 20),
            seed: self.seed,
            hot: self.hot.clone(),
            repeat: self.repeat,
            device: self.device.mode(),
            cores: self.cores,
        })
    }

    fn prompts(&self) -> Result<Vec<Prompt>> {
        match (&self.corpus, &self.prompt) {
            (Some(dir), _) => prompt::corpus(dir, self.prefill, self.decode),
            (None, Some(file)) => Ok(vec![Prompt::from_file(file, self.prefill, self.decode)?]),
            (None, None) => Err(Error::InvalidArgument(
                "bench needs --prompt FILE or --corpus DIR".into(),
            )),
        }
    }
}

/// Runs `engram bench`.
pub fn run(args: &Args) -> Result<()> {
    // First, before anything starts a thread: every later thread inherits it.
    if let Some(n) = args.cores {
        let cores = cores::pin_process(n)?;
        eprintln!("pinned to cores {cores:?}");
    }
    let model = Model::open(&args.model)?;
    let config = args.config(model.layout.family)?;
    config.validate()?;
    let prompts = args.prompts()?;
    let report = run_bench(&model, &args.model, &prompts, &config, |event| {
        say(event, prompts.len(), config.repeat)
    })?;
    finish(&report, args.json, args.plot.as_deref())
}

/// Tells stderr what the benchmark is doing. A stderr that cannot be
/// written (a full disk under a redirect) must not end a long run, so
/// errors are ignored instead of panicking as `eprintln!` would.
pub fn say(event: Progress<'_>, prompts: usize, repeat: usize) {
    use std::io::Write;
    let line = match event {
        Progress::Note(note) => note.to_string(),
        Progress::Run {
            prompt,
            repeat: r,
            schedule,
        } => {
            let mut at = String::new();
            if prompts > 1 {
                at.push_str(&format!("{prompt}: "));
            }
            if repeat > 1 {
                at.push_str(&format!("repeat {}/{repeat}: ", r + 1));
            }
            format!("{at}running {schedule} ...")
        }
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Prints the report (table or JSON) and writes the plot (of the first
/// prompt's first repeat) if asked.
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
