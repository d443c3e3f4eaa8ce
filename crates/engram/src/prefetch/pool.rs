//! The engine's persistent reader threads and their queues.
//!
//! Why a persistent pool rather than threads spawned per prefill: with
//! several sequences at once, per-prefill threads multiply (two per table
//! per sequence) and each competes for the device in no particular order.
//! One pool per engine bounds the thread count, lets one queue order every
//! read by when a consumer needs it (a chunk a consumer is blocked on first,
//! then earlier chunks before later ones, table 0 before table 1), and costs
//! no thread creation on the critical path of a short prompt. Decode steps
//! get threads of their own so a step never waits behind a prefill batch;
//! hints get threads of their own too, in a scheduling class whose wake-up
//! never takes the core of the thread that queued them (the forward pass),
//! and are served only when no demand work is queued.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::guard::PanicSwitch;
use super::sync::lock_std as lock;
use crate::io::threads::{apply_hint_class, ReaderSched};

/// A unit of work for a pool thread.
pub(crate) trait Task: Send {
    /// Does the work.
    fn run(self: Box<Self>);
    /// Drops the work without doing it (cancellation or shutdown); must
    /// release whatever the task holds on its owner.
    fn abandon(self: Box<Self>);
    /// Identity of the job the task belongs to (for cancellation).
    fn owner(&self) -> u64;
    /// Drops work that is no longer needed (its results have been
    /// superseded) without failing anyone; by default as [`Task::abandon`].
    fn retire(self: Box<Self>) {
        self.abandon();
    }
    /// Order among demand tasks: smaller runs first. Read at dispatch, so it
    /// may change while queued (a consumer starting to block raises it).
    fn urgency(&self) -> (u32, u32, u32) {
        (0, 0, 0)
    }
    /// Order among hint tasks: the largest probability runs first, then
    /// the nearest position, then the oldest. Read at dispatch, so it may
    /// change while queued (the same guess offered again, likelier).
    fn hint_rank(&self) -> (f32, u64) {
        (0.0, 0)
    }
    /// True when the work is no longer wanted (a hint a begun step made
    /// stale): [`PoolShared::drop_stale_hints`] abandons it.
    fn stale(&self) -> bool {
        false
    }
}

/// A job whose readers stopped for want of room its consumer frees without
/// waking anyone (a prefill whose ring is full): the pool looks at it again
/// every [`PARK_POLL`] until it is no longer parked.
pub(crate) trait Parked: Send + Sync {
    /// Schedules what the freed room allows; true while still parked (look
    /// again later), false once work is in flight or none is left.
    fn repoll(self: Arc<Self>) -> bool;
}

/// How often an idle general thread looks at the parked jobs.
///
/// Why poll at all: a consumer whose rows are ready frees ring room at every
/// wait, and waking a reader from there (a futex wake, and on a small
/// machine the woken reader taking the consumer's core) cost the forward
/// thread 10-20 us a chunk and now and then 1-2 ms (docs/bench.md, "Ready
/// waits wake no one"). The consumer wakes the readers itself only when
/// they are idle and less than a ring chunk ahead of it, so this interval
/// only has to be short against the time the consumer takes to use up a
/// ring chunk of rows it already has.
pub(crate) const PARK_POLL: Duration = Duration::from_millis(2);

#[derive(Default)]
struct Queues {
    decode: VecDeque<Box<dyn Task>>,
    demand: Vec<Box<dyn Task>>,
    hints: VecDeque<Box<dyn Task>>,
    shutdown: bool,
    /// A general thread is waiting with a [`PARK_POLL`] timeout.
    poller: bool,
}

/// What the threads and the submitters share.
pub(crate) struct PoolShared {
    queues: Mutex<Queues>,
    general: Condvar,
    decode: Condvar,
    hint: Condvar,
    max_hints: usize,
    /// Parked jobs by owner id (see [`Parked`]). Its own lock, taken before
    /// the queues' when both are (a repoll submits tasks) and never while
    /// holding them; held through a poll, so a job that leaves the list
    /// ([`PoolShared::unpark`]) is held by no poll once that returns.
    parked: Mutex<ParkedList>,
    /// The parked list is not empty (read by threads holding the queues).
    any_parked: AtomicBool,
    /// Panics a test injects into tasks (a no-op outside tests).
    pub(crate) faults: PanicSwitch,
}

/// The pool: its shared queues and its threads (joined on shutdown).
pub(crate) struct Pool {
    shared: Arc<PoolShared>,
    threads: Vec<JoinHandle<()>>,
}

type ParkedList = Vec<(u64, Weak<dyn Parked>)>;

#[derive(Clone, Copy)]
enum Role {
    General,
    Decode,
    Hint,
}

/// Threads that serve hints in an engine's pool.
///
/// Why threads of their own: a hint is queued by the forward pass's thread
/// (`Sequence::hint`), and the reader it wakes took that thread's core on a
/// small machine. On 2 cores, 175 of 499 hint calls of a Qwen4-Exp decode
/// lasted over 60 us, 172 of them with an involuntary context switch of
/// the caller and none without (mean 50.9 us, p90 173 us;
/// docs/log/2026-12-06-hint-threads.md). These threads run in
/// [`apply_hint_class`]'s class, whose wake-up never preempts. As many as
/// the general threads, at most two: a hint task hands its rows to the
/// source, which reads them in parallel, so two candidates in flight keep
/// the device busy between demand reads.
pub(crate) fn hint_threads(general: usize) -> usize {
    general.min(2)
}

impl Pool {
    /// Starts `general` threads (decode, then prefill), `decode` threads
    /// (decode steps only) and `hint` threads (hints only, once no decode
    /// or prefill task is queued): the decode threads in the scheduling
    /// class `readers`, the general ones in [`ReaderSched::below_realtime`]
    /// of it and the hint threads in [`apply_hint_class`]'s.
    pub(crate) fn start(
        general: usize,
        decode: usize,
        hint: usize,
        max_hints: usize,
        readers: ReaderSched,
    ) -> std::io::Result<Pool> {
        let shared = Arc::new(PoolShared {
            queues: Mutex::new(Queues::default()),
            general: Condvar::new(),
            decode: Condvar::new(),
            hint: Condvar::new(),
            max_hints,
            parked: Mutex::new(Vec::new()),
            any_parked: AtomicBool::new(false),
            faults: PanicSwitch::default(),
        });
        let mut pool = Pool {
            shared,
            threads: Vec::new(),
        };
        let roles = std::iter::repeat_n(Role::General, general)
            .chain(std::iter::repeat_n(Role::Decode, decode))
            .chain(std::iter::repeat_n(Role::Hint, hint));
        for (i, role) in roles.enumerate() {
            let shared = pool.shared.clone();
            let name = match role {
                Role::General => format!("engram-read-{i}"),
                Role::Decode => format!("engram-step-{i}"),
                Role::Hint => format!("engram-hint-{i}"),
            };
            let handle = std::thread::Builder::new()
                .name(name)
                .spawn(move || worker(&shared, role, readers))?;
            pool.threads.push(handle);
        }
        Ok(pool)
    }

    /// The submission side, for jobs to hold.
    pub(crate) fn shared(&self) -> Arc<PoolShared> {
        self.shared.clone()
    }

    /// Abandons all queued work, stops the threads and joins them (each
    /// finishes the task it is running first).
    pub(crate) fn shutdown(&mut self) {
        let abandoned = {
            let mut q = lock(&self.shared.queues);
            q.shutdown = true;
            let mut all: Vec<Box<dyn Task>> = q.decode.drain(..).collect();
            all.append(&mut q.demand);
            all.extend(q.hints.drain(..));
            all
        };
        for task in abandoned {
            task.abandon();
        }
        self.shared.general.notify_all();
        self.shared.decode.notify_all();
        self.shared.hint.notify_all();
        for handle in self.threads.drain(..) {
            // Workers catch task panics, so a join error is not expected;
            // the thread is gone either way.
            let _ = handle.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl PoolShared {
    /// True once the pool was shut down (its engine dropped).
    pub(crate) fn is_shutdown(&self) -> bool {
        lock(&self.queues).shutdown
    }

    /// Queues a decode step's tasks (one per table) under one lock and wakes
    /// one decode thread per task. General threads are not woken: they take
    /// decode work when they next look, but waking them as well made the
    /// forward thread that calls `step_begin` lose its core to a crowd of
    /// threads with nothing to do (measured: 60-150 us per step on 2 cores).
    pub(crate) fn submit_decode(&self, tasks: Vec<Box<dyn Task>>) {
        let count = tasks.len();
        let queued = self.enqueue(tasks, |q, tasks| {
            q.decode.extend(tasks);
            None
        });
        if queued {
            for _ in 0..count {
                self.decode.notify_one();
            }
        }
    }

    /// Queues a prefill task.
    pub(crate) fn submit_demand(&self, task: Box<dyn Task>) {
        let queued = self.enqueue([task], |q, [task]| {
            q.demand.push(task);
            None
        });
        if queued {
            self.general.notify_one();
        }
    }

    /// Queues hint tasks under one lock (so the first to run is the
    /// likeliest of them all, not the first pushed), dropping the least
    /// likely (the oldest of those) beyond the bound.
    pub(crate) fn submit_hints(&self, tasks: Vec<Box<dyn Task>>) {
        if tasks.is_empty() {
            return;
        }
        let max_hints = self.max_hints;
        let mut displaced = Vec::new();
        let queued = self.enqueue(tasks, |q, tasks| {
            q.hints.extend(tasks);
            while q.hints.len() > max_hints {
                let worst = pick(&q.hints, |a, b| rank_order(b, a));
                displaced.extend(worst.and_then(|i| q.hints.remove(i)));
            }
            None
        });
        // Abandoned outside the lock, as `enqueue` does.
        displaced.into_iter().for_each(|task| task.abandon());
        // One hint thread is woken here; each that takes a hint wakes the
        // next while hints are left (`worker`). So the caller, the forward
        // pass's thread or a decode reader between its tables, pays for
        // one wake-up, not one per candidate, and keeps its core.
        if queued {
            self.hint.notify_one();
        }
    }

    /// Removes and abandons the queued hint tasks of `owner` that are
    /// stale ([`Task::stale`]): they would hold queue room, and a thread,
    /// for reads nobody will use.
    pub(crate) fn drop_stale_hints(&self, owner: u64) {
        let removed = {
            let mut q = lock(&self.queues);
            let mut removed = Vec::new();
            let mut kept = VecDeque::with_capacity(q.hints.len());
            for t in q.hints.drain(..) {
                if t.owner() == owner && t.stale() {
                    removed.push(t);
                } else {
                    kept.push_back(t);
                }
            }
            q.hints = kept;
            removed
        };
        removed.into_iter().for_each(|task| task.abandon());
    }

    /// Hands `tasks` to `push` under the queue lock and returns true; once
    /// the pool is shut down, abandons them instead (their waiters get
    /// `Cancelled`) and returns false. A task `push` returns (one it pushed
    /// out of a bounded queue) is abandoned after the lock is released, as
    /// are the shut-down pool's tasks: abandoning runs the task's release
    /// code (waking its waiters), which has no business under the lock.
    fn enqueue<T: IntoIterator<Item = Box<dyn Task>>>(
        &self,
        tasks: T,
        push: impl FnOnce(&mut Queues, T) -> Option<Box<dyn Task>>,
    ) -> bool {
        let mut q = lock(&self.queues);
        if q.shutdown {
            drop(q);
            tasks.into_iter().for_each(|task| task.abandon());
            return false;
        }
        let displaced = push(&mut q, tasks);
        drop(q);
        if let Some(task) = displaced {
            task.abandon();
        }
        true
    }

    /// Puts `job` of `owner` on the parked list (once) and makes sure an idle
    /// general thread polls it.
    pub(crate) fn park(&self, owner: u64, job: Weak<dyn Parked>) {
        {
            let mut parked = lock(&self.parked);
            if parked.iter().all(|(id, _)| *id != owner) {
                parked.push((owner, job));
            }
            self.any_parked.store(true, Ordering::Relaxed);
        }
        // A thread already polling will see it; otherwise wake one (a thread
        // that is busy now sees the flag when it next runs out of work).
        if !lock(&self.queues).poller {
            self.general.notify_one();
        }
    }

    /// Takes `owner` off the parked list; once this returns, no poll holds
    /// the job.
    pub(crate) fn unpark(&self, owner: u64) {
        let mut parked = lock(&self.parked);
        parked.retain(|(id, _)| *id != owner);
        self.any_parked.store(!parked.is_empty(), Ordering::Relaxed);
    }

    /// Repolls every parked job, keeping those still parked.
    fn poll_parked(&self) {
        let mut parked = lock(&self.parked);
        parked.retain(|(_, job)| job.upgrade().is_some_and(|job| job.repoll()));
        self.any_parked.store(!parked.is_empty(), Ordering::Relaxed);
    }

    /// Removes and abandons every queued task of `owner`.
    pub(crate) fn cancel_owner(&self, owner: u64) {
        let removed = {
            let mut q = lock(&self.queues);
            let q = &mut *q;
            let mut removed = Vec::new();
            let mut keep = Vec::with_capacity(q.demand.len());
            for t in q.demand.drain(..) {
                if t.owner() == owner {
                    removed.push(t);
                } else {
                    keep.push(t);
                }
            }
            q.demand = keep;
            take_owned(&mut q.decode, owner, &mut removed);
            take_owned(&mut q.hints, owner, &mut removed);
            removed
        };
        for task in removed {
            task.abandon();
        }
    }

    /// Removes the queued decode tasks of `owner` (not those running) and
    /// retires them ([`Task::retire`]).
    ///
    /// Why: a new step supersedes the last one's reads. A step task a busy
    /// CPU has not run yet (the consumer read its tables itself) would
    /// otherwise hold the next `step_begin` until a thread ran it only to
    /// find nothing left to do: measured on 2 busy cores as steps of 1-10
    /// ms (docs/bench.md, "Reader scheduling").
    pub(crate) fn retire_decode(&self, owner: u64) {
        let mut removed = Vec::new();
        take_owned(&mut lock(&self.queues).decode, owner, &mut removed);
        for task in removed {
            task.retire();
        }
    }
}

/// Moves the tasks of `owner` from `queue` to `removed`, keeping the
/// others in order.
fn take_owned(queue: &mut VecDeque<Box<dyn Task>>, owner: u64, removed: &mut Vec<Box<dyn Task>>) {
    // Mostly there is none (a step's reader has run by the next step):
    // then the queue is left as it is, nothing allocated.
    if !queue.iter().any(|t| t.owner() == owner) {
        return;
    }
    let mut kept = VecDeque::with_capacity(queue.len());
    for t in queue.drain(..) {
        if t.owner() == owner {
            removed.push(t);
        } else {
            kept.push_back(t);
        }
    }
    *queue = kept;
}

fn next_task(q: &mut Queues, role: Role) -> Option<Box<dyn Task>> {
    match role {
        Role::Decode => q.decode.pop_front(),
        Role::General => q.decode.pop_front().or_else(|| {
            let best = q
                .demand
                .iter()
                .enumerate()
                .min_by_key(|(_, t)| t.urgency())
                .map(|(i, _)| i)?;
            Some(q.demand.swap_remove(best))
        }),
        // Hints only once no demand waits for a thread.
        Role::Hint if q.decode.is_empty() && q.demand.is_empty() => {
            let best = pick(&q.hints, rank_order)?;
            q.hints.remove(best)
        }
        Role::Hint => None,
    }
}

/// Hint `a` runs before `b` (`Less`): larger probability, then nearer
/// position. Equal ranks compare equal, so [`pick`] keeps the oldest.
fn rank_order(a: &(f32, u64), b: &(f32, u64)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// The index of the first hint that no later one orders before under
/// `order` (the first minimum: the oldest among equals).
fn pick(
    hints: &VecDeque<Box<dyn Task>>,
    order: impl Fn(&(f32, u64), &(f32, u64)) -> std::cmp::Ordering,
) -> Option<usize> {
    let mut best: Option<(usize, (f32, u64))> = None;
    for (i, t) in hints.iter().enumerate() {
        let rank = t.hint_rank();
        if best.is_none_or(|(_, b)| order(&rank, &b).is_lt()) {
            best = Some((i, rank));
        }
    }
    best.map(|(i, _)| i)
}

fn worker(shared: &PoolShared, role: Role, readers: ReaderSched) {
    match role {
        Role::Decode => {
            readers.apply_to_current_thread();
        }
        // A prefill batch must never hold off a decode step's read:
        // `SCHED_FIFO` threads of one priority do not preempt each other,
        // so the batch would run to its end first.
        Role::General => {
            readers.below_realtime().apply_to_current_thread();
        }
        Role::Hint => apply_hint_class(),
    }
    let cv = match role {
        Role::General => &shared.general,
        Role::Decode => &shared.decode,
        Role::Hint => &shared.hint,
    };
    let mut q = lock(&shared.queues);
    loop {
        if q.shutdown {
            return;
        }
        match next_task(&mut q, role) {
            Some(task) => {
                // Hint threads are woken one at a time (`submit_hints`): one
                // that takes a hint while more wait wakes the next, so none
                // is left queued behind this one. Hints also wait while
                // demand is queued: the thread that takes the last of it
                // hands them on.
                let chain = !q.hints.is_empty()
                    && (matches!(role, Role::Hint) || q.decode.is_empty() && q.demand.is_empty());
                drop(q);
                if chain {
                    shared.hint.notify_one();
                }
                // Tasks publish their own failure on a panic (and leave
                // their in-flight counts as they unwind); catching here as
                // well keeps the thread, so the pool never shrinks.
                let _ = catch_unwind(AssertUnwindSafe(|| task.run()));
                q = lock(&shared.queues);
            }
            // One idle general thread polls the parked jobs; the others
            // sleep until woken.
            None if matches!(role, Role::General)
                && !q.poller
                && shared.any_parked.load(Ordering::Relaxed) =>
            {
                q.poller = true;
                let (g, timeout) = match cv.wait_timeout(q, PARK_POLL) {
                    Ok(r) => r,
                    Err(p) => p.into_inner(),
                };
                q = g;
                q.poller = false;
                if timeout.timed_out() && !q.shutdown {
                    drop(q);
                    shared.poll_parked();
                    q = lock(&shared.queues);
                }
            }
            None => {
                q = match cv.wait(q) {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::time::Duration;

    /// How long a test waits for a probe before it fails.
    const LIMIT: Duration = Duration::from_secs(10);

    /// A task that reports its name when run (or abandoned) and, if given a
    /// gate, blocks until the gate opens.
    struct Probe {
        name: &'static str,
        owner: u64,
        log: mpsc::Sender<&'static str>,
        gate: Option<mpsc::Receiver<()>>,
    }

    impl Task for Probe {
        fn run(self: Box<Self>) {
            if let Some(gate) = &self.gate {
                self.log.send("gate running").unwrap();
                gate.recv_timeout(LIMIT).unwrap();
            }
            self.log.send(self.name).unwrap();
        }
        fn abandon(self: Box<Self>) {
            self.log.send("abandoned").unwrap();
        }
        fn owner(&self) -> u64 {
            self.owner
        }
    }

    fn probe(name: &'static str, log: &mpsc::Sender<&'static str>) -> Box<Probe> {
        Box::new(Probe {
            name,
            owner: 1,
            log: log.clone(),
            gate: None,
        })
    }

    /// The probes' log and the gate of a task holding a pool's only
    /// general thread.
    struct Held {
        log: mpsc::Sender<&'static str>,
        seen: mpsc::Receiver<&'static str>,
        /// Sending opens the gate.
        open: mpsc::Sender<()>,
    }

    /// A pool of one general, one decode and one hint thread, bounded to
    /// `max_hints` queued hints, whose general thread is occupied by a
    /// gated task of `owner` (running when this returns).
    fn held_pool(max_hints: usize, owner: u64) -> (Pool, Arc<PoolShared>, Held) {
        let pool = Pool::start(1, 1, 1, max_hints, ReaderSched::Normal).unwrap();
        let shared = pool.shared();
        let (log, seen) = mpsc::channel();
        let (open, gate) = mpsc::channel();
        shared.submit_demand(Box::new(Probe {
            name: "gate",
            owner,
            log: log.clone(),
            gate: Some(gate),
        }));
        let running = seen.recv_timeout(LIMIT).unwrap();
        assert_eq!(running, "gate running");
        (pool, shared, Held { log, seen, open })
    }

    /// A parked job that says it is parked `until` more times.
    struct Counted {
        polls: std::sync::atomic::AtomicUsize,
        until: usize,
    }

    impl Parked for Counted {
        fn repoll(self: Arc<Self>) -> bool {
            self.polls.fetch_add(1, Ordering::Relaxed) + 1 < self.until
        }
    }

    fn counted(until: usize) -> Arc<Counted> {
        Arc::new(Counted {
            polls: Default::default(),
            until,
        })
    }

    #[test]
    fn a_parked_job_is_polled_until_it_is_no_longer_parked_or_leaves() {
        let mut pool = Pool::start(2, 1, 1, 4, ReaderSched::Normal).unwrap();
        let shared = pool.shared();
        let polls = |job: &Counted| job.polls.load(Ordering::Relaxed);
        let deadline = std::time::Instant::now() + LIMIT;
        let polled = |job: &Counted, n: usize| {
            while polls(job) < n {
                assert!(std::time::Instant::now() < deadline, "{}", polls(job));
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let job = counted(3);
        let weak: Weak<Counted> = Arc::downgrade(&job);
        shared.park(7, weak.clone());
        shared.park(7, weak); // once on the list
        polled(&job, 3);
        std::thread::sleep(PARK_POLL * 5);
        assert_eq!(polls(&job), 3, "polled after it was no longer parked");
        // Parked for good, then taken off: no poll once `unpark` returns.
        let job = counted(usize::MAX);
        let weak: Weak<Counted> = Arc::downgrade(&job);
        shared.park(8, weak);
        polled(&job, 2);
        shared.unpark(8);
        let seen = polls(&job);
        std::thread::sleep(PARK_POLL * 5);
        assert_eq!(polls(&job), seen, "polled after unpark");
        assert_eq!(Arc::strong_count(&job), 1, "a poll kept the job");
        pool.shutdown();
    }

    #[test]
    fn hints_run_only_when_no_demand_is_queued() {
        // Occupy the only general thread and queue demand behind it: the
        // idle hint thread leaves the hint until the demand is taken.
        let (mut pool, shared, Held { log, seen, open }) = held_pool(8, 1);
        shared.submit_demand(probe("demand", &log));
        shared.submit_hints(vec![probe("hint", &log)]);
        // A decode step is served by the decode thread meanwhile.
        shared.submit_decode(vec![probe("decode", &log)]);
        assert_eq!(seen.recv_timeout(LIMIT).unwrap(), "decode");
        open.send(()).unwrap();
        // The hint thread may start once the demand is taken, so the two
        // may log in either order; neither ran while the demand was queued.
        let mut order: Vec<_> = (0..3).map(|_| seen.recv_timeout(LIMIT).unwrap()).collect();
        order[1..].sort_unstable();
        assert_eq!(order, ["gate", "demand", "hint"]);
        pool.shutdown();
    }

    /// A hint probe of a given rank.
    struct Ranked {
        probe: Box<Probe>,
        rank: (f32, u64),
    }

    impl Task for Ranked {
        fn run(self: Box<Self>) {
            self.probe.run();
        }
        fn abandon(self: Box<Self>) {
            let _ = self.probe.log.send(self.probe.name);
        }
        fn owner(&self) -> u64 {
            self.probe.owner
        }
        fn hint_rank(&self) -> (f32, u64) {
            self.rank
        }
    }

    #[test]
    fn hints_run_likeliest_first_and_the_least_likely_is_pushed_out() {
        let (mut pool, shared, Held { log, seen, open }) = held_pool(4, 1);
        // Queued demand holds the hints until the gate opens.
        shared.submit_demand(probe("demand", &log));
        let ranked = |name, rank| -> Box<dyn Task> {
            Box::new(Ranked {
                probe: probe(name, &log),
                rank,
            })
        };
        shared.submit_hints(vec![
            ranked("p0.1", (0.1, 5)),
            ranked("p0.8 far", (0.8, 6)),
            ranked("p0.8 near", (0.8, 5)),
            ranked("p0.5 old", (0.5, 5)),
        ]);
        // Over the bound of 4: the least likely goes (abandoned: logged
        // by name here), not the oldest.
        shared.submit_hints(vec![ranked("p0.5 new", (0.5, 5))]);
        assert_eq!(seen.recv_timeout(LIMIT).unwrap(), "p0.1");
        open.send(()).unwrap();
        let mut order: Vec<_> = (0..6).map(|_| seen.recv_timeout(LIMIT).unwrap()).collect();
        // The demand may log among the hints, which start once it is taken.
        order.retain(|name| *name != "demand");
        assert_eq!(
            order,
            ["gate", "p0.8 near", "p0.8 far", "p0.5 old", "p0.5 new"]
        );
        pool.shutdown();
    }

    /// A hint that waits (up to [`LIMIT`]) until `of` hints have started,
    /// then says whether they all ran at once.
    struct Together {
        started: Arc<AtomicUsize>,
        of: usize,
        log: mpsc::Sender<&'static str>,
    }

    impl Task for Together {
        fn run(self: Box<Self>) {
            self.started.fetch_add(1, Ordering::SeqCst);
            let deadline = std::time::Instant::now() + LIMIT;
            while self.started.load(Ordering::SeqCst) < self.of
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            let all = self.started.load(Ordering::SeqCst) >= self.of;
            self.log.send(if all { "together" } else { "alone" }).unwrap();
        }
        fn abandon(self: Box<Self>) {
            self.log.send("abandoned").unwrap();
        }
        fn owner(&self) -> u64 {
            1
        }
    }

    #[test]
    fn hints_submitted_together_run_on_as_many_threads_though_one_is_woken() {
        let mut pool = Pool::start(1, 1, 3, 8, ReaderSched::Normal).unwrap();
        let shared = pool.shared();
        // Every thread asleep on its condition variable, so only the wakes
        // bring them to the queue (a thread starting up would look at it
        // on its own).
        std::thread::sleep(Duration::from_millis(100));
        let (log, seen) = mpsc::channel();
        let started = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<Box<dyn Task>> = (0..3)
            .map(|_| -> Box<dyn Task> {
                Box::new(Together {
                    started: started.clone(),
                    of: 3,
                    log: log.clone(),
                })
            })
            .collect();
        shared.submit_hints(tasks);
        let said: Vec<_> = (0..3).map(|_| seen.recv_timeout(LIMIT * 2).unwrap()).collect();
        assert_eq!(said, ["together"; 3], "each thread woke the next");
        pool.shutdown();
    }

    /// A task that reports the scheduling policy of the thread it runs on.
    #[cfg(target_os = "linux")]
    struct Policy(mpsc::Sender<libc::c_int>);

    #[cfg(target_os = "linux")]
    impl Task for Policy {
        fn run(self: Box<Self>) {
            // SAFETY: a plain query of the calling thread's policy.
            let policy = unsafe { libc::sched_getscheduler(0) };
            self.0.send(policy).unwrap();
        }
        fn abandon(self: Box<Self>) {
            self.0.send(-1).unwrap();
        }
        fn owner(&self) -> u64 {
            1
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn hints_run_on_threads_whose_wake_up_does_not_preempt_and_demand_does_not() {
        let mut pool = Pool::start(2, 1, 2, 8, ReaderSched::Normal).unwrap();
        let shared = pool.shared();
        let (tx, rx) = mpsc::channel();
        shared.submit_hints(vec![Box::new(Policy(tx.clone()))]);
        assert_eq!(rx.recv_timeout(LIMIT).unwrap(), libc::SCHED_BATCH);
        shared.submit_demand(Box::new(Policy(tx)));
        assert_eq!(rx.recv_timeout(LIMIT).unwrap(), libc::SCHED_OTHER);
        pool.shutdown();
    }

    #[test]
    fn shutdown_abandons_queued_work_and_joins() {
        let (mut pool, shared, Held { log, seen, open }) = held_pool(1, 2);
        shared.submit_demand(probe("queued", &log));
        // The hint bound is 1: the older hint is dropped (abandoned).
        shared.submit_hints(vec![probe("old hint", &log)]);
        shared.submit_hints(vec![probe("new hint", &log)]);
        assert_eq!(seen.recv_timeout(LIMIT).unwrap(), "abandoned");
        shared.cancel_owner(1);
        assert_eq!(seen.recv_timeout(LIMIT).unwrap(), "abandoned");
        assert_eq!(seen.recv_timeout(LIMIT).unwrap(), "abandoned");
        open.send(()).unwrap();
        pool.shutdown();
        let rest: Vec<_> = seen.try_iter().collect();
        assert_eq!(rest, ["gate"], "{rest:?}");
        assert!(shared.is_shutdown());
        shared.submit_demand(probe("late", &log));
        assert_eq!(seen.recv_timeout(LIMIT).unwrap(), "abandoned");
    }
}
