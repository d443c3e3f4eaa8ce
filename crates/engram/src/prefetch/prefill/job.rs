//! One table's reader state for one prefill: its ring, its reuse store and
//! the reads that fill them.

use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex};

use super::super::read::{grown, ReadCtx};
use super::super::ready::Ready;
use super::super::reuse::{next_uses, NextUses, ReuseStore};
use super::super::ring::RingBuf;
use super::super::source::{Priority, RowRequest, RowSource};
use super::super::sync::lock_std as lock;
use super::rows::PromptRows;
use super::{Plan, PrefillSetup};
use crate::codec::{Encoding, ROW_DIM};
use crate::stats::{Phase, StatsRecorder};
use crate::Result;

/// One table's reader state for one prefill.
pub(super) struct TableJob {
    pub(super) table: usize,
    pub(super) cols: usize,
    pub(super) row_bytes: usize,
    pub(super) plan: Plan,
    /// Some: rows are decoded to f32 (`row_bytes` is then `ROW_DIM * 4`).
    pub(super) decode: Option<Encoding>,
    /// The prompt, hashed into this table's row ids batch by batch.
    pub(super) prompt: Arc<PromptRows>,
    pub(super) ring: RingBuf,
    pub(super) ready: Ready,
    /// Tokens before this the consumer no longer holds (the reader may
    /// overwrite their ring slots).
    pub(super) released: AtomicU32,
    /// Set while a consumer is blocked on this table: its batches go first.
    pub(super) waited_on: AtomicBool,
    /// The consumer has reached this table's layer at least once (it has
    /// called wait): from then on a small lead makes the table urgent.
    pub(super) consumer_started: AtomicBool,
    /// `upto` of the consumer's latest wait.
    pub(super) consumed: AtomicU32,
    /// Whole-prompt dedup: rows read that later tokens need again.
    reuse: Option<Mutex<Reuse>>,
    pub(super) source: Arc<dyn RowSource>,
    pub(super) stats: Arc<StatsRecorder>,
    /// The buffer page-cache warm reads land in and are dropped from.
    warm_scratch: Mutex<Vec<u8>>,
    /// The stored bytes of an f32 table's rows before they are decoded,
    /// kept between batches (one reader of the job at a time).
    raw_scratch: Mutex<Vec<u8>>,
}

/// A table's reuse store and the next use of each of its row occurrences.
struct Reuse {
    store: ReuseStore,
    /// Per occurrence (token-major), the token that next uses its row.
    next: NextUses,
    /// Buffer for the rows a batch reads, kept between batches: allocating
    /// megabytes per batch on pool threads grows the allocator's retained
    /// memory with the prompt.
    scratch: Vec<u8>,
}

impl TableJob {
    /// The reader state of `table` for the prefill `setup` describes.
    pub(super) fn new(setup: &PrefillSetup<'_>, table: usize) -> TableJob {
        let decode = setup.decode[table];
        let row_bytes = match decode {
            Some(_) => ROW_DIM * 4,
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
            ready: Ready::new(),
            released: AtomicU32::new(0),
            waited_on: AtomicBool::new(false),
            consumer_started: AtomicBool::new(false),
            consumed: AtomicU32::new(0),
            reuse: reuse_for(setup, table, row_bytes),
            source: setup.source.clone(),
            stats: setup.stats.clone(),
            warm_scratch: Mutex::new(Vec::new()),
            raw_scratch: Mutex::new(Vec::new()),
        }
    }

    /// Bytes this table's prefill memory holds now: the ring up to its
    /// highest written byte and the reuse store's slab.
    pub(super) fn held_bytes(&self) -> u64 {
        let store = self
            .reuse
            .as_ref()
            .map_or(0, |reuse| lock(reuse).store.slab_bytes());
        (self.ring.touched() + store) as u64
    }

    /// Free slots of the reuse store; `None` without one.
    pub(super) fn reuse_free_slots(&self) -> Option<usize> {
        Some(lock(self.reuse.as_ref()?).store.free_slots())
    }

    pub(super) fn token_bytes(&self) -> usize {
        self.cols * self.row_bytes
    }

    /// Row ids of `table` for tokens `start..end`, token-major.
    pub(super) fn row_ids(&self, start: u32, end: u32) -> Vec<u32> {
        self.prompt.table_rows(self.table, start, end)
    }

    /// Reads tokens `start..end` into their ring slots (split where the ring
    /// wraps).
    ///
    /// Caller guarantees: no consumer view covers those slots (`end <=
    /// released + ring_tokens` and `start >= ready`), and no other reader of
    /// this job runs (one chunk in flight, or the consumer reading at the
    /// wait with no pool reader scheduled).
    pub(super) fn read_range(&self, start: u32, end: u32, phase: Phase) -> Result<()> {
        let ctx = ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase,
            priority: Priority::Prefill,
            batch: self.plan.batch,
        };
        let cap = self.plan.ring_tokens;
        let mut t = start;
        while t < end {
            let slot = t % cap;
            let seg_end = end.min(t + (cap - slot));
            let rows = self.row_ids(t, seg_end);
            let tb = self.token_bytes();
            let (at, len) = (slot as usize * tb, (seg_end - t) as usize * tb);
            // SAFETY (all arms): per the caller's guarantee the slots of
            // t..seg_end are neither viewed by the consumer nor written by
            // anyone else.
            match (&self.reuse, self.decode) {
                (Some(reuse), _) => {
                    let out = unsafe { self.ring.slice_mut(at, len) };
                    self.read_reusing(&ctx, &mut lock(reuse), t, seg_end, &rows, out)?;
                }
                (None, Some(enc)) => {
                    let out = unsafe { self.ring.slice_mut_f32(at, len / 4) };
                    let mut raw = lock(&self.raw_scratch);
                    ctx.read_f32_via(self.table, &rows, enc, out, &mut raw)?;
                }
                (None, None) => {
                    ctx.read(self.table, &rows, unsafe { self.ring.slice_mut(at, len) })?
                }
            }
            t = seg_end;
        }
        Ok(())
    }

    /// Reads the rows of tokens `start..end` that the reuse store lacks into
    /// it, each keyed by its first use in the range (as many as it has free
    /// slots for, earliest first).
    ///
    /// Caller guarantees no other reader of this job runs (the table is
    /// busy with this batch), so the store does not change between the two
    /// locks.
    pub(super) fn read_ahead(&self, start: u32, end: u32) -> Result<()> {
        let Some(reuse) = &self.reuse else {
            return Ok(());
        };
        let first_uses = self.first_uses(start, end);
        let (rows, tokens, scratch): (Vec<u32>, Vec<u32>, _) = {
            let mut reuse = lock(reuse);
            let scratch = std::mem::take(&mut reuse.scratch);
            let (rows, tokens) = first_uses
                .into_iter()
                .filter(|&(_, row)| !reuse.store.contains(row))
                .take(reuse.store.free_slots())
                .map(|(token, row)| (row, token))
                .unzip();
            (rows, tokens, scratch)
        };
        let ctx = ReadCtx {
            source: &self.source,
            stats: &self.stats,
            phase: Phase::Prefill,
            priority: Priority::Prefill,
            batch: self.plan.batch,
        };
        let len = rows.len() * self.row_bytes;
        let mut read = scratch;
        self.read_delivered(&ctx, &rows, grown(&mut read, len))?;
        self.stats
            .record_ahead(Phase::Prefill, self.table, rows.len() as u64);
        let mut reuse = lock(reuse);
        for ((&row, &token), bytes) in rows
            .iter()
            .zip(&tokens)
            .zip(read[..len].chunks_exact(self.row_bytes))
        {
            reuse.store.update(row, token, bytes);
        }
        reuse.scratch = read;
        Ok(())
    }

    /// Reads the raw rows of tokens `start..end` that the reuse store lacks
    /// and drops them: they are then in the page cache when the ring reads
    /// them ([`Priority::Warm`]: a row cache does not keep them).
    pub(super) fn warm(&self, start: u32, end: u32) -> Result<()> {
        // Distinct rows in row order (the order storage reads them in); which
        // token uses a row first does not matter to the page cache.
        let mut rows = self.row_ids(start, end);
        rows.sort_unstable();
        rows.dedup();
        if let Some(reuse) = &self.reuse {
            let reuse = lock(reuse);
            rows.retain(|&row| !reuse.store.contains(row));
        }
        if rows.is_empty() {
            return Ok(());
        }
        let mut scratch = lock(&self.warm_scratch);
        let len = rows.len() * self.source.row_bytes(self.table);
        // Straight to the source, not through `ReadCtx`: the prefill's row
        // counts stay those of the rows it delivers (the ring's later reads
        // of these rows are counted there, as page-cache reads); the device
        // reads of the warm-up have counters of their own.
        let request = RowRequest {
            table: self.table,
            rows: &rows,
            priority: Priority::Warm,
        };
        let batch = self.source.read(request, grown(&mut scratch, len))?;
        self.stats.record_warm(Phase::Prefill, self.table, &batch);
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

    /// Reads `rows` into `out` in the delivered format: raw bytes, or f32
    /// values as native-endian bytes (the ring's f32 views read them back).
    fn read_delivered(&self, ctx: &ReadCtx<'_>, rows: &[u32], out: &mut [u8]) -> Result<()> {
        match self.decode {
            Some(enc) => {
                // SAFETY: every bit pattern is a valid f32, and `out` is
                // borrowed mutably for as long as `direct` lives.
                let (head, direct, tail) = unsafe { out.align_to_mut::<f32>() };
                let mut raw = lock(&self.raw_scratch);
                if head.is_empty() && tail.is_empty() {
                    // Decoded in place: no second buffer and no copy
                    // (the ring and the store's scratch are f32-aligned).
                    return ctx.read_f32_via(self.table, rows, enc, direct, &mut raw);
                }
                let mut values = vec![0f32; rows.len() * ROW_DIM];
                ctx.read_f32_via(self.table, rows, enc, &mut values, &mut raw)?;
                for (dst, v) in out.chunks_exact_mut(4).zip(&values) {
                    dst.copy_from_slice(&v.to_ne_bytes());
                }
                Ok(())
            }
            None => ctx.read(self.table, rows, out),
        }
    }

    /// Reads `rows` into the row slots `slots` of `out` (row `k` at
    /// `slots[k] * row_bytes`). f32 rows are decoded from their stored bytes
    /// straight into their slots; raw ones are read into the store's scratch
    /// and copied. Why not decode into the scratch and copy, as before: the
    /// copy moved a kilobyte per f32 row (callgrind, an f32 prefill of 4,096
    /// tokens, docs/bench.md).
    fn read_into_slots(
        &self,
        ctx: &ReadCtx<'_>,
        reuse: &mut Reuse,
        rows: &[u32],
        slots: &[usize],
        out: &mut [u8],
    ) -> Result<()> {
        let rb = self.row_bytes;
        if let Some(enc) = self.decode {
            // SAFETY: every bit pattern is a valid f32, and `out` is
            // borrowed mutably for as long as `values` lives.
            let (head, values, tail) = unsafe { out.align_to_mut::<f32>() };
            if head.is_empty() && tail.is_empty() {
                let mut raw = lock(&self.raw_scratch);
                let stored = ctx.read_raw_via(self.table, rows, enc, &mut raw)?;
                for ((bytes, row), &slot) in
                    stored.chunks_exact(enc.row_bytes()).zip(rows).zip(slots)
                {
                    enc.decode_rows(bytes, &mut values[slot * ROW_DIM..][..ROW_DIM])
                        .map_err(|e| e.into_error_at(self.table, std::slice::from_ref(row)))?;
                }
                return Ok(());
            }
        }
        let read = grown(&mut reuse.scratch, rows.len() * rb);
        self.read_delivered(ctx, rows, read)?;
        for (src, &i) in read.chunks_exact(rb).zip(slots) {
            out[i * rb..(i + 1) * rb].copy_from_slice(src);
        }
        Ok(())
    }

    /// Fills `out` with the rows of tokens `first..end` (`rows`): those in
    /// the reuse store are copied from it, the rest read in one call; then
    /// each row's last occurrence in the range goes to the store with its
    /// next use.
    fn read_reusing(
        &self,
        ctx: &ReadCtx<'_>,
        reuse: &mut Reuse,
        first: u32,
        end: u32,
        rows: &[u32],
        out: &mut [u8],
    ) -> Result<()> {
        let rb = self.row_bytes;
        let mut missing = Vec::new();
        let mut missing_at = Vec::new();
        for (i, &row) in rows.iter().enumerate() {
            match reuse.store.get(row) {
                Some(bytes) => out[i * rb..(i + 1) * rb].copy_from_slice(bytes),
                None => {
                    missing.push(row);
                    missing_at.push(i);
                }
            }
        }
        let hits = rows.len() - missing.len();
        if hits == 0 {
            self.read_delivered(ctx, rows, out)?;
        } else if !missing.is_empty() {
            self.read_into_slots(ctx, reuse, &missing, &missing_at, out)?;
        }
        let base = first as usize * self.cols;
        for (i, &row) in rows.iter().enumerate() {
            // An earlier occurrence whose next use is inside the range is
            // superseded by that later one.
            let next = reuse.next.get(base + i);
            if next >= end {
                reuse.store.update(row, next, &out[i * rb..(i + 1) * rb]);
            }
        }
        self.stats.record_reuse(ctx.phase, self.table, hits as u64);
        Ok(())
    }
}

/// The reuse store of `table`, with the next use of each of its row
/// occurrences; `None` when reuse is off or cannot help (one batch).
fn reuse_for(setup: &PrefillSetup<'_>, table: usize, row_bytes: usize) -> Option<Mutex<Reuse>> {
    let plan = setup.plan;
    if plan.whole_table || plan.tokens <= plan.first_chunk {
        return None;
    }
    let store = ReuseStore::new(plan.reuse_bytes, row_bytes)?;
    let cols = setup.cols[0];
    // The walk goes backwards; rows are hashed a block of tokens at a time.
    const BLOCK: usize = 4096;
    let mut block: (usize, Vec<u32>) = (usize::MAX, Vec::new());
    let next = next_uses(plan.tokens as usize * cols, cols, |i| {
        let token = i / cols;
        if !(block.0..block.0.saturating_add(BLOCK)).contains(&token) {
            let first = token / BLOCK * BLOCK;
            let end = (first + BLOCK).min(plan.tokens as usize);
            block = (
                first,
                setup.prompt.table_rows(table, first as u32, end as u32),
            );
        }
        block.1[i - block.0 * cols]
    });
    Some(Mutex::new(Reuse {
        store,
        next,
        scratch: Vec::new(),
    }))
}
