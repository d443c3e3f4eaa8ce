//! The DeepSeek V4.1-Flash preset against its published constants, and the
//! vendored token map.

use engram::layout::{self, TokenMap};

#[test]
fn vendored_token_map_folds_to_99092_ids_with_pad_2() {
    let map = TokenMap::vendored().unwrap();
    assert_eq!(map.len(), 129_280);
    assert_eq!(map.compressed_vocab_size, 99_092);
    assert_eq!(map.map[2], 2);
    // Compressed ids are assigned in order of first appearance.
    let mut next = 0;
    for &id in map.map.iter() {
        assert!(id <= next, "id {id} appears before {next}");
        if id == next {
            next += 1;
        }
    }
    assert_eq!(next, 99_092);
}

#[test]
fn deepseek_v4_1_flash_rows_and_multipliers() {
    let l = layout::preset("deepseek-v4.1-flash", 1).unwrap();
    assert_eq!(l.layer_ids(), vec![1, 14]);
    assert_eq!(l.columns(), 24);
    assert_eq!(l.vocab_size(), 129_280);
    assert_eq!(l.compressed_vocab_size, 99_092);
    assert_eq!(l.pad_compressed_id, 2);
    let rows: Vec<u64> = l.tables.iter().map(|t| t.rows).collect();
    assert_eq!(rows, vec![384_006_168, 384_016_682]);
    assert_eq!(
        l.tables[0].multipliers,
        vec![
            76632096046245,
            4839876093313,
            35959672319349,
            73987337458391
        ]
    );
    assert_eq!(
        l.tables[1].multipliers,
        vec![
            67716810739261,
            51510806800915,
            30921347202721,
            82619226485591
        ]
    );
    // The walk starts at 16,000,000 - 1; the first prime above it is 16,000,057.
    assert_eq!(l.tables[0].primes[0], 16_000_057);
    assert_eq!(l.tables[0].offsets[1], 16_000_057);
    l.validate().unwrap();
}

#[test]
fn scaled_preset_keeps_token_map_and_multipliers() {
    let full = layout::preset("deepseek-v4.1-flash", 1).unwrap();
    let small = layout::preset("deepseek-v4.1-flash", 1024).unwrap();
    assert_eq!(small.token_map, full.token_map);
    for (s, f) in small.tables.iter().zip(&full.tables) {
        assert_eq!(s.multipliers, f.multipliers);
        assert!(s.primes.iter().all(|&p| p > 16_000_000 / 1024 - 1));
        assert!(s.rows < f.rows / 900);
    }
}
