//! Unit tests of the decode step: read order, cached steps, hints held
//! and abandoned, rows served from memory on the caller's thread.

use super::super::hint::{Candidate, HintTask};
use super::*;
use crate::cache::{CachedSource, RowCache};
use crate::io::threads::ReaderSched;
use crate::io::{BatchStats, RowRequest, TableShape};
use crate::prefetch::pool::Pool;

/// Batched reads.
const MODE: ReadMode = ReadMode { batch: true };

/// A step job of sequence 1 over two raw tables of `cols` rows per step.
fn step_job(cols: usize, source: &Arc<dyn RowSource>, stats: &Arc<StatsRecorder>) -> Arc<StepJob> {
    Arc::new(StepJob::new(
        1,
        &[cols, cols],
        &[None, None],
        MODE,
        source,
        stats,
    ))
}

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
    fn shapes(&self) -> &[TableShape] {
        // Two tables of 100 rows of 8 bytes.
        const SHAPE: TableShape = TableShape {
            rows: 100,
            row_bytes: 8,
        };
        &[SHAPE; 2]
    }
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        let (table, rows, priority) = (request.table, request.rows, request.priority);
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
    let mut pool = Pool::start(3, 2, 1, 4, ReaderSched::default()).unwrap();
    let job = step_job(2, &source, &stats);
    job.ready_for_step(&pool.shared()).unwrap();
    job.start(&[1, 2, 3, 4], true, &pool.shared());
    for table in 0..2 {
        job.hints.enter();
        let hint = Box::new(HintTask {
            owner: job.id,
            flight: job.hints.clone(),
            table,
            candidate: Arc::new(Candidate::new(1.0, 0, vec![vec![9, 10]; 2])),
            source: source.clone(),
            stats: stats.clone(),
            pool: pool.shared(),
        });
        job.submit_hints(vec![hint], &pool.shared());
    }
    for table in 0..2 {
        job.wait(table, true, &pool.shared()).unwrap();
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
    let mut pool = Pool::start(1, 1, 1, 4, ReaderSched::default()).unwrap();
    let job = step_job(3, &source, &stats);
    let ids = [1, 2, 3, 4, 5, 6];
    // Step 1 misses: the rows are fetched (and fill the cache).
    job.ready_for_step(&pool.shared()).unwrap();
    job.start(&ids, true, &pool.shared());
    for table in 0..2 {
        job.wait(table, true, &pool.shared()).unwrap();
    }
    let read = inner.rows_read();
    assert_eq!(read, 6);
    // Step 2 asks for the same rows: all served from the cache.
    job.ready_for_step(&pool.shared()).unwrap();
    job.start(&ids, true, &pool.shared());
    job.wait(0, true, &pool.shared()).unwrap();
    let (rows, _) = job.wait(1, true, &pool.shared()).unwrap();
    let expected: Vec<u8> = [4u8, 5, 6].iter().flat_map(|&r| [r; 8]).collect();
    assert_eq!(rows, expected);
    assert_eq!(inner.rows_read(), read);
    // One new row in table 1 is the only storage read of step 3.
    job.ready_for_step(&pool.shared()).unwrap();
    job.start(&[1, 2, 3, 4, 5, 7], true, &pool.shared());
    job.wait(1, true, &pool.shared()).unwrap();
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
    // No hint thread: a hint that reached the pool would stay queued (as
    // behind other sequences' demand reads), and the flight never drain.
    let mut pool = Pool::start(1, 1, 0, 8, ReaderSched::default()).unwrap();
    let (running, started) = std::sync::mpsc::channel();
    let (open, gate) = std::sync::mpsc::channel();
    pool.shared()
        .submit_demand(Box::new(Gate { running, gate }));
    started.recv().unwrap();
    let job = StepJob::new(1, &[2, 2], &[None, None], MODE, &source, &stats);
    lock(&job.held).holding = true; // a step's first table is being read
    job.hints.enter();
    let hint = Box::new(HintTask {
        owner: job.id,
        flight: job.hints.clone(),
        table: 0,
        candidate: Arc::new(Candidate::new(1.0, 0, vec![vec![1, 2]; 2])),
        source: source.clone(),
        stats: stats.clone(),
        pool: pool.shared(),
    });
    job.submit_hints(vec![hint], &pool.shared());
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
        candidate: Arc::new(Candidate::new(1.0, 0, vec![vec![3]; 2])),
        source: source.clone(),
        stats: stats.clone(),
        pool: pool.shared(),
    });
    job.submit_hints(vec![late], &pool.shared());
    let (done, idle) = std::sync::mpsc::channel();
    let flight = job.hints.clone();
    let waiter = std::thread::spawn(move || {
        flight.wait_idle();
        let _ = done.send(());
    });
    let drained = idle.recv_timeout(std::time::Duration::from_secs(5));
    open.send(()).unwrap();
    // The shutdown abandons whatever is queued, so the waiter ends.
    pool.shutdown();
    waiter.join().unwrap();
    assert!(drained.is_ok(), "a hint was queued after the drop began");
}

/// A pool whose only decode thread runs a [`Gate`] until the returned
/// sender is sent to (or dropped).
fn busy_decode_pool() -> (Pool, std::sync::mpsc::Sender<()>) {
    let pool = Pool::start(1, 1, 1, 4, ReaderSched::default()).unwrap();
    let (running, started) = std::sync::mpsc::channel();
    let (open, gate) = std::sync::mpsc::channel();
    pool.shared()
        .submit_decode(vec![Box::new(Gate { running, gate })]);
    started
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the decode thread took the gate");
    (pool, open)
}

#[test]
fn a_table_its_reader_has_not_started_is_read_by_the_waiting_consumer() {
    let inner = Arc::new(Probe::default());
    let cache = Arc::new(RowCache::new(1 << 20, 8));
    let source: Arc<dyn RowSource> = Arc::new(CachedSource::new(inner.clone(), cache.clone()));
    let stats = Arc::new(StatsRecorder::new(2));
    // The only decode thread is busy, as a reader a loaded CPU runs late.
    let (mut pool, open) = busy_decode_pool();
    let job = step_job(2, &source, &stats);
    // Table 0's rows are cached (read from memory), table 1's are not.
    cache.insert(0, 1, &[1; 8]);
    cache.insert(0, 2, &[2; 8]);
    job.ready_for_step(&pool.shared()).unwrap();
    job.start(&[1, 2, 3, 4], true, &pool.shared());
    let (done, waited) = std::sync::mpsc::channel();
    let consumer = {
        let (job, shared) = (job.clone(), pool.shared());
        std::thread::spawn(move || {
            let rows: Vec<Vec<u8>> = (0..2)
                .map(|table| job.wait(table, true, &shared).unwrap().0.to_vec())
                .collect();
            let _ = done.send(rows);
        })
    };
    let rows = waited.recv_timeout(std::time::Duration::from_secs(10));
    open.send(()).unwrap();
    consumer.join().unwrap();
    let rows = rows.expect("the waits ended without the reader");
    assert_eq!(rows[0], [[1u8; 8], [2u8; 8]].concat());
    assert_eq!(rows[1], [[3u8; 8], [4u8; 8]].concat());
    // The reader, once it runs, finds both tables taken and reads nothing.
    job.ready_for_step(&pool.shared()).unwrap();
    assert_eq!(inner.rows_read(), 2);
    assert_eq!(lock(&inner.log).len(), 2);
    job.cancel_and_join(&pool.shared());
    pool.shutdown();
}

#[test]
fn a_step_task_the_pool_has_not_run_does_not_hold_the_next_step() {
    let inner = Arc::new(Probe::default());
    let source: Arc<dyn RowSource> = inner.clone();
    let stats = Arc::new(StatsRecorder::new(2));
    // The only decode thread is busy for the whole test: no step task runs.
    let (mut pool, open) = busy_decode_pool();
    let job = step_job(2, &source, &stats);
    let (done, finished) = std::sync::mpsc::channel();
    let consumer = {
        let (job, shared) = (job.clone(), pool.shared());
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for step in 0..3u32 {
                job.ready_for_step(&shared).unwrap();
                let ids: Vec<u32> = (0..4).map(|i| step * 4 + i).collect();
                job.start(&ids, true, &shared);
                for table in 0..2 {
                    seen.push(job.wait(table, true, &shared).unwrap().0.to_vec());
                }
            }
            let _ = done.send(seen);
        })
    };
    // Every step's tables are read by the consumer; the queued step tasks
    // are retired by the next step instead of waited for.
    let seen = finished.recv_timeout(std::time::Duration::from_secs(10));
    open.send(()).unwrap();
    consumer.join().unwrap();
    let seen = seen.expect("later steps began while the reader never ran");
    for (i, rows) in seen.iter().enumerate() {
        let first = (i * 2) as u8;
        assert_eq!(rows, &[[first; 8], [first + 1; 8]].concat(), "wait {i}");
    }
    job.ready_for_step(&pool.shared()).unwrap();
    job.cancel_and_join(&pool.shared());
    pool.shutdown();
}
