//! The `ds4` schedules (the peer's macOS and Linux read paths) over a real
//! (synthetic) model file: the rows they hand
//! out in prefill (layer and chunk sweeps, prompts of several 2,048-token
//! chunks) and decode must equal the model's own preads and the engine's
//! rows; a truncated file must end waits with a row-read error; dropping a
//! prefill mid-way must return promptly.

use std::path::Path;
use std::time::{Duration, Instant};

use engram::codec::{Encoding, ROW_DIM};
use engram::hash::Hasher;
use engram::io::IoConfig;
use engram::layout::preset;
use engram::model::{synth, Model, NoProgress};
use engram::testing::within;
use engram::Error;
use engram_replay::schedule::{build, PrefillRun, Schedule, ScheduleKind, ScheduleSetup};

/// About 6 MB of rows: 488 rows per column, 24 columns per table.
const SCALE: u64 = 32_768;
const UBATCH: u32 = 512;
const LIMIT: Duration = Duration::from_secs(120);

fn write_model(dir: &Path) -> Model {
    let path = dir.join("m.gguf");
    let layout = preset("deepseek-v4.1-flash", SCALE).unwrap();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 11, &NoProgress).unwrap();
    Model::open(&path).unwrap()
}

/// Writes a fresh model and runs `check` on it under the time limit.
fn with_model(check: impl FnOnce(Model) + Send + 'static) {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path());
    within(LIMIT, move || check(model));
}

fn setup(model: &Model) -> ScheduleSetup<'_> {
    ScheduleSetup {
        model,
        io: IoConfig::default(),
        f32_rows: true,
        cache_bytes: 0,
        lookup_hints: false,
        hot: None,
        prefill_order: Default::default(),
        ubatch: UBATCH as usize,
        hold_rows: false,
    }
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7_919 + i / 5) % 60_000)
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Sweep {
    /// Every ubatch through layer i before layer i + 1.
    Layer,
    /// Each ubatch through all layers before the next.
    Chunk,
}

/// Each table's f32 rows of the whole prompt, in token order.
type Rows = [Vec<f32>; 2];

/// Drives a prefill as a forward pass of `layers` layers would, waiting on
/// table `t` at `engram_layers[t]`, and collects the rows.
fn drive(run: &mut dyn PrefillRun, tokens: u32, sweep: Sweep, engram_layers: [u32; 2]) -> Rows {
    let layers = engram_layers[1] + 2;
    let ubatches: Vec<(u32, u32)> = (0..tokens)
        .step_by(UBATCH as usize)
        .map(|s| (s, (s + UBATCH).min(tokens)))
        .collect();
    let mut steps = Vec::new();
    match sweep {
        Sweep::Layer => (0..layers).for_each(|l| ubatches.iter().for_each(|&u| steps.push((l, u)))),
        Sweep::Chunk => ubatches
            .iter()
            .for_each(|&u| (0..layers).for_each(|l| steps.push((l, u)))),
    }
    let mut rows: Rows = [Vec::new(), Vec::new()];
    let mut part = Vec::new();
    for (layer, (start, end)) in steps {
        run.layer_start(layer, start).unwrap();
        for table in 0..2 {
            if layer == engram_layers[table] {
                run.wait(table, end, Some(&mut part)).unwrap();
                assert_eq!(part.len(), (end - start) as usize * 24 * ROW_DIM);
                rows[table].extend_from_slice(&part);
            }
        }
    }
    rows
}

/// The model's own preads of `table`'s rows for `ids` (`[token][table][column]`).
fn expected(model: &Model, ids: &[u32], table: usize) -> Vec<f32> {
    let rows: Vec<u64> = ids
        .chunks_exact(48)
        .flat_map(|token| token[table * 24..(table + 1) * 24].iter())
        .map(|&r| u64::from(r))
        .collect();
    let mut out = Vec::new();
    model.read_rows_f32(table, &rows, &mut out).unwrap();
    out
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn engram_layers(model: &Model) -> [u32; 2] {
    [model.tables[0].layer_id, model.tables[1].layer_id]
}

#[test]
fn prefill_and_decode_rows_match_model_reads_in_both_sweeps() {
    with_model(|model| {
        let tokens = prompt(5_000);
        let hasher = Hasher::new(&model.layout).unwrap();
        let mut history = hasher.new_history();
        let mut ids = Vec::new();
        hasher.hash(&mut history, &tokens, None, &mut ids).unwrap();
        let want = [expected(&model, &ids, 0), expected(&model, &ids, 1)];
        let runs = [ScheduleKind::Ds4, ScheduleKind::Ds4Linux]
            .into_iter()
            .flat_map(|kind| [(kind, Sweep::Layer), (kind, Sweep::Chunk)]);
        for (kind, sweep) in runs {
            let mut schedule = build(kind, &setup(&model)).unwrap();
            assert_eq!(schedule.name(), kind.name());
            let mut run = schedule.prefill(&tokens).unwrap();
            let got = drive(run.as_mut(), 5_000, sweep, engram_layers(&model));
            drop(run);
            for table in 0..2 {
                assert!(
                    same_bits(&got[table], &want[table]),
                    "{kind:?} {sweep:?} table {table}"
                );
            }
            check_decode(schedule.as_mut(), &model, &hasher, history.clone());
            let io = schedule.io().totals;
            assert_eq!(io.rows_requested, (5_000 + 4) * 48);
            assert!(io.rows_unique < io.rows_requested, "{io:?}");
            assert_eq!(io.reads, io.rows_unique);
            assert_eq!(io.cache_hits, 0);
            if kind == ScheduleKind::Ds4Linux {
                assert_eq!(io.bytes_read, io.rows_unique * 264);
            } else if cfg!(target_os = "linux") {
                // Uncached reads move the whole aligned page(s) of each row
                // (less only for rows in the file's last, partial page).
                assert!(io.bytes_read >= io.rows_unique * 4096 * 9 / 10, "{io:?}");
                assert!(io.bytes_read <= io.rows_unique * 8192, "{io:?}");
            }
        }
    });
}

/// Four decode steps after the prefill: synchronous reads, rows equal to
/// the model's, no stall left at the layer.
fn check_decode(
    schedule: &mut dyn Schedule,
    model: &Model,
    hasher: &Hasher,
    mut history: engram::hash::History,
) {
    for token in [17u32, 4_242, 17, 99] {
        let mut ids = Vec::new();
        hasher.hash(&mut history, &[token], None, &mut ids).unwrap();
        let mut stall = [Duration::ZERO; 2];
        schedule.step_begin(token, &mut stall).unwrap();
        assert!(
            stall.iter().all(|s| *s > Duration::ZERO),
            "reads count as stall"
        );
        for table in 0..2 {
            let mut rows = Vec::new();
            let waited = schedule.step_wait(table, Some(&mut rows)).unwrap();
            assert_eq!(waited, Duration::ZERO);
            assert!(
                same_bits(&rows, &expected(model, &ids, table)),
                "step table {table}"
            );
        }
    }
}

#[test]
fn prefill_rows_match_the_engine() {
    with_model(|model| {
        let tokens = prompt(4_500);
        let layers = engram_layers(&model);
        let mut rows = Vec::new();
        let kinds = [
            ScheduleKind::Overlap,
            ScheduleKind::Ds4,
            ScheduleKind::Ds4Linux,
        ];
        for kind in kinds {
            let mut schedule = build(kind, &setup(&model)).unwrap();
            let mut run = schedule.prefill(&tokens).unwrap();
            rows.push(drive(run.as_mut(), 4_500, Sweep::Layer, layers));
        }
        for (kind, peer) in kinds.iter().zip(&rows).skip(1) {
            for (table, (ds4, engine)) in peer.iter().zip(&rows[0]).enumerate() {
                assert!(same_bits(ds4, engine), "{kind:?} table {table}");
            }
        }
    });
}

#[test]
fn a_truncated_table_ends_the_wait_with_a_row_read_error() {
    with_model(|model| {
        // Cut the file a few rows into table 0: every later row reads short.
        let table0 = model.tables[0].clone();
        let cut = table0.start_offset() + 3 * table0.full_row_bytes() as u64;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(table0.first_file());
        file.unwrap().set_len(cut).unwrap();
        for kind in [ScheduleKind::Ds4, ScheduleKind::Ds4Linux] {
            let mut schedule = build(kind, &setup(&model)).unwrap();
            let mut run = schedule.prefill(&prompt(3_000)).unwrap();
            run.layer_start(0, 0).unwrap();
            run.layer_start(1, 0).unwrap();
            // Every wait gets the error, the first and any later one.
            for _ in 0..2 {
                match run.wait(0, UBATCH, None) {
                    Err(Error::RowRead { table: 0, file, .. }) => {
                        assert_eq!(file, table0.first_file())
                    }
                    other => {
                        panic!("{kind:?}: expected a row-read error of table 0, got {other:?}")
                    }
                }
            }
        }
    });
}

#[test]
fn table_one_before_its_gate_is_an_error_not_a_hang() {
    with_model(|model| {
        let mut schedule = build(ScheduleKind::Ds4, &setup(&model)).unwrap();
        let mut run = schedule.prefill(&prompt(1_000)).unwrap();
        run.layer_start(0, 0).unwrap();
        let early = run.wait(1, 100, None);
        assert!(matches!(early, Err(Error::InvalidArgument(_))), "{early:?}");
        assert!(matches!(
            run.wait(2, 100, None),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            run.wait(0, 1_001, None),
            Err(Error::InvalidArgument(_))
        ));
    });
}

#[test]
fn dropping_a_prefill_midway_returns_promptly() {
    with_model(|model| {
        let tokens = prompt(200_000);
        let mut schedule = build(ScheduleKind::Ds4, &setup(&model)).unwrap();
        let run = schedule.prefill(&tokens).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let started = Instant::now();
        drop(run);
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "drop took {took:?}");
        let io = schedule.io().totals;
        // Table 1 never started (no layer ran) and table 0 was cut short.
        assert!(io.rows_requested < 200_000 * 24, "{io:?}");
    });
}

/// A rough cold timing of the prefill read path: `DS4_BENCH_MODEL` names
/// the model, `DS4_BENCH_TOKENS` the prompt length (default 4,096). Each
/// schedule starts with the model file evicted from the page cache and is
/// driven as a layer sweep with no compute, so the time is the reads'.
/// Run: `cargo test --release -p engram-replay --test ds4 -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement on a large model named by DS4_BENCH_MODEL"]
fn cold_prefill_read_rate() {
    let path = std::env::var("DS4_BENCH_MODEL").expect("set DS4_BENCH_MODEL to a model file");
    let tokens: u32 = std::env::var("DS4_BENCH_TOKENS").map_or(4_096, |n| n.parse().unwrap());
    let model = Model::open(&path).unwrap();
    let prompt = prompt(tokens as usize);
    for kind in [ScheduleKind::Ds4, ScheduleKind::Overlap] {
        for loc in &model.tables {
            let how = engram::io::cachectl::evict(&std::fs::File::open(loc.first_file()).unwrap());
            assert!(how.is_ok(), "evict {}: {how:?}", loc.first_file().display());
        }
        let mut schedule = build(kind, &setup(&model)).unwrap();
        let started = Instant::now();
        let mut run = schedule.prefill(&prompt).unwrap();
        let mut split = Vec::new();
        for (table, layer) in [(0, 1), (1, 2)] {
            run.layer_start(layer, 0).unwrap();
            for upto in (UBATCH..tokens + UBATCH).step_by(UBATCH as usize) {
                run.wait(table, upto.min(tokens), None).unwrap();
            }
            split.push(started.elapsed());
        }
        drop(run);
        let took = started.elapsed();
        let io = schedule.io().totals;
        if kind == ScheduleKind::Ds4 {
            cold_decode_steps(schedule.as_mut(), &model);
        }
        println!(
            "{}: {tokens} tokens cold: table 0 done {:.2?}, table 1 done {:.2?}; \
             {} rows requested, {} unique, {} reads, {:.1} MB; {:.0} unique rows/s",
            kind.name(),
            split[0],
            split[1],
            io.rows_requested,
            io.rows_unique,
            io.reads,
            io.bytes_read as f64 / 1e6,
            io.rows_unique as f64 / took.as_secs_f64()
        );
    }
}

/// Times 32 ds4 decode steps on an evicted model: each step's synchronous
/// reads (48 serial preads) are its stall.
fn cold_decode_steps(schedule: &mut dyn Schedule, model: &Model) {
    for loc in &model.tables {
        let _ = engram::io::cachectl::evict(&std::fs::File::open(loc.first_file()).unwrap());
    }
    let mut stall = [Duration::ZERO; 2];
    let steps = 32;
    for token in (0..steps).map(|i| 1_000 + i * 37) {
        schedule.step_begin(token, &mut stall).unwrap();
    }
    println!(
        "ds4 decode cold: {steps} steps, mean read stall per step: table 0 {:.2?}, table 1 {:.2?}",
        stall[0] / steps,
        stall[1] / steps
    );
}
