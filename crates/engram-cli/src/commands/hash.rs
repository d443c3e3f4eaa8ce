//! `engram hash`: tokenize text (or take token ids) and print the row ids
//! of every table for every token.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::{CmdResult, LayoutSource};
use engram::hash::Hasher;

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
    let tokens = read_tokens(args)?;
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
        print_summary(&mut out, args, &layer_ids, &tokens, &rows, columns)?;
    }
    Ok(())
}

fn read_tokens(args: &HashArgs) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    if let Some(text) = &args.text {
        return Ok(args.source.encode(text)?);
    }
    if let Some(path) = &args.text_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--text-file {}: {e}", path.display()))?;
        return Ok(args.source.encode(&text)?);
    }
    let list = args.tokens.as_deref().unwrap_or_default();
    parse_token_list(list).map_err(Into::into)
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

fn print_summary(
    out: &mut impl Write,
    args: &HashArgs,
    layer_ids: &[u32],
    tokens: &[u32],
    rows: &[u32],
    columns: usize,
) -> std::io::Result<()> {
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
        let text = args.source.token_text(token).unwrap_or_default();
        writeln!(out, "  [{i:>4}] token {token:>6} {text:?}")?;
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
