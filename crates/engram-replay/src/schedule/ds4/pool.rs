//! A persistent pool of worker threads standing in for GCD's global
//! concurrent queue, with `dispatch_apply_f`'s contract: [`ApplyPool::apply`]
//! runs `f(0) .. f(parts - 1)` on the workers and returns once every part
//! has finished.
//!
//! The peer on macOS reads a batch of rows with `dispatch_apply_f` over 16
//! parts; GCD keeps its worker threads between calls, so no thread is
//! created per batch (unlike the peer's Linux path). The calling thread
//! only waits here (GCD may also run parts on it; the difference is one
//! thread's wake-up, and the caller has nothing else to do meanwhile).

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use engram::{Error, Result};

/// The closure of one `apply`, with its borrow's lifetime erased.
type PartFn = dyn Fn(usize) + Sync;

/// One `apply` call: the parts not yet claimed and those not yet finished.
struct Job {
    /// Points at the caller's closure, which outlives the job's use of it:
    /// `apply` returns only after `unfinished` reaches 0, and no worker
    /// calls it after finishing its part.
    f: *const PartFn,
    parts: usize,
    next: AtomicUsize,
    unfinished: Mutex<usize>,
    all_done: Condvar,
    panicked: AtomicBool,
}

// SAFETY: `f` is `Sync` and only called while `apply`'s borrow is alive
// (see the field's doc); the rest are thread-safe types.
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

impl Job {
    /// Claims the next part, if any is left.
    fn claim(&self) -> Option<usize> {
        let part = self.next.fetch_add(1, Ordering::Relaxed);
        (part < self.parts).then_some(part)
    }

    fn run(&self, part: usize) {
        // SAFETY: the job is unfinished (this part has not reported), so
        // `apply` is still blocked and the closure alive.
        let f = unsafe { &*self.f };
        if catch_unwind(AssertUnwindSafe(|| f(part))).is_err() {
            self.panicked.store(true, Ordering::Relaxed);
        }
        let mut unfinished = lock(&self.unfinished);
        *unfinished -= 1;
        if *unfinished == 0 {
            self.all_done.notify_all();
        }
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Arc<Job>>,
    shutdown: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The pool: `threads` workers started once, joined on drop.
pub(in crate::schedule) struct ApplyPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl ApplyPool {
    /// Starts `threads` workers.
    pub(in crate::schedule) fn new(threads: usize) -> Result<ApplyPool> {
        let shared = Arc::new(Shared::default());
        let mut pool = ApplyPool {
            shared: shared.clone(),
            workers: Vec::with_capacity(threads),
        };
        for i in 0..threads {
            let shared = shared.clone();
            let worker = std::thread::Builder::new()
                .name(format!("ds4-gcd-{i}"))
                .spawn(move || work(&shared))
                .map_err(|e| Error::io("ds4 read pool thread", e))?;
            // On an error above, `pool` is dropped: the started workers are
            // told to stop and joined.
            pool.workers.push(worker);
        }
        Ok(pool)
    }

    /// Runs `f(part)` for every part in `0..parts` on the workers and
    /// returns when all have finished. A panicking part is an error (the
    /// other parts still run to the end).
    pub(in crate::schedule) fn apply(
        &self,
        parts: usize,
        f: &(dyn Fn(usize) + Sync),
    ) -> Result<()> {
        if parts == 0 {
            return Ok(());
        }
        // SAFETY: only the lifetime is erased; this function does not
        // return before every part has run (the wait below), so no worker
        // calls `f` after the borrow ends.
        let f: *const PartFn = unsafe { std::mem::transmute(f) };
        let job = Arc::new(Job {
            f,
            parts,
            next: AtomicUsize::new(0),
            unfinished: Mutex::new(parts),
            all_done: Condvar::new(),
            panicked: AtomicBool::new(false),
        });
        {
            let mut queue = lock(&self.shared.queue);
            queue.jobs.push_back(job.clone());
        }
        self.shared.work.notify_all();
        let mut unfinished = lock(&job.unfinished);
        while *unfinished > 0 {
            unfinished = job
                .all_done
                .wait(unfinished)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(unfinished);
        if job.panicked.load(Ordering::Relaxed) {
            return Err(Error::io(
                "ds4 read pool",
                std::io::Error::other("a part of a parallel read panicked"),
            ));
        }
        Ok(())
    }
}

/// A worker: takes parts of the oldest job with parts left, until shutdown.
fn work(shared: &Shared) {
    loop {
        let (job, part) = {
            let mut queue = lock(&shared.queue);
            loop {
                if let Some(front) = queue.jobs.front().cloned() {
                    match front.claim() {
                        Some(part) => break (front, part),
                        // Every part is claimed: the job leaves the queue
                        // (its caller still waits for the parts running).
                        None => {
                            queue.jobs.pop_front();
                            continue;
                        }
                    }
                }
                if queue.shutdown {
                    return;
                }
                queue = shared
                    .work
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        job.run(part);
    }
}

impl Drop for ApplyPool {
    fn drop(&mut self) {
        lock(&self.shared.queue).shutdown = true;
        self.shared.work.notify_all();
        for worker in self.workers.drain(..) {
            // A worker catches its parts' panics, so it ends normally.
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_part_runs_once_and_apply_waits_for_all() {
        let pool = ApplyPool::new(4).unwrap();
        for parts in [1, 3, 16, 100] {
            let hits: Vec<AtomicU64> = (0..parts).map(|_| AtomicU64::new(0)).collect();
            pool.apply(parts, &|i| {
                std::thread::sleep(std::time::Duration::from_micros(200));
                hits[i].fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
        pool.apply(0, &|_| unreachable!()).unwrap();
    }

    #[test]
    fn parts_run_in_parallel_on_the_workers() {
        let pool = ApplyPool::new(8).unwrap();
        let threads = Mutex::new(std::collections::HashSet::new());
        pool.apply(8, &|_| {
            lock(&threads).insert(std::thread::current().id());
            std::thread::sleep(std::time::Duration::from_millis(20));
        })
        .unwrap();
        let seen = lock(&threads);
        assert!(seen.len() > 1, "parts all ran on one thread");
        assert!(!seen.contains(&std::thread::current().id()));
    }

    #[test]
    fn a_panicking_part_is_an_error_and_the_pool_survives() {
        let pool = ApplyPool::new(2).unwrap();
        let done = AtomicU64::new(0);
        let r = pool.apply(4, &|i| {
            if i == 1 {
                panic!("part 1 fails");
            }
            done.fetch_add(1, Ordering::Relaxed);
        });
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::Relaxed), 3);
        pool.apply(2, &|_| {}).unwrap();
    }
}
