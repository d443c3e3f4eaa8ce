//! A detached prefill (the C ABI's owner) outlives its sequence and even its
//! engine without touching freed memory, and delivers the same rows as a
//! borrowed one; the shared stats recorder sees its waits.

mod prefetch_util;

use std::time::Duration;

use engram::prefetch::{Engine, PrefetchConfig};
use engram::Error;
use prefetch_util::*;

fn config() -> PrefetchConfig {
    PrefetchConfig::default()
        .with_chunk_tokens(16)
        .with_first_chunk_tokens(8)
        .with_ring_chunks(2)
        .with_overlap_threshold(0)
}

#[test]
fn detached_prefill_outlives_its_sequence() {
    let layout = tiny_layout();
    let (_mem, source) = source_arc(MemSource::for_layout(&layout));
    let engine = Engine::new(source, layout, config()).unwrap();
    within(Duration::from_secs(30), move || {
        let tokens: Vec<u32> = (0..100).map(|i| (i * 7 + 3) % VOCAB).collect();
        let mut seq = engine.sequence();
        let ids = seq.row_ids(&tokens, None).unwrap();
        let recorder = seq.stats_recorder();
        let mut prefill = seq.prefill_detached(&tokens, None).unwrap();
        drop(seq); // the prefill owns its rings and readers
        let mut upto = 0;
        while upto < 100 {
            let from = upto;
            upto = (upto + 20).min(100);
            for table in 0..2 {
                let got = prefill.wait(table, upto).unwrap().to_vec();
                let want = reference(&ids, 2, 4, table, from as usize, upto as usize);
                assert!(got == want, "table {table} tokens {from}..{upto}");
            }
        }
        drop(prefill);
        let stats = recorder.snapshot();
        assert_eq!(stats.prefill.tables[0].tokens, 100);
        assert_eq!(stats.prefill.tables[1].waits, 5);
    });
}

#[test]
fn detached_prefill_after_engine_drop_reports_cancelled() {
    let layout = tiny_layout();
    let mut mem = MemSource::for_layout(&layout);
    mem.delay = Some(Duration::from_millis(20)); // the readers stay busy
    let (_mem, source) = source_arc(mem);
    let engine = Engine::new(source, layout, config()).unwrap();
    within(Duration::from_secs(30), move || {
        let tokens: Vec<u32> = (0..200).map(|i| i % VOCAB).collect();
        let mut seq = engine.sequence();
        let mut prefill = seq.prefill_detached(&tokens, None).unwrap();
        drop(engine);
        match prefill.wait(1, 32) {
            Err(Error::Cancelled) => {}
            other => panic!("expected Cancelled, got {other:?}"),
        }
        drop(seq);
        drop(prefill);
    });
}
