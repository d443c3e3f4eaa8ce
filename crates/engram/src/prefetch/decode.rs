//! Decode steps: both tables' reads issued when the token is known, each
//! waited for at its own layer.
//!
//! A step's reads go to one reader task in table order (the first table's
//! layer comes first), and hints issued meanwhile wait until that task has
//! read the first table, so nothing shares the device with the rows the
//! next layer waits for.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::guard::{panic_message, Leaving, PanicSite};
use super::pool::{PoolShared, Task};
use super::read::ReadCtx;
use super::ready::{InFlight, Ready};
use super::ring::RingBuf;
use super::source::{Priority, RowSource};
use super::sync::lock_std as lock;
use crate::codec::{Encoding, ROW_DIM};
use crate::stats::{Phase, StatsRecorder};
use crate::{Error, Result};

/// One table's step buffer: the rows of the current step.
struct StepTable {
    /// The current step's rows: count 1 once read. Restarted by every
    /// step (an epoch per step), so a step's error fails that step alone.
    ready: Ready,
    rows: Mutex<Vec<u32>>,
    buf: RingBuf,
    flight: Arc<InFlight>,
}

/// Hints that wait for the current step's first table.
///
/// Why: a step's first table is needed one layer after `step_begin`; its
/// reads finish soonest when nothing else is on the device. The later
/// tables (needed many layers later) and the hints (needed next step) go
/// out once it is read, so they never queue in front of it.
#[derive(Default)]
struct HeldHints {
    /// The current step's first table is still being read.
    holding: bool,
    /// The sequence is being dropped: hints are abandoned, never queued.
    /// Set under the lock before the pool's queues are purged, and hints
    /// are queued under the same lock, so none reaches the pool after the
    /// purge (where it would hold up the drop behind other sequences'
    /// demand reads).
    cancelled: bool,
    tasks: Vec<Box<dyn Task>>,
}

/// A sequence's decode state shared with the step readers.
pub(crate) struct StepJob {
    pub(crate) id: u64,
    /// Hint reads of this sequence queued or running.
    pub(crate) hints: Arc<InFlight>,
    /// Hints held back while the current step's first table is being read.
    held: Mutex<HeldHints>,
    /// Set when a step task panicked: its state may be torn, so every later
    /// step is refused with this message.
    broken: OnceLock<String>,
    tables: Vec<StepTable>,
    row_bytes: Vec<usize>,
    decode: Vec<Option<Encoding>>,
    batch: bool,
    source: Arc<dyn RowSource>,
    stats: Arc<StatsRecorder>,
}

impl StepJob {
    pub(crate) fn new(
        id: u64,
        cols: &[usize],
        decode: &[Option<Encoding>],
        batch: bool,
        source: &Arc<dyn RowSource>,
        stats: &Arc<StatsRecorder>,
    ) -> StepJob {
        let row_bytes: Vec<usize> = (0..cols.len())
            .map(|t| match decode[t] {
                Some(_) => ROW_DIM * 4,
                None => source.row_bytes(t),
            })
            .collect();
        StepJob {
            id,
            hints: Arc::new(InFlight::new()),
            held: Mutex::new(HeldHints::default()),
            broken: OnceLock::new(),
            tables: cols
                .iter()
                .zip(&row_bytes)
                .map(|(&c, &rb)| StepTable {
                    ready: Ready::new(),
                    rows: Mutex::new(Vec::with_capacity(c)),
                    buf: RingBuf::new(c * rb),
                    flight: Arc::new(InFlight::new()),
                })
                .collect(),
            row_bytes,
            decode: decode.to_vec(),
            batch,
            source: source.clone(),
            stats: stats.clone(),
        }
    }

    fn ctx(&self) -> ReadCtx<'_> {
        ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase: Phase::Decode,
            priority: Priority::Demand,
            batch: self.batch,
        }
    }

    /// Reads the current step's rows of `table` into its buffer.
    ///
    /// Caller guarantees no view of the buffer is live and no other reader
    /// runs (one step task at a time per table; views borrow the sequence
    /// mutably and end before the next `step_begin`).
    fn read(&self, table: usize) -> Result<()> {
        let t = &self.tables[table];
        let rows = lock(&t.rows).clone();
        let ctx = self.ctx();
        match self.decode[table] {
            // SAFETY: per the caller's guarantee.
            Some(enc) => ctx.read_f32(table, &rows, enc, unsafe {
                t.buf.slice_mut_f32(0, t.buf.len() / 4)
            }),
            // SAFETY: per the caller's guarantee.
            None => ctx.read(table, &rows, unsafe { t.buf.slice_mut(0, t.buf.len()) }),
        }
    }

    /// Waits until the previous step's reads are done (they write the
    /// buffers a new step reuses: the consumer may have skipped a wait) and
    /// says whether a new step may start. Changes nothing: a refused step
    /// leaves the sequence and its last step's rows as they were.
    pub(crate) fn ready_for_step(&self) -> Result<()> {
        for t in &self.tables {
            t.flight.wait_idle();
        }
        if let Some(message) = self.broken.get() {
            return Err(Error::Internal(message.clone()));
        }
        if self.tables.iter().any(|t| t.ready.is_cancelled()) {
            return Err(Error::Cancelled);
        }
        Ok(())
    }

    /// Starts a step (after [`StepJob::ready_for_step`] said yes): records
    /// its row ids, clears the previous step's state (its rows, its error)
    /// and, with prefetch on, queues its reads.
    pub(crate) fn start(self: &Arc<Self>, ids: &[u32], prefetch: bool, pool: &Arc<PoolShared>) {
        let cols = ids.len() / self.tables.len();
        for (table, t) in self.tables.iter().enumerate() {
            // No reader is left (ready_for_step) and the consumer is the
            // caller, as `restart` requires.
            t.ready.restart();
            let mut rows = lock(&t.rows);
            rows.clear();
            rows.extend_from_slice(&ids[table * cols..(table + 1) * cols]);
        }
        if prefetch {
            self.start_reads(pool);
        }
    }

    /// Hands the step's reads, in table order, to one reader task; hints
    /// are held until that task has read the first table.
    ///
    /// Why cached rows are not served on the caller's thread: tried, and
    /// `engram bench` at scale 8 measured a median decode stall of 163 us
    /// for `full` (48 row-cache lookups on the forward thread, its CPU
    /// caches cold after a 37 ms step) against 45 us for `overlap`, whose
    /// forward thread only wakes a reader.
    fn start_reads(self: &Arc<Self>, pool: &Arc<PoolShared>) {
        for t in &self.tables {
            t.flight.enter();
        }
        lock(&self.held).holding = true;
        pool.submit_decode(vec![Box::new(StepTask {
            job: self.clone(),
            tables: (0..self.tables.len()).collect(),
            pool: pool.clone(),
        })]);
    }

    /// Queues `task` (a hint read) now, or once the current step's first
    /// table is read; abandons it once the sequence is being dropped.
    pub(crate) fn submit_hint(&self, task: Box<dyn Task>, pool: &PoolShared) {
        let mut held = lock(&self.held);
        if held.cancelled {
            drop(held);
            task.abandon();
        } else if held.holding {
            held.tasks.push(task);
        } else {
            // Queued under the lock: see `HeldHints::cancelled`.
            pool.submit_hint(task);
        }
    }

    /// Stops holding hints and queues the ones held (abandons them once the
    /// sequence is being dropped).
    fn release_hints(&self, pool: &PoolShared) {
        let mut held = lock(&self.held);
        held.holding = false;
        let tasks = std::mem::take(&mut held.tasks);
        if held.cancelled {
            drop(held);
            tasks.into_iter().for_each(|task| task.abandon());
        } else {
            // Queued under the lock: see `HeldHints::cancelled`.
            tasks.into_iter().for_each(|task| pool.submit_hint(task));
        }
    }

    /// Blocks until the current step's rows of `table` are read (reading
    /// them now without prefetch) and returns them with the time blocked.
    ///
    /// Without prefetch a failed read records nothing, so the wait can be
    /// repeated and reads again; with prefetch the step's reader recorded
    /// the error, and every wait of this step returns it.
    pub(crate) fn wait(&self, table: usize, prefetch: bool) -> Result<(&[u8], Duration)> {
        let t = self.tables.get(table).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table {table} out of range (the model has {})",
                self.tables.len()
            ))
        })?;
        let started = Instant::now();
        if !prefetch && t.ready.count() < 1 {
            if let Some(Err(e)) = t.ready.try_wait(1) {
                return Err(e);
            }
            self.read(table)?;
            t.ready.publish(1);
        } else {
            t.ready.wait(1)?;
        }
        let stall = started.elapsed();
        // SAFETY: the step's rows are published and nobody writes the buffer
        // until the next `start`, which needs the sequence mutably.
        let rows = unsafe { t.buf.slice(0, t.buf.len()) };
        Ok((rows, stall))
    }

    /// The largest ready count of the tables (tests: it stays 0 or 1).
    #[cfg(test)]
    pub(crate) fn max_ready_count(&self) -> u32 {
        self.tables
            .iter()
            .map(|t| t.ready.count())
            .max()
            .unwrap_or(0)
    }

    /// Bytes per row of `table`.
    pub(crate) fn row_bytes(&self, table: usize) -> usize {
        self.row_bytes[table]
    }

    /// True when `table`'s rows are decoded to f32.
    pub(crate) fn decoded(&self, table: usize) -> bool {
        self.decode[table].is_some()
    }

    /// A step task panicked at `at`: its tables not yet published fail with
    /// an internal error naming it (their waits end), later steps are
    /// refused, and the hints it held go out (nothing else would release
    /// them).
    fn break_down(&self, at: usize, tables: &[usize], panic: &str, pool: &PoolShared) {
        let message = format!("the decode reader of table {at} panicked: {panic}");
        for &table in tables {
            self.tables[table]
                .ready
                .fail(Error::Internal(message.clone()));
        }
        let _ = self.broken.set(message);
        self.release_hints(pool);
    }

    /// Abandons the held hints and every later one: the sequence (or the
    /// engine) is going away.
    fn cancel_hints(&self) {
        let tasks = {
            let mut held = lock(&self.held);
            held.cancelled = true;
            held.holding = false;
            std::mem::take(&mut held.tasks)
        };
        tasks.into_iter().for_each(|task| task.abandon());
    }

    /// Cancels pending steps and waits until no reader touches the buffers.
    pub(crate) fn cancel_and_join(&self, pool: &PoolShared) {
        // Hints first: from here on none is queued (see
        // `HeldHints::cancelled`), so the purge below finds every queued one.
        self.cancel_hints();
        for t in &self.tables {
            t.ready.cancel();
        }
        pool.cancel_owner(self.id);
        for t in &self.tables {
            t.flight.wait_idle();
        }
        self.hints.wait_idle();
    }
}

/// One step's reads of the tables not served from memory, in table order.
struct StepTask {
    job: Arc<StepJob>,
    tables: Vec<usize>,
    pool: Arc<PoolShared>,
}

impl Task for StepTask {
    fn run(self: Box<Self>) {
        let StepTask { job, tables, pool } = *self;
        let flights = tables
            .iter()
            .map(|&table| job.tables[table].flight.clone())
            .collect();
        // Leaves the tables' counts on every exit, a panic included.
        let job = Leaving::new(job, flights);
        // The table being read, for the message if it panics.
        let at = Cell::new(tables.first().copied().unwrap_or(0));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            for (i, &table) in tables.iter().enumerate() {
                at.set(table);
                pool.faults.hit(PanicSite::Decode, table);
                let t = &job.tables[table];
                if !t.ready.is_cancelled() {
                    match job.read(table) {
                        Ok(()) => t.ready.publish(1),
                        Err(e) => t.ready.fail(e),
                    }
                }
                if i == 0 {
                    job.release_hints(&pool);
                }
            }
        }));
        if let Err(panic) = outcome {
            job.break_down(at.get(), &tables, &panic_message(&*panic), &pool);
        }
    }

    fn abandon(self: Box<Self>) {
        let StepTask { job, tables, .. } = *self;
        let flights = tables
            .iter()
            .map(|&table| {
                let t = &job.tables[table];
                t.ready.cancel();
                t.flight.clone()
            })
            .collect();
        let job = Leaving::new(job, flights);
        job.cancel_hints();
    }

    fn owner(&self) -> u64 {
        self.job.id
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::hint::HintTask;
    use super::*;
    use crate::cache::{CachedSource, RowCache};
    use crate::io::BatchStats;
    use crate::prefetch::pool::Pool;

    /// Two tables of 100 rows of 8 bytes, each byte the row id. Counts the
    /// rows read and logs each read's start and end; with `slow`, table 0's
    /// demand reads take 20 ms.
    #[derive(Default)]
    struct Probe {
        rows_read: std::sync::atomic::AtomicU64,
        log: Mutex<Vec<String>>,
        slow: bool,
    }

    impl Probe {
        fn rows_read(&self) -> u64 {
            self.rows_read.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    impl RowSource for Probe {
        fn name(&self) -> String {
            "probe".into()
        }
        fn tables(&self) -> usize {
            2
        }
        fn table_rows(&self, _table: usize) -> u64 {
            100
        }
        fn row_bytes(&self, _table: usize) -> usize {
            8
        }
        fn read_rows_at(
            &self,
            table: usize,
            rows: &[u32],
            out: &mut [u8],
            priority: Priority,
        ) -> Result<BatchStats> {
            let kind = if priority == Priority::Hint {
                "hint"
            } else {
                "step"
            };
            lock(&self.log).push(format!("start {kind} {table}"));
            if self.slow && table == 0 && priority == Priority::Demand {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            for (row, dst) in rows.iter().zip(out.chunks_exact_mut(8)) {
                dst.fill(*row as u8);
            }
            let n = rows.len() as u64;
            self.rows_read
                .fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            lock(&self.log).push(format!("end {kind} {table}"));
            Ok(BatchStats {
                rows_requested: n,
                ..BatchStats::default()
            })
        }
    }

    #[test]
    fn a_step_reads_its_first_table_before_later_tables_and_hints() {
        let inner = Arc::new(Probe {
            slow: true,
            ..Probe::default()
        });
        let source: Arc<dyn RowSource> = inner.clone();
        let stats = Arc::new(StatsRecorder::new(2));
        // Enough threads that nothing but the hold could order the reads.
        let mut pool = Pool::start(3, 2, 4).unwrap();
        let job = Arc::new(StepJob::new(
            1,
            &[2, 2],
            &[None, None],
            true,
            &source,
            &stats,
        ));
        job.ready_for_step().unwrap();
        job.start(&[1, 2, 3, 4], true, &pool.shared());
        for table in 0..2 {
            job.hints.enter();
            let hint = Box::new(HintTask {
                owner: job.id,
                flight: job.hints.clone(),
                table,
                rows: vec![9, 10],
                source: source.clone(),
                stats: stats.clone(),
                pool: pool.shared(),
            });
            job.submit_hint(hint, &pool.shared());
        }
        for table in 0..2 {
            job.wait(table, true).unwrap();
        }
        job.hints.wait_idle();
        let log = lock(&inner.log).clone();
        assert_eq!(log.len(), 8, "{log:?}");
        assert_eq!(&log[..2], ["start step 0", "end step 0"], "{log:?}");
        job.cancel_and_join(&pool.shared());
        pool.shutdown();
    }

    #[test]
    fn a_step_whose_rows_are_cached_reads_nothing_from_storage() {
        let inner = Arc::new(Probe::default());
        let cache = Arc::new(RowCache::new(1 << 20, 8));
        let source: Arc<dyn RowSource> = Arc::new(CachedSource::new(inner.clone(), cache));
        let stats = Arc::new(StatsRecorder::new(2));
        let mut pool = Pool::start(1, 1, 4).unwrap();
        let job = Arc::new(StepJob::new(
            1,
            &[3, 3],
            &[None, None],
            true,
            &source,
            &stats,
        ));
        let ids = [1, 2, 3, 4, 5, 6];
        // Step 1 misses: the rows are fetched (and fill the cache).
        job.ready_for_step().unwrap();
        job.start(&ids, true, &pool.shared());
        for table in 0..2 {
            job.wait(table, true).unwrap();
        }
        let read = inner.rows_read();
        assert_eq!(read, 6);
        // Step 2 asks for the same rows: all served from the cache.
        job.ready_for_step().unwrap();
        job.start(&ids, true, &pool.shared());
        job.wait(0, true).unwrap();
        let (rows, _) = job.wait(1, true).unwrap();
        let expected: Vec<u8> = [4u8, 5, 6].iter().flat_map(|&r| [r; 8]).collect();
        assert_eq!(rows, expected);
        assert_eq!(inner.rows_read(), read);
        // One new row in table 1 is the only storage read of step 3.
        job.ready_for_step().unwrap();
        job.start(&[1, 2, 3, 4, 5, 7], true, &pool.shared());
        job.wait(1, true).unwrap();
        assert_eq!(inner.rows_read(), read + 1);
        job.cancel_and_join(&pool.shared());
        pool.shutdown();
    }

    /// Occupies a pool thread until the gate opens.
    struct Gate {
        running: std::sync::mpsc::Sender<()>,
        gate: std::sync::mpsc::Receiver<()>,
    }

    impl Task for Gate {
        fn run(self: Box<Self>) {
            let _ = self.running.send(());
            let _ = self.gate.recv_timeout(std::time::Duration::from_secs(10));
        }
        fn abandon(self: Box<Self>) {}
        fn owner(&self) -> u64 {
            0
        }
    }

    #[test]
    fn hints_released_or_submitted_once_a_drop_began_are_abandoned_not_queued() {
        let source: Arc<dyn RowSource> = Arc::new(Probe::default());
        let stats = Arc::new(StatsRecorder::new(2));
        let mut pool = Pool::start(1, 1, 8).unwrap();
        // The only general thread is busy: a queued hint would wait behind
        // it (as behind other sequences' demand reads).
        let (running, started) = std::sync::mpsc::channel();
        let (open, gate) = std::sync::mpsc::channel();
        pool.shared()
            .submit_demand(Box::new(Gate { running, gate }));
        started.recv().unwrap();
        let job = StepJob::new(1, &[2, 2], &[None, None], true, &source, &stats);
        lock(&job.held).holding = true; // a step's first table is being read
        job.hints.enter();
        let hint = Box::new(HintTask {
            owner: job.id,
            flight: job.hints.clone(),
            table: 0,
            rows: vec![1, 2],
            source: source.clone(),
            stats: stats.clone(),
            pool: pool.shared(),
        });
        job.submit_hint(hint, &pool.shared());
        // The drop marks the hints cancelled and purges the pool's queues;
        // then the step task finishes its first table and releases the
        // hints it held: they must not reach the pool, where nothing would
        // purge them again.
        job.cancel_hints();
        pool.shared().cancel_owner(job.id);
        job.release_hints(&pool.shared());
        // Nor does a hint submitted after the purge.
        job.hints.enter();
        let late = Box::new(HintTask {
            owner: job.id,
            flight: job.hints.clone(),
            table: 1,
            rows: vec![3],
            source: source.clone(),
            stats: stats.clone(),
            pool: pool.shared(),
        });
        job.submit_hint(late, &pool.shared());
        let (done, idle) = std::sync::mpsc::channel();
        let flight = job.hints.clone();
        let waiter = std::thread::spawn(move || {
            flight.wait_idle();
            let _ = done.send(());
        });
        let drained = idle.recv_timeout(std::time::Duration::from_secs(5));
        open.send(()).unwrap();
        waiter.join().unwrap();
        assert!(drained.is_ok(), "a hint was queued after the drop began");
        pool.shutdown();
    }
}
