//! Prefill: one reader job per table, filling a bounded ring of chunks ahead
//! of the consumer.
//!
//! Contract of [`Prefill::wait`]: waits on one table ask for increasing
//! `upto`; a wait returns the rows of tokens `[previous upto, upto)` and
//! releases the rows the previous wait on that table returned. The ring of a
//! table holds `ring_chunks * chunk_tokens` tokens, so one wait may cover at
//! most that many tokens; the readers run ahead of the consumer by at most
//! the ring's free space. Memory is therefore fixed by the configuration,
//! except with `pipeline` off, where (as in the peers) the ring holds the
//! whole prompt and a wait blocks until the whole table is read.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pool::{PoolShared, Task};
use super::read::ReadCtx;
use super::ready::{InFlight, Ready};
use super::ring::RingBuf;
use super::source::{Priority, RowSource};
use super::sync::lock_std as lock;
use super::view::RowsView;
use crate::codec::{Encoding, ROW_DIM};
use crate::stats::{Phase, StatsRecorder};
use crate::{Error, Result};

/// How a prefill's rows are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Pool readers run ahead of the consumer.
    Overlap,
    /// Rows are read at the wait, on the consumer's thread.
    AtWait,
}

/// Shape of a prefill job, fixed at its start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub tokens: u32,
    pub ring_tokens: u32,
    pub first_chunk: u32,
    pub chunk: u32,
    pub mode: Mode,
    pub batch: bool,
    /// Pipeline off: a wait blocks until the whole table is read.
    pub whole_table: bool,
}

struct Sched {
    next: u32,
    in_flight: bool,
    stopped: bool,
}

/// One table's reader state for one prefill.
pub(crate) struct TableJob {
    id: u64,
    table: usize,
    tables: usize,
    cols: usize,
    row_bytes: usize,
    plan: Plan,
    /// Some: rows are decoded to f32 (`row_bytes` is then `ROW_DIM * 4`).
    decode: Option<Encoding>,
    ids: Arc<[u32]>,
    ring: RingBuf,
    ready: Ready,
    /// Tokens before this the consumer no longer holds (the reader may
    /// overwrite their ring slots).
    released: AtomicU32,
    /// Set while a consumer is blocked on this job: its next chunk goes first.
    waited_on: AtomicBool,
    sched: Mutex<Sched>,
    /// Pool tasks holding this job; its own `Arc` so a task can drop its
    /// job reference before it leaves (then `cancel_and_join` returning
    /// means no task holds the job any more).
    flight: Arc<InFlight>,
    source: Arc<dyn RowSource>,
    stats: Arc<StatsRecorder>,
    pool: Arc<PoolShared>,
}

impl TableJob {
    fn token_bytes(&self) -> usize {
        self.cols * self.row_bytes
    }

    /// Row ids of `table` for tokens `start..end`, token-major.
    fn row_ids(&self, start: u32, end: u32) -> Vec<u64> {
        let stride = self.tables * self.cols;
        let mut rows = Vec::with_capacity((end - start) as usize * self.cols);
        for t in start as usize..end as usize {
            let base = t * stride + self.table * self.cols;
            rows.extend(
                self.ids[base..base + self.cols]
                    .iter()
                    .map(|&r| u64::from(r)),
            );
        }
        rows
    }

    /// Reads tokens `start..end` into their ring slots (split where the ring
    /// wraps).
    ///
    /// Caller guarantees: no consumer view covers those slots (`end <=
    /// released + ring_tokens` and `start >= ready`), and no other reader of
    /// this job runs (one chunk in flight, or the consumer reading at the
    /// wait with no pool reader scheduled).
    fn read_range(&self, start: u32, end: u32, phase: Phase) -> Result<()> {
        let ctx = ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase,
            priority: Priority::Demand,
            batch: self.plan.batch,
        };
        let cap = self.plan.ring_tokens;
        let mut t = start;
        while t < end {
            let slot = t % cap;
            let seg_end = end.min(t + (cap - slot));
            let rows = self.row_ids(t, seg_end);
            let tb = self.token_bytes();
            let (at, len) = (slot as usize * tb, (seg_end - t) as usize * tb);
            // SAFETY (both arms): per the caller's guarantee the slots of
            // t..seg_end are neither viewed by the consumer nor written by
            // anyone else.
            match self.decode {
                Some(enc) => {
                    let out = unsafe { self.ring.slice_mut_f32(at, len / 4) };
                    ctx.read_f32(self.table, &rows, enc, out)?;
                }
                None => ctx.read(self.table, &rows, unsafe { self.ring.slice_mut(at, len) })?,
            }
            t = seg_end;
        }
        Ok(())
    }

    /// Queues the next chunk if none is in flight and the ring has room.
    fn try_schedule(self: &Arc<Self>) {
        let mut s = lock(&self.sched);
        if s.in_flight || s.stopped || s.next >= self.plan.tokens {
            return;
        }
        let limit = self
            .released
            .load(Ordering::Acquire)
            .saturating_add(self.plan.ring_tokens);
        let len = if s.next == 0 {
            self.plan.first_chunk
        } else {
            self.plan.chunk
        };
        let end = s.next.saturating_add(len).min(limit).min(self.plan.tokens);
        if end <= s.next {
            return; // parked until the consumer releases ring space
        }
        let start = s.next;
        s.next = end;
        s.in_flight = true;
        self.flight.enter();
        drop(s);
        self.pool.submit_demand(Box::new(ChunkTask {
            job: self.clone(),
            start,
            end,
        }));
    }

    fn finish_chunk(self: &Arc<Self>, result: Result<u32>) {
        match result {
            Ok(end) => self.ready.publish(end),
            Err(e) => {
                lock(&self.sched).stopped = true;
                self.ready.fail(e);
            }
        }
        lock(&self.sched).in_flight = false;
        self.try_schedule();
    }

    /// Stops the job: no more chunks, waiters get `Cancelled`, queued chunks
    /// dropped; returns once no pool thread touches the ring.
    fn cancel_and_join(&self) {
        lock(&self.sched).stopped = true;
        self.ready.cancel();
        self.pool.cancel_owner(self.id);
        self.flight.wait_idle();
    }
}

struct ChunkTask {
    job: Arc<TableJob>,
    start: u32,
    end: u32,
}

impl Task for ChunkTask {
    fn run(self: Box<Self>) {
        let ChunkTask { job, start, end } = *self;
        let result = if job.ready.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            job.read_range(start, end, Phase::Prefill).map(|()| end)
        };
        job.finish_chunk(result);
        let flight = job.flight.clone();
        drop(job);
        flight.leave();
    }

    fn abandon(self: Box<Self>) {
        let job = self.job;
        lock(&job.sched).stopped = true;
        job.ready.cancel();
        lock(&job.sched).in_flight = false;
        let flight = job.flight.clone();
        drop(job);
        flight.leave();
    }

    fn owner(&self) -> u64 {
        self.job.id
    }

    fn urgency(&self) -> (u32, u32, u32) {
        let waited = u32::from(!self.job.waited_on.load(Ordering::Relaxed));
        (waited, self.start, self.job.table as u32)
    }
}

/// Per-table consumer state of a prefill.
struct Consumer {
    job: Arc<TableJob>,
    /// End of the last view returned (start of the next).
    upto: u32,
    /// (from, upto, stall per token in ns) of each wait, for the per-token
    /// total over tables.
    stalls: Vec<(u32, u32, u64)>,
}

/// A running prefill of one sequence. Dropping it cancels its readers and
/// joins them before the ring buffers are freed.
pub struct Prefill<'s> {
    consumers: Vec<Consumer>,
    stats: Arc<StatsRecorder>,
    _sequence: std::marker::PhantomData<&'s mut ()>,
}

/// Everything a prefill needs from its engine and sequence.
pub(crate) struct PrefillSetup<'a> {
    pub first_id: u64,
    /// Per table: Some(encoding) to decode rows to f32.
    pub decode: &'a [Option<Encoding>],
    pub ids: Arc<[u32]>,
    pub cols: &'a [usize],
    pub plan: Plan,
    pub source: &'a Arc<dyn RowSource>,
    pub stats: &'a Arc<StatsRecorder>,
    pub pool: &'a Arc<PoolShared>,
}

impl<'s> Prefill<'s> {
    pub(crate) fn start(setup: PrefillSetup<'_>) -> Prefill<'s> {
        let tables = setup.cols.len();
        let cols = setup.cols[0];
        let consumers = (0..tables)
            .map(|table| {
                let decode = setup.decode[table];
                let row_bytes = match decode {
                    Some(_) => ROW_DIM * 4,
                    None => setup.source.row_bytes(table),
                };
                let job = Arc::new(TableJob {
                    id: setup.first_id + table as u64,
                    table,
                    tables,
                    cols,
                    row_bytes,
                    plan: setup.plan,
                    decode,
                    ids: setup.ids.clone(),
                    ring: RingBuf::new(setup.plan.ring_tokens as usize * cols * row_bytes),
                    ready: Ready::new(),
                    released: AtomicU32::new(0),
                    waited_on: AtomicBool::new(false),
                    sched: Mutex::new(Sched {
                        next: 0,
                        in_flight: false,
                        stopped: false,
                    }),
                    flight: Arc::new(InFlight::new()),
                    source: setup.source.clone(),
                    stats: setup.stats.clone(),
                    pool: setup.pool.clone(),
                });
                Consumer {
                    job,
                    upto: 0,
                    stalls: Vec::new(),
                }
            })
            .collect::<Vec<_>>();
        if setup.plan.mode == Mode::Overlap {
            // Table 0 is needed first (its layer comes first): queue it first.
            for c in &consumers {
                c.job.try_schedule();
            }
        }
        Prefill {
            consumers,
            stats: setup.stats.clone(),
            _sequence: std::marker::PhantomData,
        }
    }

    /// Tokens in the prefill.
    pub fn tokens(&self) -> u32 {
        self.consumers[0].job.plan.tokens
    }

    /// Most tokens one wait may cover (the ring capacity).
    pub fn max_wait_tokens(&self) -> u32 {
        self.consumers[0].job.plan.ring_tokens
    }

    /// Tokens of `table` whose rows are already read (no blocking).
    pub fn ready_tokens(&self, table: usize) -> Option<u32> {
        self.consumers.get(table).map(|c| c.job.ready.count())
    }

    /// Blocks until the rows of tokens `[0, upto)` of `table` are read and
    /// returns those of `[previous upto, upto)`; see the module docs for the
    /// contract. Ends with the rows, the reader's error (naming table, row
    /// and offset) or [`Error::Cancelled`].
    pub fn wait(&mut self, table: usize, upto: u32) -> Result<RowsView<'_>> {
        let from = self.check_wait(table, upto)?;
        let consumer = &mut self.consumers[table];
        let job = consumer.job.clone();
        if job.pool.is_shutdown() && job.ready.count() < upto {
            return Err(Error::Cancelled); // the engine is gone
        }
        // Release the previous view's slots, then let the reader use them.
        job.released.store(from, Ordering::Release);
        let started = Instant::now();
        let result = match job.plan.mode {
            Mode::Overlap => {
                job.try_schedule();
                let target = if job.plan.whole_table {
                    job.plan.tokens // pipeline off: the whole table
                } else {
                    upto
                };
                blocking_wait(&job, target)
            }
            Mode::AtWait => read_at_wait(&job, upto),
        };
        let stall = started.elapsed();
        result?;
        consumer.upto = upto;
        self.record(table, from, upto, stall);
        let consumer = &self.consumers[table];
        Ok(view(&consumer.job, from, upto))
    }

    /// [`Prefill::wait`], copying the rows into `out` (exactly the view's
    /// byte length).
    pub fn wait_into(&mut self, table: usize, upto: u32, out: &mut [u8]) -> Result<()> {
        self.wait(table, upto)?.copy_to(out)
    }

    fn check_wait(&self, table: usize, upto: u32) -> Result<u32> {
        let Some(consumer) = self.consumers.get(table) else {
            return Err(Error::InvalidArgument(format!(
                "table {table} out of range (the model has {})",
                self.consumers.len()
            )));
        };
        let plan = consumer.job.plan;
        let from = consumer.upto;
        if upto < from || upto > plan.tokens {
            return Err(Error::InvalidArgument(format!(
                "wait(table {table}, upto {upto}): upto must be in {from}..={} (waits advance)",
                plan.tokens
            )));
        }
        if upto - from > plan.ring_tokens {
            return Err(Error::InvalidArgument(format!(
                "wait(table {table}, upto {upto}) covers {} tokens; the ring holds {} \
                 (raise ring_chunks or wait in smaller steps)",
                upto - from,
                plan.ring_tokens
            )));
        }
        Ok(from)
    }

    fn record(&mut self, table: usize, from: u32, upto: u32, stall: Duration) {
        let tokens = u64::from(upto - from);
        self.stats.record_wait(Phase::Prefill, table, tokens, stall);
        let ns = u64::try_from(stall.as_nanos()).unwrap_or(u64::MAX);
        if let Some(per) = ns.checked_div(tokens) {
            self.consumers[table].stalls.push((from, upto, per));
        }
    }

    /// Records each token's stall summed over the tables.
    fn record_token_totals(&self) {
        let mut bounds: Vec<u32> = self
            .consumers
            .iter()
            .flat_map(|c| c.stalls.iter().flat_map(|&(a, b, _)| [a, b]))
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            let mut covered = false;
            let mut total = 0u64;
            for c in &self.consumers {
                for &(s, e, per) in &c.stalls {
                    if s <= a && b <= e {
                        covered = true;
                        total = total.saturating_add(per);
                    }
                }
            }
            if covered {
                self.stats.record_token_total(
                    Phase::Prefill,
                    Duration::from_nanos(total),
                    u64::from(b - a),
                );
            }
        }
    }
}

impl Drop for Prefill<'_> {
    fn drop(&mut self) {
        for c in &self.consumers {
            c.job.cancel_and_join();
        }
        self.record_token_totals();
    }
}

fn blocking_wait(job: &TableJob, target: u32) -> Result<()> {
    if let Some(done) = job.ready.try_wait(target) {
        return done.map(drop);
    }
    job.waited_on.store(true, Ordering::Relaxed);
    let result = job.ready.wait(target).map(drop);
    job.waited_on.store(false, Ordering::Relaxed);
    result
}

/// ENGRAM_PREFETCH=0 and short prompts: read the missing rows now.
fn read_at_wait(job: &TableJob, upto: u32) -> Result<()> {
    let have = job.ready.count();
    if let Some(Err(e)) = job.ready.try_wait(upto) {
        return Err(e);
    }
    if have < upto {
        if let Err(e) = job.read_range(have, upto, Phase::Prefill) {
            job.ready.fail(super::ready::duplicate_error(&e));
            return Err(e);
        }
        job.ready.publish(upto);
    }
    Ok(())
}

fn view(job: &TableJob, from: u32, upto: u32) -> RowsView<'_> {
    let tb = job.token_bytes();
    let cap = job.plan.ring_tokens;
    let slot = from % cap.max(1);
    let n = upto - from;
    let first = n.min(cap - slot);
    // SAFETY: tokens from..upto are published (the wait observed the count
    // with Acquire) and the reader writes only slots of tokens >= upto and
    // < from + ring_tokens until the next wait releases them.
    let (a, b) = unsafe {
        (
            job.ring.slice(slot as usize * tb, first as usize * tb),
            job.ring.slice(0, (n - first) as usize * tb),
        )
    };
    RowsView {
        first_token: from,
        rows_per_token: job.cols,
        row_bytes: job.row_bytes,
        f32: job.decode.is_some(),
        parts: [a, b],
    }
}
