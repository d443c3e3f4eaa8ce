//! Prefill: one reader job per table, filling a bounded ring of chunks ahead
//! of the consumer.
//!
//! Contract of [`Prefill::wait`]: waits on one table ask for increasing
//! `upto`; a wait returns the rows of tokens `[previous upto, upto)` and
//! releases the rows the previous wait on that table returned, unless
//! [`Prefill::release`] (which [`Prefill::wait_into`] calls once it has
//! copied them) released them already. The ring of a
//! table holds `ring_chunks * chunk_tokens` tokens, so one wait may cover at
//! most that many tokens; the readers run ahead of the consumer by at most
//! the ring's free space. Memory is therefore fixed by the configuration,
//! except with `pipeline` off, where (as in the peers) the ring holds the
//! whole prompt and a wait blocks until the whole table is read.
//!
//! Reads go out in batches of `read_batch_tokens` tokens (the first one of
//! `first_chunk_tokens`), aligned to multiples of the batch so batch ends
//! meet the consumer's usual wait points, and each batch is published as it
//! completes. Until the consumer first waits on a table, its batches run to
//! the end of a ring chunk instead: nobody waits on them yet, and a larger
//! batch keeps the device queue fuller. The source dedups within one batch; across the prompt, each
//! table has a reuse store ([`super::reuse`], `reuse_bytes`): all row ids
//! are known at the start, so each occurrence's next use is too, and rows
//! that later tokens need again are kept (Belady eviction) and copied from
//! the store instead of read again. While a table's ring is full, its
//! reader also reads the rows of tokens past the ring into the store (keyed
//! by their first use) as long as the store has room for a whole batch: the
//! store's fixed budget extends how far the reader runs ahead of the
//! consumer, instead of leaving the device idle.
//!
//! A prefill keeps at most `prefill_batches_in_flight` batches in flight
//! (default 2) and picks the next by [`PrefillCore::rank`]: one per table
//! while another table has ring batches left to schedule; after that (and
//! always for a one-table model) a table reads its next ring batch while
//! its last one is in flight (unless that one is read early, ahead of a
//! lower table's layer), so one batch's bookkeeping (store lookups,
//! keeping rows for reuse) overlaps another's reads, batch after batch. A table's batches are
//! completed and published in token order: a batch whose reads end first
//! is completed by the earlier one after itself, and a row two batches in
//! flight share is read by the earlier one only; the later takes it from
//! the store once the earlier has kept it ([`job::TableJob::begin_batch`]).
//! The most urgent in flight is read at [`Priority::Prefill`]; one that
//! ranks after it, or belongs to a table whose layer comes after one with
//! rows still to deliver, at [`Priority::PrefillLater`], which the source
//! serves only with the depth the others leave, one priority's batches
//! first come, first served: reads reach the device in deadline order, and
//! its queue stays full between the urgent table's batches (and while that
//! table's ring is full) with the next table's reads. The rank: a table
//! a consumer is blocked on; then a table whose consumer has waited before
//! and whose reader is less than one ring chunk ahead of it (earliest
//! tokens first); then the lowest table with ring room. So when every token goes through a layer before the next
//! one (a layer sweep), table 0 gets the whole device until its ring is full
//! and table 1 reads only with what is left until its layer is reached;
//! when ubatches go through all layers (a chunk sweep), table 1 becomes
//! urgent after its first wait and stays a little ahead from then on.

mod job;
mod rows;
mod sched;
mod waits;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pool::PoolShared;
use super::source::{Priority, RowSource};
use super::view::RowsView;
use super::PrefillOrder;
use crate::codec::Encoding;
use crate::stats::{Phase, StatsRecorder};
use crate::{Error, Result};
use job::TableJob;
pub(crate) use rows::PromptRows;
use sched::PrefillCore;
use waits::Waits;

/// How a prefill's rows are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Pool readers run ahead of the consumer.
    Overlap,
    /// Rows are read at the wait, on the consumer's thread.
    AtWait,
}

/// Shape of a prefill job, fixed at its start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub tokens: u32,
    pub ring_tokens: u32,
    /// Tokens in the first read batch.
    pub first_chunk: u32,
    /// Tokens per later read batch (batches end at multiples of it).
    pub read_batch: u32,
    /// Batches of one prefill in flight at once.
    pub in_flight: usize,
    pub mode: Mode,
    pub batch: bool,
    /// Pipeline off: a wait blocks until the whole table is read.
    pub whole_table: bool,
    /// Bytes per table of the whole-prompt reuse store (0: off).
    pub reuse_bytes: u64,
    /// Read later rows into the page cache once ring and store are full.
    pub warm: bool,
    /// Tokens per ring chunk: a table whose consumer has waited and whose
    /// reader is fewer than this many tokens ahead of it is urgent; and the
    /// batch size before the consumer first reaches a table.
    pub chunk: u32,
    /// The order the consumer goes through the tables in.
    pub order: PrefillOrder,
}

/// A running prefill of one sequence. Dropping it cancels its readers and
/// joins them before the ring buffers are freed.
pub struct Prefill<'s> {
    core: Arc<PrefillCore>,
    waits: Waits,
    stats: Arc<StatsRecorder>,
    _sequence: std::marker::PhantomData<&'s mut ()>,
}

/// Everything a prefill needs from its engine and sequence.
pub(crate) struct PrefillSetup<'a> {
    pub id: u64,
    /// Per table: Some(encoding) to decode rows to f32.
    pub decode: &'a [Option<Encoding>],
    /// The prompt, hashed batch by batch.
    pub prompt: Arc<PromptRows>,
    pub cols: &'a [usize],
    pub plan: Plan,
    pub source: &'a Arc<dyn RowSource>,
    pub stats: &'a Arc<StatsRecorder>,
    pub pool: &'a Arc<PoolShared>,
}

impl<'s> Prefill<'s> {
    pub(crate) fn start(setup: PrefillSetup<'_>) -> Prefill<'s> {
        let tables = setup.cols.len();
        let jobs = (0..tables)
            .map(|table| TableJob::new(&setup, table))
            .collect();
        let core = Arc::new(PrefillCore::new(setup.id, jobs, setup.plan, setup.pool));
        if setup.plan.mode == Mode::Overlap {
            core.try_schedule();
        }
        // With the first batches' reads under way: the reuse stores' next
        // uses, which hash the whole prompt.
        for job in &core.jobs {
            job.find_next_uses();
        }
        Prefill {
            core,
            waits: Waits::new(tables),
            stats: setup.stats.clone(),
            _sequence: std::marker::PhantomData,
        }
    }

    /// Tokens in the prefill.
    pub fn tokens(&self) -> u32 {
        self.core.plan.tokens
    }

    /// Most tokens one wait may cover (the ring capacity).
    pub fn max_wait_tokens(&self) -> u32 {
        self.core.plan.ring_tokens
    }

    /// Bytes of row memory this prefill holds now, all tables: each ring up
    /// to its highest written byte (its pages become resident as they are
    /// first written) and each reuse store's slab. Grows with what the
    /// prompt needs, never past `ring_chunks * chunk_tokens` tokens of rows
    /// plus `reuse_bytes` per table, whatever the prompt length.
    pub fn held_bytes(&self) -> u64 {
        self.core.jobs.iter().map(|job| job.held_bytes()).sum()
    }

    /// Tokens of `table` whose rows are already read (no blocking).
    pub fn ready_tokens(&self, table: usize) -> Option<u32> {
        self.core.jobs.get(table).map(|job| job.ready.count())
    }

    /// Tokens a [`Prefill::wait`] of `table` up to `upto` would return
    /// (those of `[previous upto, upto)`), for a caller that sizes its
    /// buffer before it waits; a wait that would be refused (going back,
    /// past the prompt, wider than the ring) is refused here the same way.
    pub fn wait_tokens(&self, table: usize, upto: u32) -> Result<u32> {
        self.check_wait(table, upto).map(|from| upto - from)
    }

    /// Blocks until the rows of tokens `[0, upto)` of `table` are read and
    /// returns those of `[previous upto, upto)`; see the module docs for the
    /// contract. Ends with the rows, the reader's error (naming table, row
    /// and offset) or [`Error::Cancelled`].
    pub fn wait(&mut self, table: usize, upto: u32) -> Result<RowsView<'_>> {
        let from = self.check_wait(table, upto)?;
        let core = &self.core;
        let job = &core.jobs[table];
        let target = match core.plan.mode {
            Mode::Overlap if core.plan.whole_table => core.plan.tokens, // pipeline off
            _ => upto,
        };
        // Ready: no lock, no wake (see `room_freed`) and no clock read on
        // this thread. It did not block, so it records no stall: on a
        // virtual machine's cold cache the two clock reads had been about
        // 0.5 us of a 1-2 us ready wait.
        let ready = match job.ready.try_wait(target) {
            Some(done) if core.plan.mode == Mode::Overlap => Some(done),
            _ if core.pool.is_shutdown() && job.ready.count() < upto => {
                return Err(Error::Cancelled); // the engine is gone
            }
            _ => None,
        };
        release(core, job, from, upto);
        let stall = match ready {
            Some(done) => {
                core.room_freed(done?, upto);
                Duration::ZERO
            }
            None => {
                let started = Instant::now();
                let result = match core.plan.mode {
                    Mode::Overlap => {
                        blocking_wait(core, job, target, || self.waits.flush(&self.stats))
                    }
                    Mode::AtWait => read_at_wait(job, upto),
                };
                let stall = started.elapsed();
                result?;
                stall
            }
        };
        self.waits.push(table, from, upto, stall);
        Ok(view(&self.core.jobs[table], from, upto))
    }

    /// [`Prefill::wait`], copying the rows into `out` (exactly the view's
    /// byte length), then [`Prefill::release`]: the copy was the rows' last
    /// use, so the readers may refill their ring slots at once.
    pub fn wait_into(&mut self, table: usize, upto: u32, out: &mut [u8]) -> Result<()> {
        self.wait(table, upto)?.copy_to(out)?;
        self.release(table)
    }

    /// Hands back the rows of the last wait on `table` before the next
    /// wait: the readers may overwrite their ring slots from now on. A
    /// consumer that copies its rows out (to a GPU, say) calls it after the
    /// copy; without it a wait's rows are held until the next wait on the
    /// table. Releasing twice, or before any wait, changes nothing.
    ///
    /// Why: a wait as wide as the ring holds all of it, and until it is
    /// released the table's readers can fill nothing but the reuse store,
    /// however long the consumer then computes before its next wait. In
    /// the torch host, which queues its GPU work and goes straight on to
    /// the next wait, it changed nothing measurable (H100 host, 2,048-token
    /// waits: `overlap` stall 1.910 against 1.889 s and 2.326 against
    /// 2.361 s in two runs; docs/log/2026-12-06-release-and-hint-point.md).
    pub fn release(&mut self, table: usize) -> Result<()> {
        let Some(upto) = self.waits.upto(table) else {
            return Err(Error::InvalidArgument(format!(
                "release(table {table}): table out of range (the model has {})",
                self.waits.tables()
            )));
        };
        let core = &self.core;
        let job = &core.jobs[table];
        // Only the consumer (this thread, holding `&mut self`) stores it.
        if job.consumer.released.load(Ordering::Relaxed) < upto {
            job.consumer.released.store(upto, Ordering::Release);
            // Without prefetch the rows are read at the wait, by the
            // consumer: nobody to hand the room to.
            if core.plan.mode == Mode::Overlap {
                core.room_freed(job.ready.count(), upto);
            }
        }
        Ok(())
    }

    fn check_wait(&self, table: usize, upto: u32) -> Result<u32> {
        let Some(from) = self.waits.upto(table) else {
            return Err(Error::InvalidArgument(format!(
                "table {table} out of range (the model has {})",
                self.waits.tables()
            )));
        };
        let plan = self.core.plan;
        if upto < from || upto > plan.tokens {
            return Err(Error::InvalidArgument(format!(
                "wait(table {table}, upto {upto}): upto must be in {from}..={} (waits advance)",
                plan.tokens
            )));
        }
        if upto - from > plan.ring_tokens {
            return Err(Error::InvalidArgument(format!(
                "wait(table {table}, upto {upto}) covers {} tokens; the ring holds {} \
                 (raise ring_chunks or wait in smaller steps)",
                upto - from,
                plan.ring_tokens
            )));
        }
        Ok(from)
    }
}

impl Drop for Prefill<'_> {
    fn drop(&mut self) {
        self.core.cancel_and_join();
        self.waits.flush(&self.stats);
        self.waits.record_token_totals(&self.stats);
    }
}

/// Releases the previous view's slots of `job` (the readers may overwrite
/// them from now on) and says how far the consumer has got.
fn release(core: &PrefillCore, job: &TableJob, from: u32, upto: u32) {
    job.consumer.released.store(from, Ordering::Release);
    job.consumer.consumed.store(upto, Ordering::Relaxed);
    if !job.consumer.started.load(Ordering::Relaxed) {
        job.consumer.started.store(true, Ordering::Relaxed);
    }
    core.learn_span(upto);
}

/// Waits for `target` tokens of `job`, scheduling first; `before_blocking`
/// runs once the reads it needs are handed out, if it has to block.
fn blocking_wait(
    core: &Arc<PrefillCore>,
    job: &TableJob,
    target: u32,
    before_blocking: impl FnOnce(),
) -> Result<()> {
    // The released slots may let a parked table go on.
    core.try_schedule();
    if let Some(done) = job.ready.try_wait(target) {
        return done.map(drop);
    }
    job.consumer.waited_on.store(true, Ordering::Relaxed);
    // Re-pick with this table marked urgent.
    core.try_schedule();
    before_blocking();
    let result = job.ready.wait(target).map(drop);
    job.consumer.waited_on.store(false, Ordering::Relaxed);
    result
}

/// ENGRAM_PREFETCH=0 and short prompts: read the missing rows now.
fn read_at_wait(job: &TableJob, upto: u32) -> Result<()> {
    let have = job.ready.count();
    if let Some(Err(e)) = job.ready.try_wait(upto) {
        return Err(e);
    }
    if have < upto {
        // The consumer is blocked on these rows: nothing is needed sooner.
        if let Err(e) = job.read_range(have, upto, Phase::Prefill, Priority::Prefill) {
            job.ready.fail(super::ready::duplicate_error(&e));
            return Err(e);
        }
        job.ready.publish(upto);
    }
    Ok(())
}

fn view(job: &TableJob, from: u32, upto: u32) -> RowsView<'_> {
    let tb = job.token_bytes();
    let cap = job.plan.ring_tokens;
    let slot = from % cap.max(1);
    let n = upto - from;
    let first = n.min(cap - slot);
    // SAFETY: tokens from..upto are published (the wait observed the count
    // with Acquire) and the reader writes only slots of tokens >= upto and
    // < from + ring_tokens until the next wait or `release` frees them;
    // both take `&mut Prefill`, which the view borrows.
    let (a, b) = unsafe {
        (
            job.ring.slice(slot as usize * tb, first as usize * tb),
            job.ring.slice(0, (n - first) as usize * tb),
        )
    };
    RowsView {
        first_token: from,
        rows_per_token: job.cols,
        row_bytes: job.row_bytes,
        f32: job.decode.is_some(),
        parts: [a, b],
    }
}
