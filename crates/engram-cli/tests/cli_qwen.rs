//! `engram layout` and `engram hash` on the Qwen4-Exp preset, against the
//! vectors of the independent Python reference (scripts/qwen4exp_ref.py).

use std::process::Output;

use serde_json::Value;

mod support;
use support::{engram, stderr, LAYOUT_KEYS};

const PRESET: &str = "qwen3.8-flash-next";

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../engram/tests/data/qwen4exp_vectors.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "stderr: {}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

/// The configurations of the vectors that name the preset, with their scale.
fn preset_configs(doc: &Value) -> Vec<(&Value, String)> {
    let configs = doc["configs"].as_array().unwrap();
    let found: Vec<_> = configs
        .iter()
        .filter(|c| c["preset"] == PRESET)
        .map(|c| (c, c["scale"].as_u64().unwrap().to_string()))
        .collect();
    assert_eq!(found.len(), 2, "the released and the scaled configuration");
    found
}

#[test]
fn layout_json_gives_the_reference_constants() {
    let doc = vectors();
    for (config, scale) in preset_configs(&doc) {
        let out = engram(&["layout", "--preset", PRESET, "--scale", &scale, "--json"]);
        let got = json_of(&out);
        for key in LAYOUT_KEYS {
            assert!(got.get(key).is_some(), "{key}");
        }
        let table = &config["tables"][0];
        assert_eq!(got["family"], "qwen4exp");
        assert_eq!(got["layer_ids"], serde_json::json!([1]));
        assert_eq!(got["head_dim"], 160);
        assert_eq!(got["vocab_size"], 248_320);
        assert_eq!(got["compressed_vocab_size"], 248_320);
        assert_eq!(got["pad_compressed_id"], 248_044);
        assert_eq!(got["primes"][0], table["primes"]);
        assert_eq!(got["multipliers"][0], table["multipliers"]);
        assert_eq!(got["rows"][0], table["rows"]);
        assert_eq!(got["stored_rows"][0], table["stored_rows"]);
    }
    let human = engram(&["layout", "--preset", PRESET]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(text.contains("320,001,536 stored"), "{text}");
}

#[test]
fn hash_json_gives_the_reference_rows() {
    let doc = vectors();
    for (config, scale) in preset_configs(&doc) {
        for case in config["cases"].as_array().unwrap() {
            // The command takes no mask; a masked token hashes as EOS, so
            // the masked cases are given with EOS in its place.
            let eos = &config["config"]["eos_token_id"];
            let mask = case.get("attention_mask").and_then(Value::as_array);
            let tokens: Vec<Value> = case["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, t)| match mask {
                    Some(m) if m[i] == 0 => eos.clone(),
                    _ => t.clone(),
                })
                .collect();
            let list: Vec<String> = tokens.iter().map(Value::to_string).collect();
            let list = list.join(",");
            let got = json_of(&engram(&[
                "hash", "--preset", PRESET, "--scale", &scale, "--tokens", &list, "--json",
            ]));
            assert_eq!(got["tokens"], Value::from(tokens), "{}", case["name"]);
            assert_eq!(
                got["rows"], case["token_rows"],
                "{} at scale {scale}",
                case["name"]
            );
        }
    }
}

#[test]
fn hash_text_needs_the_models_tokenizer() {
    let out = engram(&["hash", "--preset", PRESET, "--text", "hello"]);
    assert!(!out.status.success() && out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("--tokenizer") && err.contains("--tokens"),
        "{err}"
    );

    // Any tokenizer.json works with --tokenizer; the vendored DeepSeek one
    // gives ids inside Qwen's vocabulary, the same as its own preset gives.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, engram::layout::vendored_tokenizer_json().unwrap()).unwrap();
    let text = "Engram rows, one n-gram at a time.";
    let with_file = json_of(&engram(&[
        "hash",
        "--preset",
        PRESET,
        "--tokenizer",
        path.to_str().unwrap(),
        "--text",
        text,
        "--json",
    ]));
    let vendored = json_of(&engram(&["hash", "--text", text, "--json"]));
    assert_eq!(with_file["tokens"], vendored["tokens"]);
    let n = with_file["tokens"].as_array().unwrap().len();
    assert!(n > 3);
    assert_eq!(with_file["rows"].as_array().unwrap().len(), n);
    assert_eq!(with_file["rows"][0][0].as_array().unwrap().len(), 16);

    let missing = dir.path().join("none.json");
    let out = engram(&[
        "hash",
        "--preset",
        PRESET,
        "--tokenizer",
        missing.to_str().unwrap(),
        "--text",
        "x",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("none.json"), "{}", stderr(&out));
}

#[test]
fn out_of_vocabulary_ids_are_refused() {
    let out = engram(&["hash", "--preset", PRESET, "--tokens", "1,248320"]);
    assert!(!out.status.success() && out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains("token 248320") && err.contains("index 1"),
        "{err}"
    );
}
