//! The V4.1-Flash layout, tokenization and rows against vectors computed
//! independently in Python (tests/reference/hash_vectors.py).

use engram::hash::Hasher;
use engram::layout::{self, encode, vendored_tokenizer};
use engram::testing::{hash_vectors, json_token_rows, json_u64s};

/// FNV-1a over the little-endian bytes of each id (as in the Python script).
fn fnv1a64(ids: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in ids.iter().flat_map(|id| id.to_le_bytes()) {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[test]
fn whole_token_map_matches_python_tokenizers() {
    let doc = hash_vectors();
    let map = engram::layout::TokenMap::vendored().unwrap();
    let want: u64 = doc["token_map_fnv1a64"].as_str().unwrap().parse().unwrap();
    assert_eq!(fnv1a64(&map.map), want);
}

#[test]
fn vendored_tokenizer_matches_python_tokenizers() {
    let doc = hash_vectors();
    let tokens = encode(
        vendored_tokenizer().unwrap(),
        doc["text"].as_str().unwrap(),
        "vendored",
    )
    .unwrap();
    let want: Vec<u32> = json_u64s(&doc["tokens"])
        .into_iter()
        .map(|t| t as u32)
        .collect();
    assert!(want.len() >= 250);
    assert_eq!(tokens, want);
}

#[test]
fn rows_match_independent_reference_at_each_scale_with_and_without_mask() {
    let doc = hash_vectors();
    let tokens: Vec<u32> = json_u64s(&doc["tokens"])
        .into_iter()
        .map(|t| t as u32)
        .collect();
    // A Hugging Face attention_mask (1 real, 0 padding) taken as it is:
    // nonzero is a real token.
    let attention_mask = json_u64s(&doc["attention_mask"]);
    assert!(attention_mask.contains(&0) && attention_mask.contains(&1));
    let mask: Vec<bool> = attention_mask.iter().map(|&m| m != 0).collect();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for case in cases {
        let scale = case["layout"]["scale"].as_u64().unwrap();
        let masked = case["masked"].as_bool().unwrap();
        let layout = layout::preset("deepseek-v4.1-flash", scale).unwrap();
        assert_eq!(
            layout.vocab_size() as u64,
            doc["vocab_size"].as_u64().unwrap()
        );
        assert_eq!(
            u64::from(layout.compressed_vocab_size),
            doc["compressed_vocab_size"].as_u64().unwrap()
        );
        assert_eq!(
            u64::from(layout.pad_compressed_id),
            doc["pad_compressed_id"].as_u64().unwrap()
        );
        for (t, table) in layout.tables.iter().enumerate() {
            assert_eq!(table.rows, case["layout"]["rows"][t].as_u64().unwrap());
            let primes: Vec<u64> = table.primes.iter().map(|&p| u64::from(p)).collect();
            assert_eq!(
                primes,
                json_u64s(&case["layout"]["primes"][t]),
                "scale {scale} table {t}"
            );
            assert_eq!(
                table.multipliers,
                json_u64s(&case["layout"]["multipliers"][t])
            );
        }
        let hasher = Hasher::new(&layout).unwrap();
        let mut history = hasher.new_history();
        let mut rows = Vec::new();
        hasher
            .hash(
                &mut history,
                &tokens,
                masked.then_some(&mask[..]),
                &mut rows,
            )
            .unwrap();
        let want = json_token_rows(case);
        assert_eq!(want.len(), tokens.len() * 48);
        for (i, (got, want)) in rows.chunks(48).zip(want.chunks(48)).enumerate() {
            assert_eq!(
                got, want,
                "scale {scale} masked {masked}: token {i} ({})",
                tokens[i]
            );
        }
    }
}
