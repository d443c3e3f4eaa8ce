//! The session row cache: rows read once are served from RAM, within a byte
//! budget.
//!
//! Built on `quick_cache` (sync, sharded, weighted): a maintained
//! concurrent cache whose S3-FIFO-style policy keeps a small probation queue
//! and ghost history, so one long scan of one-off rows (a prefill of new
//! text) does not flush the hot bigram rows that repeat across prompts; it
//! weighs entries, which a byte budget needs; and it is pure Rust. Entries
//! are keyed `(table, row)` and hold the delivered row bytes, so results
//! are bit-identical with and without the cache.
//!
//! Rows a prefill reads ([`Priority::Prefill`]) pass a doorkeeper first: a
//! prompt's rows are mostly not needed again after it (its reuse store
//! serves the repeats inside it), and inserting every one of them costs the
//! prefill's readers an allocation and a copy per row and pushes out rows
//! decode needs. A prefill row is kept the second time it is read past the
//! cache (seen twice: a row evicted from a long prompt's reuse store, or a
//! prompt sent again); decode and hint rows are kept at once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::io::{BatchStats, Priority, RowRequest, RowSource, TableShape};
use crate::{Error, Result};

/// Bytes an entry costs beyond its row bytes: the key, the `Arc` header and
/// the cache's slot (an estimate, so the budget bounds real memory).
const ENTRY_OVERHEAD: u64 = 64;

/// Weighs a cached row by its bytes plus per-entry overhead.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowWeighter;

impl Weighter<(u32, u32), Arc<[u8]>> for RowWeighter {
    fn weight(&self, _key: &(u32, u32), row: &Arc<[u8]>) -> u64 {
        row.len() as u64 + ENTRY_OVERHEAD
    }
}

/// A concurrent row cache with a byte budget, and its hit/miss counters.
pub struct RowCache {
    rows: Cache<(u32, u32), Arc<[u8]>, RowWeighter>,
    budget: u64,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Prefill rows read once, not yet kept.
    door: Doorkeeper,
}

/// A one-hash Bloom filter of `(table, row)` keys with aging: the rows a
/// prefill has read past the cache once. Cleared when a set bit stands for
/// as many keys as the cache holds rows, so a key seen long ago counts as
/// new again and a false "seen" stays below 1 in 8 (a bit per 8 keys).
struct Doorkeeper {
    bits: Box<[AtomicU64]>,
    /// Keys marked since the last clear.
    marked: AtomicUsize,
    /// Marks before a clear.
    limit: usize,
}

impl Doorkeeper {
    /// A filter for a cache of about `items` rows: 8 bits per row, at least
    /// 64 Ki bits (8 KiB), so a small cache does not forget at once.
    fn new(items: usize) -> Doorkeeper {
        let bits = items.saturating_mul(8).next_power_of_two().max(1 << 16);
        Doorkeeper {
            bits: (0..bits / 64).map(|_| AtomicU64::new(0)).collect(),
            marked: AtomicUsize::new(0),
            limit: items.max(1),
        }
    }

    /// Marks `(table, row)` as seen; tells whether it was seen before.
    fn seen_before(&self, table: usize, row: u32) -> bool {
        let key = (table as u64) << 32 | u64::from(row);
        // A multiply-shift hash: row ids are spread already, and the table
        // in the high bits keeps equal rows of two tables apart.
        let bit = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize % (self.bits.len() * 64);
        let mask = 1u64 << (bit % 64);
        if self.bits[bit / 64].fetch_or(mask, Ordering::Relaxed) & mask != 0 {
            return true;
        }
        if self.marked.fetch_add(1, Ordering::Relaxed) + 1 >= self.limit {
            // Aging. Racing marks may be lost: such a row waits for one
            // more read before it is kept, nothing worse.
            self.marked.store(0, Ordering::Relaxed);
            for word in self.bits.iter() {
                word.store(0, Ordering::Relaxed);
            }
        }
        false
    }
}

impl RowCache {
    /// A cache holding at most about `budget_bytes` of rows (`row_bytes`
    /// sizes the index up front; any row size is accepted).
    pub fn new(budget_bytes: u64, row_bytes: usize) -> RowCache {
        let per_entry = row_bytes as u64 + ENTRY_OVERHEAD;
        let items = (budget_bytes / per_entry).clamp(16, 1 << 26) as usize;
        RowCache {
            rows: Cache::with_weighter(items, budget_bytes.max(1), RowWeighter),
            budget: budget_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            door: Doorkeeper::new(items),
        }
    }

    /// The byte budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes (weight) held now.
    pub fn bytes(&self) -> u64 {
        self.rows.weight()
    }

    /// Rows held now.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Distinct rows served from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Distinct rows that had to be read so far.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// The cached bytes of `row` of `table`, if held.
    pub fn get(&self, table: usize, row: u32) -> Option<Arc<[u8]>> {
        self.rows.get(&(table as u32, row))
    }

    /// Stores `bytes` as `row` of `table`.
    pub fn insert(&self, table: usize, row: u32, bytes: &[u8]) {
        self.rows.insert((table as u32, row), Arc::from(bytes));
    }

    /// A row read past the cache at `priority`: kept, except a prefill
    /// row read for the first time (see the module docs) and a row read
    /// only to warm the page cache; tells whether it was kept.
    pub fn admit(&self, table: usize, row: u32, bytes: &[u8], priority: Priority) -> bool {
        if priority == Priority::Warm {
            return false;
        }
        let prefill = matches!(priority, Priority::Prefill | Priority::PrefillLater);
        if prefill && !self.door.seen_before(table, row) {
            return false;
        }
        self.insert(table, row, bytes);
        true
    }
}

/// A tier in front of a row source: what it holds, what it keeps of the
/// rows read past it, and how it counts its hits. [`Tiered`] does the rest
/// (the forwarding and the read path, `read_through`), so each tier says
/// only what is its own.
pub trait Tier: Send + Sync {
    /// Bytes of a held row.
    type Row<'a>: AsRef<[u8]>
    where
        Self: 'a;

    /// The tier's name in the source's name (`cached(...)`, `hot(...)`).
    fn label(&self) -> &'static str;

    /// The bytes of `row` of `table`, if the tier holds them.
    fn held(&self, table: usize, row: u32) -> Option<Self::Row<'_>>;

    /// A row of `table` read past the tier at `priority` (the row cache
    /// keeps it, or a prefill row once seen twice).
    fn fetched(&self, table: usize, row: u32, bytes: &[u8], priority: Priority);

    /// Records `hits` of `distinct` rows asked for, in `stats` and in the
    /// tier's own counters.
    fn count(&self, hits: u64, distinct: u64, stats: &mut BatchStats);
}

/// A [`RowSource`] made of a [`Tier`] in front of `inner`.
pub struct Tiered<S, T> {
    inner: S,
    tier: T,
}

impl<S, T> Tiered<S, T> {
    /// `tier` in front of `inner` (each tier's own constructor checks what
    /// it needs first).
    pub(crate) fn with_tier(inner: S, tier: T) -> Tiered<S, T> {
        Tiered { inner, tier }
    }

    /// The wrapped source.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The tier.
    pub(crate) fn tier(&self) -> &T {
        &self.tier
    }
}

impl<S: RowSource, T: Tier> RowSource for Tiered<S, T> {
    fn name(&self) -> String {
        format!("{}({})", self.tier.label(), self.inner.name())
    }

    fn shapes(&self) -> &[TableShape] {
        self.inner.shapes()
    }

    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        let tier = &self.tier;
        let (table, priority) = (request.table, request.priority);
        let through = read_through(
            &self.inner,
            request,
            out,
            |row| tier.held(table, row),
            |row, bytes| tier.fetched(table, row, bytes, priority),
        )?;
        let mut stats = through.stats;
        tier.count(through.hits, through.groups, &mut stats);
        Ok(stats)
    }
}

/// A [`RowSource`] that serves rows from a [`RowCache`] and reads only the
/// misses, in one batch, through the inner source.
pub type CachedSource<S> = Tiered<S, Arc<RowCache>>;

impl<S: RowSource> CachedSource<S> {
    /// Wraps `inner` with `cache` (shareable, e.g. across sequences of one
    /// session).
    pub fn new(inner: S, cache: Arc<RowCache>) -> CachedSource<S> {
        Tiered::with_tier(inner, cache)
    }

    /// The cache.
    pub fn cache(&self) -> &Arc<RowCache> {
        self.tier()
    }
}

impl Tier for Arc<RowCache> {
    type Row<'a> = Arc<[u8]>;

    fn label(&self) -> &'static str {
        "cached"
    }

    fn held(&self, table: usize, row: u32) -> Option<Arc<[u8]>> {
        self.get(table, row)
    }

    fn fetched(&self, table: usize, row: u32, bytes: &[u8], priority: Priority) {
        self.admit(table, row, bytes, priority);
    }

    fn count(&self, hits: u64, distinct: u64, stats: &mut BatchStats) {
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(distinct - hits, Ordering::Relaxed);
        stats.cache_hits = hits;
    }
}

/// What [`read_through`] did: the inner source's stats (with the request's
/// own `rows_requested`, `rows_unique` and `elapsed`), the distinct rows
/// asked for, and how many of those the tier held.
pub(crate) struct ReadThrough {
    pub stats: BatchStats,
    pub groups: u64,
    pub hits: u64,
}

/// The read path of a tier in front of `inner` (the row cache, the hot
/// set): checks the request, serves each distinct row `held` returns bytes
/// for, reads the others from `inner` in one batch (sorted, deduplicated),
/// hands each fetched row to `fetched`, and scatters everything into `out`
/// in request order.
pub(crate) fn read_through<S: RowSource + ?Sized, R: AsRef<[u8]>>(
    inner: &S,
    request: RowRequest<'_>,
    out: &mut [u8],
    mut held: impl FnMut(u32) -> Option<R>,
    mut fetched: impl FnMut(u32, &[u8]),
) -> Result<ReadThrough> {
    let started = Instant::now();
    let (table, rows) = (request.table, request.rows);
    let row_bytes = check_request(inner, table, rows, out)?;
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_unstable_by_key(|&i| rows[i]);
    let groups = group_runs(rows, &order);
    // Held rows are copied out now; the others are collected for one read.
    let mut missing: Vec<(u32, &[usize])> = Vec::new();
    for &(row, positions) in &groups {
        match held(row) {
            Some(bytes) => scatter_row(bytes.as_ref(), positions, row_bytes, out),
            None => missing.push((row, positions)),
        }
    }
    let hits = (groups.len() - missing.len()) as u64;
    let mut stats = BatchStats::default();
    if !missing.is_empty() {
        let ids: Vec<u32> = missing.iter().map(|&(row, _)| row).collect();
        let mut buf = vec![0u8; ids.len() * row_bytes];
        stats = inner.read_rows_at(table, &ids, &mut buf, request.priority)?;
        for (k, &(row, positions)) in missing.iter().enumerate() {
            let bytes = &buf[k * row_bytes..(k + 1) * row_bytes];
            scatter_row(bytes, positions, row_bytes, out);
            fetched(row, bytes);
        }
    }
    stats.rows_requested = rows.len() as u64;
    stats.rows_unique = groups.len() as u64;
    stats.elapsed = started.elapsed();
    Ok(ReadThrough {
        stats,
        groups: groups.len() as u64,
        hits,
    })
}

/// Checks a request's table, output length and row ids against `inner`;
/// returns the table's row size.
fn check_request<S: RowSource + ?Sized>(
    inner: &S,
    table: usize,
    rows: &[u32],
    out: &[u8],
) -> Result<usize> {
    if table >= inner.tables() {
        return Err(Error::InvalidArgument(format!(
            "table {table} does not exist ({} tables)",
            inner.tables()
        )));
    }
    let row_bytes = inner.row_bytes(table);
    crate::io::batch::check_out_len(table, rows.len(), row_bytes, out.len())?;
    let table_rows = inner.table_rows(table);
    if let Some(&bad) = rows.iter().find(|&&r| u64::from(r) >= table_rows) {
        return Err(Error::InvalidArgument(format!(
            "row {bad} of table {table} is out of range (the table has {table_rows} rows)"
        )));
    }
    Ok(row_bytes)
}

/// Groups request positions (sorted by row in `order`) into runs of one row.
fn group_runs<'a>(rows: &[u32], order: &'a [usize]) -> Vec<(u32, &'a [usize])> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let row = rows[order[start]];
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&i| rows[i] == row)
                .count();
        groups.push((row, &order[start..end]));
        start = end;
    }
    groups
}

fn scatter_row(bytes: &[u8], positions: &[usize], row_bytes: usize, out: &mut [u8]) {
    for &i in positions {
        out[i * row_bytes..(i + 1) * row_bytes].copy_from_slice(bytes);
    }
}
