//! Panics injected into reader tasks (the test switch of `guard.rs`, outside
//! the row-source call): every wait ends with an internal error naming the
//! table, drops return, and the engine's threads survive. Each test runs
//! under a timeout so a hang fails it.

use std::sync::Arc;
use std::time::Duration;

use super::{Engine, PanicSite, PrefetchConfig, PrefillOrder};
use crate::layout::Layout;
use crate::testing::{row_bytes_of, small_prefetch, within, MemSource, ROW_BYTES};
use super::sync::lock_std as lock;
use crate::Error;

const LIMIT: Duration = Duration::from_secs(30);
/// Token ids used (all inside the V4.1 vocabulary).
const VOCAB: u32 = 5000;

/// The V4.1-Flash layout at a small scale: a few thousand rows per table.
fn layout() -> Layout {
    crate::layout::preset("deepseek-v4.1-flash", 65536).unwrap()
}

/// An in-memory source of [`layout`]'s tables.
fn source() -> Arc<MemSource> {
    Arc::new(MemSource::for_layout(&layout()))
}

fn engine(source: &Arc<MemSource>) -> Engine {
    Engine::new(source.clone(), layout(), small_prefetch()).unwrap()
}

/// An engine on `source` with [`small_prefetch`] and no reuse store, then
/// as `tune` sets it.
fn engine_without_store(source: &Arc<MemSource>, tune: impl FnOnce(&mut PrefetchConfig)) -> Engine {
    let mut config = PrefetchConfig {
        reuse_bytes: 0,
        ..small_prefetch()
    };
    tune(&mut config);
    Engine::new(source.clone(), layout(), config).unwrap()
}

/// `n` prompt tokens, distinct for the first few thousand.
fn prompt(n: u32) -> Vec<u32> {
    (0..n).map(|i| (i * 7919 + 11) % VOCAB).collect()
}

/// The rows a prefill delivers for `table`'s tokens `tokens`, given the
/// prompt's row ids `ids` (token-major, both tables) and `cols` rows a token.
fn expected(ids: &[u32], cols: usize, table: usize, tokens: std::ops::Range<usize>) -> Vec<u8> {
    tokens
        .flat_map(|t| ids[(t * 2 + table) * cols..][..cols].to_vec())
        .flat_map(|r| row_bytes_of(table, u64::from(r)))
        .collect()
}

fn internal(e: &Error, what: &str) -> bool {
    matches!(e, Error::Internal(m) if m.contains(what) && m.contains("panicked"))
}

/// Runs `body` on a fresh engine under the timeout; then checks that once
/// the engine is dropped no reader task kept the source.
fn on_fresh_engine(body: impl FnOnce(&Engine) + Send + 'static) {
    let source = source();
    let engine = engine(&source);
    let engine = within(LIMIT, move || {
        body(&engine);
        engine
    });
    drop(engine);
    assert_eq!(Arc::strong_count(&source), 1, "a task kept the source");
}

#[test]
fn a_panic_in_a_prefill_task_ends_every_wait_and_the_drop() {
    for table in 0..2 {
        on_fresh_engine(move |engine| {
            engine.inject_panic(PanicSite::Prefill, table, true);
            let mut seq = engine.sequence();
            let prompt: Vec<u32> = (0..120).map(|i| i % VOCAB).collect();
            {
                let mut prefill = seq.prefill(&prompt, None).unwrap();
                // The panicking table's first batch panics: its waits end
                // with the internal error; the other table's waits end too
                // (with rows, or the same error once nothing is scheduled).
                let err = prefill.wait(table, 4).unwrap_err();
                let name = format!("prefill reader of table {table}");
                assert!(internal(&err, &name), "{err}");
                let mut other = Ok(());
                for upto in (16..=112).step_by(16) {
                    other = prefill.wait(1 - table, upto).map(drop);
                    if other.is_err() {
                        break;
                    }
                }
                if let Err(e) = other {
                    assert!(internal(&e, &name), "{e}");
                }
            } // the drop returns
              // The engine's threads and the sequence live on.
            engine.inject_panic(PanicSite::Prefill, table, false);
            let mut prefill = seq.prefill(&prompt[..20], None).unwrap();
            prefill.wait(table, 20).unwrap();
            drop(prefill);
            seq.step_begin(3).unwrap();
            seq.step_wait(0).unwrap();
            seq.step_wait(1).unwrap();
            drop(seq);
        });
    }
}

#[test]
fn a_panic_in_a_decode_task_ends_every_wait_and_later_steps_are_refused() {
    for table in 0..2 {
        on_fresh_engine(move |engine| {
            let mut seq = engine.sequence();
            seq.step_begin(1).unwrap();
            // Both tables: a table the consumer did not wait could still be
            // claimed by step 1's reader after the panic is armed.
            seq.step_wait(0).unwrap();
            seq.step_wait(1).unwrap();
            engine.inject_panic(PanicSite::Decode, table, true);
            seq.hint(&[4, 5]).unwrap();
            seq.step_begin(2).unwrap();
            let name = format!("decode reader of table {table}");
            // The step's reader may already have panicked: a hint is then
            // refused with the same error.
            if let Err(e) = seq.hint(&[6]) {
                assert!(internal(&e, &name), "{e}");
            }
            // Table 0 is read first: a panic there leaves table 1 unread.
            for t in 0..2 {
                match seq.step_wait(t) {
                    Ok(_) => assert!(t < table, "table {t} read after the panic"),
                    Err(e) => assert!(internal(&e, "decode reader of table"), "{e}"),
                }
            }
            let err = seq.step_begin(3).unwrap_err();
            assert!(internal(&err, &name), "{err}");
            assert_eq!(seq.len(), 2, "the refused step took no token");
            drop(seq); // returns: hints held by the broken step went out
            engine.inject_panic(PanicSite::Decode, table, false);
            let mut fresh = engine.sequence();
            fresh.step_begin(3).unwrap();
            fresh.step_wait(1).unwrap();
            drop(fresh);
        });
    }
}

#[test]
fn a_panic_in_a_hint_task_ends_nothing_else() {
    on_fresh_engine(|engine| {
        engine.inject_panic(PanicSite::Hint, 0, true);
        let mut seq = engine.sequence();
        for step in 0..20 {
            seq.hint(&[step % VOCAB, (step + 1) % VOCAB]).unwrap();
            seq.step_begin(step % VOCAB).unwrap();
            seq.step_wait(0).unwrap();
            seq.step_wait(1).unwrap();
        }
        drop(seq);
    });
}

#[test]
fn a_prefill_over_the_size_limit_is_refused_before_anything_changes() {
    assert!(super::prefill_tokens(super::ready::MAX_COUNT as usize).is_ok());
    let err = super::prefill_tokens(super::ready::MAX_COUNT as usize + 1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
fn many_decode_steps_never_run_the_ready_count_up() {
    // An epoch per step: the count is 0 or 1 whatever the step number, so
    // a wait can never return before its rows are written once a running
    // count would have saturated.
    let source = source();
    let engine = engine(&source);
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        for step in 0..3000u32 {
            let token = step % VOCAB;
            let ids = seq.row_ids(&[token], None).unwrap();
            seq.step_begin(token).unwrap();
            let rows = seq.step_wait(1).unwrap().to_vec();
            let cols = seq.rows_per_token();
            let want: Vec<u8> = ids[cols..]
                .iter()
                .flat_map(|&r| row_bytes_of(1, u64::from(r)))
                .collect();
            assert_eq!(rows, want, "step {step}");
            assert!(seq.steps.max_ready_count() <= 1);
        }
    });
}

#[test]
fn prefill_memory_grows_by_need_and_stays_within_the_ring_and_store_budgets() {
    let source = source();
    let row_bytes = ROW_BYTES as u64;
    let reuse_bytes = 2000 * row_bytes;
    let config = PrefetchConfig {
        reuse_bytes,
        ..small_prefetch()
    };
    let engine = Engine::new(source.clone(), layout(), config).unwrap();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let cols = seq.rows_per_token();
        let token_bytes = cols as u64 * row_bytes;
        // Per table: the ring's 32 tokens of rows and the store's budget.
        let bound = 2 * (32 * token_bytes + reuse_bytes);
        // A long prompt with repeats, consumed as a layer sweep does (all
        // of table 0, then all of table 1: table 1's reader runs ahead into
        // its store meanwhile). Rows stay exact while the store evicts.
        let tokens: Vec<u32> = (0..3000u32).map(|i| (i * 7919 % 613) % VOCAB).collect();
        let ids = seq.row_ids(&tokens, None).unwrap();
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        let mut peak = 0;
        for table in 0..2 {
            for upto in (16..=3000).step_by(16) {
                let view = prefill.wait(table, upto).unwrap();
                let from = view.first_token() as usize;
                let want = expected(&ids, cols, table, from..upto as usize);
                assert!(view.to_vec() == want, "table {table} tokens {from}..{upto}");
                peak = peak.max(prefill.held_bytes());
                assert!(
                    prefill.held_bytes() <= bound,
                    "{} > {bound}",
                    prefill.held_bytes()
                );
            }
        }
        assert!(peak > 2 * 32 * token_bytes, "the store was used: {peak}");
        drop(prefill);
        // A prompt shorter than the ring holds a ring of its own length
        // and only the rows it reuses: less than the bound.
        let short: Vec<u32> = (0..10).collect();
        let mut prefill = seq.prefill(&short, None).unwrap();
        for table in 0..2 {
            prefill.wait(table, 10).unwrap();
        }
        let held = prefill.held_bytes();
        assert!(held <= 2 * 10 * token_bytes, "short prompt holds {held}");
    });
}

/// Table 1's reader, its ring and store full while the consumer is still on
/// table 0 (a layer sweep), reads the rest of its rows into the page cache
/// (`Priority::Warm`), and the rows it then delivers are exact; with the
/// warm-up off it reads none that way; the prefill's stats count those reads.
#[test]
fn a_full_ring_and_store_go_on_warming_the_page_cache_unless_told_not_to() {
    use std::sync::atomic::Ordering;
    for warm in [true, false] {
        let source = source();
        let engine = engine_without_store(&source, |c| c.warm_page_cache = warm);
        let probe = source.clone();
        within(LIMIT, move || {
            let mut seq = engine.sequence();
            let cols = seq.rows_per_token();
            let tokens = prompt(2000);
            let ids = seq.row_ids(&tokens, None).unwrap();
            let mut prefill = seq.prefill(&tokens, None).unwrap();
            for upto in (16..=2000).step_by(16) {
                prefill.wait(0, upto).unwrap();
            }
            if warm {
                // Warm batches run only while the ring is full: wait for the
                // reader to reach the prompt's end (bounded by LIMIT).
                let past_ring = (2000 - 32) * cols;
                while probe.warm_rows[1].load(Ordering::Relaxed) < past_ring / 2 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            for upto in (16..=2000).step_by(16) {
                let view = prefill.wait(1, upto).unwrap();
                let from = view.first_token() as usize;
                let want = expected(&ids, cols, 1, from..upto as usize);
                assert!(view.to_vec() == want, "table 1 tokens {from}..{upto}");
            }
            drop(prefill);
            // The warm-up's reads are in the prefill's stats, apart from
            // the rows it delivered.
            let stats = seq.stats().prefill.tables[1].clone();
            let warmed = probe.warm_rows[1].load(Ordering::Relaxed) as u64;
            assert_eq!(stats.warm_rows, warmed, "{stats:?}");
            assert_eq!(stats.warm_bytes, warmed * ROW_BYTES as u64, "{stats:?}");
            if warm {
                assert!(stats.warm_rows > 0 && stats.warm_reads > 0, "{stats:?}");
            } else {
                assert_eq!(warmed, 0);
                assert_eq!((stats.warm_rows, stats.warm_reads), (0, 0), "{stats:?}");
            }
        });
    }
}

/// A chunk sweep needs table 1's first chunk right after table 0's. Told
/// [`PrefillOrder::Chunk`], the readers read it before table 0's next
/// chunk; left [`PrefillOrder::Auto`], table 0 goes on first (right for a
/// layer sweep) until table 1's consumer waits.
#[test]
fn a_chunk_order_reads_every_tables_first_chunk_before_the_next_chunk() {
    for order in [PrefillOrder::Auto, PrefillOrder::Chunk] {
        let source = Arc::new(MemSource {
            // Long enough that the consumer's first wait (which says its
            // chunk is 16 tokens) comes before the first batch is read.
            delay: Some(Duration::from_millis(20)),
            ..MemSource::for_layout(&layout())
        });
        let engine = engine_without_store(&source, |c| {
            c.prefill_order = order;
            c.warm_page_cache = false;
            // One batch at a time: the order the batches are picked in is
            // then the order the source sees them (a second one in flight
            // would start at once, behind the first).
            c.prefill_batches_in_flight = 1;
        });
        let probe = source.clone();
        within(LIMIT, move || {
            let mut seq = engine.sequence();
            let tokens = prompt(64);
            let mut prefill = seq.prefill(&tokens, None).unwrap();
            prefill.wait(0, 16).unwrap();
            // The layers between the two Engram layers.
            std::thread::sleep(Duration::from_millis(5));
            prefill.wait(1, 16).unwrap();
            let tables = super::sync::lock_std(&probe.prefill_tables).clone();
            // Table 0's first chunk is three batches: 0..4, 4..8, 8..16.
            let before_table_1 = tables.iter().take_while(|&&t| t == 0).count();
            match order {
                PrefillOrder::Chunk => assert_eq!(before_table_1, 3, "{tables:?}"),
                PrefillOrder::Auto => assert!(before_table_1 >= 4, "{tables:?}"),
            }
        });
    }
}

/// A wait whose rows are ready wakes no reader when the readers are well
/// ahead: the ring room it frees is read all the same, by the pool's poll
/// of the parked prefill, while the consumer does not wait again.
#[test]
fn ring_room_a_ready_wait_frees_is_read_without_another_wait() {
    let source = source();
    let engine = engine_without_store(&source, |c| {
        c.ring_chunks = 4; // 64 tokens: a consumer 16 in is 48 behind
        c.warm_page_cache = false;
    });
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let tokens = prompt(256);
        let (cols, ids) = (seq.rows_per_token(), seq.row_ids(&tokens, None).unwrap());
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        prefill.wait(0, 16).unwrap();
        // Both rings full: nothing in flight, the prefill is parked.
        while (0..2).any(|t| prefill.ready_tokens(t) < Some(64)) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            prefill.ready_tokens(0),
            Some(64),
            "the ring bounds the reader"
        );
        // Ready: it frees tokens 0..16 (room up to 80) and returns at once,
        // 32 tokens behind the reader, more than a ring chunk.
        prefill.wait(0, 32).unwrap();
        while prefill.ready_tokens(0) < Some(80) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // The rest reads as usual, exact.
        for upto in (48..=256).step_by(16) {
            let view = prefill.wait(0, upto).unwrap();
            let want = expected(&ids, cols, 0, upto as usize - 16..upto as usize);
            assert!(view.to_vec() == want, "tokens up to {upto}");
        }
    });
}

/// A wait as wide as the ring holds all of it until the next wait, unless
/// its rows are released: `wait_into` releases them once copied, and
/// `release` after a view, so the readers fill the ring again while the
/// consumer works on what it copied (a GPU host that queues its kernels
/// and goes on to its next wait), and the rows read then are the right
/// ones.
#[test]
fn rows_copied_out_or_released_free_their_ring_room_before_the_next_wait() {
    let source = source();
    let engine = engine_without_store(&source, |c| c.warm_page_cache = false);
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let tokens = prompt(128);
        let (cols, ids) = (seq.rows_per_token(), seq.row_ids(&tokens, None).unwrap());
        let ring = 32; // small_prefetch: 2 chunks of 16 tokens
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        let wait_until = |prefill: &super::Prefill<'_>, table, n| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while prefill.ready_tokens(table) < Some(n) && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            prefill.ready_tokens(table).unwrap()
        };
        // A view held: its rows are not released, and the reader stops at
        // the ring's end (given time to run past it).
        let rows = prefill.wait(0, ring).unwrap().to_vec();
        assert!(rows == expected(&ids, cols, 0, 0..ring as usize));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(prefill.ready_tokens(0), Some(ring), "a held wait bounds the reader");
        // Released: the next ring's worth is read with no further wait.
        prefill.release(0).unwrap();
        prefill.release(0).unwrap(); // a second release changes nothing
        assert_eq!(wait_until(&prefill, 0, 2 * ring), 2 * ring);
        // Copied out: the same, by itself.
        let mut out = vec![0u8; expected(&ids, cols, 0, 0..ring as usize).len()];
        prefill.wait_into(0, 2 * ring, &mut out).unwrap();
        assert!(out == expected(&ids, cols, 0, ring as usize..2 * ring as usize));
        assert_eq!(wait_until(&prefill, 0, 3 * ring), 3 * ring);
        prefill.wait_into(0, 3 * ring, &mut out).unwrap();
        assert!(out == expected(&ids, cols, 0, 2 * ring as usize..3 * ring as usize));
        // Table 1 untouched by table 0's releases; a bad table is an error.
        let view = prefill.wait(1, ring).unwrap();
        assert!(view.to_vec() == expected(&ids, cols, 1, 0..ring as usize));
        assert!(matches!(prefill.release(2), Err(Error::InvalidArgument(_))));
    });
}

/// A wait whose rows are ready did not block: it adds no stall (and reads
/// no clock), while its tokens still count.
#[test]
fn a_wait_whose_rows_are_ready_records_no_stall() {
    let source = source();
    let engine = engine_without_store(&source, |c| {
        c.ring_chunks = 4; // 64 tokens: the whole prompt fits the ring
        c.warm_page_cache = false;
    });
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let tokens = prompt(64);
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        while prefill.ready_tokens(0) < Some(64) {
            std::thread::sleep(Duration::from_millis(1));
        }
        for upto in (16..=64).step_by(16) {
            prefill.wait(0, upto).unwrap();
        }
        drop(prefill);
        let table = seq.stats().prefill.tables[0].clone();
        assert_eq!((table.waits, table.tokens), (4, 64));
        assert_eq!(table.stall_total_us, 0.0, "{table:?}");
    });
}

/// Table 1's rows read by the time a layer-sweep host reaches table 1's
/// layer, the host waiting on each table in pieces of `width` tokens (each
/// piece then run through the layer) on a source of fixed row throughput;
/// the rows delivered are checked against the model's.
fn table_1_rows_read_before_its_layer(width: u32) -> usize {
    use std::sync::atomic::Ordering;
    let mut mem = MemSource::for_layout(&layout());
    mem.row_delay = Some(Duration::from_micros(5));
    let source = Arc::new(mem);
    let mut config = small_prefetch();
    // A store a little larger than the ring, as the defaults are; no
    // page cache to warm (as with direct I/O).
    config.reuse_bytes = 40 * 24 * ROW_BYTES as u64;
    config.warm_page_cache = false;
    let engine = Engine::new(source.clone(), layout(), config).unwrap();
    let probe = source.clone();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let n = 512;
        let tokens = prompt(n);
        let (cols, ids) = (seq.rows_per_token(), seq.row_ids(&tokens, None).unwrap());
        // 7 us per token and layer: a table's reads (about 40 ms) are some
        // 11 layers' compute, as on a fast GPU; layers 2-13 (43 ms) give
        // table 1's reader 8 times the time its ring and store take.
        let layer = |tokens: u32| std::thread::sleep(Duration::from_micros(7 * u64::from(tokens)));
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        layer(n);
        let mut seen = 0;
        for table in 0..2 {
            if table == 1 {
                (2..14).for_each(|_| layer(n));
                seen = probe.prefill_rows[1].load(Ordering::Relaxed);
            }
            for upto in (width..=n).step_by(width as usize) {
                let view = prefill.wait(table, upto).unwrap();
                let from = view.first_token() as usize;
                let want = expected(&ids, cols, table, from..upto as usize);
                assert!(view.to_vec() == want, "table {table} tokens {from}..{upto}");
                layer(width);
            }
        }
        seen
    })
}

/// A host whose waits are as wide as the API allows (the whole ring) gets
/// table 1's reads as far ahead of its layer as one with narrow waits: the
/// reader fills table 1's ring and store while the host is on table 0 and
/// the layers between.
#[test]
fn waits_as_wide_as_the_ring_let_table_1_read_ahead_as_narrow_ones_do() {
    let narrow = table_1_rows_read_before_its_layer(8);
    let wide = table_1_rows_read_before_its_layer(32);
    // The ring alone holds 32 tokens of 24 rows.
    assert!(narrow >= 32 * 24, "narrow waits: {narrow} rows");
    assert!(wide >= narrow, "wide waits: {wide} rows, narrow {narrow}");
}

/// A layer-sweep host on table 0, its waits as wide as the ring: table
/// 1's rows are read meanwhile, but only behind table 0's
/// ([`Priority::PrefillLater`], which the source serves with the depth
/// table 0 leaves: here while the host computes with table 0's ring full),
/// and table 0's are never read behind anything. Before, table 1 was read
/// only once table 0 had nothing left to schedule, and then as urgently as
/// table 0: a wait on table 0 that came while one of table 1's batches was
/// in flight waited for all of it.
#[test]
fn the_next_tables_reads_fill_the_device_behind_the_blocked_one() {
    use crate::io::Priority;
    use std::sync::atomic::Ordering;
    let mut mem = MemSource::for_layout(&layout());
    mem.row_delay = Some(Duration::from_micros(5));
    let source = Arc::new(mem);
    let mut config = small_prefetch();
    config.reuse_bytes = 0;
    config.warm_page_cache = false;
    assert_eq!(config.prefill_batches_in_flight, 2, "the default");
    let engine = Engine::new(source.clone(), layout(), config).unwrap();
    let probe = source.clone();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let n = 256;
        let width = 32; // the whole ring
        let tokens = prompt(n);
        let (cols, ids) = (seq.rows_per_token(), seq.row_ids(&tokens, None).unwrap());
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        assert_eq!(prefill.max_wait_tokens(), width);
        let check = |prefill: &mut super::Prefill<'_>, table: usize, upto: u32| {
            let view = prefill.wait(table, upto).unwrap();
            let from = view.first_token() as usize;
            let want = expected(&ids, cols, table, from..upto as usize);
            assert!(view.to_vec() == want, "table {table} tokens {from}..{upto}");
        };
        for upto in (width..=n).step_by(width as usize) {
            check(&mut prefill, 0, upto);
            // Layer 1 on the piece: table 0's ring is full meanwhile.
            std::thread::sleep(Duration::from_millis(1));
        }
        let calls = super::sync::lock_std(&probe.prefill_calls).clone();
        let behind = probe.later_rows.load(Ordering::Relaxed);
        for upto in (width..=n).step_by(width as usize) {
            check(&mut prefill, 1, upto);
        }
        // The calls that ended before table 0's last one: all scheduled
        // while table 0 still had rows to deliver.
        let last = calls.iter().rposition(|&(table, _)| table == 0).unwrap();
        let during = &calls[..last];
        assert!(
            calls
                .iter()
                .all(|&(table, p)| table == 1 || p == Priority::Prefill),
            "table 0 read behind another batch: {calls:?}"
        );
        assert!(
            during
                .iter()
                .all(|&(table, p)| table == 0 || p == Priority::PrefillLater),
            "table 1 read ahead of table 0: {calls:?}"
        );
        assert!(behind > 0, "table 1 read nothing while table 0 was read");
    });
}

/// A one-table model keeps two batches of its table in flight, so one
/// batch's bookkeeping before and after its reads no longer leaves the
/// device idle; every row is delivered right, across ring laps and a batch
/// the ring wraps; and a row that two batches in flight share is read once
/// (the later batch takes it from the store after the earlier one keeps
/// it): with a store that holds every row, each distinct row is read once.
#[test]
fn a_one_table_model_reads_two_batches_at_once_and_each_row_once() {
    let layout = crate::layout::preset(crate::layout::preset::QWEN3_8_FLASH_NEXT, 65536).unwrap();
    let source = Arc::new(MemSource {
        delay: Some(Duration::from_millis(3)),
        ..MemSource::for_layout(&layout)
    });
    // Batches of 12 tokens on a 32-token ring: some batches wrap.
    let config = PrefetchConfig {
        read_batch_tokens: 12,
        reuse_bytes: 1 << 20,
        warm_page_cache: false,
        ..small_prefetch()
    };
    let engine = Engine::new(source.clone(), layout, config).unwrap();
    let probe = source.clone();
    let (ids, cols) = within(LIMIT, move || {
        let mut seq = engine.sequence();
        // A short cycle of tokens: n-grams repeat within and across batches.
        let tokens: Vec<u32> = (0..240u32).map(|i| (i * 7 + i / 29) % 23 + 5).collect();
        let (cols, ids) = (seq.rows_per_token(), seq.row_ids(&tokens, None).unwrap());
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        for upto in (8..=240).step_by(8) {
            let view = prefill.wait(0, upto).unwrap();
            let from = view.first_token() as usize;
            let want: Vec<u8> = ids[from * cols..upto as usize * cols]
                .iter()
                .flat_map(|&row| row_bytes_of(0, u64::from(row)))
                .collect();
            assert!(view.to_vec() == want, "tokens {from}..{upto}");
        }
        (ids, cols)
    });
    assert!(cols > 1);
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() < ids.len() / 2, "the prompt repeats rows");
    // Each row in one read call (a call reads a row it lists twice once).
    let mut read: Vec<u32> = lock(&probe.prefill_log)
        .iter()
        .flat_map(|(_, rows)| rows.clone())
        .collect();
    read.sort_unstable();
    let calls = read.len();
    read.dedup();
    assert_eq!(read, distinct, "the rows read are the prompt's");
    assert_eq!(calls, distinct.len(), "rows read in more than one call");
    let most = probe
        .most_prefill_calls_running
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(most >= 2, "at most {most} prefill read in flight");
}

/// A one-table model reads each batch after the first beside the one before
/// it, on a device that serves one call at a time: the second batch in
/// flight is read behind the first, and once the first completes the next
/// is added behind the second, so the device is never left idle by one
/// batch's bookkeeping (before, a batch was added only behind one read
/// first, and every other batch began alone).
#[test]
fn a_one_table_model_reads_every_batch_beside_the_one_before_it() {
    use std::sync::atomic::Ordering;
    let layout = crate::layout::preset(crate::layout::preset::QWEN3_8_FLASH_NEXT, 65536).unwrap();
    let source = Arc::new(MemSource {
        // About 4 ms a batch of 12 tokens.
        row_delay: Some(Duration::from_micros(20)),
        ..MemSource::for_layout(&layout)
    });
    // A ring of 256 tokens holds the whole prompt: ring room never holds a
    // batch back.
    let config = PrefetchConfig {
        read_batch_tokens: 12,
        ring_chunks: 16,
        reuse_bytes: 1 << 20,
        warm_page_cache: false,
        ..small_prefetch()
    };
    let engine = Engine::new(source.clone(), layout, config).unwrap();
    let probe = source.clone();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        let tokens: Vec<u32> = (0..240u32).map(|i| i * 13 + 5).collect();
        let (cols, ids) = (seq.rows_per_token(), seq.row_ids(&tokens, None).unwrap());
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        for upto in (8..=240).step_by(8) {
            let view = prefill.wait(0, upto).unwrap();
            let from = view.first_token() as usize;
            let want: Vec<u8> = ids[from * cols..upto as usize * cols]
                .iter()
                .flat_map(|&row| row_bytes_of(0, u64::from(row)))
                .collect();
            assert!(view.to_vec() == want, "tokens {from}..{upto}");
        }
    });
    let calls = lock(&probe.prefill_log).len();
    let beside = probe
        .prefill_calls_begun_beside_another
        .load(Ordering::SeqCst);
    assert!(calls >= 20, "{calls} prefill calls");
    // Allowing for a batch whose call ended before the one after it began
    // (a reader thread descheduled on a loaded machine).
    assert!(
        beside * 4 >= (calls - 1) * 3,
        "{beside} of {calls} prefill calls began beside another"
    );
}

/// A one-table model whose batch fails while the next one of the table is
/// in flight: every wait before the failed batch returns its rows, the
/// first wait that needs a row of it ends with the read error, and nothing
/// past it is ever returned (the later batch, read meanwhile, is not
/// published over the failed one). Two adjacent batches fail in turn.
#[test]
fn a_failed_batch_of_one_table_is_not_covered_by_the_next_one() {
    let layout = crate::layout::preset(crate::layout::preset::QWEN3_8_FLASH_NEXT, 65536).unwrap();
    // Repeating, with a token of its own every 10: rows used once in
    // every batch.
    let tokens: Vec<u32> = (0..240u32)
        .map(|i| if i % 10 == 3 { 1000 + i } else { (i * 7 + i / 29) % 23 + 5 })
        .collect();
    let (ids, cols) = {
        let engine = Engine::new(
            Arc::new(MemSource::for_layout(&layout)),
            layout.clone(),
            small_prefetch(),
        )
        .unwrap();
        let seq = engine.sequence();
        (seq.row_ids(&tokens, None).unwrap(), seq.rows_per_token())
    };
    let ids = Arc::new(ids);
    // Batches: 0..4, then multiples of 12.
    for batch_start in [96u32, 108] {
        // A row needed once, inside the batch: the batch after it does not
        // need it (so that one reads without error).
        let uses = |row: u32| ids.iter().filter(|&&r| r == row).count();
        let at = (batch_start as usize * cols..(batch_start as usize + 12) * cols)
            .find(|&i| uses(ids[i]) == 1)
            .expect("a row used once");
        let source = Arc::new(MemSource {
            delay: Some(Duration::from_millis(2)),
            fail_row: Some((0, u64::from(ids[at]))),
            ..MemSource::for_layout(&layout)
        });
        // A ring of 128 tokens: ring room never holds a batch back.
        let config = PrefetchConfig {
            read_batch_tokens: 12,
            ring_chunks: 8,
            reuse_bytes: 1 << 20,
            warm_page_cache: false,
            ..small_prefetch()
        };
        let engine = Engine::new(source, layout.clone(), config).unwrap();
        let (ids, tokens) = (ids.clone(), tokens.clone());
        within(LIMIT, move || {
            let mut seq = engine.sequence();
            let mut prefill = seq.prefill(&tokens, None).unwrap();
            for upto in (4..=240).step_by(4) {
                if upto == batch_start + 4 {
                    // The consumer reaches the failed batch only once the
                    // readers are done with it and the batch after it.
                    std::thread::sleep(Duration::from_millis(200));
                }
                match prefill.wait(0, upto) {
                    Ok(view) => {
                        assert!(upto <= batch_start, "tokens up to {upto} returned");
                        let from = view.first_token() as usize;
                        let want: Vec<u8> = ids[from * cols..upto as usize * cols]
                            .iter()
                            .flat_map(|&r| row_bytes_of(0, u64::from(r)))
                            .collect();
                        assert!(view.to_vec() == want, "tokens {from}..{upto}");
                    }
                    Err(e) => {
                        assert!(upto > batch_start, "wait up to {upto}: {e}");
                        assert!(matches!(e, Error::RowRead { .. }), "{e}");
                        break;
                    }
                }
            }
            assert!(prefill.wait(0, 240).is_err(), "a later wait returned rows");
        });
    }
}
