//! FreeToken's fill thread: a host thread that reads a batch's rows through
//! an `O_DIRECT` io_uring source (the engine's `uring` backend at depth 64,
//! duplicates read once) while the forward thread runs, one batch after
//! another in the order they were issued.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use engram::io::{BatchStats, RowSource};
use engram::{Error, Result};

/// One batch's outcome: its rows (request order) and the source's counts.
pub(super) type Filled = Result<(Vec<u8>, BatchStats)>;

struct Job {
    table: usize,
    ids: Vec<u32>,
    reply: Sender<Filled>,
}

/// The fill thread and its queue; dropping it closes the queue and joins
/// the thread after its current batch.
pub(super) struct Filler {
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Filler {
    /// Starts the thread over `source`.
    pub(super) fn start(source: Arc<dyn RowSource>) -> Result<Filler> {
        let (jobs, queue) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("freetoken-fill".into())
            .spawn(move || {
                for job in queue {
                    let mut out = vec![0u8; job.ids.len() * source.row_bytes(job.table)];
                    let done = source
                        .read_rows(job.table, &job.ids, &mut out)
                        .map(|stats| (out, stats));
                    // The issuer may have gone (a dropped prefill): nothing to tell.
                    let _ = job.reply.send(done);
                }
            })
            .map_err(|e| Error::io("freetoken fill thread", e))?;
        Ok(Filler {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Queues the rows `ids` of `table`; the receiver gets them once read.
    pub(super) fn issue(&self, table: usize, ids: Vec<u32>) -> Receiver<Filled> {
        let (reply, done) = channel();
        let job = Job { table, ids, reply };
        if let Some(Err(e)) = self.jobs.as_ref().map(|j| j.send(job)) {
            // The thread is gone: answer on its behalf.
            let _ = e.0.reply.send(Err(Error::io(
                "freetoken fill thread",
                std::io::Error::other("the fill thread has stopped"),
            )));
        }
        done
    }
}

/// Waits for an issued batch.
pub(super) fn collect(done: &Receiver<Filled>) -> Filled {
    done.recv().unwrap_or_else(|_| {
        Err(Error::io(
            "freetoken fill thread",
            std::io::Error::other("the fill thread ended without an answer"),
        ))
    })
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
