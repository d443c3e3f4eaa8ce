//! `engram layout`: print a layout's tables, primes and multipliers.

use std::io::Write;

use serde::Serialize;

use super::{grouped, CmdResult, LayoutSource};
use engram::layout::{Family, Layout, PRESETS};

/// Arguments of `engram layout`.
#[derive(Debug, clap::Args)]
#[command(after_help = presets_help())]
pub struct LayoutArgs {
    #[command(flatten)]
    source: LayoutSource,
    /// Print one JSON document instead of a summary.
    #[arg(long)]
    json: bool,
}

fn presets_help() -> String {
    format!("Presets: {}", PRESETS.join(", "))
}

/// The JSON document of `engram layout --json` (field order is the contract;
/// `family`, `head_dim` and `stored_rows` came last, after the others).
#[derive(Serialize)]
pub struct LayoutJson {
    layer_ids: Vec<u32>,
    max_ngram_size: usize,
    n_heads: usize,
    vocab_size: usize,
    compressed_vocab_size: u32,
    pad_compressed_id: u32,
    rows: Vec<u64>,
    primes: Vec<Vec<u32>>,
    multipliers: Vec<Vec<u64>>,
    family: &'static str,
    head_dim: usize,
    stored_rows: Vec<u64>,
}

impl From<&Layout> for LayoutJson {
    fn from(l: &Layout) -> Self {
        LayoutJson {
            layer_ids: l.layer_ids(),
            max_ngram_size: l.max_ngram_size,
            n_heads: l.n_heads,
            vocab_size: l.vocab_size(),
            compressed_vocab_size: l.compressed_vocab_size,
            pad_compressed_id: l.pad_compressed_id,
            rows: l.tables.iter().map(|t| t.rows).collect(),
            primes: l.tables.iter().map(|t| t.primes.clone()).collect(),
            multipliers: l.tables.iter().map(|t| t.multipliers.clone()).collect(),
            family: l.family.name(),
            head_dim: l.head_dim,
            stored_rows: l.tables.iter().map(|t| t.stored_rows).collect(),
        }
    }
}

/// Runs `engram layout`.
pub fn run(args: &LayoutArgs) -> CmdResult {
    let layout = args.source.load()?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &LayoutJson::from(&layout))?;
        writeln!(out)?;
    } else {
        print_summary(&mut out, &args.source, &layout)?;
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, source: &LayoutSource, l: &Layout) -> std::io::Result<()> {
    match l.family {
        Family::DeepSeekEngram => {
            writeln!(out, "Engram layout: {}", source.describe())?;
            writeln!(
                out,
                "  tokenizer      {} tokens folded into {} compressed ids; dead positions read as id {}",
                grouped(l.vocab_size() as u64),
                grouped(u64::from(l.compressed_vocab_size)),
                l.pad_compressed_id
            )?;
        }
        Family::Qwen4ExpPle => {
            writeln!(out, "Qwen4-Exp PLE n-gram layout: {}", source.describe())?;
            writeln!(
                out,
                "  tokens         {} raw token ids (no folding); EOS {} pads, replaces masked tokens and cuts the history",
                grouped(l.vocab_size() as u64),
                l.pad_compressed_id
            )?;
        }
    }
    writeln!(
        out,
        "  hash           n-gram orders 2..={}, {} heads each: {} row ids per token per table",
        l.max_ngram_size,
        l.n_heads,
        l.columns()
    )?;
    writeln!(out, "  row width      {} values", l.head_dim)?;
    for (i, t) in l.tables.iter().enumerate() {
        writeln!(out)?;
        if t.stored_rows == t.rows {
            writeln!(
                out,
                "  table {i} (layer {}): {} rows",
                t.layer_id,
                grouped(t.rows)
            )?;
        } else {
            writeln!(
                out,
                "  table {i} (layer {}): {} rows hashed, {} stored (padded)",
                t.layer_id,
                grouped(t.rows),
                grouped(t.stored_rows)
            )?;
        }
        writeln!(out, "    multipliers  {:?}", t.multipliers)?;
        for (order, primes) in (2..).zip(t.primes.chunks(l.n_heads)) {
            let list: Vec<String> = primes.iter().map(|&p| grouped(u64::from(p))).collect();
            writeln!(out, "    order {order} primes {}", list.join(" "))?;
        }
    }
    Ok(())
}
