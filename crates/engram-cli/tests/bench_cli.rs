//! `engram bench` from the command line: a JSON run on a small model, and
//! clear errors for bad arguments.

use std::path::Path;

mod support;
use support::{engram, stderr, synth_model};

/// A small model and a prompt file of this repository's README, in `dir`.
fn fixtures(dir: &Path) -> (String, String) {
    let model = synth_model(dir, 65536);
    let prompt = dir.join("prompt.txt");
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    std::fs::copy(readme, &prompt).unwrap();
    (model, prompt.to_string_lossy().into_owned())
}

#[test]
fn bench_prints_one_json_document_and_writes_the_plot() {
    let dir = tempfile::tempdir().unwrap();
    let (model, prompt) = fixtures(dir.path());
    let plot = dir.path().join("stall.svg");
    let o = engram(&[
        "bench",
        "--model",
        &model,
        "--prompt",
        &prompt,
        "--prefill",
        "300",
        "--decode",
        "5",
        "--compute",
        "gpu:custom:1,20",
        "--schedule",
        "overlap,sync",
        "--sweep",
        "chunk",
        "--ubatch",
        "100",
        "--cold",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = json["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["overlap", "sync"]);
    assert_eq!(json["schedules"][0]["prefill"]["tokens"], 300);
    assert_eq!(json["schedules"][1]["decode"]["tokens"], 5);
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
}

#[test]
fn bad_arguments_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (model, prompt) = fixtures(dir.path());
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "--model", &model, "--prompt", &prompt];
        args.extend_from_slice(extra);
        let o = engram(&args);
        assert!(!o.status.success(), "{extra:?} should fail");
        stderr(&o)
    };
    let e = run(&["--prefill", "1000000", "--decode", "0"]);
    assert!(e.contains("prompt.txt") && e.contains("tokens"), "{e}");
    assert!(run(&["--compute", "tpu:fast"]).contains("--compute"));
    assert!(run(&["--schedule", "sync,fastest"]).contains("fastest"));
    assert!(run(&["--sweep", "diagonal"]).contains("--sweep"));
    assert!(run(&["--hints", "draft:2"]).contains("--hints"));
    let e = run(&[
        "--prefill",
        "10",
        "--decode",
        "0",
        "--compute",
        "gpu:custom:1,1,10",
    ]);
    assert!(e.contains("Engram layer 14"), "{e}");
    let missing = engram(&[
        "bench",
        "--model",
        &model,
        "--prompt",
        "/no/such/prompt.txt",
    ]);
    assert!(stderr(&missing).contains("/no/such/prompt.txt"));
}
