//! `engram profile --model M --corpus FILE|DIR... --budget-mib N --out HOT`:
//! counts which rows a corpus looks up most and writes them, with their
//! bytes, to a hot-row file the engine loads at open (`--hot`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use engram::hot::profile::{self, CorpusOptions};
use engram::hot::ProfileInfo;
use engram::io::{open_source, IoConfig};
use engram::model::{Model, Progress};
use engram::{Error, Result};

/// Arguments of `engram profile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Model: a ds4 `.gguf` file or a Hugging Face checkpoint directory.
    #[arg(long)]
    pub model: PathBuf,
    /// Text files or directories (walked recursively, hidden entries
    /// skipped; files that are not UTF-8 are skipped).
    #[arg(long, required = true, num_args = 1..)]
    pub corpus: Vec<PathBuf>,
    /// Only files with these extensions, comma separated (e.g. py,rs).
    #[arg(long, value_delimiter = ',')]
    pub ext: Vec<String>,
    /// Budget per table, MiB: a hot row costs its bytes plus a 4-byte id.
    #[arg(long)]
    pub budget_mib: u64,
    /// Stop after this many corpus tokens (files taken in path order).
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// Tokenizer threads (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// The hot-row file to write (temporary name, then renamed). Required
    /// unless `--layout-preset` is given, which writes none.
    #[arg(long, required_unless_present = "layout_preset")]
    pub out: Option<PathBuf>,
    /// Hash with this preset's released (unscaled) layout instead of the
    /// model's, so a hot set's size is measured against the real table of a
    /// scaled synthetic model (the rows' bytes are the model's encoding's;
    /// no hot-row file is written, the rows are not the model's).
    #[arg(long, value_name = "PRESET")]
    pub layout_preset: Option<String>,
    /// Held-out text files or directories: reports the share of their
    /// prefill rows (distinct per prompt) and decode lookups the hot set
    /// serves.
    #[arg(long, num_args = 1..)]
    pub held_out: Vec<PathBuf>,
    /// Prompt tokens of each held-out file (the rest, up to
    /// `--held-out-decode`, are decode steps).
    #[arg(long, default_value_t = 8192)]
    pub held_out_prefill: usize,
    /// Decode steps of each held-out file after its prompt.
    #[arg(long, default_value_t = 500)]
    pub held_out_decode: usize,
    /// Reads in flight while collecting the hot rows' bytes.
    #[arg(long, default_value_t = 256)]
    pub depth: usize,
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
}

/// What `engram profile` did, per table and in total.
#[derive(Debug, Serialize)]
struct Summary {
    /// The hot-row file, or `null` with `--layout-preset`.
    out: Option<String>,
    /// Whose layout hashed the corpus: `model`, or the preset named.
    layout: String,
    file_bytes: u64,
    files: u64,
    skipped_files: usize,
    tokens: u64,
    count_seconds: f64,
    tokens_per_second: f64,
    read_seconds: f64,
    tables: Vec<TableSummary>,
}

#[derive(Debug, Serialize)]
struct TableSummary {
    table: usize,
    hot_rows: usize,
    distinct_rows_seen: u64,
    /// Share of the corpus's lookups of this table that the hot rows serve.
    lookup_coverage: f64,
    /// What the hot rows serve of the held-out files (`--held-out`).
    #[serde(skip_serializing_if = "Option::is_none")]
    held_out: Option<HeldOutSummary>,
}

#[derive(Debug, Serialize)]
struct HeldOutSummary {
    files: usize,
    prefill_rows: u64,
    prefill_hot_share: f64,
    decode_rows: u64,
    decode_hot_share: f64,
}

/// Runs `engram profile`.
pub fn run(args: &Args) -> Result<()> {
    let model = Model::open(&args.model)?;
    let layout = match &args.layout_preset {
        None => model.layout.clone(),
        Some(name) => {
            let layout = engram::layout::preset(name, 1)?;
            if layout.family != model.layout.family || layout.tables.len() != model.tables.len() {
                return Err(Error::InvalidArgument(format!(
                    "--layout-preset {name}: a {} layout of {} tables, but {} is a {} model of {}",
                    layout.family,
                    layout.tables.len(),
                    args.model.display(),
                    model.layout.family,
                    model.tables.len()
                )));
            }
            layout
        }
    };
    let held_out = match args.held_out.is_empty() {
        true => Vec::new(),
        false => corpus_files(&args.held_out, &args.ext)?,
    };
    let files = corpus_files(&args.corpus, &args.ext)?;
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let bar = crate::progress::Bar::new("tokenize + count", args.quiet || args.json);
    bar.start(total);
    let started = Instant::now();
    let counted = profile::count_corpus(
        &layout,
        &files,
        &CorpusOptions {
            threads,
            max_tokens: args.max_tokens,
        },
        &bar,
    )?;
    bar.finish();
    let count_seconds = started.elapsed().as_secs_f64();
    let counts = &counted.counts;
    let budget_bytes = args.budget_mib.saturating_mul(1 << 20);
    let columns = layout.columns() as u64;
    let hasher = engram::hash::Hasher::new(&layout)?;
    let mut documents = Vec::with_capacity(held_out.len());
    for file in &held_out {
        let text = std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?;
        documents.push(engram_replay::prompt::tokenize(&text)?);
    }
    let mut ids = Vec::new();
    let mut tables = Vec::new();
    for (t, location) in model.tables.iter().enumerate() {
        let keep = profile::rows_for_budget(budget_bytes, location.full_row_bytes());
        let top = counts.top(t, keep);
        let served: u64 = top.iter().map(|&r| counts.count(t, r)).sum();
        let mut share = profile::HeldOutShare::default();
        for tokens in &documents {
            let (prefill, decode) = (args.held_out_prefill, args.held_out_decode);
            share.add_document(&hasher, t, &top, tokens, prefill, decode)?;
        }
        tables.push(TableSummary {
            table: t,
            hot_rows: top.len(),
            distinct_rows_seen: counts.distinct(t),
            lookup_coverage: served as f64 / (counts.tokens() * columns).max(1) as f64,
            held_out: (!documents.is_empty()).then(|| HeldOutSummary {
                files: documents.len(),
                prefill_rows: share.prefill_rows,
                prefill_hot_share: share.prefill_share(),
                decode_rows: share.decode_rows,
                decode_hot_share: share.decode_share(),
            }),
        });
        ids.push(top);
    }
    let read_started = Instant::now();
    let file_bytes = match (&args.out, &args.layout_preset) {
        (Some(out), None) => {
            let io = IoConfig::default().with_depth(args.depth);
            let source = open_source(&model.tables, &io)?.source;
            let bar = crate::progress::Bar::new("read hot rows", args.quiet || args.json);
            let info = ProfileInfo {
                tokens: counts.tokens(),
                files: counts.documents(),
                budget_bytes,
            };
            let bytes = profile::write_hot_file(out, &model, source.as_ref(), ids, info, &bar)?;
            bar.finish();
            bytes
        }
        _ => 0,
    };
    let summary = Summary {
        out: match &args.layout_preset {
            None => args.out.as_ref().map(|p| p.display().to_string()),
            Some(_) => None,
        },
        layout: args
            .layout_preset
            .as_ref()
            .map_or("model".to_string(), |p| format!("{p} (unscaled)")),
        file_bytes,
        files: counts.documents(),
        skipped_files: counted.skipped.len(),
        tokens: counts.tokens(),
        count_seconds,
        tokens_per_second: counts.tokens() as f64 / count_seconds.max(1e-9),
        read_seconds: read_started.elapsed().as_secs_f64(),
        tables,
    };
    if args.json {
        crate::emit(&serde_json::to_string_pretty(&summary).expect("plain values"));
    } else {
        crate::emit(&human(&summary));
    }
    Ok(())
}

fn human(s: &Summary) -> String {
    let mut out = format!(
        "profiled {} tokens of {} files ({} skipped: not UTF-8) in {:.1} s ({:.0} tokens/s)\n",
        s.tokens, s.files, s.skipped_files, s.count_seconds, s.tokens_per_second
    );
    for t in &s.tables {
        out.push_str(&format!(
            "table {}: {} hot rows of {} seen, serving {:.1}% of the corpus's lookups\n",
            t.table,
            t.hot_rows,
            t.distinct_rows_seen,
            100.0 * t.lookup_coverage
        ));
        if let Some(h) = &t.held_out {
            out.push_str(&format!(
                "  held out ({} files): {:.1}% of {} prefill rows, {:.1}% of {} decode lookups\n",
                h.files,
                100.0 * h.prefill_hot_share,
                h.prefill_rows,
                100.0 * h.decode_hot_share,
                h.decode_rows
            ));
        }
    }
    match &s.out {
        Some(path) => out.push_str(&format!(
            "wrote {path} ({:.1} MB; rows read in {:.1} s)",
            s.file_bytes as f64 / 1e6,
            s.read_seconds
        )),
        None => out.push_str(&format!(
            "hashed with {}: no hot-row file written",
            s.layout
        )),
    }
    out
}

/// The files of `paths` (directories walked recursively, hidden entries
/// skipped), with one of `ext` if any is given, sorted and deduplicated.
fn corpus_files(paths: &[PathBuf], ext: &[String]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
        if meta.is_dir() {
            walk(path, &mut files)?;
        } else {
            files.push(path.clone());
        }
    }
    if !ext.is_empty() {
        files.retain(|f| {
            f.extension()
                .is_some_and(|e| ext.iter().any(|x| e == x.trim_start_matches('.')))
        });
    }
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(Error::InvalidArgument(
            "--corpus: no files found (check the paths and --ext)".into(),
        ));
    }
    Ok(files)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            walk(&path, files)?;
        } else if kind.is_file() {
            files.push(path);
        }
    }
    Ok(())
}
