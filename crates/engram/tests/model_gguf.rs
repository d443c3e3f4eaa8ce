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
        assert_eq!(loc.row_bytes, 264);
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
