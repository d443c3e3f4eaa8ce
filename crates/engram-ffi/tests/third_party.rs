//! Qwen4-Exp models written by third-party writers (PyPI `safetensors`,
//! `gguf`, `mlx`; `scripts/third_party_models.py`) through the C ABI: the
//! engine's facts, each table's encoding code, row ids from the
//! independent hash, and prefill waits and decode steps delivering the
//! writers' own decoded values, bit for bit. `.ci/run` writes the models
//! into `ENGRAM_THIRD_PARTY`; without it this test says so and checks
//! nothing.

mod support;

use std::ffi::CString;
use std::ptr::{null, null_mut};

use engram_ffi::*;
use support::ok;

fn encoding_code(name: &str) -> u32 {
    match name {
        "bf16" => ENGRAM_ENCODING_BF16,
        "float16" | "f16" => ENGRAM_ENCODING_F16,
        "float32" | "f32" => ENGRAM_ENCODING_F32,
        "fp8_e4m3" => ENGRAM_ENCODING_FP8_E4M3,
        "q8_0" => ENGRAM_ENCODING_Q8_0,
        "q5_1" => ENGRAM_ENCODING_Q5_1,
        "q4_0" => ENGRAM_ENCODING_Q4_0,
        "q4_1" => ENGRAM_ENCODING_Q4_1,
        "mlx4" => ENGRAM_ENCODING_MLX4,
        other => panic!("no C encoding code for {other}"),
    }
}

#[test]
fn third_party_models_give_their_writers_values_through_the_c_abi() {
    let Some(tp) = engram::testing::third_party() else {
        return;
    };
    let dim = tp.row_dim;
    let (tokens, want_ids) = (&tp.tokens, &tp.row_ids);
    assert!(!tp.models.is_empty());
    for m in &tp.models {
        let name = &m.name;
        let expect = |rows: &[u32]| m.rows(rows, dim);
        let path = CString::new(m.path.to_str().unwrap()).unwrap();
        // SAFETY: (this test) every pointer is valid for the call, buffers
        // are as long as the lengths passed, and every handle is freed once.
        unsafe {
            let mut opts: engram_options = std::mem::zeroed();
            ok(engram_options_default(&mut opts));
            opts.format = ENGRAM_FORMAT_F32;
            let mut engine = null_mut();
            ok(engram_open(path.as_ptr(), &opts, &mut engine));
            let mut info: engram_info = std::mem::zeroed();
            ok(engram_engine_info(engine, &mut info));
            assert_eq!(
                (info.tables, info.rows_per_token, info.row_dim),
                (1, 16, dim as u32),
                "{name}"
            );
            let mut table: engram_table = std::mem::zeroed();
            ok(engram_table_info(engine, 0, &mut table));
            assert_eq!(table.encoding, encoding_code(&m.encoding), "{name}");
            assert_eq!(table.row_bytes as usize, dim * 4, "{name}");

            let mut seq = null_mut();
            ok(engram_seq_new(engine, &mut seq));
            let mut ids = vec![0u32; tokens.len() * 16];
            ok(engram_seq_row_ids(
                seq,
                tokens.as_ptr(),
                tokens.len(),
                null(),
                ids.as_mut_ptr(),
                ids.len(),
            ));
            assert_eq!(&ids, want_ids, "{name}: row ids");

            let (prompt, decode) = tokens.split_at(tokens.len() - 6);
            let mut pf = null_mut();
            ok(engram_prefill_begin(
                seq,
                prompt.as_ptr(),
                prompt.len(),
                null(),
                &mut pf,
            ));
            let mut upto = 0usize;
            while upto < prompt.len() {
                let from = upto;
                upto = (upto + 37).min(prompt.len());
                let mut got = vec![0u32; (upto - from) * 16 * dim];
                let mut written = 0usize;
                ok(engram_prefill_wait_into(
                    pf,
                    0,
                    upto as u32,
                    got.as_mut_ptr().cast(),
                    got.len() * 4,
                    &mut written,
                ));
                assert_eq!(written, got.len() * 4);
                assert!(
                    got == expect(&ids[from * 16..upto * 16]),
                    "{name}: prefill {from}..{upto}"
                );
            }
            ok(engram_prefill_end(pf));
            for (i, &token) in decode.iter().enumerate() {
                ok(engram_step_begin(seq, token));
                let mut got = vec![0u32; 16 * dim];
                ok(engram_step_wait_into(
                    seq,
                    0,
                    got.as_mut_ptr().cast(),
                    got.len() * 4,
                    null_mut(),
                ));
                let at = prompt.len() + i;
                assert!(
                    got == expect(&ids[at * 16..(at + 1) * 16]),
                    "{name}: decode {i}"
                );
            }
            ok(engram_seq_free(seq));
            ok(engram_close(engine));
        }
    }
}
