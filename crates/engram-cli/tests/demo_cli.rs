//! `engram demo --family qwen`: the Qwen3.8-Flash-Next part runs its peers
//! and the engine on a small model, names the runtime each peer stands for
//! and prints one JSON report; a bad family is refused.

mod support;
use support::{engram, stderr};

#[test]
fn the_qwen_demo_runs_every_peer_and_names_its_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let o = engram(&[
        "demo",
        "--family",
        "qwen",
        "--dir",
        dir.path().to_str().unwrap(),
        "--qwen-scale",
        "65536",
        "--prefill",
        "256",
        "--decode",
        "4",
        "--json",
    ]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for line in [
        "llama-lazy        llama.cpp --lazy-mode on",
        "omlx              oMLX",
        "ds4-qwen-chunked  the design brief's ds4 reader",
        "overlap           this engine's pipeline",
    ] {
        assert!(err.contains(line), "{line:?} missing in {err}");
    }
    assert!(err.contains("qwen4exp model"), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["compute"], "gpu:m4-max-qwen38");
    let names: Vec<&str> = json["prompts"][0]["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let mut want = vec![
        "llama-lazy",
        "llama-readahead",
        "omlx",
        "ds4-qwen",
        "ds4-qwen-chunked",
    ];
    if cfg!(target_os = "linux") {
        want.push("freetoken");
    }
    want.extend(["overlap", "full"]);
    assert_eq!(names, want);
    assert!(dir.path().join("demo-qwen.svg").exists());
}

#[test]
fn an_unknown_family_is_refused() {
    let o = engram(&["demo", "--family", "gemma"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("gemma"), "{}", stderr(&o));
}
