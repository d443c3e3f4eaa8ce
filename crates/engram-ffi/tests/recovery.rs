//! Every C call returns, and a failed one changes nothing: decode on a model
//! file truncated in the middle of table 1 under the running engine
//! (prefetch on and off), and `engram_prefill_begin` racing
//! `engram_seq_free` on one sequence. Each test runs under a timeout guard.

mod support;

use std::ffi::CString;
use std::ptr::{null, null_mut};
use std::time::Duration;

use engram::model::Model;
use engram_ffi::engram_status::*;
use engram_ffi::*;
use support::{ok, within, write_model};

const SCALE: u64 = 65536;
const ROWS_PER_TOKEN: usize = 24;
const ROW_BYTES: usize = 264;
const STEPS: u32 = 24;
const LIMIT: Duration = Duration::from_secs(120);

/// A handle moved to another thread as a number (it is one).
#[derive(Clone, Copy)]
struct Handle(usize);

fn token(step: u32) -> u32 {
    (step * 7919 + 11) % 129_280
}

fn open(path: &CString, prefetch: bool) -> *mut engram_engine {
    // SAFETY: zeroed plain integers, then filled by the library.
    let mut opts: engram_options = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointers and string.
    unsafe {
        ok(engram_options_default(&mut opts));
        opts.overlap_threshold = 0;
        opts.prefetch = u32::from(prefetch);
        opts.backend = ENGRAM_BACKEND_PSYNC;
        let mut engine = null_mut();
        ok(engram_open(path.as_ptr(), &opts, &mut engine));
        engine
    }
}

/// Per step, the rows of both tables (`[table][row bytes]`), read through
/// `engine` while the file is whole.
fn expected_rows(engine: *mut engram_engine) -> Vec<[Vec<u8>; 2]> {
    let mut out = Vec::new();
    // SAFETY: (this function) valid handles, buffers of the stated lengths.
    unsafe {
        let mut seq = null_mut();
        ok(engram_seq_new(engine, &mut seq));
        for step in 0..STEPS {
            let t = token(step);
            let mut ids = vec![0u32; 2 * ROWS_PER_TOKEN];
            ok(engram_seq_row_ids(
                seq,
                &t,
                1,
                null(),
                ids.as_mut_ptr(),
                ids.len(),
            ));
            let mut rows: [Vec<u8>; 2] = Default::default();
            for (table, dst) in rows.iter_mut().enumerate() {
                *dst = vec![0u8; ROWS_PER_TOKEN * ROW_BYTES];
                let ids = &ids[table * ROWS_PER_TOKEN..(table + 1) * ROWS_PER_TOKEN];
                ok(engram_rows_read(
                    engine,
                    table as u32,
                    ids.as_ptr(),
                    ids.len(),
                    ENGRAM_FORMAT_RAW,
                    dst.as_mut_ptr().cast(),
                    dst.len(),
                ));
            }
            ok(engram_step_begin(seq, t));
            out.push(rows);
        }
        ok(engram_seq_free(seq));
    }
    out
}

#[test]
fn decode_on_a_file_truncated_in_table_1_returns_from_every_call() {
    for prefetch in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = write_model(dir.path(), SCALE);
        let model = Model::open(&path).unwrap();
        let (t0, t1) = (&model.tables[0], &model.tables[1]);
        let start = |t: &engram::model::TableLocation| t.start_offset();
        assert!(start(t0) < start(t1), "table 0 lies before table 1");
        let cut = start(t1) + t1.rows / 2 * t1.full_row_bytes() as u64;
        let c_path = CString::new(path.to_str().unwrap()).unwrap();
        let engine = open(&c_path, prefetch);
        let expected = expected_rows(engine);
        // The file shrinks under the open engine, as a runtime would meet it.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let engine = Handle(engine.addr());
        let io_errors = within(LIMIT, move || {
            let engine: *mut engram_engine = std::ptr::without_provenance_mut(engine.0);
            let mut io_errors = 0;
            // SAFETY: valid handles, buffers of the stated lengths.
            unsafe {
                let mut seq = null_mut();
                ok(engram_seq_new(engine, &mut seq));
                let mut out = vec![0u8; ROWS_PER_TOKEN * ROW_BYTES];
                for step in 0..STEPS {
                    // The step after a failed one begins: the failure was
                    // that step's alone.
                    ok(engram_step_begin(seq, token(step)));
                    for table in 0..2 {
                        let mut written = 0;
                        let status = engram_step_wait_into(
                            seq,
                            table,
                            out.as_mut_ptr().cast(),
                            out.len(),
                            &mut written,
                        );
                        match status {
                            ENGRAM_OK => assert!(
                                out == expected[step as usize][table as usize],
                                "step {step} table {table}: rows differ"
                            ),
                            ENGRAM_IO if table == 1 => io_errors += 1,
                            other => panic!(
                                "step {step} table {table}: {other:?}: {}",
                                support::last_error()
                            ),
                        }
                    }
                }
                let mut json = null_mut();
                ok(engram_seq_stats_json(seq, &mut json));
                ok(engram_string_free(json));
                ok(engram_seq_free(seq));
                ok(engram_close(engine));
            }
            io_errors
        });
        assert!(
            io_errors > 0,
            "no step read past the cut (prefetch {prefetch})"
        );
    }
}

#[test]
fn prefill_begin_racing_seq_free_never_hands_out_an_ended_prefill() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_model(dir.path(), SCALE);
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    let engine = Handle(open(&c_path, true).addr());
    let (begun, refused) = within(LIMIT, move || {
        let engine: *mut engram_engine = std::ptr::without_provenance_mut(engine.0);
        let tokens: Vec<u32> = (0..64).map(token).collect();
        let (mut begun, mut refused) = (0, 0);
        for _ in 0..1000 {
            let mut seq = null_mut();
            // SAFETY: valid out-pointer.
            ok(unsafe { engram_seq_new(engine, &mut seq) });
            let seq = Handle(seq.addr());
            let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
            let starter = {
                let (gate, tokens) = (gate.clone(), tokens.clone());
                std::thread::spawn(move || {
                    let seq: *mut engram_seq = std::ptr::without_provenance_mut(seq.0);
                    let mut pf = null_mut();
                    gate.wait();
                    // SAFETY: valid tokens and out-pointer.
                    let status = unsafe {
                        engram_prefill_begin(seq, tokens.as_ptr(), tokens.len(), null(), &mut pf)
                    };
                    (status, Handle(pf.addr()))
                })
            };
            gate.wait();
            // SAFETY: the handle is looked up, not dereferenced.
            ok(unsafe { engram_seq_free(std::ptr::without_provenance_mut(seq.0)) });
            let (status, pf) = starter.join().unwrap();
            let pf: *mut engram_prefill = std::ptr::without_provenance_mut(pf.0);
            match status {
                // The prefill began before the free, which ended it: its
                // handle is gone with it.
                ENGRAM_OK => {
                    begun += 1;
                    // SAFETY: the handle is looked up, not dereferenced.
                    let end = unsafe { engram_prefill_end(pf) };
                    assert_eq!(
                        end, ENGRAM_INVALID_HANDLE,
                        "a live handle to an ended prefill"
                    );
                }
                ENGRAM_INVALID_HANDLE => {
                    refused += 1;
                    assert!(pf.is_null());
                }
                other => panic!("{other:?}: {}", support::last_error()),
            }
        }
        // SAFETY: the handle is looked up, not dereferenced.
        ok(unsafe { engram_close(engine) });
        (begun, refused)
    });
    assert_eq!(begun + refused, 1000);
    eprintln!("prefill_begin won {begun} races, seq_free {refused}");
}
