//! The io_uring engine (Linux): one ring, owned by one submission thread,
//! kept as full as the work allows.
//!
//! Callers hand a batch to the ring thread and block until it replies. The
//! thread keeps every active batch in one ring (two tables read
//! concurrently share it), fills the submission queue up to its depth,
//! serves demand batches first, one priority's batches in the order they
//! came, and caps hint batches at a quarter of the depth,
//! continues short reads from where they stopped, retries `EINTR`/`EAGAIN`
//! and turns any other completion error into the batch's error. A batch is
//! answered only when none of its reads is still in the kernel.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use io_uring::{opcode, types, IoUring};

use super::batch::{
    check_submission, eof_error, BounceBuf, Completed, OpError, Pending, ReadEngine,
};
use super::files::TableFiles;
use super::order::ReadOrder;
use super::plan::ReadOp;
use super::threads::ReaderSched;
use super::{Priority, PAGE};
use crate::{Error, Result};

/// Consecutive retries of one read on `EINTR`/`EAGAIN` (without progress)
/// before it counts as failed.
const MAX_RETRIES: u32 = 1000;

/// One batch handed to the ring thread.
struct Submission {
    ops: Vec<ReadOp>,
    /// The bounce buffer, owned by the ring thread until it replies; the
    /// kernel writes through `base`.
    buf: BounceBuf,
    base: *mut u8,
    priority: Priority,
    reply: Sender<Completed>,
}

// SAFETY: `base` points into `buf`, which travels with it (the heap memory
// does not move when the submission does); the ring thread replies, giving
// the buffer back, only when none of the batch's reads is in the kernel.
unsafe impl Send for Submission {}

/// Progress of one read.
#[derive(Clone, Copy)]
struct OpState {
    got: usize,
    retries: u32,
    started: Option<Instant>,
}

/// A batch the ring thread is working on.
struct Active {
    sub: Submission,
    /// Next read never submitted.
    next: usize,
    /// Reads to (re)submit before new ones: continuations and retries.
    again: VecDeque<usize>,
    in_flight: usize,
    state: Vec<OpState>,
    latencies_ns: Vec<u64>,
    failure: Option<OpError>,
}

impl Active {
    fn has_work(&self) -> bool {
        self.failure.is_none() && (!self.again.is_empty() || self.next < self.sub.ops.len())
    }

    fn finished(&self) -> bool {
        self.in_flight == 0 && !self.has_work()
    }

    fn fail(&mut self, op: usize, error: io::Error) {
        if self.failure.as_ref().is_none_or(|f| f.op > op) {
            self.failure = Some(OpError { op, error });
        }
    }
}

/// An io_uring engine with one ring of `depth` entries.
pub struct UringEngine {
    tx: Option<Sender<Submission>>,
    thread: Option<JoinHandle<()>>,
    // Keeps the descriptors the ring reads open for the thread's lifetime.
    _files: Arc<TableFiles>,
}

impl UringEngine {
    /// Sets up a ring of `depth` entries over `files` on its thread and
    /// checks it works (a `NOP` round trip): seccomp filters or
    /// `io_uring_disabled` can allow setup yet refuse submission. The
    /// thread, which submits and reaps every read, takes the scheduling
    /// class `readers` as the other reader threads do, and issues each
    /// batch's reads in `order`.
    pub fn new(
        files: Arc<TableFiles>,
        depth: usize,
        readers: ReaderSched,
        order: ReadOrder,
    ) -> Result<UringEngine> {
        let depth = depth.clamp(1, 4096);
        let fds = files.raw_fds();
        let direct = files.direct;
        let (tx, rx) = crossbeam_channel::unbounded();
        let (ready_tx, ready_rx) = crossbeam_channel::bounded::<io::Result<()>>(1);
        // The ring is created on the thread that uses it: with
        // SINGLE_ISSUER the creating task is the only one allowed to submit.
        let thread = std::thread::Builder::new()
            .name("engram-uring".into())
            .spawn(move || {
                readers.apply_to_current_thread();
                let ring = match setup_ring(depth as u32) {
                    Ok(ring) => ring,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                RingLoop::new(ring, fds, direct, depth, order).run(&rx);
            })
            .map_err(|e| Error::io("io_uring", e))?;
        let ready = ready_rx
            .recv()
            .unwrap_or_else(|_| Err(io::Error::other("io_uring thread exited during setup")));
        if let Err(e) = ready {
            let _ = thread.join();
            return Err(Error::io("io_uring", e));
        }
        Ok(UringEngine {
            tx: Some(tx),
            thread: Some(thread),
            _files: files,
        })
    }
}

/// Sets up a ring and checks it works.
///
/// Asks for cooperative, deferred task running with a single issuer (Linux
/// 6.1+): completions are then processed when the ring thread waits, not by
/// interrupting it, which is what one thread owning a ring wants. Older
/// kernels reject the flags; a plain ring is used then.
fn setup_ring(entries: u32) -> io::Result<IoUring> {
    let tuned = IoUring::builder()
        .setup_coop_taskrun()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries);
    let mut ring = match tuned {
        Ok(ring) => ring,
        Err(_) => IoUring::new(entries)?,
    };
    probe(&mut ring)?;
    Ok(ring)
}

/// Submits a `NOP` and waits for its completion.
fn probe(ring: &mut IoUring) -> io::Result<()> {
    let nop = opcode::Nop::new().build().user_data(u64::MAX);
    // SAFETY: a NOP references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("submission queue full"))?;
    ring.submit_and_wait(1)?;
    let cqe = ring
        .completion()
        .next()
        .ok_or_else(|| io::Error::other("no completion for NOP"))?;
    if cqe.result() < 0 {
        return Err(io::Error::from_raw_os_error(-cqe.result()));
    }
    Ok(())
}

impl ReadEngine for UringEngine {
    fn name(&self) -> &'static str {
        "uring"
    }

    fn submit(&self, ops: Vec<ReadOp>, buf: BounceBuf, priority: Priority) -> Pending {
        // The ring has three queues: demand (every priority that is needed
        // first), later prefill rows (the depth demand leaves), hints (the
        // same, capped).
        let priority = match priority {
            Priority::Hint => Priority::Hint,
            Priority::PrefillLater => Priority::PrefillLater,
            Priority::Demand | Priority::Prefill | Priority::Warm => Priority::Demand,
        };
        let mut buf = match check_submission(&ops, buf) {
            Ok(buf) => buf,
            Err(answer) => return answer,
        };
        let Some(tx) = self.tx.as_ref() else {
            let error = io::Error::other("io_uring engine shut down");
            return Pending::ready(Completed::immediate(buf, Some(error)));
        };
        let (reply_tx, reply_rx) = crossbeam_channel::bounded(1);
        let base = buf.as_mut_ptr();
        let sub = Submission {
            ops,
            buf,
            base,
            priority,
            reply: reply_tx,
        };
        if let Err(crossbeam_channel::SendError(sub)) = tx.send(sub) {
            let error = io::Error::other("io_uring thread is gone");
            return Pending::ready(Completed::immediate(sub.buf, Some(error)));
        }
        Pending::new(move || {
            // The thread drops the reply sender only after replying, or with
            // the submission (and its buffer) if it exits before taking it.
            reply_rx.recv().unwrap_or_else(|_| Completed {
                buf: None,
                latencies_ns: Vec::new(),
                failure: Some(OpError {
                    op: 0,
                    error: io::Error::other("io_uring thread is gone"),
                }),
            })
        })
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The ring thread's state.
struct RingLoop {
    ring: IoUring,
    fds: Vec<std::os::fd::RawFd>,
    direct: bool,
    depth: usize,
    order: ReadOrder,
    hint_cap: usize,
    slots: Vec<Option<Active>>,
    /// The occupied slots, in the order their batches came: one
    /// priority's batches are served first come, first served, as the
    /// pread pool's queue serves them (a later batch may hold a lower
    /// slot).
    arrivals: Vec<usize>,
    in_flight: usize,
    hint_in_flight: usize,
    closed: bool,
}

impl RingLoop {
    fn new(
        ring: IoUring,
        fds: Vec<std::os::fd::RawFd>,
        direct: bool,
        depth: usize,
        order: ReadOrder,
    ) -> RingLoop {
        RingLoop {
            ring,
            fds,
            direct,
            depth,
            order,
            hint_cap: (depth / 4).max(1),
            slots: Vec::new(),
            arrivals: Vec::new(),
            in_flight: 0,
            hint_in_flight: 0,
            closed: false,
        }
    }

    fn run(mut self, rx: &Receiver<Submission>) {
        loop {
            if !self.intake(rx) {
                return;
            }
            self.fill();
            if self.in_flight > 0 {
                if let Err(e) = self.submit_and_wait() {
                    self.break_down(e);
                    return;
                }
                self.reap();
            }
            self.answer_finished();
        }
    }

    /// Takes new batches: blocks when idle, polls otherwise. False when the
    /// engine is dropped and nothing is left to do.
    fn intake(&mut self, rx: &Receiver<Submission>) -> bool {
        let idle = self.in_flight == 0 && !self.slots.iter().flatten().any(Active::has_work);
        if idle && !self.closed {
            match rx.recv() {
                Ok(sub) => self.add(sub),
                Err(_) => self.closed = true,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(sub) => self.add(sub),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.closed = true;
                    break;
                }
            }
        }
        !(self.closed && self.slots.iter().all(Option::is_none))
    }

    fn add(&mut self, sub: Submission) {
        let n = sub.ops.len();
        let active = Active {
            sub,
            next: 0,
            again: VecDeque::new(),
            in_flight: 0,
            state: vec![
                OpState {
                    got: 0,
                    retries: 0,
                    started: None
                };
                n
            ],
            latencies_ns: Vec::with_capacity(n),
            failure: None,
        };
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(active);
                i
            }
            None => {
                self.slots.push(Some(active));
                self.slots.len() - 1
            }
        };
        self.arrivals.push(slot);
    }

    /// Pushes reads until the queue holds `depth`: demand batches first,
    /// then later prefill batches, then hints (at most `hint_cap`); within
    /// a priority, the batches in the order they came.
    fn fill(&mut self) {
        for priority in [Priority::Demand, Priority::PrefillLater, Priority::Hint] {
            for at in 0..self.arrivals.len() {
                let slot = self.arrivals[at];
                while self.in_flight < self.depth {
                    if priority == Priority::Hint && self.hint_in_flight >= self.hint_cap {
                        break;
                    }
                    let Some(active) = self.slots[slot].as_mut() else {
                        break;
                    };
                    if active.sub.priority != priority || !active.has_work() {
                        break;
                    }
                    let op = match active.again.pop_front() {
                        Some(op) => op,
                        None => {
                            active.next += 1;
                            let n = active.sub.ops.len();
                            self.order.op(active.next - 1, n, self.depth)
                        }
                    };
                    self.push_read(slot, op);
                }
            }
        }
    }

    /// Queues the rest of read `op` of batch `slot`.
    fn push_read(&mut self, slot: usize, op: usize) {
        let Some(active) = self.slots[slot].as_mut() else {
            return;
        };
        let read = active.sub.ops[op];
        let state = &mut active.state[op];
        state.started.get_or_insert_with(Instant::now);
        let got = state.got;
        // SAFETY: the range lies inside the caller's buffer (check_ops) and
        // belongs to this read alone; the caller waits for our reply.
        let ptr = unsafe { active.sub.base.add(read.buf_off + got) };
        let entry = opcode::Read::new(types::Fd(self.fds[read.file]), ptr, (read.len - got) as u32)
            .offset(read.offset + got as u64)
            .build()
            .user_data(((slot as u64) << 32) | op as u64);
        // SAFETY: the entry's buffer stays valid until its completion is
        // reaped (see above); the queue has room because in_flight < depth.
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            active.again.push_front(op);
            return;
        }
        active.in_flight += 1;
        self.in_flight += 1;
        if active.sub.priority == Priority::Hint {
            self.hint_in_flight += 1;
        }
    }

    fn submit_and_wait(&mut self) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.raw_os_error() == Some(libc::EINTR)
                        || e.raw_os_error() == Some(libc::EAGAIN) => {}
                // Completion queue full: reap, then submit again.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => self.reap(),
                Err(e) => return Err(e),
            }
        }
    }

    fn reap(&mut self) {
        let completions: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, result) in completions {
            self.complete((data >> 32) as usize, (data & 0xffff_ffff) as usize, result);
        }
    }

    /// Accounts one completion of read `op` of batch `slot`.
    fn complete(&mut self, slot: usize, op: usize, result: i32) {
        let direct = self.direct;
        let Some(active) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        active.in_flight -= 1;
        self.in_flight -= 1;
        if active.sub.priority == Priority::Hint {
            self.hint_in_flight -= 1;
        }
        let read = active.sub.ops[op];
        let state = &mut active.state[op];
        if result < 0 {
            let err = -result;
            if (err == libc::EINTR || err == libc::EAGAIN) && state.retries < MAX_RETRIES {
                state.retries += 1;
                active.again.push_back(op);
            } else {
                active.fail(op, io::Error::from_raw_os_error(err));
            }
            return;
        }
        state.got += result as usize;
        state.retries = 0;
        if state.got >= read.need {
            let started = state.started.unwrap_or_else(Instant::now);
            active
                .latencies_ns
                .push(started.elapsed().as_nanos() as u64);
        } else if result == 0 || (direct && state.got as u64 % PAGE != 0) {
            let got = state.got;
            active.fail(op, eof_error(&read, got));
        } else {
            active.again.push_back(op);
        }
    }

    /// Replies to every batch with nothing left in flight or to do.
    fn answer_finished(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(Active::finished) {
                self.arrivals.retain(|&s| s != index);
                if let Some(active) = slot.take() {
                    let _ = active.sub.reply.send(Completed {
                        buf: Some(active.sub.buf),
                        latencies_ns: active.latencies_ns,
                        failure: active.failure,
                    });
                }
            }
        }
    }

    /// The ring cannot submit any more (or the thread is ending): fail
    /// every batch. Buffers with reads still in the kernel are leaked, not
    /// freed.
    fn break_down(&mut self, error: io::Error) {
        self.arrivals.clear();
        for active in self.slots.iter_mut().filter_map(Option::take) {
            let Active {
                sub,
                next,
                in_flight,
                latencies_ns,
                ..
            } = active;
            let Submission { buf, reply, .. } = sub;
            let buf = if in_flight > 0 {
                // The kernel may still write into it: never free it.
                buf.leak();
                None
            } else {
                Some(buf)
            };
            let _ = reply.send(Completed {
                buf,
                latencies_ns,
                failure: Some(OpError {
                    op: next.saturating_sub(1),
                    error: io::Error::new(
                        error.kind(),
                        format!("io_uring submission failed: {error}"),
                    ),
                }),
            });
        }
    }
}

impl Drop for RingLoop {
    /// Runs on every exit of the ring thread, a panic included, before the
    /// ring is closed: batches still held are answered with an error, and
    /// their buffers leaked if the kernel may still write into them (a
    /// panic unwinding past them would otherwise free them under the
    /// kernel's writes).
    fn drop(&mut self) {
        if self.slots.iter().any(Option::is_some) {
            self.break_down(io::Error::other("the io_uring thread stopped"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A batch of one page read from `fd`, at `priority`.
    fn page_batch(fd_index: usize, priority: Priority) -> (Submission, Receiver<Completed>) {
        let mut buf = BounceBuf::zeroed(PAGE as usize).unwrap();
        let base = buf.as_mut_ptr();
        let (reply, replies) = crossbeam_channel::bounded(1);
        let sub = Submission {
            ops: vec![ReadOp {
                file: fd_index,
                offset: 0,
                len: PAGE as usize,
                need: PAGE as usize,
                buf_off: 0,
            }],
            buf,
            base,
            priority,
            reply,
        };
        (sub, replies)
    }

    #[test]
    fn a_priority_s_batches_are_served_in_the_order_they_came() {
        let ring = match setup_ring(4) {
            Ok(ring) => ring,
            Err(e) => {
                eprintln!("skipping: io_uring unavailable: {e}");
                return;
            }
        };
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // Depth 1: the one read queued says which batch is served first.
        let mut ring_loop = RingLoop::new(ring, vec![fds[0]], false, 1, ReadOrder::Spread);
        let (first, _first_reply) = page_batch(0, Priority::PrefillLater);
        let (second, _second_reply) = page_batch(0, Priority::PrefillLater);
        ring_loop.add(first);
        ring_loop.add(second);
        // The first batch is answered (as if its read were done), and a
        // third takes its lower slot.
        ring_loop.slots[0] = None;
        ring_loop.arrivals.retain(|&slot| slot != 0);
        let (third, _third_reply) = page_batch(0, Priority::PrefillLater);
        ring_loop.add(third);
        ring_loop.fill();
        let in_flight = |slot: usize| ring_loop.slots[slot].as_ref().unwrap().in_flight;
        assert_eq!(
            (in_flight(1), in_flight(0)),
            (1, 0),
            "the batch that came later was served first"
        );
        drop(ring_loop);
        for fd in fds {
            // SAFETY: descriptors this test opened.
            unsafe { libc::close(fd) };
        }
    }

    #[test]
    fn a_ring_thread_that_stops_with_reads_in_flight_leaks_their_buffers() {
        let ring = match setup_ring(4) {
            Ok(ring) => ring,
            Err(e) => {
                eprintln!("skipping: io_uring unavailable: {e}");
                return;
            }
        };
        // A read from an empty pipe stays in the kernel until a write.
        let mut fds = [0; 2];
        // SAFETY: a valid array of two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut ring_loop = RingLoop::new(ring, vec![fds[0]], false, 4, ReadOrder::Spread);
        let mut buf = BounceBuf::zeroed(PAGE as usize).unwrap();
        let base = buf.as_mut_ptr();
        let (reply, replies) = crossbeam_channel::bounded(1);
        ring_loop.add(Submission {
            ops: vec![ReadOp {
                file: 0,
                offset: 0,
                len: PAGE as usize,
                need: PAGE as usize,
                buf_off: 0,
            }],
            buf,
            base,
            priority: Priority::Demand,
            reply,
        });
        ring_loop.fill();
        ring_loop.ring.submit().unwrap();
        assert_eq!(ring_loop.in_flight, 1);
        // What a panic unwinding out of `run` does: the loop is dropped.
        drop(ring_loop);
        let done = replies.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            done.buf.is_none(),
            "a buffer the kernel may write was handed back"
        );
        assert!(done.failure.is_some());
        for fd in fds {
            // SAFETY: descriptors this test opened.
            unsafe { libc::close(fd) };
        }
    }
}
