//! `run_bench` with a hot tier: the cpu compute model's output is the same
//! with and without it under every engine schedule, and the report counts
//! the rows the tier served, per repeat and as medians over repeats.

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::hot::profile::{self, CorpusOptions};
use engram::hot::ProfileInfo;
use engram::io::{open_source, IoConfig};
use engram::layout::preset;
use engram::model::{synth, Model, NoProgress};
use engram_replay::compute::ComputeSpec;
use engram_replay::schedule::ScheduleKind;
use engram_replay::summary::figure;
use engram_replay::{prompt, run_bench, BenchConfig, Prompt, Report};

const PREFILL: usize = 500;
const DECODE: usize = 10;

/// A hot file of 600 rows per table profiled from the library's sources
/// (the prompt comes from elsewhere: this crate's sources).
fn hot_file(model: &Model, out: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engram/src");
    let files: Vec<PathBuf> = ["hash.rs", "cache.rs", "stats.rs"]
        .iter()
        .map(|f| src.join(f))
        .collect();
    let options = CorpusOptions {
        threads: 2,
        max_tokens: None,
    };
    let counted = profile::count_corpus(&model.layout, &files, &options, &NoProgress).unwrap();
    let ids = (0..2).map(|t| counted.counts.top(t, 600)).collect();
    let source = open_source(&model.tables, &IoConfig::default())
        .unwrap()
        .source;
    let info = ProfileInfo::default();
    profile::write_hot_file(out, model, source.as_ref(), ids, info, &NoProgress).unwrap();
}

fn bench(model: &Model, path: &Path, hot: Option<PathBuf>, repeat: usize) -> Report {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut text = String::new();
    for f in ["driver.rs", "report.rs", "bench.rs"] {
        text.push_str(&std::fs::read_to_string(src.join(f)).unwrap());
    }
    let tokens = prompt::tokenize(&text).unwrap();
    let prompts = [Prompt::split("replay-src", tokens, PREFILL, DECODE).unwrap()];
    let config = BenchConfig {
        compute: ComputeSpec::parse("cpu:layers=15,dim=16,heads=2,ffn=32,conv=3").unwrap(),
        ubatch: 128,
        schedules: ScheduleKind::parse_list("sync,overlap,full").unwrap(),
        hot,
        repeat,
        ..BenchConfig::default()
    };
    run_bench(model, path, &prompts, &config, |_| {}).unwrap()
}

#[test]
fn the_cpu_output_is_the_same_with_and_without_the_hot_tier() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    let layout = preset("deepseek-v4.1-flash", 65536).unwrap();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 5, &NoProgress).unwrap();
    let model = Model::open(&path).unwrap();
    let hot = dir.path().join("model.hot");
    hot_file(&model, &hot);
    let plain = bench(&model, &path, None, 1);
    let with = bench(&model, &path, Some(hot.clone()), 2);
    let reference = plain.prompts[0].repeats[0][0]
        .output_checksum
        .clone()
        .unwrap();
    let hot_runs = with.prompts[0].repeats.iter().flatten();
    for (a, b) in plain.prompts[0].repeats[0].iter().cycle().zip(hot_runs) {
        assert_eq!(a.output_checksum.as_ref(), Some(&reference), "{}", a.name);
        assert_eq!(
            b.output_checksum.as_ref(),
            Some(&reference),
            "{} hot",
            b.name
        );
        assert_eq!(a.io.totals.hot_hits, 0);
        assert!(b.io.totals.hot_hits > 0, "{}", b.name);
        let (pa, pb) = (
            a.io.prefill_per_token.unwrap(),
            b.io.prefill_per_token.unwrap(),
        );
        assert!(
            pb.hot_rows > 0.0 && pb.storage_rows < pa.storage_rows,
            "{}",
            b.name
        );
        let (da, db) = (a.io.decode_per_step.unwrap(), b.io.decode_per_step.unwrap());
        assert!(db.hot_rows > 0.0 && da.hot_rows == 0.0, "{}", b.name);
    }
    // Medians over the repeats: the same rows are hot in both, so the
    // counts of a deterministic prefill agree and the median is theirs.
    for (s, summary) in with.prompts[0].schedules.iter().enumerate() {
        let median = figure(summary, "io.prefill_per_token.hot_rows.median").unwrap();
        let runs: Vec<f64> = with.prompts[0]
            .repeats
            .iter()
            .map(|r| r[s].io.prefill_per_token.unwrap().hot_rows)
            .collect();
        assert!(
            median > 0.0 && runs.contains(&median),
            "{median} of {runs:?}"
        );
        assert!(figure(summary, "io.hot_hits.max").unwrap() > 0.0);
    }
    let report = with.hot.as_ref().expect("the report names the hot set");
    assert_eq!(report.rows, vec![600, 600]);
    assert!(plain.hot.is_none());
    let table = with.to_table();
    assert!(
        table.contains("hot/tok") && table.contains("hot set"),
        "{table}"
    );
    assert_eq!(table.matches("hot set").count(), 1, "loaded once: {table}");
    assert!(with.to_json().contains("\"decode_per_step\""));
}
