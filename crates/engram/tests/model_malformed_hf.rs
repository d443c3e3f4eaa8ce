//! The malformed-checkpoint corpus: a good synthetic checkpoint, copied and
//! given one named mutation each, must be refused with an error naming the
//! file and the field (never a panic, never a huge allocation).

mod model_support;

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::model::hf;
use engram::model::synth::{self, SynthFormat};
use engram::model::{Model, NoProgress};
use engram::Error;
use model_support::assert_format;
use serde_json::Value;

const SCALE: u64 = 262_144;

struct Good {
    root: tempfile::TempDir,
    dir: PathBuf,
}

fn good() -> Good {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("good");
    let preset = "deepseek-v4.1-flash";
    let encoding = Encoding::E4m3E8m0Row264;
    synth::synth_preset(
        &dir,
        SynthFormat::Hf,
        preset,
        SCALE,
        encoding,
        1,
        &NoProgress,
    )
    .unwrap();
    Good { root, dir }
}

/// A copy of the good checkpoint named `name`.
fn copy(g: &Good, name: &str) -> PathBuf {
    let dst = g.root.path().join(name);
    std::fs::create_dir(&dst).unwrap();
    for e in std::fs::read_dir(&g.dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// Edits config.json as JSON.
fn config_case(
    g: &Good,
    name: &str,
    field: &str,
    f: impl FnOnce(&mut serde_json::Map<String, Value>),
) {
    let dir = copy(g, name);
    let path = dir.join(hf::CONFIG_FILE);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    f(v.as_object_mut().unwrap());
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    assert_format(Model::open(&dir), &path, field);
}

#[test]
fn config_mutations_are_refused() {
    let g = good();
    for key in [
        "engram_layer_ids",
        "engram_num_embeddings",
        "engram_max_ngram_size",
        "engram_n_heads",
        "engram_head_dim",
        "engram_vocab_size",
        "engram_pad_id",
        "engram_compressed_vocab_size",
    ] {
        config_case(&g, &format!("missing_{key}"), key, |m| {
            m.remove(key);
        });
    }
    config_case(&g, "layer_ids_type", "engram_layer_ids", |m| {
        m.insert("engram_layer_ids".into(), "1,14".into());
    });
    config_case(&g, "layer_ids_negative", "engram_layer_ids", |m| {
        m.insert("engram_layer_ids".into(), serde_json::json!([1, -14]));
    });
    config_case(&g, "num_embeddings_count", "engram_num_embeddings", |m| {
        m.insert("engram_num_embeddings".into(), serde_json::json!([5000]));
    });
    config_case(&g, "num_embeddings_value", "engram_num_embeddings", |m| {
        let v = m["engram_num_embeddings"].as_array().unwrap()[0]
            .as_u64()
            .unwrap();
        m["engram_num_embeddings"][0] = (v + 1).into();
    });
    config_case(
        &g,
        "compressed_vocab",
        "engram_compressed_vocab_size",
        |m| {
            m.insert("engram_compressed_vocab_size".into(), 99_000.into());
        },
    );
    config_case(&g, "head_dim", "engram_head_dim", |m| {
        m.insert("engram_head_dim".into(), 128.into());
    });
    config_case(&g, "n_heads_huge", "engram_n_heads", |m| {
        m.insert("engram_n_heads".into(), u64::MAX.into());
    });
    config_case(&g, "pad_id_range", "engram_pad_id", |m| {
        m.insert("engram_pad_id".into(), 10_000_000.into());
    });
    // A token map of the wrong length for the declared vocabulary.
    config_case(&g, "vocab_size", "vocab_size", |m| {
        m.insert("vocab_size".into(), 129_279.into());
    });

    let dir = copy(&g, "bad_json");
    let path = dir.join(hf::CONFIG_FILE);
    std::fs::write(&path, b"{\"engram_layer_ids\": [1, 14").unwrap();
    assert_format(Model::open(&dir), &path, "config.json");
    std::fs::write(&path, b"[1, 2]").unwrap();
    assert_format(Model::open(&dir), &path, "config.json");
}

/// Rewrites the safetensors header of `shard` through `f` (data unchanged).
fn edit_header(shard: &Path, f: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let bytes = std::fs::read(shard).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    f(header.as_object_mut().unwrap());
    let mut json = serde_json::to_vec(&header).unwrap();
    while json.len() % 8 != 0 {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(shard, out).unwrap();
}

fn shard_case(g: &Good, name: &str, field: &str, f: impl FnOnce(&Path)) {
    let dir = copy(g, name);
    let shard = dir.join("model-00001-of-00002.safetensors");
    f(&shard);
    assert_format(Model::open(&dir), &shard, field);
}

#[test]
fn shard_mutations_are_refused() {
    let g = good();
    let w = hf::weight_name(1);
    let s = hf::scale_name(1);
    shard_case(&g, "header_length", "header_length", |p| {
        let mut b = std::fs::read(p).unwrap();
        b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(p, b).unwrap();
    });
    shard_case(&g, "header_length_past_eof", "header_length", |p| {
        let mut b = std::fs::read(p).unwrap();
        let len = b.len() as u64;
        b[..8].copy_from_slice(&len.to_le_bytes());
        std::fs::write(p, b).unwrap();
    });
    shard_case(&g, "tiny_file", "header_length", |p| {
        std::fs::write(p, b"abc").unwrap()
    });
    shard_case(&g, "header_json", "header", |p| {
        let mut b = std::fs::read(p).unwrap();
        b[8] = b'[';
        std::fs::write(p, b).unwrap();
    });
    shard_case(&g, "truncated", "data_offsets", |p| {
        let b = std::fs::read(p).unwrap();
        std::fs::write(p, &b[..b.len() - 100]).unwrap();
    });
    shard_case(&g, "weight_dtype", &w, |p| {
        edit_header(p, |h| h[&w]["dtype"] = "F8_E5M2".into())
    });
    shard_case(&g, "scale_dtype", &s, |p| {
        edit_header(p, |h| h[&s]["dtype"] = "U8".into())
    });
    shard_case(&g, "weight_shape", &w, |p| {
        edit_header(p, |h| {
            let rows = h[&w]["shape"][0].as_u64().unwrap();
            h[&w]["shape"] = serde_json::json!([rows * 2, 128]);
        })
    });
    shard_case(&g, "scale_missing", &s, |p| {
        edit_header(p, |h| {
            // Drop the scale tensor; the weight alone still ends where the data does not.
            h.remove(&s);
        })
    });
    shard_case(&g, "offsets_overlap", "header", |p| {
        edit_header(p, |h| h[&s]["data_offsets"][0] = 0.into())
    });
}

#[test]
fn index_and_file_mutations_are_refused() {
    let g = good();
    let s = hf::scale_name(14);

    let dir = copy(&g, "index_missing_tensor");
    let index = dir.join(hf::INDEX_FILE);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    v["weight_map"].as_object_mut().unwrap().remove(&s);
    std::fs::write(&index, serde_json::to_vec(&v).unwrap()).unwrap();
    assert_format(Model::open(&dir), &index, &s);

    let dir = copy(&g, "index_traversal");
    let index = dir.join(hf::INDEX_FILE);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
    v["weight_map"][&s] = "../good/model-00002-of-00002.safetensors".into();
    std::fs::write(&index, serde_json::to_vec(&v).unwrap()).unwrap();
    assert_format(Model::open(&dir), &index, "weight_map");

    let dir = copy(&g, "index_no_map");
    let index = dir.join(hf::INDEX_FILE);
    std::fs::write(&index, b"{\"metadata\": {}}").unwrap();
    assert_format(Model::open(&dir), &index, "weight_map");

    // Without an index the shards are searched; a tensor in none of them is named.
    let dir = copy(&g, "no_index_missing");
    std::fs::remove_file(dir.join(hf::INDEX_FILE)).unwrap();
    std::fs::remove_file(dir.join("model-00002-of-00002.safetensors")).unwrap();
    let only = dir.join("model-00001-of-00002.safetensors");
    assert_format(Model::open(&dir), &only, &hf::weight_name(14));

    // Without an index, the remaining shards still open fine.
    let dir = copy(&g, "no_index");
    std::fs::remove_file(dir.join(hf::INDEX_FILE)).unwrap();
    Model::open(&dir).unwrap();

    let dir = copy(&g, "no_tokenizer");
    std::fs::remove_file(dir.join(hf::TOKENIZER_FILE)).unwrap();
    match Model::open(&dir) {
        Err(Error::Io { path, .. }) => assert_eq!(path, dir.join(hf::TOKENIZER_FILE)),
        other => panic!("expected an I/O error naming tokenizer.json, got {other:?}"),
    }

    let dir = copy(&g, "bad_tokenizer");
    std::fs::write(dir.join(hf::TOKENIZER_FILE), b"{\"model\": 3}").unwrap();
    match Model::open(&dir) {
        Err(Error::Tokenizer { source_name, .. }) => {
            assert!(source_name.contains("tokenizer.json"), "{source_name}")
        }
        other => panic!("expected a tokenizer error, got {other:?}"),
    }
}
