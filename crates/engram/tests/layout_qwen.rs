//! The Qwen4-Exp (Qwen3.8-Flash-Next) PLE layout and hash: the released
//! constants, parameter checks, and row ids against the vectors of the
//! independent Python reference (scripts/qwen4exp_ref.py) through every way a
//! sequence reaches the hasher: one shot, chunks, one token at a time,
//! snapshots, forks and rollbacks.

use engram::hash::{Hasher, History};
use engram::layout::{self, Family, Layout, QwenParams};
use engram::testing::{json_token_rows, json_u64s, qwen_vector_layout, qwen_vectors};
use engram::Error;
use serde_json::Value;

const PRESET: &str = "qwen3.8-flash-next";

fn released() -> QwenParams {
    QwenParams {
        vocab_size: 248_320,
        ngram_size: 3,
        heads_per_ngram: 8,
        ngram_vocab_size_base: 20_000_000,
        make_ngram_vocab_size_divisible_by: 128,
        seed: 1234,
        eos_token_id: 248_044,
        layer_ids: vec![1],
        row_dim: 160,
    }
}

#[test]
fn released_layout_matches_the_published_constants() {
    let l = layout::preset(PRESET, 1).unwrap();
    assert_eq!(l, Layout::derive_qwen(&released()).unwrap());
    assert_eq!(l.family, Family::Qwen4ExpPle);
    assert_eq!(l.layer_ids(), vec![1]);
    assert_eq!((l.max_ngram_size, l.n_heads, l.head_dim), (3, 8, 160));
    assert_eq!(l.columns(), 16);
    assert_eq!(l.vocab_size(), 248_320);
    assert_eq!(l.compressed_vocab_size, 248_320);
    assert_eq!(l.pad_compressed_id, 248_044);
    assert!(l
        .token_map
        .iter()
        .enumerate()
        .all(|(t, &id)| id as usize == t));
    let t = &l.tables[0];
    assert_eq!(
        t.multipliers,
        vec![23_703_573_157_769, 20_109_073_645_365, 8_052_911_324_071]
    );
    assert_eq!(
        t.primes,
        vec![
            20_000_003, 20_000_023, 20_000_033, 20_000_047, 20_000_059, 20_000_063, 20_000_069,
            20_000_077, 20_000_081, 20_000_093, 20_000_107, 20_000_147, 20_000_153, 20_000_159,
            20_000_161, 20_000_171
        ]
    );
    let mut sum = 0u32;
    for (p, o) in t.primes.iter().zip(&t.offsets) {
        assert_eq!(*o, sum);
        sum += p;
    }
    assert_eq!(t.rows, 320_001_446);
    assert_eq!(t.stored_rows, 320_001_536);
    // The multipliers keep every product of an in-vocabulary id below 2^63.
    assert!(t.multipliers.iter().all(|&m| m * 248_319 < 1 << 63));
}

#[test]
fn a_second_ple_layer_takes_the_next_primes_and_seed() {
    let two = Layout::derive_qwen(&QwenParams {
        layer_ids: vec![1, 5],
        ..released()
    })
    .unwrap();
    let one = layout::preset(PRESET, 1).unwrap();
    assert_eq!(two.tables[0], one.tables[0]);
    let second = &two.tables[1];
    assert_eq!(second.layer_id, 5);
    assert!(second.primes[0] > 20_000_171, "{:?}", second.primes);
    assert_eq!(second.offsets[0], 0, "offsets run within each table");
    assert_eq!(
        second.multipliers,
        engram::layout::derive_qwen_multipliers(1234, 1, 3, 248_320).unwrap()
    );
    assert_ne!(second.multipliers, one.tables[0].multipliers);
    assert_eq!(second.stored_rows % 128, 0);
}

/// An edit of the released parameters that makes them invalid.
type Change = fn(&mut QwenParams);

fn rejects(change: impl FnOnce(&mut QwenParams)) -> String {
    let mut p = released();
    change(&mut p);
    match Layout::derive_qwen(&p) {
        Err(e @ Error::Layout { .. }) => e.to_string(),
        other => panic!("expected a layout error, got {other:?}"),
    }
}

#[test]
fn bad_parameters_are_refused_naming_the_field() {
    let cases: Vec<(&str, Change)> = vec![
        ("vocab_size", |p| p.vocab_size = 0),
        ("vocab_size", |p| p.vocab_size = (1 << 24) + 1),
        ("eos_token_id", |p| p.eos_token_id = 248_320),
        ("ngram_size", |p| p.ngram_size = 1),
        ("ngram_size", |p| p.ngram_size = 17),
        ("heads_per_ngram", |p| p.heads_per_ngram = 0),
        ("heads_per_ngram", |p| p.heads_per_ngram = 1 << 20),
        ("ngram_vocab_size_base", |p| p.ngram_vocab_size_base = 0),
        ("ngram_vocab_size_base", |p| {
            p.ngram_vocab_size_base = 1 << 40
        }),
        // No 16 primes fit below 2^32 from here.
        ("ngram_vocab_size_base", |p| {
            p.ngram_vocab_size_base = u64::from(u32::MAX) - 100
        }),
        ("make_ngram_vocab_size_divisible_by", |p| {
            p.make_ngram_vocab_size_divisible_by = 0
        }),
        ("layer_ids", |p| p.layer_ids.clear()),
        ("layer_ids[1]", |p| p.layer_ids = vec![4, 4]),
        ("row_dim", |p| p.row_dim = 0),
        // Sixteen heads of about 2^28 rows each do not fit u32 row ids.
        ("rows", |p| p.ngram_vocab_size_base = 1 << 28),
    ];
    for (field, change) in cases {
        let msg = rejects(change);
        assert!(msg.contains(field), "{field}: {msg}");
    }
}

#[test]
fn stored_rows_are_validated() {
    let mut l = layout::preset(PRESET, 4096).unwrap();
    l.tables[0].stored_rows = l.tables[0].rows - 1;
    let err = l.validate().unwrap_err().to_string();
    assert!(err.contains("stored_rows"), "{err}");
    // A DeepSeek table is stored exactly its rows.
    let mut d = layout::preset("deepseek-v4.1-flash", 4096).unwrap();
    assert!(d.tables.iter().all(|t| t.stored_rows == t.rows));
    d.tables[1].stored_rows += 1;
    let err = d.validate().unwrap_err().to_string();
    assert!(err.contains("stored_rows"), "{err}");
    // A qwen4exp layout hashes raw ids: a folded map is refused.
    let mut q = layout::preset(PRESET, 4096).unwrap();
    let mut map = q.token_map.to_vec();
    map[7] = 8;
    q.token_map = map.into();
    let err = q.validate().unwrap_err().to_string();
    assert!(err.contains("token_map[7]"), "{err}");
}

#[test]
fn out_of_vocabulary_tokens_are_refused_naming_token_index_and_position() {
    let hasher = Hasher::new(&layout::preset(PRESET, 4096).unwrap()).unwrap();
    let mut history = hasher.new_history();
    let mut rows = Vec::new();
    hasher.hash(&mut history, &[1, 2], None, &mut rows).unwrap();
    let before = history.clone();
    let err = hasher
        .hash(&mut history, &[5, 248_319, 248_320], None, &mut rows)
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{msg}");
    for part in ["248320", "index 2", "position 4"] {
        assert!(msg.contains(part), "{part}: {msg}");
    }
    assert_eq!(history, before, "a refused call changes nothing");
    assert_eq!(rows.len(), 2 * 16);
}

struct Case {
    name: String,
    tokens: Vec<u32>,
    mask: Option<Vec<bool>>,
    want: Vec<u32>,
}

fn ids(v: &Value) -> Vec<u32> {
    json_u64s(v).iter().map(|&t| t as u32).collect()
}

fn mask_of(v: Option<&Value>) -> Option<Vec<bool>> {
    v.map(|m| json_u64s(m).iter().map(|&m| m != 0).collect())
}

fn cases(config: &Value) -> Vec<Case> {
    let config_name = config["name"].as_str().unwrap();
    config["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: format!("{config_name}/{}", c["name"].as_str().unwrap()),
            tokens: ids(&c["tokens"]),
            mask: mask_of(c.get("attention_mask")),
            want: json_token_rows(c),
        })
        .collect()
}

/// Hashes `tokens` in chunks of `chunk` on one history.
fn chunked(hasher: &Hasher, case: &Case, chunk: usize, history: &mut History) -> Vec<u32> {
    let mut rows = Vec::new();
    for (i, piece) in case.tokens.chunks(chunk).enumerate() {
        let mask = case
            .mask
            .as_ref()
            .map(|m| &m[i * chunk..i * chunk + piece.len()]);
        hasher.hash(history, piece, mask, &mut rows).unwrap();
    }
    rows
}

#[test]
fn layouts_match_the_reference() {
    let doc = qwen_vectors();
    let configs = doc["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 4);
    for config in configs {
        let l = qwen_vector_layout(config).unwrap();
        let name = config["name"].as_str().unwrap();
        let want = config["tables"].as_array().unwrap();
        assert_eq!(l.tables.len(), want.len(), "{name}");
        for (t, w) in l.tables.iter().zip(want) {
            assert_eq!(
                u64::from(t.layer_id),
                w["layer_id"].as_u64().unwrap(),
                "{name}"
            );
            assert_eq!(t.multipliers, json_u64s(&w["multipliers"]), "{name}");
            let primes: Vec<u64> = t.primes.iter().map(|&p| u64::from(p)).collect();
            assert_eq!(primes, json_u64s(&w["primes"]), "{name}");
            let offsets: Vec<u64> = t.offsets.iter().map(|&o| u64::from(o)).collect();
            assert_eq!(offsets, json_u64s(&w["offsets"]), "{name}");
            assert_eq!(t.rows, w["rows"].as_u64().unwrap(), "{name}");
            assert_eq!(t.stored_rows, w["stored_rows"].as_u64().unwrap(), "{name}");
        }
    }
}

#[test]
fn rows_match_the_reference_one_shot_chunked_and_one_token_at_a_time() {
    let doc = qwen_vectors();
    for config in doc["configs"].as_array().unwrap() {
        let hasher = Hasher::new(&qwen_vector_layout(config).unwrap()).unwrap();
        assert_eq!(hasher.family(), Family::Qwen4ExpPle);
        for case in cases(config) {
            let rpt = hasher.rows_per_token();
            assert_eq!(case.want.len(), case.tokens.len() * rpt, "{}", case.name);
            for chunk in [case.tokens.len(), 1, 2, 3, 5, 7] {
                let mut history = hasher.new_history();
                let got = chunked(&hasher, &case, chunk, &mut history);
                for (i, (g, w)) in got.chunks(rpt).zip(case.want.chunks(rpt)).enumerate() {
                    assert_eq!(g, w, "{} in chunks of {chunk}: token {i}", case.name);
                }
                assert_eq!(history.position(), case.tokens.len() as u64);
            }
        }
    }
}

#[test]
fn rows_match_the_reference_across_snapshots_and_forks() {
    let doc = qwen_vectors();
    for config in doc["configs"].as_array().unwrap() {
        let hasher = Hasher::new(&qwen_vector_layout(config).unwrap()).unwrap();
        let rpt = hasher.rows_per_token();
        for case in cases(config) {
            for split in 0..=case.tokens.len() {
                let mask = |r: std::ops::Range<usize>| case.mask.as_ref().map(|m| m[r].to_vec());
                let mut first = hasher.new_history();
                let mut rows = Vec::new();
                let head_mask = mask(0..split);
                hasher
                    .hash(
                        &mut first,
                        &case.tokens[..split],
                        head_mask.as_deref(),
                        &mut rows,
                    )
                    .unwrap();
                let snap = first.snapshot();
                assert_eq!(snap.position(), split as u64);
                let tail_mask = mask(split..case.tokens.len());
                let tail = &case.tokens[split..];
                // The restored history and a fork continue as the original.
                let mut restored = History::from_snapshot(&snap);
                let mut fork = first.clone();
                for (what, history) in [("snapshot", &mut restored), ("fork", &mut fork)] {
                    let mut more = Vec::new();
                    hasher
                        .hash(history, tail, tail_mask.as_deref(), &mut more)
                        .unwrap();
                    assert_eq!(
                        more,
                        case.want[split * rpt..],
                        "{} {what} at {split}",
                        case.name
                    );
                }
                assert_eq!(rows, case.want[..split * rpt], "{}", case.name);
            }
        }
    }
}

#[test]
fn rows_match_the_reference_after_rollback() {
    let doc = qwen_vectors();
    for config in doc["configs"].as_array().unwrap() {
        let hasher = Hasher::new(&qwen_vector_layout(config).unwrap()).unwrap();
        let rollbacks = config["rollbacks"].as_array().unwrap();
        assert!(rollbacks.len() >= 3);
        for r in rollbacks {
            let name = format!("{}/{}", config["name"], r["name"]);
            let first = ids(&r["tokens"]);
            let to = r["rollback_to"].as_u64().unwrap();
            let then = ids(&r["then"]);
            let then_mask = mask_of(r.get("then_attention_mask"));
            let want = json_token_rows(r);
            // Decoded one token at a time, rolled back, continued.
            let mut history = hasher.new_history();
            for &t in &first {
                hasher
                    .hash(&mut history, &[t], None, &mut Vec::new())
                    .unwrap();
            }
            history.rollback(to).unwrap();
            assert_eq!(history.position(), to);
            let mut got = Vec::new();
            hasher
                .hash(&mut history, &then, then_mask.as_deref(), &mut got)
                .unwrap();
            assert_eq!(got, want, "{name}");
            // The same from a snapshot taken after the first tokens: it
            // holds the last ngram_size - 1 ids, so it rolls back only as
            // far as they reach and refuses anything earlier.
            let mut whole = hasher.new_history();
            hasher
                .hash(&mut whole, &first, None, &mut Vec::new())
                .unwrap();
            let mut restored = History::from_snapshot(&whole.snapshot());
            let context = config["config"]["ngram_size"].as_u64().unwrap() - 1;
            let held_from = (first.len() as u64).saturating_sub(context);
            if to.saturating_sub(context) >= held_from {
                restored.rollback(to).unwrap();
                let mut again = Vec::new();
                hasher
                    .hash(&mut restored, &then, then_mask.as_deref(), &mut again)
                    .unwrap();
                assert_eq!(again, want, "{name} from a snapshot");
            } else {
                assert!(restored.rollback(to).is_err(), "{name}");
            }
        }
    }
}

#[test]
fn an_eos_current_token_hashes_with_its_context_and_resets_the_next() {
    // The rule on the release, checked on the rows themselves: the token
    // after an EOS has the rows it has at a sequence start, and an EOS with
    // different predecessors gets different rows.
    let l = layout::preset(PRESET, 1).unwrap();
    let eos = l.pad_compressed_id;
    let hasher = Hasher::new(&l).unwrap();
    let rows = |tokens: &[u32], mask: Option<&[bool]>| {
        let mut out = Vec::new();
        hasher
            .hash(&mut hasher.new_history(), tokens, mask, &mut out)
            .unwrap();
        out
    };
    let start = rows(&[42, 43], None);
    let after = rows(&[7, 8, eos, 42, 43], None);
    assert_eq!(after[3 * 16..], start[..]);
    assert_ne!(rows(&[7, eos], None)[16..], rows(&[9, eos], None)[16..]);
    // A masked token is EOS itself (not a cut before it, as in DeepSeek).
    let masked = rows(&[7, 8, 9, 42], Some(&[true, true, false, true]));
    assert_eq!(masked, rows(&[7, 8, eos, 42], None));
}
