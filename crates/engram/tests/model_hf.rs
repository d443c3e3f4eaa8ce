//! Checkpoint directories, packing and transcoding: synthetic models read
//! back row for row, in both formats and both encodings.

use std::path::PathBuf;

use tempfile::TempDir;

use engram::codec::{encode_row136, Encoding, ROW_DIM};
use engram::layout::{preset, preset_params};
use engram::model::hf::HfConfig;
use engram::model::synth::{self, SynthFormat};
use engram::model::{convert, Model, ModelFormat, NoProgress};

const PRESET: &str = "deepseek-v4.1-flash";
/// 16M / 262144 = 61 per head: about 1.8K rows (0.5 MB) per table.
const SCALE: u64 = 262_144;
const SEED: u64 = 11;

/// A synthetic model of `format` in `encoding`, written to `name` in a
/// fresh temporary directory (nothing else in it; removed on drop), and the
/// model's path (the `.gguf` file, or the checkpoint directory).
fn synth_model(name: &str, format: SynthFormat, encoding: Encoding) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(name);
    let made = synth::synth_preset(&out, format, PRESET, SCALE, encoding, SEED, &NoProgress);
    (dir, made.unwrap().0)
}

/// Every row of every table equals the generator's rows in `encoding`.
fn assert_rows_are_synthetic(model: &Model, encoding: Encoding) {
    for (t, loc) in model.tables.iter().enumerate() {
        let mut got = Vec::new();
        model
            .read_row_range(t, 0, loc.rows as usize, &mut got)
            .unwrap();
        let mut want = vec![0u8; loc.rows as usize * encoding.row_bytes()];
        synth::fill_rows(SEED, t, encoding, 0, &mut want).unwrap();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "table {t}: rows differ from the generator");
    }
}

#[test]
fn checkpoint_reads_back_packs_and_transcodes() {
    let (dir, ckpt) = synth_model("ckpt", SynthFormat::Hf, Encoding::E4m3E8m0Row264);
    let model = Model::open(&ckpt).unwrap();
    assert_eq!(model.format, ModelFormat::HuggingFace);
    assert_eq!(model.dialect, "hf");
    assert_eq!(model.layout, preset(PRESET, SCALE).unwrap());
    for loc in &model.tables {
        let widths: Vec<u32> = loc.shards[0]
            .parts
            .iter()
            .map(|p| p.bytes_per_row)
            .collect();
        assert_eq!(widths, [256, 8], "split scales");
        assert_eq!(loc.full_row_bytes(), 264);
    }
    assert_rows_are_synthetic(&model, Encoding::E4m3E8m0Row264);

    // Random access reassembles value and scale bytes.
    let mut raw = Vec::new();
    let last = model.tables[1].rows - 1;
    model.read_raw_rows(1, &[last, 3], &mut raw).unwrap();
    let mut want = vec![0u8; 264];
    synth::fill_rows(SEED, 1, Encoding::E4m3E8m0Row264, last, &mut want).unwrap();
    assert_eq!(&raw[..264], &want[..]);

    // f32 rows decode what the generator wrote.
    let mut values = Vec::new();
    model.read_rows_f32(0, &[0, 5], &mut values).unwrap();
    assert_eq!(values.len(), 2 * ROW_DIM);
    let mut row5 = vec![0u8; 264];
    synth::fill_rows(SEED, 0, Encoding::E4m3E8m0Row264, 5, &mut row5).unwrap();
    let mut decoded = vec![0f32; ROW_DIM];
    Encoding::E4m3E8m0Row264
        .decode_row(&row5, &mut decoded)
        .unwrap();
    assert_eq!(&values[ROW_DIM..], &decoded[..]);
    assert!(model.verify_rows(50).unwrap() >= 100);

    // pack: a GGUF that reads identically.
    let packed_path = dir.path().join("packed.gguf");
    let packed = convert::pack(&ckpt, &packed_path, &NoProgress).unwrap();
    assert_eq!(packed.format, ModelFormat::Gguf);
    assert_eq!(packed.layout, model.layout);
    assert!(packed
        .tables
        .iter()
        .all(|t| t.shards[0].parts.len() == 1 && t.full_row_bytes() == 264));
    assert_rows_are_synthetic(&packed, Encoding::E4m3E8m0Row264);

    // transcode: every row is the codec's encoding of the source row.
    let q4_path = dir.path().join("q4.gguf");
    let q4 = convert::transcode(&model, Encoding::Lloyd4E5m3Row136, &q4_path, &NoProgress).unwrap();
    assert_eq!(q4.layout, model.layout);
    for (t, loc) in q4.tables.iter().enumerate() {
        assert_eq!(
            (loc.encoding, loc.full_row_bytes() as u32),
            (Encoding::Lloyd4E5m3Row136, 136)
        );
        let mut got = Vec::new();
        q4.read_row_range(t, 0, loc.rows as usize, &mut got)
            .unwrap();
        let mut src = vec![0u8; loc.rows as usize * 264];
        synth::fill_rows(SEED, t, Encoding::E4m3E8m0Row264, 0, &mut src).unwrap();
        for (r, (g, s)) in got.chunks_exact(136).zip(src.chunks_exact(264)).enumerate() {
            let mut want = [0u8; 136];
            encode_row136(s, &mut want).unwrap();
            assert_eq!(g, &want[..], "table {t} row {r}");
        }
    }
}

#[test]
fn gguf_models_in_both_encodings_read_back() {
    for e in Encoding::ALL {
        let (_dir, path) = synth_model(e.name(), SynthFormat::Gguf, e);
        assert_eq!(path.file_name().unwrap(), "model.gguf");
        let model = Model::open(&path).unwrap();
        assert_eq!(model.dialect, "deepseek41");
        assert_eq!(model.layout, preset(PRESET, SCALE).unwrap());
        assert!(model
            .tables
            .iter()
            .all(|t| t.encoding == e && t.full_row_bytes() == e.row_bytes()));
        assert_rows_are_synthetic(&model, e);
        model.verify_rows(20).unwrap();
    }
}

#[test]
fn hf_synth_refuses_other_encodings_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let layout = preset(PRESET, SCALE).unwrap();
    let config = HfConfig {
        params: preset_params(PRESET, SCALE)
            .unwrap()
            .into_deepseek("test")
            .unwrap(),
        num_embeddings: layout.tables.iter().map(|t| t.rows).collect(),
        compressed_vocab_size: u64::from(layout.compressed_vocab_size),
        vocab_size: None,
    };
    let out = dir.path().join("x");
    let r = synth::synth(
        &out,
        SynthFormat::Hf,
        &layout,
        &config,
        b"{}",
        Encoding::Lloyd4E5m3Row136,
        0,
        &NoProgress,
    );
    assert!(matches!(r, Err(engram::Error::InvalidArgument(_))));
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no temporary left behind"
    );
}

#[test]
fn conversion_stops_at_a_corrupt_row_and_leaves_nothing() {
    let (dir, path) = synth_model("g", SynthFormat::Gguf, Encoding::E4m3E8m0Row264);
    let model = Model::open(&path).unwrap();
    let t = &model.tables[1];
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(t.start_offset() + 1000 * 264 + 5) as usize] = 0xff; // a NaN code
    bytes[(t.start_offset() + 1500 * 264 + 256) as usize] = 0xff; // a NaN scale, later
    std::fs::write(&path, bytes).unwrap();
    let out = dir.path().join("q4.gguf");
    match convert::transcode(&model, Encoding::Lloyd4E5m3Row136, &out, &NoProgress) {
        Err(engram::Error::CorruptRow { table, row, .. }) => assert_eq!((table, row), (1, 1000)),
        other => panic!("expected a corrupt-row error, got {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("g")],
        "no output, no temporary"
    );
}
