//! Qwen4-Exp models written by third-party writers (PyPI `safetensors`,
//! `gguf`, `mlx`; `scripts/third_party_models.py`) open and deliver exactly
//! the values their formats define, as the writers' own decoders give
//! them: through the synchronous reader and the prefetch engine (prefill
//! waits and decode steps), with row ids equal to an independent
//! implementation of the hash.
//!
//! The models are made by `.ci/run` into the directory named by
//! `ENGRAM_THIRD_PARTY`; without it this test says so and checks nothing.

use std::path::PathBuf;

use engram::io::{open_source, IoConfig};
use engram::model::Model;
use engram::prefetch::{Engine, PrefetchConfig, RowFormat};
use serde_json::Value;

struct Case {
    name: String,
    path: PathBuf,
    /// The whole table's values as the writer's decoder gives them.
    values: Vec<f32>,
}

fn manifest() -> Option<(Value, Vec<Case>)> {
    let Some(dir) = std::env::var_os("ENGRAM_THIRD_PARTY") else {
        eprintln!("ENGRAM_THIRD_PARTY is not set: no third-party models to check (.ci/run makes them)");
        return None;
    };
    let dir = PathBuf::from(dir);
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    let json: Value = serde_json::from_str(&text).unwrap();
    let cases = json["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let bytes = std::fs::read(m["values"].as_str().unwrap()).unwrap();
            Case {
                name: m["name"].as_str().unwrap().to_string(),
                path: PathBuf::from(m["path"].as_str().unwrap()),
                values: bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            }
        })
        .collect();
    Some((json, cases))
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn third_party_models_give_their_writers_values() {
    let Some((manifest, cases)) = manifest() else {
        return;
    };
    let dim = manifest["config"]["row_dim"].as_u64().unwrap() as usize;
    let tokens: Vec<u32> = u64s(&manifest["tokens"]).into_iter().map(|t| t as u32).collect();
    let want_ids: Vec<u32> = manifest["row_ids"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| u64s(t).into_iter().map(|r| r as u32))
        .collect();
    assert!(!cases.is_empty());
    for case in &cases {
        let model = Model::open(&case.path).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let table = &model.layout.tables[0];
        assert_eq!(table.primes.iter().map(|&p| u64::from(p)).collect::<Vec<_>>(), u64s(&manifest["primes"]), "{}", case.name);
        assert_eq!(table.multipliers, u64s(&manifest["multipliers"]), "{}", case.name);
        let loc = &model.tables[0];
        assert_eq!(loc.rows as usize * dim, case.values.len(), "{}: stored rows", case.name);
        // Every row, decoded by the synchronous reader.
        let all: Vec<u64> = (0..loc.rows).collect();
        let mut got = Vec::new();
        model.read_rows_f32(0, &all, &mut got).unwrap();
        assert!(bits(&got) == bits(&case.values), "{}: decoded rows differ from the writer's", case.name);
        // The engine: row ids, prefill waits, decode steps.
        let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
        let config = PrefetchConfig {
            chunk_tokens: 64,
            first_chunk_tokens: 16,
            format: RowFormat::F32,
            ..PrefetchConfig::default()
        };
        let engine = Engine::for_model(&model, opened.source, config).unwrap();
        let mut seq = engine.sequence();
        let ids = seq.row_ids(&tokens, None).unwrap();
        assert_eq!(ids, want_ids, "{}: row ids", case.name);
        let expect = |rows: &[u32]| -> Vec<u32> {
            rows.iter()
                .flat_map(|&r| bits(&case.values[r as usize * dim..(r as usize + 1) * dim]))
                .collect()
        };
        let (prompt, decode) = tokens.split_at(tokens.len() - 8);
        let mut prefill = seq.prefill(prompt, None).unwrap();
        let mut upto = 0;
        while upto < prompt.len() {
            upto = (upto + 40).min(prompt.len());
            let view = prefill.wait(0, upto as u32).unwrap();
            let first = view.first_token() as usize;
            assert!(bits(&view.to_f32_vec()) == expect(&ids[first * 16..upto * 16]), "{}: prefill to {upto}", case.name);
        }
        drop(prefill);
        for (i, &token) in decode.iter().enumerate() {
            seq.step_begin(token).unwrap();
            let view = seq.step_wait(0).unwrap();
            let at = prompt.len() + i;
            assert!(bits(&view.to_f32_vec()) == expect(&ids[at * 16..(at + 1) * 16]), "{}: decode {i}", case.name);
        }
    }
}
