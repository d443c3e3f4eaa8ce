//! Eight sequences prefill and decode at once on one engine (shared pool
//! and source); every row matches a plain synchronous read.

mod prefetch_util;

use std::time::Duration;

use engram::prefetch::{Engine, PrefetchConfig};
use prefetch_util::*;

const STEPS: u32 = if cfg!(miri) { 3 } else { 20 };

#[test]
fn eight_sequences_prefill_and_decode_concurrently() {
    let layout = tiny_layout();
    let mut mem = MemSource::for_layout(&layout);
    if !cfg!(miri) {
        mem.delay = Some(Duration::from_micros(300)); // stands in for device time
    }
    let (_mem, source) = source_arc(mem);
    let config = PrefetchConfig::default()
        .with_chunk_tokens(32)
        .with_first_chunk_tokens(8)
        .with_ring_chunks(2)
        .with_overlap_threshold(0)
        .with_lookup_hints(true)
        .with_workers(3);
    let engine = Engine::new(source, layout.clone(), config).unwrap();
    within(Duration::from_secs(60), move || {
        std::thread::scope(|scope| {
            for s in 0..8u32 {
                let engine = &engine;
                scope.spawn(move || {
                    // Small under miri (an interpreter), full size natively.
                    let n = if cfg!(miri) {
                        12 + s as usize
                    } else {
                        150 + 37 * s as usize
                    };
                    let tokens: Vec<u32> = (0..n as u32)
                        .map(|i| (i * (s + 3) + i / 5) % VOCAB)
                        .collect();
                    let mut seq = engine.sequence();
                    let ids = seq.row_ids(&tokens, None).unwrap();
                    let mut prefill = seq.prefill(&tokens, None).unwrap();
                    let step = 24 + s;
                    let mut upto = 0;
                    while upto < n as u32 {
                        let from = upto;
                        upto = (upto + step).min(n as u32);
                        for table in 0..2 {
                            let got = prefill.wait(table, upto).unwrap().to_vec();
                            let want = reference(&ids, 2, 4, table, from as usize, upto as usize);
                            assert!(got == want, "seq {s} table {table} {from}..{upto}");
                        }
                    }
                    drop(prefill);
                    for k in 0..STEPS {
                        let token = (k * 11 + s) % VOCAB;
                        let ids = seq.row_ids(&[token], None).unwrap();
                        seq.step_begin(token).unwrap();
                        for table in 0..2 {
                            let got = seq.step_wait(table).unwrap().to_vec();
                            assert_eq!(got, reference(&ids, 2, 4, table, 0, 1), "seq {s} step {k}");
                        }
                        if k % 7 == 6 {
                            seq.rollback(1).unwrap();
                        }
                    }
                    let stats = seq.stats();
                    assert_eq!(stats.decode.tables[1].waits, u64::from(STEPS));
                    assert_eq!(stats.prefill.tables[0].tokens, n as u64);
                });
            }
        });
    });
}
