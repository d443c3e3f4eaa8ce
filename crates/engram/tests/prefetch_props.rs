//! Property tests: whatever the schedule, switches, chunking, masks and
//! rollbacks, the rows a consumer gets are bit-identical to hashing the
//! tokens and reading each row directly.

mod prefetch_util;

use std::time::Duration;

use engram::hash::Hasher;
use engram::prefetch::{Engine, PrefetchConfig};
use prefetch_util::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    prompt: Vec<u32>,
    mask: Option<Vec<bool>>,
    config: PrefetchConfig,
    steps: Vec<u32>,
    rollback: usize,
    decode: Vec<u32>,
    hints: Vec<u32>,
}

fn config() -> impl Strategy<Value = PrefetchConfig> {
    (
        (1u32..48, 1u32..48, 1u32..4, 0u32..200),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        (1usize..3, 1usize..3),
    )
        .prop_map(
            |((chunk, first, ring, threshold), (prefetch, pipeline, batch, lookup), (w, dw))| {
                PrefetchConfig::default()
                    .with_chunk_tokens(chunk)
                    .with_first_chunk_tokens(first)
                    .with_ring_chunks(ring)
                    .with_overlap_threshold(threshold)
                    .with_prefetch(prefetch)
                    .with_pipeline(pipeline)
                    .with_batch(batch)
                    .with_workers(w)
                    .with_decode_workers(dw)
                    .with_lookup_hints(lookup)
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(0..VOCAB, 0..300),
        // true = real token (attention-mask convention): mostly real.
        prop::option::of(prop::collection::vec(prop::bool::weighted(0.85), 300)),
        config(),
        prop::collection::vec(1u32..120, 1..12),
        0usize..6,
        prop::collection::vec(0..VOCAB, 0..6),
        prop::collection::vec(0..VOCAB, 0..4),
    )
        .prop_map(|(prompt, mask, config, steps, rollback, decode, hints)| {
            let mask = mask.map(|m| m[..prompt.len()].to_vec());
            Case {
                prompt,
                mask,
                config,
                steps,
                rollback,
                decode,
                hints,
            }
        })
}

fn run(case: Case) {
    let layout = tiny_layout();
    let (_mem, source) = source_arc(MemSource::for_layout(&layout));
    let engine = Engine::new(source, layout.clone(), case.config.clone()).unwrap();
    let tables = layout.tables.len();
    let cols = engine.layout().max_ngram_size.saturating_sub(1) * layout.n_heads;
    let mut seq = engine.sequence();
    let mask = case.mask.as_deref();
    // The reference hash: the layout's hasher over a fresh history.
    let ids = {
        let hasher = Hasher::new(&layout).unwrap();
        let mut history = hasher.new_history();
        let mut ids = Vec::new();
        hasher
            .hash(&mut history, &case.prompt, mask, &mut ids)
            .unwrap();
        ids
    };
    assert_eq!(seq.row_ids(&case.prompt, mask).unwrap(), ids);
    let n = case.prompt.len() as u32;
    {
        let mut prefill = seq.prefill(&case.prompt, mask).unwrap();
        let span = prefill.max_wait_tokens();
        let mut upto = 0u32;
        let mut steps = case.steps.iter().cycle();
        while upto < n {
            let from = upto;
            upto = (upto + steps.next().unwrap().min(&span)).min(n);
            for table in 0..tables {
                let view = prefill.wait(table, upto).unwrap();
                assert_eq!(view.first_token(), from);
                assert_eq!(view.len() as u32, upto - from);
                let want = reference(&ids, tables, cols, table, from as usize, upto as usize);
                assert!(
                    view.to_vec() == want,
                    "table {table} tokens {from}..{upto} differ"
                );
            }
        }
        // A wait that covers nothing more returns an empty view.
        assert!(prefill.wait(0, n).unwrap().is_empty());
    }
    // Roll back, then check the next hash matches a sequence that never had
    // the dropped tokens.
    let rollback = case.rollback.min(case.prompt.len());
    seq.rollback(rollback).unwrap();
    let kept = case.prompt.len() - rollback;
    let mut fresh = engine.sequence();
    drop(
        fresh
            .prefill(&case.prompt[..kept], mask.map(|m| &m[..kept]))
            .unwrap(),
    );
    seq.hint(&case.hints).unwrap();
    for &token in &case.decode {
        let want_ids = fresh.row_ids(&[token], None).unwrap();
        assert_eq!(seq.row_ids(&[token], None).unwrap(), want_ids);
        seq.step_begin(token).unwrap();
        fresh.step_begin(token).unwrap();
        for table in (0..tables).rev() {
            let got = seq.step_wait(table).unwrap().to_vec();
            assert_eq!(got, reference(&want_ids, tables, cols, table, 0, 1));
        }
    }
    // Drop the decoded tokens again plus part of the prompt: the sequence
    // hashes like one that never had them.
    let back = (case.decode.len() + rollback).min(seq.len());
    seq.rollback(back).unwrap();
    let mut again = engine.sequence();
    let keep = seq.len();
    let all: Vec<u32> = case.prompt[..kept]
        .iter()
        .chain(&case.decode)
        .copied()
        .collect();
    let all_mask: Option<Vec<bool>> = mask.map(|m| {
        m[..kept]
            .iter()
            .copied()
            .chain(case.decode.iter().map(|_| false))
            .collect()
    });
    drop(
        again
            .prefill(&all[..keep], all_mask.as_deref().map(|m| &m[..keep]))
            .unwrap(),
    );
    assert_eq!(
        seq.row_ids(&[7], None).unwrap(),
        again.row_ids(&[7], None).unwrap()
    );
    let stats = seq.stats();
    assert_eq!(stats.decode.tables[0].waits, case.decode.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn rows_match_a_plain_synchronous_read(case in case()) {
        within(Duration::from_secs(60), move || run(case));
    }
}
