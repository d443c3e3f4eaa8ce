//! The malformed-GGUF corpus: each bad file is a good synthetic model with
//! one named mutation, and must be refused with `Error::Format` naming the
//! file and the field at fault (never a panic, never a huge allocation).

mod model_support;

use std::path::PathBuf;

use engram::codec::Encoding;
use engram::model::gguf::{self, Array, GgufWriter, TensorDecl, Value};
use engram::model::{synth, Model, NoProgress};
use model_support::assert_format;

struct Good {
    _dir: tempfile::TempDir,
    path: PathBuf,
    bytes: Vec<u8>,
}

fn good() -> Good {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.gguf");
    let layout = model_support::tiny_layout();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 3, &NoProgress).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    Good {
        _dir: dir,
        path,
        bytes,
    }
}

/// Writes `bytes` beside the good file as `name` and opens it.
fn open_bytes(g: &Good, name: &str, bytes: &[u8]) -> (PathBuf, engram::Result<Model>) {
    let path = g.path.with_file_name(name);
    std::fs::write(&path, bytes).unwrap();
    let r = Model::open(&path);
    (path, r)
}

/// Byte-level mutation: apply `f` to a copy of the good bytes.
fn mutate_bytes(g: &Good, name: &str, field: &str, f: impl FnOnce(&mut Vec<u8>)) {
    let mut b = g.bytes.clone();
    f(&mut b);
    let (path, r) = open_bytes(g, name, &b);
    assert_format(r, &path, field);
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not in file", String::from_utf8_lossy(needle)))
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Offset of the value of metadata key `key` (just past its type tag).
fn value_at(b: &[u8], key: &str) -> usize {
    let mut k = (key.len() as u64).to_le_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    find(b, &k) + k.len() + 4
}

/// Offset of tensor `name`'s info (just past its name).
fn tensor_info_at(b: &[u8], name: &str) -> usize {
    let mut k = (name.len() as u64).to_le_bytes().to_vec();
    k.extend_from_slice(name.as_bytes());
    find(b, &k) + k.len()
}

#[test]
fn byte_level_mutations_are_refused() {
    let g = good();
    let t5 = "blk.5.engram_embd.weight";
    mutate_bytes(&g, "empty.gguf", "header.magic", |b| b.clear());
    mutate_bytes(&g, "magic.gguf", "header.magic", |b| {
        b[0..4].copy_from_slice(b"GGUX")
    });
    mutate_bytes(&g, "version.gguf", "header.version", |b| b[4] = 2);
    mutate_bytes(&g, "tensor_count.gguf", "header.tensor_count", |b| {
        put_u64(b, 8, u64::MAX)
    });
    mutate_bytes(&g, "kv_count.gguf", "header.metadata_kv_count", |b| {
        put_u64(b, 16, 1 << 60)
    });
    mutate_bytes(&g, "key_length.gguf", "metadata[0].key", |b| {
        put_u64(b, 24, u64::MAX)
    });
    mutate_bytes(&g, "truncated_header.gguf", "deepseek41.engram", |b| {
        let at = value_at(b, "deepseek41.engram.token_map");
        b.truncate(at + 20);
    });
    mutate_bytes(&g, "truncated_data.gguf", t5, |b| {
        let n = b.len();
        b.truncate(n - 1000);
    });
    mutate_bytes(&g, "array_count.gguf", "deepseek41.engram.token_map", |b| {
        let at = value_at(b, "deepseek41.engram.token_map");
        put_u64(b, at + 4, 1 << 62);
    });
    mutate_bytes(
        &g,
        "array_count_overflow.gguf",
        "deepseek41.engram.primes",
        |b| {
            let at = value_at(b, "deepseek41.engram.primes");
            put_u64(b, at + 4, u64::MAX / 2 + 2);
        },
    );
    mutate_bytes(&g, "value_type.gguf", "deepseek41.engram.encoding", |b| {
        let at = value_at(b, "deepseek41.engram.encoding");
        b[at - 4] = 99;
    });
    mutate_bytes(
        &g,
        "string_length.gguf",
        "deepseek41.engram.encoding",
        |b| {
            let at = value_at(b, "deepseek41.engram.encoding");
            put_u64(b, at, 1 << 40);
        },
    );
    mutate_bytes(&g, "rank.gguf", t5, |b| {
        let at = tensor_info_at(b, t5);
        b[at..at + 4].copy_from_slice(&9u32.to_le_bytes());
    });
    mutate_bytes(&g, "tensor_offset_eof.gguf", t5, |b| {
        let at = tensor_info_at(b, t5) + 4 + 16 + 4;
        put_u64(b, at, 1 << 40);
    });
    mutate_bytes(&g, "tensor_offset_overflow.gguf", t5, |b| {
        let at = tensor_info_at(b, t5) + 4 + 16 + 4;
        put_u64(b, at, u64::MAX - 31);
    });
    mutate_bytes(&g, "tensor_offset_unaligned.gguf", t5, |b| {
        let at = tensor_info_at(b, t5) + 4 + 16 + 4;
        let v = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        put_u64(b, at, v + 1);
    });
    mutate_bytes(&g, "tensor_rows_overflow.gguf", t5, |b| {
        let at = tensor_info_at(b, t5) + 4 + 8;
        put_u64(b, at, u64::MAX / 3);
    });
    mutate_bytes(&g, "tensor_type.gguf", t5, |b| {
        let at = tensor_info_at(b, t5) + 4 + 16;
        b[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
    });
    mutate_bytes(&g, "tensor_width.gguf", t5, |b| {
        let at = tensor_info_at(b, t5) + 4;
        put_u64(b, at, 263);
    });
    mutate_bytes(&g, "alignment.gguf", "general.alignment", |b| {
        let at = value_at(b, "general.alignment");
        b[at..at + 4].copy_from_slice(&24u32.to_le_bytes());
    });
    mutate_bytes(&g, "bool.gguf", "flag", |b| {
        // Turn general.name's string into an invalid bool (type 7, byte 2).
        let at = value_at(b, "general.name");
        let key = b"general.name";
        let k = at - 4 - key.len();
        b[k..k + 4].copy_from_slice(b"flag");
        b[k + 4..k + key.len()].fill(b'x');
        // Key length stays 12: rename to "flagxxxxxxxx" is fine, we assert on "flag".
        b[at - 4..at].copy_from_slice(&7u32.to_le_bytes());
        b[at] = 2;
    });
}

/// Rewrites the good file through `f`, which edits the metadata and tensor
/// declarations; table data are zeros.
fn mutate_header(
    g: &Good,
    name: &str,
    field: &str,
    f: impl FnOnce(&mut Vec<(String, Value)>, &mut Vec<TensorDecl>),
) {
    let h = gguf::read_header(&g.path).unwrap();
    let mut meta = h.metadata.clone();
    let mut decls: Vec<TensorDecl> = h
        .tensors
        .iter()
        .map(|t| TensorDecl {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ggml_type: t.ggml_type,
            bytes: t.dims.iter().product(),
        })
        .collect();
    f(&mut meta, &mut decls);
    let path = g.path.with_file_name(name);
    let total: u64 = decls.iter().map(|d| d.bytes).sum();
    let mut w = GgufWriter::create(&path, &meta, decls).unwrap();
    w.write(&vec![0u8; total as usize]).unwrap();
    w.finish().unwrap();
    assert_format(Model::open(&path), &path, field);
}

fn set(meta: &mut [(String, Value)], key: &str, v: Value) {
    meta.iter_mut().find(|(k, _)| k == key).unwrap().1 = v;
}

fn remove(meta: &mut Vec<(String, Value)>, key: &str) {
    meta.retain(|(k, _)| k != key);
}

#[test]
fn semantic_mutations_are_refused() {
    let g = good();
    let k = |s: &str| format!("deepseek41.engram.{s}");
    for key in [
        "encoding",
        "layer_ids",
        "primes",
        "multipliers",
        "token_map",
        "pad_id",
    ] {
        mutate_header(&g, &format!("missing_{key}.gguf"), &k(key), |m, _| {
            remove(m, &k(key))
        });
    }
    mutate_header(&g, "no_engram.gguf", "deepseek41.engram", |m, _| {
        m.retain(|(k, _)| !k.contains(".engram."))
    });
    mutate_header(
        &g,
        "missing_tensor.gguf",
        "blk.5.engram_embd.weight",
        |_, t| {
            t.pop();
        },
    );
    mutate_header(&g, "token_map_short.gguf", &k("token_map"), |m, _| {
        set(
            m,
            &k("token_map"),
            Value::Array(Array::U32(vec![0, 1, 2, 3, 4, 5])),
        )
    });
    mutate_header(&g, "token_map_range.gguf", &k("token_map"), |m, _| {
        let mut map = model_support::tiny_layout().token_map.to_vec();
        map[3] = 6;
        set(m, &k("token_map"), Value::Array(Array::U32(map)))
    });
    mutate_header(&g, "token_map_type.gguf", &k("token_map"), |m, _| {
        set(m, &k("token_map"), Value::Array(Array::F32(vec![0.0; 12])))
    });
    mutate_header(&g, "pad_id.gguf", &k("pad_id"), |m, _| {
        set(m, &k("pad_id"), Value::U32(12))
    });
    mutate_header(&g, "encoding.gguf", &k("encoding"), |m, _| {
        set(
            m,
            &k("encoding"),
            Value::String("conversion_underway".into()),
        )
    });
    mutate_header(
        &g,
        "encoding_width.gguf",
        "blk.1.engram_embd.weight",
        |m, _| {
            set(
                m,
                &k("encoding"),
                Value::String("lloyd4_e5m3_32_r136".into()),
            )
        },
    );
    mutate_header(&g, "rows.gguf", &k("rows"), |m, _| {
        set(m, &k("rows"), Value::Array(Array::U32(vec![4062, 4153])))
    });
    mutate_header(&g, "primes_len.gguf", &k("primes"), |m, _| {
        set(m, &k("primes"), Value::Array(Array::U32(vec![1009; 7])))
    });
    mutate_header(&g, "multipliers_len.gguf", &k("multipliers"), |m, _| {
        set(m, &k("multipliers"), Value::Array(Array::U64(vec![3; 5])))
    });
    mutate_header(&g, "head_count.gguf", &k("head_count"), |m, _| {
        set(m, &k("head_count"), Value::U32(0))
    });
    mutate_header(&g, "layer_ids_empty.gguf", &k("layer_ids"), |m, _| {
        set(m, &k("layer_ids"), Value::Array(Array::U32(vec![])))
    });
    mutate_header(&g, "nesting.gguf", "deep", |m, _| {
        let mut a = Array::U8(vec![1]);
        for _ in 0..6 {
            a = Array::Array(vec![a]);
        }
        m.push(("deep".into(), Value::Array(a)));
    });
}

#[test]
fn duplicate_keys_and_tensors_are_refused() {
    let g = good();
    mutate_header(&g, "dup_key.gguf", "general.name", |m, _| {
        m.push(("general.name".into(), Value::String("again".into())))
    });
    mutate_header(&g, "dup_tensor.gguf", "blk.1.engram_embd.weight", |_, t| {
        let first = t[0].clone();
        t.push(first);
    });
}

#[test]
fn the_good_file_opens() {
    let g = good();
    let m = Model::open(&g.path).unwrap();
    assert_eq!(m.layout, model_support::tiny_layout());
}
