//! Hugging Face checkpoint directories.
//!
//! A checkpoint is `config.json` (the `engram_*` fields), `tokenizer.json`
//! and safetensors shards, listed by `model.safetensors.index.json` or, when
//! there is no index, every `*.safetensors` file in the directory. Each table
//! is two tensors: `layers.{L}.engram.embed.weight` (F8_E4M3, `[rows, 256]`)
//! and `layers.{L}.engram.embed.scale` (F8_E8M0, `[rows, 8]`), which live in
//! separate regions (possibly separate shards), so a row is two reads; the
//! [`TableLocation`] records both. The layout is derived from the config and
//! the tokenizer exactly as the reference does, then checked against the
//! config's `engram_num_embeddings` and `engram_compressed_vocab_size`.
//!
//! Only safetensors headers are read (8-byte length, then that much JSON,
//! bounded by the file size and [`MAX_SAFETENSORS_HEADER`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use safetensors::tensor::Metadata;
use safetensors::Dtype;
use serde_json::Value as Json;

use super::{Model, ModelFormat, RowPart, TableLocation};
use crate::codec::{Encoding, GROUP, ROW_DIM};
use crate::layout::{Layout, LayoutParams};
use crate::{Error, Result};

/// The checkpoint's configuration file.
pub const CONFIG_FILE: &str = "config.json";
/// The checkpoint's tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The shard index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Largest safetensors JSON header accepted (the safetensors crate's own limit).
pub const MAX_SAFETENSORS_HEADER: u64 = 100_000_000;
/// Largest `config.json` / index accepted.
const MAX_JSON_FILE: u64 = 64 << 20;
/// Largest `tokenizer.json` accepted.
const MAX_TOKENIZER_FILE: u64 = 256 << 20;

/// Name of table `layer_id`'s value tensor.
pub fn weight_name(layer_id: u32) -> String {
    format!("layers.{layer_id}.engram.embed.weight")
}

/// Name of table `layer_id`'s scale tensor.
pub fn scale_name(layer_id: u32) -> String {
    format!("layers.{layer_id}.engram.embed.scale")
}

/// The Engram fields of `config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfConfig {
    /// Layout parameters (`engram_layer_ids`, `engram_max_ngram_size`,
    /// `engram_n_heads`, `engram_head_dim`, `engram_vocab_size`,
    /// `engram_pad_id`, and `engram_seed`, default 0).
    pub params: LayoutParams,
    /// `engram_num_embeddings`: rows per table.
    pub num_embeddings: Vec<u64>,
    /// `engram_compressed_vocab_size`.
    pub compressed_vocab_size: u64,
    /// `vocab_size`, if present: the tokenizer's vocabulary size.
    pub vocab_size: Option<u64>,
}

impl HfConfig {
    /// Parses the Engram fields of a `config.json` document (`path` for errors).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<HfConfig> {
        let json: Json = serde_json::from_slice(bytes)
            .map_err(|e| Error::format(path, "config.json", format!("invalid JSON: {e}")))?;
        let obj = json
            .as_object()
            .ok_or_else(|| Error::format(path, "config.json", "is not a JSON object"))?;
        let field = |name: &str| {
            obj.get(name)
                .ok_or_else(|| Error::format(path, name, "missing field"))
        };
        let int = |name: &str| -> Result<u64> {
            let v = field(name)?;
            v.as_u64().ok_or_else(|| {
                Error::format(
                    path,
                    name,
                    format!("expected a non-negative integer, found {v}"),
                )
            })
        };
        let ints = |name: &str| -> Result<Vec<u64>> {
            let v = field(name)?;
            let arr = v.as_array().ok_or_else(|| {
                Error::format(
                    path,
                    name,
                    format!("expected an array of integers, found {v}"),
                )
            })?;
            arr.iter()
                .map(|x| {
                    x.as_u64().ok_or_else(|| {
                        Error::format(
                            path,
                            name,
                            format!("element {x} is not a non-negative integer"),
                        )
                    })
                })
                .collect()
        };
        let small = |name: &str, max: u64| -> Result<u64> {
            let v = int(name)?;
            if v == 0 || v > max {
                return Err(Error::format(
                    path,
                    name,
                    format!("{v} is outside 1..={max}"),
                ));
            }
            Ok(v)
        };
        let layer_ids = ints("engram_layer_ids")?;
        if layer_ids.is_empty() || layer_ids.len() > super::checks::MAX_TABLES {
            return Err(Error::format(
                path,
                "engram_layer_ids",
                format!(
                    "{} tables (expected 1..={})",
                    layer_ids.len(),
                    super::checks::MAX_TABLES
                ),
            ));
        }
        let layer_ids = layer_ids
            .into_iter()
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    Error::format(path, "engram_layer_ids", format!("{v} exceeds u32"))
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        let num_embeddings = ints("engram_num_embeddings")?;
        if num_embeddings.len() != layer_ids.len() {
            return Err(Error::format(
                path,
                "engram_num_embeddings",
                format!(
                    "{} entries for {} layers",
                    num_embeddings.len(),
                    layer_ids.len()
                ),
            ));
        }
        let max_ngram_size = small("engram_max_ngram_size", super::checks::MAX_NGRAM)?;
        if max_ngram_size < 2 {
            return Err(Error::format(
                path,
                "engram_max_ngram_size",
                "must be at least 2",
            ));
        }
        let n_heads = small("engram_n_heads", super::checks::MAX_HEADS)?;
        super::checks::total_columns(
            path,
            "engram_n_heads",
            layer_ids.len(),
            max_ngram_size,
            n_heads,
        )?;
        let head_dim = int("engram_head_dim")?;
        if head_dim != ROW_DIM as u64 {
            return Err(Error::format(
                path,
                "engram_head_dim",
                format!("{head_dim} (only {ROW_DIM}-value rows are supported)"),
            ));
        }
        let engram_vocab_size = small("engram_vocab_size", u64::from(u32::MAX))?;
        let pad = int("engram_pad_id")?;
        let pad_token = u32::try_from(pad)
            .map_err(|_| Error::format(path, "engram_pad_id", format!("{pad} exceeds u32")))?;
        let seed = match obj.get("engram_seed") {
            Some(_) => int("engram_seed")?,
            None => 0,
        };
        let vocab_size = match obj.get("vocab_size") {
            Some(_) => Some(int("vocab_size")?),
            None => None,
        };
        Ok(HfConfig {
            params: LayoutParams {
                layer_ids,
                max_ngram_size: max_ngram_size as usize,
                n_heads: n_heads as usize,
                head_dim: head_dim as usize,
                engram_vocab_size,
                seed,
                pad_token,
            },
            num_embeddings,
            compressed_vocab_size: int("engram_compressed_vocab_size")?,
            vocab_size,
        })
    }

    /// The config as `config.json` fields (merged into whatever else a writer adds).
    pub fn to_json(&self) -> Json {
        let p = &self.params;
        let mut m = serde_json::Map::new();
        m.insert("engram_layer_ids".into(), p.layer_ids.clone().into());
        m.insert(
            "engram_num_embeddings".into(),
            self.num_embeddings.clone().into(),
        );
        m.insert("engram_max_ngram_size".into(), p.max_ngram_size.into());
        m.insert("engram_n_heads".into(), p.n_heads.into());
        m.insert("engram_head_dim".into(), p.head_dim.into());
        m.insert("engram_vocab_size".into(), p.engram_vocab_size.into());
        m.insert("engram_pad_id".into(), p.pad_token.into());
        m.insert(
            "engram_compressed_vocab_size".into(),
            self.compressed_vocab_size.into(),
        );
        m.insert("engram_seed".into(), p.seed.into());
        if let Some(v) = self.vocab_size {
            m.insert("vocab_size".into(), v.into());
        }
        Json::Object(m)
    }
}

/// Reads a whole small file, refusing one larger than `max` bytes.
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    if len > max {
        return Err(Error::format(
            path,
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            format!("{len} bytes is larger than the {max}-byte limit"),
        ));
    }
    let mut buf = Vec::with_capacity(len as usize);
    file.take(max)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, e))?;
    Ok(buf)
}

/// Opens the checkpoint directory `dir`.
pub fn open(dir: &Path) -> Result<Model> {
    let config_path = dir.join(CONFIG_FILE);
    let bytes = read_bounded(&config_path, MAX_JSON_FILE)?;
    if let Ok(json) = serde_json::from_slice::<Json>(&bytes) {
        if super::qwen::config::is_qwen(&json) {
            return super::qwen::dir::open(dir, &json);
        }
    }
    let config = HfConfig::parse(&config_path, &bytes)?;
    let tok_path = dir.join(TOKENIZER_FILE);
    let tok = read_bounded(&tok_path, MAX_TOKENIZER_FILE)?;
    let token_map = super::derive::token_map_from_tokenizer_json(&tok_path, &tok)?;
    if let Some(vocab) = config.vocab_size {
        super::checks::token_map_len(&config_path, "vocab_size", token_map.len(), vocab)?;
    }
    let layout = super::derive::layout(&config_path, &config.params, &token_map)?;
    check_config_against_layout(&config_path, &config, &layout)?;
    let shards = Shards::discover(dir)?;
    let mut tables = Vec::with_capacity(layout.tables.len());
    for t in &layout.tables {
        tables.push(shards.locate(t.layer_id, t.rows)?);
    }
    Ok(Model {
        format: ModelFormat::HuggingFace,
        dialect: "hf".into(),
        layout,
        tables,
    })
}

fn check_config_against_layout(path: &Path, config: &HfConfig, layout: &Layout) -> Result<()> {
    let rows: Vec<u64> = layout.tables.iter().map(|t| t.rows).collect();
    if rows != config.num_embeddings {
        return Err(Error::format(
            path,
            "engram_num_embeddings",
            format!(
                "{:?} disagrees with the derived layout {rows:?}",
                config.num_embeddings
            ),
        ));
    }
    if config.compressed_vocab_size != u64::from(layout.compressed_vocab_size) {
        return Err(Error::format(
            path,
            "engram_compressed_vocab_size",
            format!(
                "{} disagrees with the tokenizer's token map ({} compressed ids)",
                config.compressed_vocab_size, layout.compressed_vocab_size
            ),
        ));
    }
    Ok(())
}

/// A parsed safetensors header: where the data starts and the tensor infos.
#[derive(Debug)]
pub struct SafetensorsHeader {
    /// Absolute offset of the data section (8 + header length).
    pub data_start: u64,
    /// The tensor infos.
    pub metadata: Metadata,
    /// File size.
    pub file_size: u64,
}

/// Reads only the header of the safetensors file at `path`.
pub fn read_safetensors_header(path: &Path) -> Result<SafetensorsHeader> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let file_size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    read_safetensors_header_from(&mut file, file_size, path)
}

/// Reads a safetensors header from the start of `reader`, a file of `file_size` bytes.
pub fn read_safetensors_header_from<R: Read>(
    reader: &mut R,
    file_size: u64,
    path: &Path,
) -> Result<SafetensorsHeader> {
    let mut len = [0u8; 8];
    let truncated = |_| {
        Error::format(
            path,
            "header_length",
            format!("file of {file_size} bytes is too short"),
        )
    };
    if file_size < 8 {
        return Err(truncated(()));
    }
    reader
        .read_exact(&mut len)
        .map_err(|e| Error::io(path, e))?;
    let n = u64::from_le_bytes(len);
    if n > MAX_SAFETENSORS_HEADER || n > file_size - 8 {
        return Err(Error::format(
            path,
            "header_length",
            format!(
                "header length {n} is absurd (file has {} bytes after the length; limit {MAX_SAFETENSORS_HEADER})",
                file_size - 8
            ),
        ));
    }
    let mut json = vec![0u8; n as usize];
    reader
        .read_exact(&mut json)
        .map_err(|e| Error::format(path, "header", format!("cannot read {n} header bytes: {e}")))?;
    let metadata: Metadata = serde_json::from_slice(&json)
        .map_err(|e| Error::format(path, "header", format!("invalid safetensors header: {e}")))?;
    let data_start = 8 + n;
    let data_len = metadata.data_len() as u64;
    if data_start
        .checked_add(data_len)
        .is_none_or(|end| end > file_size)
    {
        return Err(Error::format(
            path,
            "data_offsets",
            format!(
                "tensor data ends at {}, past the end of the file ({file_size} bytes)",
                data_start as u128 + data_len as u128
            ),
        ));
    }
    Ok(SafetensorsHeader {
        data_start,
        metadata,
        file_size,
    })
}

/// The checkpoint's shards and which tensor lives in which.
struct Shards {
    dir: PathBuf,
    /// Tensor name -> shard file name (from the index), if there is an index.
    index: Option<BTreeMap<String, String>>,
    /// Shard file name -> its parsed header (read lazily).
    headers: std::cell::RefCell<BTreeMap<String, std::rc::Rc<SafetensorsHeader>>>,
    /// Shard file names, when there is no index.
    files: Vec<String>,
}

impl Shards {
    fn discover(dir: &Path) -> Result<Shards> {
        let index_path = dir.join(INDEX_FILE);
        let mut shards = Shards {
            dir: dir.to_path_buf(),
            index: None,
            headers: Default::default(),
            files: Vec::new(),
        };
        if index_path.exists() {
            shards.index = Some(parse_index(&index_path)?);
            return Ok(shards);
        }
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        for e in entries {
            let e = e.map_err(|e| Error::io(dir, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".safetensors") && !name.starts_with('.') {
                shards.files.push(name);
            }
        }
        shards.files.sort();
        if shards.files.is_empty() {
            return Err(Error::format(
                dir,
                INDEX_FILE,
                "no index and no *.safetensors shards",
            ));
        }
        Ok(shards)
    }

    fn header(&self, file: &str) -> Result<std::rc::Rc<SafetensorsHeader>> {
        if let Some(h) = self.headers.borrow().get(file) {
            return Ok(h.clone());
        }
        let h = std::rc::Rc::new(read_safetensors_header(&self.dir.join(file))?);
        self.headers
            .borrow_mut()
            .insert(file.to_string(), h.clone());
        Ok(h)
    }

    /// The shard holding `tensor`, its header and the tensor's absolute offset,
    /// dtype and shape.
    fn find(&self, tensor: &str) -> Result<(PathBuf, u64, Dtype, Vec<usize>)> {
        let candidates: Vec<String> = match &self.index {
            Some(index) => match index.get(tensor) {
                Some(f) => vec![f.clone()],
                None => {
                    return Err(Error::format(
                        self.dir.join(INDEX_FILE),
                        tensor,
                        "missing tensor (not in weight_map)",
                    ))
                }
            },
            None => self.files.clone(),
        };
        for file in &candidates {
            let header = self.header(file)?;
            if let Some(info) = header.metadata.info(tensor) {
                let offset = header.data_start + info.data_offsets.0 as u64;
                return Ok((self.dir.join(file), offset, info.dtype, info.shape.clone()));
            }
        }
        let where_ = match &candidates[..] {
            [one] => self.dir.join(one),
            _ => self.dir.clone(),
        };
        Err(Error::format(where_, tensor, "missing tensor"))
    }

    fn locate(&self, layer_id: u32, rows: u64) -> Result<TableLocation> {
        let scale_bytes = (ROW_DIM / GROUP) as u64;
        let (file, offset) =
            self.tensor_checked(&weight_name(layer_id), Dtype::F8_E4M3, rows, ROW_DIM as u64)?;
        let (scale_file, scale_offset) =
            self.tensor_checked(&scale_name(layer_id), Dtype::F8_E8M0, rows, scale_bytes)?;
        let values = RowPart {
            file,
            offset,
            bytes_per_row: ROW_DIM as u32,
        };
        let scales = RowPart {
            file: scale_file,
            offset: scale_offset,
            bytes_per_row: scale_bytes as u32,
        };
        Ok(TableLocation::unsharded(
            layer_id,
            rows,
            Encoding::E4m3E8m0Row264,
            vec![values, scales],
        ))
    }

    fn tensor_checked(
        &self,
        name: &str,
        dtype: Dtype,
        rows: u64,
        width: u64,
    ) -> Result<(PathBuf, u64)> {
        let (file, offset, found, shape) = self.find(name)?;
        if found != dtype {
            return Err(Error::format(
                &file,
                name,
                format!("dtype {found:?}, expected {dtype:?}"),
            ));
        }
        let expected = [rows as usize, width as usize];
        if shape != expected {
            return Err(Error::format(
                &file,
                name,
                format!("shape {shape:?}, expected {expected:?}"),
            ));
        }
        Ok((file, offset))
    }
}

/// The safetensors files of the checkpoint directory `dir`: those the
/// shard index names (each once, sorted), or without an index every
/// `*.safetensors` file in it.
pub(crate) fn safetensors_files(dir: &Path) -> Result<Vec<String>> {
    let index_path = dir.join(INDEX_FILE);
    let mut files: Vec<String> = if index_path.exists() {
        parse_index(&index_path)?.into_values().collect()
    } else {
        let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut names = Vec::new();
        for e in entries {
            let name = e
                .map_err(|e| Error::io(dir, e))?
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.ends_with(".safetensors") && !name.starts_with('.') {
                names.push(name);
            }
        }
        names
    };
    files.sort();
    files.dedup();
    if files.is_empty() {
        return Err(Error::format(
            dir,
            INDEX_FILE,
            "no index and no *.safetensors shards",
        ));
    }
    Ok(files)
}

/// Reads `weight_map` from a `model.safetensors.index.json`.
fn parse_index(path: &Path) -> Result<BTreeMap<String, String>> {
    let json: Json = serde_json::from_slice(&read_bounded(path, MAX_JSON_FILE)?)
        .map_err(|e| Error::format(path, "index", format!("invalid JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(Json::as_object)
        .ok_or_else(|| Error::format(path, "weight_map", "missing or not an object"))?;
    let mut out = BTreeMap::new();
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| {
            Error::format(path, format!("weight_map.{tensor}"), "is not a string")
        })?;
        // Shards live in the checkpoint directory itself: refuse paths that
        // would read elsewhere.
        if file.is_empty()
            || file.contains('/')
            || file.contains('\\')
            || file == ".."
            || file == "."
        {
            return Err(Error::format(
                path,
                format!("weight_map.{tensor}"),
                format!("{file:?} is not a file name in the checkpoint directory"),
            ));
        }
        out.insert(tensor.clone(), file.to_string());
    }
    Ok(out)
}
