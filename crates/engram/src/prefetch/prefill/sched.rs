//! A prefill's schedule: which table's batch goes to the pool next, the
//! pool task that reads it, and cancellation.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::super::guard::{panic_message, Leaving, PanicSite};
use super::super::pool::{Parked, PoolShared, Task};
use super::super::ready::InFlight;
use super::super::source::Priority;
use super::super::sync::{lock_std as lock, CacheLine};
use super::job::{ReadBatch, TableJob};
use super::Plan;
use crate::prefetch::PrefillOrder;
use crate::stats::Phase;
use crate::{Error, Result};

/// Which batches of a prefill are queued or running, and what comes next.
struct Sched {
    /// Per table: the first token not yet scheduled.
    next: Vec<u32>,
    /// Per table: the first token whose rows were not yet read ahead into
    /// the reuse store (tokens past the ring; see [`Kind::Ahead`]).
    ahead: Vec<u32>,
    /// Per table: the first token whose rows were not yet read into the
    /// page cache (tokens past the store's reach; see [`Kind::Warm`]).
    warm: Vec<u32>,
    /// Per table: its batches queued or running, earliest first. Ring
    /// batches complete in this order; a read-ahead or a warm-up runs
    /// alone.
    lanes: Vec<VecDeque<Queued>>,
    /// Per table: a batch failed (its waiters get the error; the other
    /// tables go on).
    failed: Vec<bool>,
    /// No more batches (cancelled, failed or the engine is gone).
    stopped: bool,
}

impl Sched {
    /// Batches queued or running, all tables.
    fn in_flight(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum()
    }

    /// Forgets the batch of `table` of `kind` starting at `start`.
    fn leave(&mut self, table: usize, kind: Kind, start: u32) {
        let lane = &mut self.lanes[table];
        if let Some(at) = lane.iter().position(|q| q.kind == kind && q.start == start) {
            lane.remove(at);
        }
    }
}

/// A batch queued or running.
struct Queued {
    kind: Kind,
    start: u32,
    end: u32,
    /// Read ahead of a lower table's layer, before the consumer reached
    /// this table (see [`PrefillCore::may_add`]).
    early: bool,
    /// A ring batch whose reads are done while an earlier one of its table
    /// is still in flight: that one completes it after itself.
    read: Option<Result<ReadBatch>>,
}

/// A prefill's reader state: the tables' jobs and the shared schedule.
pub(super) struct PrefillCore {
    pub(super) id: u64,
    pub(super) jobs: Vec<TableJob>,
    pub(super) plan: Plan,
    /// Tokens of the consumer's first wait (0 until it waits): the chunk a
    /// [`PrefillOrder::Chunk`] consumer takes through all layers at a time.
    span: AtomicU32,
    /// Locked by the readers at every batch: on a line of its own, away
    /// from the plan and the jobs every wait reads.
    sched: CacheLine<Mutex<Sched>>,
    /// Pool tasks holding this prefill; its own `Arc` so a task can drop its
    /// reference to the core before it leaves (then `cancel_and_join`
    /// returning means no task holds the core any more).
    flight: Arc<InFlight>,
    pub(super) pool: Arc<PoolShared>,
}

impl PrefillCore {
    /// Where the scheduler's lock sits in the core, for the layout test.
    #[cfg(test)]
    pub(super) fn sched_offset() -> usize {
        std::mem::offset_of!(PrefillCore, sched)
    }

    /// The schedule of a prefill of `jobs`, nothing queued yet.
    pub(super) fn new(
        id: u64,
        jobs: Vec<TableJob>,
        plan: Plan,
        pool: &Arc<PoolShared>,
    ) -> PrefillCore {
        let tables = jobs.len();
        PrefillCore {
            id,
            jobs,
            plan,
            span: AtomicU32::new(0),
            sched: CacheLine(Mutex::new(Sched {
                next: vec![0; tables],
                ahead: vec![0; tables],
                warm: vec![0; tables],
                lanes: (0..tables).map(|_| VecDeque::new()).collect(),
                failed: vec![false; tables],
                stopped: false,
            })),
            flight: Arc::new(InFlight::new()),
            pool: pool.clone(),
        }
    }

    /// End of the batch of `job` that starts at `start`: the first batch
    /// is `first_chunk` tokens, later ones end at multiples of
    /// `read_batch`, whether or not the consumer has reached the table.
    ///
    /// Why not larger batches before the consumer arrives (tried: a ring
    /// chunk each): a batch is published only when all of it is read, and
    /// with one batch in flight a consumer that then waits on a few tokens
    /// of another table (a chunk sweep reaches table 1 a few hundred ms
    /// in) waits for the whole large batch first: measured at 8,192 tokens,
    /// cold, chunk sweep, all of the stall was in the first chunk, 0.2-0.9 s
    /// against a floor of 0.04 s (docs/log/2026-12-bench.md, "Chunk sweep").
    fn batch_end(&self, start: u32) -> u32 {
        if start == 0 {
            self.plan.first_chunk
        } else {
            (start / self.plan.read_batch + 1).saturating_mul(self.plan.read_batch)
        }
    }

    /// Records the span of the consumer's first wait, `upto` tokens.
    pub(super) fn learn_span(&self, upto: u32) {
        // A plain load first: every later wait finds it set, and a read-only
        // check keeps the line shared with the readers that rank by it.
        if self.span.load(Ordering::Relaxed) == 0 {
            let _ = self
                .span
                .compare_exchange(0, upto, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Rank of the batch of `table` starting at `start` (lowest first):
    /// a table the consumer is blocked on; then, in [`PrefillOrder::Chunk`],
    /// every ring batch by the consumer's chunk it falls in, then table;
    /// otherwise an urgent table (its consumer has waited on it and the
    /// reader is less than `chunk` tokens ahead), earliest tokens first;
    /// then the lowest table.
    ///
    /// Why not earliest tokens first everywhere: when the consumer goes
    /// through every token at one layer before the next (a layer sweep),
    /// table 1 is needed only at its layer, long after table 0; splitting the
    /// device between them doubles table 0's stall. The lower table's layer
    /// comes first, so it goes first until a consumer shows, by waiting,
    /// that it needs another table soon.
    fn rank(&self, table: usize, start: u32, kind: Kind) -> (u32, u32, u32) {
        let job = &self.jobs[table];
        if kind != Kind::Ring {
            // Only when the table's ring is full: after its ring reads,
            // before the next table's.
            return (2, 2 * table as u32 + 1, start);
        }
        // Blocked: the consumer waits on tokens this batch reads (a wait
        // its last batch has just satisfied does not count, though the
        // waiter has not yet woken to say so).
        if job.consumer.waited_on.load(Ordering::Relaxed)
            && start < job.consumer.consumed.load(Ordering::Relaxed)
        {
            return (0, start, table as u32);
        }
        if self.plan.order == PrefillOrder::Chunk {
            // Before the first wait says the consumer's chunk, a read batch.
            let span = match self.span.load(Ordering::Relaxed) {
                0 => self.plan.read_batch,
                span => span,
            };
            return (1, start / span, table as u32);
        }
        let lead = start.saturating_sub(job.consumer.consumed.load(Ordering::Relaxed));
        if job.consumer.started.load(Ordering::Relaxed) && lead < self.plan.chunk {
            return (1, start, table as u32);
        }
        (2, 2 * table as u32, start)
    }

    /// The next batch of `job`: ring tokens if its ring has room, else
    /// tokens past the ring to read ahead into its reuse store while that
    /// has room for a whole batch of rows, else tokens past those to read
    /// into the page cache.
    fn next_batch(&self, s: &Sched, job: &TableJob) -> Option<(Kind, u32, u32)> {
        let table = job.table;
        let start = s.next[table];
        let limit = job
            .consumer
            .released
            .load(Ordering::Acquire)
            .saturating_add(self.plan.ring_tokens);
        let end = self.batch_end(start).min(limit).min(self.plan.tokens);
        if end > start {
            return Some((Kind::Ring, start, end));
        }
        let batch_from = |from: u32| {
            let to = from
                .saturating_add(self.plan.read_batch)
                .min(self.plan.tokens);
            (to > from).then_some((from, to))
        };
        if let (Some(free), Some((from, to))) = (
            job.reuse_free_slots(),
            batch_from(s.ahead[table].max(start)),
        ) {
            if free >= (to - from) as usize * job.cols {
                return Some((Kind::Ahead, from, to));
            }
        }
        // Warm-up reads only once every lower table has all its batches
        // scheduled: they would split the device with a table whose layer
        // comes first (measured: 65K layer sweep, table 0's stall 0.54 s
        // against 0.28 s for `ds4-linux`, docs/bench.md).
        if !self.plan.warm || s.next[..table].iter().any(|&n| n < self.plan.tokens) {
            return None;
        }
        let (from, to) = batch_from(s.warm[table].max(s.ahead[table]).max(start))?;
        Some((Kind::Warm, from, to))
    }

    /// Queues the most urgent batches the limits allow: a table not busy,
    /// with ring room, by [`PrefillCore::rank`]; if that leaves nothing in
    /// flight while ring tokens are left, the pool polls the prefill until
    /// its consumer frees room ([`Parked`]).
    ///
    /// A batch that ranks after another one in flight is read at
    /// [`Priority::PrefillLater`]: the source serves it only with the depth
    /// the earlier-needed batch leaves free. So a second batch keeps the
    /// device's queue full through the first one's tail and the gap before
    /// the next without splitting the device between them: the reads go in
    /// deadline order, and a table with ring or store room is read while
    /// the consumer is blocked on another (measured before: a layer sweep
    /// read table 1 only once table 0 had nothing left to schedule).
    pub(super) fn try_schedule(self: &Arc<Self>) {
        if self.schedule() {
            let weak: std::sync::Weak<PrefillCore> = Arc::downgrade(self);
            self.pool.park(self.id, weak);
        }
    }

    /// After a wait whose rows were ready: the room it freed is left to the
    /// batch in flight (which schedules again as it finishes) or to the
    /// pool's poll of the parked prefill, unless the readers are idle and
    /// less than a ring chunk ahead of the consumer, when this schedules
    /// (and wakes a reader) now. A wake that a ready wait skips this way
    /// only delays reads that are not needed yet: a consumer that blocks
    /// schedules first ([`super::blocking_wait`]).
    ///
    /// `ready` is the table's count the wait saw: a consumer well behind
    /// its readers touches nothing but the plan its wait already read.
    pub(super) fn room_freed(self: &Arc<Self>, ready: u32, upto: u32) {
        if ready >= self.plan.tokens || ready.saturating_sub(upto) >= self.plan.chunk {
            return;
        }
        if !self.flight.busy() {
            self.try_schedule();
        }
    }

    /// [`PrefillCore::try_schedule`] without parking; true if the prefill
    /// is parked (nothing in flight, ring tokens left unscheduled).
    fn schedule(self: &Arc<Self>) -> bool {
        // Tasks are submitted after the lock is released: a pool that is
        // shutting down abandons a task at once, and abandoning takes it.
        let mut ready = Vec::new();
        let parked;
        {
            let mut s = lock(&self.sched);
            while !s.stopped && s.in_flight() < self.plan.in_flight {
                // An idle table first; a busy one adds ring batches only.
                let candidate = self
                    .jobs
                    .iter()
                    .filter(|job| !s.failed[job.table] && self.may_add(&s, job.table))
                    .filter_map(|job| Some((job.table, self.next_batch(&s, job)?)))
                    .filter(|&(table, (kind, ..))| s.lanes[table].is_empty() || kind == Kind::Ring)
                    .min_by_key(|&(table, (kind, start, _))| {
                        (!s.lanes[table].is_empty(), self.rank(table, start, kind))
                    });
                let Some((table, (kind, start, end))) = candidate else {
                    break; // done, or parked until the consumer frees ring room
                };
                match kind {
                    Kind::Ring => s.next[table] = end,
                    Kind::Ahead => s.ahead[table] = end,
                    Kind::Warm => s.warm[table] = end,
                }
                let rank = self.rank(table, start, kind);
                // A table's next batch while its last is in flight is
                // behind it, whatever their ranks.
                let behind = !s.lanes[table].is_empty()
                    || s.lanes.iter().enumerate().any(|(other, lane)| {
                        lane.front()
                            .is_some_and(|q| self.rank(other, q.start, q.kind) < rank)
                    });
                // Not urgent (rank 2) and past the first table with rows
                // left to deliver: a table whose layer comes later, read
                // before the consumer reaches it. Read behind, even with
                // nothing else in flight: the earlier table's next batch
                // then takes the device back at once, instead of waiting
                // for this one to finish.
                let early = rank.0 == 2
                    && (0..table)
                        .any(|t| self.jobs[t].ready.count() < self.plan.tokens && !s.failed[t]);
                let priority = if behind || early {
                    Priority::PrefillLater
                } else {
                    Priority::Prefill
                };
                s.lanes[table].push_back(Queued {
                    kind,
                    start,
                    end,
                    early,
                    read: None,
                });
                self.flight.enter();
                ready.push(ChunkTask {
                    core: self.clone(),
                    table,
                    kind,
                    start,
                    end,
                    priority,
                });
            }
            parked = !s.stopped
                && s.in_flight() == 0
                && (0..self.jobs.len()).any(|t| !s.failed[t] && s.next[t] < self.plan.tokens);
        }
        for task in ready {
            self.pool.submit_demand(Box::new(task));
        }
        parked
    }

    /// Whether `table` may take another batch: it has none in flight, or
    /// only ring batches, the first of them not read early (ahead of a
    /// lower table's layer), and every other table has all of its ring
    /// batches scheduled. The batch added is read behind those in flight
    /// ([`Priority::PrefillLater`]): with the depth they leave, and after
    /// them, as the sources serve one priority's batches in the order they
    /// came.
    ///
    /// Why a second batch of one table: a batch's bookkeeping before and
    /// after its reads (the store's lookups, hashing, keeping rows for
    /// reuse) leaves the device idle unless another batch reads meanwhile.
    /// With one table (Qwen4-Exp) nothing else did: 0.022-0.026 s of an
    /// 8K prefill on the H200 host went outside any batch's reads
    /// (docs/log/2026-12-04-floor.md). Why only once the other tables are
    /// scheduled: until then their batches fill those gaps, and a second
    /// batch would hold back a table whose layer comes later. Why not
    /// behind an early batch: that one is read only with the depth a lower
    /// table leaves, and a batch queued behind it would take that depth
    /// too, for tokens needed later still.
    fn may_add(&self, s: &Sched, table: usize) -> bool {
        let lane = &s.lanes[table];
        lane.is_empty()
            || (lane.iter().all(|q| q.kind == Kind::Ring)
                && lane.front().is_some_and(|q| !q.early)
                && (0..self.jobs.len())
                    .all(|t| t == table || s.failed[t] || s.next[t] >= self.plan.tokens))
    }

    /// The tokens of the ring batches of `table` in flight before the one
    /// starting at `start`.
    fn earlier_batches(&self, table: usize, start: u32) -> Vec<(u32, u32)> {
        let s = lock(&self.sched);
        s.lanes[table]
            .iter()
            .take_while(|q| q.start != start)
            .map(|q| (q.start, q.end))
            .collect()
    }

    /// A ring batch of `table` starting at `start` has done its reads
    /// (`read`): completes and publishes it, and then each later batch of
    /// the table whose reads were done meanwhile, in token order. If an
    /// earlier batch of the table is still in flight, leaves it to that
    /// one.
    fn ring_batch_read(self: &Arc<Self>, table: usize, start: u32, read: Result<ReadBatch>) {
        let job = &self.jobs[table];
        {
            let mut s = lock(&self.sched);
            let lane = &mut s.lanes[table];
            if lane.front().is_some_and(|q| q.start != start) {
                if let Some(q) = lane.iter_mut().find(|q| q.start == start) {
                    q.read = Some(read);
                }
                return;
            }
        }
        let mut next = Some(read);
        while let Some(read) = next.take() {
            let outcome = read.and_then(|batch| {
                let end = batch.end();
                job.complete_batch(batch).map(|()| end)
            });
            let publish = {
                let mut s = lock(&self.sched);
                s.lanes[table].pop_front();
                next = s.lanes[table].front_mut().and_then(|q| q.read.take());
                match outcome {
                    // After a failure nothing is published: the failed
                    // batch's rows were never written.
                    Ok(_) if s.failed[table] => None,
                    Ok(end) => Some(Ok(end)),
                    Err(e) => {
                        s.failed[table] = true;
                        Some(Err(e))
                    }
                }
            };
            match publish {
                Some(Ok(end)) => job.ready.publish(end),
                Some(Err(e)) => job.ready.fail(e),
                None => {}
            }
        }
        self.try_schedule();
    }

    /// A read-ahead or warm-up batch of `table` is done.
    fn side_batch_done(self: &Arc<Self>, table: usize, kind: Kind, start: u32, result: Result<()>) {
        let mut s = lock(&self.sched);
        if result.is_err() {
            // Nobody waits on these: stop them; the ring batch that needs a
            // row reads it again and reports the error.
            match kind {
                Kind::Ahead => s.ahead[table] = self.plan.tokens,
                _ => s.warm[table] = self.plan.tokens,
            }
        }
        s.leave(table, kind, start);
        drop(s);
        self.try_schedule();
    }

    /// A batch task of `table` panicked: the schedule may be torn, so no
    /// batch is scheduled any more and every table's waits for rows not yet
    /// published end with an internal error naming the table.
    fn break_down(&self, table: usize, message: &str) {
        lock(&self.sched).stopped = true;
        for job in &self.jobs {
            job.ready.fail(Error::Internal(format!(
                "the prefill reader of table {table} panicked: {message}"
            )));
        }
    }

    /// Stops the prefill: no more batches, waiters get `Cancelled`, queued
    /// batches dropped; returns once no pool thread touches the rings.
    pub(super) fn cancel_and_join(&self) {
        lock(&self.sched).stopped = true;
        for job in &self.jobs {
            job.ready.cancel();
        }
        self.pool.unpark(self.id);
        self.pool.cancel_owner(self.id);
        self.flight.wait_idle();
    }
}

impl Parked for PrefillCore {
    fn repoll(self: Arc<Self>) -> bool {
        self.schedule()
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
    /// Rows of tokens past the store's reach, brought into the page cache
    /// when ring and store are full: the ring's later reads of them come
    /// from there (`Plan::warm`).
    Warm,
}

struct ChunkTask {
    core: Arc<PrefillCore>,
    table: usize,
    kind: Kind,
    start: u32,
    end: u32,
    /// [`Priority::Prefill`], or [`Priority::PrefillLater`] when it was
    /// scheduled behind a more urgent batch in flight.
    priority: Priority,
}

impl Task for ChunkTask {
    fn run(self: Box<Self>) {
        let ChunkTask {
            core,
            table,
            kind,
            start,
            end,
            priority,
        } = *self;
        // Leaves the prefill's count on every exit, a panic included.
        let flight = core.flight.clone();
        let core = Leaving::new(core, vec![flight]);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            core.pool.faults.hit(PanicSite::Prefill, table);
            let job = &core.jobs[table];
            let cancelled = job.ready.is_cancelled();
            match kind {
                Kind::Ring => {
                    let read = if cancelled {
                        Err(Error::Cancelled)
                    } else {
                        job.begin_batch(start, end, Phase::Prefill, priority, || {
                            core.earlier_batches(table, start)
                        })
                    };
                    core.ring_batch_read(table, start, read);
                }
                _ => {
                    let result = if cancelled {
                        Err(Error::Cancelled)
                    } else if kind == Kind::Ahead {
                        job.read_ahead(start, end, priority)
                    } else {
                        job.warm(start, end)
                    };
                    core.side_batch_done(table, kind, start, result);
                }
            }
        }));
        if let Err(panic) = outcome {
            core.break_down(table, &panic_message(&*panic));
        }
    }

    fn abandon(self: Box<Self>) {
        let core = self.core;
        {
            let mut s = lock(&core.sched);
            s.stopped = true;
            s.leave(self.table, self.kind, self.start);
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
