//! The ds4-dialect metadata and the table tensors' declarations, as the
//! synthesizer and the converter write them.

use super::tensor_name;
use crate::codec::Encoding;
use crate::layout::{Layout, TableLayout};
use crate::model::gguf::{Array, TensorDecl, Value, GGML_TYPE_I8};

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
