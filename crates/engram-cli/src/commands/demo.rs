//! `engram demo`: the README's main command. Builds (once) a small synthetic
//! DeepSeek V4.1-Flash-shaped model, takes this repository's own sources and
//! docs as the prompt, and replays a prefill and a decode against a stand-in
//! GPU forward pass under several prefetch schedules, printing the stall each
//! one leaves.
//!
//! The stand-in compute is the `gpu:m4-max-ds4` profile of DESIGN.md: 43
//! layers, 1/344 s per prefill token and 1/26.76 s per decode token, spread
//! evenly over the layers. The forward thread sleeps to absolute deadlines
//! (so sleep overshoot does not accumulate), as a runtime's thread blocks on a
//! GPU command buffer; table 0 is waited for before its layer (1), table 1
//! before its layer (14).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::cache::{CachedSource, RowCache};
use engram::codec::Encoding;
use engram::io::{cachectl, open_source, IoConfig, RowSource};
use engram::layout::{self as engram_layout, preset};
use engram::model::{synth, Model};
use engram::prefetch::{Engine, PrefetchConfig};
use engram::stats::{Stats, Summary};
use engram::{Error, Result};

use crate::progress::Bar;

/// Layers of the stand-in forward pass.
const LAYERS: u32 = 43;
/// Prefill speed of the profile, tokens per second.
const PREFILL_TOKENS_PER_S: f64 = 344.0;
/// Decode speed of the profile, tokens per second.
const DECODE_TOKENS_PER_S: f64 = 26.76;
/// Tokens per forward call in prefill (the runtime's micro-batch).
const UBATCH: usize = 512;
/// Row cache budget of the `full` schedule.
const CACHE_BYTES: u64 = 256 << 20;

/// Arguments of `engram demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where the synthetic model is built and kept between runs.
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
}

/// One schedule of the demo: a prefetch configuration and whether the
/// session row cache is on.
struct Schedule {
    name: &'static str,
    config: PrefetchConfig,
    cache: bool,
}

/// What one schedule measured.
struct Outcome {
    name: &'static str,
    prefill_wall: Duration,
    prefill_compute: Duration,
    decode_wall: Duration,
    decode_compute: Duration,
    stats: Stats,
}

/// Runs the demo.
pub fn run(args: &Args) -> Result<()> {
    let path = ensure_model(&args.dir, args.scale)?;
    let model = Model::open(&path)?;
    let tokens = prompt_tokens(args.prefill + args.decode)?;
    if tokens.len() < args.prefill + args.decode {
        return Err(Error::InvalidArgument(format!(
            "the repository's sources give {} tokens; --prefill plus --decode asks for {}",
            tokens.len(),
            args.prefill + args.decode
        )));
    }
    let (prompt, continuation) = tokens.split_at(args.prefill);
    eprintln!(
        "model {} ({} + {} rows), prompt {} tokens, {} decode steps, compute gpu:m4-max-ds4",
        path.display(),
        model.tables[0].rows,
        model.tables[1].rows,
        prompt.len(),
        continuation.len()
    );
    let mut outcomes = Vec::new();
    for schedule in schedules() {
        eprintln!("running {} ...", schedule.name);
        outcomes.push(replay(&model, &path, &schedule, prompt, continuation)?);
    }
    print_table(&outcomes);
    Ok(())
}

/// The schedules compared: no prefetch, this project's pipeline, and the
/// pipeline with the row cache and prompt-lookup hints.
fn schedules() -> Vec<Schedule> {
    let base = PrefetchConfig::default();
    vec![
        Schedule {
            name: "sync",
            config: PrefetchConfig {
                prefetch: false,
                ..base.clone()
            },
            cache: false,
        },
        Schedule {
            name: "overlap",
            config: base.clone(),
            cache: false,
        },
        Schedule {
            name: "full",
            config: PrefetchConfig {
                lookup_hints: true,
                ..base
            },
            cache: true,
        },
    ]
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

/// Tokens of this repository's own Rust sources and Markdown docs, in path
/// order, tokenized with the vendored tokenizer.
fn prompt_tokens(limit: usize) -> Result<Vec<u32>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for sub in ["crates", "docs"] {
        collect_sources(&root.join(sub), &mut files)?;
    }
    files.sort();
    let mut text = String::new();
    for file in &files {
        text.push_str(&std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?);
        // Stop reading once the text surely holds enough tokens (a token is
        // at least one byte), so the prompt costs little to tokenize.
        if text.len() > limit * 8 {
            break;
        }
    }
    let tokenizer = engram_layout::vendored_tokenizer()?;
    let mut tokens = engram_layout::encode(
        tokenizer,
        &text,
        engram_layout::token_map::VENDORED_SOURCE_NAME,
    )?;
    tokens.truncate(limit);
    Ok(tokens)
}

/// Appends every `.rs` and `.md` file under `dir` to `files`.
fn collect_sources(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_dir() {
            collect_sources(&path, files)?;
        } else if path
            .extension()
            .is_some_and(|ext| ext == "rs" || ext == "md")
        {
            files.push(path);
        }
    }
    Ok(())
}

/// A forward pass that blocks for each layer's time against absolute
/// deadlines and counts the compute time it stood for.
struct StandInCompute {
    deadline: Instant,
    compute: Duration,
}

impl StandInCompute {
    fn new() -> Self {
        StandInCompute {
            deadline: Instant::now(),
            compute: Duration::ZERO,
        }
    }

    /// Blocks for one layer of `per_layer`. A wait that made us late moves
    /// the deadline forward: stall is not paid back by skipping compute.
    fn layer(&mut self, per_layer: Duration) {
        self.deadline = self.deadline.max(Instant::now()) + per_layer;
        let now = Instant::now();
        if self.deadline > now {
            std::thread::sleep(self.deadline - now);
        }
        self.compute += per_layer;
    }
}

/// Replays the prompt and the decode steps under one schedule, the table
/// files evicted from the page cache first.
fn replay(
    model: &Model,
    path: &Path,
    schedule: &Schedule,
    prompt: &[u32],
    continuation: &[u32],
) -> Result<Outcome> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    cachectl::evict(&file).map_err(|e| Error::io(path, e))?;
    let opened = open_source(&model.tables, &IoConfig::default())?;
    let source: Arc<dyn RowSource> = if schedule.cache {
        let row_bytes = model.tables[0].encoding.row_bytes();
        let cache = Arc::new(RowCache::new(CACHE_BYTES, row_bytes));
        Arc::new(CachedSource::new(opened.source, cache))
    } else {
        opened.source
    };
    let engine = Engine::for_model(model, source, schedule.config.clone())?;
    let mut sequence = engine.sequence();
    let layer_of = |table: usize| model.layout.tables[table].layer_id;
    let (layer0, layer1) = (layer_of(0), layer_of(1));

    let per_token_layer = Duration::from_secs_f64(1.0 / PREFILL_TOKENS_PER_S / LAYERS as f64);
    let mut compute = StandInCompute::new();
    let started = Instant::now();
    {
        let mut prefill = sequence.prefill(prompt, None)?;
        for from in (0..prompt.len()).step_by(UBATCH) {
            let to = (from + UBATCH).min(prompt.len());
            for layer in 0..LAYERS {
                if layer == layer0 {
                    prefill.wait(0, to as u32)?;
                }
                if layer == layer1 {
                    prefill.wait(1, to as u32)?;
                }
                compute.layer(per_token_layer * (to - from) as u32);
            }
        }
    }
    let prefill_wall = started.elapsed();
    let prefill_compute = compute.compute;

    let per_layer = Duration::from_secs_f64(1.0 / DECODE_TOKENS_PER_S / LAYERS as f64);
    let mut compute = StandInCompute::new();
    let started = Instant::now();
    for &token in continuation {
        sequence.step_begin(token)?;
        for layer in 0..LAYERS {
            if layer == layer0 {
                sequence.step_wait(0)?;
            }
            if layer == layer1 {
                sequence.step_wait(1)?;
            }
            compute.layer(per_layer);
        }
    }
    Ok(Outcome {
        name: schedule.name,
        prefill_wall,
        prefill_compute,
        decode_wall: started.elapsed(),
        decode_compute: compute.compute,
        stats: sequence.stats(),
    })
}

/// Prints one line per schedule.
fn print_table(outcomes: &[Outcome]) {
    println!(
        "{:<8} | {:>9} {:>9} {:>9} | {:>8} {:>8} {:>10} {:>10} {:>10} | {:>10}",
        "schedule",
        "prefill s",
        "compute s",
        "stall s",
        "decode/s",
        "floor/s",
        "stall mean",
        "stall p99",
        "stall max",
        "MB read"
    );
    for o in outcomes {
        let prefill = &o.stats.prefill;
        let prefill_stall: f64 = prefill.tables.iter().map(|t| t.stall_total_us).sum::<f64>() / 1e6;
        let decode = &o.stats.decode.stall_per_token_total;
        let steps = decode.count.max(1) as f64;
        let bytes_read: u64 = [&o.stats.prefill, &o.stats.decode, &o.stats.hints]
            .iter()
            .flat_map(|phase| phase.tables.iter())
            .map(|t| t.bytes_read)
            .sum();
        println!(
            "{:<8} | {:>9.2} {:>9.2} {:>9.3} | {:>8.2} {:>8.2} {:>10} {:>10} {:>10} | {:>10}",
            o.name,
            o.prefill_wall.as_secs_f64(),
            o.prefill_compute.as_secs_f64(),
            prefill_stall,
            steps / o.decode_wall.as_secs_f64(),
            steps / o.decode_compute.as_secs_f64(),
            micros(decode, |s| s.mean_us),
            micros(decode, |s| s.p99_us),
            micros(decode, |s| s.max_us),
            format!("{:.1}", bytes_read as f64 / 1e6)
        );
    }
    println!(
        "\nprefill: wall, stand-in compute and time blocked on rows; decode: tokens/s against the \
         compute-only floor, and the per-token stall (both tables) in microseconds."
    );
}

fn micros(summary: &Summary, pick: impl Fn(&Summary) -> f64) -> String {
    format!("{:.0} us", pick(summary))
}
