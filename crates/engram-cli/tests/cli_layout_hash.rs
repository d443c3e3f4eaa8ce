//! `engram layout` and `engram hash` run as a user runs them.

use std::process::Output;

use serde_json::Value;

mod support;
use support::{engram, LAYOUT_KEYS};

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document on stdout")
}

fn stderr_of_failure(out: &Output) -> String {
    assert!(!out.status.success(), "expected failure");
    assert!(out.stdout.is_empty());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn layout_json_has_the_documented_fields_in_order() {
    let out = engram(&["layout", "--json"]);
    let doc = json_of(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    let positions: Vec<usize> = LAYOUT_KEYS
        .iter()
        .map(|k| text.find(&format!("\"{k}\"")).unwrap())
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "key order: {text}"
    );
    assert_eq!(doc["layer_ids"], serde_json::json!([1, 14]));
    assert_eq!(doc["max_ngram_size"], 4);
    assert_eq!(doc["n_heads"], 8);
    assert_eq!(doc["vocab_size"], 129_280);
    assert_eq!(doc["compressed_vocab_size"], 99_092);
    assert_eq!(doc["pad_compressed_id"], 2);
    assert_eq!(
        doc["rows"],
        serde_json::json!([384_006_168u64, 384_016_682u64])
    );
    assert_eq!(doc["multipliers"][1][3], 82_619_226_485_591u64);
    for (t, primes) in doc["primes"].as_array().unwrap().iter().enumerate() {
        let primes = primes.as_array().unwrap();
        assert_eq!(primes.len(), 24);
        let sum: u64 = primes.iter().map(|p| p.as_u64().unwrap()).sum();
        assert_eq!(sum, doc["rows"][t].as_u64().unwrap());
    }
}

#[test]
fn hash_text_and_tokens_agree_and_match_the_scaled_layout() {
    let text = "Engram, ça marche: 深度求索!";
    let from_text = json_of(&engram(&[
        "hash", "--scale", "1024", "--text", text, "--json",
    ]));
    let tokens: Vec<String> = from_text["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert!(tokens.len() >= 5);
    let rows = from_text["rows"].as_array().unwrap();
    assert_eq!(rows.len(), tokens.len());
    let scaled_rows = [377_274u64, 382_716];
    for per_token in rows {
        let tables = per_token.as_array().unwrap();
        assert_eq!(tables.len(), 2);
        for (t, ids) in tables.iter().enumerate() {
            let ids = ids.as_array().unwrap();
            assert_eq!(ids.len(), 24);
            assert!(ids.iter().all(|r| r.as_u64().unwrap() < scaled_rows[t]));
        }
    }
    // The same ids given as --tokens, in human form: every row printed for
    // the first token must be the JSON's.
    let list = tokens.join(",");
    let human = engram(&["hash", "--scale", "1024", "--tokens", &list]);
    assert!(human.status.success());
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(
        human.contains(&format!("{} tokens hashed", tokens.len())),
        "{human}"
    );
    for (t, layer) in ["1", "14"].iter().enumerate() {
        let ids: Vec<String> = rows[0][t]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.to_string())
            .collect();
        let line = format!("layer {layer:>3}: {}", ids.join(" "));
        assert!(human.contains(&line), "missing {line:?} in {human}");
    }
}

/// Runs `engram` with `args`, which must fail with nothing on standard
/// output and a message containing every one of `names`.
fn fails_naming(args: &[&str], names: &[&str]) {
    let err = stderr_of_failure(&engram(args));
    for name in names {
        assert!(err.contains(name), "{args:?}: {name:?} missing from {err}");
    }
}

#[test]
fn bad_arguments_fail_with_a_message_naming_them() {
    fails_naming(&["hash", "--tokens", "1,x,3"], &["--tokens", "\"x\""]);
    fails_naming(&["layout", "--scale", "0"], &["scale 0"]);
    fails_naming(
        &["layout", "--preset", "no-such-model"],
        &["no-such-model", "deepseek-v4.1-flash"],
    );
    let missing = "/nonexistent/prompt.txt";
    fails_naming(&["hash", "--text-file", missing], &[missing]);
    fails_naming(
        &["hash", "--tokens", "5,129280"],
        &["token 129280", "index 1"],
    );
    fails_naming(&["hash"], &["--text"]);
}
