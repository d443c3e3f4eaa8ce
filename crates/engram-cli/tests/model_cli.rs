//! The model subcommands end to end: synth, inspect, rows, transcode, pack,
//! and a clear failure on bad input.

use std::path::Path;

use serde_json::Value;

mod support;
use support::{engram, LAYOUT_KEYS};

const SCALE: &str = "262144";

fn ok(args: &[&str]) -> String {
    let out = engram(args);
    assert!(
        out.status.success(),
        "engram {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args)).expect("one JSON document")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn synth_inspect_rows_transcode_pack() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g");
    let h = dir.path().join("h");
    let base = [
        "synth",
        "--preset",
        "deepseek-v4.1-flash",
        "--scale",
        SCALE,
        "--quiet",
        "--seed",
        "5",
    ];
    ok(&[&base[..], &["--out", p(&g)]].concat());
    ok(&[&base[..], &["--out", p(&h), "--format", "hf"]].concat());
    let gguf = g.join("model.gguf");

    let doc = json(&["inspect", p(&gguf), "--json", "--verify-rows", "16"]);
    assert_eq!(doc["format"], "gguf");
    assert_eq!(doc["dialect"], "deepseek41");
    let layout = &doc["layout"];
    for key in LAYOUT_KEYS {
        assert!(layout.get(key).is_some(), "layout.{key}");
    }
    assert_eq!(layout["layer_ids"], serde_json::json!([1, 14]));
    assert_eq!(layout["multipliers"][0][0], 76632096046245u64);
    let t0 = &doc["tables"][0];
    assert_eq!(t0["layer_id"], 1);
    assert_eq!(t0["encoding"], "e4m3_e8m0_32_row264");
    assert_eq!(t0["row_bytes"], 264);
    assert_eq!(t0["rows"], layout["rows"][0]);
    assert_eq!(doc["verified_rows"], 32);

    let hdoc = json(&["inspect", p(&h), "--json"]);
    assert_eq!(hdoc["format"], "hf");
    assert_eq!(hdoc["layout"], doc["layout"]);
    // A checkpoint table is one shard of two parts: values, then scales.
    let parts = &hdoc["tables"][1]["shards"][0]["parts"];
    assert_eq!(parts[0]["bytes_per_row"], 256);
    assert_eq!(parts[1]["bytes_per_row"], 8);
    assert!(parts[1]["file"].is_string() && parts[1]["offset"].is_u64());
    assert_eq!(hdoc["tables"][1]["row_bytes"], 264);

    // Same seed, same rows, whichever format.
    let last = doc["tables"][1]["rows"].as_u64().unwrap() - 1;
    let ids = format!("0,7,{last}");
    let rows_of = |m: &Path, fmt: &str| {
        json(&[
            "rows",
            "--model",
            p(m),
            "--table",
            "1",
            "--ids",
            &ids,
            "--format",
            fmt,
            "--json",
        ])
    };
    let f = rows_of(&gguf, "f32");
    assert_eq!(f["rows"].as_array().unwrap().len(), 3);
    assert_eq!(f["rows"][0].as_array().unwrap().len(), 256);
    assert_eq!(f, rows_of(&h, "f32"));
    let raw = rows_of(&gguf, "raw");
    assert_eq!(raw["rows"][2].as_str().unwrap().len(), 2 * 264);

    let packed = dir.path().join("packed.gguf");
    ok(&["pack", p(&h), "--out", p(&packed), "--quiet"]);
    assert_eq!(raw, rows_of(&packed, "raw"));

    let q4 = dir.path().join("q4.gguf");
    ok(&[
        "transcode",
        p(&gguf),
        "--to",
        "lloyd4_e5m3_32_r136",
        "--out",
        p(&q4),
        "--quiet",
    ]);
    let qdoc = json(&["inspect", p(&q4), "--json", "--verify-rows", "8"]);
    assert_eq!(qdoc["tables"][0]["encoding"], "lloyd4_e5m3_32_r136");
    assert_eq!(qdoc["tables"][0]["row_bytes"], 136);
    assert_eq!(qdoc["layout"], doc["layout"]);
    let q = rows_of(&q4, "f32");
    assert_eq!(q["rows"][0].as_array().unwrap().len(), 256);

    verify_rows_names_a_corrupt_row(&gguf, &doc);
}

/// Corrupts the last row of table 1 of `gguf` (described by `doc`).
fn verify_rows_names_a_corrupt_row(gguf: &Path, doc: &Value) {
    let t1 = &doc["tables"][1];
    let last = t1["rows"].as_u64().unwrap() - 1;
    // Make the last row of table 1 hold a NaN code (0x7f).
    let at = t1["offset"].as_u64().unwrap() + last * 264 + 10;
    let mut bytes = std::fs::read(gguf).unwrap();
    bytes[at as usize] = 0x7f;
    std::fs::write(gguf, bytes).unwrap();
    let out = engram(&["inspect", p(gguf), "--verify-rows", "4"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("row {last} of table 1")), "{err}");
    let last = last.to_string();
    let read_last = ["rows", "--model", p(gguf), "--table", "1", "--ids", &last];
    let out = engram(&read_last);
    assert!(!out.status.success());
    // Raw reads pass the bytes through as stored.
    ok(&[&read_last[..], &["--format", "raw"]].concat());
}

#[test]
fn bad_input_fails_with_one_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(
        &bad,
        b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00",
    )
    .unwrap();
    let out = engram(&["inspect", p(&bad)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(p(&bad)) && err.contains("header.tensor_count"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    let out = engram(&[
        "rows",
        "--model",
        p(&dir.path().join("nope.gguf")),
        "--table",
        "0",
        "--ids",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.gguf"));
}
