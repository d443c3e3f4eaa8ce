//! `engram iobench` end to end on a small synthetic model.

use std::sync::OnceLock;

mod support;
use support::{engram, synth_model};

/// One small model shared by the tests of this file (built once).
fn shared_model() -> &'static str {
    static MODEL: OnceLock<(tempfile::TempDir, String)> = OnceLock::new();
    let (_, path) = MODEL.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = synth_model(dir.path(), 16000);
        (dir, path)
    });
    path
}

#[test]
fn iobench_json_has_the_documented_shape() {
    let model = shared_model();
    let cache = tempfile::tempdir().unwrap();
    let runs = [("psync", "sorted"), ("auto", "spread")];
    for (run, (backend, order)) in runs.into_iter().enumerate() {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_engram"))
            .env("XDG_CACHE_HOME", cache.path())
            .args([
                "iobench",
                "--model",
                model,
                "--backend",
                backend,
                "--depth",
                "8",
                "--cold",
                "--json",
                "--singles",
                "50",
                "--batches",
                "20",
                "--device-seconds",
                "0.3",
                "--read-order",
                order,
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{backend}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let doc: serde_json::Value =
            serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
        if backend != "auto" {
            assert_eq!(doc["backend"], backend);
        }
        assert_eq!(doc["depth"], 8);
        assert_eq!(doc["read_order"], order);
        assert_eq!(doc["cold"], true);
        assert_eq!(doc["single"]["rows"], 50);
        assert!(doc["single"]["p50_us"].as_f64().unwrap() > 0.0);
        assert!(
            doc["single"]["p99_us"].as_f64().unwrap() >= doc["single"]["p50_us"].as_f64().unwrap()
        );
        let d = &doc["decode_batch"];
        assert_eq!(
            (d["batches"].as_u64(), d["rows_per_batch"].as_u64()),
            (Some(20), Some(24))
        );
        assert!(d["mean_us"].as_f64().unwrap() > 0.0);
        assert!(d["p99_us"].as_f64().unwrap() >= d["p50_us"].as_f64().unwrap());
        let p = &doc["prefill_batch"];
        assert_eq!(
            (p["tokens"].as_u64(), p["rows"].as_u64()),
            (Some(2048), Some(49152))
        );
        let unique = p["unique_rows"].as_u64().unwrap();
        // Real text repeats n-grams: fewer distinct rows than requests, but
        // far more than a handful.
        assert!(unique > 1000 && unique < 49152, "unique rows {unique}");
        let rate = p["unique_rows_per_s"].as_f64().unwrap();
        let seconds = p["seconds"].as_f64().unwrap();
        assert!((rate * seconds - unique as f64).abs() <= unique as f64 * 0.01 + 1.0);
        // Rows sharing a page are one read, so no more reads than rows.
        let reads = p["reads"].as_u64().unwrap();
        assert!(
            reads > 0 && reads <= unique,
            "reads {reads} of {unique} rows"
        );
        let per_s = p["reads_per_s"].as_f64().unwrap();
        assert!((per_s * seconds - reads as f64).abs() <= reads as f64 * 0.01 + 1.0);
        // Each read costs some CPU (the system call at least), and far
        // less than a second.
        let cpu = p["cpu_us_per_read"].as_f64().unwrap();
        assert!(cpu > 0.0 && cpu < 1e6, "CPU per read {cpu} us");
        // Little's law: never more in flight than the pool's 8 workers
        // and the waiting thread (clock reads aside).
        let in_flight = p["mean_in_flight"].as_f64().unwrap();
        assert!(
            in_flight > 0.0 && in_flight <= 9.0 * 1.01,
            "in flight {in_flight}"
        );
        // The device probe of the bench's floor, at the same depth: measured
        // once, then served from the cache the bench shares.
        let device = &doc["device"];
        assert_eq!(device["depth"], 8);
        assert!(device["iops"].as_f64().unwrap() > 0.0);
        assert_eq!(device["source"], ["measured", "cached"][run]);
    }
}

#[test]
fn iobench_errors_name_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let o = engram(&["iobench", "--model", "/nonexistent/model.gguf"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/model.gguf"));
    let model = shared_model();
    let o = engram(&["iobench", "--model", model, "--backend", "floppy"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("floppy"));
    let o = engram(&["iobench", "--model", model, "--read-order", "backwards"]);
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("--read-order") && stderr.contains("backwards"),
        "{stderr}"
    );
    let text = dir.path().join("short.txt");
    std::fs::write(&text, "too short").unwrap();
    let o = engram(&[
        "iobench",
        "--model",
        model,
        "--text",
        text.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("2048"));
}

#[test]
fn iobench_gap_idles_before_each_timed_read() {
    let model = shared_model();
    let args = [
        "iobench",
        "--model",
        model,
        "--backend",
        "psync",
        "--depth",
        "4",
        "--json",
        "--singles",
        "10",
        "--batches",
        "10",
        "--repeats",
        "1",
        "--gap-us",
        "20000",
        "--no-floor",
    ];
    let started = std::time::Instant::now();
    let o = engram(&args);
    let elapsed = started.elapsed();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["gap_us"], 20000);
    assert!(doc["device"].is_null(), "--no-floor: no device probe");
    // 20 timed reads, each after 20 ms of sleep.
    assert!(
        elapsed >= std::time::Duration::from_millis(400),
        "ran {elapsed:?}: the gaps were not slept"
    );
}
