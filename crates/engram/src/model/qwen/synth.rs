//! Synthetic Qwen4-Exp models, written as the converters write them: a
//! Hugging Face checkpoint (sharded safetensors with the hash-constant
//! buffers and an index), an MLX checkpoint (4-bit affine codes, scales
//! and biases per shard, one file, no index) or a llama.cpp GGUF.
//!
//! Rows are a pure function of (seed, table, row): values drawn in
//! [-1, 1) times a per-group magnitude, then encoded by the codec, so a
//! test regenerates any row with [`fill_rows`].

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::gguf::{ggml_type, TENSOR};
use super::ARCH;
use crate::codec::Encoding;
use crate::layout::{Layout, QwenParams};
use crate::model::gguf::{Array, GgufWriter, TensorDecl, Value};
use crate::model::output::{create_safetensors, TempDir, TensorSpec};
use crate::model::stream::{each_row, stream_tables, Chunk};
use crate::model::Progress;
use crate::{Error, Result};

/// Which file layout a synthetic Qwen4-Exp model is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QwenFormat {
    /// A Hugging Face checkpoint directory.
    Hf,
    /// A llama.cpp GGUF file.
    Gguf,
    /// An MLX (mlx-vlm) checkpoint directory.
    Mlx,
}

/// Shards a synthetic checkpoint splits each table into
/// (`split_ngram_parts`; the release has 128).
pub const SYNTH_PARTS: u64 = 5;

/// The value of the FP8 tables' global scale.
pub const FP8_SCALE: f32 = 1.0 / 128.0;

/// The synthetic GGUF's file name inside its output directory.
pub const GGUF_FILE: &str = "model.gguf";

/// splitmix64 finalizer: decorrelates per-row seeds.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Row `row`'s values: uniform in [-1, 1) times a magnitude per 32 values
/// (1/64 to 2), so quantized groups differ in scale.
pub fn row_values(seed: u64, table: usize, row: u64, out: &mut [f32]) {
    let mut state = mix(seed ^ mix(table as u64 + 1) ^ mix(row.wrapping_add(0x51ed)));
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(state)
    };
    for group in out.chunks_mut(32) {
        let magnitude = f32::powi(2.0, (next() % 8) as i32 - 6);
        for v in group {
            let unit = (next() >> 40) as f32 / (1u64 << 24) as f32;
            *v = (unit * 2.0 - 1.0) * magnitude;
        }
    }
}

/// Fills `out` with consecutive encoded rows of table `table` from
/// `first_row`; `out.len()` must be a whole number of rows.
pub fn fill_rows(
    seed: u64,
    table: usize,
    encoding: Encoding,
    first_row: u64,
    out: &mut [u8],
) -> Result<()> {
    let mut values = vec![0f32; encoding.values()];
    each_row(out, encoding.row_bytes(), first_row, |r, row| {
        row_values(seed, table, r, &mut values);
        encoding
            .encode_row(&values, row)
            .map_err(|e| e.into_error(table, r))
    })
}

/// The Qwen4-Exp parameters of preset `name` at `scale`, or an error
/// naming the preset's family when it is not a Qwen4-Exp one.
pub fn preset_params(name: &str, scale: u64) -> Result<QwenParams> {
    match crate::layout::preset_params(name, scale)? {
        crate::layout::PresetParams::Qwen(p) => Ok(p),
        other => Err(Error::InvalidArgument(format!(
            "{name} is a {} preset, not a Qwen4-Exp one",
            other.family()
        ))),
    }
}

/// The encoding synthetic rows of `name` are written in.
pub fn encoding(name: &str, dim: usize) -> Result<Encoding> {
    let e = if name == "fp8_e4m3" || name == "fp8" {
        Encoding::fp8_e4m3(dim, FP8_SCALE)
    } else {
        Encoding::with_values(name, dim)
    };
    e.map_err(|e| {
        Error::InvalidArgument(format!("encoding {name:?} for rows of {dim} values: {e}"))
    })
}

/// Writes a synthetic model of `layout` (derived from `params`) in `format`
/// and `encoding` under `out`; returns the path a reader opens (the
/// directory, or `out/model.gguf`).
pub fn synth(
    out: &Path,
    format: QwenFormat,
    layout: &Layout,
    params: &QwenParams,
    encoding: Encoding,
    seed: u64,
    progress: &dyn Progress,
) -> Result<PathBuf> {
    let formats_ok = match format {
        QwenFormat::Mlx => matches!(encoding, Encoding::Mlx4 { .. }),
        QwenFormat::Hf => matches!(
            encoding,
            Encoding::Bf16 { .. }
                | Encoding::F16 { .. }
                | Encoding::F32 { .. }
                | Encoding::Fp8E4m3 { .. }
        ),
        QwenFormat::Gguf => ggml_type(encoding.name()).is_some(),
    };
    if !formats_ok {
        return Err(Error::InvalidArgument(format!(
            "a {format:?} Qwen4-Exp model cannot hold {encoding} rows (hf: bf16, f16, f32, fp8_e4m3; gguf: f32, f16, bf16, q8_0, q5_1, q4_0, q4_1; mlx: mlx4)"
        )));
    }
    let model = ModelSpec {
        layout,
        params,
        encoding,
        seed,
        progress,
    };
    match format {
        QwenFormat::Gguf => {
            std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
            let path = out.join(GGUF_FILE);
            write_gguf(&path, model)?;
            Ok(path)
        }
        QwenFormat::Hf | QwenFormat::Mlx => {
            write_dir(out, format, model)?;
            Ok(out.to_path_buf())
        }
    }
}

/// The model every writer below writes: [`synth`]'s arguments but the
/// place and the format.
#[derive(Clone, Copy)]
struct ModelSpec<'a> {
    layout: &'a Layout,
    params: &'a QwenParams,
    encoding: Encoding,
    seed: u64,
    progress: &'a dyn Progress,
}

fn write_gguf(path: &Path, model: ModelSpec<'_>) -> Result<()> {
    let (layout, params, encoding) = (model.layout, model.params, model.encoding);
    let (seed, progress) = (model.seed, model.progress);
    let [table] = &layout.tables[..] else {
        return Err(Error::InvalidArgument(format!(
            "a qwen4exp GGUF holds one PLE table; this layout has {}",
            layout.tables.len()
        )));
    };
    let k = |name: &str| format!("{ARCH}.{name}");
    let u64s = |v: Vec<u64>| Value::Array(Array::U64(v));
    let metadata = vec![
        (
            "general.architecture".to_string(),
            Value::String(ARCH.into()),
        ),
        (
            "general.name".to_string(),
            Value::String("engram synthetic qwen4exp".into()),
        ),
        (k("vocab_size"), Value::U32(params.vocab_size)),
        (
            k("embedding_length_per_layer_input"),
            Value::U32(params.row_dim as u32),
        ),
        (
            k("ple.layers"),
            Value::Array(Array::U32(vec![table.layer_id])),
        ),
        (k("ple.ngram_size"), Value::U32(params.ngram_size as u32)),
        (
            k("ple.heads_per_ngram"),
            Value::U32(params.heads_per_ngram as u32),
        ),
        (k("ple.conv_kernel"), Value::U32(4)),
        (k("ple.eos_token_id"), Value::U32(params.eos_token_id)),
        (k("ple.layer_multipliers"), u64s(table.multipliers.clone())),
        (
            k("ple.head_offsets"),
            u64s(table.offsets.iter().map(|&o| u64::from(o)).collect()),
        ),
        (
            k("ple.head_vocab_sizes"),
            u64s(table.primes.iter().map(|&p| u64::from(p)).collect()),
        ),
    ];
    let rows = table.stored_rows;
    let ggml = ggml_type(encoding.name()).unwrap_or_default();
    let decl = TensorDecl {
        name: TENSOR.into(),
        dims: vec![params.row_dim as u64, rows],
        ggml_type: ggml,
        bytes: rows * encoding.row_bytes() as u64,
    };
    let mut writer = GgufWriter::create(path, &metadata, vec![decl])?;
    stream_tables(
        &[rows],
        encoding.row_bytes(),
        |t, first, buf| fill_rows(seed, t, encoding, first, buf),
        |chunk| writer.write(&chunk.data),
        progress,
    )?;
    writer.finish()
}

/// Where one part of one shard's rows goes: file, offset, bytes a row,
/// and the part's place in the encoded row.
#[derive(Clone, Copy)]
struct PartSink {
    file: usize,
    offset: u64,
    bytes: usize,
    at: usize,
}

/// A shard of a table being written: its rows and where each part goes.
struct ShardSink<P> {
    first: u64,
    rows: u64,
    parts: Vec<P>,
}

/// A part planned before the files exist: its file, the index of its
/// tensor in that file's list, and bytes a row.
#[derive(Clone, Copy)]
struct PlannedPart {
    file: usize,
    tensor: usize,
    bytes: usize,
}

/// Shard `s` of `parts` over `rows` rows: (first row, rows). HF checkpoints
/// cut `ceil(rows / parts)` rows a shard (the last takes the rest), MLX by
/// divmod (the first `rows % parts` shards one row longer).
fn shard_range(format: QwenFormat, rows: u64, parts: u64, s: u64) -> (u64, u64) {
    match format {
        QwenFormat::Mlx => {
            let (per, extra) = (rows / parts, rows % parts);
            (s * per + s.min(extra), per + u64::from(s < extra))
        }
        _ => {
            let per = rows.div_ceil(parts);
            let first = (s * per).min(rows);
            (first, per.min(rows - first))
        }
    }
}

fn write_dir(dir: &Path, format: QwenFormat, model: ModelSpec<'_>) -> Result<()> {
    let (layout, params, encoding) = (model.layout, model.params, model.encoding);
    let (seed, progress) = (model.seed, model.progress);
    let temp = TempDir::create_for(dir)?;
    let root = temp.dir().to_path_buf();
    let mlx = format == QwenFormat::Mlx;
    let (prefix, shard_word) = if mlx {
        ("language_model.model.", "shards.")
    } else {
        ("model.language_model.", "shard_")
    };
    let files: Vec<String> = if mlx {
        vec!["model.safetensors".into()]
    } else {
        vec![
            "model-00001-of-00002.safetensors".into(),
            "model-00002-of-00002.safetensors".into(),
        ]
    };
    let dim = params.row_dim as u64;
    // Per file, its tensors; per table and shard, where each part goes.
    let mut specs: Vec<Vec<TensorSpec>> = files.iter().map(|_| Vec::new()).collect();
    let mut sinks: Vec<Vec<ShardSink<PlannedPart>>> = Vec::new();
    for table in &layout.tables {
        let base = format!("{prefix}layers.{}.ple.ple_embedding.", table.layer_id);
        for (leaf, n) in [
            ("layer_multipliers", table.multipliers.len()),
            ("ngram_heads_vocab_sizes", table.primes.len()),
            ("ngram_heads_offsets", table.offsets.len()),
        ] {
            if !mlx {
                specs[0].push(TensorSpec {
                    name: format!("{base}{leaf}"),
                    dtype: "I64",
                    shape: vec![n as u64],
                    bytes: 8 * n as u64,
                });
            }
        }
        if matches!(encoding, Encoding::Fp8E4m3 { .. }) {
            specs[0].push(TensorSpec {
                name: format!("{base}ngram_embedding.weight_scale"),
                dtype: "F32",
                shape: vec![],
                bytes: 4,
            });
        }
        let rows = table.stored_rows;
        let mut shards = Vec::new();
        for s in 0..SYNTH_PARTS {
            let (first, n) = shard_range(format, rows, SYNTH_PARTS, s);
            let file = if mlx {
                0
            } else {
                (s * files.len() as u64 / SYNTH_PARTS) as usize
            };
            let name = |leaf: &str| format!("{base}ngram_embedding.{shard_word}{s}.{leaf}");
            let mut parts = Vec::new();
            let arrays: Vec<(String, &'static str, Vec<u64>, u64)> = if mlx {
                vec![
                    (name("weight"), "U32", vec![n, dim / 8], dim / 2),
                    (name("scales"), "BF16", vec![n, dim / 32], dim / 16),
                    (name("biases"), "BF16", vec![n, dim / 32], dim / 16),
                ]
            } else {
                let dtype = match encoding {
                    Encoding::Bf16 { .. } => "BF16",
                    Encoding::F16 { .. } => "F16",
                    Encoding::F32 { .. } => "F32",
                    _ => "F8_E4M3",
                };
                vec![(
                    name("weight"),
                    dtype,
                    vec![n, dim],
                    encoding.row_bytes() as u64,
                )]
            };
            for (name, dtype, shape, bytes) in arrays {
                parts.push(PlannedPart {
                    file,
                    tensor: specs[file].len(),
                    bytes: bytes as usize,
                });
                specs[file].push(TensorSpec {
                    name,
                    dtype,
                    shape,
                    bytes: n * bytes,
                });
            }
            shards.push(ShardSink {
                first,
                rows: n,
                parts,
            });
        }
        sinks.push(shards);
    }
    let mut opened = Vec::new();
    for (name, tensors) in files.iter().zip(&specs) {
        opened.push(create_safetensors(&root.join(name), tensors)?);
    }
    // The constants and the FP8 scale, now that every offset is known.
    for table in &layout.tables {
        let base = format!("{prefix}layers.{}.ple.ple_embedding.", table.layer_id);
        let values: [(&str, Vec<u8>); 4] = [
            (
                "layer_multipliers",
                table
                    .multipliers
                    .iter()
                    .flat_map(|&x| (x as i64).to_le_bytes())
                    .collect(),
            ),
            (
                "ngram_heads_vocab_sizes",
                table
                    .primes
                    .iter()
                    .flat_map(|&x| i64::from(x).to_le_bytes())
                    .collect(),
            ),
            (
                "ngram_heads_offsets",
                table
                    .offsets
                    .iter()
                    .flat_map(|&x| i64::from(x).to_le_bytes())
                    .collect(),
            ),
            (
                "ngram_embedding.weight_scale",
                FP8_SCALE.to_le_bytes().to_vec(),
            ),
        ];
        for (leaf, bytes) in values {
            let name = format!("{base}{leaf}");
            if let Some(i) = specs[0].iter().position(|s| s.name == name) {
                let (file, offsets) = &opened[0];
                file.write_all_at(&bytes, offsets[i])
                    .map_err(|e| Error::io(root.join(&files[0]), e))?;
            }
        }
    }
    let parts: Vec<Vec<ShardSink<PartSink>>> = sinks
        .into_iter()
        .map(|shards| {
            shards
                .into_iter()
                .map(|shard| {
                    let mut at = 0;
                    let parts = shard
                        .parts
                        .into_iter()
                        .map(|p| {
                            let offset = opened[p.file].1[p.tensor];
                            let sink = PartSink {
                                file: p.file,
                                offset,
                                bytes: p.bytes,
                                at,
                            };
                            at += p.bytes;
                            sink
                        })
                        .collect();
                    ShardSink {
                        first: shard.first,
                        rows: shard.rows,
                        parts,
                    }
                })
                .collect()
        })
        .collect();
    let write_chunk = |chunk: &Chunk| -> Result<()> {
        let width = encoding.row_bytes();
        let first = chunk.first_row;
        let count = (chunk.data.len() / width) as u64;
        for shard in &parts[chunk.table] {
            let (shard_first, sinks) = (shard.first, &shard.parts);
            let from = first.max(shard_first);
            let to = (first + count).min(shard_first + shard.rows);
            if from >= to {
                continue;
            }
            for sink in sinks {
                let mut buf = Vec::with_capacity((to - from) as usize * sink.bytes);
                for r in from..to {
                    let row = &chunk.data[(r - first) as usize * width..][..width];
                    buf.extend_from_slice(&row[sink.at..sink.at + sink.bytes]);
                }
                let offset = sink.offset + (from - shard_first) * sink.bytes as u64;
                opened[sink.file]
                    .0
                    .write_all_at(&buf, offset)
                    .map_err(|e| Error::io(root.join(&files[sink.file]), e))?;
            }
        }
        Ok(())
    };
    let rows: Vec<u64> = layout.tables.iter().map(|t| t.stored_rows).collect();
    stream_tables(
        &rows,
        encoding.row_bytes(),
        |t, first, buf| fill_rows(seed, t, encoding, first, buf),
        write_chunk,
        progress,
    )?;
    write_config(&root, format, layout, params, encoding)?;
    if !mlx {
        let mut weight_map = serde_json::Map::new();
        for (file, tensors) in files.iter().zip(&specs) {
            for t in tensors {
                weight_map.insert(t.name.clone(), file.clone().into());
            }
        }
        let total: u64 = specs.iter().flatten().map(|t| t.bytes).sum();
        let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        write_json(&root.join(crate::model::hf::INDEX_FILE), &index)?;
    }
    temp.persist()
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let bytes =
        serde_json::to_vec_pretty(value).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

fn write_config(
    root: &Path,
    format: QwenFormat,
    layout: &Layout,
    params: &QwenParams,
    encoding: Encoding,
) -> Result<()> {
    let heads = (params.ngram_size - 1) * params.heads_per_ngram;
    let mut text = json!({
        "model_type": super::config::TEXT_MODEL_TYPE,
        "vocab_size": params.vocab_size,
        "hidden_size": params.row_dim * heads,
        "ple_embed_dim": params.row_dim * heads,
        "ngram_size": params.ngram_size,
        "heads_per_ngram": params.heads_per_ngram,
        "ngram_vocab_size_base": params.ngram_vocab_size_base,
        "make_ngram_vocab_size_divisible_by": params.make_ngram_vocab_size_divisible_by,
        "eos_token_id": params.eos_token_id,
        "ple_layer_ids": layout.tables.iter().map(|t| t.layer_id + 1).collect::<Vec<_>>(),
        "split_ngram_parts": SYNTH_PARTS,
        "ple_conv_kernel_size": 4,
    });
    if params.seed != 1234 {
        text["seed"] = params.seed.into();
    }
    let mut config = json!({
        "model_type": super::config::MODEL_TYPE,
        "architectures": ["Qwen4ExpForConditionalGeneration"],
        "text_config": text,
    });
    match format {
        QwenFormat::Mlx => {
            config["quantization"] = json!({"group_size": 32, "bits": 4, "mode": "affine"})
        }
        _ if matches!(encoding, Encoding::Fp8E4m3 { .. }) => {
            config["quantization_config"] = json!({"quant_method": "fp8", "modules_to_convert": ["ple.ple_embedding.ngram_embedding"]});
        }
        _ => {}
    }
    write_json(&root.join(crate::model::hf::CONFIG_FILE), &config)
}
