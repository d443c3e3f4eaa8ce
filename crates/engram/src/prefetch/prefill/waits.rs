//! The consumer's side of a prefill's waits: where each table's views end,
//! and the log of waits the stats get.

use std::time::Duration;

use crate::stats::{Phase, StatsRecorder};

/// Per-table view ends and every wait so far.
pub(super) struct Waits {
    /// Per table: end of the last view returned (start of the next).
    upto: Vec<u32>,
    /// Every wait, in order: the waits themselves for the stats, and the
    /// per-token total over tables at the end.
    log: Vec<Wait>,
    /// Waits of `log` before this are in the stats.
    recorded: usize,
}

/// One wait: `table`'s tokens `from..upto`, `ns` of stall.
#[derive(Debug, Clone, Copy)]
struct Wait {
    table: usize,
    from: u32,
    upto: u32,
    ns: u64,
}

impl Waits {
    /// No wait yet on any of `tables` tables.
    pub(super) fn new(tables: usize) -> Waits {
        Waits {
            upto: vec![0; tables],
            // Room for the waits of a typical prefill (two tables, 16 chunks
            // of 512 tokens at 8,192): no allocation on the forward thread.
            log: Vec::with_capacity(64),
            recorded: 0,
        }
    }

    /// Tables.
    pub(super) fn tables(&self) -> usize {
        self.upto.len()
    }

    /// End of the last view of `table`; `None` past the tables.
    pub(super) fn upto(&self, table: usize) -> Option<u32> {
        self.upto.get(table).copied()
    }

    /// A wait of `table` returned tokens `from..upto` after `stall`. The
    /// stats get it at the next [`Waits::flush`].
    ///
    /// Why not at once: the stats' lock and histograms are cold in the
    /// cache after the forward pass between two waits, and recording there
    /// was most of what a wait whose rows were ready cost (measured, 8,192
    /// tokens, layer sweep: 0.2-3.5 us of a 0.3-5 us wait; docs/bench.md,
    /// "Ready waits wake no one").
    pub(super) fn push(&mut self, table: usize, from: u32, upto: u32, stall: Duration) {
        self.upto[table] = upto;
        let ns = u64::try_from(stall.as_nanos()).unwrap_or(u64::MAX);
        self.log.push(Wait {
            table,
            from,
            upto,
            ns,
        });
    }

    /// Records the waits not yet in `stats`.
    pub(super) fn flush(&mut self, stats: &StatsRecorder) {
        for w in &self.log[self.recorded..] {
            let tokens = u64::from(w.upto - w.from);
            stats.record_wait(Phase::Prefill, w.table, tokens, Duration::from_nanos(w.ns));
        }
        self.recorded = self.log.len();
    }

    /// Records each token's stall summed over the tables.
    pub(super) fn record_token_totals(&self, stats: &StatsRecorder) {
        // Empty waits cover no token.
        let waits = || self.log.iter().filter(|w| w.upto > w.from);
        let mut bounds: Vec<u32> = waits().flat_map(|w| [w.from, w.upto]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        for b in bounds.windows(2) {
            let (a, b) = (b[0], b[1]);
            let mut covered = false;
            let mut total = 0u64;
            for w in waits().filter(|w| w.from <= a && b <= w.upto) {
                covered = true;
                total = total.saturating_add(w.ns / u64::from(w.upto - w.from));
            }
            if covered {
                stats.record_token_total(
                    Phase::Prefill,
                    Duration::from_nanos(total),
                    u64::from(b - a),
                );
            }
        }
    }
}
