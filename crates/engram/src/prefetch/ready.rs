//! The publish/wait primitive between a reader and the consumer of one
//! table's rows.
//!
//! A [`Ready`] is one 32-bit word: the low 30 bits count the tokens whose
//! rows are fully written, bit 30 says the reader failed, bit 31 says the
//! work was cancelled. The reader writes rows, then raises the count with
//! `Release`; a waiter loads the word with `Acquire`, so every row below the
//! count it sees is visible to it. A waiter whose condition does not hold
//! blocks on the word itself (futex / ulock through `sync::Futex`)
//! and is woken by the next publish, failure or cancellation: every wait
//! ends with rows, with the reader's error, or with [`Error::Cancelled`].

use std::sync::Arc;

use super::sync::{lock, Futex, Mutex, Ordering};
use crate::Error;

/// Largest count a [`Ready`] can hold (tokens in one prefill).
pub const MAX_COUNT: u32 = (1 << 30) - 1;
const COUNT_MASK: u32 = MAX_COUNT;
const FAILED: u32 = 1 << 30;
const CANCELLED: u32 = 1 << 31;

/// A ready counter with error and cancellation states.
pub struct Ready {
    word: Futex,
    error: Mutex<Option<Arc<Error>>>,
}

impl Default for Ready {
    fn default() -> Self {
        Ready::new()
    }
}

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let word = self.word.load(Ordering::Relaxed);
        f.debug_struct("Ready")
            .field("count", &(word & COUNT_MASK))
            .field("failed", &(word & FAILED != 0))
            .field("cancelled", &(word & CANCELLED != 0))
            .finish()
    }
}

impl Ready {
    /// A counter at zero, neither failed nor cancelled.
    pub fn new() -> Ready {
        Ready {
            word: Futex::new(0),
            error: Mutex::new(None),
        }
    }

    /// The published count (`Acquire`: rows below it are visible).
    pub fn count(&self) -> u32 {
        self.word.load(Ordering::Acquire) & COUNT_MASK
    }

    /// Raises the count to `count` (never lowers it) with `Release` and wakes
    /// the waiters. Call only after the rows below `count` are fully written.
    /// A count above [`MAX_COUNT`] is clamped (callers bound their lengths).
    pub fn publish(&self, count: u32) {
        let count = count.min(MAX_COUNT);
        let mut old = self.word.load(Ordering::Relaxed);
        loop {
            if old & COUNT_MASK >= count {
                return;
            }
            let new = (old & !COUNT_MASK) | count;
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(actual) => old = actual,
            }
        }
        self.word.wake_all();
    }

    /// Records `error` (the first one wins) and wakes the waiters; a wait
    /// whose rows are not all published returns a copy of it.
    pub fn fail(&self, error: Error) {
        {
            let mut slot = lock(&self.error);
            if slot.is_none() {
                *slot = Some(Arc::new(error));
            }
        }
        self.word.fetch_or(FAILED, Ordering::Release);
        self.word.wake_all();
    }

    /// Marks the work cancelled and wakes the waiters.
    pub fn cancel(&self) {
        self.word.fetch_or(CANCELLED, Ordering::Release);
        self.word.wake_all();
    }

    /// Starts a new epoch: the count back to zero and the failure cleared,
    /// a cancellation kept. For a buffer reused for new work (a decode
    /// step), so one step's error never fails the next and the count never
    /// runs up against [`MAX_COUNT`].
    ///
    /// Caller guarantees that nobody waits on the counter or publishes to
    /// it meanwhile (no reader of the old epoch is left and the consumer is
    /// the caller).
    pub(crate) fn restart(&self) {
        *lock(&self.error) = None;
        self.word.fetch_and(CANCELLED, Ordering::Release);
    }

    /// True once [`Ready::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.word.load(Ordering::Acquire) & CANCELLED != 0
    }

    /// True once [`Ready::fail`] was called.
    pub fn is_failed(&self) -> bool {
        self.word.load(Ordering::Acquire) & FAILED != 0
    }

    /// The recorded error, if any.
    pub fn error(&self) -> Option<Arc<Error>> {
        lock(&self.error).clone()
    }

    /// Blocks until the count reaches `upto` and returns the count then, or
    /// returns the reader's error or [`Error::Cancelled`] once either is set
    /// and the count is still short. Rows already published are returned even
    /// after a failure, so a failure only affects waits that need later rows.
    pub fn wait(&self, upto: u32) -> Result<u32, Error> {
        loop {
            let word = self.word.load(Ordering::Acquire);
            if let Some(result) = self.settled(word, upto) {
                return result;
            }
            self.word.wait(word);
        }
    }

    /// Checks `upto` against the count without blocking: `Some(Ok(count))`
    /// if ready, `Some(Err(..))` if it never will be, `None` if not yet.
    pub fn try_wait(&self, upto: u32) -> Option<Result<u32, Error>> {
        self.settled(self.word.load(Ordering::Acquire), upto)
    }

    fn settled(&self, word: u32, upto: u32) -> Option<Result<u32, Error>> {
        let count = word & COUNT_MASK;
        if count >= upto.min(MAX_COUNT) {
            return Some(Ok(count));
        }
        if word & CANCELLED != 0 {
            return Some(Err(Error::Cancelled));
        }
        if word & FAILED != 0 {
            let error = self.error();
            return Some(Err(match error {
                Some(e) => duplicate_error(&e),
                None => Error::Cancelled,
            }));
        }
        None
    }
}

/// A counter of work in flight that a dropper can wait to reach zero.
///
/// Workers [`InFlight::enter`] before touching a job's buffers and leave when
/// done; the job's owner calls [`InFlight::wait_idle`] after cancelling, so
/// the buffers are freed only when no worker can write them any more.
pub(crate) struct InFlight {
    word: Futex,
}

impl InFlight {
    pub(crate) fn new() -> InFlight {
        InFlight {
            word: Futex::new(0),
        }
    }

    /// One more worker is using the job.
    pub(crate) fn enter(&self) {
        self.word.fetch_add(1, Ordering::AcqRel);
    }

    /// A worker is done with the job.
    pub(crate) fn leave(&self) {
        if self.word.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.word.wake_all();
        }
    }

    /// True while a worker is using the job.
    pub(crate) fn busy(&self) -> bool {
        self.word.load(Ordering::Acquire) != 0
    }

    /// Blocks until no worker is using the job.
    pub(crate) fn wait_idle(&self) {
        loop {
            let n = self.word.load(Ordering::Acquire);
            if n == 0 {
                return;
            }
            self.word.wait(n);
        }
    }
}

/// A copy of `error` for one more waiter. [`Error`] is not `Clone` because
/// `std::io::Error` is not; the copy keeps every field and the I/O error's
/// kind and message.
pub fn duplicate_error(error: &Error) -> Error {
    let io_copy = |e: &std::io::Error| std::io::Error::new(e.kind(), e.to_string());
    match error {
        Error::Io { path, source } => Error::Io {
            path: path.clone(),
            source: io_copy(source),
        },
        Error::Format {
            file,
            field,
            reason,
        } => Error::format(file.clone(), field.clone(), reason.clone()),
        Error::Layout { field, reason } => Error::layout(field.clone(), reason.clone()),
        Error::Tokenizer {
            source_name,
            reason,
        } => Error::Tokenizer {
            source_name: source_name.clone(),
            reason: reason.clone(),
        },
        Error::CorruptRow { table, row, reason } => Error::CorruptRow {
            table: *table,
            row: *row,
            reason: reason.clone(),
        },
        Error::RowRead {
            table,
            row,
            file,
            offset,
            source,
        } => Error::RowRead {
            table: *table,
            row: *row,
            file: file.clone(),
            offset: *offset,
            source: io_copy(source),
        },
        Error::InvalidArgument(message) => Error::InvalidArgument(message.clone()),
        Error::Cancelled => Error::Cancelled,
        Error::Internal(message) => Error::Internal(message.clone()),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(10);

    /// A waiting thread and where its answer arrives.
    type Waiter = (
        std::thread::JoinHandle<()>,
        mpsc::Receiver<Result<u32, Error>>,
    );

    /// `ready.wait(upto)` on a thread of its own.
    fn spawn_wait(ready: &Arc<Ready>, upto: u32) -> Waiter {
        let (tx, rx) = mpsc::channel();
        let ready = ready.clone();
        let waiter = std::thread::spawn(move || tx.send(ready.wait(upto)).unwrap());
        (waiter, rx)
    }

    #[test]
    fn wait_returns_once_published() {
        let ready = Arc::new(Ready::new());
        let (waiter, rx) = spawn_wait(&ready, 5);
        ready.publish(3);
        assert_eq!(ready.count(), 3);
        ready.publish(7);
        assert_eq!(rx.recv_timeout(LIMIT).unwrap().unwrap(), 7);
        waiter.join().unwrap();
        ready.publish(2);
        assert_eq!(ready.count(), 7, "publish never lowers the count");
    }

    #[test]
    fn failure_reaches_waiter_with_row_and_offset() {
        let ready = Arc::new(Ready::new());
        ready.publish(4);
        let (waiter, rx) = spawn_wait(&ready, 10);
        ready.fail(Error::RowRead {
            table: 1,
            row: 42,
            file: "t.gguf".into(),
            offset: 4096,
            source: std::io::Error::from_raw_os_error(5),
        });
        let err = rx.recv_timeout(LIMIT).unwrap().unwrap_err();
        waiter.join().unwrap();
        match err {
            Error::RowRead {
                table, row, offset, ..
            } => assert_eq!((table, row, offset), (1, 42, 4096)),
            other => panic!("unexpected {other}"),
        }
        assert_eq!(ready.wait(4).unwrap(), 4, "published rows stay readable");
    }

    #[test]
    fn cancel_ends_wait() {
        let ready = Arc::new(Ready::new());
        let (waiter, rx) = spawn_wait(&ready, 1);
        ready.cancel();
        assert!(matches!(
            rx.recv_timeout(LIMIT).unwrap(),
            Err(Error::Cancelled)
        ));
        waiter.join().unwrap();
        assert!(ready.try_wait(1).unwrap().is_err());
        assert!(ready.try_wait(0).unwrap().is_ok());
    }

    #[test]
    fn restart_clears_count_and_failure_but_keeps_cancel() {
        let ready = Ready::new();
        ready.publish(1);
        ready.fail(Error::InvalidArgument("eio".into()));
        ready.restart();
        assert_eq!(ready.count(), 0);
        assert!(!ready.is_failed() && ready.error().is_none());
        assert!(
            ready.try_wait(1).is_none(),
            "a new epoch waits for new rows"
        );
        ready.publish(1);
        assert_eq!(ready.wait(1).unwrap(), 1);
        ready.cancel();
        ready.restart();
        assert!(matches!(ready.try_wait(1), Some(Err(Error::Cancelled))));
    }

    #[test]
    fn in_flight_wait_idle_returns_after_leave() {
        let flight = Arc::new(InFlight::new());
        flight.enter();
        flight.enter();
        let (tx, rx) = mpsc::channel();
        let idle = {
            let flight = flight.clone();
            std::thread::spawn(move || {
                flight.wait_idle();
                tx.send(()).unwrap()
            })
        };
        flight.leave();
        assert!(rx.try_recv().is_err());
        flight.leave();
        rx.recv_timeout(LIMIT).unwrap();
        idle.join().unwrap();
    }
}

/// Loom models of the protocol: every interleaving of a reader that writes
/// rows then publishes, a waiter that reads them, and a canceller.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    struct Rows {
        ready: Ready,
        slots: [UnsafeCell<u64>; 2],
    }
    // SAFETY: slot i is written only before the count passes i and read only
    // after; loom's UnsafeCell checks exactly that.
    unsafe impl Sync for Rows {}

    fn rows() -> Arc<Rows> {
        Arc::new(Rows {
            ready: Ready::new(),
            slots: [UnsafeCell::new(0), UnsafeCell::new(0)],
        })
    }

    /// Runs `f` on a new model thread with its own share of `shared`.
    fn spawn_on(
        shared: &Arc<Rows>,
        f: impl FnOnce(&Rows) + Send + 'static,
    ) -> loom::thread::JoinHandle<()> {
        let shared = shared.clone();
        loom::thread::spawn(move || f(&shared))
    }

    fn write_and_publish(rows: &Rows) {
        for i in 0..2 {
            rows.slots[i].with_mut(|p| unsafe { *p = 10 + i as u64 });
            rows.ready.publish(i as u32 + 1);
        }
    }

    #[test]
    fn waiter_sees_fully_written_rows() {
        loom::model(|| {
            let shared = rows();
            let reader = spawn_on(&shared, write_and_publish);
            let count = shared.ready.wait(2).unwrap();
            assert!(count >= 2);
            for i in 0..2 {
                let v = shared.slots[i].with(|p| unsafe { *p });
                assert_eq!(v, 10 + i as u64);
            }
            reader.join().unwrap();
        });
    }

    #[test]
    fn every_wait_ends_under_cancel_or_failure() {
        loom::model(|| {
            let shared = rows();
            let reader = spawn_on(&shared, |rows| {
                rows.slots[0].with_mut(|p| unsafe { *p = 10 });
                rows.ready.publish(1);
                rows.ready.fail(Error::InvalidArgument("eio".into()));
            });
            let canceller = spawn_on(&shared, |rows| rows.ready.cancel());
            match shared.ready.wait(2) {
                Err(Error::Cancelled) | Err(Error::InvalidArgument(_)) => {}
                other => panic!("wait(2) must fail, got {other:?}"),
            }
            // The first row was published before the failure: a wait for it
            // returns it whatever happened later.
            reader.join().unwrap();
            canceller.join().unwrap();
            assert_eq!(shared.ready.wait(1).unwrap(), 1);
            assert_eq!(shared.slots[0].with(|p| unsafe { *p }), 10);
        });
    }

    #[test]
    fn wait_idle_returns_after_last_leave() {
        loom::model(|| {
            let flight = Arc::new(InFlight::new());
            flight.enter();
            flight.enter();
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    let flight = flight.clone();
                    loom::thread::spawn(move || flight.leave())
                })
                .collect();
            flight.wait_idle();
            for h in handles {
                h.join().unwrap();
            }
        });
    }
}
