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
