//! Qwen4-Exp GGUF files (`general.architecture` `qwen4exp`, as llama.cpp's
//! converter writes them): one table, `per_layer_token_embd.weight`, with
//! `ne = [row values, padded rows]` in F32, F16, BF16, Q8_0, Q5_1, Q4_0 or
//! Q4_1, and the hash constants under `qwen4exp.ple.*` (PLE layers
//! zero-based). The stored constants must equal those derived from the
//! stored hash shape.

use std::path::Path;

use super::{derive_layout, ARCH};
use crate::codec::Encoding;
use crate::layout::QwenParams;
use crate::model::gguf::{GgufHeader, Value};
use crate::model::{Model, ModelFormat, TableLocation};
use crate::{Error, Result};

/// The table's tensor.
pub const TENSOR: &str = "per_layer_token_embd.weight";

/// ggml type ids of the row encodings read.
pub const GGML_F32: u32 = 0;
/// `GGML_TYPE_F16`.
pub const GGML_F16: u32 = 1;
/// `GGML_TYPE_Q4_0`.
pub const GGML_Q4_0: u32 = 2;
/// `GGML_TYPE_Q4_1`.
pub const GGML_Q4_1: u32 = 3;
/// `GGML_TYPE_Q5_1`.
pub const GGML_Q5_1: u32 = 7;
/// `GGML_TYPE_Q8_0`.
pub const GGML_Q8_0: u32 = 8;
/// `GGML_TYPE_BF16`.
pub const GGML_BF16: u32 = 30;

/// The encoding name of a ggml type, or `None` for one not read.
pub fn encoding_name(ggml_type: u32) -> Option<&'static str> {
    Some(match ggml_type {
        GGML_F32 => "f32",
        GGML_F16 => "f16",
        GGML_BF16 => "bf16",
        GGML_Q8_0 => "q8_0",
        GGML_Q5_1 => "q5_1",
        GGML_Q4_0 => "q4_0",
        GGML_Q4_1 => "q4_1",
        _ => return None,
    })
}

/// The ggml type id of an encoding name, for writers.
pub fn ggml_type(encoding: &str) -> Option<u32> {
    [
        GGML_F32, GGML_F16, GGML_BF16, GGML_Q8_0, GGML_Q5_1, GGML_Q4_0, GGML_Q4_1,
    ]
    .into_iter()
    .find(|&t| encoding_name(t) == Some(encoding))
}

/// Typed access to `qwen4exp.*` keys, naming the key in errors.
struct Keys<'a> {
    header: &'a GgufHeader,
    path: &'a Path,
}

impl Keys<'_> {
    fn err(&self, key: &str, reason: impl Into<String>) -> Error {
        Error::format(self.path, key, reason)
    }

    fn int(&self, key: &str) -> Result<Option<u64>> {
        match self.header.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                self.err(
                    key,
                    format!(
                        "expected a non-negative integer, found {:?}",
                        v.value_type()
                    ),
                )
            }),
        }
    }

    fn req_int(&self, key: &str) -> Result<u64> {
        self.int(key)?
            .ok_or_else(|| self.err(key, "missing metadata key"))
    }

    fn ints(&self, key: &str) -> Result<Vec<u64>> {
        let v = self
            .header
            .get(key)
            .ok_or_else(|| self.err(key, "missing metadata key"))?;
        v.as_array().and_then(|a| a.to_u64_vec()).ok_or_else(|| {
            self.err(
                key,
                format!(
                    "expected an array of non-negative integers, found {:?}",
                    v.value_type()
                ),
            )
        })
    }

    fn narrow(&self, key: &str, v: u64, max: u64) -> Result<u64> {
        if v > max {
            return Err(self.err(key, format!("{v} is larger than {max}")));
        }
        Ok(v)
    }
}

/// Whether the header is a Qwen4-Exp file.
pub fn is_qwen(header: &GgufHeader) -> bool {
    header.get("general.architecture").and_then(Value::as_str) == Some(ARCH)
}

/// Reads a Qwen4-Exp GGUF's header into a model.
pub fn model_from_header(path: &Path, header: &GgufHeader) -> Result<Model> {
    let keys = Keys { header, path };
    let k = |name: &str| format!("{ARCH}.{name}");
    let layers = keys.ints(&k("ple.layers"))?;
    let [layer] = layers[..] else {
        return Err(keys.err(
            &k("ple.layers"),
            format!("{layers:?}: a qwen4exp GGUF holds exactly one PLE table"),
        ));
    };
    let ngram_size = keys.narrow(
        &k("ple.ngram_size"),
        keys.req_int(&k("ple.ngram_size"))?,
        64,
    )?;
    let heads_per_ngram = keys.narrow(
        &k("ple.heads_per_ngram"),
        keys.req_int(&k("ple.heads_per_ngram"))?,
        1024,
    )?;
    let eos = keys.narrow(
        &k("ple.eos_token_id"),
        keys.req_int(&k("ple.eos_token_id"))?,
        u64::from(u32::MAX),
    )?;
    let row_dim = keys.req_int(&k("embedding_length_per_layer_input"))?;
    let seed = keys.int(&k("ple.seed"))?.unwrap_or(1234);
    let vocab = match keys.int(&k("vocab_size"))? {
        Some(v) => v,
        None => match header
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
        {
            Some(tokens) => tokens.len() as u64,
            None => {
                return Err(keys.err(
                    &k("vocab_size"),
                    "missing, and no tokenizer.ggml.tokens to count the vocabulary from",
                ))
            }
        },
    };
    let primes = keys.ints(&k("ple.head_vocab_sizes"))?;
    let first_prime = *primes
        .first()
        .ok_or_else(|| keys.err(&k("ple.head_vocab_sizes"), "is empty"))?;
    let params = QwenParams {
        vocab_size: keys.narrow(&k("vocab_size"), vocab, u64::from(u32::MAX))? as u32,
        ngram_size: ngram_size as usize,
        heads_per_ngram: heads_per_ngram as usize,
        // The file stores the primes, not the base they were walked from;
        // the first prime walks to the same primes.
        ngram_vocab_size_base: first_prime,
        make_ngram_vocab_size_divisible_by: 1,
        seed,
        eos_token_id: eos as u32,
        layer_ids: vec![keys.narrow(&k("ple.layers"), layer, u64::from(u32::MAX))? as u32],
        row_dim: keys.narrow(&k("embedding_length_per_layer_input"), row_dim, 1 << 16)? as usize,
    };
    let mut layout = derive_layout(path, &params)?;
    let table = &layout.tables[0];
    let stored = [
        (
            "ple.head_vocab_sizes",
            primes.clone(),
            table
                .primes
                .iter()
                .map(|&p| u64::from(p))
                .collect::<Vec<_>>(),
        ),
        (
            "ple.head_offsets",
            keys.ints(&k("ple.head_offsets"))?,
            table.offsets.iter().map(|&o| u64::from(o)).collect(),
        ),
        (
            "ple.layer_multipliers",
            keys.ints(&k("ple.layer_multipliers"))?,
            table.multipliers.clone(),
        ),
    ];
    for (name, stored, derived) in stored {
        if stored != derived {
            return Err(keys.err(
                &k(name),
                format!("{stored:?} differ from those the hash shape derives: {derived:?}"),
            ));
        }
    }
    let loc = locate(path, header, table.layer_id, table.rows, params.row_dim)?;
    layout.tables[0].stored_rows = loc.rows;
    Ok(Model {
        format: ModelFormat::Gguf,
        dialect: ARCH.into(),
        layout,
        tables: vec![loc],
    })
}

fn locate(
    path: &Path,
    header: &GgufHeader,
    layer_id: u32,
    hashed_rows: u64,
    dim: usize,
) -> Result<TableLocation> {
    let info = header
        .tensor(TENSOR)
        .ok_or_else(|| Error::format(path, TENSOR, "missing tensor"))?;
    let bad = |field: &str, reason: String| {
        Error::format(path, format!("tensor {TENSOR}.{field}"), reason)
    };
    let name = encoding_name(info.ggml_type).ok_or_else(|| {
        bad(
            "type",
            format!(
                "ggml type {} is not one of F32, F16, BF16, Q8_0, Q5_1, Q4_0, Q4_1",
                info.ggml_type
            ),
        )
    })?;
    let encoding = Encoding::with_values(name, dim)
        .map_err(|e| bad("type", format!("{name} rows of {dim} values: {e}")))?;
    let [width, rows] = info.dims[..] else {
        return Err(bad(
            "dims",
            format!("{:?} is not 2-D [values, rows]", info.dims),
        ));
    };
    if width != dim as u64 {
        return Err(bad(
            "dims",
            format!("rows of {width} values, but {ARCH}.embedding_length_per_layer_input is {dim}"),
        ));
    }
    if rows < hashed_rows {
        return Err(bad(
            "dims",
            format!("{rows} rows, but the hash addresses {hashed_rows}"),
        ));
    }
    let row_bytes = encoding.row_bytes() as u64;
    let offset = header.data_start.checked_add(info.offset);
    let end = offset.and_then(|o| rows.checked_mul(row_bytes).and_then(|b| o.checked_add(b)));
    match (offset, end) {
        (Some(offset), Some(end)) if end <= header.file_size => Ok(TableLocation::packed(
            layer_id,
            path.to_path_buf(),
            offset,
            rows,
            encoding,
        )),
        _ => Err(bad(
            "offset",
            format!(
                "{rows} rows of {row_bytes} bytes run past the end of the file ({} bytes)",
                header.file_size
            ),
        )),
    }
}
