//! Fault tests: read errors reach the waiter naming table, row and offset;
//! cancellation (dropping a prefill, a sequence or the engine) ends every
//! wait and frees everything; nothing hangs.

mod prefetch_util;

use std::sync::Arc;
use std::time::Duration;

use engram::prefetch::{Engine, PrefetchConfig};
use engram::Error;
use prefetch_util::*;

const LIMIT: Duration = Duration::from_secs(30);

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7 + i / 3) % VOCAB).collect()
}

fn overlap_config() -> PrefetchConfig {
    engram::testing::small_prefetch()
}

/// The first token of `table` whose rows include `row`, and `row`.
fn victim(ids: &[u32], table: usize, at_least: usize) -> (usize, u64) {
    let cols = 4;
    let tables = 2;
    let token = at_least;
    (
        token,
        u64::from(ids[token * tables * cols + table * cols + 1]),
    )
}

fn check_error_reaches_waiter(config: PrefetchConfig) {
    let layout = tiny_layout();
    let tokens = prompt(100);
    let probe = Engine::new(
        source_arc(MemSource::for_layout(&layout)).1,
        layout.clone(),
        config.clone(),
    )
    .unwrap();
    let ids = probe.sequence().row_ids(&tokens, None).unwrap();
    let (bad_token, bad_row) = victim(&ids, 1, 60);
    // The first token that reads the bad row (it may repeat earlier).
    let first_bad = (0..tokens.len())
        .find(|&t| (0..4).any(|c| u64::from(ids[t * 8 + 4 + c]) == bad_row))
        .unwrap();
    assert!(first_bad <= bad_token);
    let mut mem = MemSource::for_layout(&layout);
    mem.fail_row = Some((1, bad_row));
    let (_mem, source) = source_arc(mem);
    let engine = Engine::new(source, layout, config).unwrap();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        // Table 0 is unaffected.
        let mut upto = 0;
        while upto < 100 {
            upto = (upto + 16).min(100);
            prefill.wait(0, upto).unwrap();
        }
        // Table 1 fails at or before the bad token, with the row named.
        let mut upto = 0;
        let err = loop {
            upto = (upto + 16).min(100);
            match prefill.wait(1, upto) {
                Ok(_) => assert!(
                    upto as usize <= first_bad,
                    "rows past the bad row delivered"
                ),
                Err(e) => break e,
            }
        };
        match err {
            Error::RowRead {
                table, row, offset, ..
            } => {
                assert_eq!((table, row), (1, bad_row));
                assert_eq!(offset, bad_row * ROW_BYTES as u64);
            }
            other => panic!("expected RowRead, got {other}"),
        }
        // Every later wait ends too.
        assert!(prefill.wait(1, 100).is_err());
    });
}

#[test]
fn prefill_read_error_reaches_waiter_overlapped() {
    check_error_reaches_waiter(overlap_config());
}

#[test]
fn prefill_read_error_reaches_waiter_at_wait_and_one_row_at_a_time() {
    check_error_reaches_waiter(overlap_config().with_prefetch(false).with_batch(false));
}

#[test]
fn prefill_read_error_reaches_waiter_whole_table() {
    check_error_reaches_waiter(overlap_config().with_pipeline(false));
}

#[test]
fn decode_read_error_and_panic_reach_step_wait() {
    let layout = tiny_layout();
    for inject_panic in [false, true] {
        let probe = Engine::new(
            source_arc(MemSource::for_layout(&layout)).1,
            layout.clone(),
            overlap_config(),
        )
        .unwrap();
        let mut p = probe.sequence();
        drop(p.prefill(&[3, 4, 5], None).unwrap());
        let ids = p.row_ids(&[9], None).unwrap();
        let bad = u64::from(ids[4 + 2]); // table 1, column 2
        let mut mem = MemSource::for_layout(&layout);
        if inject_panic {
            mem.panic_row = Some((1, bad));
        } else {
            mem.fail_row = Some((1, bad));
        }
        let engine = Engine::new(source_arc(mem).1, layout.clone(), overlap_config()).unwrap();
        within(LIMIT, move || {
            let mut seq = engine.sequence();
            drop(seq.prefill(&[3, 4, 5], None).unwrap());
            seq.step_begin(9).unwrap();
            assert!(seq.step_wait(0).is_ok());
            let err = seq.step_wait(1).unwrap_err();
            if inject_panic {
                assert!(err.to_string().contains("panicked"), "{err}");
            } else {
                assert!(matches!(err, Error::RowRead { table: 1, row, .. } if row == bad));
            }
            // The failure is the step's alone: the next step reads afresh.
            let next = seq.row_ids(&[10], None).unwrap();
            let hits_bad = next[4..8].iter().any(|&r| u64::from(r) == bad);
            seq.step_begin(10).unwrap();
            assert!(seq.step_wait(0).is_ok());
            assert_eq!(seq.step_wait(1).is_err(), hits_bad);
        });
    }
}

#[test]
fn dropping_a_prefill_mid_way_cancels_and_frees_everything() {
    let layout = tiny_layout();
    let mut mem = MemSource::for_layout(&layout);
    mem.delay = Some(Duration::from_millis(2)); // stands in for device time
    let (mem, source) = source_arc(mem);
    let engine = Engine::new(source, layout, overlap_config()).unwrap();
    let before = Arc::strong_count(&mem);
    let tokens = prompt(400);
    let engine = within(LIMIT, move || {
        let mut seq = engine.sequence();
        let during = {
            let mut prefill = seq.prefill(&tokens, None).unwrap();
            prefill.wait(0, 8).unwrap();
            Arc::strong_count(&mem)
        }; // drop: cancel + join
        assert!(during > before + 1, "readers held the source while running");
        // Jobs are gone: only the engine and the sequence hold the source.
        assert_eq!(Arc::strong_count(&mem), before + 1);
        drop(seq);
        assert_eq!(Arc::strong_count(&mem), before);
        (engine, mem)
    });
    let (engine, mem) = engine;
    drop(engine);
    assert_eq!(
        Arc::strong_count(&mem),
        1,
        "engine drop released every reference"
    );
}

#[test]
fn dropping_the_engine_ends_pending_waits_with_cancelled() {
    let layout = tiny_layout();
    let mut mem = MemSource::for_layout(&layout);
    mem.delay = Some(Duration::from_millis(3));
    let (mem, source) = source_arc(mem);
    let engine = Engine::new(source, layout, overlap_config().with_workers(1)).unwrap();
    let tokens = prompt(300);
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        prefill.wait(0, 4).unwrap();
        drop(engine); // joins the pool; queued chunks are abandoned
        let mut saw_cancel = false;
        for upto in (20..=300).step_by(20) {
            match prefill.wait(0, upto) {
                Ok(_) => {}
                Err(Error::Cancelled) => {
                    saw_cancel = true;
                    break;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert!(
            saw_cancel,
            "the whole prompt was read after the engine was dropped"
        );
        drop(prefill);
        assert!(matches!(seq.step_begin(1), Err(Error::Cancelled)));
        drop(seq);
        assert_eq!(Arc::strong_count(&mem), 1);
    });
}

#[test]
fn bad_waits_are_errors_not_hangs() {
    let layout = tiny_layout();
    let engine = Engine::new(
        source_arc(MemSource::for_layout(&layout)).1,
        layout,
        overlap_config(),
    )
    .unwrap();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        assert!(seq.step_wait(0).is_err(), "step_wait before step_begin");
        assert!(seq.prefill(&[1, 2], Some(&[true])).is_err(), "mask length");
        assert!(
            seq.prefill(&[VOCAB + 5], None).is_err(),
            "token outside vocabulary"
        );
        let tokens = prompt(100);
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        assert!(prefill.wait(2, 10).is_err(), "no table 2");
        assert!(prefill.wait(0, 101).is_err(), "past the end");
        assert!(
            prefill.wait(0, 33).is_err(),
            "more than the ring (32 tokens)"
        );
        prefill.wait(0, 30).unwrap();
        assert!(prefill.wait(0, 20).is_err(), "waits go forward");
    });
}
