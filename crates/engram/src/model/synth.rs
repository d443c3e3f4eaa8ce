//! Synthetic models: a layout with random valid rows, written as a converter
//! would write it (a ds4 GGUF, or a Hugging Face checkpoint directory).
//!
//! Rows are a pure function of (seed, table, row), so a test can regenerate
//! any row with [`fill_rows`] and compare it with what a reader returns.
//! E4M3 value bytes are uniform over every code except the NaN codes
//! (`code & 0x7f == 0x7f`, which are nudged to 0x7e); E8M0 scales lie in
//! 2^-12..=2^-4, so values stay within +-28 (BF16 has room to spare).
//! `lloyd4_e5m3_32_r136` rows are such rows re-encoded by the codec.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::gguf::GgufWriter;
use super::hf::{self, HfConfig};
use super::output::{create_safetensors, TempDir, TensorSpec};
use super::stream::{each_row, stream_tables, Chunk};
use super::{ds4, Progress};
use crate::codec::{Encoding, GROUP, ROW_DIM};
use crate::layout::Layout;
use crate::{Error, Result};

/// Smallest E8M0 scale byte generated (2^-12).
const SCALE_MIN: u8 = 127 - 12;
/// Number of distinct scale bytes generated (up to 2^-4).
const SCALE_SPAN: u8 = 9;

/// The file name of a synthetic GGUF inside its output directory.
pub const GGUF_FILE: &str = "model.gguf";

/// Which kind of model to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynthFormat {
    /// One `.gguf` file with packed rows (ds4 dialect).
    Gguf,
    /// A Hugging Face checkpoint directory (split values and scales).
    Hf,
}

/// A small, fast generator (wyrand): one multiply per 64 random bits.
struct WyRand(u64);

impl WyRand {
    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        (t >> 64) as u64 ^ t as u64
    }
}

/// splitmix64 finalizer: decorrelates per-row seeds.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `out` with consecutive rows of table `table` starting at
/// `first_row`, in `encoding`; `out.len()` must be a multiple of the row size.
pub fn fill_rows(
    seed: u64,
    table: usize,
    encoding: Encoding,
    first_row: u64,
    out: &mut [u8],
) -> Result<()> {
    let width = encoding.row_bytes();
    let table_seed = mix(seed ^ mix(table as u64 + 1));
    match encoding {
        Encoding::E4m3E8m0Row264 => each_row(out, width, first_row, |r, row| {
            fill_row264(table_seed, r, row);
            Ok(())
        }),
        Encoding::Lloyd4E5m3Row136 => {
            let mut src = [0u8; 264];
            each_row(out, width, first_row, |r, row| {
                fill_row264(table_seed, r, &mut src);
                crate::codec::encode_row136(&src, row).map_err(|e| e.into_error(table, r))
            })
        }
        other => Err(Error::InvalidArgument(format!(
            "synthetic rows are written only in the DeepSeek encodings, not {other}"
        ))),
    }
}

/// One 264-byte row: 256 E4M3 codes (no NaN) and 8 E8M0 scales.
#[inline]
fn fill_row264(table_seed: u64, row: u64, out: &mut [u8]) {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut rng = WyRand(mix(table_seed ^ row.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    for word in out[..ROW_DIM].chunks_exact_mut(8) {
        let w = rng.next();
        // High bit set in each byte whose low 7 bits are all ones (a NaN
        // code): 0x7f + 1 carries into bit 7, nothing smaller does.
        let nan = ((w & LOW7) + ONES) & HIGH;
        word.copy_from_slice(&(w ^ (nan >> 7)).to_le_bytes());
    }
    let s = rng.next().to_le_bytes();
    for (dst, b) in out[ROW_DIM..ROW_DIM + ROW_DIM / GROUP].iter_mut().zip(s) {
        *dst = SCALE_MIN + b % SCALE_SPAN;
    }
}

/// Writes a ds4-dialect GGUF of `layout` with synthetic rows to `path`.
pub fn write_gguf(
    path: &Path,
    layout: &Layout,
    encoding: Encoding,
    seed: u64,
    progress: &dyn Progress,
) -> Result<()> {
    let metadata = ds4::ds41_metadata(layout, encoding, "engram synthetic model");
    let mut writer = GgufWriter::create(path, &metadata, ds4::table_decls(layout, encoding))?;
    let rows: Vec<u64> = layout.tables.iter().map(|t| t.rows).collect();
    stream_tables(
        &rows,
        encoding.row_bytes(),
        |table, first, buf| fill_rows(seed, table, encoding, first, buf),
        |chunk| writer.write(&chunk.data),
        progress,
    )?;
    writer.finish()
}

/// Writes a Hugging Face checkpoint directory `dir` (which must not exist or
/// be empty): `config.json` from `config`, `tokenizer_json` as
/// `tokenizer.json`, one shard per table with its value and scale tensors,
/// and the shard index. Rows are the 264-byte synthetic rows, split.
pub fn write_hf(
    dir: &Path,
    config: &HfConfig,
    layout: &Layout,
    tokenizer_json: &[u8],
    seed: u64,
    progress: &dyn Progress,
) -> Result<()> {
    let temp = TempDir::create_for(dir)?;
    let root = temp.dir().to_path_buf();
    write_small(
        &root.join(hf::CONFIG_FILE),
        &serde_json::to_vec_pretty(&config.to_json()).expect("JSON"),
    )?;
    write_small(&root.join(hf::TOKENIZER_FILE), tokenizer_json)?;
    let n = layout.tables.len();
    let mut weight_map = serde_json::Map::new();
    let mut shards = Vec::with_capacity(n);
    for (i, t) in layout.tables.iter().enumerate() {
        let name = format!("model-{:05}-of-{n:05}.safetensors", i + 1);
        let shard = SplitShard::create(&root.join(&name), t.layer_id, t.rows)?;
        weight_map.insert(hf::weight_name(t.layer_id), name.clone().into());
        weight_map.insert(hf::scale_name(t.layer_id), name.into());
        shards.push(shard);
    }
    let index = serde_json::json!({
        "metadata": {"total_size": shards.iter().map(|s| s.data_bytes).sum::<u64>()},
        "weight_map": weight_map,
    });
    write_small(
        &root.join(hf::INDEX_FILE),
        &serde_json::to_vec_pretty(&index).expect("JSON"),
    )?;
    let rows: Vec<u64> = layout.tables.iter().map(|t| t.rows).collect();
    let e = Encoding::E4m3E8m0Row264;
    stream_tables(
        &rows,
        e.row_bytes(),
        |table, first, buf| fill_rows(seed, table, e, first, buf),
        |chunk| shards[chunk.table].write_chunk(chunk),
        progress,
    )?;
    temp.persist()
}

fn write_small(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// A safetensors shard holding one table as a value tensor then a scale
/// tensor, written with positioned writes so rows can stream in once.
pub(crate) struct SplitShard {
    file: std::fs::File,
    path: PathBuf,
    values_at: u64,
    scales_at: u64,
    data_bytes: u64,
    split_buf: Vec<u8>,
}

impl SplitShard {
    /// Creates `path` with the header for table `layer_id` of `rows` rows.
    pub(crate) fn create(path: &Path, layer_id: u32, rows: u64) -> Result<SplitShard> {
        let vb = ROW_DIM as u64;
        let sb = (ROW_DIM / GROUP) as u64;
        let tensors = [
            TensorSpec {
                name: hf::weight_name(layer_id),
                dtype: "F8_E4M3",
                shape: vec![rows, vb],
                bytes: rows * vb,
            },
            TensorSpec {
                name: hf::scale_name(layer_id),
                dtype: "F8_E8M0",
                shape: vec![rows, sb],
                bytes: rows * sb,
            },
        ];
        let (file, at) = create_safetensors(path, &tensors)?;
        let (values_at, data_bytes) = (at[0], rows * (vb + sb));
        Ok(SplitShard {
            file,
            path: path.to_path_buf(),
            values_at,
            scales_at: at[1],
            data_bytes,
            split_buf: Vec::new(),
        })
    }

    /// Writes a chunk of packed 264-byte rows: values and scales to their regions.
    pub(crate) fn write_chunk(&mut self, chunk: &Chunk) -> Result<()> {
        let (vb, sb) = (ROW_DIM, ROW_DIM / GROUP);
        let n = chunk.data.len() / (vb + sb);
        self.split_buf.clear();
        self.split_buf.reserve(chunk.data.len());
        for row in chunk.data.chunks_exact(vb + sb) {
            self.split_buf.extend_from_slice(&row[..vb]);
        }
        for row in chunk.data.chunks_exact(vb + sb) {
            self.split_buf.extend_from_slice(&row[vb..]);
        }
        let (values, scales) = self.split_buf.split_at(n * vb);
        let at = |base: u64, width: usize| base + chunk.first_row * width as u64;
        self.file
            .write_all_at(values, at(self.values_at, vb))
            .and_then(|()| self.file.write_all_at(scales, at(self.scales_at, sb)))
            .map_err(|e| Error::io(&self.path, e))
    }
}

/// Writes a synthetic model of `layout` into `out`: `out/model.gguf` for
/// [`SynthFormat::Gguf`] (the directory is created if needed), or the
/// checkpoint directory `out` for [`SynthFormat::Hf`] (which needs `config`
/// and the tokenizer, and only supports the 264-byte encoding). Returns the
/// path a model reader opens.
#[allow(clippy::too_many_arguments)]
pub fn synth(
    out: &Path,
    format: SynthFormat,
    layout: &Layout,
    config: &HfConfig,
    tokenizer_json: &[u8],
    encoding: Encoding,
    seed: u64,
    progress: &dyn Progress,
) -> Result<PathBuf> {
    match format {
        SynthFormat::Gguf => {
            std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
            let path = out.join(GGUF_FILE);
            write_gguf(&path, layout, encoding, seed, progress)?;
            Ok(path)
        }
        SynthFormat::Hf => {
            if encoding != Encoding::E4m3E8m0Row264 {
                return Err(Error::InvalidArgument(format!(
                    "Hugging Face checkpoints hold {} rows only (got --encoding {encoding})",
                    Encoding::E4m3E8m0Row264
                )));
            }
            write_hf(out, config, layout, tokenizer_json, seed, progress)?;
            Ok(out.to_path_buf())
        }
    }
}

/// Writes a synthetic model of the named layout preset with every per-head
/// table size divided by `scale` (see [`synth`] for `out`): the checkpoint
/// config and, for [`SynthFormat::Hf`], the vendored tokenizer come from
/// the preset. Returns the path a model reader opens and the layout.
pub fn synth_preset(
    out: &Path,
    format: SynthFormat,
    preset: &str,
    scale: u64,
    encoding: Encoding,
    seed: u64,
    progress: &dyn Progress,
) -> Result<(PathBuf, Layout)> {
    let (layout, params) = super::derive::preset(preset, scale)?;
    let config = HfConfig {
        params,
        num_embeddings: layout.tables.iter().map(|t| t.rows).collect(),
        compressed_vocab_size: u64::from(layout.compressed_vocab_size),
        vocab_size: Some(layout.token_map.len() as u64),
    };
    let tokenizer = match format {
        SynthFormat::Hf => super::derive::vendored_tokenizer_json()?,
        SynthFormat::Gguf => Vec::new(),
    };
    let path = synth(
        out, format, &layout, &config, &tokenizer, encoding, seed, progress,
    )?;
    Ok((path, layout))
}

/// What [`synth_named`] wrote: the path a model reader opens, the layout
/// and the rows' encoding.
#[derive(Debug, Clone)]
pub struct Written {
    /// The file or directory `Model::open` takes.
    pub path: PathBuf,
    /// The model's layout.
    pub layout: Layout,
    /// The rows' encoding.
    pub encoding: Encoding,
}

/// Writes a synthetic model of preset `preset` at `scale` into `out`,
/// whatever the preset's family, from names as a command line or a binding
/// takes them: `format` is `gguf`, `hf` or `mlx` (Qwen4-Exp only), and
/// `encoding` an encoding name (`None`: the format's default,
/// `e4m3_e8m0_32_row264` for DeepSeek, `bf16` for Qwen4-Exp checkpoints and
/// GGUFs, `mlx4` for MLX).
pub fn synth_named(
    out: &Path,
    format: &str,
    preset: &str,
    scale: u64,
    encoding: Option<&str>,
    seed: u64,
    progress: &dyn Progress,
) -> Result<Written> {
    use super::qwen::synth::{self as qwen, QwenFormat};
    match crate::layout::preset_params(preset, scale)? {
        crate::layout::PresetParams::DeepSeek(_) => {
            let format = match format {
                "gguf" => SynthFormat::Gguf,
                "hf" => SynthFormat::Hf,
                other => {
                    return Err(Error::InvalidArgument(format!(
                        "format {other:?}: a {preset} model is written as \"gguf\" or \"hf\""
                    )))
                }
            };
            let name = encoding.unwrap_or(Encoding::E4m3E8m0Row264.name());
            let encoding = Encoding::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = Encoding::ALL.iter().map(|e| e.name()).collect();
                Error::InvalidArgument(format!(
                    "encoding {name:?}: a {preset} model holds one of {}",
                    known.join(", ")
                ))
            })?;
            let (path, layout) =
                synth_preset(out, format, preset, scale, encoding, seed, progress)?;
            Ok(Written {
                path,
                layout,
                encoding,
            })
        }
        crate::layout::PresetParams::Qwen(params) => {
            let (format, default) = match format {
                "gguf" => (QwenFormat::Gguf, "bf16"),
                "hf" => (QwenFormat::Hf, "bf16"),
                "mlx" => (QwenFormat::Mlx, "mlx4"),
                other => {
                    return Err(Error::InvalidArgument(format!(
                    "format {other:?}: a {preset} model is written as \"gguf\", \"hf\" or \"mlx\""
                )))
                }
            };
            let layout = Layout::derive_qwen(&params)?;
            let encoding = qwen::encoding(encoding.unwrap_or(default), params.row_dim)?;
            let path = qwen::synth(out, format, &layout, &params, encoding, seed, progress)?;
            Ok(Written {
                path,
                layout,
                encoding,
            })
        }
    }
}
