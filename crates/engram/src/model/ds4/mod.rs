//! Engram metadata in GGUF files: reading both dialects, writing ds4's.
//!
//! * `deepseek41.engram.*` (ds4): `encoding`, `layer_ids`, `rows`,
//!   `compressed_vocab_size`, `pad_id` (a tokenizer id), `token_map`,
//!   `primes` and `multipliers` (flattened table-major), optionally
//!   `offsets`, `head_count` and `max_ngram_size`. Files repaired after the
//!   2026-09 converter bug carry some of these under the `deepseek4.engram.`
//!   prefix; each key is looked up under `deepseek41.` first, then `deepseek4.`.
//! * `deepseek4.engram.*` (other converters): `layer_ids`, `num_embeddings`
//!   (rows per table), `max_ngram_size`, `head_count`, and, when the converter
//!   wrote them, `primes` or `offsets`, `multipliers`, `token_map`, `pad_id`,
//!   `compressed_vocab_size`, `encoding`. What is missing is derived the way
//!   the reference derives it (see [`crate::model::derive`]): primes by the
//!   prime walk from `vocab_size`, multipliers from `seed` (default 0), the
//!   token map from the vendored DeepSeek V4 tokenizer. The encoding, when
//!   absent, follows from the tensor's row width.
//!
//! Tables: one tensor `blk.{L}.engram_embd.weight` per Engram layer, ggml type
//! I8 (24), dims `[row_bytes, rows]` (innermost first), as ds4 declares them.
//!
//! Here: the dialect, the tables' tensors and the reading entry point;
//! `meta` the typed access to one dialect's keys, `layout` the hash layout
//! built (and derived) from them, `write` the ds4-dialect metadata and
//! tensor declarations written by the synthesizer and the converter.

mod layout;
mod meta;
// Metadata for the writers (feature `tools`).
#[cfg(feature = "tools")]
mod write;

use std::path::Path;

use super::gguf::{GgufHeader, Value, GGML_TYPE_I8};
use super::{ModelFormat, TableLocation};
use crate::codec::Encoding;
use crate::layout::{Layout, TableLayout};
use crate::{Error, Result};
use meta::Meta;

#[cfg(feature = "tools")]
pub use write::{ds41_metadata, table_decls};

/// Name of table `layer_id`'s tensor.
pub fn tensor_name(layer_id: u32) -> String {
    format!("blk.{layer_id}.engram_embd.weight")
}

/// Which metadata dialect a GGUF header uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `deepseek41.engram.*`, as ds4 writes it.
    Deepseek41,
    /// `deepseek4.engram.*`, as other converters write it.
    Deepseek4,
}

impl Dialect {
    /// The key prefix (`deepseek41` or `deepseek4`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Deepseek41 => "deepseek41",
            Dialect::Deepseek4 => "deepseek4",
        }
    }
}

/// Reads the metadata of `header` (from `path`) into a layout, an encoding
/// per table and the table locations.
pub fn model_from_header(path: &Path, header: &GgufHeader) -> Result<super::Model> {
    let dialect = detect_dialect(path, header)?;
    let meta = Meta {
        header,
        path,
        dialect,
    };
    let layout = layout::layout(&meta)?;
    check_vocab(&meta, &layout)?;
    let encoding = meta.encoding()?;
    let mut tables = Vec::with_capacity(layout.tables.len());
    for t in &layout.tables {
        tables.push(locate_table(path, header, t, encoding)?);
    }
    let layout = super::checks::validated(path, layout)?;
    Ok(super::Model {
        format: ModelFormat::Gguf,
        dialect: dialect.name().to_string(),
        layout,
        tables,
    })
}

fn detect_dialect(path: &Path, header: &GgufHeader) -> Result<Dialect> {
    let has = |p: &str| header.metadata.iter().any(|(k, _)| k.starts_with(p));
    if has("deepseek41.engram.") {
        Ok(Dialect::Deepseek41)
    } else if has("deepseek4.engram.") {
        Ok(Dialect::Deepseek4)
    } else {
        // A file of another architecture is named by it; a DeepSeek one
        // (or one that says none) by the Engram keys it lacks.
        match header.get("general.architecture").and_then(Value::as_str) {
            Some(arch) if !arch.starts_with("deepseek") => Err(Error::format(
                path,
                "general.architecture",
                format!(
                    "{arch:?}: no n-gram tables this crate reads (architectures read: qwen4exp, and DeepSeek files with deepseek41.engram.* or deepseek4.engram.* keys)"
                ),
            )),
            _ => Err(Error::format(
                path,
                "deepseek41.engram.*",
                "no Engram metadata (neither deepseek41.engram.* nor deepseek4.engram.* keys)",
            )),
        }
    }
}

/// The token map must have one entry per token of the file's vocabulary,
/// when the file says how large that is (`tokenizer.ggml.tokens`, or
/// `{arch}.vocab_size`).
fn check_vocab(meta: &Meta, layout: &Layout) -> Result<()> {
    let h = meta.header;
    let vocab = match h.get("tokenizer.ggml.tokens").and_then(Value::as_array) {
        Some(tokens) => Some(tokens.len() as u64),
        None => ["deepseek41.vocab_size", "deepseek4.vocab_size"]
            .iter()
            .find_map(|k| h.get(k).and_then(Value::as_u64)),
    };
    match vocab {
        Some(v) => {
            let field = meta
                .find("token_map")
                .map_or_else(|| meta.key("token_map"), |(k, _)| k);
            super::checks::token_map_len(meta.path, &field, layout.token_map.len(), v)
        }
        None => Ok(()),
    }
}

/// Finds and checks table `t`'s tensor.
fn locate_table(
    path: &Path,
    header: &GgufHeader,
    t: &TableLayout,
    encoding: Option<Encoding>,
) -> Result<TableLocation> {
    let name = tensor_name(t.layer_id);
    let info = header
        .tensor(&name)
        .ok_or_else(|| Error::format(path, &name, "missing tensor"))?;
    let bad =
        |field: &str, reason: String| Error::format(path, format!("tensor {name}.{field}"), reason);
    if info.ggml_type != GGML_TYPE_I8 {
        return Err(bad(
            "type",
            format!(
                "ggml type {} (expected I8 = {GGML_TYPE_I8})",
                info.ggml_type
            ),
        ));
    }
    if info.dims.len() != 2 {
        return Err(bad(
            "dims",
            format!("{:?} is not 2-D [row_bytes, rows]", info.dims),
        ));
    }
    let (width, rows) = (info.dims[0], info.dims[1]);
    let encoding = match encoding {
        Some(e) => e,
        None => Encoding::ALL
            .into_iter()
            .find(|e| e.row_bytes() as u64 == width)
            .ok_or_else(|| bad("dims", format!("row width {width} matches no encoding")))?,
    };
    if width != encoding.row_bytes() as u64 {
        return Err(bad(
            "dims",
            format!(
                "row width {width} does not match encoding {encoding} ({} bytes)",
                encoding.row_bytes()
            ),
        ));
    }
    if rows != t.rows {
        return Err(bad(
            "dims",
            format!("{rows} rows, but the layout's primes sum to {}", t.rows),
        ));
    }
    let offset = header.data_start.checked_add(info.offset);
    let end = offset.and_then(|o| {
        rows.checked_mul(width)
            .and_then(|bytes| o.checked_add(bytes))
    });
    let offset = offset.unwrap_or(u64::MAX);
    if end.is_none_or(|e| e > header.file_size) {
        return Err(bad(
            "offset",
            format!(
                "{rows} rows of {width} bytes at offset {offset} run past the end of the file ({} bytes)",
                header.file_size
            ),
        ));
    }
    Ok(TableLocation::packed(
        t.layer_id,
        path.to_path_buf(),
        offset,
        rows,
        encoding,
    ))
}
