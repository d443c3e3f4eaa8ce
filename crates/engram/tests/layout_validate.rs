//! Layout validation: each inconsistency is rejected with an error naming
//! the value and why.

use engram::layout::{derive_multipliers, Layout, LayoutParams, TableLayout, TokenMap};
use engram::Error;

fn params() -> LayoutParams {
    LayoutParams {
        layer_ids: vec![2, 5],
        max_ngram_size: 3,
        n_heads: 2,
        head_dim: 8,
        engram_vocab_size: 100,
        seed: 3,
        pad_token: 1,
    }
}

fn token_map() -> TokenMap {
    TokenMap::new((0..50u32).map(|t| t / 2).collect::<Vec<_>>(), 25)
}

fn good() -> Layout {
    Layout::derive(&params(), &token_map()).unwrap()
}

/// Validates `layout` after `edit` and returns the error text.
fn rejects(edit: impl FnOnce(&mut Layout)) -> String {
    let mut layout = good();
    edit(&mut layout);
    match layout.validate() {
        Err(e @ Error::Layout { .. }) => e.to_string(),
        other => panic!("expected a layout error, got {other:?}"),
    }
}

fn assert_mentions(msg: &str, words: &[&str]) {
    for w in words {
        assert!(msg.contains(w), "{msg:?} does not mention {w:?}");
    }
}

#[test]
fn derived_layout_is_consistent() {
    let l = good();
    l.validate().unwrap();
    assert_eq!(l.columns(), 4);
    assert_eq!(l.layer_ids(), vec![2, 5]);
    assert_eq!(l.vocab_size(), 50);
    assert_eq!(l.pad_compressed_id, 0);
    // Primes above 99: 101 103 | 107 109 for table 0, then 113 127 | 131 137.
    assert_eq!(l.tables[0].primes, vec![101, 103, 107, 109]);
    assert_eq!(l.tables[1].primes, vec![113, 127, 131, 137]);
    assert_eq!(l.tables[0].offsets, vec![0, 101, 204, 311]);
    assert_eq!(l.tables[0].rows, 420);
    assert_eq!(
        l.tables[1].multipliers,
        derive_multipliers(3, 5, 3, 25).unwrap()
    );
    assert!(l
        .tables
        .iter()
        .flat_map(|t| &t.multipliers)
        .all(|m| m % 2 == 1));
}

#[test]
fn from_tables_validates() {
    let l = good();
    let rebuilt = Layout::from_tables(3, 2, 8, l.token_map(), 0, l.tables.clone()).unwrap();
    assert_eq!(rebuilt, l);
    let mut tables = l.tables.clone();
    tables[1].multipliers[2] += 1;
    let err = Layout::from_tables(3, 2, 8, l.token_map(), 0, tables).unwrap_err();
    assert_mentions(&err.to_string(), &["multipliers[2]", "even"]);
    let t = TableLayout::from_primes(2, vec![5, 7], vec![1, 3, 5]).unwrap();
    assert_eq!((t.offsets, t.rows), (vec![0, 5], 12));
}

#[test]
fn rejects_primes_that_do_not_sum_to_rows() {
    let msg = rejects(|l| l.tables[1].rows += 1);
    assert_mentions(&msg, &["layer 5", "rows", "sum to"]);
}

#[test]
fn rejects_non_primes_and_primes_below_two() {
    let msg = rejects(|l| {
        l.tables[0].primes[3] = 1;
        l.tables[0].rows -= 108;
    });
    assert_mentions(&msg, &["primes[3]", "1 is not a prime"]);
    let msg = rejects(|l| l.tables[0].primes[0] = 100);
    assert_mentions(&msg, &["primes[0]", "100"]);
}

#[test]
fn rejects_bad_offsets() {
    let msg = rejects(|l| l.tables[0].offsets[2] += 1);
    assert_mentions(&msg, &["offsets[2]", "205"]);
}

#[test]
fn rejects_even_and_overflowing_multipliers() {
    let msg = rejects(|l| l.tables[0].multipliers[1] = 8);
    assert_mentions(&msg, &["multipliers[1]", "8 is even"]);
    let limit = i64::MAX as u64 / 25;
    let too_big = limit + 1 + (limit % 2); // odd and above the limit
    let msg = rejects(|l| l.tables[0].multipliers[0] = too_big);
    assert_mentions(&msg, &["multipliers[0]", "overflow int64", "25"]);
}

#[test]
fn rejects_token_map_and_pad_outside_the_compressed_vocab() {
    let msg = rejects(|l| {
        let mut map = l.token_map.to_vec();
        map[17] = 25;
        l.token_map = map.into();
    });
    assert_mentions(&msg, &["token_map[17]", "25", "compressed vocab of 25"]);
    let msg = rejects(|l| l.pad_compressed_id = 30);
    assert_mentions(&msg, &["pad_compressed_id", "30"]);
    let msg = rejects(|l| l.token_map = Vec::new().into());
    assert_mentions(&msg, &["token_map", "empty"]);
}

#[test]
fn rejects_token_map_of_the_wrong_length() {
    let l = good();
    l.validate_vocab_size(50).unwrap();
    let err = l.validate_vocab_size(64).unwrap_err().to_string();
    assert_mentions(&err, &["token_map", "50 entries", "64 tokens"]);
}

#[test]
fn rejects_wrong_counts_and_order() {
    let msg = rejects(|l| {
        l.tables[0].primes.pop();
        l.tables[0].offsets.pop();
    });
    assert_mentions(&msg, &["primes", "has 3 primes, expected 4"]);
    let msg = rejects(|l| l.tables[1].multipliers.push(1));
    assert_mentions(&msg, &["multipliers", "has 4", "3"]);
    let msg = rejects(|l| l.tables.swap(0, 1));
    assert_mentions(&msg, &["layer_id", "increasing"]);
    let msg = rejects(|l| l.tables.clear());
    assert_mentions(&msg, &["tables"]);
    let msg = rejects(|l| l.max_ngram_size = 1);
    assert_mentions(&msg, &["max_ngram_size"]);
}

#[test]
fn rejects_rows_beyond_u32_row_ids() {
    let two_big_primes = |l: &mut Layout| {
        l.max_ngram_size = 2;
        l.n_heads = 2;
        l.tables.truncate(1);
        l.tables[0] =
            TableLayout::from_primes(1, vec![4_294_967_291, 4_294_967_279], vec![1, 1]).unwrap();
    };
    let msg = rejects(two_big_primes);
    assert_mentions(&msg, &["rows", "8589934570", "do not fit u32 row ids"]);
    let err = TableLayout::from_primes(1, vec![4_294_967_291; 3], vec![1]).unwrap_err();
    assert_mentions(&err.to_string(), &["exceeds u32 row ids"]);
}

#[test]
fn derive_rejects_bad_parameters() {
    let bad = |edit: fn(&mut LayoutParams)| {
        let mut p = params();
        edit(&mut p);
        Layout::derive(&p, &token_map()).unwrap_err().to_string()
    };
    assert_mentions(&bad(|p| p.pad_token = 50), &["pad_token", "50"]);
    assert_mentions(&bad(|p| p.layer_ids.clear()), &["layer_ids"]);
    assert_mentions(&bad(|p| p.max_ngram_size = 1), &["max_ngram_size"]);
    assert_mentions(&bad(|p| p.n_heads = 0), &["n_heads"]);
    assert_mentions(&bad(|p| p.engram_vocab_size = 0), &["engram_vocab_size"]);
}
