//! The scheduler over real model files: every I/O backend, with and without
//! the row cache, raw and decoded rows, and the fault-injecting source.
//! Rows must equal the model's own synchronous pread path.

mod prefetch_util;

use std::sync::Arc;
use std::time::Duration;

use engram::cache::{CachedSource, RowCache};
use engram::codec::{Encoding, ROW_DIM};
use engram::io::fault::{FaultPlan, FaultSource};
use engram::io::{open_source, Backend, IoConfig, RowSource};
use engram::layout::Layout;
use engram::model::{synth, Model, NoProgress};
use engram::prefetch::{Engine, PrefetchConfig, RowFormat, RowsView};
use engram::stats::TableStats;
use engram::Error;
use prefetch_util::{tiny_layout, within, VOCAB};

const LIMIT: Duration = Duration::from_secs(60);

fn model_layout() -> Layout {
    Layout {
        head_dim: ROW_DIM,
        ..tiny_layout()
    }
}

fn write_model(dir: &std::path::Path, encoding: Encoding) -> Model {
    let path = dir.join("m.gguf");
    synth::write_gguf(&path, &model_layout(), encoding, 7, &NoProgress).unwrap();
    Model::open(&path).unwrap()
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 13 + i / 7) % 50).collect()
}

fn config(format: RowFormat) -> PrefetchConfig {
    PrefetchConfig::default()
        .with_chunk_tokens(64)
        .with_first_chunk_tokens(16)
        .with_ring_chunks(2)
        .with_overlap_threshold(0)
        .with_format(format)
}

/// Checks that `view` (of `table`; the prompt's row ids `ids`) holds what
/// `model`'s own synchronous reads give, bit for bit, raw or f32.
fn assert_view_matches(model: &Model, ids: &[u32], table: usize, view: &RowsView<'_>) {
    let from = view.first_token();
    let to = from as usize + view.len();
    let rows: Vec<u64> = (from as usize..to)
        .flat_map(|t| (0..4).map(move |c| u64::from(ids[t * 8 + table * 4 + c])))
        .collect();
    if view.is_f32() {
        let mut values = Vec::new();
        model.read_rows_f32(table, &rows, &mut values).unwrap();
        let got = view.to_f32_vec();
        assert!(
            got.iter()
                .map(|v| v.to_bits())
                .eq(values.iter().map(|v| v.to_bits())),
            "table {table} tokens {from}..{to} (f32)"
        );
    } else {
        let mut raw = Vec::new();
        model.read_raw_rows(table, &rows, &mut raw).unwrap();
        assert!(view.to_vec() == raw, "table {table} tokens {from}..{to}");
    }
}

/// Prefill + decode through `engine`, checked against `model`'s preads.
fn check_against_model(engine: Engine, model: Model) {
    within(LIMIT, move || {
        let tokens = prompt(300);
        let mut seq = engine.sequence();
        let ids = seq.row_ids(&tokens, None).unwrap();
        let f32_rows = engine.config().format == RowFormat::F32;
        let mut prefill = seq.prefill(&tokens, None).unwrap();
        let mut upto = 0;
        while upto < 300 {
            upto = (upto + 50).min(300);
            for table in 0..2 {
                let view = prefill.wait(table, upto).unwrap();
                assert_view_matches(&model, &ids, table, &view);
            }
        }
        drop(prefill);
        for token in [3u32, 9, 3, 9, 27] {
            let step_ids = seq.row_ids(&[token], None).unwrap();
            seq.hint(&[token, 5]).unwrap();
            seq.step_begin(token).unwrap();
            for table in 0..2 {
                let rows: Vec<u64> = step_ids[table * 4..table * 4 + 4]
                    .iter()
                    .map(|&r| u64::from(r))
                    .collect();
                let view = seq.step_wait(table).unwrap();
                if f32_rows {
                    let mut values = Vec::new();
                    model.read_rows_f32(table, &rows, &mut values).unwrap();
                    assert_eq!(view.to_f32_vec(), values);
                } else {
                    let mut raw = Vec::new();
                    model.read_raw_rows(table, &rows, &mut raw).unwrap();
                    assert_eq!(view.to_vec(), raw);
                }
            }
        }
        let stats = seq.stats();
        assert_eq!(stats.prefill.tables[1].tokens, 300);
        // Rows asked of the source for the ring plus rows the reuse store
        // served.
        let t0 = &stats.prefill.tables[0];
        assert_eq!(t0.rows_requested - t0.ahead_rows + t0.reuse_hits, 1200);
    });
}

#[test]
fn every_backend_with_and_without_cache_matches_model_reads() {
    let dir = tempfile::tempdir().unwrap();
    for encoding in [Encoding::E4m3E8m0Row264, Encoding::Lloyd4E5m3Row136] {
        let model = write_model(dir.path(), encoding);
        let mut backends = vec![Backend::Psync, Backend::Mmap];
        if cfg!(target_os = "linux") {
            backends.push(Backend::Uring);
        }
        for backend in backends {
            let io = IoConfig::default().with_backend(backend).with_depth(8);
            let opened = match open_source(&model.tables, &io) {
                Ok(o) => o,
                Err(e) if backend == Backend::Uring => {
                    eprintln!("skipping io_uring: {e}");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            for cached in [false, true] {
                for format in [RowFormat::Raw, RowFormat::F32] {
                    let source: Arc<dyn RowSource> = if cached {
                        let cache = Arc::new(RowCache::new(1 << 20, encoding.row_bytes()));
                        Arc::new(CachedSource::new(opened.source.clone(), cache))
                    } else {
                        opened.source.clone()
                    };
                    let engine = Engine::for_model(&model, source, config(format)).unwrap();
                    check_against_model(engine, model.clone());
                }
            }
        }
    }
}

#[test]
fn session_cache_serves_repeated_rows_and_hints() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), Encoding::E4m3E8m0Row264);
    let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
    let cache = Arc::new(RowCache::new(8 << 20, 264));
    let source: Arc<dyn RowSource> = Arc::new(CachedSource::new(opened.source, cache.clone()));
    // Reuse off: the prompt's repeats must reach the cache.
    let config = config(RowFormat::Raw).with_reuse_bytes(0);
    let engine = Engine::for_model(&model, source, config).unwrap();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        // A prompt that repeats itself three times: a prefill row is kept
        // the second time it is read (the cache's doorkeeper), so the
        // third copy hits the cache.
        let third = prompt(128);
        let tokens = [third.clone(), third.clone(), third].concat();
        {
            let mut prefill = seq.prefill(&tokens, None).unwrap();
            for table in 0..2 {
                let mut upto = 0;
                while upto < 384 {
                    upto += 64;
                    prefill.wait(table, upto).unwrap();
                }
            }
        }
        let stats = seq.stats();
        let t0 = &stats.prefill.tables[0];
        assert!(
            t0.cache_hits > 0,
            "repeated rows came from the cache: {t0:?}"
        );
        // A hinted token's step reads only cached rows.
        let hits_before = cache.hits();
        seq.hint(&[41]).unwrap();
        // The hint is served when no demand work is queued; wait until the
        // cache holds the hinted rows (bounded by `within`).
        let ids = seq.row_ids(&[41], None).unwrap();
        while !ids
            .iter()
            .enumerate()
            .all(|(i, &r)| cache.get(i / 4, r).is_some())
        {
            std::thread::yield_now();
        }
        let decode_before = seq.stats().decode;
        seq.step_begin(41).unwrap();
        for table in 0..2 {
            let rows: Vec<u64> = ids[table * 4..table * 4 + 4]
                .iter()
                .map(|&r| u64::from(r))
                .collect();
            let mut raw = Vec::new();
            model.read_raw_rows(table, &rows, &mut raw).unwrap();
            assert_eq!(seq.step_wait(table).unwrap().to_vec(), raw);
        }
        assert!(cache.hits() >= hits_before + 8);
        // Served from memory on the caller's thread: the step read nothing.
        let decode = seq.stats().decode;
        for (t, before) in decode.tables.iter().zip(&decode_before.tables) {
            assert_eq!(t.bytes_read, before.bytes_read, "table {}", t.table);
            assert!(t.cache_hits > before.cache_hits, "table {}", t.table);
        }
    });
}

#[test]
fn device_errors_from_the_fault_source_reach_the_waiter() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), Encoding::E4m3E8m0Row264);
    let tokens = prompt(600);
    // Expected rows; each run gets a fresh copy of the (deterministic)
    // model, as truncation changes the file.
    let ids = engine_for(&model)
        .sequence()
        .row_ids(&tokens, None)
        .unwrap();
    let expected: Vec<Vec<u8>> = (0..2)
        .map(|table| {
            let rows: Vec<u64> = (0..600)
                .flat_map(|t| (0..4).map(move |c| (t, c)))
                .map(|(t, c)| u64::from(ids[t * 8 + table * 4 + c]))
                .collect();
            let mut raw = Vec::new();
            model.read_raw_rows(table, &rows, &mut raw).unwrap();
            raw
        })
        .collect();
    // Faults early enough to land even when whole-prompt dedup leaves few
    // preads (rows of this tiny model share pages).
    for plan in [
        FaultPlan {
            eio_at_read: Some(12),
            ..FaultPlan::default()
        },
        FaultPlan {
            truncate_at_read: Some((12, model.tables[0].start_offset() + 264 * 10)),
            ..FaultPlan::default()
        },
    ] {
        // Reuse off, evicting constantly, and the default store: rows served
        // before the fault are the model's, and the fault still names its row.
        for reuse_bytes in [0, 3 * 264, PrefetchConfig::default().reuse_bytes] {
            let copy = tempfile::tempdir().unwrap();
            let model = write_model(copy.path(), Encoding::E4m3E8m0Row264);
            let source =
                FaultSource::open(&model.tables, &IoConfig::default(), plan.clone()).unwrap();
            let config = config(RowFormat::Raw).with_reuse_bytes(reuse_bytes);
            let engine = Engine::for_model(&model, Arc::new(source), config).unwrap();
            let plan = plan.clone();
            let (tokens, expected) = (tokens.clone(), expected.clone());
            within(LIMIT, move || {
                let mut seq = engine.sequence();
                let mut prefill = seq.prefill(&tokens, None).unwrap();
                let mut failure = None;
                'outer: for upto in (60..=600).step_by(60) {
                    for (table, expected) in expected.iter().enumerate() {
                        match prefill.wait(table, upto) {
                            Ok(view) => {
                                let token_bytes = 4 * 264;
                                let from = view.first_token() as usize * token_bytes;
                                let to = upto as usize * token_bytes;
                                assert!(view.to_vec() == expected[from..to]);
                            }
                            Err(e) => {
                                failure = Some(e);
                                break 'outer;
                            }
                        }
                    }
                }
                match failure.expect("a fault must surface at a wait") {
                    Error::RowRead {
                        table,
                        row,
                        offset,
                        file,
                        ..
                    } => {
                        let loc = &model.tables[table];
                        assert_eq!(file, loc.first_file());
                        assert!(
                            offset >= loc.start_offset()
                                && offset < loc.start_offset() + loc.rows * 264 + 4096
                        );
                        assert!(row < loc.rows);
                    }
                    other => panic!("expected RowRead for {plan:?}, got {other}"),
                }
            });
        }
    }
}

/// One prefill of `tokens` through `engine`, every view checked against
/// `model`; returns table 0's prefill stats.
/// A plain engine over `model` (for row ids).
fn engine_for(model: &Model) -> Engine {
    let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
    Engine::for_model(model, opened.source, config(RowFormat::Raw)).unwrap()
}

fn prefill_checked(engine: &Engine, model: &Model, tokens: &[u32], step: u32) -> TableStats {
    prefill_checked_after(engine, model, tokens, step, Duration::ZERO)
}

/// [`prefill_checked`], the consumer first waiting for both rings to fill
/// and then `settle` more (a slow first layer: time to read ahead).
fn prefill_checked_after(
    engine: &Engine,
    model: &Model,
    tokens: &[u32],
    step: u32,
    settle: Duration,
) -> TableStats {
    let mut seq = engine.sequence();
    let ids = seq.row_ids(tokens, None).unwrap();
    let n = tokens.len() as u32;
    {
        let mut prefill = seq.prefill(tokens, None).unwrap();
        let full = prefill.max_wait_tokens().min(n);
        while !settle.is_zero() && (0..2).any(|t| prefill.ready_tokens(t) < Some(full)) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(settle);
        let mut upto = 0;
        while upto < n {
            upto = (upto + step).min(n);
            for table in 0..2 {
                let view = prefill.wait(table, upto).unwrap();
                assert_view_matches(model, &ids, table, &view);
            }
        }
    }
    seq.stats().prefill.tables[0].clone()
}

#[test]
fn reuse_store_rows_match_model_reads_with_eviction() {
    let dir = tempfile::tempdir().unwrap();
    let model = write_model(dir.path(), Encoding::E4m3E8m0Row264);
    let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
    let tokens = prompt(600);
    for format in [RowFormat::Raw, RowFormat::F32] {
        // Off, a few rows (constant eviction), some, and the whole prompt;
        // rows are counted as stored, whatever the delivered format.
        let mut hits = Vec::new();
        for budget_rows in [0, 3, 40, 1 << 14] {
            let config = config(format).with_reuse_bytes(budget_rows * 264);
            let engine = Engine::for_model(&model, opened.source.clone(), config).unwrap();
            let (model, tokens) = (model.clone(), tokens.clone());
            let t0 = within(LIMIT, move || prefill_checked(&engine, &model, &tokens, 50));
            let ring_rows = t0.rows_requested - t0.ahead_rows;
            assert_eq!(ring_rows + t0.reuse_hits, 600 * 4, "{t0:?}");
            hits.push(t0.reuse_hits);
            // Rows past the ring are read ahead only into room for a whole
            // read batch (whether any are depends on timing).
            if budget_rows < 1 << 10 {
                assert_eq!(t0.ahead_rows, 0, "no room for a batch: {t0:?}");
            }
        }
        assert_eq!(hits[0], 0, "{format:?}: reuse off");
        assert!(
            0 < hits[1] && hits[1] < hits[2] && hits[2] < hits[3],
            "{format:?}: hits grow with the budget: {hits:?}"
        );
    }
}

/// The model's layout with tables of about 20K rows, so most rows past a
/// short ring are new and reading ahead has work to do.
fn wide_layout() -> Layout {
    let mut layout = model_layout();
    let primes = [[4999u32, 4993, 4987, 4973], [4969, 4967, 4957, 4951]];
    for (table, primes) in layout.tables.iter_mut().zip(primes) {
        let mut sum = 0;
        table.offsets = primes
            .iter()
            .map(|&p| {
                sum += p;
                sum - p
            })
            .collect();
        table.primes = primes.to_vec();
        table.rows = u64::from(sum);
    }
    layout
}

/// A 32-token ring over short read batches, so reading ahead starts soon.
fn read_ahead_config(format: RowFormat) -> PrefetchConfig {
    PrefetchConfig::default()
        .with_chunk_tokens(16)
        .with_first_chunk_tokens(8)
        .with_read_batch_tokens(16)
        .with_ring_chunks(2)
        .with_overlap_threshold(0)
        .with_format(format)
}

/// Random tokens: most n-grams, so most rows, are distinct (about 1,500
/// of the 1,600 of 400 tokens).
fn random_prompt(n: usize) -> Vec<u32> {
    let mut x = 1u32;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) % VOCAB
        })
        .collect()
}

#[test]
fn rows_read_ahead_into_the_store_match_model_reads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.gguf");
    let layout = wide_layout();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 7, &NoProgress).unwrap();
    let model = Model::open(&path).unwrap();
    for format in [RowFormat::Raw, RowFormat::F32] {
        let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
        // A 32-token ring and a store of 4K rows: most of the prompt is
        // read ahead while the consumer sits in its first layer.
        let config = read_ahead_config(format).with_reuse_bytes(4096 * 264);
        let engine = Engine::for_model(&model, opened.source, config).unwrap();
        let tokens = random_prompt(400);
        let model = model.clone();
        let t0 = within(LIMIT, move || {
            prefill_checked_after(&engine, &model, &tokens, 16, Duration::from_millis(300))
        });
        assert!(t0.ahead_rows > 0, "{format:?}: {t0:?}");
        let ring_rows = t0.rows_requested - t0.ahead_rows;
        assert_eq!(ring_rows + t0.reuse_hits, 400 * 4, "{t0:?}");
    }
}

/// The reuse store counts rows as stored, so an f32 table reads as many
/// rows ahead into the same budget as a raw one (not a quarter of them: an
/// f32 row is 1,024 bytes against 264 stored).
#[test]
fn an_f32_tables_store_holds_as_many_rows_as_a_raw_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.gguf");
    synth::write_gguf(
        &path,
        &wide_layout(),
        Encoding::E4m3E8m0Row264,
        7,
        &NoProgress,
    )
    .unwrap();
    let model = Model::open(&path).unwrap();
    let mut ahead = Vec::new();
    for format in [RowFormat::Raw, RowFormat::F32] {
        let opened = open_source(&model.tables, &IoConfig::default()).unwrap();
        let config = read_ahead_config(format)
            .with_reuse_bytes(400 * 264)
            .with_warm_page_cache(false);
        let engine = Engine::for_model(&model, opened.source, config).unwrap();
        let tokens = random_prompt(400);
        let t1 = within(LIMIT, move || {
            let mut seq = engine.sequence();
            let prefill = seq.prefill(&tokens, None).unwrap();
            // The consumer not started: each table reads its ring, then
            // ahead into its store until the store is full.
            let full = prefill.max_wait_tokens();
            while (0..2).any(|t| prefill.ready_tokens(t) < Some(full)) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(300));
            drop(prefill);
            seq.stats().prefill.tables[1].clone()
        });
        assert!(t1.ahead_rows > 300, "{format:?}: the store filled: {t1:?}");
        ahead.push(t1.ahead_rows);
    }
    assert_eq!(ahead[0], ahead[1], "rows read ahead, raw against f32");
}
