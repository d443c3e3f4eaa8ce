//! `run_bench` end to end on a small synthetic model: every schedule
//! replays the same prompt and decode, reports consistent counts, and the
//! JSON document has the documented shape.

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::layout::preset;
use engram::model::{synth, Model, NoProgress};
use engram_replay::compute::ComputeSpec;
use engram_replay::driver::Sweep;
use engram_replay::hints::HintMode;
use engram_replay::schedule::ScheduleKind;
use engram_replay::{prompt, run_bench, BenchConfig, Report};

/// About 5.9K rows per table: megabytes on disk.
const SCALE: u64 = 65536;
const PREFILL: usize = 600;
const DECODE: usize = 12;

fn small_model(dir: &Path) -> (PathBuf, Model) {
    let path = dir.join("model.gguf");
    let layout = preset("deepseek-v4.1-flash", SCALE).unwrap();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 3, &NoProgress).unwrap();
    let model = Model::open(&path).unwrap();
    (path, model)
}

fn tokens() -> Vec<u32> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = prompt::repository_text(&root, PREFILL + DECODE).unwrap();
    let mut tokens = prompt::tokenize(&text).unwrap();
    tokens.truncate(PREFILL + DECODE);
    assert_eq!(tokens.len(), PREFILL + DECODE);
    tokens
}

fn bench(schedules: &str, sweep: Sweep, hints: HintMode) -> Report {
    bench_with("gpu:custom:2,40", schedules, sweep, hints)
}

fn bench_with(compute: &str, schedules: &str, sweep: Sweep, hints: HintMode) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = small_model(dir.path());
    let tokens = tokens();
    let (prompt, continuation) = tokens.split_at(PREFILL);
    let config = BenchConfig {
        compute: ComputeSpec::parse(compute).unwrap(),
        sweep,
        ubatch: 128,
        schedules: ScheduleKind::parse_list(schedules).unwrap(),
        hints,
        cold: true,
        ..BenchConfig::default()
    };
    let mut seen = Vec::new();
    let report = run_bench(&model, &path, prompt, continuation, &config, |name| {
        seen.push(name.to_string())
    })
    .unwrap();
    assert_eq!(seen.join(","), schedules);
    report
}

#[test]
fn every_schedule_replays_the_whole_prompt_and_decode() {
    let report = bench("sync,ds4,overlap,full", Sweep::Layer, HintMode::Draft(0.79));
    assert_eq!(report.schedules.len(), 4);
    let floor = 43.0 * 2e-6 * PREFILL as f64;
    for s in &report.schedules {
        assert_eq!(s.prefill.tokens, PREFILL, "{}", s.name);
        assert_eq!(s.decode.tokens, DECODE, "{}", s.name);
        // The stand-in never computes less than its profile asks for.
        assert!(s.prefill.compute_seconds >= floor * 0.999, "{}", s.name);
        assert!(s.decode.compute_seconds >= 43.0 * 40e-6 * DECODE as f64 * 0.999);
        let stall: f64 = s.prefill.stall_seconds_table.iter().sum();
        assert!((stall - s.prefill.stall_seconds).abs() < 1e-9);
        assert!(s.prefill.seconds >= s.prefill.compute_seconds);
        assert_eq!(s.decode.stall_us_table.len(), 2);
        assert_eq!(s.chunk_stall_seconds.len(), PREFILL.div_ceil(128));
        assert_eq!(s.step_stall_us.len(), DECODE);
        assert!(s.decode.stall_us.max >= s.decode.stall_us.p50);
        assert!(s.peak_rss_bytes > 0);
        assert!(
            s.output_checksum.is_none(),
            "the stand-in computes no output"
        );
    }
    // Every schedule asks for the same demand rows: 24 per token per table
    // (`full` adds its hints' rows on top).
    let demand = ((PREFILL + DECODE) * 48) as u64;
    let by_name = |n: &str| report.schedules.iter().find(|s| s.name == n).unwrap();
    assert_eq!(by_name("sync").io.rows_requested, demand);
    assert_eq!(by_name("ds4").io.rows_requested, demand);
    assert_eq!(by_name("overlap").io.rows_requested, demand);
    let full = by_name("full");
    assert!(full.io.rows_requested > demand, "draft hints add reads");
    assert!(
        full.io.cache_hits > 0,
        "right drafts are served from the cache"
    );
    for s in &report.schedules {
        assert!(s.io.rows_unique <= s.io.rows_requested);
        assert!(s.io.bytes_read > 0 && s.io.reads > 0);
    }
}

#[test]
fn the_json_document_has_the_documented_shape() {
    let report = bench("overlap", Sweep::Chunk, HintMode::None);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let s = &json["schedules"][0];
    assert_eq!(s["name"], "overlap");
    for key in ["tokens", "seconds", "compute_seconds", "stall_seconds"] {
        assert!(s["prefill"][key].is_number(), "prefill.{key}");
    }
    for key in ["tokens", "seconds", "compute_seconds", "tokens_per_s"] {
        assert!(s["decode"][key].is_number(), "decode.{key}");
    }
    for key in ["mean", "p50", "p90", "p99", "max"] {
        assert!(s["decode"]["stall_us"][key].is_number(), "stall_us.{key}");
        assert!(s["decode"]["stall_us_table"][1][key].is_number());
    }
    for key in [
        "rows_requested",
        "rows_unique",
        "cache_hits",
        "bytes_read",
        "reads",
    ] {
        assert!(s["io"][key].is_u64(), "io.{key}");
    }
    assert!(s["peak_rss_bytes"].is_u64());
    assert!(s.get("output_checksum").is_none());
    assert_eq!(json["sweep"], "chunk");
    let table = report.to_table();
    assert!(
        table.lines().nth(1).unwrap().starts_with("overlap"),
        "{table}"
    );
}

#[test]
fn a_plot_is_written_whole_or_not_at_all() {
    let report = bench("sync,overlap", Sweep::Layer, HintMode::None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stall.svg");
    engram_replay::plot::write_svg(&report, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("decode stall per step"));
    assert!(svg.contains("overlap"));
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left");
    let missing = dir.path().join("no/such/dir/plot.svg");
    let err = engram_replay::plot::write_svg(&report, &missing).unwrap_err();
    assert!(err.to_string().contains("plot.svg"), "{err}");
}

#[test]
fn the_cpu_model_computes_the_same_output_under_every_schedule() {
    let compute = "cpu:layers=15,dim=16,heads=2,ffn=32,conv=3";
    for sweep in [Sweep::Layer, Sweep::Chunk] {
        let report = bench_with(
            compute,
            "sync,ds4,ds4-linux,overlap,full",
            sweep,
            HintMode::Draft(0.5),
        );
        let sums: Vec<&str> = report
            .schedules
            .iter()
            .map(|s| {
                s.output_checksum
                    .as_deref()
                    .expect("the cpu model reports a checksum")
            })
            .collect();
        assert!(!sums[0].starts_with("error"), "{}", sums[0]);
        assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
    }
}
