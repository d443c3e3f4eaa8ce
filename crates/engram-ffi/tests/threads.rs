//! Several threads drive their own sequences on one engine through the C
//! ABI while another reads the engine's stats; every row handed out (in
//! engine memory, two parts where the ring wraps) equals
//! `engram_rows_read` of the same row ids.

mod support;

use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

use engram_ffi::*;
use support::{ok, write_model};

const SCALE: u64 = 65536;
const ROWS_PER_TOKEN: usize = 24;
const ROW_BYTES: usize = 264;

/// A handle moved across threads as a number (it is one).
#[derive(Clone, Copy)]
struct Engine(usize);

impl Engine {
    fn ptr(self) -> *mut engram_engine {
        std::ptr::without_provenance_mut(self.0)
    }
}

/// The bytes of `rows` (both parts, in order).
///
/// # Safety
/// `rows` was just filled by a wait whose memory is still valid.
unsafe fn bytes_of(rows: &engram_rows) -> Vec<u8> {
    let mut out = Vec::new();
    for part in 0..2 {
        if rows.bytes[part] > 0 {
            // SAFETY: per the contract of the wait that filled `rows`.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(rows.data[part].cast::<u8>(), rows.bytes[part])
            });
        }
    }
    out
}

/// Rows of `table` for tokens `from..to` of `ids` (`[token][table][col]`).
fn expected(engine: Engine, ids: &[u32], table: usize, from: usize, to: usize) -> Vec<u8> {
    let wanted: Vec<u32> = (from..to)
        .flat_map(|t| {
            let base = (t * 2 + table) * ROWS_PER_TOKEN;
            ids[base..base + ROWS_PER_TOKEN].iter().copied()
        })
        .collect();
    let mut out = vec![0u8; wanted.len() * ROW_BYTES];
    // SAFETY: valid buffers of the stated lengths.
    ok(unsafe {
        engram_rows_read(
            engine.ptr(),
            table as u32,
            wanted.as_ptr(),
            wanted.len(),
            ENGRAM_FORMAT_RAW,
            out.as_mut_ptr().cast(),
            out.len(),
        )
    });
    out
}

fn run_sequence(engine: Engine, s: u32) {
    let n = 200 + 50 * s as usize;
    let tokens: Vec<u32> = (0..n as u32).map(|i| (i * (s + 11) + 7) % 5000).collect();
    // SAFETY: (this function) every pointer is valid for the stated length.
    unsafe {
        let mut seq = null_mut();
        ok(engram_seq_new(engine.ptr(), &mut seq));
        let mut ids = vec![0u32; n * 2 * ROWS_PER_TOKEN];
        ok(engram_seq_row_ids(
            seq,
            tokens.as_ptr(),
            n,
            null(),
            ids.as_mut_ptr(),
            ids.len(),
        ));
        let mut pf = null_mut();
        ok(engram_prefill_begin(
            seq,
            tokens.as_ptr(),
            n,
            null(),
            &mut pf,
        ));
        let mut upto = 0;
        while upto < n {
            let from = upto;
            upto = (upto + 48).min(n);
            for table in 0..2 {
                let mut rows = std::mem::zeroed();
                ok(engram_prefill_wait(
                    pf,
                    table as u32,
                    upto as u32,
                    &mut rows,
                ));
                assert_eq!(rows.first_token as usize, from);
                let want = expected(engine, &ids, table, from, upto);
                assert!(
                    bytes_of(&rows) == want,
                    "seq {s} table {table} {from}..{upto}"
                );
            }
        }
        ok(engram_prefill_end(pf));
        for k in 0..10u32 {
            let token = (k * 31 + s) % 5000;
            let mut step_ids = vec![0u32; 2 * ROWS_PER_TOKEN];
            ok(engram_seq_row_ids(
                seq,
                &token,
                1,
                null(),
                step_ids.as_mut_ptr(),
                step_ids.len(),
            ));
            ok(engram_step_begin(seq, token));
            for table in 0..2 {
                let mut rows = std::mem::zeroed();
                ok(engram_step_wait(seq, table as u32, &mut rows));
                let want = expected(engine, &step_ids, table, 0, 1);
                assert!(bytes_of(&rows) == want, "seq {s} step {k} table {table}");
            }
        }
        ok(engram_seq_free(seq));
    }
}

#[test]
fn sequences_on_threads_share_one_engine() {
    let dir = tempfile::tempdir().unwrap();
    let path = CString::new(write_model(dir.path(), SCALE).to_str().unwrap()).unwrap();
    let engine = {
        // SAFETY: zeroed integers, then filled by the library.
        let mut opts: engram_options = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers.
        unsafe {
            ok(engram_options_default(&mut opts));
            // A small ring the waits wrap around; a row cache shared by all.
            opts.chunk_tokens = 40;
            opts.ring_chunks = 2;
            opts.overlap_threshold = 0;
            opts.cache_bytes = 8 << 20;
            let mut engine = null_mut();
            ok(engram_open(path.as_ptr(), &opts, &mut engine));
            Engine(engine.addr())
        }
    };
    std::thread::scope(|scope| {
        for s in 0..4 {
            scope.spawn(move || run_sequence(engine, s));
        }
        scope.spawn(move || {
            for _ in 0..20 {
                let mut json: *mut c_char = null_mut();
                // SAFETY: valid out-pointer; the string is freed once.
                unsafe {
                    ok(engram_stats_json(engine.ptr(), &mut json));
                    assert!(CStr::from_ptr(json).to_bytes().starts_with(b"{"));
                    ok(engram_string_free(json));
                }
            }
        });
    });
    let mut json: *mut c_char = null_mut();
    // SAFETY: valid out-pointer; the handle is live until the close.
    unsafe {
        ok(engram_stats_json(engine.ptr(), &mut json));
        let doc: serde_json::Value =
            serde_json::from_str(CStr::from_ptr(json).to_str().unwrap()).unwrap();
        ok(engram_string_free(json));
        assert_eq!(doc["sequences_freed"], 4);
        assert_eq!(doc["sequences_open"], 0);
        let prefill_tokens: u64 = (0..4).map(|s| 200 + 50 * s).sum();
        assert_eq!(doc["totals"]["prefill"][0]["tokens"], prefill_tokens);
        assert_eq!(doc["totals"]["decode"][1]["waits"], 40);
        ok(engram_close(engine.ptr()));
    }
}
