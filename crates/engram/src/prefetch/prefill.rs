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
//!
//! Reads go out in batches of `read_batch_tokens` tokens (the first one of
//! `first_chunk_tokens`), aligned to multiples of the batch so batch ends
//! meet the consumer's usual wait points, and each batch is published as it
//! completes. Until the consumer first waits on a table, its batches run to
//! the end of a ring chunk instead: nobody waits on them yet, and a larger
//! batch keeps the device queue fuller. The source dedups within one batch; across the prompt, each
//! table has a reuse store ([`super::reuse`], `reuse_bytes`): all row ids
//! are known at the start, so each occurrence's next use is too, and rows
//! that later tokens need again are kept (Belady eviction) and copied from
//! the store instead of read again. While a table's ring is full, its
//! reader also reads the rows of tokens past the ring into the store (keyed
//! by their first use) as long as the store has room for a whole batch: the
//! store's fixed budget extends how far the reader runs ahead of the
//! consumer, instead of leaving the device idle.
//!
//! A prefill keeps at most `prefill_batches_in_flight` batches in flight
//! (one per table at most, so each table publishes in order) and picks the
//! next by [`PrefillCore::rank`]: a table a consumer is blocked on; then a
//! table whose consumer has waited before and whose reader is less than one
//! ring chunk ahead of it (earliest tokens first); then the lowest table
//! with ring room. So when every token goes through a layer before the next
//! one (a layer sweep), table 0 gets the whole device until its ring is full
//! and table 1 reads only with what is left until its layer is reached;
//! when ubatches go through all layers (a chunk sweep), table 1 becomes
//! urgent after its first wait and stays a little ahead from then on.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pool::{PoolShared, Task};
use super::read::ReadCtx;
use super::ready::{InFlight, Ready};
use super::reuse::{next_uses, NextUses, ReuseStore};
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
    /// Tokens in the first read batch.
    pub first_chunk: u32,
    /// Tokens per later read batch (batches end at multiples of it).
    pub read_batch: u32,
    /// Batches of one prefill in flight at once (at most one per table).
    pub in_flight: usize,
    pub mode: Mode,
    pub batch: bool,
    /// Pipeline off: a wait blocks until the whole table is read.
    pub whole_table: bool,
    /// Bytes per table of the whole-prompt reuse store (0: off).
    pub reuse_bytes: u64,
    /// Tokens per ring chunk: a table whose consumer has waited and whose
    /// reader is fewer than this many tokens ahead of it is urgent; and the
    /// batch size before the consumer first reaches a table.
    pub chunk: u32,
}

/// Which batches of a prefill are queued or running, and what comes next.
struct Sched {
    /// Per table: the first token not yet scheduled.
    next: Vec<u32>,
    /// Per table: the first token whose rows were not yet read ahead into
    /// the reuse store (tokens past the ring; see [`Kind::Ahead`]).
    ahead: Vec<u32>,
    /// Per table: a batch is queued or running.
    busy: Vec<bool>,
    /// Per table: a batch failed (its waiters get the error; the other
    /// tables go on).
    failed: Vec<bool>,
    /// Batches queued or running, all tables.
    in_flight: usize,
    /// No more batches (cancelled, failed or the engine is gone).
    stopped: bool,
}

/// A prefill's reader state: the tables' jobs and the shared schedule.
pub(crate) struct PrefillCore {
    id: u64,
    jobs: Vec<TableJob>,
    plan: Plan,
    sched: Mutex<Sched>,
    /// Pool tasks holding this prefill; its own `Arc` so a task can drop its
    /// reference to the core before it leaves (then `cancel_and_join`
    /// returning means no task holds the core any more).
    flight: Arc<InFlight>,
    pool: Arc<PoolShared>,
}

/// One table's reader state for one prefill.
pub(crate) struct TableJob {
    table: usize,
    tables: usize,
    cols: usize,
    row_bytes: usize,
    plan: Plan,
    /// Some: rows are decoded to f32 (`row_bytes` is then `ROW_DIM * 4`).
    decode: Option<Encoding>,
    ids: Arc<Vec<u32>>,
    ring: RingBuf,
    ready: Ready,
    /// Tokens before this the consumer no longer holds (the reader may
    /// overwrite their ring slots).
    released: AtomicU32,
    /// Set while a consumer is blocked on this table: its batches go first.
    waited_on: AtomicBool,
    /// The consumer has reached this table's layer at least once (it has
    /// called wait): from then on a small lead makes the table urgent.
    consumer_started: AtomicBool,
    /// `upto` of the consumer's latest wait.
    consumed: AtomicU32,
    /// Whole-prompt dedup: rows read that later tokens need again.
    reuse: Option<Mutex<Reuse>>,
    source: Arc<dyn RowSource>,
    stats: Arc<StatsRecorder>,
}

/// A table's reuse store and the next use of each of its row occurrences.
struct Reuse {
    store: ReuseStore,
    /// Per occurrence (token-major), the token that next uses its row.
    next: NextUses,
    /// Buffer for the rows a batch reads, kept between batches: allocating
    /// megabytes per batch on pool threads grows the allocator's retained
    /// memory with the prompt.
    scratch: Vec<u8>,
}

/// `buf` resized to `len` zero bytes, its allocation kept.
fn sized(mut buf: Vec<u8>, len: usize) -> Vec<u8> {
    buf.clear();
    buf.resize(len, 0);
    buf
}

impl TableJob {
    fn token_bytes(&self) -> usize {
        self.cols * self.row_bytes
    }

    /// Row ids of `table` for tokens `start..end`, token-major.
    fn row_ids(&self, start: u32, end: u32) -> Vec<u32> {
        let stride = self.tables * self.cols;
        let mut rows = Vec::with_capacity((end - start) as usize * self.cols);
        for t in start as usize..end as usize {
            let base = t * stride + self.table * self.cols;
            rows.extend_from_slice(&self.ids[base..base + self.cols]);
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
            // SAFETY (all arms): per the caller's guarantee the slots of
            // t..seg_end are neither viewed by the consumer nor written by
            // anyone else.
            match (&self.reuse, self.decode) {
                (Some(reuse), _) => {
                    let out = unsafe { self.ring.slice_mut(at, len) };
                    self.read_reusing(&ctx, &mut lock(reuse), t, seg_end, &rows, out)?;
                }
                (None, Some(enc)) => {
                    let out = unsafe { self.ring.slice_mut_f32(at, len / 4) };
                    ctx.read_f32(self.table, &rows, enc, out)?;
                }
                (None, None) => {
                    ctx.read(self.table, &rows, unsafe { self.ring.slice_mut(at, len) })?
                }
            }
            t = seg_end;
        }
        Ok(())
    }

    /// Reads the rows of tokens `start..end` that the reuse store lacks into
    /// it, each keyed by its first use in the range (as many as it has free
    /// slots for, earliest first).
    ///
    /// Caller guarantees no other reader of this job runs (the table is
    /// busy with this batch), so the store does not change between the two
    /// locks.
    fn read_ahead(&self, start: u32, end: u32) -> Result<()> {
        let Some(reuse) = &self.reuse else {
            return Ok(());
        };
        let first_uses = self.first_uses(start, end);
        let (rows, tokens, scratch): (Vec<u32>, Vec<u32>, _) = {
            let mut reuse = lock(reuse);
            let scratch = std::mem::take(&mut reuse.scratch);
            let (rows, tokens) = first_uses
                .into_iter()
                .filter(|&(_, row)| !reuse.store.contains(row))
                .take(reuse.store.free_slots())
                .map(|(token, row)| (row, token))
                .unzip();
            (rows, tokens, scratch)
        };
        let ctx = ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase: Phase::Prefill,
            priority: Priority::Demand,
            batch: self.plan.batch,
        };
        let mut read = sized(scratch, rows.len() * self.row_bytes);
        self.read_delivered(&ctx, &rows, &mut read)?;
        self.stats
            .record_ahead(Phase::Prefill, self.table, rows.len() as u64);
        let mut reuse = lock(reuse);
        for ((&row, &token), bytes) in rows
            .iter()
            .zip(&tokens)
            .zip(read.chunks_exact(self.row_bytes))
        {
            reuse.store.update(row, token, bytes);
        }
        reuse.scratch = read;
        Ok(())
    }

    /// (token, row) of the first occurrence of each distinct row of tokens
    /// `start..end`, by token.
    fn first_uses(&self, start: u32, end: u32) -> Vec<(u32, u32)> {
        let cols = self.cols as u32;
        let mut uses: Vec<(u32, u32)> = self
            .row_ids(start, end)
            .into_iter()
            .enumerate()
            .map(|(i, row)| (start + i as u32 / cols, row))
            .collect();
        uses.sort_unstable_by_key(|&(token, row)| (row, token));
        uses.dedup_by_key(|&mut (_, row)| row);
        uses.sort_unstable();
        uses
    }

    /// Reads `rows` into `out` in the delivered format: raw bytes, or f32
    /// values as native-endian bytes (the ring's f32 views read them back).
    fn read_delivered(&self, ctx: &ReadCtx<'_>, rows: &[u32], out: &mut [u8]) -> Result<()> {
        match self.decode {
            Some(enc) => {
                let mut values = vec![0f32; rows.len() * ROW_DIM];
                ctx.read_f32(self.table, rows, enc, &mut values)?;
                for (dst, v) in out.chunks_exact_mut(4).zip(&values) {
                    dst.copy_from_slice(&v.to_ne_bytes());
                }
                Ok(())
            }
            None => ctx.read(self.table, rows, out),
        }
    }

    /// Fills `out` with the rows of tokens `first..end` (`rows`): those in
    /// the reuse store are copied from it, the rest read in one call; then
    /// each row's last occurrence in the range goes to the store with its
    /// next use.
    fn read_reusing(
        &self,
        ctx: &ReadCtx<'_>,
        reuse: &mut Reuse,
        first: u32,
        end: u32,
        rows: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        let rb = self.row_bytes;
        let mut missing = Vec::new();
        let mut missing_at = Vec::new();
        for (i, &row) in rows.iter().enumerate() {
            match reuse.store.get(row) {
                Some(bytes) => out[i * rb..(i + 1) * rb].copy_from_slice(bytes),
                None => {
                    missing.push(row);
                    missing_at.push(i);
                }
            }
        }
        let hits = rows.len() - missing.len();
        if hits == 0 {
            self.read_delivered(ctx, rows, out)?;
        } else if !missing.is_empty() {
            let mut read = sized(std::mem::take(&mut reuse.scratch), missing.len() * rb);
            self.read_delivered(ctx, &missing, &mut read)?;
            for (src, &i) in read.chunks_exact(rb).zip(&missing_at) {
                out[i * rb..(i + 1) * rb].copy_from_slice(src);
            }
            reuse.scratch = read;
        }
        let base = first as usize * self.cols;
        for (i, &row) in rows.iter().enumerate() {
            // An earlier occurrence whose next use is inside the range is
            // superseded by that later one.
            let next = reuse.next.get(base + i);
            if next >= end {
                reuse.store.update(row, next, &out[i * rb..(i + 1) * rb]);
            }
        }
        self.stats.record_reuse(ctx.phase, self.table, hits as u64);
        Ok(())
    }
}

impl PrefillCore {
    /// End of the batch of `job` that starts at `start`. Until the
    /// consumer first reaches the table, batches run to the end of a ring
    /// chunk: nobody waits on them yet, and larger batches keep the device
    /// queue fuller.
    fn batch_end(&self, job: &TableJob, start: u32) -> u32 {
        let step = if job.consumer_started.load(Ordering::Relaxed) {
            self.plan.read_batch
        } else {
            self.plan.read_batch.max(self.plan.chunk)
        };
        if start == 0 {
            self.plan.first_chunk
        } else {
            (start / step + 1).saturating_mul(step)
        }
    }

    /// Rank of the batch of `table` starting at `start` (lowest first):
    /// a table the consumer is blocked on; then an urgent table (its
    /// consumer has waited on it and the reader is less than `chunk`
    /// tokens ahead), earliest tokens first; then the lowest table.
    ///
    /// Why not earliest tokens first everywhere: when the consumer goes
    /// through every token at one layer before the next (a layer sweep),
    /// table 1 is needed only at its layer, long after table 0; splitting the
    /// device between them doubles table 0's stall. The lower table's layer
    /// comes first, so it goes first until a consumer shows, by waiting,
    /// that it needs another table soon.
    fn rank(&self, table: usize, start: u32, kind: Kind) -> (u32, u32, u32) {
        let job = &self.jobs[table];
        if kind == Kind::Ahead {
            // Only when the table's ring is full: after its ring reads,
            // before the next table's.
            return (2, 2 * table as u32 + 1, start);
        }
        if job.waited_on.load(Ordering::Relaxed) {
            return (0, start, table as u32);
        }
        let lead = start.saturating_sub(job.consumed.load(Ordering::Relaxed));
        if job.consumer_started.load(Ordering::Relaxed) && lead < self.plan.chunk {
            return (1, start, table as u32);
        }
        (2, 2 * table as u32, start)
    }

    /// The next batch of `job`: ring tokens if its ring has room, else
    /// tokens past the ring to read ahead into its reuse store while that
    /// has room for a whole batch of rows.
    fn next_batch(&self, s: &Sched, job: &TableJob) -> Option<(Kind, u32, u32)> {
        let table = job.table;
        let start = s.next[table];
        let limit = job
            .released
            .load(Ordering::Acquire)
            .saturating_add(self.plan.ring_tokens);
        let end = self.batch_end(job, start).min(limit).min(self.plan.tokens);
        if end > start {
            return Some((Kind::Ring, start, end));
        }
        let reuse = job.reuse.as_ref()?;
        let from = s.ahead[table].max(start);
        let to = from
            .saturating_add(self.plan.read_batch)
            .min(self.plan.tokens);
        let rows = (to.saturating_sub(from)) as usize * job.cols;
        (to > from && lock(reuse).store.free_slots() >= rows).then_some((Kind::Ahead, from, to))
    }

    /// Queues the most urgent batches the limits allow: a table not busy,
    /// with ring room, by [`PrefillCore::rank`].
    fn try_schedule(self: &Arc<Self>) {
        // Tasks are submitted after the lock is released: a pool that is
        // shutting down abandons a task at once, and abandoning takes it.
        let mut ready = Vec::new();
        {
            let mut s = lock(&self.sched);
            while !s.stopped && s.in_flight < self.plan.in_flight {
                let candidate = self
                    .jobs
                    .iter()
                    .filter(|job| !s.busy[job.table] && !s.failed[job.table])
                    .filter_map(|job| Some((job.table, self.next_batch(&s, job)?)))
                    .min_by_key(|&(table, (kind, start, _))| self.rank(table, start, kind));
                let Some((table, (kind, start, end))) = candidate else {
                    break; // done, or parked until the consumer frees ring room
                };
                match kind {
                    Kind::Ring => s.next[table] = end,
                    Kind::Ahead => s.ahead[table] = end,
                }
                s.busy[table] = true;
                s.in_flight += 1;
                self.flight.enter();
                ready.push(ChunkTask {
                    core: self.clone(),
                    table,
                    kind,
                    start,
                    end,
                });
            }
        }
        for task in ready {
            self.pool.submit_demand(Box::new(task));
        }
    }

    fn finish_batch(self: &Arc<Self>, table: usize, kind: Kind, result: Result<u32>) {
        let job = &self.jobs[table];
        match (kind, result) {
            (Kind::Ring, Ok(end)) => job.ready.publish(end),
            (Kind::Ring, Err(e)) => {
                lock(&self.sched).failed[table] = true;
                job.ready.fail(e);
            }
            (Kind::Ahead, Ok(_)) => {}
            // Nobody waits on a read-ahead: stop reading ahead; the ring
            // batch that needs the row reads it again and reports the error.
            (Kind::Ahead, Err(_)) => lock(&self.sched).ahead[table] = self.plan.tokens,
        }
        {
            let mut s = lock(&self.sched);
            s.busy[table] = false;
            s.in_flight -= 1;
        }
        self.try_schedule();
    }

    /// Stops the prefill: no more batches, waiters get `Cancelled`, queued
    /// batches dropped; returns once no pool thread touches the rings.
    fn cancel_and_join(&self) {
        lock(&self.sched).stopped = true;
        for job in &self.jobs {
            job.ready.cancel();
        }
        self.pool.cancel_owner(self.id);
        self.flight.wait_idle();
    }
}

/// What a batch reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Tokens into their ring slots, published when done.
    Ring,
    /// Rows of tokens past the ring into the reuse store, when the ring is
    /// full and the device would otherwise idle: the store's budget extends
    /// how far the readers run ahead of the consumer.
    Ahead,
}

struct ChunkTask {
    core: Arc<PrefillCore>,
    table: usize,
    kind: Kind,
    start: u32,
    end: u32,
}

impl Task for ChunkTask {
    fn run(self: Box<Self>) {
        let ChunkTask {
            core,
            table,
            kind,
            start,
            end,
        } = *self;
        let job = &core.jobs[table];
        let result = if job.ready.is_cancelled() {
            Err(Error::Cancelled)
        } else if kind == Kind::Ahead {
            job.read_ahead(start, end).map(|()| end)
        } else {
            job.read_range(start, end, Phase::Prefill).map(|()| end)
        };
        core.finish_batch(table, kind, result);
        let flight = core.flight.clone();
        drop(core);
        flight.leave();
    }

    fn abandon(self: Box<Self>) {
        let core = self.core;
        {
            let mut s = lock(&core.sched);
            s.stopped = true;
            s.busy[self.table] = false;
            s.in_flight -= 1;
        }
        for job in &core.jobs {
            job.ready.cancel();
        }
        let flight = core.flight.clone();
        drop(core);
        flight.leave();
    }

    fn owner(&self) -> u64 {
        self.core.id
    }

    fn urgency(&self) -> (u32, u32, u32) {
        self.core.rank(self.table, self.start, self.kind)
    }
}

/// Per-table consumer state of a prefill.
struct Consumer {
    /// End of the last view returned (start of the next).
    upto: u32,
    /// (from, upto, stall per token in ns) of each wait, for the per-token
    /// total over tables.
    stalls: Vec<(u32, u32, u64)>,
}

/// A running prefill of one sequence. Dropping it cancels its readers and
/// joins them before the ring buffers are freed.
pub struct Prefill<'s> {
    core: Arc<PrefillCore>,
    consumers: Vec<Consumer>,
    stats: Arc<StatsRecorder>,
    _sequence: std::marker::PhantomData<&'s mut ()>,
}

/// Everything a prefill needs from its engine and sequence.
pub(crate) struct PrefillSetup<'a> {
    pub id: u64,
    /// Per table: Some(encoding) to decode rows to f32.
    pub decode: &'a [Option<Encoding>],
    pub ids: Arc<Vec<u32>>,
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
        let jobs = (0..tables)
            .map(|table| {
                let decode = setup.decode[table];
                let row_bytes = match decode {
                    Some(_) => ROW_DIM * 4,
                    None => setup.source.row_bytes(table),
                };
                TableJob {
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
                    consumer_started: AtomicBool::new(false),
                    consumed: AtomicU32::new(0),
                    reuse: reuse_for(&setup, table, row_bytes),
                    source: setup.source.clone(),
                    stats: setup.stats.clone(),
                }
            })
            .collect();
        let core = Arc::new(PrefillCore {
            id: setup.id,
            jobs,
            plan: setup.plan,
            sched: Mutex::new(Sched {
                next: vec![0; tables],
                ahead: vec![0; tables],
                busy: vec![false; tables],
                failed: vec![false; tables],
                in_flight: 0,
                stopped: false,
            }),
            flight: Arc::new(InFlight::new()),
            pool: setup.pool.clone(),
        });
        if setup.plan.mode == Mode::Overlap {
            core.try_schedule();
        }
        Prefill {
            core,
            consumers: (0..tables)
                .map(|_| Consumer {
                    upto: 0,
                    stalls: Vec::new(),
                })
                .collect(),
            stats: setup.stats.clone(),
            _sequence: std::marker::PhantomData,
        }
    }

    /// Tokens in the prefill.
    pub fn tokens(&self) -> u32 {
        self.core.plan.tokens
    }

    /// Most tokens one wait may cover (the ring capacity).
    pub fn max_wait_tokens(&self) -> u32 {
        self.core.plan.ring_tokens
    }

    /// Tokens of `table` whose rows are already read (no blocking).
    pub fn ready_tokens(&self, table: usize) -> Option<u32> {
        self.core.jobs.get(table).map(|job| job.ready.count())
    }

    /// Blocks until the rows of tokens `[0, upto)` of `table` are read and
    /// returns those of `[previous upto, upto)`; see the module docs for the
    /// contract. Ends with the rows, the reader's error (naming table, row
    /// and offset) or [`Error::Cancelled`].
    pub fn wait(&mut self, table: usize, upto: u32) -> Result<RowsView<'_>> {
        let from = self.check_wait(table, upto)?;
        let core = self.core.clone();
        let job = &core.jobs[table];
        if core.pool.is_shutdown() && job.ready.count() < upto {
            return Err(Error::Cancelled); // the engine is gone
        }
        // Release the previous view's slots, then let the reader use them.
        job.released.store(from, Ordering::Release);
        job.consumed.store(upto, Ordering::Relaxed);
        job.consumer_started.store(true, Ordering::Relaxed);
        let started = Instant::now();
        let result = match core.plan.mode {
            Mode::Overlap => {
                let target = if core.plan.whole_table {
                    core.plan.tokens // pipeline off: the whole table
                } else {
                    upto
                };
                blocking_wait(&core, job, target)
            }
            Mode::AtWait => read_at_wait(job, upto),
        };
        let stall = started.elapsed();
        result?;
        self.consumers[table].upto = upto;
        self.record(table, from, upto, stall);
        Ok(view(&self.core.jobs[table], from, upto))
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
        let plan = self.core.plan;
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
        self.core.cancel_and_join();
        self.record_token_totals();
    }
}

/// The reuse store of `table`, with the next use of each of its row
/// occurrences; `None` when reuse is off or cannot help (one batch).
fn reuse_for(setup: &PrefillSetup<'_>, table: usize, row_bytes: usize) -> Option<Mutex<Reuse>> {
    let plan = setup.plan;
    if plan.whole_table || plan.tokens <= plan.first_chunk {
        return None;
    }
    let store = ReuseStore::new(plan.reuse_bytes, row_bytes)?;
    let (tables, cols) = (setup.cols.len(), setup.cols[0]);
    let ids = &setup.ids;
    let next = next_uses(plan.tokens as usize * cols, cols, |i| {
        let (token, col) = (i / cols, i % cols);
        ids[token * tables * cols + table * cols + col]
    });
    Some(Mutex::new(Reuse {
        store,
        next,
        scratch: Vec::new(),
    }))
}

fn blocking_wait(core: &Arc<PrefillCore>, job: &TableJob, target: u32) -> Result<()> {
    // The released slots may let a parked table go on.
    core.try_schedule();
    if let Some(done) = job.ready.try_wait(target) {
        return done.map(drop);
    }
    job.waited_on.store(true, Ordering::Relaxed);
    // Re-pick with this table marked urgent.
    core.try_schedule();
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
