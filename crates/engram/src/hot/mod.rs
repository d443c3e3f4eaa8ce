//! The hot tier: the rows most text needs, chosen offline from corpus
//! statistics and kept in memory from the moment the engine opens.
//!
//! N-gram rows follow a Zipf law: a small share of rows serves a large
//! share of lookups. `engram profile` counts row frequency over a corpus
//! (`profile`, feature `tools`), keeps the most frequent rows that fit a
//! budget per table, and writes their raw bytes to a hot-row file
//! ([`file`], documented in `docs/model-files.md`). [`HotSet::load`] reads
//! that file with one
//! sequential pass (optionally `mlock`ed) and checks it against the model
//! ([`identity`]); [`HotSource`] is a [`RowSource`] decorator that serves hot
//! rows from memory and forwards the rest (to the row cache, then storage).
//! Hot rows are the model's raw bytes, so what is delivered is
//! bit-identical with and without the tier.

mod file;
pub mod identity;
// Building a hot set from a corpus is a tool (feature `tools`); loading
// one is the engine's.
#[cfg(feature = "tools")]
pub mod profile;
mod source;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use file::{ProfileInfo, MAGIC, VERSION};
pub use identity::{layout_digest, ModelIdentity};
pub use source::HotSource;

use crate::io::RowSource;
use crate::model::Model;
use crate::{Error, Result};

/// Hot-tier options of an engine: a hot-row file to load, or a hot set
/// already loaded (shared by several engines on one model, as the bench's
/// schedules share one). Built from `HotConfig::default()` (no hot tier),
/// [`HotConfig::loaded`] and the `with_*` setters.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct HotConfig {
    /// The hot-row file; `None`: no hot tier (unless `set` is given).
    pub path: Option<PathBuf>,
    /// Lock the loaded rows in RAM (`mlock`) so they are never paged out;
    /// fails with a clear error when `RLIMIT_MEMLOCK` is too low.
    pub mlock: bool,
    /// A hot set already loaded (for this model): used as it is, and
    /// `path` and `mlock` are not read.
    pub set: Option<Arc<HotSet>>,
}

// Setters, one per field: the struct is `#[non_exhaustive]`, so other
// crates start from `HotConfig::default()` and chain these.
impl HotConfig {
    /// Returns the config with [`HotConfig::path`] set to `path`.
    #[must_use]
    pub fn with_path(mut self, path: Option<PathBuf>) -> Self {
        self.path = path;
        self
    }

    /// Returns the config with [`HotConfig::mlock`] set to `mlock`.
    #[must_use]
    pub fn with_mlock(mut self, mlock: bool) -> Self {
        self.mlock = mlock;
        self
    }

    /// Returns the config with [`HotConfig::set`] set to `set`.
    #[must_use]
    pub fn with_set(mut self, set: Option<Arc<HotSet>>) -> Self {
        self.set = set;
        self
    }
}

impl HotConfig {
    /// The hot tier of an already loaded set (`None`: no hot tier).
    pub fn loaded(set: Option<Arc<HotSet>>) -> HotConfig {
        HotConfig {
            set,
            ..HotConfig::default()
        }
    }
}

/// Where a table's hot row bytes live: built in memory, or in the mapped
/// hot-row file.
enum RowBytes {
    Owned(Vec<u8>),
    Mapped(Arc<memmap2::Mmap>, std::ops::Range<usize>),
}

impl RowBytes {
    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            RowBytes::Owned(v) => v,
            RowBytes::Mapped(map, range) => &map[range.clone()],
        }
    }
}

impl std::fmt::Debug for RowBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes of rows", self.as_slice().len())
    }
}

/// One table's hot rows: sorted ids, their bytes, and a bucket index.
#[derive(Debug)]
pub struct HotTable {
    ids: Vec<u32>,
    rows: RowBytes,
    row_bytes: usize,
    /// Bucket `b` (ids whose top bits are `b`) is `ids[starts[b]..starts[b + 1]]`.
    starts: Vec<u32>,
    shift: u32,
}

impl HotTable {
    /// A table of `ids` (strictly increasing, all below `table_rows`) and
    /// their `rows`, `row_bytes` each.
    fn new(ids: Vec<u32>, rows: RowBytes, row_bytes: usize, table_rows: u64) -> HotTable {
        // About two ids per bucket: a lookup is one index load and a
        // search of a cache line, where a plain binary search over 4M ids
        // walks 22 levels, most of them cache misses (see benches/hot.rs).
        let id_bits = 64 - table_rows.saturating_sub(1).leading_zeros();
        let bucket_bits = (ids.len() / 2).max(1).ilog2().min(id_bits);
        let shift = id_bits - bucket_bits;
        let buckets = 1usize << bucket_bits;
        let mut starts = vec![0u32; buckets + 1];
        for &id in &ids {
            starts[(u64::from(id) >> shift) as usize + 1] += 1;
        }
        for b in 0..buckets {
            starts[b + 1] += starts[b];
        }
        HotTable {
            ids,
            rows,
            row_bytes,
            starts,
            shift,
        }
    }

    /// A table of hot `ids` (strictly increasing, all below `table_rows`)
    /// and their `rows` (`row_bytes` each, in id order), for callers that
    /// build a hot set in memory (benchmarks, tools).
    pub fn from_rows(
        ids: Vec<u32>,
        rows: Vec<u8>,
        row_bytes: usize,
        table_rows: u64,
    ) -> Result<HotTable> {
        if ids.windows(2).any(|w| w[0] >= w[1])
            || ids.last().is_some_and(|&r| u64::from(r) >= table_rows)
        {
            return Err(Error::InvalidArgument(format!(
                "hot row ids must be increasing and below the table's {table_rows} rows"
            )));
        }
        if rows.len() != ids.len() * row_bytes {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of hot rows for {} ids of {row_bytes} bytes",
                rows.len(),
                ids.len()
            )));
        }
        Ok(HotTable::new(
            ids,
            RowBytes::Owned(rows),
            row_bytes,
            table_rows,
        ))
    }

    /// The bytes of `row`, if it is hot.
    #[inline]
    pub fn get(&self, row: u32) -> Option<&[u8]> {
        let b = (u64::from(row) >> self.shift) as usize;
        // Rows past the table fall past the last bucket: not hot.
        let hi = *self.starts.get(b + 1)? as usize;
        let lo = self.starts[b] as usize;
        let i = lo + self.ids[lo..hi].binary_search(&row).ok()?;
        Some(&self.rows.as_slice()[i * self.row_bytes..(i + 1) * self.row_bytes])
    }

    /// The bytes of `row` found by a binary search over all ids (the
    /// baseline [`HotTable::get`] is measured against).
    pub fn get_by_binary_search(&self, row: u32) -> Option<&[u8]> {
        let i = self.ids.binary_search(&row).ok()?;
        Some(&self.rows.as_slice()[i * self.row_bytes..(i + 1) * self.row_bytes])
    }

    /// The hot row ids, increasing.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Hot rows held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the table holds no hot row.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Memory held: ids, rows and index.
    pub fn bytes(&self) -> u64 {
        (self.ids.len() * 4 + self.rows.as_slice().len() + self.starts.len() * 4) as u64
    }
}

/// A loaded, checked hot set: one [`HotTable`] per model table.
#[derive(Debug)]
pub struct HotSet {
    tables: Vec<HotTable>,
    model: ModelIdentity,
    profile: ProfileInfo,
    path: PathBuf,
    file_bytes: u64,
    load_time: Duration,
    locked: bool,
}

impl HotSet {
    /// Loads the hot-row file at `path` for `model`: checks magic, version,
    /// sizes and that it was made from this model (an error naming both
    /// models otherwise), reads it front to back in one pass, checks its
    /// checksums and row ids, and `mlock`s it if asked.
    pub fn load(path: &Path, model: &Model, mlock: bool) -> Result<HotSet> {
        let started = Instant::now();
        let opened = file::open(path)?;
        let ours = ModelIdentity::of(model)?;
        if !opened.header.model.matches(&ours) {
            return Err(Error::format(
                path,
                "model",
                format!(
                    "the hot set was made from {}, not from the model opened, {}",
                    opened.header.model.describe(),
                    ours.describe()
                ),
            ));
        }
        let (map, data) = file::load(path, &opened)?;
        let tables: Vec<HotTable> = data
            .into_iter()
            .zip(&opened.header.model.tables)
            .map(|((ids, rows), t)| {
                let rows = RowBytes::Mapped(map.clone(), rows);
                HotTable::new(ids, rows, t.row_bytes as usize, t.rows)
            })
            .collect();
        let mut set = HotSet {
            tables,
            model: opened.header.model.clone(),
            profile: opened.header.profile.clone(),
            path: path.to_path_buf(),
            file_bytes: opened.file_bytes,
            load_time: Duration::ZERO,
            locked: false,
        };
        if mlock {
            set.lock()?;
        }
        set.load_time = started.elapsed();
        Ok(set)
    }

    fn lock(&mut self) -> Result<()> {
        for t in &self.tables {
            for (ptr, len) in [
                (t.ids.as_ptr().cast::<u8>(), t.ids.len() * 4),
                (t.rows.as_slice().as_ptr(), t.rows.as_slice().len()),
                (t.starts.as_ptr().cast::<u8>(), t.starts.len() * 4),
            ] {
                if len == 0 {
                    continue;
                }
                // SAFETY: `ptr..ptr + len` is memory this set owns and
                // keeps until drop; mlock only pins it. Pages stay locked
                // until the process unmaps them (free at drop).
                if unsafe { libc::mlock(ptr.cast(), len) } != 0 {
                    let e = std::io::Error::last_os_error();
                    return Err(Error::io(
                        &self.path,
                        std::io::Error::new(
                            e.kind(),
                            format!(
                                "mlock of {len} bytes of hot rows failed: {e} (raise the \
                                 locked-memory limit, `ulimit -l`, or load without mlock)"
                            ),
                        ),
                    ));
                }
            }
        }
        self.locked = true;
        Ok(())
    }

    /// Compares a few hot rows of each table (evenly spread) with what
    /// `source` reads for them: a model rewritten with the same layout and
    /// sizes but other rows is refused here.
    pub fn verify(&self, source: &dyn RowSource) -> Result<()> {
        const SAMPLES: usize = 8;
        for (t, table) in self.tables.iter().enumerate() {
            if table.is_empty() {
                continue;
            }
            let step = table.len().div_ceil(SAMPLES);
            let ids: Vec<u32> = table.ids.iter().step_by(step).copied().collect();
            let mut got = vec![0u8; ids.len() * table.row_bytes];
            source.read_rows(t, &ids, &mut got)?;
            for (k, &id) in ids.iter().enumerate() {
                let stored = &got[k * table.row_bytes..(k + 1) * table.row_bytes];
                if table.get(id) != Some(stored) {
                    return Err(Error::format(
                        &self.path,
                        format!("table {t} row {id}"),
                        format!(
                            "the hot bytes differ from the model's ({}): the hot set was made \
                             from another model with the same layout",
                            self.model.name
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The tables, in layout order.
    pub fn tables(&self) -> &[HotTable] {
        &self.tables
    }

    /// Table `table`, if there is one.
    pub fn table(&self, table: usize) -> Option<&HotTable> {
        self.tables.get(table)
    }

    /// The model the set was made from, as its header records it.
    pub fn model(&self) -> &ModelIdentity {
        &self.model
    }

    /// How the set was profiled.
    pub fn profile(&self) -> &ProfileInfo {
        &self.profile
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size of that file.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// Wall time of [`HotSet::load`] (open, checks, the read, mlock).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Whether the rows are `mlock`ed.
    pub fn locked(&self) -> bool {
        self.locked
    }
}

/// A source with the hot tier in front, and the hot set (`None` without one).
pub type Layered = (Arc<dyn RowSource>, Option<Arc<HotSet>>);

/// Puts the hot tier of `config` in front of `source` (a model's storage,
/// or its row cache): loads and checks the file (or takes the loaded set),
/// verifies sampled rows
/// against `source`, and returns the decorated source with the set. With
/// no path, returns `source` unchanged.
pub fn layer(model: &Model, source: Arc<dyn RowSource>, config: &HotConfig) -> Result<Layered> {
    let hot = match (&config.set, &config.path) {
        (Some(set), _) => set.clone(),
        (None, Some(path)) => Arc::new(HotSet::load(path, model, config.mlock)?),
        (None, None) => return Ok((source, None)),
    };
    Ok((Arc::new(HotSource::new(source, hot.clone())?), Some(hot)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucketed_lookup_agrees_with_binary_search() {
        // Ids spread like hashed rows, plus the table's edges.
        for (n, table_rows) in [
            (0usize, 10u64),
            (1, 1),
            (5, 7),
            (1000, 5_000),
            (4096, 1 << 32),
        ] {
            let mut ids: Vec<u32> = (0..n as u64)
                .map(|i| ((i * 2_654_435_761) % table_rows) as u32)
                .collect();
            if n > 1 {
                ids.push((table_rows - 1) as u32);
                ids.push(0);
            }
            ids.sort_unstable();
            ids.dedup();
            let rows: Vec<u8> = ids
                .iter()
                .flat_map(|&id| [id as u8, (id >> 8) as u8])
                .collect();
            let table = HotTable::from_rows(ids.clone(), rows, 2, table_rows).unwrap();
            let probes = ids
                .iter()
                .flat_map(|&id| [id, id.wrapping_add(1), id.wrapping_sub(1)])
                .chain([0, u32::MAX, (table_rows - 1) as u32]);
            for row in probes {
                assert_eq!(table.get(row), table.get_by_binary_search(row), "row {row}");
            }
            for &id in &ids {
                assert_eq!(table.get(id), Some(&[id as u8, (id >> 8) as u8][..]));
            }
        }
    }
}
