//! Qwen4-Exp model files written by this crate's synthetic writer: every
//! format and encoding opens into the preset's layout and delivers the rows
//! written, through the synchronous reader and the prefetch engine; bad
//! files are refused with an error naming the file and the field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use engram::io::{open_source, IoConfig};
use engram::layout::{preset, QwenParams};
use engram::model::qwen::synth::{self, QwenFormat};
use engram::model::{Model, NoProgress};
use engram::prefetch::{Engine, PrefetchConfig, RowFormat};
use engram::testing::within;
use engram::Error;

const PRESET: &str = "qwen3.8-flash-next";
/// 20,000,000 / 8192: heads of about 2,441 rows, a table of about 39K rows.
const SCALE: u64 = 8192;
const SEED: u64 = 11;

fn params() -> QwenParams {
    synth::preset_params(PRESET, SCALE).unwrap()
}

fn write(dir: &Path, format: QwenFormat, encoding: &str) -> PathBuf {
    let layout = preset(PRESET, SCALE).unwrap();
    let params = params();
    let encoding = synth::encoding(encoding, params.row_dim).unwrap();
    let out = dir.join(format!("{format:?}-{}", encoding.name()));
    synth::synth(&out, format, &layout, &params, encoding, SEED, &NoProgress).unwrap()
}

/// Every stored row (a sample across shard boundaries) is the row written.
fn assert_rows_are_synthetic(model: &Model) {
    let loc = &model.tables[0];
    let width = loc.full_row_bytes();
    let rows = loc.rows;
    let mut ids: Vec<u64> = engram::model::sample_rows(rows, 300);
    for shard in &loc.shards {
        ids.extend([shard.first_row, shard.first_row + shard.rows - 1]);
    }
    let mut raw = Vec::new();
    model.read_raw_rows(0, &ids, &mut raw).unwrap();
    for (i, &row) in ids.iter().enumerate() {
        let mut want = vec![0u8; width];
        synth::fill_rows(SEED, 0, loc.encoding, row, &mut want).unwrap();
        assert!(
            raw[i * width..(i + 1) * width] == want[..],
            "{} row {row}",
            loc.encoding
        );
    }
    // A range read across every shard gives the same bytes as row reads.
    let mut range = Vec::new();
    model
        .read_row_range(0, 0, rows as usize, &mut range)
        .unwrap();
    let mut one = Vec::new();
    model.read_raw_rows(0, &[rows - 1], &mut one).unwrap();
    assert!(range[(rows as usize - 1) * width..] == one[..]);
    let mut values = Vec::new();
    model.read_rows_f32(0, &ids[..4], &mut values).unwrap();
    assert_eq!(values.len(), 4 * loc.encoding.values());
    assert!(values.iter().all(|v| v.is_finite() && v.abs() <= 2.0));
}

#[test]
fn every_format_and_encoding_opens_into_the_preset_layout() {
    let dir = tempfile::tempdir().unwrap();
    let layout = preset(PRESET, SCALE).unwrap();
    for (format, encodings) in [
        (QwenFormat::Hf, &["bf16", "f16", "f32", "fp8_e4m3"][..]),
        (
            QwenFormat::Gguf,
            &["bf16", "f16", "f32", "q8_0", "q5_1", "q4_0", "q4_1"][..],
        ),
        (QwenFormat::Mlx, &["mlx4"][..]),
    ] {
        for &name in encodings {
            let path = write(dir.path(), format, name);
            let model = Model::open(&path).unwrap_or_else(|e| panic!("{format:?} {name}: {e}"));
            assert_eq!(model.layout.layer_ids(), [1]);
            assert_eq!(model.layout.tables[0].primes, layout.tables[0].primes);
            assert_eq!(
                model.layout.tables[0].multipliers,
                layout.tables[0].multipliers
            );
            assert_eq!(model.layout.head_dim, 160);
            assert_eq!(model.layout.columns(), 16);
            let loc = &model.tables[0];
            assert!(
                loc.encoding
                    .name()
                    .starts_with(name.split('_').next().unwrap()),
                "{}",
                loc.encoding
            );
            assert_eq!(
                loc.rows, layout.tables[0].stored_rows,
                "{format:?} {name}: padded rows"
            );
            match format {
                QwenFormat::Gguf => assert_eq!(loc.shards.len(), 1),
                QwenFormat::Hf => assert_eq!(loc.shards.len() as u64, synth::SYNTH_PARTS),
                QwenFormat::Mlx => {
                    assert_eq!(loc.shards.len() as u64, synth::SYNTH_PARTS);
                    assert_eq!(loc.shards[0].parts.len(), 3);
                    assert_eq!(loc.full_row_bytes(), 100);
                }
            }
            assert_rows_are_synthetic(&model);
        }
    }
}

/// Prefill waits and decode steps deliver exactly the model's own rows.
fn check_engine(model: &Model, format: RowFormat) {
    let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
    let config = PrefetchConfig::default()
        .with_chunk_tokens(64)
        .with_first_chunk_tokens(16)
        .with_format(format);
    let engine = Engine::for_model(model, opened.source, config).unwrap();
    let eos = params().eos_token_id;
    let tokens: Vec<u32> = (0..200u32)
        .map(|i| {
            if i % 37 == 5 {
                eos
            } else {
                (i * 7919 + i / 3) % 248_320
            }
        })
        .collect();
    let mut seq = engine.sequence();
    let ids = seq.row_ids(&tokens, None).unwrap();
    assert_eq!(ids.len(), 200 * 16);
    let expect = |rows: &[u32]| -> Vec<u8> {
        let rows: Vec<u64> = rows.iter().map(|&r| u64::from(r)).collect();
        if format == RowFormat::F32 {
            let mut v = Vec::new();
            model.read_rows_f32(0, &rows, &mut v).unwrap();
            v.iter().flat_map(|x| x.to_le_bytes()).collect()
        } else {
            let mut raw = Vec::new();
            model.read_raw_rows(0, &rows, &mut raw).unwrap();
            raw
        }
    };
    let mut prefill = seq.prefill(&tokens, None).unwrap();
    let mut upto = 0;
    while upto < 200 {
        let from = upto;
        upto = (upto + 48).min(200);
        let view = prefill.wait(0, upto as u32).unwrap();
        let first = view.first_token() as usize;
        assert!(first <= from);
        let got = view.to_vec();
        let want = expect(&ids[first * 16..upto * 16]);
        assert!(got == want, "prefill rows {first}..{upto}");
    }
    drop(prefill);
    for token in [eos, 17, 17, 248_319, 0] {
        let step = seq.row_ids(&[token], None).unwrap();
        seq.step_begin(token).unwrap();
        let view = seq.step_wait(0).unwrap();
        assert!(view.to_vec() == expect(&step), "decode token {token}");
    }
}

#[test]
fn the_engine_delivers_each_formats_rows() {
    let dir = tempfile::tempdir().unwrap();
    within(Duration::from_secs(120), move || {
        for (format, name) in [
            (QwenFormat::Hf, "bf16"),
            (QwenFormat::Mlx, "mlx4"),
            (QwenFormat::Gguf, "q4_1"),
        ] {
            let model = Model::open(write(dir.path(), format, name)).unwrap();
            check_engine(&model, RowFormat::Raw);
            check_engine(&model, RowFormat::F32);
        }
    });
}

/// Replaces the first occurrence of `from` after `after` in `path` with
/// `to` (same length).
fn patch(path: &Path, after: &[u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(path).unwrap();
    let start = find(&bytes, after, 0).expect("anchor");
    let at = find(&bytes, from, start).expect("pattern");
    bytes[at..at + from.len()].copy_from_slice(to);
    std::fs::write(path, bytes).unwrap();
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

fn format_error(path: &Path) -> (PathBuf, String, String) {
    match Model::open(path) {
        Err(Error::Format {
            file,
            field,
            reason,
        }) => (file, field, reason),
        Err(other) => panic!("expected a format error, got {other}"),
        Ok(_) => panic!("a bad file opened"),
    }
}

fn shard_file(dir: &Path) -> PathBuf {
    dir.join("model-00001-of-00002.safetensors")
}

#[test]
fn bad_checkpoints_are_refused_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    // A missing shard: shard 2's name no longer parses as shard 2.
    let m = write(dir.path(), QwenFormat::Hf, "bf16");
    let (file, field, _) = {
        let f = m.join("model-00002-of-00002.safetensors");
        let f = if find(&std::fs::read(&f).unwrap(), b"shard_2.", 0).is_some() {
            f
        } else {
            shard_file(&m)
        };
        patch(&f, b"{", b"shard_2.", b"shard_9.");
        format_error(&m)
    };
    assert!(field.contains("shard_2"), "{field} in {}", file.display());

    // Tampered constants: one bit of the first multiplier.
    let m = write(&dir.path().join("c"), QwenFormat::Hf, "bf16");
    let first = preset(PRESET, SCALE).unwrap().tables[0].multipliers[0];
    let f = shard_file(&m);
    let header_end =
        8 + u64::from_le_bytes(std::fs::read(&f).unwrap()[..8].try_into().unwrap()) as usize;
    let bytes = first.to_le_bytes();
    let mut flipped = bytes;
    flipped[0] ^= 2;
    let mut data = std::fs::read(&f).unwrap();
    let at = find(&data, &bytes, header_end).expect("multiplier bytes");
    data[at..at + 8].copy_from_slice(&flipped);
    std::fs::write(&f, data).unwrap();
    let (file, field, reason) = format_error(&m);
    assert_eq!(file, f);
    assert!(field.ends_with("layer_multipliers"), "{field}: {reason}");

    // A wrong dtype: f16 shards relabelled I16.
    let m = write(&dir.path().join("d"), QwenFormat::Hf, "f16");
    patch(&shard_file(&m), b"shard_0", b"\"F16\"", b"\"I16\"");
    let (_, field, reason) = format_error(&m);
    assert!(
        field.contains("shard_0.weight") && reason.contains("I16"),
        "{field}: {reason}"
    );

    // A wrong shape: the config says 161-value rows.
    let m = write(&dir.path().join("s"), QwenFormat::Hf, "bf16");
    let config = m.join("config.json");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"ple_embed_dim\": 2560", "\"ple_embed_dim\": 2576");
    std::fs::write(&config, text).unwrap();
    let (_, field, reason) = format_error(&m);
    assert!(
        field.contains("ngram_embedding.shard_0.weight") && reason.contains("161"),
        "{field}: {reason}"
    );

    // split_ngram_parts that disagrees with the shards found.
    let m = write(&dir.path().join("p"), QwenFormat::Hf, "bf16");
    let config = m.join("config.json");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"split_ngram_parts\": 5", "\"split_ngram_parts\": 512");
    std::fs::write(&config, text).unwrap();
    let (_, field, _) = format_error(&m);
    assert_eq!(field, "text_config.split_ngram_parts");

    // FP8 without its global scale.
    let m = write(&dir.path().join("f"), QwenFormat::Hf, "fp8_e4m3");
    patch(&shard_file(&m), b"{", b"weight_scale", b"weight_scalf");
    let (_, field, reason) = format_error(&m);
    assert!(
        field.ends_with("weight_scale") && reason.contains("missing"),
        "{field}: {reason}"
    );

    // MLX without a shard's biases.
    let m = write(&dir.path().join("x"), QwenFormat::Mlx, "mlx4");
    patch(
        &m.join("model.safetensors"),
        b"{",
        b"shards.1.biases",
        b"shards.1.biasez",
    );
    let (_, field, reason) = format_error(&m);
    assert!(
        field.ends_with("shards.1.biases") && reason.contains("missing"),
        "{field}: {reason}"
    );
}

#[test]
fn bad_gguf_files_are_refused_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), QwenFormat::Gguf, "q4_0");
    let pristine = std::fs::read(&path).unwrap();

    // A tampered head prime.
    let prime = preset(PRESET, SCALE).unwrap().tables[0].primes[3];
    let mut bytes = pristine.clone();
    let key = find(&bytes, b"qwen4exp.ple.head_vocab_sizes", 0).unwrap();
    let at = find(&bytes, &u64::from(prime).to_le_bytes(), key).unwrap();
    bytes[at] ^= 4;
    std::fs::write(&path, &bytes).unwrap();
    let (_, field, _) = format_error(&path);
    assert_eq!(field, "qwen4exp.ple.head_vocab_sizes");

    // Truncated: the rows run past the end.
    std::fs::write(&path, &pristine[..pristine.len() / 2]).unwrap();
    let (file, field, _) = format_error(&path);
    assert_eq!(file, path);
    assert!(field.contains("per_layer_token_embd.weight"), "{field}");

    // An unknown architecture.
    std::fs::write(&path, &pristine).unwrap();
    patch(&path, b"general.architecture", b"qwen4exp", b"qwen9exp");
    let (_, field, reason) = format_error(&path);
    assert_eq!(field, "general.architecture");
    assert!(reason.contains("qwen9exp"), "{reason}");

    // Every truncation of the header is an error, never a panic.
    for cut in (0..2048).step_by(61) {
        std::fs::write(&path, &pristine[..cut]).unwrap();
        assert!(Model::open(&path).is_err());
    }
}
