//! Soak (ignored by default): 8 sequences on one engine run prefills,
//! decode steps and hints against a model file with random `EIO`, short
//! reads, `EINTR`, latency and a truncated copy injected. Every call must
//! return, every row returned must equal a direct read of the model file,
//! and once everything is dropped no thread or reference is left.
//!
//! `ENGRAM_SOAK_SECS` sets the duration (default 10):
//! `ENGRAM_SOAK_SECS=600 cargo test -p engram --test prefetch_soak -- --ignored --nocapture`

mod prefetch_util;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::cache::{CachedSource, RowCache};
use engram::io::fault::{FaultPlan, FaultSource};
use engram::io::{BatchStats, IoConfig, RowRequest, RowSource, TableShape};
use engram::model::Model;
use engram::prefetch::{Engine, Sequence};
use engram::splitmix::SplitMix64;
use engram::Result;
use prefetch_util::{write_file_model, VOCAB};

const SEQUENCES: usize = 8;
const COLS: usize = 4;
/// A call blocked this long (no progress anywhere) counts as a hang.
const HANG: Duration = Duration::from_secs(60);

/// Routes one call in ten to the truncated copy, the rest to the
/// faulty whole file; counts calls and the errors they returned.
struct Mixed {
    whole: Arc<FaultSource>,
    truncated: Arc<FaultSource>,
    calls: AtomicU64,
    errors: AtomicU64,
}

impl RowSource for Mixed {
    fn name(&self) -> String {
        "mixed".into()
    }
    fn shapes(&self) -> &[TableShape] {
        self.whole.shapes()
    }
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let source = if n % 10 == 3 {
            &self.truncated
        } else {
            &self.whole
        };
        let result = source.read(request, out);
        if result.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }
}

/// Counts of one soak, summed over its threads.
#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    errors: AtomicU64,
    rows_checked: AtomicU64,
    /// Raised after every call: the watchdog's sign of life.
    progress: AtomicU64,
}

impl Counts {
    fn call<T>(&self, result: &Result<T>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.progress.fetch_add(1, Ordering::Relaxed);
        if result.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The model file's rows of `table` for tokens `from..to` of `ids`.
fn reference(model: &Model, ids: &[u32], table: usize, from: usize, to: usize) -> Vec<u8> {
    let rows: Vec<u64> = (from..to)
        .flat_map(|t| (0..COLS).map(move |c| u64::from(ids[t * 2 * COLS + table * COLS + c])))
        .collect();
    let mut raw = Vec::new();
    model.read_raw_rows(table, &rows, &mut raw).unwrap();
    raw
}

fn threads_now() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|v| v.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
}

/// One sequence's loop until `deadline`: a prefill (waits on both tables,
/// in steps), then decode steps with hints and an occasional rollback.
fn drive(seq: &mut Sequence, model: &Model, counts: &Counts, seed: u64, deadline: Instant) {
    let mut rng = SplitMix64(seed);
    while Instant::now() < deadline {
        let n = 8 + rng.below(150) as usize;
        let prompt: Vec<u32> = (0..n).map(|_| rng.below(u64::from(VOCAB)) as u32).collect();
        let ids = seq.row_ids(&prompt, None).unwrap();
        {
            let begun = seq.prefill(&prompt, None);
            counts.call(&begun);
            if let Ok(mut prefill) = begun {
                let step = 1 + rng.below(u64::from(prefill.max_wait_tokens())) as u32;
                for table in 0..2 {
                    let mut upto = 0;
                    while upto < n as u32 {
                        let from = upto;
                        upto = (upto + step).min(n as u32);
                        let got = prefill.wait(table, upto).map(|v| v.to_vec());
                        counts.call(&got);
                        let Ok(got) = got else { break };
                        let want = reference(model, &ids, table, from as usize, upto as usize);
                        assert!(got == want, "prefill rows of table {table} differ");
                        counts
                            .rows_checked
                            .fetch_add(want.len() as u64 / 264, Ordering::Relaxed);
                    }
                }
            }
        } // the prefill ends (dropped) before decode
        for _ in 0..rng.below(40) {
            let token = rng.below(u64::from(VOCAB)) as u32;
            let ids = seq.row_ids(&[token], None).unwrap();
            let begun = seq.step_begin(token);
            counts.call(&begun);
            begun.expect("a step begins after any read error");
            let guesses: Vec<u32> = (0..3).map(|_| rng.below(u64::from(VOCAB)) as u32).collect();
            let hinted = seq.hint(&guesses);
            counts.call(&hinted);
            for table in 0..2 {
                let got = seq.step_wait(table).map(|v| v.to_vec());
                counts.call(&got);
                if let Ok(got) = got {
                    assert!(
                        got == reference(model, &ids, table, 0, 1),
                        "decode rows differ"
                    );
                    counts
                        .rows_checked
                        .fetch_add(COLS as u64, Ordering::Relaxed);
                }
            }
            if rng.below(20) == 0 && seq.len() > 2 {
                let back = seq.rollback(2);
                counts.call(&back);
            }
        }
    }
}

#[test]
#[ignore = "soak: run with --ignored (ENGRAM_SOAK_SECS sets the duration)"]
fn soak_eight_sequences_under_random_faults() {
    let secs: u64 = std::env::var("ENGRAM_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let model = write_file_model(dir.path());
    let copy_dir = tempfile::tempdir().unwrap();
    let copy = write_file_model(copy_dir.path());
    let t1 = &model.tables[1];
    let cut = t1.start_offset() + t1.rows / 2 * t1.full_row_bytes() as u64;
    let io = IoConfig::default();
    let whole = Arc::new(
        FaultSource::open(
            &model.tables,
            &io,
            FaultPlan {
                short_reads: Some(100),
                interrupt_every: Some(7),
                latency: Some(Duration::from_micros(50)),
                eio_one_in: Some((42, 50)),
                ..FaultPlan::default()
            },
        )
        .unwrap(),
    );
    let truncated = Arc::new(
        FaultSource::open(
            &copy.tables,
            &io,
            FaultPlan {
                truncate_at_read: Some((0, cut)),
                ..FaultPlan::default()
            },
        )
        .unwrap(),
    );
    let mixed = Arc::new(Mixed {
        whole: whole.clone(),
        truncated: truncated.clone(),
        calls: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let cached = Arc::new(CachedSource::new(
        mixed.clone(),
        Arc::new(RowCache::new(16 << 10, 264)),
    ));
    let threads_before = threads_now();
    let config = engram::testing::small_prefetch()
        .with_lookup_hints(true)
        .with_workers(3)
        .with_decode_workers(2);
    let engine = Engine::for_model(&model, cached.clone(), config).unwrap();
    let counts = Counts::default();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut hangs = 0;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..SEQUENCES as u64)
            .map(|i| {
                let (engine, model, counts) = (&engine, &model, &counts);
                s.spawn(move || {
                    let mut seq = engine.sequence();
                    drive(&mut seq, model, counts, i + 1, deadline);
                })
            })
            .collect();
        // Watchdog: no call returning anywhere for HANG is a hang.
        let mut last = (counts.progress.load(Ordering::Relaxed), Instant::now());
        while workers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(200));
            let now = counts.progress.load(Ordering::Relaxed);
            if now != last.0 {
                last = (now, Instant::now());
            } else if last.1.elapsed() > HANG {
                hangs += 1;
                eprintln!("soak: no call returned for {HANG:?}: a hang");
                std::process::abort();
            }
        }
        for w in workers {
            w.join().unwrap();
        }
    });
    drop(engine);
    let faults = whole.eio_injected() + truncated.eio_injected();
    println!(
        "soak {secs} s: calls {}, errors returned {}, source calls {}, source errors {} \
         (EIO injected {faults}, truncated-file reads {}), rows checked {}, hangs {hangs}",
        counts.calls.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed),
        mixed.calls.load(Ordering::Relaxed),
        mixed.errors.load(Ordering::Relaxed),
        truncated.reads(),
        counts.rows_checked.load(Ordering::Relaxed),
    );
    assert!(
        counts.errors.load(Ordering::Relaxed) > 0,
        "no fault reached a call"
    );
    assert_eq!(hangs, 0);
    assert_eq!(threads_now(), threads_before, "threads left behind");
    assert_eq!(
        Arc::strong_count(&cached),
        1,
        "references to the source left behind"
    );
    assert_eq!(
        Arc::strong_count(&mixed),
        2,
        "only the cache and the test hold it"
    );
}
