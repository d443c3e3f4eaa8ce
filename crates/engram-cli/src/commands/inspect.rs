//! `engram inspect M [--verify-rows N] [--json]`: a model's format, layout
//! and table locations; optionally decodes sampled rows of every table.

use std::path::PathBuf;

use engram::model::{Model, ModelFormat, TableLocation};

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

/// The JSON document of `engram inspect --json` (field order as written).
#[derive(serde::Serialize)]
struct InspectJson<'a> {
    format: &'static str,
    dialect: &'a str,
    /// Same document as `engram layout --json`.
    layout: super::layout::LayoutJson,
    tables: Vec<TableJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verified_rows: Option<u64>,
}

/// One table of `engram inspect --json`.
#[derive(serde::Serialize)]
struct TableJson {
    layer_id: u32,
    file: String,
    offset: u64,
    rows: u64,
    encoding: &'static str,
    row_bytes: u32,
    /// Checkpoints only: where the split scale bytes are.
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_offset: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_bytes_per_row: Option<u32>,
}

impl From<&TableLocation> for TableJson {
    fn from(t: &TableLocation) -> Self {
        TableJson {
            layer_id: t.layer_id,
            file: t.file.display().to_string(),
            offset: t.offset,
            rows: t.rows,
            encoding: t.encoding.name(),
            row_bytes: t.row_bytes,
            scale_file: t.scales.as_ref().map(|s| s.file.display().to_string()),
            scale_offset: t.scales.as_ref().map(|s| s.offset),
            scale_bytes_per_row: t.scales.as_ref().map(|s| s.bytes_per_row),
        }
    }
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
        let doc = InspectJson {
            format: format_name(model.format),
            dialect: &model.dialect,
            layout: super::layout::LayoutJson::from(&model.layout),
            tables: model.tables.iter().map(TableJson::from).collect(),
            verified_rows: verified,
        };
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
