//! The hot tier through the C ABI: `options.hot_path` serves the same rows,
//! a bad hot file fails `engram_open` with a clear status and message (and
//! the model opens without it), and callers built before the hot fields
//! existed (a 72-byte `engram_options`) still open engines.

mod support;

use std::ffi::{c_char, CString};
use std::path::Path;
use std::ptr::null_mut;

use engram::hot::profile::{self, CorpusOptions};
use engram::hot::ProfileInfo;
use engram::io::{open_source, IoConfig};
use engram::model::{Model, NoProgress};
use engram_ffi::engram_status::*;
use engram_ffi::*;
use support::{expect, ok, write_model};

fn options() -> engram_options {
    // SAFETY: zeroed plain fields, then filled by the library.
    let mut opts: engram_options = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    ok(unsafe { engram_options_default(&mut opts) });
    opts
}

/// Hot rows (the 300 most used by this crate's sources) of `model` to `out`.
fn hot_file(model_path: &Path, out: &Path) -> Vec<u32> {
    let model = Model::open(model_path).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = vec![src.join("engine.rs"), src.join("options.rs")];
    let options = CorpusOptions {
        threads: 2,
        max_tokens: None,
    };
    let counted = profile::count_corpus(&model.layout, &files, &options, &NoProgress).unwrap();
    let ids: Vec<Vec<u32>> = (0..2).map(|t| counted.counts.top(t, 300)).collect();
    let source = open_source(&model.tables, &IoConfig::default())
        .unwrap()
        .source;
    let info = ProfileInfo::default();
    profile::write_hot_file(out, &model, source.as_ref(), ids.clone(), info, &NoProgress).unwrap();
    ids[1].clone()
}

fn open(path: &CString, opts: &engram_options) -> (engram_status, *mut engram_engine) {
    let mut engine = null_mut();
    // SAFETY: valid string, options (hot_path NULL or a string) and out-pointer.
    let status = unsafe { engram_open(path.as_ptr(), opts, &mut engine) };
    (status, engine)
}

fn rows(engine: *mut engram_engine, ids: &[u32]) -> Vec<u8> {
    let mut out = vec![0u8; ids.len() * 264];
    // SAFETY: a live engine; `ids` and `out` sized as passed.
    ok(unsafe {
        engram_rows_read(
            engine,
            1,
            ids.as_ptr(),
            ids.len(),
            ENGRAM_FORMAT_RAW,
            out.as_mut_ptr().cast(),
            out.len(),
        )
    });
    out
}

#[test]
fn hot_path_serves_the_same_rows_and_bad_files_fail_open() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), 65536);
    let hot = dir.path().join("m.hot");
    let mut ids = hot_file(&model, &hot);
    ids.extend([1, 2, 3, 4000]);
    let path = CString::new(model.to_str().unwrap()).unwrap();
    let hot_c = CString::new(hot.to_str().unwrap()).unwrap();

    let (status, plain) = open(&path, &options());
    ok(status);
    let mut opts = options();
    opts.hot_path = hot_c.as_ptr();
    let (status, with_hot) = open(&path, &opts);
    ok(status);
    assert!(rows(with_hot, &ids) == rows(plain, &ids));
    // SAFETY: live handles.
    unsafe {
        ok(engram_close(with_hot));
        ok(engram_close(plain));
    }

    let bytes = std::fs::read(&hot).unwrap();
    let cut = dir.path().join("cut.hot");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let cut_c = CString::new(cut.to_str().unwrap()).unwrap();
    opts.hot_path = cut_c.as_ptr();
    let (status, engine) = open(&path, &opts);
    expect(status, ENGRAM_FORMAT, "truncated");
    assert!(engine.is_null());
    opts.hot_path = std::ptr::null();
    opts.prefill_order = 7;
    let (status, _) = open(&path, &opts);
    expect(status, ENGRAM_INVALID_ARGUMENT, "options.prefill_order");

    // An older caller's struct ends before hot_path: whatever lies past
    // its size (here a pointer no one may follow) is not read.
    let mut old = options();
    old.struct_size = 72;
    old.hot_path = std::ptr::dangling::<c_char>();
    old.prefill_order = 7;
    let (status, engine) = open(&path, &old);
    ok(status);
    // SAFETY: a live handle.
    ok(unsafe { engram_close(engine) });
}
