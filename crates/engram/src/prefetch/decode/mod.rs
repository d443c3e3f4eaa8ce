//! Decode steps: both tables' reads issued when the token is known, each
//! waited for at its own layer.
//!
//! A step's reads go to one reader task in table order (the first table's
//! layer comes first), and hints issued meanwhile wait until that task has
//! read the first table, so nothing shares the device with the rows the
//! next layer waits for.
//!
//! Rows already in memory never wait for a second thread hop: a table is
//! read by whoever claims it first, the step's reader task or the consumer
//! at the table's wait when the reader has not started it (a busy CPU runs
//! a woken reader late: measured up to milliseconds). That thread reads at
//! [`Priority::Demand`] and copies whatever is in memory itself: row-cache
//! (and hot-tier) hits in the tier in front of the source, and on Linux the
//! page-cache prefix of the batch, which the pread pool reads with
//! `preadv2(RWF_NOWAIT)` on the calling thread, waking its workers only from
//! the first read that would block (`io::psync`). macOS has no non-blocking
//! read of the page cache: there only tier hits are copied this way, and a
//! page-cache hit goes to the pool as a miss does.

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::guard::{panic_message, Leaving, PanicSite};
use super::pool::{PoolShared, Task};
use super::read::ReadCtx;
use super::ready::{InFlight, Ready};
use super::ring::RingBuf;
use super::source::{Priority, RowSource};
use super::sync::lock_std as lock;
use crate::codec::Encoding;
use crate::stats::{Phase, StatsRecorder};
use crate::{Error, Result};

/// One table's step buffer: the rows of the current step.
struct StepTable {
    /// The current step's rows: count 1 once read. Restarted by every
    /// step (an epoch per step), so a step's error fails that step alone.
    ready: Ready,
    rows: Mutex<StepRows>,
    buf: RingBuf,
    flight: Arc<InFlight>,
    /// Someone (the step's reader task or the consumer) has taken this
    /// step's read of the table; cleared by every `start`.
    claimed: AtomicBool,
}

impl StepTable {
    /// Takes this step's read of the table; false when it is taken.
    fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }
}

/// A step's row ids of one table, and the stored bytes an f32 table's rows
/// pass through on their way to the buffer: kept from step to step, so a
/// step allocates nothing.
struct StepRows {
    ids: Vec<u32>,
    raw: Vec<u8>,
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

/// How a sequence's steps read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadMode {
    /// `false`: one request per row (ENGRAM_BATCH=0).
    pub batch: bool,
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
    mode: ReadMode,
    source: Arc<dyn RowSource>,
    stats: Arc<StatsRecorder>,
}

impl StepJob {
    pub(crate) fn new(
        id: u64,
        cols: &[usize],
        decode: &[Option<Encoding>],
        mode: ReadMode,
        source: &Arc<dyn RowSource>,
        stats: &Arc<StatsRecorder>,
    ) -> StepJob {
        let row_bytes: Vec<usize> = (0..cols.len())
            .map(|t| match decode[t] {
                Some(encoding) => encoding.values() * 4,
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
                    // `raw` grows once, at the first f32 read.
                    rows: Mutex::new(StepRows {
                        ids: Vec::with_capacity(c),
                        raw: Vec::new(),
                    }),
                    buf: RingBuf::new(c * rb),
                    flight: Arc::new(InFlight::new()),
                    claimed: AtomicBool::new(false),
                })
                .collect(),
            row_bytes,
            decode: decode.to_vec(),
            mode,
            source: source.clone(),
            stats: stats.clone(),
        }
    }

    /// Reads the current step's rows of `table` into its buffer at
    /// `priority`.
    ///
    /// Caller guarantees no view of the buffer is live and no other reader
    /// runs (one step task at a time per table; views borrow the sequence
    /// mutably and end before the next `step_begin`).
    fn read(&self, table: usize, priority: Priority) -> Result<()> {
        let t = &self.tables[table];
        // Held for the read instead of copied: the only other user is
        // `start`, which runs once no reader is left.
        let mut rows = lock(&t.rows);
        let StepRows { ids, raw } = &mut *rows;
        let ctx = ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase: Phase::Decode,
            priority,
            batch: self.mode.batch,
        };
        match self.decode[table] {
            Some(enc) => ctx.read_f32_via(
                table,
                ids,
                enc,
                // SAFETY: per the caller's guarantee.
                unsafe { t.buf.slice_mut_f32(0, t.buf.len() / 4) },
                raw,
            ),
            // SAFETY: per the caller's guarantee.
            None => ctx.read(table, ids, unsafe { t.buf.slice_mut(0, t.buf.len()) }),
        }
    }

    /// Retires the previous step's reader task if it is still queued (its
    /// reads are superseded), waits until one running is done (it writes
    /// the buffers a new step reuses: the consumer may have skipped a wait) and
    /// says whether a new step may start. Changes nothing: a refused step
    /// leaves the sequence and its last step's rows as they were.
    pub(crate) fn ready_for_step(&self, pool: &PoolShared) -> Result<()> {
        // A step task still queued is not needed any more; one running is
        // waited for (it has a core and finishes its table).
        pool.retire_decode(self.id);
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
            t.claimed.store(false, Ordering::Release);
            let mut rows = lock(&t.rows);
            rows.ids.clear();
            rows.ids
                .extend_from_slice(&ids[table * cols..(table + 1) * cols]);
        }
        if prefetch {
            self.start_reads(pool);
        }
    }

    /// Hands the step's reads, in table order, to one reader task; hints
    /// are held until the first table is read.
    ///
    /// Why nothing is copied here even when it is in memory: tried, and
    /// `engram bench` (a `--scale 1024` model in the page cache, `--compute
    /// cpu`, 3,000 tokens, 200 steps, median of 3) measured a mean decode
    /// stall of 57 us for `overlap` with both tables copied in `step_begin`
    /// (48 rows, on the forward thread) against 12 us with the reader
    /// copying them from memory on its own thread while the forward thread
    /// computes (and 59 us with every read going to the pread pool). A
    /// later series measured 60-1,433 us: the next `step_begin` waited for
    /// a queued reader task a busy CPU had not run yet; such a task is
    /// retired now ([`StepJob::ready_for_step`]; docs/bench.md, "Reader
    /// scheduling").
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

    /// Reads `table`'s rows (claimed by the caller) and publishes them or
    /// the error.
    ///
    /// Why no memory-only try first (`Priority::Resident`, removed): the
    /// read below already copies on this thread what is in memory (tier
    /// hits; the pread pool's page-cache prefix), so a try read a partly
    /// cached table's cached rows twice and cost an uncached one a second
    /// `RWF_NOWAIT` read. Without it `engram bench` measured the same
    /// decode stall, warm and cold, within the noise of a shared 2-core
    /// machine (docs/bench.md, "One read per decode table").
    fn read_claimed(&self, table: usize) {
        let t = &self.tables[table];
        match self.read(table, Priority::Demand) {
            Ok(()) => t.ready.publish(1),
            Err(e) => t.ready.fail(e),
        }
    }

    /// Queues `tasks` (hint reads) now, or once the current step's first
    /// table is read; abandons them once the sequence is being dropped.
    pub(crate) fn submit_hints(&self, tasks: Vec<Box<dyn Task>>, pool: &PoolShared) {
        let mut held = lock(&self.held);
        if held.cancelled {
            drop(held);
            tasks.into_iter().for_each(|task| task.abandon());
        } else if held.holding {
            held.tasks.extend(tasks);
        } else {
            // Queued under the lock: see `HeldHints::cancelled`.
            pool.submit_hints(tasks);
        }
    }

    /// Abandons the hint reads a begun step (or a rollback) made stale,
    /// held here or queued in the pool.
    pub(crate) fn drop_stale_hints(&self, pool: &PoolShared) {
        let stale = {
            let mut held = lock(&self.held);
            let (stale, kept): (Vec<Box<dyn Task>>, _) = std::mem::take(&mut held.tasks)
                .into_iter()
                .partition(|task| task.stale());
            held.tasks = kept;
            stale
        };
        stale.into_iter().for_each(|task| task.abandon());
        pool.drop_stale_hints(self.id);
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
            pool.submit_hints(tasks);
        }
    }

    /// Blocks until the current step's rows of `table` are read (reading
    /// them now without prefetch, or when the step's reader has not started
    /// them) and returns them with the time blocked.
    ///
    /// Without prefetch a failed read records nothing, so the wait can be
    /// repeated and reads again; with prefetch the step's error is
    /// recorded, and every wait of this step returns it.
    pub(crate) fn wait(
        &self,
        table: usize,
        prefetch: bool,
        pool: &PoolShared,
    ) -> Result<(&[u8], Duration)> {
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
            self.read(table, Priority::Demand)?;
            t.ready.publish(1);
        } else {
            // A table a test armed to panic in its reader is left to it.
            if t.ready.count() < 1 && !pool.faults.armed(PanicSite::Decode, table) && t.claim() {
                self.read_claimed(table);
            }
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

/// `job`, held until dropped, then leaving the in-flight counts of
/// `tables` (entered when the step's task was queued).
fn leaving(job: Arc<StepJob>, tables: &[usize]) -> Leaving<Arc<StepJob>> {
    let flights = tables
        .iter()
        .map(|&table| job.tables[table].flight.clone())
        .collect();
    Leaving::new(job, flights)
}

impl Task for StepTask {
    fn run(self: Box<Self>) {
        let StepTask { job, tables, pool } = *self;
        // Leaves the tables' counts on every exit, a panic included.
        let job = leaving(job, &tables);
        // The table being read, for the message if it panics.
        let at = Cell::new(tables.first().copied().unwrap_or(0));
        // Tables this task claimed (the consumer reads the others).
        let mine = RefCell::new(Vec::with_capacity(tables.len()));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            for (i, &table) in tables.iter().enumerate() {
                at.set(table);
                let t = &job.tables[table];
                if !t.ready.is_cancelled() && t.claim() {
                    mine.borrow_mut().push(table);
                    pool.faults.hit(PanicSite::Decode, table);
                    job.read_claimed(table);
                } else if i == 0 {
                    // The consumer is reading the first table itself: the
                    // later tables and the hints still wait until it is
                    // read (the wait ends: that read is synchronous and
                    // publishes or fails; a cancel ends it too).
                    let _ = t.ready.wait(1);
                }
                if i == 0 {
                    job.release_hints(&pool);
                }
            }
        }));
        if let Err(panic) = outcome {
            // Fails the tables it claimed (the panic is in one of them)
            // and those nobody claimed yet (claimed now, so the consumer
            // does not read them after).
            let mine = mine.into_inner();
            let torn: Vec<usize> = tables
                .iter()
                .copied()
                .filter(|&table| mine.contains(&table) || job.tables[table].claim())
                .collect();
            job.break_down(at.get(), &torn, &panic_message(&*panic), &pool);
        }
    }

    fn retire(self: Box<Self>) {
        // The step is over: tables nobody claimed stay unread (a wait on
        // one of them still reads it: it is unclaimed and not ready), and
        // the hints held for the first table go out.
        let StepTask { job, tables, pool } = *self;
        leaving(job, &tables).release_hints(&pool);
    }

    fn abandon(self: Box<Self>) {
        let StepTask { job, tables, .. } = *self;
        for &table in &tables {
            job.tables[table].ready.cancel();
        }
        leaving(job, &tables).cancel_hints();
    }

    fn owner(&self) -> u64 {
        self.job.id
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
