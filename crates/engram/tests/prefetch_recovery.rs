//! A failed call changes nothing and every wait ends: decode over a model
//! file truncated in the middle of table 1 or with injected `EIO` on each
//! table in turn, prefetch on and off. A read error fails the step it
//! belongs to; the next step reads afresh and returns the model's rows.

mod prefetch_util;

use std::sync::Arc;
use std::time::Duration;

use engram::io::fault::{FaultPlan, FaultSource};
use engram::io::IoConfig;
use engram::model::Model;
use engram::prefetch::{Engine, PrefetchConfig, Sequence};
use engram::Error;
use prefetch_util::{source_arc, tiny_layout, within, write_file_model, MemSource, VOCAB};

const LIMIT: Duration = Duration::from_secs(60);
const COLS: usize = 4;
const STEPS: u32 = 40;

/// A model in a fresh directory and a source over it whose first `EIO`
/// read overlapping `table`'s rows fails (once).
fn with_one_eio(table: usize) -> (tempfile::TempDir, Model, Arc<FaultSource>) {
    let dir = tempfile::tempdir().unwrap();
    let model = write_file_model(dir.path());
    let t = &model.tables[table];
    let start = t.start_offset();
    let range = start..start + t.rows * t.full_row_bytes() as u64;
    let plan = FaultPlan {
        eio_in_range: Some((range, 1)),
        ..FaultPlan::default()
    };
    let source = Arc::new(FaultSource::open(&model.tables, &IoConfig::default(), plan).unwrap());
    (dir, model, source)
}

fn config(prefetch: bool) -> PrefetchConfig {
    PrefetchConfig::default()
        .with_prefetch(prefetch)
        .with_overlap_threshold(0)
}

/// The model's own rows of `table` for `rows` (synchronous preads).
fn model_rows(model: &Model, table: usize, rows: &[u32]) -> Vec<u8> {
    let rows: Vec<u64> = rows.iter().map(|&r| u64::from(r)).collect();
    let mut raw = Vec::new();
    model.read_raw_rows(table, &rows, &mut raw).unwrap();
    raw
}

fn token(step: u32) -> u32 {
    (step * 17 + 3) % VOCAB
}

/// What one decode run saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Per table: steps whose wait failed.
    failed: [Vec<u32>; 2],
}

/// Decodes `STEPS` tokens; every wait that returns rows must return the
/// model's, every other one an I/O error. With `retry`, a failed wait is repeated once (it reads again without
/// prefetch).
fn decode(seq: &mut Sequence, model: &Model, retry: bool) -> Outcome {
    let mut out = Outcome::default();
    for step in 0..STEPS {
        let ids = seq.row_ids(&[token(step)], None).unwrap();
        // A step after a failed one begins: the failure was that step's.
        seq.step_begin(token(step)).unwrap();
        for table in 0..2 {
            let rows = &ids[table * COLS..(table + 1) * COLS];
            let mut result = seq.step_wait(table).map(|v| v.to_vec());
            if result.is_err() && retry {
                result = seq.step_wait(table).map(|v| v.to_vec());
            }
            match result {
                Ok(got) => assert!(
                    got == model_rows(model, table, rows),
                    "step {step} table {table}: rows differ from the model's"
                ),
                Err(e) => {
                    assert!(
                        matches!(e, Error::RowRead { .. } | Error::Io { .. }),
                        "step {step} table {table}: {e}"
                    );
                    out.failed[table].push(step);
                }
            }
        }
    }
    out
}

/// [`decode`] (with `retry`) on a fresh engine over a source with one
/// `EIO` in `table`, under the timeout; the `EIO` must have been injected.
fn decode_with_one_eio(table: usize, prefetch: bool, retry: bool) -> Outcome {
    let (_dir, model, source) = with_one_eio(table);
    let engine = Engine::for_model(&model, source.clone(), config(prefetch)).unwrap();
    let outcome = within(LIMIT, move || {
        let mut seq = engine.sequence();
        decode(&mut seq, &model, retry)
    });
    assert_eq!(source.eio_injected(), 1);
    outcome
}

#[test]
fn decode_over_a_file_truncated_in_table_1_fails_only_the_steps_that_need_lost_rows() {
    for prefetch in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let model = write_file_model(dir.path());
        let t1 = &model.tables[1];
        let keep_rows = t1.rows / 2;
        let cut = t1.start_offset() + keep_rows * t1.full_row_bytes() as u64;
        // The reference reads the whole file; the engine reads a copy,
        // cut in the middle of table 1 (after it was opened, as a file
        // that shrinks under a running engine) by its first read.
        let victim = tempfile::tempdir().unwrap();
        let copy = write_file_model(victim.path());
        let plan = FaultPlan {
            truncate_at_read: Some((0, cut)),
            ..FaultPlan::default()
        };
        let source = FaultSource::open(&copy.tables, &IoConfig::default(), plan).unwrap();
        let engine = Engine::for_model(&model, Arc::new(source), config(prefetch)).unwrap();
        let outcome = within(LIMIT, move || {
            let mut seq = engine.sequence();
            let mut expected: [Vec<u32>; 2] = Default::default();
            let mut probe = engine.sequence();
            for step in 0..STEPS {
                let ids = probe.row_ids(&[token(step)], None).unwrap();
                probe.step_begin(token(step)).unwrap();
                if ids[COLS..].iter().any(|&r| u64::from(r) >= keep_rows) {
                    expected[1].push(step);
                }
            }
            drop(probe);
            let outcome = decode(&mut seq, &model, false);
            (outcome, expected)
        });
        let (outcome, expected) = outcome;
        assert!(outcome.failed[0].is_empty(), "{outcome:?}");
        assert!(!expected[1].is_empty(), "no step reads past the cut");
        assert_eq!(outcome.failed[1], expected[1], "prefetch {prefetch}");
    }
}

#[test]
fn a_transient_eio_on_each_table_fails_one_step_and_the_next_reads_afresh() {
    for prefetch in [true, false] {
        for table in 0..2 {
            let outcome = decode_with_one_eio(table, prefetch, false);
            assert_eq!(
                outcome.failed[table],
                [0],
                "prefetch {prefetch} table {table}"
            );
            assert!(outcome.failed[1 - table].is_empty(), "{outcome:?}");
        }
    }
}

#[test]
fn without_prefetch_a_failed_wait_can_be_repeated_and_reads_again() {
    for table in 0..2 {
        let outcome = decode_with_one_eio(table, false, true);
        assert!(
            outcome.failed.iter().all(Vec::is_empty),
            "the repeated wait read the rows: {outcome:?}"
        );
    }
}

#[test]
fn an_eio_during_a_prefill_fails_that_prefill_and_decode_goes_on() {
    for table in 0..2 {
        let (_dir, model, source) = with_one_eio(table);
        let engine = Engine::for_model(&model, source, config(true)).unwrap();
        within(LIMIT, move || {
            let mut seq = engine.sequence();
            let prompt: Vec<u32> = (0..200).map(|i| (i * 7 + 1) % VOCAB).collect();
            {
                let mut prefill = seq.prefill(&prompt, None).unwrap();
                let mut failed = false;
                for upto in (20..=200).step_by(20) {
                    failed |= prefill.wait(table, upto).is_err();
                    if failed {
                        break;
                    }
                }
                assert!(failed, "table {table}: the injected EIO reached no wait");
            } // dropping the failed prefill returns
            assert_eq!(seq.len(), 200);
            let failed = decode(&mut seq, &model, false);
            assert!(failed.failed.iter().all(Vec::is_empty), "{failed:?}");
        });
    }
}

/// An engine over the in-memory tiny model, prefetch on.
fn mem_engine() -> Engine {
    let layout = tiny_layout();
    let source = source_arc(MemSource::for_layout(&layout)).1;
    Engine::new(source, layout, config(true)).unwrap()
}

#[test]
fn a_refused_step_begin_or_prefill_leaves_the_sequence_as_it_was() {
    let engine = mem_engine();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        drop(seq.prefill(&[1, 2, 3], None).unwrap());
        seq.step_begin(4).unwrap();
        // Both tables read, so no reader of the step is left to change the
        // stats below (a table's wait may read it itself, before the
        // reader has read the other).
        seq.step_wait(0).unwrap();
        let rows = seq.step_wait(1).unwrap().to_vec();
        let first = seq.step_wait(1).unwrap().first_token();
        let next_ids = seq.row_ids(&[5], None).unwrap();
        let recorder = seq.stats_recorder();
        let before = recorder.snapshot().to_json();
        assert!(
            seq.step_begin(VOCAB + 1).is_err(),
            "token outside vocabulary"
        );
        assert!(seq.prefill(&[1, VOCAB], None).is_err());
        assert!(seq.prefill(&[1, 2], Some(&[true])).is_err(), "mask length");
        assert!(seq.hint(&[VOCAB + 3]).is_err());
        // Nothing changed: tokens, stats, the step's rows, the next hash.
        assert_eq!(seq.tokens(), [1, 2, 3, 4]);
        assert_eq!(recorder.snapshot().to_json(), before);
        let view = seq.step_wait(1).unwrap();
        assert_eq!(view.first_token(), first);
        assert!(view.to_vec() == rows);
        assert_eq!(seq.row_ids(&[5], None).unwrap(), next_ids);
    });
}

#[test]
fn a_rollback_of_every_token_then_a_wait_does_not_underflow() {
    let engine = mem_engine();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        seq.step_begin(7).unwrap();
        seq.rollback(1).unwrap();
        assert!(seq.is_empty());
        let view = seq.step_wait(0).unwrap();
        assert_eq!(view.first_token(), 0);
    });
}
