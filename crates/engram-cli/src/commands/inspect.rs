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

/// One table of `engram inspect --json`: where its first shard's first
/// part starts, and every shard with its parts.
#[derive(serde::Serialize)]
struct TableJson {
    layer_id: u32,
    file: String,
    offset: u64,
    rows: u64,
    encoding: &'static str,
    /// Bytes of a delivered row (all parts).
    row_bytes: usize,
    shards: Vec<ShardJson>,
}

/// One shard of a table: consecutive rows stored in one or more parts.
#[derive(serde::Serialize)]
struct ShardJson {
    first_row: u64,
    rows: u64,
    parts: Vec<PartJson>,
}

/// One stored array of a shard.
#[derive(serde::Serialize)]
struct PartJson {
    file: String,
    offset: u64,
    bytes_per_row: u32,
}

impl From<&TableLocation> for TableJson {
    fn from(t: &TableLocation) -> Self {
        let spans = t.spans(0);
        TableJson {
            layer_id: t.layer_id,
            file: t.first_file().display().to_string(),
            offset: spans.first().map_or(0, |s| s.offset),
            rows: t.rows,
            encoding: t.encoding.name(),
            row_bytes: t.full_row_bytes(),
            shards: t
                .shards
                .iter()
                .map(|s| ShardJson {
                    first_row: s.first_row,
                    rows: s.rows,
                    parts: s
                        .parts
                        .iter()
                        .map(|p| PartJson {
                            file: p.file.display().to_string(),
                            offset: p.offset,
                            bytes_per_row: p.bytes_per_row,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

fn format_name(f: ModelFormat) -> &'static str {
    match f {
        ModelFormat::Gguf => "gguf",
        ModelFormat::HuggingFace => "hf",
        ModelFormat::Mlx => "mlx",
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
            "table {i}  layer {:>3}  {:>12} rows  {}  {:.2} GiB  {} shard(s)",
            t.layer_id,
            t.rows,
            t.encoding,
            bytes as f64 / (1u64 << 30) as f64,
            t.shards.len()
        ));
        // Every shard of a table has the same parts; the first shows them.
        if let Some(shard) = t.shards.first() {
            for part in &shard.parts {
                crate::emit(&format!(
                    "          part {} B/row  {} @ {}",
                    part.bytes_per_row,
                    part.file.display(),
                    part.offset
                ));
            }
        }
        let tl = &l.tables[i];
        crate::emit(&format!("          multipliers {:?}", tl.multipliers));
        crate::emit(&format!("          primes {:?}", tl.primes));
    }
    if let Some(n) = verified {
        crate::emit(&format!("verified {n} sampled rows: all decode"));
    }
}
