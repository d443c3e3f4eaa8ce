//! Quick stall measurement of the prefetch scheduler: a synthetic
//! DeepSeek-V4.1-Flash-shaped model (scaled down), a real text tokenized with
//! the vendored tokenizer, and a stand-in forward pass that sleeps each
//! layer's duration (the `gpu:m4-max-ds4` profile: 43 layers, 68 us per
//! token per layer in prefill, 0.87 ms per layer in decode), as a runtime's
//! forward thread blocks on a GPU command buffer. Table 0 is waited for at
//! its layer (1), table 1 at its layer (14). The page cache is evicted before
//! each schedule.
//!
//! ```text
//! cargo run --release -p engram --example prefetch_stall -- \
//!     [--dir /tmp/engram-sched] [--scale 64] [--prefill 4096] [--ubatch 512] \
//!     [--decode 32] [--json FILE]
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::cache::{CachedSource, RowCache};
use engram::codec::Encoding;
use engram::io::{cachectl, open_source, IoConfig, RowSource};
use engram::layout::{encode, preset, vendored_tokenizer};
use engram::model::{synth, Model, NoProgress};
use engram::prefetch::{Engine, PrefetchConfig};
use engram::stats::Stats;
use engram::Result;

const LAYERS: u32 = 43;
const PREFILL_PER_TOKEN_LAYER: Duration = Duration::from_micros(68);
const DECODE_PER_LAYER: Duration = Duration::from_micros(870);

struct Args {
    dir: PathBuf,
    scale: u64,
    prefill: usize,
    ubatch: usize,
    decode: usize,
    json: Option<PathBuf>,
}

fn args() -> Args {
    let mut a = Args {
        dir: PathBuf::from("/tmp/engram-sched"),
        scale: 64,
        prefill: 4096,
        ubatch: 512,
        decode: 32,
        json: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        let number = || value.parse::<u64>().expect("a number");
        match pair[0].as_str() {
            "--dir" => a.dir = PathBuf::from(&value),
            "--scale" => a.scale = number(),
            "--prefill" => a.prefill = number() as usize,
            "--ubatch" => a.ubatch = number() as usize,
            "--decode" => a.decode = number() as usize,
            "--json" => a.json = Some(PathBuf::from(&value)),
            other => panic!("unknown option {other}"),
        }
    }
    a
}

/// A prompt of real source code: this crate's own Rust files.
fn prompt_tokens(n: usize) -> Result<Vec<u32>> {
    let mut text = String::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| engram::Error::io(&dir, e))? {
            let path = entry.map_err(|e| engram::Error::io(&dir, e))?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    for f in files {
        text.push_str(&std::fs::read_to_string(&f).map_err(|e| engram::Error::io(&f, e))?);
    }
    let mut tokens = encode(vendored_tokenizer()?, &text, "vendored")?;
    tokens.truncate(n);
    Ok(tokens)
}

fn model(a: &Args) -> Result<PathBuf> {
    let path = a.dir.join(format!("v41-scale{}.gguf", a.scale));
    if !path.exists() {
        std::fs::create_dir_all(&a.dir).map_err(|e| engram::Error::io(&a.dir, e))?;
        eprintln!("writing {} ...", path.display());
        let layout = preset("deepseek-v4.1-flash", a.scale)?;
        let tmp = path.with_extension("tmp");
        synth::write_gguf(&tmp, &layout, Encoding::E4m3E8m0Row264, 1, &NoProgress)?;
        std::fs::rename(&tmp, &path).map_err(|e| engram::Error::io(&path, e))?;
    }
    Ok(path)
}

struct Run {
    name: &'static str,
    wall: Duration,
    compute: Duration,
    stats: Stats,
}

fn run(
    name: &'static str,
    m: &Model,
    path: &Path,
    config: PrefetchConfig,
    cache: bool,
    a: &Args,
    tokens: &[u32],
) -> Result<Run> {
    let file = File::open(path).map_err(|e| engram::Error::io(path, e))?;
    cachectl::evict(&file).map_err(|e| engram::Error::io(path, e))?;
    let opened = open_source(&m.tables, &IoConfig::default())?;
    let source: Arc<dyn RowSource> = if cache {
        Arc::new(CachedSource::new(
            opened.source,
            Arc::new(RowCache::new(512 << 20, 264)),
        ))
    } else {
        opened.source
    };
    let engine = Engine::for_model(m, source, config)?;
    let mut seq = engine.sequence();
    let layer = |t: usize| seq_layer(m, t);
    let (l0, l1) = (layer(0), layer(1));
    let mut compute = Duration::ZERO;
    let mut forward = |d: Duration| {
        std::thread::sleep(d);
        compute += d;
    };
    let started = Instant::now();
    {
        let n = tokens.len();
        let mut prefill = seq.prefill(tokens, None)?;
        let mut from = 0;
        while from < n {
            let to = (from + a.ubatch).min(n);
            for l in 0..LAYERS {
                if l == l0 {
                    prefill.wait(0, to as u32)?;
                }
                if l == l1 {
                    prefill.wait(1, to as u32)?;
                }
                forward(PREFILL_PER_TOKEN_LAYER * (to - from) as u32);
            }
            from = to;
        }
    }
    // Decode: the prompt's continuation stands in for sampled tokens.
    let next: Vec<u32> = tokens.iter().rev().take(a.decode).copied().collect();
    for &t in &next {
        seq.step_begin(t)?;
        for l in 0..LAYERS {
            if l == l0 {
                seq.step_wait(0)?;
            }
            if l == l1 {
                seq.step_wait(1)?;
            }
            forward(DECODE_PER_LAYER);
        }
    }
    let wall = started.elapsed();
    Ok(Run {
        name,
        wall,
        compute,
        stats: seq.stats(),
    })
}

fn seq_layer(m: &Model, table: usize) -> u32 {
    m.layout.tables[table].layer_id
}

fn main() -> Result<()> {
    let a = args();
    let path = model(&a)?;
    let m = Model::open(&path)?;
    let tokens = prompt_tokens(a.prefill)?;
    eprintln!(
        "model {} ({} + {} rows), prompt {} tokens",
        path.display(),
        m.tables[0].rows,
        m.tables[1].rows,
        tokens.len()
    );
    let base = PrefetchConfig::default();
    let runs = vec![
        run(
            "sync (ENGRAM_PREFETCH=0)",
            &m,
            &path,
            PrefetchConfig {
                prefetch: false,
                ..base.clone()
            },
            false,
            &a,
            &tokens,
        )?,
        run(
            "whole table (ENGRAM_PIPELINE=0)",
            &m,
            &path,
            PrefetchConfig {
                pipeline: false,
                ..base.clone()
            },
            false,
            &a,
            &tokens,
        )?,
        run("overlap", &m, &path, base.clone(), false, &a, &tokens)?,
        run(
            "overlap, tables in parallel",
            &m,
            &path,
            PrefetchConfig {
                prefill_batches_in_flight: 2,
                ..base.clone()
            },
            false,
            &a,
            &tokens,
        )?,
        run(
            "overlap + cache + lookup hints",
            &m,
            &path,
            PrefetchConfig {
                lookup_hints: true,
                ..base.clone()
            },
            true,
            &a,
            &tokens,
        )?,
    ];
    println!(
        "{:<34} {:>8} {:>8} | prefill stall/token us: t0 mean p99, t1 mean p99, total s | decode stall/step us: t0 mean p50 p99, t1 mean p99",
        "schedule", "wall s", "compute"
    );
    for r in &runs {
        let p = &r.stats.prefill.tables;
        let d = &r.stats.decode.tables;
        println!(
            "{:<34} {:>8.2} {:>8.2} | {:>7.1} {:>7.1}, {:>7.1} {:>7.1}, {:>6.3} | {:>7.1} {:>7.1} {:>7.1}, {:>7.1} {:>7.1}",
            r.name,
            r.wall.as_secs_f64(),
            r.compute.as_secs_f64(),
            p[0].stall_per_token.mean_us,
            p[0].stall_per_token.p99_us,
            p[1].stall_per_token.mean_us,
            p[1].stall_per_token.p99_us,
            (p[0].stall_total_us + p[1].stall_total_us) / 1e6,
            d[0].stall_per_token.mean_us,
            d[0].stall_per_token.p50_us,
            d[0].stall_per_token.p99_us,
            d[1].stall_per_token.mean_us,
            d[1].stall_per_token.p99_us,
        );
    }
    if let Some(json) = &a.json {
        let doc: Vec<_> = runs
            .iter()
            .map(|r| serde_json::json!({"schedule": r.name, "wall_s": r.wall.as_secs_f64(), "compute_s": r.compute.as_secs_f64(), "stats": r.stats}))
            .collect();
        std::fs::write(json, serde_json::to_string_pretty(&doc).unwrap())
            .map_err(|e| engram::Error::io(json, e))?;
    }
    Ok(())
}
