//! The pread pool: a fixed set of reader threads, started once, doing
//! positional reads handed out through a queue.
//!
//! A batch is published as one shared job; up to `depth` workers join it and
//! claim reads one at a time from an atomic cursor, so a batch of any size
//! costs a handful of queue messages and no thread is ever created per
//! batch. Two queues give demand work precedence: an idle worker always
//! looks at the demand queue first, hint jobs get at most a quarter of the
//! workers, and a worker on a hint job goes back to the demand queue after
//! each read when demand work is waiting.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{select, Receiver, Sender};

use super::batch::{read_op_positional, BounceBuf, Completed, OpError, Pending, ReadEngine};
use super::files::PositionalRead;
use super::plan::{check_ops, ReadOp};
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
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.ops.len() {
                return false;
            }
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
}

impl PsyncEngine {
    /// Starts `depth` workers reading `files`; `direct` says the files were
    /// opened for direct I/O (a short read off a page boundary is then end
    /// of file).
    pub fn new(
        files: Vec<Arc<dyn PositionalRead>>,
        depth: usize,
        direct: bool,
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
                .spawn(move || worker(&files, &demand_rx, &hint_rx, &hint_tx))?;
            engine.workers.push(handle);
        }
        Ok(engine)
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

    fn depth(&self) -> usize {
        self.depth
    }

    fn read_resident(&self, ops: &[ReadOp], buf: &mut [u8]) -> bool {
        // Direct I/O bypasses the page cache: nothing of it is resident.
        if self.direct || check_ops(ops, buf.len()).is_err() {
            return false;
        }
        ops.iter().all(|op| {
            let Some(file) = self.files.get(op.file) else {
                return false;
            };
            let dst = &mut buf[op.buf_off..op.buf_off + op.len];
            // A prefix alone is not enough: the rest would need storage.
            matches!(file.read_at_nowait(dst, op.offset), Ok(Some(n)) if n >= op.need)
        })
    }

    fn submit(&self, ops: Vec<ReadOp>, mut buf: BounceBuf, priority: Priority) -> Pending {
        if ops.is_empty() {
            return Pending::ready(Completed {
                buf: Some(buf),
                latencies_ns: Vec::new(),
                failure: None,
            });
        }
        if let Err(error) = check_ops(&ops, buf.len()) {
            return Pending::ready(Completed {
                buf: Some(buf),
                latencies_ns: Vec::new(),
                failure: Some(OpError { op: 0, error }),
            });
        }
        let n = ops.len();
        let job = Arc::new(Job {
            ops,
            buf: buf.as_mut_ptr(),
            owned: Mutex::new(Some(buf)),
            direct: self.direct,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            abort: AtomicBool::new(false),
            latencies: (0..n).map(|_| AtomicU64::new(0)).collect(),
            failure: Mutex::new(None),
            finished: Mutex::new(false),
            wake: Condvar::new(),
        });
        let (queue, helpers) = match priority {
            // Resident reads never reach an engine (BatchSource serves
            // them inline); queued as demand if one did.
            Priority::Demand | Priority::Prefill | Priority::Resident => (&self.demand, self.depth),
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
