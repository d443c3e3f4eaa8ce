//! `ds4`: the peer runtime's published Engram schedule and read path,
//! re-implemented from its description so this project's engine can be
//! benchmarked against it.
//!
//! What is implemented, as the peer does it:
//! - **Row ids**: all of the prompt's rows are hashed up front; one history
//!   serves the prefill and then the decode steps.
//! - **Prefill buffer**: one buffer shared by both tables, sized for the
//!   whole prompt (`tokens * columns * row bytes`, 24 rows of 264 bytes per
//!   token for V4.1-Flash: 6.3 KiB per token, 811 MiB at 128K tokens).
//!   Table 1's rows overwrite table 0's.
//! - **Reader**: one thread per prefill. It reads table 0 for the whole
//!   prompt from before layer 0, in 2,048-token chunks; each chunk's row ids
//!   are deduplicated (within the chunk only), read, scattered to the
//!   tokens' slots and published through a ready counter. Table 1 starts
//!   once the forward pass has started the layer after table 0's (layer 2
//!   for V4.1-Flash), chunk by chunk again.
//! - **Read path** ([`Ds4Flavor`]): one `pread` per row of a batch's sorted
//!   unique rows. `ds4` is the peer as it runs on macOS: uncached
//!   descriptors (`F_NOCACHE`, `F_RDAHEAD` 0; emulated on Linux with
//!   `O_DIRECT` reads of the aligned 4 KiB page(s) holding the row), a batch
//!   of 8 rows or more split into 16 parts read in parallel by a persistent
//!   pool of 16 workers (GCD's global queue under `dispatch_apply_f`), so a
//!   decode step's 24 rows of a table go in parallel; smaller batches
//!   serially. `ds4-linux` is its Linux path: plain buffered descriptors
//!   (no cache advice, no direct I/O: the page cache and kernel readahead act
//!   as for the peer); a batch under 256 unique rows is read serially on the
//!   calling thread, a larger one by 16 threads created for that batch, each
//!   taking a contiguous slice of the unique rows, then joined.
//! - **Prefill wait**: the consumer polls the table's ready counter and
//!   sleeps 1 ms between polls; the time polling is the reported stall.
//! - **Decode**: each step's rows of table 0, then of table 1, are read
//!   synchronously (one batch of 24 rows per table, one after the other:
//!   in parallel on the Mac path, serially on the Linux path) before the
//!   step's work; that read time is the step's stall.
//!
//! Where this is an approximation:
//! - Table 1 may overwrite a token's slots only after the forward pass has
//!   used its table-0 rows. The consumer does not say when it is done with
//!   rows, so a wait's table-0 rows count as used at the consumer's next call
//!   (any `layer_start` or `wait`): the layer that needed them has run by
//!   then. Table 1's chunk is read once the gate opens, and its rows are
//!   written and published as far as table 0's rows are used. Under a layer
//!   sweep that is the peer's schedule exactly (table 1 starts after layer 1
//!   is done for the whole prompt). Under a chunk sweep (each ubatch through
//!   all layers) table 1's rows are published ubatch by ubatch instead of
//!   per 2,048-token chunk, since waiting for a whole chunk's table-0 use
//!   would deadlock the forward pass.
//! - The unique rows of a chunk are read into a staging buffer and copied to
//!   the tokens' slots; decoding to f32 happens in `wait`, outside the
//!   measured stall, as in the engine schedules.
//! - Split-scale tables (Hugging Face checkpoints) take a second `pread`
//!   per row for the scales; the peer reads only packed GGUF rows.

pub(super) mod pool;
mod prefill;
pub(super) mod read;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::codec::ROW_DIM;
use engram::hash::{Hasher, History};
use engram::layout::Family;
use engram::{Error, Result};

use super::{IoCounters, PrefillRun, Schedule, ScheduleSetup};
use prefill::{Ds4Prefill, PrefillSpec};
use read::{Counters, Fetched, PeerFiles};

/// The peer's schedule over one model: a prefill, then decode steps.
///
/// Prefill: one reader thread reads table 0 for the whole prompt from
/// before layer 0, then table 1 from the layer after table 0's, in
/// 2,048-token chunks deduplicated within the chunk, into one buffer both
/// tables share; waits sleep-poll (1 ms) a ready counter. Decode: both
/// tables' rows are read synchronously at [`Schedule::step_begin`], whose
/// read time is the step's stall. Reads: one `pread` per row, in parallel
/// as the [`Ds4Flavor`] does it.
pub struct Ds4Schedule {
    hasher: Hasher,
    history: History,
    tables: Arc<PeerFiles>,
    flavor: Ds4Flavor,
    io: Arc<Counters>,
    /// Row ids per token per table.
    columns: usize,
    /// The layer whose start lets table 1's prefill reads begin.
    table1_layer: u32,
    step: DecodeStep,
}

/// The current decode step's rows.
#[derive(Default)]
struct DecodeStep {
    /// Row ids, `[table][column]`; empty before the first step.
    ids: Vec<u32>,
    /// Raw rows per table, in column order.
    raw: [Vec<u8>; 2],
    fetched: Fetched,
    /// Never set: decode reads run to completion on the forward thread.
    stop: AtomicBool,
}

/// Which of the peer's platform read paths a [`Ds4Schedule`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ds4Flavor {
    /// macOS: uncached reads, batches of 8 rows or more on a persistent
    /// pool of 16 workers (GCD), decode batches in parallel.
    Mac,
    /// Linux: buffered reads, batches of 256 rows or more on 16 threads
    /// created per batch, decode batches serial.
    Linux,
}

impl Ds4Schedule {
    /// A fresh run over `setup`'s model: opens both tables' files for
    /// `flavor` (and, on the Mac path, starts its 16 workers).
    pub fn new(setup: &ScheduleSetup<'_>, flavor: Ds4Flavor) -> Result<Ds4Schedule> {
        let model = setup.model;
        super::check_family(model, Family::DeepSeekEngram, "ds4")?;
        if model.tables.len() != 2 {
            return Err(Error::InvalidArgument(format!(
                "the ds4 schedule reads exactly two Engram tables (the peer's model); this model has {}",
                model.tables.len()
            )));
        }
        let hasher = Hasher::new(&model.layout)?;
        let tables = PeerFiles::open(model, flavor)?;
        if tables[0].width() != tables[1].width() {
            return Err(Error::InvalidArgument(format!(
                "the ds4 schedule shares one buffer between the tables, which needs equal row \
                 widths (table 0: {} bytes, table 1: {})",
                tables[0].width(),
                tables[1].width()
            )));
        }
        Ok(Ds4Schedule {
            flavor,
            history: hasher.new_history(),
            columns: hasher.columns(),
            hasher,
            tables: Arc::new(tables),
            io: Arc::new(Counters::default()),
            table1_layer: model.tables[0].layer_id + 1,
            step: DecodeStep::default(),
        })
    }

    /// Reads the current step's rows of `table` synchronously.
    fn read_step_table(&mut self, table: usize) -> Result<()> {
        let step = &mut self.step;
        let ids = &step.ids[table * self.columns..(table + 1) * self.columns];
        step.fetched
            .fetch(&self.tables, table, ids, &step.stop, &self.io)?;
        let raw = &mut step.raw[table];
        raw.clear();
        raw.resize(ids.len() * self.tables[table].width(), 0);
        step.fetched.scatter(ids, raw);
        Ok(())
    }
}

impl Schedule for Ds4Schedule {
    fn name(&self) -> &'static str {
        match self.flavor {
            Ds4Flavor::Mac => "ds4",
            Ds4Flavor::Linux => "ds4-linux",
        }
    }

    fn prefill<'a>(&'a mut self, tokens: &[u32]) -> Result<Box<dyn PrefillRun + 'a>> {
        let (count, ids) = super::prompt_ids(&self.hasher, &mut self.history, tokens)?;
        let run = Ds4Prefill::start(PrefillSpec {
            tables: self.tables.clone(),
            io: self.io.clone(),
            ids: ids.into(),
            columns: self.columns,
            tokens: count,
            table1_layer: self.table1_layer,
        })?;
        Ok(Box::new(run))
    }

    fn step_begin(&mut self, token: u32, stall: &mut [Duration]) -> Result<()> {
        self.step.ids.clear();
        let hashed = self
            .hasher
            .hash(&mut self.history, &[token], None, &mut self.step.ids);
        if let Err(error) = hashed {
            self.step.ids.clear();
            return Err(error);
        }
        for table in 0..2 {
            let started = Instant::now();
            let read = self.read_step_table(table);
            if let Some(slot) = stall.get_mut(table) {
                *slot += started.elapsed();
            }
            if let Err(error) = read {
                // No rows for this step: a later step_wait must not hand out stale ones.
                self.step.ids.clear();
                return Err(error);
            }
        }
        Ok(())
    }

    fn step_wait(&mut self, table: usize, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        if table >= 2 {
            return Err(Error::InvalidArgument(format!(
                "table {table} out of range (the ds4 schedule reads 2)"
            )));
        }
        if self.step.ids.is_empty() {
            return Err(Error::InvalidArgument(
                "step_wait without a step: call step_begin first".into(),
            ));
        }
        if let Some(rows) = rows {
            rows.clear();
            rows.resize(self.columns * ROW_DIM, 0.0);
            let ids = &self.step.ids[table * self.columns..];
            self.tables[table]
                .encoding()
                .decode_rows(&self.step.raw[table], rows)
                .map_err(|e| e.into_error_at(table, ids))?;
        }
        // The rows were read at step_begin; nothing is left to wait for.
        Ok(Duration::ZERO)
    }

    fn hint(&mut self, _hints: &engram::Hints<'_>) -> Result<()> {
        Ok(())
    }

    fn io(&mut self) -> IoCounters {
        self.io.snapshot()
    }
}
