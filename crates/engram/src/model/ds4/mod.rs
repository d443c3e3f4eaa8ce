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

use std::path::Path;
use std::sync::Arc;

use super::gguf::{Array, GgufHeader, TensorDecl, Value, GGML_TYPE_I8};
use super::{ModelFormat, TableLocation};
use crate::codec::{Encoding, ROW_DIM};
use crate::layout::{Layout, TableLayout};
use crate::{Error, Result};

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
    let layout = match dialect {
        Dialect::Deepseek41 => layout_ds41(&meta)?,
        Dialect::Deepseek4 => layout_ds4(&meta)?,
    };
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
        Err(Error::format(
            path,
            "deepseek41.engram.*",
            "no Engram metadata (neither deepseek41.engram.* nor deepseek4.engram.* keys)",
        ))
    }
}

/// Typed access to the Engram keys of one dialect.
struct Meta<'a> {
    header: &'a GgufHeader,
    path: &'a Path,
    dialect: Dialect,
}

impl Meta<'_> {
    fn key(&self, name: &str) -> String {
        format!("{}.engram.{name}", self.dialect.name())
    }

    /// The value and the key it was found under (own prefix, then `deepseek4.`).
    fn find(&self, name: &str) -> Option<(String, &Value)> {
        let own = self.key(name);
        if let Some(v) = self.header.get(&own) {
            return Some((own, v));
        }
        let legacy = format!("deepseek4.engram.{name}");
        self.header.get(&legacy).map(|v| (legacy, v))
    }

    fn missing(&self, name: &str) -> Error {
        Error::format(self.path, self.key(name), "missing metadata key")
    }

    fn int(&self, name: &str) -> Result<Option<u64>> {
        let Some((key, v)) = self.find(name) else {
            return Ok(None);
        };
        v.as_u64().map(Some).ok_or_else(|| {
            Error::format(
                self.path,
                key,
                format!(
                    "expected a non-negative integer, found {:?}",
                    v.value_type()
                ),
            )
        })
    }

    fn req_int(&self, name: &str) -> Result<u64> {
        self.int(name)?.ok_or_else(|| self.missing(name))
    }

    fn ints(&self, name: &str) -> Result<Option<Vec<u64>>> {
        let Some((key, v)) = self.find(name) else {
            return Ok(None);
        };
        let bad = |what: String| Error::format(self.path, &key, what);
        let arr: &Array = v.as_array().ok_or_else(|| {
            bad(format!(
                "expected an integer array, found {:?}",
                v.value_type()
            ))
        })?;
        arr.to_u64_vec().map(Some).ok_or_else(|| {
            bad(format!(
                "expected non-negative integers, found {:?} elements",
                arr.element_type()
            ))
        })
    }

    fn req_ints(&self, name: &str) -> Result<Vec<u64>> {
        self.ints(name)?.ok_or_else(|| self.missing(name))
    }

    /// A u32-valued array of exactly `len` elements.
    fn u32s(&self, name: &str, values: Vec<u64>, len: usize) -> Result<Vec<u32>> {
        if values.len() != len {
            return Err(self.bad(
                name,
                format!("has {} elements, expected {len}", values.len()),
            ));
        }
        values
            .into_iter()
            .map(|v| u32::try_from(v).map_err(|_| self.bad(name, format!("value {v} exceeds u32"))))
            .collect()
    }

    fn bad(&self, name: &str, reason: impl Into<String>) -> Error {
        let key = self
            .find(name)
            .map(|(k, _)| k)
            .unwrap_or_else(|| self.key(name));
        Error::format(self.path, key, reason)
    }

    /// The declared encoding; `None` when the dialect leaves it to the row width.
    fn encoding(&self) -> Result<Option<Encoding>> {
        let Some((key, v)) = self.find("encoding") else {
            return match self.dialect {
                Dialect::Deepseek41 => Err(self.missing("encoding")),
                Dialect::Deepseek4 => Ok(None),
            };
        };
        let name = v
            .as_str()
            .ok_or_else(|| Error::format(self.path, &key, "expected a string"))?;
        Encoding::from_name(name).map(Some).ok_or_else(|| {
            Error::format(
                self.path,
                &key,
                format!("unknown encoding {name:?} (a conversion left unfinished?)"),
            )
        })
    }

    fn layer_ids(&self) -> Result<Vec<u32>> {
        let ids = self.req_ints("layer_ids")?;
        if ids.is_empty() || ids.len() > super::checks::MAX_TABLES {
            return Err(self.bad(
                "layer_ids",
                format!(
                    "{} tables (expected 1..={})",
                    ids.len(),
                    super::checks::MAX_TABLES
                ),
            ));
        }
        let n = ids.len();
        self.u32s("layer_ids", ids, n)
    }

    fn token_map(&self) -> Result<Option<Vec<u32>>> {
        let Some(v) = self.ints("token_map")? else {
            return Ok(None);
        };
        let n = v.len();
        self.u32s("token_map", v, n).map(Some)
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

/// Per-table shape of the hash: columns and n-gram positions.
struct Shape {
    n_tables: usize,
    max_ngram_size: usize,
    n_heads: usize,
}

impl Shape {
    fn columns(&self) -> usize {
        (self.max_ngram_size - 1) * self.n_heads
    }
}

/// The ds4 dialect: everything is in the file.
fn layout_ds41(meta: &Meta) -> Result<Layout> {
    let layer_ids = meta.layer_ids()?;
    let n_tables = layer_ids.len();
    let primes = meta.req_ints("primes")?;
    let multipliers = meta.req_ints("multipliers")?;
    let shape = shape_from(meta, n_tables, primes.len(), multipliers.len())?;
    let primes = meta.u32s("primes", primes, n_tables * shape.columns())?;
    let token_map = meta.token_map()?.ok_or_else(|| meta.missing("token_map"))?;
    let pad_id = meta.req_int("pad_id")?;
    assemble(
        meta,
        &layer_ids,
        &shape,
        primes,
        multipliers,
        token_map,
        pad_id,
    )
}

/// The other converters' dialect: derive what the file lacks.
fn layout_ds4(meta: &Meta) -> Result<Layout> {
    let layer_ids = meta.layer_ids()?;
    let n_tables = layer_ids.len();
    let max_ngram_size = meta.req_int("max_ngram_size")?;
    let n_heads = meta.req_int("head_count")?;
    let shape = checked_shape(meta, n_tables, max_ngram_size, n_heads)?;
    let rows = meta.req_ints("num_embeddings")?;
    if rows.len() != n_tables {
        return Err(meta.bad(
            "num_embeddings",
            format!(
                "has {} elements, expected one per table ({n_tables})",
                rows.len()
            ),
        ));
    }
    let primes = ds4_primes(meta, &layer_ids, &shape, &rows)?;
    let token_map = match meta.token_map()? {
        Some(m) => m,
        None => super::derive::vendored_token_map()?,
    };
    let pad_id = match meta.int("pad_id")? {
        Some(p) => p,
        None => meta
            .header
            .get("tokenizer.ggml.padding_token_id")
            .and_then(Value::as_u64)
            .ok_or_else(|| meta.missing("pad_id"))?,
    };
    let multipliers = match meta.ints("multipliers")? {
        Some(m) => m,
        None => {
            let seed = meta.int("seed")?.unwrap_or(0);
            let cvocab = compressed_vocab(meta, &token_map)?;
            super::derive::multipliers(&layer_ids, shape.max_ngram_size, cvocab, seed)?
        }
    };
    assemble(
        meta,
        &layer_ids,
        &shape,
        primes,
        multipliers,
        token_map,
        pad_id,
    )
}

/// Primes of the deepseek4 dialect: given, from offsets, or derived.
fn ds4_primes(meta: &Meta, layer_ids: &[u32], shape: &Shape, rows: &[u64]) -> Result<Vec<u32>> {
    let cols = shape.columns();
    let total = shape.n_tables * cols;
    if let Some(p) = meta.ints("primes")? {
        return meta.u32s("primes", p, total);
    }
    if let Some(offsets) = meta.ints("offsets")? {
        let offsets = meta.u32s("offsets", offsets, total)?;
        let mut primes = Vec::with_capacity(total);
        for (t, table) in offsets.chunks(cols).enumerate() {
            for c in 0..cols {
                let end = if c + 1 < cols {
                    u64::from(table[c + 1])
                } else {
                    rows[t]
                };
                let p = end
                    .checked_sub(u64::from(table[c]))
                    .and_then(|p| u32::try_from(p).ok())
                    .filter(|&p| p > 0)
                    .ok_or_else(|| {
                        meta.bad(
                            "offsets",
                            format!("table {t} column {c}: offsets do not increase up to num_embeddings"),
                        )
                    })?;
                primes.push(p);
            }
        }
        return Ok(primes);
    }
    let vocab = meta.int("vocab_size")?.ok_or_else(|| {
        Error::format(
            meta.path,
            meta.key("vocab_size"),
            "missing: needed to derive the primes (no primes or offsets either)",
        )
    })?;
    super::derive::primes(layer_ids.len(), shape.max_ngram_size, shape.n_heads, vocab)
}

fn compressed_vocab(meta: &Meta, token_map: &[u32]) -> Result<u32> {
    match meta.int("compressed_vocab_size")? {
        Some(c) => u32::try_from(c)
            .map_err(|_| meta.bad("compressed_vocab_size", format!("{c} exceeds u32"))),
        None => token_map
            .iter()
            .max()
            .map(|&m| m + 1)
            .ok_or_else(|| meta.bad("token_map", "is empty")),
    }
}

/// Works out heads and n-gram size from the flattened array lengths, checked
/// against `head_count` / `max_ngram_size` when present.
fn shape_from(meta: &Meta, n_tables: usize, n_primes: usize, n_mult: usize) -> Result<Shape> {
    if n_mult % n_tables != 0 {
        return Err(meta.bad(
            "multipliers",
            format!("{n_mult} elements do not split into {n_tables} tables"),
        ));
    }
    if n_primes % n_tables != 0 {
        return Err(meta.bad(
            "primes",
            format!("{n_primes} elements do not split into {n_tables} tables"),
        ));
    }
    let max_ngram_size = match meta.int("max_ngram_size")? {
        Some(n) => n,
        None => (n_mult / n_tables) as u64,
    };
    let n_heads = match meta.int("head_count")? {
        Some(h) => h,
        None => {
            let orders = max_ngram_size.saturating_sub(1).max(1);
            (n_primes / n_tables) as u64 / orders
        }
    };
    checked_shape(meta, n_tables, max_ngram_size, n_heads)
}

fn checked_shape(meta: &Meta, n_tables: usize, max_ngram_size: u64, n_heads: u64) -> Result<Shape> {
    if !(2..=super::checks::MAX_NGRAM).contains(&max_ngram_size) {
        return Err(meta.bad(
            "max_ngram_size",
            format!(
                "{max_ngram_size} is outside 2..={}",
                super::checks::MAX_NGRAM
            ),
        ));
    }
    if !(1..=super::checks::MAX_HEADS).contains(&n_heads) {
        return Err(meta.bad(
            "head_count",
            format!("{n_heads} is outside 1..={}", super::checks::MAX_HEADS),
        ));
    }
    let field = meta
        .find("head_count")
        .map_or_else(|| meta.key("head_count"), |(k, _)| k);
    super::checks::total_columns(meta.path, &field, n_tables, max_ngram_size, n_heads)?;
    Ok(Shape {
        n_tables,
        max_ngram_size: max_ngram_size as usize,
        n_heads: n_heads as usize,
    })
}

/// Builds the layout from flattened arrays and checks what ties them together.
fn assemble(
    meta: &Meta,
    layer_ids: &[u32],
    shape: &Shape,
    primes: Vec<u32>,
    multipliers: Vec<u64>,
    token_map: Vec<u32>,
    pad_id: u64,
) -> Result<Layout> {
    let cols = shape.columns();
    if multipliers.len() != shape.n_tables * shape.max_ngram_size {
        return Err(meta.bad(
            "multipliers",
            format!(
                "has {} elements, expected {} tables x {} positions",
                multipliers.len(),
                shape.n_tables,
                shape.max_ngram_size
            ),
        ));
    }
    if primes.len() != shape.n_tables * cols {
        return Err(meta.bad(
            "primes",
            format!(
                "has {} elements, expected {} tables x {cols} columns",
                primes.len(),
                shape.n_tables
            ),
        ));
    }
    let cvocab = compressed_vocab(meta, &token_map)?;
    if let Some(bad) = token_map.iter().position(|&c| c >= cvocab) {
        return Err(meta.bad(
            "token_map",
            format!(
                "entry {bad} is {} but compressed_vocab_size is {cvocab}",
                token_map[bad]
            ),
        ));
    }
    let pad_compressed_id = usize::try_from(pad_id)
        .ok()
        .and_then(|i| token_map.get(i).copied())
        .ok_or_else(|| {
            meta.bad(
                "pad_id",
                format!(
                    "{pad_id} is not a token id (the token map has {})",
                    token_map.len()
                ),
            )
        })?;
    let tables = layer_ids
        .iter()
        .zip(primes.chunks(cols))
        .zip(multipliers.chunks(shape.max_ngram_size))
        .map(|((&layer_id, p), m)| {
            TableLayout::from_primes(layer_id, p.to_vec(), m.to_vec())
                .map_err(|e| meta.bad("primes", e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    check_rows_and_offsets(meta, &tables)?;
    Ok(Layout {
        max_ngram_size: shape.max_ngram_size,
        n_heads: shape.n_heads,
        head_dim: ROW_DIM,
        token_map: Arc::from(token_map),
        compressed_vocab_size: cvocab,
        pad_compressed_id,
        tables,
    })
}

/// The optional `rows` / `num_embeddings` and `offsets` keys must agree with the primes.
fn check_rows_and_offsets(meta: &Meta, tables: &[TableLayout]) -> Result<()> {
    for key in ["rows", "num_embeddings"] {
        if let Some(rows) = meta.ints(key)? {
            let derived: Vec<u64> = tables.iter().map(|t| t.rows).collect();
            if rows != derived {
                return Err(meta.bad(
                    key,
                    format!("{rows:?} disagrees with the sums of the primes {derived:?}"),
                ));
            }
        }
    }
    if let Some(offsets) = meta.ints("offsets")? {
        let derived: Vec<u64> = tables
            .iter()
            .flat_map(|t| t.offsets.iter().map(|&o| u64::from(o)))
            .collect();
        if offsets != derived {
            return Err(meta.bad("offsets", "disagree with the running sums of the primes"));
        }
    }
    Ok(())
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
    Ok(TableLocation {
        layer_id: t.layer_id,
        file: path.to_path_buf(),
        offset,
        rows,
        encoding,
        row_bytes: width as u32,
        scales: None,
    })
}

/// The ds4-dialect metadata for `layout` with tables in `encoding`.
///
/// `pad_id` is written as the smallest token id whose compressed id is the
/// layout's pad compressed id: the layout keeps only the compressed id, and
/// any such token reads back to the same value.
pub fn ds41_metadata(layout: &Layout, encoding: Encoding, name: &str) -> Vec<(String, Value)> {
    let k = |s: &str| format!("deepseek41.engram.{s}");
    let pad_id = layout
        .token_map
        .iter()
        .position(|&c| c == layout.pad_compressed_id)
        .unwrap_or(0) as u32;
    let flat_u32 = |f: &dyn Fn(&TableLayout) -> &[u32]| {
        Array::U32(
            layout
                .tables
                .iter()
                .flat_map(|t| f(t).iter().copied())
                .collect(),
        )
    };
    vec![
        (
            "general.architecture".into(),
            Value::String("deepseek41".into()),
        ),
        ("general.name".into(), Value::String(name.into())),
        ("general.alignment".into(), Value::U32(32)),
        (
            "deepseek41.vocab_size".into(),
            Value::U32(layout.token_map.len() as u32),
        ),
        (k("encoding"), Value::String(encoding.name().into())),
        (
            k("layer_ids"),
            Value::Array(Array::U32(
                layout.tables.iter().map(|t| t.layer_id).collect(),
            )),
        ),
        (k("rows"), Value::Array(rows_array(layout))),
        (k("head_count"), Value::U32(layout.n_heads as u32)),
        (
            k("max_ngram_size"),
            Value::U32(layout.max_ngram_size as u32),
        ),
        (
            k("compressed_vocab_size"),
            Value::U32(layout.compressed_vocab_size),
        ),
        (k("pad_id"), Value::U32(pad_id)),
        (
            k("token_map"),
            Value::Array(Array::U32(layout.token_map.to_vec())),
        ),
        (k("primes"), Value::Array(flat_u32(&|t| &t.primes))),
        (k("offsets"), Value::Array(flat_u32(&|t| &t.offsets))),
        (
            k("multipliers"),
            Value::Array(Array::U64(
                layout
                    .tables
                    .iter()
                    .flat_map(|t| t.multipliers.iter().copied())
                    .collect(),
            )),
        ),
    ]
}

/// Table rows as ds4 writes them (u32), or u64 if a table is larger.
fn rows_array(layout: &Layout) -> Array {
    let rows: Vec<u64> = layout.tables.iter().map(|t| t.rows).collect();
    match rows
        .iter()
        .map(|&r| u32::try_from(r))
        .collect::<std::result::Result<Vec<u32>, _>>()
    {
        Ok(small) => Array::U32(small),
        Err(_) => Array::U64(rows),
    }
}

/// The tensor declarations of `layout`'s tables in `encoding`.
pub fn table_decls(layout: &Layout, encoding: Encoding) -> Vec<TensorDecl> {
    let width = encoding.row_bytes() as u64;
    layout
        .tables
        .iter()
        .map(|t| TensorDecl {
            name: tensor_name(t.layer_id),
            dims: vec![width, t.rows],
            ggml_type: GGML_TYPE_I8,
            bytes: width * t.rows,
        })
        .collect()
}
