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
        "--device-iops",
        "5000",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let run = &json["prompts"][0]["repeats"][0];
    let names: Vec<&str> = run
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["overlap", "sync"]);
    assert_eq!(run[0]["prefill"]["tokens"], 300);
    assert_eq!(run[1]["decode"]["tokens"], 5);
    assert_eq!(json["device"]["iops"], 5000.0);
    assert!(run[0]["floor"]["prefill_stall_seconds"].is_number());
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
        "--no-floor",
    ]);
    assert!(e.contains("Engram layer 14"), "{e}");
    assert!(run(&["--repeat", "0"]).contains("--repeat"));
    assert!(run(&["--cores", "0"]).contains("--cores"));
    if cfg!(target_os = "linux") {
        assert!(run(&["--cores", "100000"]).contains("may run on only"));
    }
    assert!(run(&["--device-iops=-3"]).contains("--device-iops"));
    assert!(run(&["--device-seconds", "0"]).contains("--device-seconds"));
    let e = run(&["--corpus", "/no/such/corpus"]);
    assert!(
        e.contains("--corpus") || e.contains("/no/such/corpus"),
        "{e}"
    );
    let missing = engram(&[
        "bench",
        "--model",
        &model,
        "--prompt",
        "/no/such/prompt.txt",
    ]);
    assert!(stderr(&missing).contains("/no/such/prompt.txt"));
}

#[test]
fn corpus_runs_every_prompt_and_the_device_is_measured_once_then_cached() {
    let dir = tempfile::tempdir().unwrap();
    let (model, prompt) = fixtures(dir.path());
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    for name in ["one.txt", "two.txt"] {
        std::fs::copy(&prompt, corpus.join(name)).unwrap();
    }
    let cache = dir.path().join("cache");
    let bench = || {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
            .env("XDG_CACHE_HOME", &cache)
            .args([
                "bench",
                "--model",
                &model,
                "--corpus",
                corpus.to_str().unwrap(),
                "--prefill",
                "200",
                "--decode",
                "3",
                "--compute",
                "gpu:custom:1,20",
                "--schedule",
                "ds4,overlap",
                "--repeat",
                "2",
                "--device-seconds",
                "0.3",
                "--json",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let first = bench();
    assert_eq!(first["device"]["source"], "measured");
    assert!(first["device"]["iops"].as_f64().unwrap() > 0.0);
    assert!(cache.join("engram/device.json").exists());
    assert_eq!(first["prompts"].as_array().unwrap().len(), 2);
    assert_eq!(first["prompts"][1]["repeats"].as_array().unwrap().len(), 2);
    assert!(first["geomean"].as_array().is_some_and(|g| !g.is_empty()));
    let second = bench();
    assert_eq!(second["device"]["source"], "cached");
    assert_eq!(second["device"]["iops"], first["device"]["iops"]);
}
