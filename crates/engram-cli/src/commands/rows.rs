//! `engram rows --model M --table I --ids 1,2,3 [--format f32|raw] [--json]`.

use std::fmt::Write as _;
use std::path::PathBuf;

use engram::model::Model;
use serde_json::json;

/// How rows are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RowFormat {
    /// Decoded values as f32 (BF16-rounded for the DeepSeek encodings).
    F32,
    /// The row's bytes as stored (packed), in hex.
    Raw,
}

/// Arguments of `engram rows`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A .gguf file or a Hugging Face checkpoint directory.
    #[arg(long)]
    model: PathBuf,
    /// Table index (0-based, in layer order).
    #[arg(long)]
    table: usize,
    /// Row ids, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    ids: Vec<u64>,
    /// Output format.
    #[arg(long, value_enum, default_value = "f32")]
    format: RowFormat,
    /// Print one JSON document on stdout: {"rows": [...]}.
    #[arg(long)]
    json: bool,
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Runs `engram rows`.
pub fn run(args: Args) -> engram::Result<()> {
    let model = Model::open(&args.model)?;
    match args.format {
        RowFormat::F32 => {
            let mut values = Vec::new();
            model.read_rows_f32(args.table, &args.ids, &mut values)?;
            let width = model.table(args.table)?.encoding.values();
            let rows: Vec<&[f32]> = values.chunks_exact(width).collect();
            if args.json {
                crate::emit(&json!({ "rows": rows }).to_string());
            } else {
                for (id, row) in args.ids.iter().zip(rows) {
                    let text: Vec<String> = row.iter().map(|v| v.to_string()).collect();
                    crate::emit(&format!("{id}: {}", text.join(" ")));
                }
            }
        }
        RowFormat::Raw => {
            let mut raw = Vec::new();
            model.read_raw_rows(args.table, &args.ids, &mut raw)?;
            let width = model.table(args.table)?.full_row_bytes();
            let rows: Vec<String> = raw.chunks_exact(width).map(hex).collect();
            if args.json {
                crate::emit(&json!({ "rows": rows }).to_string());
            } else {
                for (id, row) in args.ids.iter().zip(rows) {
                    crate::emit(&format!("{id}: {row}"));
                }
            }
        }
    }
    Ok(())
}
