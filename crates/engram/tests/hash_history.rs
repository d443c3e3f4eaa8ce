//! History and hash semantics on a small layout built here: a slow, direct
//! transcription of the row formula, chunking, masks, rollback, fork and
//! snapshots.

use engram::hash::{Hasher, History};
use engram::layout::{Layout, LayoutParams, TokenMap};
use engram::Error;
use proptest::prelude::*;

const VOCAB: u32 = 300;

fn small_layout() -> Layout {
    layout_with_shape(4, 3)
}

/// (4, 8) and (3, 8) take the hasher's unrolled paths, others the general one.
fn layout_with_shape(max_ngram_size: usize, n_heads: usize) -> Layout {
    // 300 tokens folded onto 211 compressed ids; pad token 5.
    let map: Vec<u32> = (0..VOCAB).map(|t| (t * 7) % 211).collect();
    let params = LayoutParams {
        layer_ids: vec![3, 9],
        max_ngram_size,
        n_heads,
        head_dim: 16,
        engram_vocab_size: 1000,
        seed: 7,
        pad_token: 5,
    };
    Layout::derive(&params, &TokenMap::new(map, 211)).unwrap()
}

/// The row formula read off the definition, with u128 arithmetic and `%`.
fn direct_rows(layout: &Layout, tokens: &[u32], real: &[bool]) -> Vec<u32> {
    let pad = u128::from(layout.pad_compressed_id);
    let mut out = Vec::new();
    for t in 0..tokens.len() {
        let mut ids = vec![pad; layout.max_ngram_size];
        for (k, id) in ids.iter_mut().enumerate() {
            if k > t || !real[t - k] {
                break;
            }
            *id = u128::from(layout.token_map[tokens[t - k] as usize]);
        }
        for table in &layout.tables {
            let m: Vec<u128> = table.multipliers.iter().map(|&m| u128::from(m)).collect();
            let mut mix = ids[0] * m[0];
            for k in 1..layout.max_ngram_size {
                mix ^= ids[k] * m[k];
                assert!(mix < 1 << 63);
                for h in 0..layout.n_heads {
                    let col = (k - 1) * layout.n_heads + h;
                    let row = mix % u128::from(table.primes[col]) + u128::from(table.offsets[col]);
                    out.push(row as u32);
                }
            }
        }
    }
    out
}

fn hash_all(h: &Hasher, tokens: &[u32], mask: Option<&[bool]>) -> Vec<u32> {
    let mut history = h.new_history();
    let mut out = Vec::new();
    h.hash(&mut history, tokens, mask, &mut out).unwrap();
    out
}

fn sample_tokens(n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + i * i * 11) % VOCAB)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(160))]

    #[test]
    fn hash_equals_direct_formula_and_chunking_is_invisible(
        tokens in prop::collection::vec(0..VOCAB, 0..60),
        mask_bits in prop::collection::vec(prop::bool::weighted(0.85), 60),
        cuts in prop::collection::vec(0usize..60, 0..6),
        shape in prop::sample::select(vec![(4usize, 3usize), (4, 8), (3, 8), (2, 1), (6, 2)]),
    ) {
        let layout = layout_with_shape(shape.0, shape.1);
        let h = Hasher::new(&layout).unwrap();
        let mask = &mask_bits[..tokens.len()];
        let whole = hash_all(&h, &tokens, Some(mask));
        prop_assert_eq!(&whole, &direct_rows(&layout, &tokens, mask));

        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(tokens.len())).collect();
        cuts.push(0);
        cuts.push(tokens.len());
        cuts.sort();
        let mut history = h.new_history();
        let mut pieces = Vec::new();
        for w in cuts.windows(2) {
            h.hash(&mut history, &tokens[w[0]..w[1]], Some(&mask[w[0]..w[1]]), &mut pieces).unwrap();
        }
        prop_assert_eq!(&pieces, &whole);
        prop_assert_eq!(history.position(), tokens.len() as u64);
    }
}

#[test]
fn token_by_token_equals_whole_prompt() {
    let h = Hasher::new(&small_layout()).unwrap();
    let tokens = sample_tokens(200);
    let whole = hash_all(&h, &tokens, None);
    assert_eq!(whole.len(), 200 * h.rows_per_token());
    let mut history = h.new_history();
    let mut one_by_one = Vec::new();
    for &t in &tokens {
        h.hash(&mut history, &[t], None, &mut one_by_one).unwrap();
    }
    assert_eq!(one_by_one, whole);
}

#[test]
fn masked_token_reads_as_pad_and_hides_everything_before_it() {
    let layout = small_layout();
    let h = Hasher::new(&layout).unwrap();
    let per = h.rows_per_token();
    let tokens = sample_tokens(10);
    let mut mask = vec![true; 10];
    mask[4] = false;
    let rows = hash_all(&h, &tokens, Some(&mask));
    // The masked token hashes like the pad token at the start of a sequence.
    let pad_alone = hash_all(&h, &[5], None);
    assert_eq!(&rows[4 * per..5 * per], &pad_alone[..]);
    // Tokens after it hash as if the sequence began right after the mask.
    assert_eq!(&rows[5 * per..], &hash_all(&h, &tokens[5..], None)[..]);
    // Tokens before it are unaffected.
    assert_eq!(&rows[..4 * per], &hash_all(&h, &tokens[..4], None)[..]);
    assert_ne!(rows, hash_all(&h, &tokens, None));
}

#[test]
fn rollback_replays_like_a_fresh_sequence() {
    let h = Hasher::new(&small_layout()).unwrap();
    let (prefix, draft, accepted) = (sample_tokens(50), [1u32, 2, 3, 4], [9u32, 8, 7]);
    let mut history = h.new_history();
    let mut rows = Vec::new();
    h.hash(&mut history, &prefix, None, &mut rows).unwrap();
    h.hash(&mut history, &draft, None, &mut Vec::new()).unwrap();
    history.rollback(50).unwrap();
    assert_eq!(history.position(), 50);
    h.hash(&mut history, &accepted, None, &mut rows).unwrap();
    let expected: Vec<u32> = prefix.iter().chain(&accepted).copied().collect();
    assert_eq!(rows, hash_all(&h, &expected, None));
    assert!(matches!(
        history.rollback(54),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn fork_and_snapshot_continue_identically() {
    let h = Hasher::new(&small_layout()).unwrap();
    let tokens = sample_tokens(40);
    let mut history = h.new_history();
    h.hash(&mut history, &tokens[..30], None, &mut Vec::new())
        .unwrap();
    let mut fork = history.clone();
    let snapshot = history.snapshot();
    let mut restored = History::from_snapshot(&snapshot);
    assert_eq!(snapshot.position(), 30);
    assert_eq!(restored.position(), 30);

    let continue_with = |hist: &mut History, toks: &[u32]| {
        let mut out = Vec::new();
        h.hash(hist, toks, None, &mut out).unwrap();
        out
    };
    let original = continue_with(&mut history, &tokens[30..]);
    assert_eq!(continue_with(&mut fork, &tokens[30..]), original);
    assert_eq!(continue_with(&mut restored, &tokens[30..]), original);
    assert_eq!(
        &original[..],
        &hash_all(&h, &tokens, None)[30 * h.rows_per_token()..]
    );

    // A diverging fork does not disturb the original.
    let mut other = History::from_snapshot(&snapshot);
    assert_ne!(
        continue_with(&mut other, &[0, 1]),
        original[..2 * h.rows_per_token()]
    );
    // A restored history rolls back only as far as its tail still covers:
    // back to the snapshot position (its tail holds positions 27..30), no further.
    assert!(restored.rollback(29).is_err());
    restored.rollback(30).unwrap();
    assert_eq!(continue_with(&mut restored, &tokens[30..]), original);
}

#[test]
fn snapshot_near_the_start_keeps_dead_positions() {
    let h = Hasher::new(&small_layout()).unwrap();
    let tokens = sample_tokens(6);
    let mask = [true, false, true, true, true, true];
    let mut history = h.new_history();
    h.hash(
        &mut history,
        &tokens[..2],
        Some(&mask[..2]),
        &mut Vec::new(),
    )
    .unwrap();
    let mut restored = History::from_snapshot(&history.snapshot());
    let mut out = Vec::new();
    h.hash(&mut restored, &tokens[2..], None, &mut out).unwrap();
    let all = hash_all(&h, &tokens, Some(&mask));
    assert_eq!(&out[..], &all[2 * h.rows_per_token()..]);
}

#[test]
fn bad_input_is_rejected_without_side_effects() {
    let h = Hasher::new(&small_layout()).unwrap();
    let mut history = h.new_history();
    let mut out = vec![123];
    h.hash(&mut history, &[1, 2], None, &mut out).unwrap();
    let before = (history.clone(), out.clone());

    let err = h
        .hash(&mut history, &[1, VOCAB, 2], None, &mut out)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("token {VOCAB}")) && err.contains("index 1"),
        "{err}"
    );
    assert!(err.contains("sequence position 3"), "{err}");
    let err = h
        .hash(&mut history, &[1, 2], Some(&[true]), &mut out)
        .unwrap_err();
    assert!(
        err.to_string().contains("mask has 1 entries for 2 tokens"),
        "{err}"
    );
    let mut wrong = History::new(3).unwrap();
    assert!(h.hash(&mut wrong, &[1], None, &mut out).is_err());
    assert_eq!((history, out), before);
    assert!(History::new(1).is_err());
}
