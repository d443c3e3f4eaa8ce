//! Hint reads: rows of likely next tokens read into the row cache at low
//! priority. Nobody waits on them; a sequence's drop waits only for those
//! running (see `decode::HeldHints` for when they are queued).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::guard::{Leaving, PanicSite};
use super::pool::{PoolShared, Task};
use super::read::ReadCtx;
use super::ready::InFlight;
use super::source::{Priority, RowSource};
use crate::stats::{Phase, StatsRecorder};

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
    pub pool: Arc<PoolShared>,
}

impl HintTask {
    /// The task under the guard that leaves its hint count once the task
    /// (its shares of the source, stats and pool) is dropped, a panic
    /// included: how it ends whether it runs or is abandoned.
    fn guarded(self: Box<Self>) -> Leaving<Box<HintTask>> {
        let flight = self.flight.clone();
        Leaving::new(self, vec![flight])
    }
}

impl Task for HintTask {
    fn run(self: Box<Self>) {
        let task = self.guarded();
        // Nobody waits on a hint: a panic only ends this one (the guard
        // leaves the count as it unwinds).
        let _ = catch_unwind(AssertUnwindSafe(|| {
            task.pool.faults.hit(PanicSite::Hint, task.table);
            let mut out = vec![0u8; task.rows.len() * task.source.row_bytes(task.table)];
            let _ = ReadCtx {
                source: &task.source,
                stats: &task.stats,
                phase: Phase::Hint,
                priority: Priority::Hint,
                batch: true,
            }
            .read(task.table, &task.rows, &mut out);
        }));
    }

    fn abandon(self: Box<Self>) {
        drop(self.guarded());
    }

    fn owner(&self) -> u64 {
        self.owner
    }
}
