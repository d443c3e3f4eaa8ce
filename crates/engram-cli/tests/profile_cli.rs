//! `engram profile` from the command line: a hot file from a small corpus
//! that `engram bench --hot` then serves rows from, and clear errors.

use std::path::Path;

mod support;
use support::{engram, stderr, synth_model};

#[test]
fn profile_writes_a_hot_file_that_bench_serves() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_model(dir.path(), 65536);
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    for name in ["bench.rs", "hash.rs", "synth.rs"] {
        std::fs::copy(src.join(name), corpus.join(name)).unwrap();
    }
    std::fs::write(corpus.join("notes.txt"), "not counted: --ext rs").unwrap();
    let hot = dir.path().join("m.hot");
    let hot_s = hot.to_string_lossy().into_owned();
    let corpus_s = corpus.to_string_lossy().into_owned();
    // `engram profile` of the corpus's files ending `ext` into the hot file.
    let profile = |ext: &str, more: &[&str]| {
        let mut args = vec!["profile", "--model", &model, "--corpus", &corpus_s];
        args.extend(["--ext", ext, "--budget-mib", "1", "--out", &hot_s]);
        args.extend(more);
        engram(&args)
    };
    let o = profile("rs", &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["files"], 3);
    // 1 MiB per table at 268 bytes a row (row and id), unless fewer seen.
    for t in doc["tables"].as_array().unwrap() {
        let rows = t["hot_rows"].as_u64().unwrap();
        assert!(rows > 0 && rows <= (1 << 20) / 268, "{t}");
        assert!(t["lookup_coverage"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(
        doc["file_bytes"].as_u64().unwrap(),
        std::fs::metadata(&hot).unwrap().len()
    );

    let prompt = dir.path().join("prompt.txt");
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    std::fs::copy(readme, &prompt).unwrap();
    let prompt_s = prompt.to_string_lossy().into_owned();
    // `engram bench` of `overlap` on the prompt, with `hot` as the hot file.
    let bench = |hot: &str, more: &[&str]| {
        let mut args = vec!["bench", "--model", &model, "--prompt", &prompt_s];
        args.extend(["--prefill", "200", "--decode", "4", "--schedule", "overlap"]);
        args.extend(["--hot", hot]);
        args.extend(more);
        engram(&args)
    };
    let o = bench(
        &hot_s,
        &["--compute", "gpu:custom:1,20", "--no-floor", "--json"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["hot"]["file_bytes"].as_u64().unwrap() > 0);
    let io = &doc["prompts"][0]["repeats"][0][0]["io"];
    assert!(io["hot_hits"].as_u64().unwrap() > 0, "{io}");
    assert!(io["prefill_per_token"]["hot_rows"].as_f64().unwrap() > 0.0);
    // The summary over repeats carries the per-phase rates as spreads.
    let summary = &doc["prompts"][0]["schedules"][0]["io"];
    assert!(
        summary["prefill_per_token"]["hot_rows"]["median"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // A corpus with no file to count, and a hot file that is not one.
    let o = profile("py", &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no files found"), "{}", stderr(&o));
    let o = bench(&prompt_s, &[]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("prompt.txt: magic"), "{}", stderr(&o));
}

/// `engram synth` of Qwen3.8-Flash-Next (bf16 GGUF) at `scale` into `dir/q`.
fn synth_qwen(dir: &Path, scale: u64) -> String {
    let out = dir.join("q");
    let scale = scale.to_string();
    let o = engram(&[
        "synth",
        "--preset",
        "qwen3.8-flash-next",
        "--scale",
        &scale,
        "--out",
        out.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(o.status.success(), "synth: {}", stderr(&o));
    out.join("model.gguf").to_string_lossy().into_owned()
}

#[test]
fn profile_on_a_qwen_model_writes_a_hot_file_and_measures_held_out_text_on_the_released_layout() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_qwen(dir.path(), 65536);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands");
    let train = src.join("bench.rs").to_string_lossy().into_owned();
    let test = src.join("profile.rs").to_string_lossy().into_owned();
    let hot = dir.path().join("q.hot").to_string_lossy().into_owned();
    let base = ["profile", "--model", &model, "--corpus", &train, "--json"];
    let o = engram(
        &[
            &base[..],
            &["--budget-mib", "1", "--out", &hot, "--held-out", &test],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["layout"], "model");
    let t = &doc["tables"][0];
    // 320-byte bf16 rows and their 4-byte ids.
    assert!(t["hot_rows"].as_u64().unwrap() <= (1 << 20) / 324, "{t}");
    assert!(std::fs::metadata(&hot).unwrap().len() > 0);
    let held = &t["held_out"];
    assert_eq!(held["files"], 1);
    let share = held["decode_hot_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&share), "{held}");
    // The released layout: ids of the 320M-row table, no file written.
    let o = engram(
        &[
            &base[..],
            &[
                "--budget-mib",
                "1",
                "--layout-preset",
                "qwen3.8-flash-next",
                "--held-out",
                &test,
            ],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(doc["out"].is_null());
    assert_eq!(doc["layout"], "qwen3.8-flash-next (unscaled)");
    let t = &doc["tables"][0];
    assert!(t["distinct_rows_seen"].as_u64().unwrap() > 0);
    let held = &t["held_out"];
    assert!(held["prefill_rows"].as_u64().unwrap() > 0, "{held}");
    assert!(held["prefill_hot_share"].as_f64().unwrap() <= 1.0, "{held}");
    // A preset of the other family is refused by name.
    let o = engram(
        &[
            &base[..],
            &[
                "--budget-mib",
                "1",
                "--layout-preset",
                "deepseek-v4.1-flash",
            ],
        ]
        .concat(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--layout-preset deepseek-v4.1-flash"),
        "{}",
        stderr(&o)
    );
}
