//! Prefill stall under a layer sweep and a chunk sweep, against an emulation
//! of the peer's (`ds4`) prefill schedule, with a cold page cache and the
//! peak RSS of each run.
//!
//! The model is a synthetic DeepSeek V4.1-Flash (built on first use if
//! missing); the prompt is this repository's `.rs` sources tokenized with
//! the vendored tokenizer (repeated if they are too short: the output says
//! so). The stand-in forward pass blocks 68 us per token per layer against
//! absolute deadlines; table 0 is waited for at layer 1, table 1 at layer 14.
//!
//! - `layer` sweep: every token goes through layer i (in 512-token chunks)
//!   before layer i+1. Layers after the last Engram layer hold no wait and
//!   are not replayed; compute below counts all 43.
//! - `chunk` sweep: each 512-token ubatch goes through all 43 layers.
//!
//! Schedules: `overlap` (the library's prefill, default config), `dry`
//! (the same over a source of zero rows and no compute: counts rows read and
//! reused in a second, to choose `--reuse-mb`), and `ds4`
//! (emulated here: table 0 read for the whole prompt from before layer 0,
//! table 1 from layer 2, one reader per table, 2,048-token chunks each read
//! in one `read_rows` call (so dedup within the chunk), a whole-prompt
//! buffer per table, 1 ms sleep-poll waits). The emulation reads through
//! this crate's batched source, which is faster than the peer's one pread
//! per row: it flatters the peer.
//!
//! ```text
//! cargo run --release -p engram --example prefill_sweep -- \
//!     [--model /tmp/engram-bench/s8/model.gguf] [--scale 8] \
//!     [--tokens 8192,65536] [--sweep layer,chunk] [--schedule ds4,overlap] \
//!     [--reuse-mb 32]
//! ```
//!
//! Peak RSS is VmHWM from /proc/self/status, reset before each run by
//! writing 5 to /proc/self/clear_refs (Linux). Runs in one process share
//! the allocator's retained memory: for RSS, run one configuration per
//! process (`--tokens N --sweep S --schedule X`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engram::codec::Encoding;
use engram::io::{cachectl, open_source, IoConfig, RowSource};
use engram::layout::{encode, preset, vendored_tokenizer};
use engram::model::{synth, Model, NoProgress};
use engram::prefetch::{Engine, PrefetchConfig, Prefill, Sequence};
use engram::{Error, Result};

const LAYERS: u32 = 43;
const PER_TOKEN_LAYER: Duration = Duration::from_micros(68);
const UBATCH: u32 = 512;
const DS4_CHUNK: u32 = 2048;

struct Args {
    model: PathBuf,
    scale: u64,
    tokens: Vec<usize>,
    sweeps: Vec<String>,
    schedules: Vec<String>,
    reuse_mb: Option<u64>,
}

fn args() -> Result<Args> {
    let mut a = Args {
        model: PathBuf::from("/tmp/engram-bench/s8/model.gguf"),
        scale: 8,
        tokens: vec![8192, 65536],
        sweeps: vec!["layer".into(), "chunk".into()],
        schedules: vec!["ds4".into(), "overlap".into()],
        reuse_mb: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let bad = |what: String| Error::InvalidArgument(what);
    for pair in argv.chunks(2) {
        let value = pair.get(1).cloned().unwrap_or_default();
        let list = || value.split(',').map(str::to_string).collect::<Vec<_>>();
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| bad(format!("{}: not a number: {v}", pair[0])))
        };
        match pair[0].as_str() {
            "--model" => a.model = PathBuf::from(&value),
            "--scale" => a.scale = number(&value)?,
            "--tokens" => {
                a.tokens = list()
                    .iter()
                    .map(|v| number(v).map(|n| n as usize))
                    .collect::<Result<_>>()?
            }
            "--sweep" => a.sweeps = list(),
            "--schedule" => a.schedules = list(),
            "--reuse-mb" => a.reuse_mb = Some(number(&value)?),
            other => return Err(bad(format!("unknown option {other}"))),
        }
    }
    Ok(a)
}

/// The model, written on first use (temporary name, then renamed).
fn ensure_model(path: &Path, scale: u64) -> Result<()> {
    if path.exists() {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    eprintln!("writing {} (scale {scale}) ...", path.display());
    let layout = preset("deepseek-v4.1-flash", scale)?;
    let tmp = path.with_extension("tmp");
    synth::write_gguf(&tmp, &layout, Encoding::E4m3E8m0Row264, 1, &NoProgress)?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

/// `n` tokens of the repository's `.rs` sources in path order, repeated if
/// they hold fewer; also tells how many distinct source tokens there were.
fn prompt_tokens(n: usize) -> Result<(Vec<u32>, usize)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    let mut stack = vec![root.join("crates")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let path = entry.map_err(|e| Error::io(&dir, e))?.path();
            if path.is_dir() && !path.ends_with("target") {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut text = String::new();
    for f in &files {
        text.push_str(&std::fs::read_to_string(f).map_err(|e| Error::io(f, e))?);
        // A token is at least a byte: this surely holds enough. The same
        // text for any prompt up to 64K tokens, so the tokenizer leaves
        // the same memory behind and peak RSS compares the prefills only.
        if text.len() > n.max(65_536) * 8 {
            break;
        }
    }
    let source = encode(vendored_tokenizer()?, &text, "vendored")?;
    if source.is_empty() {
        return Err(Error::InvalidArgument("no source text found".into()));
    }
    let tokens = source.iter().copied().cycle().take(n).collect();
    Ok((tokens, source.len()))
}

/// Blocks for each layer's time against absolute deadlines (unless dry).
struct Clock {
    deadline: Instant,
    dry: bool,
}

impl Clock {
    fn layer(&mut self, tokens: u32) {
        if self.dry {
            return;
        }
        self.deadline = self.deadline.max(Instant::now()) + PER_TOKEN_LAYER * tokens;
        let now = Instant::now();
        if self.deadline > now {
            std::thread::sleep(self.deadline - now);
        }
    }
}

/// What the stand-in forward pass waits on.
trait Rows {
    /// Called when the forward pass enters `layer` (any chunk).
    fn layer_start(&mut self, _layer: u32) {}
    /// Blocks until the rows of tokens `..upto` of `table` are there.
    fn wait(&mut self, table: usize, upto: u32) -> Result<()>;
}

impl Rows for Prefill<'_> {
    fn wait(&mut self, table: usize, upto: u32) -> Result<()> {
        Prefill::wait(self, table, upto).map(drop)
    }
}

/// Replays one sweep; returns the stall per table.
fn sweep(
    rows: &mut dyn Rows,
    sweep: &str,
    n: u32,
    layers: [u32; 2],
    dry: bool,
) -> Result<[f64; 2]> {
    let engram_layers = layers;
    let mut stall = [0f64; 2];
    let mut clock = Clock {
        deadline: Instant::now(),
        dry,
    };
    let mut step = |rows: &mut dyn Rows, layer: u32, from: u32, to: u32| -> Result<()> {
        for (table, &l) in engram_layers.iter().enumerate() {
            if l == layer {
                let started = Instant::now();
                rows.wait(table, to)?;
                stall[table] += started.elapsed().as_secs_f64();
            }
        }
        clock.layer(to - from);
        Ok(())
    };
    let chunks: Vec<(u32, u32)> = (0..n)
        .step_by(UBATCH as usize)
        .map(|f| (f, (f + UBATCH).min(n)))
        .collect();
    if sweep == "layer" {
        let last = engram_layers.iter().copied().max().unwrap_or(0);
        for layer in 0..=last {
            rows.layer_start(layer);
            for &(from, to) in &chunks {
                step(rows, layer, from, to)?;
            }
        }
    } else {
        for &(from, to) in &chunks {
            for layer in 0..LAYERS {
                rows.layer_start(layer);
                step(rows, layer, from, to)?;
            }
        }
    }
    Ok(stall)
}

/// The peer's schedule, emulated: see the module docs.
struct Ds4 {
    source: Arc<dyn RowSource>,
    ids: Arc<Vec<u32>>,
    ready: [Arc<AtomicU32>; 2],
    failed: Arc<AtomicBool>,
    readers: Vec<JoinHandle<Result<()>>>,
    cols: usize,
}

impl Ds4 {
    fn start_table(&mut self, table: usize) {
        let (source, ids, ready) = (
            self.source.clone(),
            self.ids.clone(),
            self.ready[table].clone(),
        );
        let (failed, cols) = (self.failed.clone(), self.cols);
        self.readers.push(std::thread::spawn(move || {
            let n = (ids.len() / (2 * cols)) as u32;
            let rb = source.row_bytes(table);
            // One buffer for the whole prompt, as the peer has.
            let mut buffer = vec![0u8; n as usize * cols * rb];
            for from in (0..n).step_by(DS4_CHUNK as usize) {
                let to = (from + DS4_CHUNK).min(n);
                let rows: Vec<u32> = (from..to)
                    .flat_map(|t| {
                        let base = t as usize * 2 * cols + table * cols;
                        ids[base..base + cols].iter().copied()
                    })
                    .collect();
                let out = &mut buffer[from as usize * cols * rb..to as usize * cols * rb];
                if let Err(e) = source.read_rows(table, &rows, out) {
                    failed.store(true, Ordering::Release);
                    return Err(e);
                }
                ready.store(to, Ordering::Release);
            }
            Ok(())
        }));
    }

    fn join(self) -> Result<()> {
        for r in self.readers {
            r.join()
                .map_err(|_| Error::InvalidArgument("ds4 reader panicked".into()))??;
        }
        Ok(())
    }
}

impl Rows for Ds4 {
    fn layer_start(&mut self, layer: u32) {
        if layer == 2 && self.readers.len() == 1 {
            self.start_table(1);
        }
    }

    fn wait(&mut self, table: usize, upto: u32) -> Result<()> {
        while self.ready[table].load(Ordering::Acquire) < upto {
            if self.failed.load(Ordering::Acquire) {
                return Err(Error::InvalidArgument("a ds4 reader failed".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

/// Rows of zero bytes (valid E4M3 rows), served at once.
struct ZeroRows {
    rows: Vec<u64>,
}

impl RowSource for ZeroRows {
    fn name(&self) -> String {
        "zero".into()
    }
    fn tables(&self) -> usize {
        self.rows.len()
    }
    fn table_rows(&self, table: usize) -> u64 {
        self.rows[table]
    }
    fn row_bytes(&self, _table: usize) -> usize {
        Encoding::E4m3E8m0Row264.row_bytes()
    }
    fn read_rows_at(
        &self,
        _table: usize,
        rows: &[u32],
        out: &mut [u8],
        _priority: engram::io::Priority,
    ) -> Result<engram::io::BatchStats> {
        out.fill(0);
        let mut unique = rows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        Ok(engram::io::BatchStats {
            rows_requested: rows.len() as u64,
            rows_unique: unique.len() as u64,
            ..Default::default()
        })
    }
}

/// Peak RSS since the last reset, MB.
fn peak_rss_mb() -> f64 {
    rss_mb("VmHWM:")
}

/// A memory line of /proc/self/status (`VmHWM:`, `VmRSS:`), MB.
fn rss_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn reset_peak_rss() {
    // Hand freed heap (the tokenizer's, earlier runs') back to the kernel
    // first, so it does not count in this run's peak.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    if std::env::var_os("PREFILL_SWEEP_DEBUG").is_some() {
        eprintln!("RSS at reset: {:.0} MB", rss_mb("VmRSS:"));
    }
}

struct Outcome {
    stall: [f64; 2],
    rss_mb: f64,
    /// Table 0: distinct row ids per source call, summed (rows read from
    /// storage), and row ids served by the reuse store.
    rows_read: u64,
    reuse_hits: u64,
}

fn run(m: &Model, a: &Args, schedule: &str, sweep_name: &str, tokens: &[u32]) -> Result<Outcome> {
    let file = File::open(&a.model).map_err(|e| Error::io(&a.model, e))?;
    cachectl::evict(&file).map_err(|e| Error::io(&a.model, e))?;
    let opened = open_source(&m.tables, &IoConfig::default())?;
    let layers = [m.layout.tables[0].layer_id, m.layout.tables[1].layer_id];
    let n = tokens.len() as u32;
    reset_peak_rss();
    let mut config = PrefetchConfig::default();
    if let Some(mb) = a.reuse_mb {
        config.reuse_bytes = mb << 20; // new-api
    }
    let dry = schedule == "dry";
    let source: Arc<dyn RowSource> = if dry {
        Arc::new(ZeroRows {
            rows: m.tables.iter().map(|t| t.rows).collect(),
        })
    } else {
        opened.source.clone()
    };
    let engine = Engine::for_model(m, source, config)?;
    let mut seq: Sequence = engine.sequence();
    if schedule == "ds4" {
        let ids = Arc::new(seq.row_ids(tokens, None)?);
        let mut ds4 = Ds4 {
            source: opened.source,
            ids,
            ready: [Arc::default(), Arc::default()],
            failed: Arc::default(),
            readers: Vec::new(),
            cols: seq.rows_per_token(),
        };
        ds4.start_table(0);
        let stall = sweep(&mut ds4, sweep_name, n, layers, false)?;
        let rss_mb = peak_rss_mb();
        ds4.join()?;
        return Ok(Outcome {
            stall,
            rss_mb,
            rows_read: 0,
            reuse_hits: 0,
        });
    }
    let stall = {
        let mut prefill = seq.prefill(tokens, None)?;
        sweep(&mut prefill, sweep_name, n, layers, dry)?
    };
    let rss_mb = peak_rss_mb();
    // Read through JSON so the example also builds against a library
    // without the reuse_hits field (for before/after runs).
    let json: serde_json::Value = serde_json::from_str(&seq.stats().to_json())
        .map_err(|e| Error::InvalidArgument(format!("stats JSON: {e}")))?;
    let t0 = &json["prefill"]["tables"][0];
    Ok(Outcome {
        stall,
        rss_mb,
        rows_read: t0["rows_unique"].as_u64().unwrap_or(0),
        reuse_hits: t0["reuse_hits"].as_u64().unwrap_or(0),
    })
}

fn main() -> Result<()> {
    let a = args()?;
    ensure_model(&a.model, a.scale)?;
    let m = Model::open(&a.model)?;
    let max = a.tokens.iter().copied().max().unwrap_or(0);
    let (all, distinct) = prompt_tokens(max)?;
    eprintln!(
        "model {} ({} + {} rows); prompt: repository .rs sources, {distinct} tokens{}",
        a.model.display(),
        m.tables[0].rows,
        m.tables[1].rows,
        if distinct < max {
            " (repeated to fill)"
        } else {
            ""
        }
    );
    println!(
        "{:>7} {:>6} {:>8} | {:>9} {:>9} {:>9} {:>8} | {:>10} {:>10} | {:>8}",
        "tokens",
        "sweep",
        "schedule",
        "stall0 s",
        "stall1 s",
        "stall s",
        "% comp",
        "t0 read",
        "t0 reused",
        "RSS MB"
    );
    for &n in &a.tokens {
        let tokens = &all[..n];
        let compute = (n as f64) * f64::from(LAYERS) * PER_TOKEN_LAYER.as_secs_f64();
        for sweep_name in &a.sweeps {
            for schedule in &a.schedules {
                let o = run(&m, &a, schedule, sweep_name, tokens)?;
                let total = o.stall[0] + o.stall[1];
                println!(
                    "{n:>7} {sweep_name:>6} {schedule:>8} | {:>9.3} {:>9.3} {:>9.3} {:>7.2}% | \
                     {:>10} {:>10} | {:>8.0}",
                    o.stall[0],
                    o.stall[1],
                    total,
                    100.0 * total / compute,
                    o.rows_read,
                    o.reuse_hits,
                    o.rss_mb
                );
            }
        }
    }
    Ok(())
}
