//! GGUF models: write with the synthetic writer, read back row for row.

mod model_support;

use engram::codec::Encoding;
use engram::model::{synth, Model, ModelFormat, NoProgress};

#[test]
fn synthetic_gguf_reads_back_row_for_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let layout = model_support::tiny_layout();
    let e = Encoding::E4m3E8m0Row264;
    synth::write_gguf(&path, &layout, e, 7, &NoProgress).unwrap();

    let model = Model::open(&path).unwrap();
    assert_eq!(model.format, ModelFormat::Gguf);
    assert_eq!(model.dialect, "deepseek41");
    assert_eq!(model.layout, layout);
    assert_eq!(model.tables.len(), 2);
    for (t, loc) in model.tables.iter().enumerate() {
        assert_eq!(loc.rows, layout.tables[t].rows);
        assert_eq!(loc.full_row_bytes(), 264);
        assert_eq!(loc.encoding, e);
        let mut got = Vec::new();
        model
            .read_row_range(t, 0, loc.rows as usize, &mut got)
            .unwrap();
        let mut want = vec![0u8; got.len()];
        synth::fill_rows(7, t, e, 0, &mut want).unwrap();
        assert!(got == want, "table {t} differs");
        let mut some = Vec::new();
        model
            .read_raw_rows(t, &[loc.rows - 1, 0, 17], &mut some)
            .unwrap();
        assert_eq!(&some[..264], &want[want.len() - 264..]);
        assert_eq!(&some[264..528], &want[..264]);
        assert_eq!(&some[528..], &want[17 * 264..18 * 264]);
    }
}

#[test]
fn synthetic_rows_are_valid_and_seeded() {
    let e = Encoding::E4m3E8m0Row264;
    let mut a = vec![0u8; 264 * 1000];
    let mut b = vec![0u8; 264 * 1000];
    synth::fill_rows(1, 0, e, 0, &mut a).unwrap();
    synth::fill_rows(2, 0, e, 0, &mut b).unwrap();
    assert_ne!(a, b);
    // A chunk starting mid-table is the same rows.
    let mut c = vec![0u8; 264 * 10];
    synth::fill_rows(1, 0, e, 500, &mut c).unwrap();
    assert_eq!(&c[..], &a[500 * 264..510 * 264]);
    for row in a.chunks_exact(264) {
        assert!(row[..256].iter().all(|&v| v & 0x7f != 0x7f), "NaN code");
        assert!(
            row[256..].iter().all(|&s| (115..=123).contains(&s)),
            "scale range"
        );
    }
}

/// Writes small seed inputs for the fuzz targets into `$ENGRAM_FUZZ_SEEDS`
/// (run with `--ignored`): a tiny GGUF model in each encoding.
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let Some(dir) = std::env::var_os("ENGRAM_FUZZ_SEEDS") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut layout = model_support::tiny_layout();
    layout.tables = vec![
        model_support::table(1, &[2, 3, 5, 7], &[3, 5, 7]),
        model_support::table(5, &[11, 13, 17, 19], &[9, 11, 13]),
    ];
    for e in Encoding::ALL {
        synth::write_gguf(&dir.join(format!("{e}.gguf")), &layout, e, 1, &NoProgress).unwrap();
    }
    // A deepseek4-dialect file whose primes, multipliers and token map are
    // derived: one table, bigrams, one head, engram vocab 3 (prime 3).
    use engram::model::gguf::{Array, GgufWriter, TensorDecl, Value};
    let k = |s: &str| format!("deepseek4.engram.{s}");
    let meta = vec![
        (k("layer_ids"), Value::Array(Array::U32(vec![1]))),
        (k("num_embeddings"), Value::Array(Array::U32(vec![3]))),
        (k("max_ngram_size"), Value::U32(2)),
        (k("head_count"), Value::U32(1)),
        (k("vocab_size"), Value::U32(3)),
        (k("pad_id"), Value::U32(2)),
    ];
    let decl = TensorDecl {
        name: "blk.1.engram_embd.weight".into(),
        dims: vec![264, 3],
        ggml_type: 24,
        bytes: 3 * 264,
    };
    let mut w = GgufWriter::create(&dir.join("deepseek4.gguf"), &meta, vec![decl]).unwrap();
    w.write(&[0u8; 3 * 264]).unwrap();
    w.finish().unwrap();
    Model::open(dir.join("deepseek4.gguf")).unwrap();
}

/// A `deepseek4.engram.*` file as other converters write it: only the
/// layout parameters; primes, multipliers and the token map are derived.
fn write_ds4_dialect(
    path: &std::path::Path,
    extra: Vec<(String, engram::model::gguf::Value)>,
) -> engram::layout::Layout {
    use engram::model::gguf::{Array, GgufWriter, Value};
    let scale = 262_144;
    let layout = engram::layout::preset("deepseek-v4.1-flash", scale).unwrap();
    let k = |s: &str| format!("deepseek4.engram.{s}");
    let mut meta = vec![
        (
            "general.architecture".to_string(),
            Value::String("deepseek4".into()),
        ),
        (k("layer_ids"), Value::Array(Array::I32(vec![1, 14]))),
        (
            k("num_embeddings"),
            Value::Array(Array::U64(layout.tables.iter().map(|t| t.rows).collect())),
        ),
        (k("max_ngram_size"), Value::U32(4)),
        (k("head_count"), Value::U32(8)),
        (k("key_length"), Value::U32(256)),
        (k("vocab_size"), Value::U64(16_000_000 / scale)),
        ("tokenizer.ggml.padding_token_id".to_string(), Value::U32(2)),
    ];
    meta.extend(extra);
    let decls = engram::model::ds4::table_decls(&layout, Encoding::E4m3E8m0Row264);
    let mut w = GgufWriter::create(path, &meta, decls).unwrap();
    for (t, table) in layout.tables.iter().enumerate() {
        let mut rows = vec![0u8; table.rows as usize * 264];
        synth::fill_rows(9, t, Encoding::E4m3E8m0Row264, 0, &mut rows).unwrap();
        w.write(&rows).unwrap();
    }
    w.finish().unwrap();
    layout
}

#[test]
fn deepseek4_dialect_derives_what_it_lacks() {
    use engram::model::gguf::{Array, Value};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds4.gguf");
    let layout = write_ds4_dialect(&path, vec![]);
    let model = Model::open(&path).unwrap();
    assert_eq!(model.dialect, "deepseek4");
    assert_eq!(
        model.layout, layout,
        "primes, multipliers and token map derived"
    );
    assert_eq!(
        model.tables[1].encoding,
        Encoding::E4m3E8m0Row264,
        "from the row width"
    );
    let mut got = Vec::new();
    model.read_raw_rows(1, &[0], &mut got).unwrap();
    let mut want = vec![0u8; 264];
    synth::fill_rows(9, 1, Encoding::E4m3E8m0Row264, 0, &mut want).unwrap();
    assert_eq!(got, want);

    // Offsets instead of the prime walk give the same primes.
    let offsets: Vec<u32> = layout
        .tables
        .iter()
        .flat_map(|t| t.offsets.clone())
        .collect();
    let path2 = dir.path().join("ds4_offsets.gguf");
    write_ds4_dialect(
        &path2,
        vec![(
            "deepseek4.engram.offsets".into(),
            Value::Array(Array::U32(offsets)),
        )],
    );
    assert_eq!(Model::open(&path2).unwrap().layout, layout);

    // A num_embeddings that disagrees with the derivation is refused.
    let path3 = dir.path().join("ds4_bad.gguf");
    write_ds4_dialect(
        &path3,
        vec![(
            "deepseek4.engram.multipliers".into(),
            Value::Array(Array::U64(vec![2; 8])),
        )],
    );
    match Model::open(&path3) {
        Err(engram::Error::Format { field, .. }) => {
            assert!(field.contains("multipliers"), "{field}")
        }
        other => panic!("even multipliers accepted: {other:?}"),
    }
}
