//! `engram hash`: tokenize text (or take token ids) and print the row ids
//! of every table for every token.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::{CmdResult, LayoutSource};
use engram::hash::Hasher;
use engram::layout::{self as engram_layout, Family};

/// Arguments of `engram hash`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("input").required(true).multiple(false))]
pub struct HashArgs {
    #[command(flatten)]
    source: LayoutSource,
    /// Text to tokenize (no special tokens are added).
    #[arg(long, group = "input")]
    text: Option<String>,
    /// File whose UTF-8 contents are tokenized.
    #[arg(long, value_name = "FILE", group = "input")]
    text_file: Option<PathBuf>,
    /// Token ids, comma separated (e.g. 1,2,3).
    #[arg(long, value_name = "IDS", group = "input")]
    tokens: Option<String>,
    /// The model's tokenizer.json, to tokenize --text / --text-file with
    /// (needed for presets that ship no tokenizer, such as
    /// qwen3.8-flash-next; DeepSeek presets default to the vendored one).
    #[arg(long, value_name = "FILE")]
    tokenizer: Option<PathBuf>,
    /// Print one JSON document instead of a summary.
    #[arg(long)]
    json: bool,
}

/// The JSON document of `engram hash --json`: `rows[token][table][column]`.
#[derive(Serialize)]
struct HashJson<'a> {
    tokens: &'a [u32],
    rows: Vec<Vec<&'a [u32]>>,
}

/// How many tokens the human summary lists before eliding the rest.
const SUMMARY_TOKENS: usize = 40;

/// Runs `engram hash`.
pub fn run(args: &HashArgs) -> CmdResult {
    // Token lists and files fail fast, before the layout is derived.
    let family = engram_layout::preset_params(&args.source.preset, args.source.scale)?.family();
    let tokenizer = args
        .tokenizer
        .as_deref()
        .map(engram_layout::tokenizer_from_file)
        .transpose()?;
    let tokens = read_tokens(args, family, tokenizer.as_ref())?;
    let layout = args.source.load()?;
    let hasher = Hasher::new(&layout)?;
    let mut rows = Vec::new();
    hasher.hash(&mut hasher.new_history(), &tokens, None, &mut rows)?;
    let columns = hasher.columns();
    let mut out = std::io::stdout().lock();
    if args.json {
        let per_token = rows
            .chunks(hasher.rows_per_token().max(1))
            .map(|token_rows| token_rows.chunks(columns).collect())
            .collect();
        let doc = HashJson {
            tokens: &tokens,
            rows: per_token,
        };
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        let layer_ids = layout.layer_ids();
        let text_of = |token: u32| match (&tokenizer, family) {
            (Some(t), _) => t.decode(&[token], false).ok(),
            // Without its tokenizer a Qwen id has no text here; the
            // vendored one is DeepSeek's.
            (None, Family::Qwen4ExpPle) => None,
            (None, Family::DeepSeekEngram) => args.source.token_text(token),
        };
        let shape = Shape {
            layer_ids: &layer_ids,
            columns,
        };
        print_summary(&mut out, args, &shape, &tokens, &rows, &text_of)?;
    }
    Ok(())
}

fn read_tokens(
    args: &HashArgs,
    family: Family,
    tokenizer: Option<&engram_layout::token_map::Tokenizer>,
) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let text = match (&args.text, &args.text_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .map_err(|e| format!("--text-file {}: {e}", path.display()))?,
        (None, None) => {
            let list = args.tokens.as_deref().unwrap_or_default();
            return parse_token_list(list).map_err(Into::into);
        }
    };
    match (tokenizer, family) {
        (Some(t), _) => {
            let name = args.tokenizer.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            Ok(engram_layout::encode(t, &text, &name)?)
        }
        (None, Family::DeepSeekEngram) => Ok(args.source.encode(&text)?),
        (None, Family::Qwen4ExpPle) => Err(format!(
            "preset {} hashes the ids of its own tokenizer, which engram does not ship: \
             give --tokenizer tokenizer.json (the model's) to tokenize text, or the ids with --tokens",
            args.source.preset
        )
        .into()),
    }
}

/// Parses `1,2,3` (spaces allowed, empty list allowed).
fn parse_token_list(list: &str) -> Result<Vec<u32>, String> {
    if list.trim().is_empty() {
        return Ok(Vec::new());
    }
    list.split(',')
        .enumerate()
        .map(|(i, item)| {
            item.trim().parse::<u32>().map_err(|e| {
                format!(
                    "--tokens: item {} {:?} is not a token id: {e}",
                    i + 1,
                    item.trim()
                )
            })
        })
        .collect()
}

/// The tables' layer ids and the row ids per token per table.
struct Shape<'a> {
    layer_ids: &'a [u32],
    columns: usize,
}

fn print_summary(
    out: &mut impl Write,
    args: &HashArgs,
    shape: &Shape<'_>,
    tokens: &[u32],
    rows: &[u32],
    text_of: &dyn Fn(u32) -> Option<String>,
) -> std::io::Result<()> {
    let (layer_ids, columns) = (shape.layer_ids, shape.columns);
    let tables = layer_ids.len();
    writeln!(
        out,
        "{} tokens hashed with {} ({} tables x {} row ids per token)",
        tokens.len(),
        args.source.describe(),
        tables,
        columns
    )?;
    let per_token = columns * tables;
    for (i, &token) in tokens.iter().enumerate().take(SUMMARY_TOKENS) {
        match text_of(token) {
            Some(text) => writeln!(out, "  [{i:>4}] token {token:>6} {text:?}")?,
            None => writeln!(out, "  [{i:>4}] token {token:>6}")?,
        }
        let token_rows = &rows[i * per_token..(i + 1) * per_token];
        for (layer, table_rows) in layer_ids.iter().zip(token_rows.chunks(columns)) {
            let list: Vec<String> = table_rows.iter().map(u32::to_string).collect();
            writeln!(out, "         layer {layer:>3}: {}", list.join(" "))?;
        }
    }
    if tokens.len() > SUMMARY_TOKENS {
        let more = tokens.len() - SUMMARY_TOKENS;
        writeln!(out, "  ... {more} more tokens (use --json for all rows)")?;
    }
    for (t, layer) in layer_ids.iter().enumerate() {
        let distinct: HashSet<u32> = rows
            .chunks(per_token)
            .flat_map(|token_rows| &token_rows[t * columns..(t + 1) * columns])
            .copied()
            .collect();
        writeln!(
            out,
            "layer {layer}: {} row reads, {} distinct rows",
            tokens.len() * columns,
            distinct.len()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_token_list;

    #[test]
    fn token_lists_parse_and_bad_items_are_named() {
        assert_eq!(parse_token_list("1, 2,3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_token_list(" ").unwrap(), Vec::<u32>::new());
        let err = parse_token_list("1,x,3").unwrap_err();
        assert!(err.contains("item 2") && err.contains("\"x\""), "{err}");
        assert!(parse_token_list("1,-2").is_err());
    }
}
