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

impl Task for HintTask {
    fn run(self: Box<Self>) {
        let HintTask {
            flight,
            table,
            rows,
            source,
            stats,
            pool,
            ..
        } = *self;
        let held = Leaving::new((source, stats, pool), vec![flight]);
        let (source, stats, pool) = &*held;
        // Nobody waits on a hint: a panic only ends this one (the guard
        // leaves the count as it unwinds).
        let _ = catch_unwind(AssertUnwindSafe(|| {
            pool.faults.hit(PanicSite::Hint, table);
            let mut out = vec![0u8; rows.len() * source.row_bytes(table)];
            let _ = ReadCtx {
                source,
                stats,
                phase: Phase::Hint,
                priority: Priority::Hint,
                batch: true,
            }
            .read(table, &rows, &mut out);
        }));
    }

    fn abandon(self: Box<Self>) {
        let flight = self.flight.clone();
        drop(Leaving::new(self, vec![flight]));
    }

    fn owner(&self) -> u64 {
        self.owner
    }
}
