//! Qwen4-Exp models written by third-party writers (PyPI `safetensors`,
//! `gguf`, `mlx`; `scripts/third_party_models.py`) open and deliver exactly
//! the values their formats define, as the writers' own decoders give
//! them: through the synchronous reader and the prefetch engine (prefill
//! waits and decode steps), with row ids equal to an independent
//! implementation of the hash.
//!
//! The models are made by `.ci/run` into the directory named by
//! `ENGRAM_THIRD_PARTY`; without it this test says so and checks nothing.

use engram::io::{open_source, IoConfig};
use engram::model::Model;
use engram::prefetch::{Engine, PrefetchConfig, RowFormat};
use engram::testing::third_party;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn third_party_models_give_their_writers_values() {
    let Some(tp) = third_party() else {
        return;
    };
    let dim = tp.row_dim;
    assert!(!tp.models.is_empty());
    for case in &tp.models {
        let model = Model::open(&case.path).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let table = &model.layout.tables[0];
        let primes: Vec<u64> = table.primes.iter().map(|&p| u64::from(p)).collect();
        assert_eq!(primes, tp.primes, "{}", case.name);
        assert_eq!(table.multipliers, tp.multipliers, "{}", case.name);
        let loc = &model.tables[0];
        assert_eq!(
            loc.rows as usize * dim,
            case.values.len(),
            "{}: stored rows",
            case.name
        );
        // Every row, decoded by the synchronous reader.
        let all: Vec<u64> = (0..loc.rows).collect();
        let mut got = Vec::new();
        model.read_rows_f32(0, &all, &mut got).unwrap();
        assert!(
            bits(&got) == case.values,
            "{}: decoded rows differ from the writer's",
            case.name
        );
        // The engine: row ids, prefill waits, decode steps.
        let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
        let config = PrefetchConfig::default()
            .with_chunk_tokens(64)
            .with_first_chunk_tokens(16)
            .with_format(RowFormat::F32);
        let engine = Engine::for_model(&model, opened.source, config).unwrap();
        let mut seq = engine.sequence();
        let ids = seq.row_ids(&tp.tokens, None).unwrap();
        assert_eq!(ids, tp.row_ids, "{}: row ids", case.name);
        let (prompt, decode) = tp.tokens.split_at(tp.tokens.len() - 8);
        let mut prefill = seq.prefill(prompt, None).unwrap();
        let mut upto = 0;
        while upto < prompt.len() {
            upto = (upto + 40).min(prompt.len());
            let view = prefill.wait(0, upto as u32).unwrap();
            let first = view.first_token() as usize;
            let want = case.rows(&ids[first * 16..upto * 16], dim);
            assert!(
                bits(&view.to_f32_vec()) == want,
                "{}: prefill to {upto}",
                case.name
            );
        }
        drop(prefill);
        for (i, &token) in decode.iter().enumerate() {
            seq.step_begin(token).unwrap();
            let view = seq.step_wait(0).unwrap();
            let at = prompt.len() + i;
            let want = case.rows(&ids[at * 16..(at + 1) * 16], dim);
            assert!(
                bits(&view.to_f32_vec()) == want,
                "{}: decode {i}",
                case.name
            );
        }
    }
}
