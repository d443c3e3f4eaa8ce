//! Helpers for tests of this crate and of the crates built on it (behind
//! `cfg(any(test, feature = "test_utils"))`, like the panic switch): one
//! timeout guard, one small scheduler configuration, one in-memory row
//! source and one reader of the reference row-id vectors instead of a copy
//! per test suite.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{LockResult, PoisonError};
use std::time::{Duration, Instant};

use crate::io::{BatchStats, Priority, RowRequest, RowSource, TableShape};
use crate::layout::Layout;
use crate::prefetch::PrefetchConfig;
use crate::{Error, Result};

/// Bytes of each row a [`MemSource`] serves.
pub const ROW_BYTES: usize = 16;

/// A scheduler configuration small enough that a prompt of a few dozen
/// tokens spans several chunks, read batches and ring laps (16-token chunks
/// after a 4-token first one, 8-token read batches, a 2-chunk ring), and
/// that always overlaps (no short-prompt threshold).
pub fn small_prefetch() -> PrefetchConfig {
    PrefetchConfig {
        chunk_tokens: 16,
        first_chunk_tokens: 4,
        read_batch_tokens: 8,
        ring_chunks: 2,
        overlap_threshold: 0,
        ..PrefetchConfig::default()
    }
}

/// Runs `f` on a thread and fails the test if it does not finish within
/// `limit`, so a wait that never ends is a failure, not a stuck suite. A
/// panic in `f` is passed on as the caller's own.
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    // Miri interprets about a thousand times slower than native code.
    let limit = if cfg!(miri) { limit * 200 } else { limit };
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => {
            handle.join().unwrap();
            value
        }
        // The closure panicked before sending: surface its panic.
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the closure sent nothing and did not panic"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {limit:?}: a wait hung"),
    }
}

/// The row-id vectors computed independently in Python
/// (`tests/reference/hash_vectors.py` writes
/// `crates/engram/tests/data/hash_vectors.json`): the text, its tokens, an
/// attention mask and, per layout scale and masking, each token's row ids.
pub fn hash_vectors() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hash_vectors.json");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Qwen4-Exp row-id vectors computed independently in Python
/// (`scripts/qwen4exp_ref.py` writes
/// `crates/engram/tests/data/qwen4exp_vectors.json`): per configuration
/// (the release, the release at a scale, a two-table 4-gram one) its config
/// keys, derived tables, and per sequence (`cases`, `rollbacks`) each token's
/// row ids in the [`json_token_rows`] shape.
pub fn qwen_vectors() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/qwen4exp_vectors.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Qwen4-Exp layout of one configuration of [`qwen_vectors`]: its
/// preset at its scale where it names one, else derived from its config
/// keys (one-based `ple_layer_ids`, rows of 8 values).
pub fn qwen_vector_layout(config: &serde_json::Value) -> Result<Layout> {
    use crate::layout::{preset, QwenParams};
    if let Some(name) = config["preset"].as_str() {
        return preset(name, config["scale"].as_u64().unwrap_or(1));
    }
    let c = &config["config"];
    let int = |key: &str| {
        c[key].as_u64().ok_or_else(|| {
            Error::InvalidArgument(format!("qwen vectors: config.{key} is not a u64"))
        })
    };
    let small = |key: &str| {
        int(key).and_then(|v| {
            u32::try_from(v).map_err(|_| {
                Error::InvalidArgument(format!("qwen vectors: config.{key} {v} is past u32"))
            })
        })
    };
    let one_based: Vec<u32> = json_u64s(&c["ple_layer_ids"])
        .iter()
        .map(|&v| v as u32)
        .collect();
    Layout::derive_qwen(&QwenParams {
        vocab_size: small("vocab_size")?,
        ngram_size: int("ngram_size")? as usize,
        heads_per_ngram: int("heads_per_ngram")? as usize,
        ngram_vocab_size_base: int("ngram_vocab_size_base")?,
        make_ngram_vocab_size_divisible_by: int("make_ngram_vocab_size_divisible_by")?,
        seed: int("seed")?,
        eos_token_id: small("eos_token_id")?,
        layer_ids: QwenParams::layer_ids_from_one_based(&one_based)?,
        row_dim: 8,
    })
}

/// A JSON array of non-negative integers (a field of [`hash_vectors`]).
pub fn json_u64s(v: &serde_json::Value) -> Vec<u64> {
    let int = |x: &serde_json::Value| x.as_u64().unwrap_or_else(|| panic!("not a u64: {x}"));
    json_items(v).iter().map(int).collect()
}

/// A case's `token_rows` of [`hash_vectors`] (per token, per table, its
/// row ids) flattened in that order: the ids `Sequence::row_ids` writes for
/// the same tokens.
pub fn json_token_rows(case: &serde_json::Value) -> Vec<u32> {
    let per_table = json_items(&case["token_rows"]).iter().flat_map(json_items);
    let rows = per_table.flat_map(json_u64s);
    rows.map(|r| u32::try_from(r).expect("a row id fits u32"))
        .collect()
}

/// The elements of a JSON array; anything else fails the test.
fn json_items(v: &serde_json::Value) -> &[serde_json::Value] {
    v.as_array()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("not an array: {v}"))
}

/// The tiny Qwen4-Exp models `scripts/third_party_models.py` wrote with
/// third-party writers, as its `manifest.json` lists them.
#[derive(Debug)]
pub struct ThirdParty {
    /// Values per row.
    pub row_dim: usize,
    /// The token sequence the manifest hashes.
    pub tokens: Vec<u32>,
    /// Its row ids by the independent hash, 16 per token.
    pub row_ids: Vec<u32>,
    /// The hash's primes and multipliers.
    pub primes: Vec<u64>,
    /// The multipliers.
    pub multipliers: Vec<u64>,
    /// The models.
    pub models: Vec<ThirdPartyModel>,
}

/// One third-party model and what its writer's decoder gives.
#[derive(Debug)]
pub struct ThirdPartyModel {
    /// Its name (format and encoding).
    pub name: String,
    /// The encoding name the manifest gives.
    pub encoding: String,
    /// The path `Model::open` takes.
    pub path: std::path::PathBuf,
    /// Every row's values, as f32 bits, row after row.
    pub values: Vec<u32>,
}

impl ThirdPartyModel {
    /// The f32 bits of `rows`, `row_dim` values each, in order.
    pub fn rows(&self, rows: &[u32], row_dim: usize) -> Vec<u32> {
        rows.iter()
            .flat_map(|&r| {
                self.values[r as usize * row_dim..(r as usize + 1) * row_dim]
                    .iter()
                    .copied()
            })
            .collect()
    }
}

/// The models of `ENGRAM_THIRD_PARTY` (`.ci/run` makes them), or `None`
/// after saying why on stderr when the variable is not set.
pub fn third_party() -> Option<ThirdParty> {
    let Some(dir) = std::env::var_os("ENGRAM_THIRD_PARTY") else {
        eprintln!(
            "ENGRAM_THIRD_PARTY is not set: no third-party models to check (.ci/run makes them)"
        );
        return None;
    };
    let dir = std::path::PathBuf::from(dir);
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    let m: serde_json::Value = serde_json::from_str(&text).expect("manifest JSON");
    let u32s = |v: &serde_json::Value| {
        json_u64s(v)
            .into_iter()
            .map(|x| x as u32)
            .collect::<Vec<u32>>()
    };
    let models = m["models"]
        .as_array()
        .expect("models")
        .iter()
        .map(|model| {
            let field = |k: &str| model[k].as_str().expect(k).to_string();
            let bytes = std::fs::read(field("values")).expect("values file");
            ThirdPartyModel {
                name: field("name"),
                encoding: field("encoding"),
                path: field("path").into(),
                values: bytes
                    .chunks_exact(4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            }
        })
        .collect();
    Some(ThirdParty {
        row_dim: m["config"]["row_dim"].as_u64().expect("row_dim") as usize,
        tokens: u32s(&m["tokens"]),
        row_ids: m["row_ids"]
            .as_array()
            .expect("row_ids")
            .iter()
            .flat_map(u32s)
            .collect(),
        primes: json_u64s(&m["primes"]),
        multipliers: json_u64s(&m["multipliers"]),
        models,
    })
}

/// The deterministic bytes of a row: any mix-up of table, row or position
/// shows as a mismatch.
pub fn row_bytes_of(table: usize, row: u64) -> [u8; ROW_BYTES] {
    let mut out = [0u8; ROW_BYTES];
    let mut x = (row + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((table as u64 + 1) << 56);
    for b in &mut out {
        x ^= x >> 29;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        *b = (x >> 40) as u8;
    }
    out
}

/// An in-memory row source: rows computed by [`row_bytes_of`].
#[derive(Default)]
pub struct MemSource {
    /// The tables served.
    pub shapes: Vec<TableShape>,
    /// Fail every read that includes this (table, row).
    pub fail_row: Option<(usize, u64)>,
    /// Panic on every read that includes this (table, row).
    pub panic_row: Option<(usize, u64)>,
    /// Added latency per call.
    pub delay: Option<Duration>,
    /// Added time per row of a call, as a device of fixed throughput:
    /// calls of many rows take longer, and the calls of several readers
    /// take turns (one at a time, as one device serves them). A
    /// [`Priority::PrefillLater`] call is served a row at a time, only
    /// while no call of another priority holds or waits for the device,
    /// and only once the later calls before it are done (as the file
    /// sources serve them: with the depth the others leave, first come,
    /// first served).
    pub row_delay: Option<Duration>,
    /// Serializes the calls under `row_delay`.
    pub device: std::sync::Mutex<()>,
    /// Calls other than [`Priority::PrefillLater`] holding or waiting for
    /// `device`: a later call yields to them.
    pub urgent: std::sync::Mutex<usize>,
    /// Signalled as `urgent` changes: a later call holding the device lets
    /// it go, one waiting for it takes it.
    pub urgent_changed: std::sync::Condvar,
    /// The [`Priority::PrefillLater`] calls under `row_delay`: tickets
    /// handed out and the ticket served now.
    pub later_turn: std::sync::Mutex<(u64, u64)>,
    /// Signalled as each later call ends, for the one after it.
    pub later_done: std::sync::Condvar,
    /// Rows served at [`Priority::PrefillLater`] so far, counted as each
    /// is served (not at the end of its call).
    pub later_rows: AtomicUsize,
    /// Rows of [`Priority::Prefill`] and [`Priority::PrefillLater`] calls
    /// so far, per table (two tables).
    pub prefill_rows: [AtomicUsize; 2],
    /// Read calls so far.
    pub calls: AtomicUsize,
    /// Prefill read calls running now, and the most that ever ran at once.
    pub prefill_calls_running: AtomicUsize,
    pub most_prefill_calls_running: AtomicUsize,
    /// Prefill read calls that began while another one was running.
    pub prefill_calls_begun_beside_another: AtomicUsize,
    /// Read calls at [`Priority::Hint`] so far.
    pub hint_calls: AtomicUsize,
    /// Rows read at [`Priority::Warm`] so far, per table (two tables).
    pub warm_rows: [AtomicUsize; 2],
    /// The table of every read call at [`Priority::Prefill`] or
    /// [`Priority::PrefillLater`], in call order.
    pub prefill_tables: std::sync::Mutex<Vec<usize>>,
    /// The table and distinct rows of every prefill read call, in call
    /// order.
    pub prefill_log: std::sync::Mutex<Vec<(usize, Vec<u32>)>>,
    /// The table and priority of every prefill read call (as
    /// `prefill_tables`), in the order the calls finished.
    pub prefill_calls: std::sync::Mutex<Vec<(usize, Priority)>>,
    /// The table and rows of every read call at [`Priority::Hint`], in
    /// call order (logged as the call starts).
    pub hint_log: std::sync::Mutex<Vec<(usize, Vec<u32>)>>,
    /// While set, every [`Priority::Hint`] call, once logged, waits for a
    /// message (or the sender's drop) before it reads: a test holds hint
    /// reads running or queued at a point of its choosing.
    pub hint_gate: std::sync::Mutex<Option<mpsc::Receiver<()>>>,
}

impl MemSource {
    /// A source of `layout`'s tables, with no fault injected.
    pub fn for_layout(layout: &Layout) -> MemSource {
        MemSource {
            shapes: layout
                .tables
                .iter()
                .map(|t| TableShape {
                    rows: t.rows,
                    row_bytes: ROW_BYTES,
                })
                .collect(),
            ..MemSource::default()
        }
    }
}

/// A lock or wait's guard, poisoned or not: a test thread that panicked
/// while holding it left nothing half-written that matters here.
fn relock<T>(result: LockResult<T>) -> T {
    result.unwrap_or_else(PoisonError::into_inner)
}

impl MemSource {
    /// Holds the device for `rows` rows of `per_row` each: any call but a
    /// [`Priority::PrefillLater`] one at once; a later call once the later
    /// calls before it are done, and only while no other call holds or
    /// waits for the device (one that comes takes the device at once, and
    /// the later call goes on after it).
    ///
    /// The later call's time is kept by the clock, not by a sleep a row:
    /// a sleep of microseconds takes tens, which would make later rows
    /// many times slower than the others.
    fn serve(&self, priority: Priority, rows: usize, per_row: Duration) {
        let busy = per_row * rows as u32;
        if priority != Priority::PrefillLater {
            *relock(self.urgent.lock()) += 1;
            self.urgent_changed.notify_all();
            let device = relock(self.device.lock());
            std::thread::sleep(busy);
            drop(device);
            *relock(self.urgent.lock()) -= 1;
            self.urgent_changed.notify_all();
            return;
        }
        let ticket = {
            let mut turn = relock(self.later_turn.lock());
            turn.0 += 1;
            turn.0 - 1
        };
        let mut turn = relock(self.later_turn.lock());
        while turn.1 != ticket {
            turn = relock(self.later_done.wait(turn));
        }
        drop(turn);
        let (mut served, mut counted) = (Duration::ZERO, 0);
        while served < busy {
            let mut urgent = relock(self.urgent.lock());
            while *urgent > 0 {
                urgent = relock(self.urgent_changed.wait(urgent));
            }
            // Lock order: `device`, then `urgent`; an urgent call never
            // holds `urgent` while it waits for `device`.
            drop(urgent);
            let device = relock(self.device.lock());
            let mut urgent = relock(self.urgent.lock());
            let began = Instant::now();
            while *urgent == 0 && served + began.elapsed() < busy {
                let left = busy - served - began.elapsed();
                urgent = relock(self.urgent_changed.wait_timeout(urgent, left)).0;
            }
            served += began.elapsed();
            drop(urgent);
            drop(device);
            let rows_served = ((served.as_nanos() / per_row.as_nanos().max(1)) as usize).min(rows);
            self.later_rows
                .fetch_add(rows_served - counted, Ordering::Relaxed);
            counted = rows_served;
        }
        self.later_rows.fetch_add(rows - counted, Ordering::Relaxed);
        relock(self.later_turn.lock()).1 += 1;
        self.later_done.notify_all();
    }
}

impl RowSource for MemSource {
    fn name(&self) -> String {
        "mem".into()
    }
    fn shapes(&self) -> &[TableShape] {
        &self.shapes
    }
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        let (table, rows, priority) = (request.table, request.rows, request.priority);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if priority == Priority::Hint {
            self.hint_log
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((table, rows.to_vec()));
            self.hint_calls.fetch_add(1, Ordering::SeqCst);
            let gate = self
                .hint_gate
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(gate) = gate.as_ref() {
                // Bounded, so a test that forgets to open it fails instead
                // of hanging.
                let _ = gate.recv_timeout(Duration::from_secs(30));
            }
        }
        if priority == Priority::Warm {
            if let Some(count) = self.warm_rows.get(table) {
                count.fetch_add(rows.len(), Ordering::Relaxed);
            }
        }
        let prefill = matches!(priority, Priority::Prefill | Priority::PrefillLater);
        if prefill {
            self.prefill_tables
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push(table);
            let mut distinct = rows.to_vec();
            distinct.sort_unstable();
            distinct.dedup();
            self.prefill_log
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((table, distinct));
            let running = self.prefill_calls_running.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_prefill_calls_running
                .fetch_max(running, Ordering::SeqCst);
            if running > 1 {
                self.prefill_calls_begun_beside_another
                    .fetch_add(1, Ordering::SeqCst);
            }
        }
        if let Some(d) = self.delay {
            std::thread::sleep(d); // stands in for device latency
        }
        if let Some(d) = self.row_delay {
            self.serve(priority, rows.len(), d);
        }
        if prefill {
            self.prefill_calls_running.fetch_sub(1, Ordering::SeqCst);
            if let Some(count) = self.prefill_rows.get(table) {
                count.fetch_add(rows.len(), Ordering::Relaxed);
            }
            self.prefill_calls
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((table, priority));
        }
        assert_eq!(out.len(), rows.len() * ROW_BYTES, "caller sized out wrong");
        for (row, dst) in rows
            .iter()
            .map(|&r| u64::from(r))
            .zip(out.chunks_exact_mut(ROW_BYTES))
        {
            if row >= self.shapes[table].rows {
                return Err(Error::InvalidArgument(format!(
                    "row {row} outside table {table}"
                )));
            }
            if self.panic_row == Some((table, row)) {
                panic!("injected panic at row {row}");
            }
            if self.fail_row == Some((table, row)) {
                return Err(Error::RowRead {
                    table,
                    row,
                    file: "mem.gguf".into(),
                    offset: row * ROW_BYTES as u64,
                    source: std::io::Error::from_raw_os_error(5),
                });
            }
            dst.copy_from_slice(&row_bytes_of(table, row));
        }
        let mut unique = rows.to_vec();
        unique.sort_unstable();
        unique.dedup();
        Ok(BatchStats {
            rows_requested: rows.len() as u64,
            rows_unique: unique.len() as u64,
            reads_issued: unique.len() as u64,
            bytes_read: (unique.len() * ROW_BYTES) as u64,
            ..BatchStats::default()
        })
    }
}
