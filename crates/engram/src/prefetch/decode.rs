//! Decode steps: both tables' reads issued when the token is known, each
//! waited for at its own layer.

use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    /// Steps whose rows are in `buf` (the current step's number once read).
    ready: Ready,
    rows: Mutex<Vec<u32>>,
    buf: RingBuf,
    flight: Arc<InFlight>,
}

/// A sequence's decode state shared with the step readers.
pub(crate) struct StepJob {
    pub(crate) id: u64,
    /// Hint reads of this sequence queued or running.
    pub(crate) hints: Arc<InFlight>,
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

    /// Fills the current step's buffer of `table` from the row cache on the
    /// caller's thread if every row is there (`Ok(false)` otherwise). A step
    /// whose rows were hinted then wakes no reader thread: on a machine
    /// with few cores the woken reader would take the forward thread's core
    /// for tens of microseconds. Same caller guarantees as [`StepJob::read`].
    fn read_from_memory(&self, table: usize) -> Result<bool> {
        let t = &self.tables[table];
        let rows = lock(&t.rows);
        let ctx = self.ctx();
        match self.decode[table] {
            // SAFETY: per the caller's guarantee.
            Some(enc) => ctx.read_f32_from_memory(table, &rows, enc, unsafe {
                t.buf.slice_mut_f32(0, t.buf.len() / 4)
            }),
            // SAFETY: per the caller's guarantee.
            None => ctx.read_from_memory(table, &rows, unsafe { t.buf.slice_mut(0, t.buf.len()) }),
        }
    }

    /// Starts step `step`: records its row ids and, with prefetch on, queues
    /// its reads. Blocks only if the previous step's reads are still running
    /// (the consumer skipped its wait), since they write the same buffer.
    pub(crate) fn begin(
        self: &Arc<Self>,
        step: u32,
        ids: &[u32],
        prefetch: bool,
        pool: &PoolShared,
    ) -> Result<()> {
        let cols = ids.len() / self.tables.len();
        for (table, t) in self.tables.iter().enumerate() {
            t.flight.wait_idle();
            if let Some(e) = t.ready.error() {
                return Err(super::ready::duplicate_error(&e));
            }
            if t.ready.is_cancelled() {
                return Err(Error::Cancelled);
            }
            let mut rows = lock(&t.rows);
            rows.clear();
            rows.extend_from_slice(&ids[table * cols..(table + 1) * cols]);
        }
        if prefetch {
            let mut tasks: Vec<Box<dyn Task>> = Vec::with_capacity(self.tables.len());
            for (table, t) in self.tables.iter().enumerate() {
                // No reader runs (flights are idle) and no view is live.
                match self.read_from_memory(table) {
                    Ok(true) => {
                        t.ready.publish(step);
                        continue;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        // As a failed reader would: the wait reports it.
                        t.ready.fail(e);
                        continue;
                    }
                }
                t.flight.enter();
                tasks.push(Box::new(StepTask {
                    job: self.clone(),
                    table,
                    step,
                }));
            }
            pool.submit_decode(tasks);
        }
        Ok(())
    }

    /// Blocks until step `step`'s rows of `table` are read (reading them now
    /// without prefetch) and returns them with the time blocked.
    pub(crate) fn wait(
        &self,
        table: usize,
        step: u32,
        prefetch: bool,
    ) -> Result<(&[u8], std::time::Duration)> {
        let t = self.tables.get(table).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table {table} out of range (the model has {})",
                self.tables.len()
            ))
        })?;
        let started = Instant::now();
        if !prefetch && t.ready.count() < step {
            if let Some(Err(e)) = t.ready.try_wait(step) {
                return Err(e);
            }
            if let Err(e) = self.read(table) {
                t.ready.fail(super::ready::duplicate_error(&e));
                return Err(e);
            }
            t.ready.publish(step);
        } else {
            t.ready.wait(step)?;
        }
        let stall = started.elapsed();
        // SAFETY: the step's rows are published and nobody writes the buffer
        // until the next `begin`, which needs the sequence mutably.
        let rows = unsafe { t.buf.slice(0, t.buf.len()) };
        Ok((rows, stall))
    }

    /// Bytes per row of `table`.
    pub(crate) fn row_bytes(&self, table: usize) -> usize {
        self.row_bytes[table]
    }

    /// True when `table`'s rows are decoded to f32.
    pub(crate) fn decoded(&self, table: usize) -> bool {
        self.decode[table].is_some()
    }

    /// Cancels pending steps and waits until no reader touches the buffers.
    pub(crate) fn cancel_and_join(&self, pool: &PoolShared) {
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

struct StepTask {
    job: Arc<StepJob>,
    table: usize,
    step: u32,
}

impl Task for StepTask {
    fn run(self: Box<Self>) {
        let StepTask { job, table, step } = *self;
        let t = &job.tables[table];
        if !t.ready.is_cancelled() {
            match job.read(table) {
                Ok(()) => t.ready.publish(step),
                Err(e) => t.ready.fail(e),
            }
        }
        let flight = t.flight.clone();
        drop(job);
        flight.leave();
    }

    fn abandon(self: Box<Self>) {
        let StepTask { job, table, .. } = *self;
        let t = &job.tables[table];
        t.ready.cancel();
        let flight = t.flight.clone();
        drop(job);
        flight.leave();
    }

    fn owner(&self) -> u64 {
        self.job.id
    }
}

/// A speculative read into the row cache; errors are ignored (nobody waits
/// on a hint) but the batch is counted under [`Phase::Hint`].
pub(crate) struct HintTask {
    pub owner: u64,
    /// The sequence's hint counter: its drop waits for running hints.
    pub flight: Arc<InFlight>,
    pub table: usize,
    pub rows: Vec<u32>,
    pub source: Arc<dyn RowSource>,
    pub stats: Arc<StatsRecorder>,
}

impl Task for HintTask {
    fn run(self: Box<Self>) {
        let HintTask {
            flight,
            table,
            rows,
            source,
            stats,
            ..
        } = *self;
        let mut out = vec![0u8; rows.len() * source.row_bytes(table)];
        let _ = ReadCtx {
            source: &source,
            stats: &stats,
            phase: Phase::Hint,
            priority: Priority::Hint,
            batch: true,
        }
        .read(table, &rows, &mut out);
        drop((source, stats));
        flight.leave();
    }

    fn abandon(self: Box<Self>) {
        let flight = self.flight.clone();
        drop(self);
        flight.leave();
    }

    fn owner(&self) -> u64 {
        self.owner
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::cache::{CachedSource, RowCache};
    use crate::io::BatchStats;
    use crate::prefetch::pool::Pool;

    /// Two tables of 100 rows of 8 bytes, each byte the row id; counts the
    /// rows it is asked to read.
    struct Counting(std::sync::atomic::AtomicU64);

    impl RowSource for Counting {
        fn name(&self) -> String {
            "counting".into()
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
            _table: usize,
            rows: &[u32],
            out: &mut [u8],
            _priority: Priority,
        ) -> Result<BatchStats> {
            for (row, dst) in rows.iter().zip(out.chunks_exact_mut(8)) {
                dst.fill(*row as u8);
            }
            let n = rows.len() as u64;
            self.0.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            Ok(BatchStats {
                rows_requested: n,
                ..BatchStats::default()
            })
        }
    }

    #[test]
    fn a_step_whose_rows_are_cached_is_ready_when_begin_returns() {
        let inner = Arc::new(Counting(Default::default()));
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
        // Step 1 misses: reader threads fetch the rows (and fill the cache).
        job.begin(1, &ids, true, &pool.shared()).unwrap();
        for table in 0..2 {
            job.wait(table, 1, true).unwrap();
        }
        let read = inner.0.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(read, 6);
        // Step 2 asks for the same rows: published before `begin` returns,
        // with no storage read.
        job.begin(2, &ids, true, &pool.shared()).unwrap();
        for (table, t) in job.tables.iter().enumerate() {
            assert_eq!(t.ready.count(), 2, "table {table} was served inline");
        }
        let (rows, _) = job.wait(1, 2, true).unwrap();
        assert_eq!(
            rows,
            [4u8; 8]
                .iter()
                .chain(&[5; 8])
                .chain(&[6; 8])
                .copied()
                .collect::<Vec<_>>()
        );
        assert_eq!(inner.0.load(std::sync::atomic::Ordering::SeqCst), read);
        // A miss in one table sends only that table to a reader.
        job.begin(3, &[1, 2, 3, 4, 5, 7], true, &pool.shared())
            .unwrap();
        assert_eq!(job.tables[0].ready.count(), 3);
        job.wait(1, 3, true).unwrap();
        assert_eq!(inner.0.load(std::sync::atomic::Ordering::SeqCst), read + 1);
        job.cancel_and_join(&pool.shared());
        pool.shutdown();
    }
}
