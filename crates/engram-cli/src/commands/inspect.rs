//! `engram inspect M [--verify-rows N] [--json]`: a model's format, layout
//! and table locations; optionally decodes sampled rows of every table.

use std::path::PathBuf;

use engram::layout::Layout;
use engram::model::{Model, ModelFormat, TableLocation};
use serde_json::{json, Value};

/// Arguments of `engram inspect`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A .gguf file or a Hugging Face checkpoint directory.
    model: PathBuf,
    /// Decode N sampled rows per table (first and last included) and fail on a corrupt one.
    #[arg(long, value_name = "N")]
    verify_rows: Option<usize>,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
}

/// The layout summary, with the keys of `engram layout --json`.
pub fn layout_json(layout: &Layout) -> Value {
    json!({
        "layer_ids": layout.tables.iter().map(|t| t.layer_id).collect::<Vec<_>>(),
        "max_ngram_size": layout.max_ngram_size,
        "n_heads": layout.n_heads,
        "vocab_size": layout.token_map.len(),
        "compressed_vocab_size": layout.compressed_vocab_size,
        "pad_compressed_id": layout.pad_compressed_id,
        "rows": layout.tables.iter().map(|t| t.rows).collect::<Vec<_>>(),
        "primes": layout.tables.iter().map(|t| t.primes.clone()).collect::<Vec<_>>(),
        "multipliers": layout.tables.iter().map(|t| t.multipliers.clone()).collect::<Vec<_>>(),
    })
}

fn table_json(t: &TableLocation) -> Value {
    let mut v = json!({
        "layer_id": t.layer_id,
        "file": t.file.display().to_string(),
        "offset": t.offset,
        "rows": t.rows,
        "encoding": t.encoding.name(),
        "row_bytes": t.row_bytes,
    });
    if let Some(s) = &t.scales {
        v["scale_file"] = s.file.display().to_string().into();
        v["scale_offset"] = s.offset.into();
        v["scale_bytes_per_row"] = s.bytes_per_row.into();
    }
    v
}

fn format_name(f: ModelFormat) -> &'static str {
    match f {
        ModelFormat::Gguf => "gguf",
        ModelFormat::HuggingFace => "hf",
    }
}

/// Runs `engram inspect`.
pub fn run(args: Args) -> engram::Result<()> {
    let model = Model::open(&args.model)?;
    let verified = match args.verify_rows {
        Some(n) => Some(model.verify_rows(n)?),
        None => None,
    };
    if args.json {
        let mut doc = json!({
            "format": format_name(model.format),
            "dialect": model.dialect,
            "layout": layout_json(&model.layout),
            "tables": model.tables.iter().map(table_json).collect::<Vec<_>>(),
        });
        if let Some(n) = verified {
            doc["verified_rows"] = n.into();
        }
        crate::emit(&serde_json::to_string_pretty(&doc).expect("JSON"));
        return Ok(());
    }
    print_human(&model, verified);
    Ok(())
}

fn print_human(model: &Model, verified: Option<u64>) {
    let l = &model.layout;
    crate::emit(&format!(
        "format   {} ({})",
        format_name(model.format),
        model.dialect
    ));
    crate::emit(&format!(
        "layout   {} tables, n-grams 2..={}, {} heads, {} tokens -> {} compressed ids, pad {}",
        l.tables.len(),
        l.max_ngram_size,
        l.n_heads,
        l.token_map.len(),
        l.compressed_vocab_size,
        l.pad_compressed_id
    ));
    for (i, t) in model.tables.iter().enumerate() {
        let bytes = t.rows * t.full_row_bytes() as u64;
        crate::emit(&format!(
            "table {i}  layer {:>3}  {:>12} rows  {}  {:.2} GiB  {} @ {}",
            t.layer_id,
            t.rows,
            t.encoding,
            bytes as f64 / (1u64 << 30) as f64,
            t.file.display(),
            t.offset
        ));
        if let Some(s) = &t.scales {
            crate::emit(&format!(
                "          scales {} B/row  {} @ {}",
                s.bytes_per_row,
                s.file.display(),
                s.offset
            ));
        }
        let tl = &l.tables[i];
        crate::emit(&format!("          multipliers {:?}", tl.multipliers));
        crate::emit(&format!("          primes {:?}", tl.primes));
    }
    if let Some(n) = verified {
        crate::emit(&format!("verified {n} sampled rows: all decode"));
    }
}
