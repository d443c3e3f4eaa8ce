//! The peer's prefill: one reader thread, one buffer for both tables, a
//! ready counter per table polled with a 1 ms sleep.
//!
//! Buffer protocol (what makes the unsynchronized slot accesses sound):
//! - the reader writes table 0's slots of tokens `>= ready[0]` only, all
//!   before it writes any table 1 slot (one thread does both, in order);
//! - it writes table 1's slots of tokens in `ready[1]..consumed0` only,
//!   where `consumed0` is the end of the table-0 rows the consumer is done
//!   with (see [`Ds4Prefill::promote`]);
//! - the consumer reads table `t`'s slots of `[from, upto)` only after
//!   `ready[t] >= upto` (Acquire, pairing with the reader's Release), and for
//!   table 0 while `consumed0 <= from`, so no write can overlap a read.

use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use engram::codec::ROW_DIM;
use engram::prefetch::ready::duplicate_error;
use engram::{Error, Result};

use super::super::PrefillRun;
use super::read::{Counters, Fetched, PeerFiles};

/// Tokens per reader chunk (the peer's).
pub(super) const CHUNK_TOKENS: u32 = 2048;

/// The consumer's sleep between polls of a ready counter (the peer's).
pub(super) const POLL_SLEEP: Duration = Duration::from_millis(1);

/// One allocation of `tokens * columns` row slots, written by the reader and
/// read by the consumer under the protocol of the module docs.
struct SlotBuffer {
    bytes: Box<[UnsafeCell<u8>]>,
    /// Bytes per token (`columns * row width`).
    token_bytes: usize,
}

// SAFETY: accesses to the cells are partitioned by token range between the
// reader and the consumer as the module docs describe; the ready counters
// and the gate mutex order them.
unsafe impl Sync for SlotBuffer {}

impl SlotBuffer {
    fn new(tokens: usize, token_bytes: usize) -> SlotBuffer {
        // Zeroed by the allocator (calloc): pages appear as rows land, as
        // in the peer, instead of being touched up front.
        let zeroed = vec![0u8; tokens * token_bytes].into_boxed_slice();
        // SAFETY: UnsafeCell<u8> is repr(transparent) over u8, so the slice
        // layouts are identical and the allocation is freed with the same one.
        let bytes = unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [UnsafeCell<u8>]) };
        SlotBuffer { bytes, token_bytes }
    }

    fn byte_range(&self, tokens: Range<u32>) -> Range<usize> {
        tokens.start as usize * self.token_bytes..tokens.end as usize * self.token_bytes
    }

    /// The slots of `tokens`, to write.
    ///
    /// # Safety
    /// No other reference to these tokens' slots may exist meanwhile.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slots_mut(&self, tokens: Range<u32>) -> &mut [u8] {
        let cells = &self.bytes[self.byte_range(tokens)];
        // SAFETY: UnsafeCell<u8> has u8's layout; exclusivity is the caller's.
        unsafe { std::slice::from_raw_parts_mut(UnsafeCell::raw_get(cells.as_ptr()), cells.len()) }
    }

    /// The slots of `tokens`, to read.
    ///
    /// # Safety
    /// No write to these tokens' slots may happen meanwhile.
    unsafe fn slots(&self, tokens: Range<u32>) -> &[u8] {
        let cells = &self.bytes[self.byte_range(tokens)];
        // SAFETY: as in `slots_mut`; the caller rules out writers.
        unsafe { std::slice::from_raw_parts(UnsafeCell::raw_get(cells.as_ptr()), cells.len()) }
    }
}

/// What the consumer tells the reader: table 1 may start, and how far
/// table 0's rows have been used.
#[derive(Debug, Default)]
struct Gate {
    /// The forward pass has started the layer after table 0's.
    table1_open: bool,
    /// Tokens whose table-0 rows the forward pass is done with.
    consumed0: u32,
}

/// State shared by the reader thread and the consumer.
struct Shared {
    buffer: SlotBuffer,
    ready: [AtomicU32; 2],
    /// The reader's failure, handed (as a copy) to every later wait.
    error: Mutex<Option<Error>>,
    /// Set when the reader thread ends, however it ends.
    finished: AtomicBool,
    stop: AtomicBool,
    gate: Mutex<Gate>,
    gate_changed: Condvar,
}

impl Shared {
    fn gate(&self) -> MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update_gate(&self, change: impl FnOnce(&mut Gate)) {
        change(&mut self.gate());
        self.gate_changed.notify_all();
    }

    fn stored_error(&self) -> Option<Error> {
        let error = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        error.as_ref().map(duplicate_error)
    }
}

/// What the reader thread owns.
struct Reader {
    shared: Arc<Shared>,
    tables: Arc<PeerFiles>,
    io: Arc<Counters>,
    /// Row ids, `[token][table][column]`.
    ids: Arc<[u32]>,
    columns: usize,
    tokens: u32,
}

impl Reader {
    fn run(self) {
        let result = self.read_all();
        if let Err(error) = result {
            if !matches!(error, Error::Cancelled) {
                *self
                    .shared
                    .error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(error);
            }
        }
    }

    fn chunks(&self) -> impl Iterator<Item = Range<u32>> {
        let tokens = self.tokens;
        (0..tokens)
            .step_by(CHUNK_TOKENS as usize)
            .map(move |start| start..(start + CHUNK_TOKENS).min(tokens))
    }

    /// Table 0 for the whole prompt, then table 1 as the gate allows.
    fn read_all(&self) -> Result<()> {
        let mut fetched = Fetched::default();
        let mut ids = Vec::new();
        for chunk in self.chunks() {
            self.fetch_chunk(0, chunk.clone(), &mut ids, &mut fetched)?;
            self.scatter(0, chunk.clone(), chunk.clone(), &ids, &fetched);
        }
        for chunk in self.chunks() {
            self.wait_gate(|_| true)?;
            self.fetch_chunk(1, chunk.clone(), &mut ids, &mut fetched)?;
            // Scatter as far as table 0's rows are used up: the whole chunk
            // under a layer sweep, ubatch by ubatch under a chunk sweep.
            let mut done = chunk.start;
            while done < chunk.end {
                let consumed = self.wait_gate(|gate| gate.consumed0 > done)?;
                let upto = consumed.min(chunk.end);
                self.scatter(1, chunk.clone(), done..upto, &ids, &fetched);
                done = upto;
            }
        }
        Ok(())
    }

    /// Gathers `table`'s ids of `chunk` into `ids` and reads their rows.
    fn fetch_chunk(
        &self,
        table: usize,
        chunk: Range<u32>,
        ids: &mut Vec<u32>,
        fetched: &mut Fetched,
    ) -> Result<()> {
        let per_token = 2 * self.columns;
        ids.clear();
        for token in chunk.start as usize..chunk.end as usize {
            let at = token * per_token + table * self.columns;
            ids.extend_from_slice(&self.ids[at..at + self.columns]);
        }
        let stop = &self.shared.stop;
        fetched.fetch(&self.tables, table, ids, stop, &self.io)
    }

    /// Copies rows of `tokens` (inside `chunk`, whose ids `ids` holds) to
    /// their slots and publishes them.
    fn scatter(
        &self,
        table: usize,
        chunk: Range<u32>,
        tokens: Range<u32>,
        ids: &[u32],
        fetched: &Fetched,
    ) {
        let from = (tokens.start - chunk.start) as usize * self.columns;
        let to = (tokens.end - chunk.start) as usize * self.columns;
        // SAFETY: per the module protocol these slots are the reader's: table
        // 0 has not published them yet; table 1 writes below consumed0 only.
        let slots = unsafe { self.shared.buffer.slots_mut(tokens.clone()) };
        fetched.scatter(&ids[from..to], slots);
        self.shared.ready[table].store(tokens.end, Ordering::Release);
    }

    /// Blocks until table 1 may start and `ready(gate)` holds; returns
    /// `consumed0`, or [`Error::Cancelled`] once the prefill is dropped.
    fn wait_gate(&self, ready: impl Fn(&Gate) -> bool) -> Result<u32> {
        let mut gate = self.shared.gate();
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                return Err(Error::Cancelled);
            }
            if gate.table1_open && ready(&gate) {
                return Ok(gate.consumed0);
            }
            gate = self
                .shared
                .gate_changed
                .wait(gate)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Marks the reader finished when its thread ends, even by a panic, so no
/// wait polls forever.
struct FinishGuard(Arc<Shared>);

impl Drop for FinishGuard {
    fn drop(&mut self) {
        self.0.finished.store(true, Ordering::Release);
    }
}

/// What a prefill is started from.
pub(super) struct PrefillSpec {
    pub(super) tables: Arc<PeerFiles>,
    pub(super) io: Arc<Counters>,
    pub(super) ids: Arc<[u32]>,
    pub(super) columns: usize,
    pub(super) tokens: u32,
    /// The layer whose start opens table 1 (the one after table 0's).
    pub(super) table1_layer: u32,
}

/// A running ds4 prefill: the consumer's side.
pub(super) struct Ds4Prefill {
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
    tables: Arc<PeerFiles>,
    ids: Arc<[u32]>,
    columns: usize,
    tokens: u32,
    table1_layer: u32,
    table1_open: bool,
    /// Per table, the `upto` of the previous wait.
    waited: [u32; 2],
    /// What the gate last heard as `consumed0`.
    consumed0: u32,
}

impl Ds4Prefill {
    /// Allocates the shared buffer and starts the reader thread.
    pub(super) fn start(spec: PrefillSpec) -> Result<Ds4Prefill> {
        let width = spec.tables[0].width();
        let shared = Arc::new(Shared {
            buffer: SlotBuffer::new(spec.tokens as usize, spec.columns * width),
            ready: [AtomicU32::new(0), AtomicU32::new(0)],
            error: Mutex::new(None),
            finished: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            gate: Mutex::new(Gate::default()),
            gate_changed: Condvar::new(),
        });
        let reader = Reader {
            shared: shared.clone(),
            tables: spec.tables.clone(),
            io: spec.io,
            ids: spec.ids.clone(),
            columns: spec.columns,
            tokens: spec.tokens,
        };
        let guard = FinishGuard(shared.clone());
        let handle = std::thread::Builder::new()
            .name("ds4-prefill-reader".into())
            .spawn(move || {
                let _guard = guard;
                reader.run();
            })
            .map_err(|e| Error::io("ds4 prefill reader thread", e))?;
        Ok(Ds4Prefill {
            shared,
            reader: Some(handle),
            tables: spec.tables,
            ids: spec.ids,
            columns: spec.columns,
            tokens: spec.tokens,
            table1_layer: spec.table1_layer,
            table1_open: false,
            waited: [0, 0],
            consumed0: 0,
        })
    }

    /// Any call after a wait on table 0 means the layer that used its rows
    /// has run: those tokens' slots may now take table 1's rows.
    fn promote(&mut self) {
        if self.waited[0] > self.consumed0 {
            self.consumed0 = self.waited[0];
            let consumed = self.consumed0;
            self.shared.update_gate(|gate| gate.consumed0 = consumed);
        }
    }

    fn check_wait(&self, table: usize, upto: u32) -> Result<u32> {
        let Some(&from) = self.waited.get(table) else {
            return Err(Error::InvalidArgument(format!(
                "table {table} out of range (the ds4 schedule reads 2)"
            )));
        };
        if upto < from || upto > self.tokens {
            return Err(Error::InvalidArgument(format!(
                "wait(table {table}, upto {upto}): upto must be in {from}..={} (waits advance)",
                self.tokens
            )));
        }
        // Table 1's rows land where table 0's were: they can only come once
        // the forward pass is past table 0's layer for these tokens.
        if table == 1 && upto > from && (!self.table1_open || self.consumed0 < upto) {
            return Err(Error::InvalidArgument(format!(
                "wait(table 1, upto {upto}) before the forward pass started layer {} and used \
                 table 0's rows of those tokens (used: {}); the ds4 schedule shares one buffer",
                self.table1_layer, self.consumed0
            )));
        }
        Ok(from)
    }

    /// Sleep-polls the ready counter of `table` until it reaches `upto`.
    fn poll(&self, table: usize, upto: u32) -> Result<()> {
        loop {
            if self.shared.ready[table].load(Ordering::Acquire) >= upto {
                return Ok(());
            }
            if let Some(error) = self.shared.stored_error() {
                return Err(error);
            }
            if self.shared.finished.load(Ordering::Acquire) {
                // Recheck: the reader may have published just before ending.
                if self.shared.ready[table].load(Ordering::Acquire) >= upto {
                    return Ok(());
                }
                return Err(self.shared.stored_error().unwrap_or(Error::Cancelled));
            }
            std::thread::sleep(POLL_SLEEP);
        }
    }

    /// Decodes the rows of `tokens` of `table` into `out`.
    fn decode(&self, table: usize, tokens: Range<u32>, out: &mut Vec<f32>) -> Result<()> {
        let first = tokens.start as usize;
        let rows = tokens.len() * self.columns;
        out.clear();
        out.resize(rows * ROW_DIM, 0.0);
        // SAFETY: published (`ready >= tokens.end`, checked by `poll`) and not
        // yet released to table 1 (`consumed0 <= tokens.start`).
        let raw = unsafe { self.shared.buffer.slots(tokens) };
        self.tables[table]
            .encoding()
            .decode_rows(raw, out)
            .map_err(|e| {
                let token = first + e.index / self.columns;
                let at = token * 2 * self.columns + table * self.columns + e.index % self.columns;
                let row = self.ids.get(at).map_or(u64::MAX, |&r| u64::from(r));
                e.into_error(table, row)
            })
    }
}

impl PrefillRun for Ds4Prefill {
    fn layer_start(&mut self, layer: u32, _start: u32) -> Result<()> {
        self.promote();
        if layer >= self.table1_layer && !self.table1_open {
            self.table1_open = true;
            self.shared.update_gate(|gate| gate.table1_open = true);
        }
        Ok(())
    }

    fn wait(&mut self, table: usize, upto: u32, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        // The whole call, as the engine's wait is timed: the peer's wait
        // also hands table 0's used slots over (`promote`, a lock and a
        // wake) and checks its range before it polls.
        let started = Instant::now();
        self.promote();
        let from = self.check_wait(table, upto)?;
        self.poll(table, upto)?;
        let stall = started.elapsed();
        self.waited[table] = upto;
        if let Some(rows) = rows {
            self.decode(table, from..upto, rows)?;
        }
        Ok(stall)
    }
}

impl Drop for Ds4Prefill {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Under the gate lock, so a reader about to wait cannot miss it.
        self.shared.update_gate(|_| ());
        if let Some(reader) = self.reader.take() {
            // A panicked reader has already set `finished`; nothing to add.
            let _ = reader.join();
        }
    }
}
