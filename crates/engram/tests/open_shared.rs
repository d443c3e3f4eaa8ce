//! The sequence both bindings share (`SharedSequence`) enforces its rules
//! in one place: one live prefill, no step, rollback or second prefill
//! while it is live, ended prefills and closed sequences refused, sizes
//! checked before a wait consumes anything; and `OpenEngine::info` reports
//! the model's facts.

mod prefetch_util;

use std::time::Duration;

use engram::open::{EngineBuilder, SeqCall, SeqError, SharedSequence};
use engram::prefetch::RowFormat;
use prefetch_util::*;

fn open(dir: &std::path::Path) -> engram::OpenEngine {
    let mut builder = EngineBuilder::default();
    builder.prefetch.format = RowFormat::Raw;
    builder.build(write_file_model(dir)).unwrap()
}

/// Runs `test` on an engine over a fresh model file, within 30 s.
fn on_engine(test: impl FnOnce(engram::OpenEngine) + Send + 'static) {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    within(Duration::from_secs(30), move || test(engine));
}

fn tokens(n: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 7 + 3) % VOCAB).collect()
}

#[test]
fn a_live_prefill_refuses_steps_rollbacks_and_a_second_prefill() {
    on_engine(|engine| {
        let seq = SharedSequence::new(&engine, 0x10);
        let prompt = tokens(40);
        seq.lock().unwrap().begin_prefill(7, &prompt, None).unwrap();
        let refused = |r: Result<(), SeqError>| match r {
            Err(SeqError::PrefillLive { call, live: 7 }) => call,
            other => panic!("expected a refusal naming prefill 7, got {other:?}"),
        };
        let mut state = seq.lock().unwrap();
        assert_eq!(
            refused(state.begin_prefill(8, &prompt, None)),
            SeqCall::Prefill
        );
        assert_eq!(refused(state.step_begin(1)), SeqCall::StepBegin);
        assert_eq!(refused(state.rollback(1)), SeqCall::Rollback);
        assert_eq!(state.len(), 40, "refusals leave the sequence as it was");
        drop(state);

        // The wait goes through the live prefill only under its own name.
        let want = seq.rows_bytes(0, 40).unwrap();
        let got = seq.prefill_wait(7, 0, 40, |v| v.byte_len()).unwrap();
        assert_eq!(got, want);
        assert!(matches!(
            seq.prefill_wait(8, 1, 40, |v| v.byte_len()),
            Err(SeqError::PrefillEnded { id: 8 })
        ));

        seq.lock().unwrap().end_prefill(7);
        assert!(matches!(
            seq.with_prefill(7, |p| Ok(p.tokens())),
            Err(SeqError::PrefillEnded { id: 7 })
        ));
        let mut state = seq.lock().unwrap();
        state.step_begin(3).unwrap();
        state.rollback(1).unwrap();
        assert_eq!(state.len(), 40);
    });
}

#[test]
fn sizes_and_tables_are_checked_before_a_wait_consumes_rows() {
    on_engine(|engine| {
        let seq = SharedSequence::new(&engine, 0x20);
        assert_eq!(seq.tables(), 2);
        assert!(matches!(
            seq.rows_bytes(2, 1),
            Err(SeqError::TableOutOfRange {
                table: 2,
                tables: 2
            })
        ));
        assert_eq!(
            seq.rows_bytes(1, 3).unwrap(),
            3 * seq.rows_per_token() * engine.row_bytes(1, RowFormat::Raw)
        );
        seq.lock()
            .unwrap()
            .begin_prefill(1, &tokens(10), None)
            .unwrap();
        let need = seq.rows_bytes(0, 10).unwrap();
        let mut small = vec![0u8; need - 1];
        match seq.prefill_wait_into(1, 0, 10, &mut small) {
            Err(SeqError::BufferTooSmall { have, need: n }) => {
                assert_eq!((have, n), (need - 1, need));
            }
            other => panic!("expected BufferTooSmall, got {other:?}"),
        }
        // Nothing was consumed: the same wait succeeds with room.
        let mut out = vec![0u8; need + 5];
        assert_eq!(seq.prefill_wait_into(1, 0, 10, &mut out).unwrap(), need);
        let mut direct = vec![0u8; need];
        engine
            .read_rows(0, &row_ids_of(&engine, 0), RowFormat::Raw, &mut direct)
            .unwrap();
        assert_eq!(&out[..need], &direct[..], "the rows, in token order");
        seq.lock().unwrap().end_prefill(1);

        seq.lock().unwrap().step_begin(4).unwrap();
        let one = seq.rows_bytes(1, 1).unwrap();
        assert!(matches!(
            seq.step_wait_into(1, &mut vec![0u8; one - 1]),
            Err(SeqError::BufferTooSmall { .. })
        ));
        assert_eq!(seq.step_wait_into(1, &mut vec![0u8; one]).unwrap(), one);
        assert_eq!(seq.step_wait(1, |v| v.len()).unwrap(), 1);
    });
}

/// Table `table`'s row ids of the prompt of ten [`tokens`], in token order.
fn row_ids_of(engine: &engram::OpenEngine, table: usize) -> Vec<u32> {
    let seq = engine.engine.sequence();
    let ids = seq.row_ids(&tokens(10), None).unwrap();
    let columns = seq.rows_per_token();
    ids.chunks_exact(columns * seq.tables())
        .flat_map(|token| token[table * columns..(table + 1) * columns].to_vec())
        .collect()
}

#[test]
fn close_ends_the_prefill_refuses_later_calls_and_reports_once() {
    on_engine(|engine| {
        let seq = SharedSequence::new(&engine, 0x30);
        seq.lock()
            .unwrap()
            .begin_prefill(5, &tokens(30), None)
            .unwrap();
        let open_doc: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
        assert_eq!(open_doc["sequences_open"], 1);
        let mut ended = Vec::new();
        seq.close(|id| ended.push(id));
        assert_eq!(ended, [5], "the live prefill's name, under the lock");
        assert!(matches!(seq.lock(), Err(SeqError::Closed { id: 0x30 })));
        assert!(matches!(
            seq.prefill_wait(5, 0, 30, |_| ()),
            Err(SeqError::Closed { .. })
        ));
        seq.close(|_| panic!("closing twice ends nothing"));
        drop(seq); // and the drop does not report it again
        let doc: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
        assert_eq!(doc["sequences_open"], 0);
        assert_eq!(doc["sequences_freed"], 1);
        // A sequence dropped without close() is reported too.
        drop(SharedSequence::new(&engine, 0x40));
        let doc: serde_json::Value = serde_json::from_str(&engine.stats_json()).unwrap();
        assert_eq!(doc["sequences_freed"], 2);
    });
}

#[test]
fn info_reports_the_model_and_each_table() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let info = engine.info();
    let layout = file_layout();
    assert_eq!(info.rows_per_token, layout.columns());
    assert_eq!(info.vocab_size, VOCAB as usize);
    assert_eq!(info.row_dim, engram::codec::ROW_DIM);
    assert_eq!(info.format, RowFormat::Raw);
    assert_ne!(info.backend, engram::Backend::Auto);
    assert!(!info.cached);
    assert_eq!(info.tables.len(), 2);
    for (t, (got, want)) in info.tables.iter().zip(&layout.tables).enumerate() {
        assert_eq!(got.layer_id, want.layer_id);
        assert_eq!(got.rows, want.stored_rows);
        assert_eq!(got.stored_row_bytes, 264);
        assert_eq!(got.row_bytes, 264, "raw rows are delivered as stored");
        assert_eq!(got.encoding, engram::Encoding::E4m3E8m0Row264);
        assert_eq!(got.file, dir.path().join("m.gguf"));
        assert!(!got.split, "a GGUF table is one packed range");
        assert_eq!(engine.table_info(t).unwrap(), *got);
    }
    assert!(info.tables[1].offset > info.tables[0].offset);
    assert!(engine.table_info(2).is_err());
}
