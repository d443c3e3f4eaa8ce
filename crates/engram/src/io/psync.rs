//! The pread pool: a fixed set of reader threads, started once, doing
//! positional reads handed out through a queue.
//!
//! A batch is published as one shared job; up to `depth` workers join it and
//! claim reads one at a time from an atomic cursor, so a batch of any size
//! costs a handful of queue messages and no thread is ever created per
//! batch. Two queues give demand work precedence: an idle worker always
//! looks at the demand queue first, hint jobs get at most a quarter of the
//! workers, and a worker on a hint job goes back to the demand queue after
//! each read when demand work is waiting. Later prefill jobs
//! ([`Priority::PrefillLater`]) share the hint queue without the cap.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{select, Receiver, Sender};

use super::batch::{
    check_submission, read_op_positional, BounceBuf, Completed, OpError, Pending, ReadEngine,
};
use super::files::PositionalRead;
use super::order::ReadOrder;
use super::plan::ReadOp;
use super::threads::ReaderSched;
use super::Priority;

/// Shared state of one batch while workers read it.
struct Job {
    ops: Vec<ReadOp>,
    /// Base of `owned`'s memory; read `i` writes only
    /// `buf[ops[i].buf_off..][..ops[i].len]`, ranges checked disjoint.
    buf: *mut u8,
    /// The bounce buffer, owned by the job until the submitter takes it
    /// back after the last read (or freed with the job if nobody waits).
    owned: Mutex<Option<BounceBuf>>,
    direct: bool,
    /// Reads `first..` are claimed through `next` in `order` over
    /// `ways` readers; those before were read inline.
    order: ReadOrder,
    first: usize,
    ways: usize,
    next: AtomicUsize,
    done: AtomicUsize,
    abort: AtomicBool,
    latencies: Vec<AtomicU64>,
    failure: Mutex<Option<OpError>>,
    finished: Mutex<bool>,
    wake: Condvar,
}

// SAFETY: `buf` points into `owned`, which lives as long as the job and is
// taken out only after every read is done; it is only dereferenced for
// ranges claimed through `next`, each claimed by exactly one thread.
unsafe impl Send for Job {}
// SAFETY: as above; all other fields are Sync.
unsafe impl Sync for Job {}

impl Job {
    /// Claims and performs reads until none is left; returns early (true)
    /// when `yield_to_demand` says so, leaving work for others.
    fn work(&self, files: &[Arc<dyn PositionalRead>], yield_to_demand: &dyn Fn() -> bool) -> bool {
        loop {
            let claim = self.next.fetch_add(1, Ordering::Relaxed);
            if claim >= self.ops.len() {
                return false;
            }
            let rest = self.ops.len() - self.first;
            let i = self.first + self.order.op(claim - self.first, rest, self.ways);
            if !self.abort.load(Ordering::Relaxed) {
                self.read_one(i, files);
            }
            self.complete_one();
            if yield_to_demand() {
                return true;
            }
        }
    }

    fn read_one(&self, i: usize, files: &[Arc<dyn PositionalRead>]) {
        let op = self.ops[i];
        let started = Instant::now();
        // SAFETY: see the `Send`/`Sync` impls: read `i` is ours alone and its
        // range lies inside the buffer (checked before the job was queued).
        let buf = unsafe { std::slice::from_raw_parts_mut(self.buf.add(op.buf_off), op.len) };
        let op_local = ReadOp { buf_off: 0, ..op };
        let result = match files.get(op.file) {
            Some(file) => panic::catch_unwind(AssertUnwindSafe(|| {
                read_op_positional(file.as_ref(), &op_local, buf, self.direct)
            }))
            .unwrap_or_else(|_| Err(std::io::Error::other("reader panicked"))),
            None => Err(std::io::Error::other(format!("no file {}", op.file))),
        };
        self.latencies[i].store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Err(error) = result {
            self.abort.store(true, Ordering::Relaxed);
            let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
            if failure.as_ref().is_none_or(|f| f.op > i) {
                *failure = Some(OpError { op: i, error });
            }
        }
    }

    fn complete_one(&self) {
        // AcqRel: the last completer sees every worker's writes before it
        // wakes the submitter (which then reads through the mutex).
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.ops.len() {
            let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
            *finished = true;
            self.wake.notify_all();
        }
    }

    fn wait(&self) {
        let mut finished = self.finished.lock().unwrap_or_else(|p| p.into_inner());
        while !*finished {
            finished = self.wake.wait(finished).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A persistent pool of pread workers.
pub struct PsyncEngine {
    files: Arc<[Arc<dyn PositionalRead>]>,
    demand: Option<Sender<Arc<Job>>>,
    hint: Option<Sender<Arc<Job>>>,
    workers: Vec<JoinHandle<()>>,
    depth: usize,
    direct: bool,
    order: ReadOrder,
}

impl PsyncEngine {
    /// Starts `depth` workers reading `files`; `direct` says the files were
    /// opened for direct I/O (a short read off a page boundary is then end
    /// of file); each worker takes the scheduling class `readers`; a
    /// batch's reads are claimed in `order`.
    pub fn new(
        files: Vec<Arc<dyn PositionalRead>>,
        depth: usize,
        direct: bool,
        readers: ReaderSched,
        order: ReadOrder,
    ) -> std::io::Result<PsyncEngine> {
        let depth = depth.max(1);
        let files: Arc<[Arc<dyn PositionalRead>]> = files.into();
        let (demand_tx, demand_rx) = crossbeam_channel::unbounded::<Arc<Job>>();
        let (hint_tx, hint_rx) = crossbeam_channel::unbounded::<Arc<Job>>();
        let mut engine = PsyncEngine {
            files: files.clone(),
            demand: Some(demand_tx),
            hint: Some(hint_tx.clone()),
            workers: Vec::with_capacity(depth),
            depth,
            direct,
            order,
        };
        for n in 0..depth {
            let (files, demand_rx, hint_rx, hint_tx) = (
                files.clone(),
                demand_rx.clone(),
                hint_rx.clone(),
                hint_tx.clone(),
            );
            let handle = std::thread::Builder::new()
                .name(format!("engram-pread-{n}"))
                .spawn(move || {
                    readers.apply_to_current_thread();
                    worker(&files, &demand_rx, &hint_rx, &hint_tx)
                })?;
            engine.workers.push(handle);
        }
        Ok(engine)
    }

    /// Reads `ops` in order on the calling thread while they are in the
    /// page cache (`RWF_NOWAIT`), recording each latency, and returns how
    /// many it read: the batch's remaining reads start at the first that
    /// would block.
    ///
    /// Why: a worker is worth waking only for a read that waits on the
    /// device. Handing page-cache copies (a microsecond each) to up to
    /// `depth` woken workers costs more than the copies on a busy machine,
    /// and the batch then waits for the slowest of them: measured on 2
    /// busy cores (`engram bench`, warm tables, `--compute cpu`), `sync`'s
    /// decode reads took 400-1,900 us per step this way against about 40
    /// us for the peer's serial reads (docs/bench.md, "Reader scheduling").
    /// Direct I/O bypasses the page cache, so nothing is tried; a platform
    /// without `RWF_NOWAIT` answers "not cached" to the first try.
    fn read_cached_prefix(&self, ops: &[ReadOp], buf: &mut [u8], latencies: &[AtomicU64]) -> usize {
        if self.direct {
            return 0;
        }
        // One clock read per op: each read ends where the next starts (the
        // clock was half of this loop's instructions read twice per op).
        let mut start = Instant::now();
        for (i, op) in ops.iter().enumerate() {
            let Some(file) = self.files.get(op.file) else {
                return i;
            };
            let dst = &mut buf[op.buf_off..op.buf_off + op.len];
            // A prefix alone is not enough: the job re-reads the op whole.
            match file.read_at_nowait(dst, op.offset) {
                Ok(Some(got)) if got >= op.need => {
                    let now = Instant::now();
                    // At least 1: a 0 means "not issued" (see `submit`).
                    let ns = (now - start).as_nanos().max(1) as u64;
                    latencies[i].store(ns, Ordering::Relaxed);
                    start = now;
                }
                _ => return i,
            }
        }
        ops.len()
    }
}

fn worker(
    files: &[Arc<dyn PositionalRead>],
    demand_rx: &Receiver<Arc<Job>>,
    hint_rx: &Receiver<Arc<Job>>,
    hint_tx: &Sender<Arc<Job>>,
) {
    loop {
        let (job, is_hint) = match demand_rx.try_recv() {
            Ok(job) => (job, false),
            Err(_) => select! {
                recv(demand_rx) -> job => match job { Ok(job) => (job, false), Err(_) => return },
                recv(hint_rx) -> job => match job { Ok(job) => (job, true), Err(_) => return },
            },
        };
        if is_hint {
            let yielded = job.work(files, &|| !demand_rx.is_empty());
            if yielded && hint_tx.send(job).is_err() {
                return;
            }
        } else {
            job.work(files, &|| false);
        }
    }
}

impl ReadEngine for PsyncEngine {
    fn name(&self) -> &'static str {
        "psync"
    }

    fn submit(&self, ops: Vec<ReadOp>, buf: BounceBuf, priority: Priority) -> Pending {
        let mut buf = match check_submission(&ops, buf) {
            Ok(buf) => buf,
            Err(answer) => return answer,
        };
        let n = ops.len();
        let latencies: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        let inline = self.read_cached_prefix(&ops, buf.as_mut_slice(), &latencies);
        if inline == n {
            return Pending::ready(Completed {
                buf: Some(buf),
                latencies_ns: latencies.into_iter().map(AtomicU64::into_inner).collect(),
                failure: None,
            });
        }
        let job = Arc::new(Job {
            ops,
            buf: buf.as_mut_ptr(),
            owned: Mutex::new(Some(buf)),
            direct: self.direct,
            order: self.order,
            first: inline,
            ways: self.depth,
            next: AtomicUsize::new(inline),
            done: AtomicUsize::new(inline),
            abort: AtomicBool::new(false),
            latencies,
            failure: Mutex::new(None),
            finished: Mutex::new(false),
            wake: Condvar::new(),
        });
        let n = n - inline;
        // Later prefill rows go with hints: a worker takes them only when no
        // demand job is queued and goes back to demand after each read when
        // one is; unlike hints they may take every worker, so they fill all
        // the depth demand leaves (a batch's tail, the gap before the next).
        let (queue, helpers) = match priority {
            Priority::Demand | Priority::Prefill | Priority::Warm => (&self.demand, self.depth),
            Priority::PrefillLater => (&self.hint, self.depth),
            Priority::Hint => (&self.hint, (self.depth / 4).max(1)),
        };
        if let Some(queue) = queue {
            for _ in 0..helpers.min(n) {
                if queue.send(job.clone()).is_err() {
                    break;
                }
            }
        }
        let files = self.files.clone();
        Pending::new(move || {
            // The waiting thread works on its own batch too: it would only
            // block otherwise, and this keeps a batch moving even when every
            // worker is busy with another table's batch (or the pool is gone).
            job.work(&files, &|| false);
            job.wait();
            // Reads skipped after a failure have no latency (0): not issued.
            let latencies_ns = job
                .latencies
                .iter()
                .map(|l| l.load(Ordering::Relaxed))
                .filter(|&l| l > 0)
                .collect();
            let failure = job.failure.lock().unwrap_or_else(|p| p.into_inner()).take();
            let buf = job.owned.lock().unwrap_or_else(|p| p.into_inner()).take();
            Completed {
                buf,
                latencies_ns,
                failure,
            }
        })
    }
}

impl Drop for PsyncEngine {
    fn drop(&mut self) {
        self.demand.take();
        self.hint.take();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A file in memory whose first `cached` bytes answer `read_at_nowait`
    /// (the page cache), with a read error at `poison` and a count of the
    /// blocking reads (the ones a worker or the waiter does).
    struct MemFile {
        data: Vec<u8>,
        cached: u64,
        poison: Option<u64>,
        blocking: AtomicUsize,
    }

    impl PositionalRead for MemFile {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            self.blocking.fetch_add(1, Ordering::Relaxed);
            if self.poison == Some(offset) {
                return Err(io::Error::other("poisoned"));
            }
            let start = (offset as usize).min(self.data.len());
            let n = buf.len().min(self.data.len() - start);
            buf[..n].copy_from_slice(&self.data[start..start + n]);
            Ok(n)
        }

        fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
            if offset + buf.len() as u64 > self.cached {
                return Ok(None);
            }
            let start = offset as usize;
            buf.copy_from_slice(&self.data[start..start + buf.len()]);
            Ok(Some(buf.len()))
        }
    }

    fn mem(cached: u64, poison: Option<u64>) -> Arc<MemFile> {
        Arc::new(MemFile {
            data: (0..64 * 1024u32).map(|i| (i * 7 + i / 251) as u8).collect(),
            cached,
            poison,
            blocking: AtomicUsize::new(0),
        })
    }

    /// Ten 100-byte reads at offsets 0, 1000, ..., 9000 into one buffer.
    fn ops() -> Vec<ReadOp> {
        (0..10)
            .map(|i| ReadOp {
                file: 0,
                offset: i * 1000,
                len: 100,
                need: 100,
                buf_off: i as usize * 100,
            })
            .collect()
    }

    /// Submits `ops()` to a 3-worker pool over `file`; the wait runs on a
    /// thread of its own and must end within 10 s.
    fn run(file: &Arc<MemFile>) -> Completed {
        let files: Vec<Arc<dyn PositionalRead>> = vec![file.clone()];
        let engine = PsyncEngine::new(files, 3, false, ReaderSched::Normal, ReadOrder::Spread).unwrap();
        let buf = BounceBuf::zeroed(1000).unwrap();
        let pending = engine.submit(ops(), buf, Priority::Demand);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(pending.wait()).unwrap());
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the batch's wait ended")
    }

    fn expected(file: &MemFile) -> Vec<u8> {
        ops()
            .iter()
            .flat_map(|op| file.data[op.offset as usize..][..op.len].to_vec())
            .collect()
    }

    #[test]
    fn a_batch_in_the_page_cache_is_read_by_the_submitter_alone() {
        let file = mem(u64::MAX, None);
        let done = run(&file);
        assert!(done.failure.is_none());
        assert_eq!(done.buf.unwrap().as_slice(), &expected(&file)[..]);
        assert_eq!(done.latencies_ns.len(), 10, "every read counted as issued");
        assert_eq!(file.blocking.load(Ordering::Relaxed), 0, "no blocking read");
    }

    #[test]
    fn reads_after_the_cached_prefix_block_and_land_in_place() {
        // Ops 0..=4 start below 4,100 bytes (4000..4100 included).
        let file = mem(4100, None);
        let done = run(&file);
        assert!(done.failure.is_none());
        assert_eq!(done.buf.unwrap().as_slice(), &expected(&file)[..]);
        assert_eq!(done.latencies_ns.len(), 10);
        assert_eq!(file.blocking.load(Ordering::Relaxed), 5, "ops 5..10 only");
    }

    #[test]
    fn an_error_past_the_cached_prefix_names_its_op() {
        let file = mem(3100, Some(7000));
        let done = run(&file);
        let failure = done.failure.expect("the poisoned read fails the batch");
        assert_eq!(failure.op, 7);
        // A prefix-only cache is no hit: op 3 (3000..3100 cached) is
        // cached whole, op 4 is not.
        let file = mem(4050, None);
        let done = run(&file);
        assert!(done.failure.is_none());
        assert_eq!(done.buf.unwrap().as_slice(), &expected(&file)[..]);
        assert_eq!(file.blocking.load(Ordering::Relaxed), 6, "ops 4..10");
    }
}
