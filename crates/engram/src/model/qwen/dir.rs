//! Qwen4-Exp checkpoint directories: Hugging Face (bf16, f16, f32 or FP8
//! rows, sharded or not) and MLX (affine 4-bit, group 32, codes, scales and
//! biases in three arrays), both safetensors, opened in place.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use safetensors::Dtype;

use super::config::QwenConfig;
use super::names::{self, Constant, PleTensor, TableArray};
use crate::codec::Encoding;
use crate::layout::{Layout, TableLayout};
use crate::model::hf::{self, CONFIG_FILE};
use crate::model::{Model, ModelFormat, RowPart, RowShard, TableLocation};
use crate::{Error, Result};

/// Most shards a table may be split into.
const MAX_SHARDS: u64 = 1 << 16;

/// One tensor of the checkpoint: where its bytes are and what they are.
#[derive(Debug, Clone)]
struct Tensor {
    name: String,
    file: PathBuf,
    /// Absolute offset of the first byte.
    offset: u64,
    dtype: Dtype,
    shape: Vec<usize>,
}

impl Tensor {
    fn err(&self, reason: impl Into<String>) -> Error {
        Error::format(&self.file, &self.name, reason)
    }

    /// `[rows, width]` or an error naming what was expected.
    fn matrix(&self, width: usize, what: &str) -> Result<u64> {
        match self.shape[..] {
            [rows, w] if w == width && rows > 0 => Ok(rows as u64),
            _ => Err(self.err(format!(
                "shape {:?}, expected [rows, {width}] ({what})",
                self.shape
            ))),
        }
    }

    /// Reads the whole tensor (a small one: a constant or a scale).
    fn read_small(&self, max: usize) -> Result<Vec<u8>> {
        let elems: usize = self.shape.iter().product();
        let len = elems * self.dtype.bitsize() / 8;
        if len > max {
            return Err(self.err(format!("{len} bytes, expected at most {max}")));
        }
        let file = std::fs::File::open(&self.file).map_err(|e| Error::io(&self.file, e))?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, self.offset)
            .map_err(|e| Error::io(&self.file, e))?;
        Ok(buf)
    }

    /// The tensor's integers (a hash constant), any integer dtype.
    fn integers(&self) -> Result<Vec<i128>> {
        let bytes = self.read_small(1 << 16)?;
        let values = match self.dtype {
            Dtype::I64 => bytes
                .chunks_exact(8)
                .map(|b| i128::from(i64::from_le_bytes(b.try_into().unwrap_or_default())))
                .collect(),
            Dtype::U64 => bytes
                .chunks_exact(8)
                .map(|b| i128::from(u64::from_le_bytes(b.try_into().unwrap_or_default())))
                .collect(),
            Dtype::I32 => bytes
                .chunks_exact(4)
                .map(|b| i128::from(i32::from_le_bytes(b.try_into().unwrap_or_default())))
                .collect(),
            Dtype::U32 => bytes
                .chunks_exact(4)
                .map(|b| i128::from(u32::from_le_bytes(b.try_into().unwrap_or_default())))
                .collect(),
            other => return Err(self.err(format!("dtype {other:?}, expected an integer dtype"))),
        };
        Ok(values)
    }

    /// The tensor's one value as f32 (the FP8 table's global scale).
    fn scalar_f32(&self) -> Result<f32> {
        let elems: usize = self.shape.iter().product();
        if elems != 1 {
            return Err(self.err(format!("shape {:?}, expected one value", self.shape)));
        }
        let b = self.read_small(8)?;
        let value = match self.dtype {
            Dtype::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Dtype::BF16 => f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16),
            Dtype::F16 => half_to_f32(u16::from_le_bytes([b[0], b[1]])),
            other => return Err(self.err(format!("dtype {other:?}, expected F32, BF16 or F16"))),
        };
        Ok(value)
    }
}

/// IEEE half to f32, exactly.
fn half_to_f32(h: u16) -> f32 {
    let magnitude = match ((h >> 10) & 0x1f, u32::from(h & 0x3ff)) {
        // Zero and subnormals: frac * 2^-24.
        (0, frac) => frac as f32 * f32::powi(2.0, -24),
        (0x1f, 0) => f32::INFINITY,
        (0x1f, _) => f32::NAN,
        (exp, frac) => f32::from_bits((u32::from(exp) + 112) << 23 | frac << 13),
    };
    if h >> 15 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

/// Every tensor of the checkpoint's safetensors files, by name.
fn tensors(dir: &Path) -> Result<BTreeMap<String, Tensor>> {
    let mut all = BTreeMap::new();
    for file in hf::safetensors_files(dir)? {
        let path = dir.join(&file);
        let header = hf::read_safetensors_header(&path)?;
        for (name, info) in header.metadata.tensors() {
            all.insert(
                name.clone(),
                Tensor {
                    name: name.clone(),
                    file: path.clone(),
                    offset: header.data_start + info.data_offsets.0 as u64,
                    dtype: info.dtype,
                    shape: info.shape.clone(),
                },
            );
        }
    }
    Ok(all)
}

/// Opens the Qwen4-Exp checkpoint directory `dir` whose parsed
/// `config.json` is `json`.
pub fn open(dir: &Path, json: &serde_json::Value) -> Result<Model> {
    let config_path = dir.join(CONFIG_FILE);
    let config = QwenConfig::parse(&config_path, json)?;
    let layout = super::derive_layout(&config_path, &config.params)?;
    let all = tensors(dir)?;
    let mut by_layer: BTreeMap<u32, Vec<(PleTensor, &Tensor)>> = BTreeMap::new();
    for (name, tensor) in &all {
        if let Some((layer, what)) = names::parse(name) {
            by_layer.entry(layer).or_default().push((what, tensor));
        }
    }
    let mut tables = Vec::with_capacity(layout.tables.len());
    let mut mlx = false;
    for table in &layout.tables {
        let found = by_layer.remove(&table.layer_id).unwrap_or_default();
        let loc = locate(dir, &config, &layout, table, &found)?;
        mlx |= matches!(loc.encoding, Encoding::Mlx4 { .. });
        tables.push(loc);
    }
    if let Some((layer, found)) = by_layer.into_iter().next() {
        return Err(Error::format(
            &found[0].1.file,
            &found[0].1.name,
            format!(
                "a PLE tensor of decoder layer {layer}, which ple_layer_ids (one-based) does not list"
            ),
        ));
    }
    Ok(Model {
        format: if mlx {
            ModelFormat::Mlx
        } else {
            ModelFormat::HuggingFace
        },
        dialect: "qwen4exp".into(),
        layout,
        tables,
    })
}

/// The shards of one table, their arrays by kind, and the table's
/// encoding, checked against the config and layout.
fn locate(
    dir: &Path,
    config: &QwenConfig,
    layout: &Layout,
    table: &TableLayout,
    found: &[(PleTensor, &Tensor)],
) -> Result<TableLocation> {
    let layer = table.layer_id;
    let config_path = dir.join(CONFIG_FILE);
    let mut arrays: BTreeMap<(Option<u32>, TableArray), &Tensor> = BTreeMap::new();
    let mut weight_scale = None;
    for &(what, tensor) in found {
        match what {
            PleTensor::Table { shard, array } => {
                arrays.insert((shard, array), tensor);
            }
            PleTensor::WeightScale => weight_scale = Some(tensor),
            PleTensor::Constant(c) => check_constant(c, tensor, table)?,
        }
    }
    let weights: Vec<(Option<u32>, &Tensor)> = arrays
        .iter()
        .filter(|((_, a), _)| *a == TableArray::Weight)
        .map(|(&(s, _), &t)| (s, t))
        .collect();
    let sharded = weights.iter().any(|(s, _)| s.is_some());
    if weights.is_empty() {
        return Err(Error::format(
            dir,
            format!("layers.{layer}.ple.ple_embedding.ngram_embedding"),
            "missing tensor: no ngram_embedding weight (neither .weight nor .shard_{i}.weight / .shards.{i}.weight)",
        ));
    }
    if sharded && weights.iter().any(|(s, _)| s.is_none()) {
        let t = weights[0].1;
        return Err(
            t.err("both an unsharded ngram_embedding.weight and shards: which is the table?")
        );
    }
    let shard_count = weights.len() as u64;
    if sharded {
        if let Some(parts) = config.split_ngram_parts {
            if parts != shard_count {
                return Err(Error::format(
                    &config_path,
                    "text_config.split_ngram_parts",
                    format!(
                        "is {parts}, but the checkpoint has {shard_count} shards of layer {layer}"
                    ),
                ));
            }
        }
        if shard_count > MAX_SHARDS {
            return Err(weights[0]
                .1
                .err(format!("{shard_count} shards (limit {MAX_SHARDS})")));
        }
        // Shards are numbered 0..n without gaps: a missing one is named.
        for (i, (s, _)) in weights.iter().enumerate() {
            if *s != Some(i as u32) {
                return Err(Error::format(
                    dir,
                    format!("layers.{layer}.ple.ple_embedding.ngram_embedding.shard_{i}.weight"),
                    format!("missing tensor (the checkpoint has {shard_count} other shards)"),
                ));
            }
        }
    }
    let dim = layout.head_dim;
    let first = weights[0].1;
    let encoding = encoding_of(config, first, weight_scale, dim)?;
    let mut shards = Vec::with_capacity(weights.len());
    let mut next = 0u64;
    for &(s, weight) in &weights {
        if weight.dtype != first.dtype {
            return Err(weight.err(format!(
                "dtype {:?}, but shard 0 is {:?}",
                weight.dtype, first.dtype
            )));
        }
        let (rows, parts) = match encoding {
            Encoding::Mlx4 { .. } => {
                let array = |kind: TableArray, leaf: &str| {
                    arrays.get(&(s, kind)).copied().ok_or_else(|| {
                        let name = weight.name.replace(".weight", leaf);
                        Error::format(
                            &weight.file,
                            name,
                            "missing tensor (MLX stores scales and biases beside each weight)",
                        )
                    })
                };
                let (scales, biases) = (
                    array(TableArray::Scales, ".scales")?,
                    array(TableArray::Biases, ".biases")?,
                );
                let rows = weight.matrix(dim / 8, "uint32 words of eight 4-bit codes")?;
                for t in [scales, biases] {
                    if t.dtype != Dtype::BF16 {
                        return Err(t.err(format!("dtype {:?}, expected BF16", t.dtype)));
                    }
                    if t.matrix(dim / 32, "one per 32 values")? != rows {
                        return Err(t.err(format!("{:?} rows, but its weight has {rows}", t.shape)));
                    }
                }
                let part = |t: &Tensor, bytes: usize| RowPart {
                    file: t.file.clone(),
                    offset: t.offset,
                    bytes_per_row: bytes as u32,
                };
                (
                    rows,
                    vec![
                        part(weight, dim / 2),
                        part(scales, dim / 16),
                        part(biases, dim / 16),
                    ],
                )
            }
            _ => {
                let rows = weight.matrix(dim, "one row of the table's values")?;
                (
                    rows,
                    vec![RowPart {
                        file: weight.file.clone(),
                        offset: weight.offset,
                        bytes_per_row: encoding.row_bytes() as u32,
                    }],
                )
            }
        };
        shards.push(RowShard {
            first_row: next,
            rows,
            parts,
        });
        next += rows;
    }
    if next < table.rows {
        return Err(first.err(format!(
            "the table's tensors hold {next} rows, but the hash addresses {} (layer {layer})",
            table.rows
        )));
    }
    let loc = TableLocation {
        layer_id: layer,
        rows: next,
        encoding,
        shards,
    };
    loc.check_shape(dir)?;
    Ok(loc)
}

/// The encoding a table's weight dtype (and, for FP8, its global scale; for
/// MLX, the config's quantization) says.
fn encoding_of(
    config: &QwenConfig,
    weight: &Tensor,
    weight_scale: Option<&Tensor>,
    dim: usize,
) -> Result<Encoding> {
    let named = |name: &str| {
        Encoding::with_values(name, dim)
            .map_err(|e| weight.err(format!("{name} rows of {dim} values: {e}")))
    };
    match weight.dtype {
        Dtype::BF16 => named("bf16"),
        Dtype::F16 => named("f16"),
        Dtype::F32 => named("f32"),
        Dtype::F8_E4M3 => {
            let scale = weight_scale.ok_or_else(|| {
                let name = weight
                    .name
                    .rsplit_once(".ngram_embedding.")
                    .map_or_else(|| weight.name.clone(), |(head, _)| format!("{head}.ngram_embedding.weight_scale"));
                Error::format(&weight.file, name, "missing tensor (float8_e4m3fn rows need the global weight_scale)")
            })?;
            let value = scale.scalar_f32()?;
            Encoding::fp8_e4m3(dim, value).map_err(|e| scale.err(format!("{value} is not a usable scale: {e}")))
        }
        Dtype::U32 => {
            let q = config.quantization.ok_or_else(|| {
                weight.err("uint32 rows (MLX codes) but config.json has no quantization entry")
            })?;
            if (q.bits, q.group_size) != (4, 32) {
                return Err(weight.err(format!(
                    "MLX quantization bits {} group_size {}: only 4-bit affine in groups of 32 is read",
                    q.bits, q.group_size
                )));
            }
            named("mlx4")
        }
        other => Err(weight.err(format!(
            "dtype {other:?}; expected BF16, F16, F32, F8_E4M3 (with weight_scale) or U32 (MLX codes)"
        ))),
    }
}

/// A stored hash constant must equal the one derived from the config.
fn check_constant(which: Constant, tensor: &Tensor, table: &TableLayout) -> Result<()> {
    let stored = tensor.integers()?;
    let derived: Vec<i128> = match which {
        Constant::Multipliers => table.multipliers.iter().map(|&m| i128::from(m)).collect(),
        Constant::HeadPrimes => table.primes.iter().map(|&p| i128::from(p)).collect(),
        Constant::HeadOffsets => table.offsets.iter().map(|&o| i128::from(o)).collect(),
    };
    if stored != derived {
        return Err(tensor.err(format!(
            "{} {stored:?} differ from those the config derives: {derived:?}",
            which.leaf()
        )));
    }
    Ok(())
}
