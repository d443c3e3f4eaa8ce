//! The mask of `engram_seq_row_ids` and `engram_prefill_begin` is a Hugging
//! Face `attention_mask` (1 real token, 0 padding): passed straight through
//! as bytes it gives the independent reference's row ids
//! (`tests/reference/hash_vectors.py`, scale 65536, masked case).

mod support;

use std::ffi::CString;
use std::ptr::{null, null_mut};

use engram::testing::{hash_vectors, json_token_rows, json_u64s};
use engram_ffi::*;
use support::{ok, write_model};

const SCALE: u64 = 65536;

#[test]
fn attention_mask_passes_straight_through_to_the_reference_row_ids() {
    let doc = hash_vectors();
    let tokens: Vec<u32> = json_u64s(&doc["tokens"])
        .iter()
        .map(|&t| t as u32)
        .collect();
    let mask: Vec<u8> = json_u64s(&doc["attention_mask"])
        .iter()
        .map(|&m| m as u8)
        .collect();
    assert!(mask.contains(&0), "the reference pads some tokens");
    let dir = tempfile::tempdir().unwrap();
    let path = CString::new(write_model(dir.path(), SCALE).to_str().unwrap()).unwrap();
    let mut engine = null_mut();
    // SAFETY: valid string and out-pointer; NULL options are the defaults.
    ok(unsafe { engram_open(path.as_ptr(), null(), &mut engine) });
    let mut seq = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { engram_seq_new(engine, &mut seq) });
    for case in doc["cases"].as_array().unwrap() {
        if case["layout"]["scale"].as_u64() != Some(SCALE) {
            continue;
        }
        let masked = case["masked"].as_bool().unwrap();
        let want = json_token_rows(case);
        let mut got = vec![0u32; want.len()];
        let mask_ptr = if masked { mask.as_ptr() } else { null() };
        // SAFETY: tokens and mask hold `tokens.len()` values; `got` is
        // writable for its length.
        ok(unsafe {
            engram_seq_row_ids(
                seq,
                tokens.as_ptr(),
                tokens.len(),
                mask_ptr,
                got.as_mut_ptr(),
                got.len(),
            )
        });
        assert_eq!(got, want, "masked {masked}");
    }
    // SAFETY: handles from this test, freed once.
    unsafe {
        ok(engram_seq_free(seq));
        ok(engram_close(engine));
    }
}
