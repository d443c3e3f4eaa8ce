//! Bad use of the C ABI is a status and a message, never undefined
//! behaviour: NULL pointers, tables out of range, waits on ended prefills,
//! tokens outside the vocabulary, double frees, wrong-kind handles, small
//! buffers, bad options, calls in the wrong state.

mod support;

use std::ffi::{c_char, CString};
use std::ptr::{null, null_mut};

use engram_ffi::engram_status::*;
use engram_ffi::*;
use support::{expect, last_error, ok, write_model};

/// Tiny model: about 6K rows per table.
const SCALE: u64 = 65536;
const VOCAB: u32 = 129_280;

struct Fixture {
    _dir: tempfile::TempDir,
    path: CString,
    engine: *mut engram_engine,
}

fn open() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), SCALE);
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut opts = options();
    opts.overlap_threshold = 0;
    let mut engine = null_mut();
    // SAFETY: valid string, options and out-pointer.
    ok(unsafe { engram_open(path.as_ptr(), &opts, &mut engine) });
    Fixture {
        _dir: dir,
        path,
        engine,
    }
}

fn options() -> engram_options {
    // SAFETY: zeroed plain integers, then filled by the library.
    let mut opts: engram_options = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    ok(unsafe { engram_options_default(&mut opts) });
    opts
}

fn new_seq(engine: *mut engram_engine) -> *mut engram_seq {
    let mut seq = null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { engram_seq_new(engine, &mut seq) });
    seq
}

fn begin(seq: *mut engram_seq, tokens: &[u32]) -> *mut engram_prefill {
    let mut pf = null_mut();
    // SAFETY: `tokens` is valid for its length; valid out-pointer.
    ok(unsafe { engram_prefill_begin(seq, tokens.as_ptr(), tokens.len(), null(), &mut pf) });
    pf
}

#[test]
fn null_pointers_are_reported() {
    let f = open();
    let mut engine = null_mut();
    // SAFETY: (this test) every pointer is NULL or valid.
    unsafe {
        expect(
            engram_open(null(), null(), &mut engine),
            ENGRAM_NULL_POINTER,
            "path is NULL",
        );
        expect(
            engram_open(f.path.as_ptr(), null(), null_mut()),
            ENGRAM_NULL_POINTER,
            "engine is NULL",
        );
        expect(
            engram_engine_info(f.engine, null_mut()),
            ENGRAM_NULL_POINTER,
            "info is NULL",
        );
        expect(
            engram_engine_info(null_mut(), null_mut()),
            ENGRAM_NULL_POINTER,
            "engram_engine handle is NULL",
        );
        let seq = new_seq(f.engine);
        let mut pf = null_mut();
        expect(
            engram_prefill_begin(seq, null(), 5, null(), &mut pf),
            ENGRAM_NULL_POINTER,
            "tokens is NULL",
        );
        assert!(pf.is_null());
        let pf = begin(seq, &[1, 2, 3]);
        expect(
            engram_prefill_wait(pf, 0, 3, null_mut()),
            ENGRAM_NULL_POINTER,
            "rows is NULL",
        );
        expect(
            engram_prefill_wait_into(pf, 0, 3, null_mut(), 1 << 20, null_mut()),
            ENGRAM_NULL_POINTER,
            "out is NULL",
        );
        // Nothing was consumed: the wait still works.
        let mut rows = std::mem::zeroed();
        ok(engram_prefill_wait(pf, 0, 3, &mut rows));
        expect(
            engram_stats_json(f.engine, null_mut()),
            ENGRAM_NULL_POINTER,
            "json is NULL",
        );
        ok(engram_seq_free(seq));
        ok(engram_close(f.engine));
    }
}

#[test]
fn misaligned_out_pointers_are_reported() {
    let f = open();
    let mut buf = [0u64; 8];
    let misaligned = (buf.as_mut_ptr() as *mut u8)
        .wrapping_add(1)
        .cast::<engram_info>();
    // SAFETY: the pointer is checked before use and refused.
    unsafe {
        expect(
            engram_engine_info(f.engine, misaligned),
            ENGRAM_NULL_POINTER,
            "not aligned",
        );
        ok(engram_close(f.engine));
    }
}

#[test]
fn tables_out_of_range_are_reported() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid.
    unsafe {
        let seq = new_seq(f.engine);
        let pf = begin(seq, &[10, 20, 30, 40]);
        let mut rows = std::mem::zeroed();
        expect(
            engram_prefill_wait(pf, 2, 4, &mut rows),
            ENGRAM_INVALID_ARGUMENT,
            "table 2 out of range (the model has 2)",
        );
        ok(engram_prefill_end(pf));
        ok(engram_step_begin(seq, 7));
        expect(
            engram_step_wait(seq, 9, &mut rows),
            ENGRAM_INVALID_ARGUMENT,
            "table 9 out of range",
        );
        let mut table = std::mem::zeroed();
        expect(
            engram_table_info(f.engine, 2, &mut table),
            ENGRAM_INVALID_ARGUMENT,
            "table 2 out of range",
        );
        let mut out = [0u8; 264];
        let mut read = |table: u32, id: u32, format: u32| {
            let out = out.as_mut_ptr().cast();
            engram_rows_read(f.engine, table, [id].as_ptr(), 1, format, out, 264)
        };
        expect(
            read(3, 0, ENGRAM_FORMAT_RAW),
            ENGRAM_INVALID_ARGUMENT,
            "table 3 out of range",
        );
        expect(
            read(0, u32::MAX, ENGRAM_FORMAT_RAW),
            ENGRAM_INVALID_ARGUMENT,
            "out of range",
        );
        expect(read(0, 0, 7), ENGRAM_INVALID_ARGUMENT, "format 7");
        ok(engram_seq_free(seq));
        ok(engram_close(f.engine));
    }
}

#[test]
fn ended_prefills_and_freed_handles_are_refused() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid; stale handles are
    // looked up, not dereferenced.
    unsafe {
        let seq = new_seq(f.engine);
        let pf = begin(seq, &[5; 40]);
        let mut rows = std::mem::zeroed();
        ok(engram_prefill_wait(pf, 0, 20, &mut rows));
        ok(engram_prefill_end(pf));
        expect(
            engram_prefill_wait(pf, 0, 40, &mut rows),
            ENGRAM_INVALID_HANDLE,
            "is not live",
        );
        expect(engram_prefill_end(pf), ENGRAM_INVALID_HANDLE, "is not live");
        ok(engram_prefill_end(null_mut()));
        // A sequence passed where a prefill goes.
        expect(
            engram_prefill_wait(seq.cast(), 0, 1, &mut rows),
            ENGRAM_INVALID_HANDLE,
            "is an engram_seq, not an engram_prefill",
        );
        // Freeing a sequence ends its live prefill.
        let pf = begin(seq, &[6; 10]);
        ok(engram_seq_free(seq));
        expect(
            engram_prefill_wait(pf, 0, 10, &mut rows),
            ENGRAM_INVALID_HANDLE,
            "engram_prefill handle",
        );
        expect(engram_seq_free(seq), ENGRAM_INVALID_HANDLE, "already freed");
        ok(engram_seq_free(null_mut()));
        expect(
            engram_step_begin(seq, 1),
            ENGRAM_INVALID_HANDLE,
            "is not live",
        );
        ok(engram_close(f.engine));
        expect(engram_close(f.engine), ENGRAM_INVALID_HANDLE, "is not live");
        ok(engram_close(null_mut()));
        let mut info = std::mem::zeroed();
        expect(
            engram_engine_info(f.engine, &mut info),
            ENGRAM_INVALID_HANDLE,
            "is not live",
        );
    }
}

#[test]
fn tokens_outside_the_vocabulary_leave_the_sequence_unchanged() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid.
    unsafe {
        let seq = new_seq(f.engine);
        let mut pf = null_mut();
        let bad = [1, 2, VOCAB];
        expect(
            engram_prefill_begin(seq, bad.as_ptr(), 3, null(), &mut pf),
            ENGRAM_INVALID_ARGUMENT,
            "outside the vocabulary",
        );
        assert!(pf.is_null());
        expect(
            engram_step_begin(seq, VOCAB + 5),
            ENGRAM_INVALID_ARGUMENT,
            "outside the vocabulary",
        );
        expect(
            engram_hint(seq, [u32::MAX].as_ptr(), 1),
            ENGRAM_INVALID_ARGUMENT,
            "outside the vocabulary",
        );
        // The sequence is still empty: the same ids as a fresh one.
        let mut ids = vec![0u32; 48];
        ok(engram_seq_row_ids(
            seq,
            [7].as_ptr(),
            1,
            null(),
            ids.as_mut_ptr(),
            48,
        ));
        let fresh = new_seq(f.engine);
        let mut want = vec![0u32; 48];
        ok(engram_seq_row_ids(
            fresh,
            [7].as_ptr(),
            1,
            null(),
            want.as_mut_ptr(),
            48,
        ));
        assert_eq!(ids, want);
        expect(
            engram_seq_row_ids(seq, [7].as_ptr(), 1, null(), ids.as_mut_ptr(), 47),
            ENGRAM_BUFFER_TOO_SMALL,
            "ids_len is 47",
        );
        ok(engram_seq_free(fresh));
        ok(engram_seq_free(seq));
        ok(engram_close(f.engine));
    }
}

#[test]
fn wrong_state_and_small_buffers_are_refused_without_consuming() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid.
    unsafe {
        let seq = new_seq(f.engine);
        let pf = begin(seq, &[3; 16]);
        expect(
            engram_step_begin(seq, 4),
            ENGRAM_STATE,
            "engram_prefill_end first",
        );
        let mut second = null_mut();
        expect(
            engram_prefill_begin(seq, [1].as_ptr(), 1, null(), &mut second),
            ENGRAM_STATE,
            "still live",
        );
        let mut rows = std::mem::zeroed();
        ok(engram_prefill_wait(pf, 1, 8, &mut rows));
        expect(
            engram_prefill_wait(pf, 1, 4, &mut rows),
            ENGRAM_INVALID_ARGUMENT,
            "waits advance",
        );
        let need = 8 * 24 * 264;
        let mut buf = vec![0u8; need];
        let mut written = 0usize;
        expect(
            engram_prefill_wait_into(pf, 1, 16, buf.as_mut_ptr().cast(), need - 1, &mut written),
            ENGRAM_BUFFER_TOO_SMALL,
            "nothing was consumed",
        );
        ok(engram_prefill_wait_into(
            pf,
            1,
            16,
            buf.as_mut_ptr().cast(),
            need,
            &mut written,
        ));
        assert_eq!(written, need);
        // Releasing the rows of the last wait: twice is fine, a table out
        // of range is refused, an ended prefill is no handle.
        ok(engram_prefill_release(pf, 1));
        ok(engram_prefill_release(pf, 1));
        expect(
            engram_prefill_release(pf, 2),
            ENGRAM_INVALID_ARGUMENT,
            "table 2 out of range",
        );
        ok(engram_prefill_end(pf));
        expect(
            engram_prefill_release(pf, 0),
            ENGRAM_INVALID_HANDLE,
            "engram_prefill_release",
        );
        expect(
            engram_step_wait(seq, 0, &mut rows),
            ENGRAM_INVALID_ARGUMENT,
            "before step_begin",
        );
        ok(engram_step_begin(seq, 4));
        let one = 24 * 264;
        expect(
            engram_step_wait_into(seq, 0, buf.as_mut_ptr().cast(), one - 1, &mut written),
            ENGRAM_BUFFER_TOO_SMALL,
            "the rows need 6336",
        );
        ok(engram_step_wait_into(
            seq,
            0,
            buf.as_mut_ptr().cast(),
            one,
            &mut written,
        ));
        assert_eq!(written, one);
        ok(engram_seq_free(seq));
        ok(engram_close(f.engine));
    }
}

#[test]
fn bad_options_are_reported() {
    let f = open();
    let mut engine = null_mut();
    let try_open = |opts: &engram_options, engine: &mut *mut engram_engine| {
        // SAFETY: valid string, options and out-pointer.
        unsafe { engram_open(f.path.as_ptr(), opts, engine) }
    };
    // Each a valid default with one field changed, and what the error says.
    type Change = fn(&mut engram_options);
    let bad: [(Change, &str); 6] = [
        (|o| o.struct_size = 8, "struct_size is 8"),
        (|o| o.readers = 7, "options.readers 7"),
        (
            |o| o.prefill_batches_in_flight = 0,
            "prefill_batches_in_flight",
        ),
        (|o| o.prefetch = 2, "options.prefetch must be 0 or 1"),
        (|o| o.backend = 9, "options.backend 9"),
        (|o| o.chunk_tokens = 0, "chunk_tokens"),
    ];
    for (change, needle) in bad {
        let mut opts = options();
        change(&mut opts);
        expect(
            try_open(&opts, &mut engine),
            ENGRAM_INVALID_ARGUMENT,
            needle,
        );
    }
    assert!(engine.is_null());

    // A newer caller's larger struct: accepted while its extra fields are 0.
    #[repr(C)]
    struct Newer {
        base: engram_options,
        extra: u64,
    }
    let mut newer = Newer {
        base: options(),
        extra: 0,
    };
    newer.base.struct_size = std::mem::size_of::<Newer>() as u32;
    ok(try_open(&newer.base, &mut engine));
    // SAFETY: a live handle.
    ok(unsafe { engram_close(engine) });
    newer.extra = 1;
    expect(
        try_open(&newer.base, &mut engine),
        ENGRAM_INVALID_ARGUMENT,
        "does not know",
    );

    let missing = CString::new("/nonexistent/model.gguf").unwrap();
    // SAFETY: valid string and out-pointer.
    let status = unsafe { engram_open(missing.as_ptr(), null(), &mut engine) };
    expect(status, ENGRAM_IO, "/nonexistent/model.gguf");
    // SAFETY: a live handle.
    ok(unsafe { engram_close(f.engine) });
}

#[test]
fn strings_free_once_and_stats_cover_freed_sequences() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid.
    unsafe {
        let seq = new_seq(f.engine);
        let pf = begin(seq, &[9; 32]);
        let mut rows = std::mem::zeroed();
        for table in 0..2 {
            ok(engram_prefill_wait(pf, table, 32, &mut rows));
        }
        ok(engram_prefill_end(pf));
        ok(engram_step_begin(seq, 11));
        ok(engram_step_wait(seq, 0, &mut rows));
        let mut one: *mut c_char = null_mut();
        ok(engram_seq_stats_json(seq, &mut one));
        let doc: serde_json::Value =
            serde_json::from_str(std::ffi::CStr::from_ptr(one).to_str().unwrap()).unwrap();
        ok(engram_string_free(one));
        assert_eq!(doc["decode"]["stall_per_token_total"]["count"], 1);
        let mut stall = std::mem::zeroed::<engram_stall>();
        ok(engram_seq_stall(seq, ENGRAM_PHASE_PREFILL, &mut stall));
        assert_eq!((stall.tokens, stall.waits), (32, 2));
        expect(
            engram_seq_stall(seq, 2, &mut stall),
            ENGRAM_INVALID_ARGUMENT,
            "phase 2",
        );
        ok(engram_seq_free(seq));
        let mut json: *mut c_char = null_mut();
        ok(engram_stats_json(f.engine, &mut json));
        let text = std::ffi::CStr::from_ptr(json).to_str().unwrap().to_owned();
        ok(engram_string_free(json));
        expect(
            engram_string_free(json),
            ENGRAM_INVALID_HANDLE,
            "freed twice",
        );
        ok(engram_string_free(null_mut()));
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(doc["sequences_freed"], 1, "{text}");
        assert_eq!(doc["totals"]["prefill"][1]["tokens"], 32, "{text}");
        assert_eq!(doc["totals"]["decode"][0]["waits"], 1, "{text}");
        ok(engram_close(f.engine));
    }
}

/// An `engram_hints` of these slices (counts as given).
fn hints(draft: &[u32], draft_probs: &[f32], alts: &[u32], alt_probs: &[f32]) -> engram_hints {
    engram_hints {
        draft: draft.as_ptr(),
        n_draft: draft.len(),
        draft_probs: draft_probs.as_ptr(),
        n_draft_probs: draft_probs.len(),
        alternatives: alts.as_ptr(),
        n_alternatives: alts.len(),
        alternative_probs: alt_probs.as_ptr(),
        n_alternative_probs: alt_probs.len(),
    }
}

#[test]
fn hints_with_alternatives_are_checked_and_counted_per_kind() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid for its count.
    unsafe {
        let seq = new_seq(f.engine);
        let bad = [
            (hints(&[5, 6], &[0.5, f32::NAN], &[], &[]), "draft_probs[1]"),
            (hints(&[5, 6], &[0.5], &[], &[]), "draft_probs"),
            (hints(&[5], &[], &[7, 8], &[0.5]), "alternative_probs"),
            (hints(&[5], &[], &[7], &[1.5]), "alternative_probs[0]"),
            (hints(&[5; 17], &[], &[], &[]), "draft"),
            (hints(&[], &[], &[7; 33], &[0.1; 33]), "alternatives"),
            (hints(&[VOCAB], &[], &[], &[]), "outside the vocabulary"),
        ];
        for (h, name) in &bad {
            expect(engram_hint_ex(seq, h), ENGRAM_INVALID_ARGUMENT, name);
        }
        expect(engram_hint_ex(seq, null()), ENGRAM_NULL_POINTER, "hints");
        let mut no_draft = hints(&[], &[], &[], &[]);
        no_draft.n_draft = 2;
        no_draft.draft = null();
        expect(
            engram_hint_ex(seq, &no_draft),
            ENGRAM_NULL_POINTER,
            "hints.draft",
        );
        // A draft chain 5, 6 and an alternative 7 of the next token; the
        // next token is 5: 5 and 7 are resolved (read or dropped), 6 (after
        // 5) is still to come.
        ok(engram_hint_ex(
            seq,
            &hints(&[5, 6], &[0.9, 0.5], &[7], &[0.3]),
        ));
        ok(engram_step_begin(seq, 5));
        let mut json: *mut c_char = null_mut();
        ok(engram_seq_stats_json(seq, &mut json));
        let doc: serde_json::Value =
            serde_json::from_str(std::ffi::CStr::from_ptr(json).to_str().unwrap()).unwrap();
        ok(engram_string_free(json));
        let count = |kind: &str, field: &str| doc["hint_use"][kind][field].as_u64().unwrap();
        for kind in ["draft", "alternative"] {
            assert_eq!(
                count(kind, "rows_read") + count(kind, "rows_dropped"),
                48,
                "{kind}: {doc}"
            );
            assert!(count(kind, "rows_used") <= count(kind, "rows_read"));
        }
        assert_eq!(count("alternative", "rows_used"), 0, "7 was not the token");
        ok(engram_seq_free(seq));
        ok(engram_close(f.engine));
    }
}

#[test]
fn closing_the_engine_cancels_open_sequences() {
    let f = open();
    // SAFETY: (this test) every pointer is NULL or valid.
    unsafe {
        let seq = new_seq(f.engine);
        ok(engram_close(f.engine));
        expect(engram_step_begin(seq, 1), ENGRAM_CANCELLED, "cancelled");
        ok(engram_seq_free(seq));
    }
    assert_eq!(last_error(), "");
}

#[test]
fn status_names_cover_any_int() {
    let name = |s: i32| {
        // SAFETY: static strings.
        unsafe { std::ffi::CStr::from_ptr(engram_status_name(s)) }
            .to_str()
            .unwrap()
    };
    assert_eq!(name(0), "ENGRAM_OK");
    assert_eq!(
        name(ENGRAM_BUFFER_TOO_SMALL as i32),
        "ENGRAM_BUFFER_TOO_SMALL"
    );
    assert_eq!(name(-3), "ENGRAM_UNKNOWN_STATUS");
}
