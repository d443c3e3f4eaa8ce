//! One table's reader state for one prefill: its ring, its reuse store and
//! the reads that fill them.

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex, OnceLock};

use super::super::read::{grown, ReadCtx};
use super::super::ready::Ready;
use super::super::reuse::{next_uses, NextUses, ReuseStore};
use super::super::ring::RingBuf;
use super::super::source::{Priority, RowRequest, RowSource};
use super::super::sync::{lock_std as lock, CacheLine};
use super::rows::PromptRows;
use super::{Plan, PrefillSetup};
use crate::codec::{Encoding, RowsError};
use crate::stats::{Phase, StatsRecorder};
use crate::Result;

/// One table's reader state for one prefill.
pub(super) struct TableJob {
    pub(super) table: usize,
    pub(super) cols: usize,
    pub(super) row_bytes: usize,
    pub(super) plan: Plan,
    /// Some: rows are decoded to f32 (`row_bytes` is then 4 bytes per value).
    pub(super) decode: Option<Encoding>,
    /// The prompt, hashed into this table's row ids batch by batch.
    pub(super) prompt: Arc<PromptRows>,
    pub(super) ring: RingBuf,
    /// Written by the readers at every batch, read by the consumer at every
    /// wait: on a line of its own, so neither the consumer's marks nor the
    /// read-only fields around it go with it (8K layer sweep: a ready
    /// wait's stores took 0.1-1.7 us where they shared it).
    pub(super) ready: CacheLine<Ready>,
    /// Written by the consumer at every wait, read by the readers as they
    /// schedule.
    pub(super) consumer: CacheLine<ConsumerMarks>,
    /// Whole-prompt dedup: rows read that later tokens need again. Kept
    /// as stored, also for a table delivered as f32: so its budget holds
    /// as many rows whatever the delivered format (an f32 row is 4-7.5x
    /// its stored bytes), and a hit is decoded as it is copied into the
    /// ring, as a row read from the source is.
    reuse: Option<Mutex<ReuseStore>>,
    /// Per occurrence (token-major), the token that next uses its row: set
    /// by [`TableJob::find_next_uses`] once the first batches are queued
    /// (hashing the whole prompt for it took 7 ms of an 8K Qwen4-Exp
    /// prefill on the 2-core VM, before any read had started), then
    /// `next_uses_set` published; a batch that reaches the store first
    /// waits for that.
    next_uses: OnceLock<NextUses>,
    next_uses_set: Ready,
    pub(super) source: Arc<dyn RowSource>,
    pub(super) stats: Arc<StatsRecorder>,
    /// Buffers for the stored bytes of a batch's rows: an f32 table's
    /// before they are decoded, the rows read ahead into the reuse store,
    /// and those a warm-up reads only to drop (a source that reads them).
    /// One per batch in flight, kept between batches: allocating megabytes
    /// per batch on pool threads grows the allocator's retained memory with
    /// the prompt.
    raw_scratch: Mutex<Vec<Vec<u8>>>,
}

/// Where a table's consumer is: what the readers rank and fill the ring by.
#[derive(Debug, Default)]
pub(super) struct ConsumerMarks {
    /// Tokens before this the consumer no longer holds (the reader may
    /// overwrite their ring slots).
    pub(super) released: AtomicU32,
    /// Set while a consumer is blocked on this table: its batches go first.
    pub(super) waited_on: AtomicBool,
    /// The consumer has reached this table's layer at least once (it has
    /// called wait): from then on a small lead makes the table urgent.
    pub(super) started: AtomicBool,
    /// `upto` of the consumer's latest wait.
    pub(super) consumed: AtomicU32,
}

/// One run of a batch's ring slots: raw rows, or f32 values decoded from
/// the stored bytes.
enum Slots<'a> {
    Raw(&'a mut [u8]),
    F32(Encoding, &'a mut [f32]),
}

impl Slots<'_> {
    /// Reads all of `rows` of `table` into the slots and returns their
    /// stored bytes: the slots themselves for raw rows, the front of
    /// `scratch` (where they were read before one decode call) for f32.
    fn read_all<'s>(
        &'s mut self,
        ctx: &ReadCtx<'_>,
        table: usize,
        rows: &[u32],
        scratch: &'s mut Vec<u8>,
    ) -> Result<&'s [u8]> {
        match self {
            Slots::Raw(out) => {
                ctx.read(table, rows, out)?;
                Ok(&out[..])
            }
            Slots::F32(enc, out) => {
                ctx.read_f32_via(table, rows, *enc, out, scratch)?;
                Ok(&scratch[..rows.len() * enc.row_bytes()])
            }
        }
    }

    /// Delivers row `i` of the run from its stored bytes.
    fn put(&mut self, i: usize, stored: &[u8]) -> std::result::Result<(), RowsError> {
        match self {
            Slots::Raw(out) => {
                out[i * stored.len()..][..stored.len()].copy_from_slice(stored);
                Ok(())
            }
            Slots::F32(enc, out) => {
                let dim = enc.values();
                enc.decode_rows(stored, &mut out[i * dim..][..dim])
            }
        }
    }
}

/// Where a batch's rows are delivered: its ring slots, one run, or two
/// where the ring wraps.
struct BatchSlots<'a> {
    first: Slots<'a>,
    /// The run from the ring's start, and the batch position it begins at.
    wrapped: Option<(usize, Slots<'a>)>,
}

impl BatchSlots<'_> {
    /// Delivers row `i` of the batch from its stored bytes.
    fn put(&mut self, i: usize, stored: &[u8]) -> std::result::Result<(), RowsError> {
        match &mut self.wrapped {
            Some((at, run)) if i >= *at => run.put(i - *at, stored),
            _ => self.first.put(i, stored),
        }
    }

    /// Reads all of `rows` (the batch's) into the slots, run by run.
    fn read_all(
        &mut self,
        ctx: &ReadCtx<'_>,
        table: usize,
        rows: &[u32],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let at = self.wrapped.as_ref().map_or(rows.len(), |(at, _)| *at);
        self.first.read_all(ctx, table, &rows[..at], scratch)?;
        if let Some((_, run)) = &mut self.wrapped {
            run.read_all(ctx, table, &rows[at..], scratch)?;
        }
        Ok(())
    }
}

/// A ring batch between its two halves ([`TableJob::begin_batch`] and
/// [`TableJob::complete_batch`]): its rows are in their slots, but for
/// those left to take from the store, and it is not published yet.
pub(super) struct ReadBatch {
    start: u32,
    end: u32,
    phase: Phase,
    priority: Priority,
    /// Row ids of the batch, token-major.
    rows: Vec<u32>,
    /// Positions, ascending, of the rows read from the source. Their
    /// stored bytes are the front of `scratch` in that order, or the slots
    /// themselves when `in_slots` (raw rows, all read at once).
    read_at: Vec<usize>,
    in_slots: bool,
    scratch: Vec<u8>,
    /// Positions of rows an earlier batch in flight reads: taken from the
    /// store once that batch has kept them.
    deferred: Vec<usize>,
    /// Rows copied from the store.
    hits: usize,
}

impl ReadBatch {
    /// The first token after the batch.
    pub(super) fn end(&self) -> u32 {
        self.end
    }
}

impl TableJob {
    /// The reader state of `table` for the prefill `setup` describes.
    pub(super) fn new(setup: &PrefillSetup<'_>, table: usize) -> TableJob {
        let decode = setup.decode[table];
        let row_bytes = match decode {
            Some(encoding) => encoding.values() * 4,
            None => setup.source.row_bytes(table),
        };
        let cols = setup.cols[0];
        TableJob {
            table,
            cols,
            row_bytes,
            plan: setup.plan,
            decode,
            prompt: setup.prompt.clone(),
            ring: RingBuf::new(setup.plan.ring_tokens as usize * cols * row_bytes),
            ready: CacheLine(Ready::new()),
            consumer: CacheLine(ConsumerMarks::default()),
            reuse: reuse_for(setup, table).map(Mutex::new),
            next_uses: OnceLock::new(),
            next_uses_set: Ready::new(),
            source: setup.source.clone(),
            stats: setup.stats.clone(),
            raw_scratch: Mutex::new(Vec::new()),
        }
    }

    /// Bytes this table's prefill memory holds now: the ring up to its
    /// highest written byte and the reuse store's slab.
    pub(super) fn held_bytes(&self) -> u64 {
        let store = self
            .reuse
            .as_ref()
            .map_or(0, |store| lock(store).slab_bytes());
        (self.ring.touched() + store) as u64
    }

    /// Free slots of the reuse store; `None` without one.
    pub(super) fn reuse_free_slots(&self) -> Option<usize> {
        Some(lock(self.reuse.as_ref()?).free_slots())
    }

    pub(super) fn token_bytes(&self) -> usize {
        self.cols * self.row_bytes
    }

    /// Bytes of a row as stored (what the source reads and the reuse store
    /// keeps), whatever the delivered format.
    fn stored_bytes(&self) -> usize {
        self.source.row_bytes(self.table)
    }

    /// Row ids of `table` for tokens `start..end`, token-major.
    pub(super) fn row_ids(&self, start: u32, end: u32) -> Vec<u32> {
        self.prompt.table_rows(self.table, start, end)
    }

    /// How this table's prefill reads go to the source, at `priority`
    /// ([`Priority::Prefill`], or [`Priority::PrefillLater`] for a batch
    /// needed after another one in flight).
    fn read_ctx(&self, phase: Phase, priority: Priority) -> ReadCtx<'_> {
        ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase,
            priority,
            batch: self.plan.batch,
        }
    }

    /// Reads tokens `start..end` into their ring slots, at `priority`:
    /// [`TableJob::begin_batch`] and [`TableJob::complete_batch`] at once.
    ///
    /// Caller guarantees: no consumer view covers those slots (`end <=
    /// released + ring_tokens` and `start >= ready`), and no other reader of
    /// this job runs (the consumer reading at the wait with no pool reader
    /// scheduled).
    pub(super) fn read_range(
        &self,
        start: u32,
        end: u32,
        phase: Phase,
        priority: Priority,
    ) -> Result<()> {
        let batch = self.begin_batch(start, end, phase, priority, Vec::new)?;
        self.complete_batch(batch)
    }

    /// The first half of a ring batch of tokens `start..end`: the rows the
    /// reuse store holds are copied into their ring slots and the others
    /// are read there, at `priority`, but for rows an earlier batch of the
    /// table in flight reads too. Those are left to
    /// [`TableJob::complete_batch`], which takes them from the store once
    /// that batch has kept them: a row two batches in flight share is read
    /// once.
    ///
    /// `earlier` says the tokens of the earlier batches of the table in
    /// flight (called only with a store); their rows are hashed here, by
    /// the later batch, whose reads wait behind theirs anyway, so a batch
    /// with none in flight behind it pays nothing for this.
    ///
    /// Caller guarantees: no consumer view covers the slots of
    /// `start..end` (`end <= released + ring_tokens` and `start >= ready`),
    /// and nobody else writes them until the batch is completed.
    pub(super) fn begin_batch(
        &self,
        start: u32,
        end: u32,
        phase: Phase,
        priority: Priority,
        earlier: impl FnOnce() -> Vec<(u32, u32)>,
    ) -> Result<ReadBatch> {
        let ctx = self.read_ctx(phase, priority);
        let rows = self.row_ids(start, end);
        let mut scratch = self.take_scratch();
        // SAFETY: per the caller's guarantee the slots of start..end are
        // neither viewed by the consumer nor written by anyone else.
        let mut slots = unsafe { self.slots(start, end) };
        let mut batch = ReadBatch {
            start,
            end,
            phase,
            priority,
            rows: Vec::new(),
            read_at: Vec::new(),
            in_slots: false,
            scratch: Vec::new(),
            deferred: Vec::new(),
            hits: 0,
        };
        let Some(store) = &self.reuse else {
            slots.read_all(&ctx, self.table, &rows, &mut scratch)?;
            batch.scratch = scratch;
            return Ok(batch);
        };
        let earlier: Vec<Vec<u32>> = earlier()
            .into_iter()
            .map(|(from, to)| distinct(self.row_ids(from, to)))
            .collect();
        {
            let store = lock(store);
            for (i, &row) in rows.iter().enumerate() {
                match store.get(row) {
                    Some(stored) => {
                        slots.put(i, stored).map_err(|e| self.corrupt(e, row))?;
                        batch.hits += 1;
                    }
                    None if earlier.iter().any(|set| set.binary_search(&row).is_ok()) => {
                        batch.deferred.push(i);
                    }
                    None => batch.read_at.push(i),
                }
            }
        }
        match &mut slots {
            // Nothing held or left: the whole batch is read as if there
            // were no store, and the store takes the rows from there.
            BatchSlots {
                first,
                wrapped: None,
            } if batch.read_at.len() == rows.len() => {
                first.read_all(&ctx, self.table, &rows, &mut scratch)?;
                batch.in_slots = matches!(first, Slots::Raw(_));
            }
            _ => {
                let missing: Vec<u32> = batch.read_at.iter().map(|&i| rows[i]).collect();
                let stored_bytes = self.stored_bytes();
                let read = grown(&mut scratch, missing.len() * stored_bytes);
                ctx.read(self.table, &missing, read)?;
                for (bytes, &i) in read.chunks_exact(stored_bytes).zip(&batch.read_at) {
                    slots.put(i, bytes).map_err(|e| self.corrupt(e, rows[i]))?;
                }
            }
        }
        batch.rows = rows;
        batch.scratch = scratch;
        Ok(batch)
    }

    /// The second half of a ring batch, once every earlier batch of the
    /// table is completed: the rows left to the store are taken from it
    /// (or read, where it did not keep them), then each row of the batch
    /// that a later token needs goes to the store with its next use.
    /// Completing batches in token order keeps the store's next uses right:
    /// each batch moves its rows past the ones before it.
    pub(super) fn complete_batch(&self, mut batch: ReadBatch) -> Result<()> {
        let Some(store) = &self.reuse else {
            self.put_scratch(batch.scratch);
            return Ok(());
        };
        let store = &mut lock(store);
        // SAFETY: `begin_batch`'s guarantee holds until the batch is
        // published, after this.
        let mut slots = unsafe { self.slots(batch.start, batch.end) };
        let mut late = Vec::new();
        for &i in &batch.deferred {
            let row = batch.rows[i];
            match store.get(row) {
                Some(stored) => {
                    slots.put(i, stored).map_err(|e| self.corrupt(e, row))?;
                    batch.hits += 1;
                }
                None => late.push(i),
            }
        }
        let stored_bytes = self.stored_bytes();
        if !late.is_empty() {
            // The earlier batch did not keep them (its store was full of
            // rows needed sooner): read now, and merged into the rows read
            // for the store's bookkeeping.
            let ctx = self.read_ctx(batch.phase, batch.priority);
            let missing: Vec<u32> = late.iter().map(|&i| batch.rows[i]).collect();
            let mut read = vec![0; missing.len() * stored_bytes];
            ctx.read(self.table, &missing, &mut read)?;
            for (bytes, &i) in read.chunks_exact(stored_bytes).zip(&late) {
                slots.put(i, bytes).map_err(|e| self.corrupt(e, batch.rows[i]))?;
            }
            let early = &batch.scratch[..batch.read_at.len() * stored_bytes];
            let (at, bytes) = merge_by_position(
                (&batch.read_at, early),
                (&late, &read),
                stored_bytes,
            );
            batch.read_at = at;
            grown(&mut batch.scratch, bytes.len()).copy_from_slice(&bytes);
        }
        let stored: &[u8] = match &slots.first {
            Slots::Raw(out) if batch.in_slots => out,
            _ => &batch.scratch[..batch.read_at.len() * stored_bytes],
        };
        let (start, end) = (batch.start, batch.end);
        self.keep_for_reuse(store, start, end, &batch.rows, &batch.read_at, stored);
        self.stats
            .record_reuse(batch.phase, self.table, batch.hits as u64);
        self.put_scratch(batch.scratch);
        Ok(())
    }

    /// The ring slots of tokens `start..end`.
    ///
    /// # Safety
    /// No consumer view covers them and nobody else writes them while the
    /// result lives.
    unsafe fn slots(&self, start: u32, end: u32) -> BatchSlots<'_> {
        let cap = self.plan.ring_tokens;
        let tb = self.token_bytes();
        let run = |from: u32, to: u32| {
            let (at, len) = ((from % cap) as usize * tb, (to - from) as usize * tb);
            match self.decode {
                // SAFETY: per the caller's guarantee.
                Some(enc) => Slots::F32(enc, unsafe { self.ring.slice_mut_f32(at, len / 4) }),
                // SAFETY: as above.
                None => Slots::Raw(unsafe { self.ring.slice_mut(at, len) }),
            }
        };
        let split = end.min(start + (cap - start % cap));
        BatchSlots {
            first: run(start, split),
            wrapped: (split < end).then(|| ((split - start) as usize * self.cols, run(split, end))),
        }
    }

    fn corrupt(&self, error: RowsError, row: u32) -> crate::Error {
        error.into_error_at(self.table, &[row])
    }

    /// A buffer for a batch's stored bytes, kept from an earlier batch.
    fn take_scratch(&self) -> Vec<u8> {
        lock(&self.raw_scratch).pop().unwrap_or_default()
    }

    fn put_scratch(&self, scratch: Vec<u8>) {
        lock(&self.raw_scratch).push(scratch);
    }

    /// Reads the rows of tokens `start..end` that the reuse store lacks into
    /// it, each keyed by its first use in the range (as many as it has free
    /// slots for, earliest first), at `priority`.
    ///
    /// Caller guarantees no other reader of this job runs (the table is
    /// busy with this batch), so the store does not change between the two
    /// locks.
    pub(super) fn read_ahead(&self, start: u32, end: u32, priority: Priority) -> Result<()> {
        let Some(reuse) = &self.reuse else {
            return Ok(());
        };
        let first_uses = self.first_uses(start, end);
        let (rows, tokens): (Vec<u32>, Vec<u32>) = {
            let store = lock(reuse);
            first_uses
                .into_iter()
                .filter(|&(_, row)| !store.contains(row))
                .take(store.free_slots())
                .map(|(token, row)| (row, token))
                .unzip()
        };
        let ctx = self.read_ctx(Phase::Prefill, priority);
        let stored_bytes = self.stored_bytes();
        let mut scratch = self.take_scratch();
        let read = grown(&mut scratch, rows.len() * stored_bytes);
        ctx.read(self.table, &rows, read)?;
        self.stats
            .record_ahead(Phase::Prefill, self.table, rows.len() as u64);
        let mut store = lock(reuse);
        for ((&row, &token), bytes) in rows
            .iter()
            .zip(&tokens)
            .zip(read.chunks_exact(stored_bytes))
        {
            store.update(row, token, bytes);
        }
        drop(store);
        self.put_scratch(scratch);
        Ok(())
    }

    /// Brings the rows of tokens `start..end` that the reuse store lacks
    /// into the page cache, for the ring to read from there
    /// ([`Priority::Warm`]: a row cache does not keep them, and a source
    /// over buffered files only advises the kernel to read them; one that
    /// reads, reads into a buffer that is dropped).
    pub(super) fn warm(&self, start: u32, end: u32) -> Result<()> {
        // Distinct rows in row order (the order storage reads them in); which
        // token uses a row first does not matter to the page cache.
        let mut rows = self.row_ids(start, end);
        rows.sort_unstable();
        rows.dedup();
        if let Some(store) = &self.reuse {
            let store = lock(store);
            rows.retain(|&row| !store.contains(row));
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut scratch = self.take_scratch();
        let len = rows.len() * self.stored_bytes();
        // Straight to the source, not through `ReadCtx`: the prefill's row
        // counts stay those of the rows it delivers (the ring's later reads
        // of these rows are counted there, as page-cache reads); the device
        // reads of the warm-up have counters of their own.
        let request = RowRequest {
            table: self.table,
            rows: &rows,
            priority: Priority::Warm,
        };
        let batch = self.source.read(request, grown(&mut scratch, len));
        self.put_scratch(scratch);
        self.stats.record_warm(Phase::Prefill, self.table, &batch?);
        Ok(())
    }

    /// (token, row) of the first occurrence of each distinct row of tokens
    /// `start..end`, by token.
    fn first_uses(&self, start: u32, end: u32) -> Vec<(u32, u32)> {
        let cols = self.cols as u32;
        let mut uses: Vec<(u32, u32)> = self
            .row_ids(start, end)
            .into_iter()
            .enumerate()
            .map(|(i, row)| (start + i as u32 / cols, row))
            .collect();
        uses.sort_unstable_by_key(|&(token, row)| (row, token));
        uses.dedup_by_key(|&mut (_, row)| row);
        uses.sort_unstable();
        uses
    }

    /// Gives the store each row of tokens `first..end` (`rows`) whose next
    /// use is past the range, with that next use. Rows it holds are moved
    /// first, then the ones just read (`stored`, the rows at `missing_at`,
    /// or every row when nothing was held), which may evict: so no held
    /// row of this range is evicted before its move, whose bytes would then
    /// be gone.
    fn keep_for_reuse(
        &self,
        store: &mut ReuseStore,
        first: u32,
        end: u32,
        rows: &[u32],
        missing_at: &[usize],
        stored: &[u8],
    ) {
        let base = first as usize * self.cols;
        // Set by the consumer right after it queued the first batches; at
        // worst the first batch waits here for the rest of that hashing.
        // The count is published on every path (`find_next_uses`).
        let _ = self.next_uses_set.wait(1);
        let none = NextUses::none(self.cols);
        let next_uses = self.next_uses.get().unwrap_or(&none);
        // An earlier occurrence whose next use is inside the range is
        // superseded by that later one.
        let next_past = |i: usize| Some(next_uses.get(base + i)).filter(|&next| next >= end);
        let mut read = missing_at.iter().peekable();
        let mut held = Vec::new();
        for (i, &row) in rows.iter().enumerate() {
            // `missing_at` is ascending: the rows not in it were held.
            if read.next_if_eq(&&i).is_none() {
                held.extend(next_past(i).map(|next| (row, next)));
            }
        }
        for (row, next) in held {
            store.update(row, next, &[]);
        }
        let stored_bytes = self.stored_bytes();
        for (&i, bytes) in missing_at.iter().zip(stored.chunks_exact(stored_bytes)) {
            if let Some(next) = next_past(i) {
                store.update(rows[i], next, bytes);
            }
        }
    }
}

/// The distinct values of `rows`, sorted.
fn distinct(mut rows: Vec<u32>) -> Vec<u32> {
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Two lists of (ascending positions, their `row_bytes`-byte rows) merged
/// into one by position.
fn merge_by_position(
    a: (&[usize], &[u8]),
    b: (&[usize], &[u8]),
    row_bytes: usize,
) -> (Vec<usize>, Vec<u8>) {
    let mut at = Vec::with_capacity(a.0.len() + b.0.len());
    let mut bytes = Vec::with_capacity(a.1.len() + b.1.len());
    let (mut i, mut j) = (0, 0);
    while i < a.0.len() || j < b.0.len() {
        let from_a = j == b.0.len() || (i < a.0.len() && a.0[i] < b.0[j]);
        let (pos, row) = if from_a {
            i += 1;
            (a.0[i - 1], &a.1[(i - 1) * row_bytes..][..row_bytes])
        } else {
            j += 1;
            (b.0[j - 1], &b.1[(j - 1) * row_bytes..][..row_bytes])
        };
        at.push(pos);
        bytes.extend_from_slice(row);
    }
    (at, bytes)
}

/// The reuse store of `table`; `None` when reuse is off or cannot help
/// (one batch).
fn reuse_for(setup: &PrefillSetup<'_>, table: usize) -> Option<ReuseStore> {
    let plan = setup.plan;
    if plan.whole_table || plan.tokens <= plan.first_chunk {
        return None;
    }
    ReuseStore::new(plan.reuse_bytes, setup.source.row_bytes(table))
}

impl TableJob {
    /// Hashes the whole prompt into the next use of each row occurrence
    /// and hands it to the batches (a table without a reuse store needs
    /// none). Called once, by the consumer, after the first batches are
    /// queued, so their reads are under way while it hashes; a batch that
    /// reaches the store meanwhile waits for it.
    pub(super) fn find_next_uses(&self) {
        // Published whatever happens below, so the batches' wait ends: a
        // panic leaves no table (every row then counts as not used again:
        // read again, not kept).
        struct Publish<'a>(&'a Ready);
        impl Drop for Publish<'_> {
            fn drop(&mut self) {
                self.0.publish(1);
            }
        }
        let _publish = Publish(&self.next_uses_set);
        if self.reuse.is_none() {
            return;
        }
        let (cols, tokens) = (self.cols, self.plan.tokens as usize);
        // The walk goes backwards; rows are hashed a block of tokens at a time.
        const BLOCK: usize = 4096;
        let mut block: (usize, Vec<u32>) = (usize::MAX, Vec::new());
        let next = next_uses(tokens * cols, cols, |i| {
            let token = i / cols;
            if !(block.0..block.0.saturating_add(BLOCK)).contains(&token) {
                let first = token / BLOCK * BLOCK;
                let end = (first + BLOCK).min(tokens);
                block = (first, self.row_ids(first as u32, end as u32));
            }
            block.1[i - block.0 * cols]
        });
        let _ = self.next_uses.set(next);
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{align_of, offset_of};

    use super::super::sched::PrefillCore;
    use super::TableJob;

    const LINE: usize = 128;

    /// The lines one side writes and the other reads stay apart: the
    /// readers' ready count, the consumer's marks, the scheduler's lock
    /// (measured: a ready wait's stores took up to 1.7 us where they shared
    /// a line with the ready count, docs/bench.md).
    #[test]
    fn the_ready_count_and_the_consumers_marks_have_lines_of_their_own() {
        let ready = offset_of!(TableJob, ready);
        let consumer = offset_of!(TableJob, consumer);
        assert_eq!(align_of::<TableJob>() % LINE, 0);
        assert_eq!(ready % LINE, 0);
        assert_eq!(consumer % LINE, 0);
        assert_ne!(ready / LINE, consumer / LINE);
        assert_eq!(PrefillCore::sched_offset() % LINE, 0);
    }
}
