//! `run_bench` end to end on a small synthetic model: every schedule
//! replays the same prompt and decode, reports consistent counts, and the
//! JSON document has the documented shape.

use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::layout::preset;
use engram::model::{synth, Model, NoProgress};
use engram_replay::compute::ComputeSpec;
use engram_replay::device::DeviceMode;
use engram_replay::driver::Sweep;
use engram_replay::hints::HintMode;
use engram_replay::report::ScheduleReport;
use engram_replay::schedule::ScheduleKind;
use engram_replay::{prompt, run_bench, BenchConfig, Progress, Prompt, Report};

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
    let config = BenchConfig {
        compute: ComputeSpec::parse(compute).unwrap(),
        sweep,
        ubatch: 128,
        schedules: ScheduleKind::parse_list(schedules).unwrap(),
        hints,
        cold: true,
        ..BenchConfig::default()
    };
    let report = bench_config(&config, &[prompt_of(tokens())]);
    assert_eq!(report.prompts.len(), 1);
    report
}

fn prompt_of(tokens: Vec<u32>) -> Prompt {
    Prompt::split("readme", tokens, PREFILL, DECODE).unwrap()
}

/// Runs `config` over `prompts` on a fresh small model; checks the runs
/// were announced in the interleaved order.
fn bench_config(config: &BenchConfig, prompts: &[Prompt]) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let (path, model) = small_model(dir.path());
    let mut seen = Vec::new();
    let report = run_bench(&model, &path, prompts, config, |event| {
        if let Progress::Run { schedule, .. } = event {
            seen.push(schedule.to_string())
        }
    })
    .unwrap();
    let names: Vec<&str> = config.schedules.iter().map(|k| k.name()).collect();
    let once = names.join(",");
    let expected = vec![once.as_str(); config.repeat * prompts.len()].join(",");
    assert_eq!(seen.join(","), expected, "s1, s2, .., s1, s2, ..");
    report
}

/// The first prompt's first repeat: one run of every schedule.
fn first_run(report: &Report) -> &[ScheduleReport] {
    &report.prompts[0].repeats[0]
}

#[test]
fn every_schedule_replays_the_whole_prompt_and_decode() {
    let report = bench(
        "sync,ds4,ds4-linux,overlap,full",
        Sweep::Layer,
        HintMode::DEFAULT,
    );
    let run = first_run(&report);
    assert_eq!(run.len(), 5);
    let floor = 43.0 * 2e-6 * PREFILL as f64;
    for s in run {
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
    let by_name = |n: &str| run.iter().find(|s| s.name == n).unwrap();
    assert_eq!(by_name("sync").io.totals.rows_requested, demand);
    assert_eq!(by_name("ds4").io.totals.rows_requested, demand);
    assert_eq!(by_name("ds4-linux").io.totals.rows_requested, demand);
    assert_eq!(by_name("overlap").io.totals.rows_requested, demand);
    let full = by_name("full");
    assert!(
        full.io.totals.rows_requested > demand,
        "draft hints add reads"
    );
    assert!(
        full.io.totals.cache_hits > 0,
        "right drafts are served from the cache"
    );
    // Both kinds of hint were given and resolved by the steps after them;
    // the other schedules take none.
    let used = full.io.hints.as_ref().expect("full reports its hints");
    for kind in [&used.draft, &used.alternative] {
        assert!(kind.rows_read + kind.rows_dropped > 0, "{used:?}");
        assert!(kind.rows_used <= kind.rows_read, "{used:?}");
    }
    assert_eq!(
        by_name("overlap")
            .io
            .hints
            .as_ref()
            .unwrap()
            .draft
            .rows_read,
        0
    );
    for s in run {
        assert!(s.io.totals.rows_unique <= s.io.totals.rows_requested);
        assert!(s.io.totals.bytes_read > 0 && s.io.totals.reads > 0);
        // Hashing, reads and wake-ups cost the process some CPU.
        assert!(s.cpu.prefill_seconds > 0.0, "{}: {:?}", s.name, s.cpu);
        assert!(s.cpu.prefill_us_per_token > 0.0 && s.cpu.decode_us_per_step > 0.0);
        assert!(s.floor.is_none(), "no device, no floor");
    }
}

#[test]
fn the_json_document_has_the_documented_shape() {
    let report = bench("overlap", Sweep::Chunk, HintMode::None);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let s = &json["prompts"][0]["repeats"][0][0];
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
    for key in [
        "prefill_seconds",
        "decode_seconds",
        "prefill_us_per_token",
        "decode_us_per_step",
    ] {
        assert!(s["cpu"][key].is_number(), "cpu.{key}");
    }
    assert!(s.get("output_checksum").is_none());
    assert_eq!(json["sweep"], "chunk");
    assert_eq!(json["repeat"], 1);
    assert!(json["about"]["floor.prefill_stall_seconds"].is_string());
    let summary = &json["prompts"][0]["schedules"][0];
    assert_eq!(summary["name"], "overlap");
    assert!(summary["prefill"]["stall_seconds"]["median"].is_number());
    let table = report.to_table();
    assert!(table.lines().any(|l| l.starts_with("overlap ")), "{table}");
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
            HintMode::parse("draft:0.5,0.9").unwrap(),
        );
        let sums: Vec<&str> = first_run(&report)
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

/// `schedules` against the stand-in GPU at 2 us per prefill token and layer
/// and 40 us per decode layer (43 layers),
/// prefilled `ubatch` tokens at a time, without hints.
fn stand_in(schedules: &str, ubatch: usize) -> BenchConfig {
    BenchConfig {
        compute: ComputeSpec::parse("gpu:custom:2,40").unwrap(),
        ubatch,
        schedules: ScheduleKind::parse_list(schedules).unwrap(),
        hints: HintMode::None,
        ..BenchConfig::default()
    }
}

#[test]
fn repeats_are_interleaved_and_summarized_with_ratios_within_each() {
    let config = BenchConfig {
        repeat: 3,
        ..stand_in("ds4,overlap", 128)
    };
    let report = bench_config(&config, &[prompt_of(tokens())]);
    let p = &report.prompts[0];
    assert_eq!(p.repeats.len(), 3);
    assert!(p.repeats.iter().all(|r| r.len() == 2));
    // The summary's median is the middle of the three repeats' values.
    let mut stalls: Vec<f64> = p
        .repeats
        .iter()
        .map(|r| r[1].prefill.stall_seconds)
        .collect();
    stalls.sort_by(f64::total_cmp);
    let s = &p.schedules[1]["prefill"]["stall_seconds"];
    assert_eq!(s["median"].as_f64().unwrap(), stalls[1]);
    assert_eq!(s["min"].as_f64().unwrap(), stalls[0]);
    assert_eq!(s["max"].as_f64().unwrap(), stalls[2]);
    let ratio = p
        .ratios
        .iter()
        .find(|r| r.figure == "cpu.decode_us_per_step")
        .unwrap();
    assert_eq!(
        (ratio.schedule.as_str(), ratio.over.as_str()),
        ("overlap", "ds4")
    );
    assert_eq!(ratio.count, 3);
    let table = report.to_table();
    assert!(table.contains("overlap / ds4"), "{table}");
}

#[test]
fn a_known_device_gives_every_schedule_a_floor() {
    // 2,000 reads/s: the prompt's unique rows take far longer than the
    // stand-in's compute, so the floor is positive.
    let config = BenchConfig {
        device: DeviceMode::Iops(2_000.0),
        ..stand_in("sync,overlap", 128)
    };
    let report = bench_config(&config, &[prompt_of(tokens())]);
    assert_eq!(report.device.as_ref().unwrap().source, "given");
    for s in first_run(&report) {
        let floor = s.floor.as_ref().expect("a floor with a known device");
        // Rows of both tables / IOPS, less the compute before the waits.
        assert!(floor.unique_reads > 0 && floor.unique_reads <= (PREFILL * 48) as u64);
        let bound = floor.unique_reads as f64 / 2_000.0;
        assert!(floor.prefill_stall_seconds > 0.0 && floor.prefill_stall_seconds <= bound);
        let ratio = floor.stall_over_floor.unwrap();
        assert!((ratio - s.prefill.stall_seconds / floor.prefill_stall_seconds).abs() < 1e-9);
    }
}

#[test]
fn a_corpus_gives_one_result_per_prompt_and_geometric_means() {
    let all = tokens();
    let half = all.len() / 2;
    let split = |t: &[u32]| Prompt::split("p", t.to_vec(), 200, 4).unwrap();
    let prompts = [split(&all[..half]), split(&all[half..])];
    let config = stand_in("sync,overlap", 100);
    let report = bench_config(&config, &prompts);
    assert_eq!(report.prompts.len(), 2);
    let g = report
        .geomean
        .iter()
        .find(|r| r.figure == "cpu.prefill_us_per_token")
        .unwrap();
    assert_eq!(g.count, 2);
    let medians: Vec<f64> = report
        .prompts
        .iter()
        .map(|p| {
            let r = p.ratios.iter().find(|r| r.figure == g.figure).unwrap();
            r.value.unwrap().median
        })
        .collect();
    let expected = (medians[0] * medians[1]).sqrt();
    assert!((g.value.unwrap().median - expected).abs() < 1e-9 * expected);
    assert!(report.to_table().contains("geometric mean over 2 prompts"));
}

#[test]
fn a_corpus_directory_is_read_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        prompt::repository_text(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), 400).unwrap();
    std::fs::write(dir.path().join("b.txt"), &text).unwrap();
    std::fs::write(dir.path().join("a.txt"), &text).unwrap();
    std::fs::write(dir.path().join(".hidden"), "x").unwrap();
    let prompts = prompt::corpus(dir.path(), 300, 10).unwrap();
    let names: Vec<&str> = prompts
        .iter()
        .map(|p| p.name.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(names, ["a.txt", "b.txt"]);
    assert!(prompts
        .iter()
        .all(|p| p.prompt.len() == 300 && p.continuation.len() == 10));
    let short = prompt::corpus(dir.path(), 1_000_000, 0).unwrap_err();
    assert!(short.to_string().contains("a.txt"), "{short}");
    let empty = tempfile::tempdir().unwrap();
    let none = prompt::corpus(empty.path(), 10, 0).unwrap_err();
    assert!(none.to_string().contains("no prompt file"), "{none}");
}

#[test]
fn rows_handed_back_once_taken_give_the_output_of_rows_held_to_the_next_wait() {
    // Waits as wide as the engine's ring (2,048 tokens) over a longer
    // prompt: once a wait's rows are handed back, the readers overwrite
    // their slots with the next window's, so a copy taken after that would
    // change the output.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (prefill, decode) = (3_000, 2);
    let text = prompt::repository_text(&root, prefill + decode).unwrap();
    let all = prompt::tokenize(&text).unwrap();
    let prompts = [Prompt::split("wide", all, prefill, decode).unwrap()];
    let sums: Vec<String> = [false, true]
        .into_iter()
        .flat_map(|hold_rows| {
            let config = BenchConfig {
                compute: ComputeSpec::parse("cpu:layers=15,dim=16,heads=2,ffn=32,conv=3").unwrap(),
                ubatch: 512,
                wait_tokens: 2_048,
                hold_rows,
                schedules: ScheduleKind::parse_list("sync,overlap").unwrap(),
                hints: HintMode::None,
                ..BenchConfig::default()
            };
            let report = bench_config(&config, &prompts);
            assert_eq!(report.hold_rows, hold_rows);
            first_run(&report)
                .iter()
                .map(|s| s.output_checksum.clone().expect("a checksum"))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!sums[0].starts_with("error"), "{}", sums[0]);
    assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
}
