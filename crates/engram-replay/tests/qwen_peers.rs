//! The Qwen4-Exp peers (`llama-lazy`, `llama-readahead`, `omlx`,
//! `ds4-qwen`, `ds4-qwen-chunked`, `freetoken`) over real (synthetic)
//! Qwen3.8-Flash-Next files, GGUF bf16 and MLX 4-bit (three arrays a row):
//! the rows each hands out in prefill (layer and chunk sweeps, a prompt
//! longer than ds4's 8,192-token chunk is not needed: its chunk logic is
//! exercised with several ubatches per chunk) and decode equal the model's
//! own reads; the CPU compute gives every schedule `sync`'s checksum; a peer
//! of the other family is refused.

use std::path::Path;
use std::time::Duration;

use engram::codec::Encoding;
use engram::hash::Hasher;
use engram::io::IoConfig;
use engram::layout::{preset, Family};
use engram::model::{synth, Model, NoProgress};
use engram::testing::within;
use engram_replay::compute::ComputeSpec;
use engram_replay::driver::Sweep;
use engram_replay::hints::HintMode;
use engram_replay::schedule::{build, QwenPeer, ScheduleKind, ScheduleSetup};
use engram_replay::{run_bench, BenchConfig, Prompt};

/// About 3 MB of bf16 rows (9,984 rows of 320 bytes).
const SCALE: u64 = 32_768;
const UBATCH: u32 = 100;
const LIMIT: Duration = Duration::from_secs(120);

const PEERS: [QwenPeer; 6] = [
    QwenPeer::LlamaLazy,
    QwenPeer::LlamaReadahead,
    QwenPeer::Omlx,
    QwenPeer::Ds4Qwen,
    QwenPeer::Ds4QwenChunked,
    QwenPeer::FreeToken,
];

fn write(dir: &Path, format: &str) -> Model {
    let out = dir.join(format);
    let written = synth::synth_named(
        &out,
        format,
        "qwen3.8-flash-next",
        SCALE,
        None,
        5,
        &NoProgress,
    )
    .unwrap();
    Model::open(&written.path).unwrap()
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
    (0..n as u32).map(|i| (i * 7_919 + i / 5) % 4_000).collect()
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The model's own reads of the rows of `ids` (one table).
fn expected(model: &Model, ids: &[u32]) -> Vec<f32> {
    let rows: Vec<u64> = ids.iter().map(|&r| u64::from(r)).collect();
    let mut out = Vec::new();
    model.read_rows_f32(0, &rows, &mut out).unwrap();
    out
}

/// Prefill rows (both sweeps, several ubatches) and four decode steps of
/// every peer equal the model's reads.
fn check_rows(model: &Model) {
    let tokens = prompt(700);
    let hasher = Hasher::new(&model.layout).unwrap();
    let mut history = hasher.new_history();
    let mut ids = Vec::new();
    hasher.hash(&mut history, &tokens, None, &mut ids).unwrap();
    let want = expected(model, &ids);
    let layer = model.tables[0].layer_id;
    for peer in PEERS {
        if peer == QwenPeer::FreeToken && !cfg!(target_os = "linux") {
            continue;
        }
        for sweep in [Sweep::Layer, Sweep::Chunk] {
            let mut schedule = build(ScheduleKind::Qwen(peer), &setup(model)).unwrap();
            assert_eq!(schedule.name(), peer.name());
            let mut run = schedule.prefill(&tokens).unwrap();
            let ubatches: Vec<(u32, u32)> = (0..700)
                .step_by(UBATCH as usize)
                .map(|s| (s, (s + UBATCH).min(700)))
                .collect();
            let mut order = Vec::new();
            match sweep {
                Sweep::Layer => {
                    (0..3).for_each(|l| ubatches.iter().for_each(|&u| order.push((l, u))))
                }
                Sweep::Chunk => ubatches
                    .iter()
                    .for_each(|&u| (0..3).for_each(|l| order.push((l, u)))),
            }
            let (mut got, mut part) = (Vec::new(), Vec::new());
            for (l, (start, end)) in order {
                run.layer_start(l, start).unwrap();
                if l == layer {
                    run.wait(0, end, Some(&mut part)).unwrap();
                    assert_eq!(part.len(), (end - start) as usize * 16 * 160);
                    got.extend_from_slice(&part);
                }
            }
            drop(run);
            assert!(same_bits(&got, &want), "{peer:?} {sweep:?}");
            let mut steps = history.clone();
            for token in [11u32, 12, 13, 11] {
                let mut step_ids = Vec::new();
                hasher
                    .hash(&mut steps, &[token], None, &mut step_ids)
                    .unwrap();
                let mut stall = [Duration::ZERO];
                schedule.step_begin(token, &mut stall).unwrap();
                let mut rows = Vec::new();
                schedule.step_wait(0, Some(&mut rows)).unwrap();
                assert!(
                    same_bits(&rows, &expected(model, &step_ids)),
                    "{peer:?} decode"
                );
            }
            let io = schedule.io().totals;
            assert_eq!(io.rows_requested, (700 + 4) * 16, "{peer:?}");
            assert!(io.rows_unique <= io.rows_requested, "{peer:?}");
        }
    }
}

#[test]
fn every_peer_hands_out_the_models_rows_from_gguf_and_mlx_files() {
    within(LIMIT, || {
        let dir = tempfile::tempdir().unwrap();
        for format in ["gguf", "mlx"] {
            let model = write(dir.path(), format);
            if format == "mlx" {
                assert_eq!(model.tables[0].encoding, Encoding::Mlx4 { dim: 160 });
                assert_eq!(model.tables[0].shards[0].parts.len(), 3);
            }
            check_rows(&model);
        }
    });
}

#[test]
fn the_cpu_model_computes_syncs_output_under_every_qwen_schedule() {
    within(LIMIT, || {
        let dir = tempfile::tempdir().unwrap();
        let model = write(dir.path(), "gguf");
        let mut schedules = ScheduleKind::defaults(Family::Qwen4ExpPle);
        if !cfg!(target_os = "linux") {
            schedules.retain(|k| *k != ScheduleKind::Qwen(QwenPeer::FreeToken));
        }
        assert_eq!(schedules[0], ScheduleKind::Sync);
        assert_eq!(schedules.len(), 9);
        let tokens = prompt(412);
        let prompts = [Prompt::split("p", tokens, 400, 12).unwrap()];
        for sweep in [Sweep::Layer, Sweep::Chunk] {
            let config = BenchConfig {
                compute: ComputeSpec::parse("cpu:layers=4,dim=16,heads=2,ffn=32,conv=3").unwrap(),
                sweep,
                ubatch: 64,
                schedules: schedules.clone(),
                hints: HintMode::parse("draft:0.5,0.9").unwrap(),
                cold: true,
                ..BenchConfig::default()
            };
            let report = run_bench(&model, Path::new("m"), &prompts, &config, |_| {}).unwrap();
            let runs = &report.prompts[0].repeats[0];
            let sums: Vec<&str> = runs
                .iter()
                .map(|s| s.output_checksum.as_deref().expect("a checksum"))
                .collect();
            assert!(!sums[0].starts_with("error"), "{}", sums[0]);
            for (run, sum) in runs.iter().zip(&sums) {
                assert_eq!(*sum, sums[0], "{} against sync, {sweep:?}", run.name);
            }
        }
    });
}

#[test]
fn a_peer_of_the_other_family_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let qwen = write(dir.path(), "gguf");
    let err = build(ScheduleKind::Ds4, &setup(&qwen))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("ds4 schedule replays a deepseek runtime"),
        "{err}"
    );
    assert!(err.contains("llama-lazy"), "{err}");
    let path = dir.path().join("v41.gguf");
    let layout = preset("deepseek-v4.1-flash", 65_536).unwrap();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 3, &NoProgress).unwrap();
    let deepseek = Model::open(&path).unwrap();
    let err = build(ScheduleKind::Qwen(QwenPeer::Omlx), &setup(&deepseek))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("omlx schedule replays a qwen4exp runtime"),
        "{err}"
    );
    assert!(err.contains("ds4-linux"), "{err}");
    assert_eq!(
        ScheduleKind::parse_list("llama-readahead,freetoken").unwrap(),
        [
            ScheduleKind::Qwen(QwenPeer::LlamaReadahead),
            ScheduleKind::Qwen(QwenPeer::FreeToken)
        ]
    );
}
