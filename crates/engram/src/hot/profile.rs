//! Profiling a corpus: tokenize and hash it as the engine would, count how
//! often each row of each table is looked up, keep the most frequent rows
//! that fit a budget, read their bytes from the model and write the
//! hot-row file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::file::{self, Header, ProfileInfo, TableData};
use super::identity::ModelIdentity;
use crate::hash::Hasher;
use crate::io::RowSource;
use crate::layout::{self, token_map::VENDORED_SOURCE_NAME, Layout};
use crate::model::{Model, Progress};
use crate::{Error, Result};

/// Tokens hashed per call while counting: bounds the scratch row buffer
/// (tokens x 48 ids) whatever the size of one document.
const HASH_PIECE: usize = 1 << 16;

/// Rows read per batch when collecting the hot rows' bytes: a deep batch
/// (sorted, so neighbours share pages) that the progress bar still moves on.
const READ_BATCH: usize = 1 << 15;

/// Row lookup counts per table over a corpus.
///
/// Counts are dense `u16` per row (2 bytes x rows per table: 96 MB for a
/// table of 48M rows), saturating into an exact side map: only a few
/// thousand rows of a corpus ever pass 65,535 lookups.
pub struct Counts {
    tables: Vec<TableCounts>,
    tokens: u64,
    documents: u64,
}

struct TableCounts {
    dense: Vec<u16>,
    overflow: HashMap<u32, u64>,
}

impl TableCounts {
    #[inline]
    fn add(&mut self, row: u32) {
        let c = &mut self.dense[row as usize];
        if *c < u16::MAX - 1 {
            *c += 1;
        } else if *c == u16::MAX - 1 {
            // Saturating: from here on the exact count lives in the map,
            // so a row that ends at exactly u16::MAX is found there too.
            *c = u16::MAX;
            self.overflow.insert(row, u64::from(u16::MAX));
        } else {
            *self.overflow.entry(row).or_insert(u64::from(u16::MAX)) += 1;
        }
    }

    fn get(&self, row: u32) -> u64 {
        match self.dense.get(row as usize) {
            Some(&u16::MAX) => self.overflow[&row],
            Some(&c) => u64::from(c),
            None => 0,
        }
    }
}

impl Counts {
    /// Zero counts for every row of `layout`'s tables.
    pub fn new(layout: &Layout) -> Counts {
        Counts {
            tables: layout
                .tables
                .iter()
                .map(|t| TableCounts {
                    dense: vec![0; t.rows as usize],
                    overflow: HashMap::new(),
                })
                .collect(),
            tokens: 0,
            documents: 0,
        }
    }

    /// Counts the rows of one document's `tokens` (hashed from an empty
    /// history, as a sequence's prompt is).
    pub fn add_document(&mut self, hasher: &Hasher, tokens: &[u32]) -> Result<()> {
        let mut history = hasher.new_history();
        let mut rows = Vec::new();
        let columns = hasher.columns();
        for piece in tokens.chunks(HASH_PIECE) {
            rows.clear();
            hasher.hash(&mut history, piece, None, &mut rows)?;
            for token_rows in rows.chunks_exact(hasher.rows_per_token()) {
                for (table, ids) in self.tables.iter_mut().zip(token_rows.chunks(columns)) {
                    ids.iter().for_each(|&r| table.add(r));
                }
            }
        }
        self.tokens += tokens.len() as u64;
        self.documents += 1;
        Ok(())
    }

    /// Lookups of `row` of `table` counted.
    pub fn count(&self, table: usize, row: u32) -> u64 {
        self.tables.get(table).map_or(0, |t| t.get(row))
    }

    /// Distinct rows of `table` looked up at least once.
    pub fn distinct(&self, table: usize) -> u64 {
        self.tables
            .get(table)
            .map_or(0, |t| t.dense.iter().filter(|&&c| c > 0).count() as u64)
    }

    /// Tokens counted.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Documents counted.
    pub fn documents(&self) -> u64 {
        self.documents
    }

    /// The at most `max_rows` most counted rows of `table` (rows never
    /// looked up are never kept), increasing. Ties are broken towards the
    /// smaller row id, so the choice is deterministic.
    pub fn top(&self, table: usize, max_rows: usize) -> Vec<u32> {
        let Some(t) = self.tables.get(table) else {
            return Vec::new();
        };
        // Saturated rows first: few, ranked exactly by their side counts.
        let mut big: Vec<(u64, u32)> = t.overflow.iter().map(|(&r, &c)| (c, r)).collect();
        big.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        big.truncate(max_rows);
        let mut keep: Vec<u32> = big.iter().map(|&(_, r)| r).collect();
        let room = max_rows - keep.len();
        if room > 0 {
            // The smallest count `cut` whose rows, with all rows counted
            // more, still fit: rows above `cut` all go in, rows at `cut`
            // in id order while room lasts.
            let mut histogram = vec![0u64; usize::from(u16::MAX)];
            for &c in &t.dense {
                if c != u16::MAX {
                    histogram[usize::from(c)] += 1;
                }
            }
            let (mut cut, mut at_cut) = (1usize, u64::MAX);
            let mut above = 0u64;
            for c in (1..histogram.len()).rev() {
                if above + histogram[c] > room as u64 {
                    (cut, at_cut) = (c, room as u64 - above);
                    break;
                }
                above += histogram[c];
            }
            for (row, &c) in t.dense.iter().enumerate() {
                let c = usize::from(c);
                if c == usize::from(u16::MAX) || c < cut {
                    continue;
                }
                if c == cut {
                    if at_cut == 0 {
                        continue;
                    }
                    at_cut -= 1;
                }
                keep.push(row as u32);
            }
        }
        keep.sort_unstable();
        keep
    }
}

/// How [`count_corpus`] works through the files.
#[derive(Debug, Clone)]
pub struct CorpusOptions {
    /// Tokenizer threads (the counting runs on the calling thread).
    pub threads: usize,
    /// Stop after this many tokens (the last file counted in part); files
    /// are taken in the order given, so the result does not depend on the
    /// threads.
    pub max_tokens: Option<u64>,
}

/// What [`count_corpus`] returns.
pub struct CorpusCounts {
    /// The counts.
    pub counts: Counts,
    /// Files skipped because they are not UTF-8 text.
    pub skipped: Vec<PathBuf>,
}

/// Tokenizes every file of `files` (the vendored tokenizer, no special
/// tokens, as `engram hash` does) on `options.threads` threads, and counts
/// their rows under `layout`, each file one document. `progress` hears the
/// bytes of files done. Files that are not UTF-8 are skipped and listed.
pub fn count_corpus(
    layout: &Layout,
    files: &[PathBuf],
    options: &CorpusOptions,
    progress: &dyn Progress,
) -> Result<CorpusCounts> {
    let hasher = Hasher::new(layout)?;
    let tokenizer = layout::vendored_tokenizer()?;
    let mut counts = Counts::new(layout);
    let mut skipped = Vec::new();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let threads = options.threads.max(1);
    let (tx, rx) =
        crossbeam_channel::bounded::<(usize, Result<Option<(Vec<u32>, u64)>>)>(threads * 2);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= files.len() || stop.load(Ordering::Relaxed) {
                    return;
                }
                let result = tokenize_file(tokenizer, &files[i]);
                if tx.send((i, result)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        // Documents are counted in file order (a reorder buffer holds the
        // ones that finish early), so a token limit cuts at the same place
        // however the threads raced.
        let mut pending = BTreeMap::new();
        let mut want = 0usize;
        let result = (|| {
            for (i, item) in &rx {
                pending.insert(i, item);
                while let Some(item) = pending.remove(&want) {
                    let path = &files[want];
                    want += 1;
                    let Some((mut tokens, bytes)) = item? else {
                        skipped.push(path.clone());
                        continue;
                    };
                    if let Some(max) = options.max_tokens {
                        let left = max.saturating_sub(counts.tokens());
                        tokens.truncate(left.min(tokens.len() as u64) as usize);
                    }
                    counts.add_document(&hasher, &tokens)?;
                    progress.advance(bytes);
                    if options.max_tokens.is_some_and(|m| counts.tokens() >= m) {
                        return Ok(());
                    }
                }
            }
            Ok(())
        })();
        // Tokenizers still running see the flag, or a closed channel.
        stop.store(true, Ordering::Relaxed);
        drop(rx);
        result
    })?;
    Ok(CorpusCounts { counts, skipped })
}

/// The tokens of the file at `path` and its size; `None` if it is not UTF-8.
fn tokenize_file(
    tokenizer: &tokenizers::Tokenizer,
    path: &Path,
) -> Result<Option<(Vec<u32>, u64)>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let size = bytes.len() as u64;
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(None);
    };
    let tokens = layout::encode(tokenizer, &text, VENDORED_SOURCE_NAME)?;
    Ok(Some((tokens, size)))
}

/// Rows of `row_bytes` that fit `budget_bytes`, each costing its bytes and
/// its 4-byte id.
pub fn rows_for_budget(budget_bytes: u64, row_bytes: usize) -> usize {
    (budget_bytes / (row_bytes as u64 + 4)) as usize
}

/// Reads the rows `ids[table]` (increasing) of every table of `model`
/// through `source` (in sorted batches) and writes them to a hot-row file
/// at `path` (temporary name, then rename). `progress` hears row bytes
/// read. Returns the file's size.
pub fn write_hot_file(
    path: &Path,
    model: &Model,
    source: &dyn RowSource,
    ids: Vec<Vec<u32>>,
    profile: ProfileInfo,
    progress: &dyn Progress,
) -> Result<u64> {
    let identity = ModelIdentity::of(model)?;
    if ids.len() != identity.tables.len() {
        return Err(Error::InvalidArgument(format!(
            "hot rows for {} tables; the model has {}",
            ids.len(),
            identity.tables.len()
        )));
    }
    let row_bytes: Vec<usize> = (0..ids.len()).map(|t| source.row_bytes(t)).collect();
    progress.start(
        ids.iter()
            .zip(&row_bytes)
            .map(|(i, &b)| (i.len() * b) as u64)
            .sum(),
    );
    let mut tables = Vec::with_capacity(ids.len());
    for (t, table_ids) in ids.into_iter().enumerate() {
        if table_ids.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::InvalidArgument(format!(
                "hot row ids of table {t} must be increasing"
            )));
        }
        let mut rows = vec![0u8; table_ids.len() * row_bytes[t]];
        for (batch, out) in table_ids
            .chunks(READ_BATCH)
            .zip(rows.chunks_mut(READ_BATCH * row_bytes[t]))
        {
            source.read_rows(t, batch, out)?;
            progress.advance(out.len() as u64);
        }
        tables.push(TableData {
            ids: table_ids,
            rows,
        });
    }
    let header = Header {
        model: identity,
        hot_rows: tables.iter().map(|t| t.ids.len() as u64).collect(),
        profile,
    };
    file::write(path, &header, &tables)
}

/// What a hot set serves of held-out text, one table: a prefill reads each
/// distinct row of its prompt once, a decode step every row it looks up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldOutShare {
    /// Distinct rows of the prompts (each prompt counted on its own).
    pub prefill_rows: u64,
    /// Of those, rows in the hot set.
    pub prefill_hot: u64,
    /// Rows the decode steps look up (with repeats).
    pub decode_rows: u64,
    /// Of those, lookups the hot set serves.
    pub decode_hot: u64,
}

impl HeldOutShare {
    /// Counts one held-out document, hashed from an empty history: its
    /// first `prefill` tokens as a prompt, the next `decode` (as many as
    /// there are) as decode steps. `hot` holds the hot rows of `table`,
    /// increasing (as [`Counts::top`] returns them).
    pub fn add_document(
        &mut self,
        hasher: &Hasher,
        table: usize,
        hot: &[u32],
        tokens: &[u32],
        prefill: usize,
        decode: usize,
    ) -> Result<()> {
        let prefill = prefill.min(tokens.len());
        let end = prefill.saturating_add(decode).min(tokens.len());
        let mut history = hasher.new_history();
        let mut rows = Vec::new();
        hasher.hash(&mut history, &tokens[..end], None, &mut rows)?;
        let columns = hasher.columns();
        let per_token = hasher.rows_per_token();
        let of_table = |from: usize, to: usize| {
            rows[from * per_token..to * per_token]
                .chunks_exact(per_token)
                .flat_map(move |t| t[table * columns..(table + 1) * columns].iter().copied())
        };
        let is_hot = |r: &u32| hot.binary_search(r).is_ok();
        let mut distinct: Vec<u32> = of_table(0, prefill).collect();
        distinct.sort_unstable();
        distinct.dedup();
        self.prefill_rows += distinct.len() as u64;
        self.prefill_hot += distinct.iter().filter(|r| is_hot(r)).count() as u64;
        for row in of_table(prefill, end) {
            self.decode_rows += 1;
            self.decode_hot += u64::from(is_hot(&row));
        }
        Ok(())
    }

    /// Share of the prompts' distinct rows the hot set serves (0 without rows).
    pub fn prefill_share(&self) -> f64 {
        self.prefill_hot as f64 / self.prefill_rows.max(1) as f64
    }

    /// Share of the decode lookups the hot set serves (0 without rows).
    pub fn decode_share(&self) -> f64 {
        self.decode_hot as f64 / self.decode_rows.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_into_the_map_exactly_and_rank_first() {
        let layout = crate::layout::preset("deepseek-v4.1-flash", 65536).unwrap();
        let mut counts = Counts::new(&layout);
        let table = &mut counts.tables[0];
        let max = u64::from(u16::MAX);
        // Rows ending just below, at, and past the saturation point.
        for (row, n) in [(10u32, max - 1), (11, max), (12, max + 5), (13, 3), (14, 3)] {
            (0..n).for_each(|_| table.add(row));
        }
        for (row, n) in [(10u32, max - 1), (11, max), (12, max + 5), (13, 3), (0, 0)] {
            assert_eq!(counts.count(0, row), n, "row {row}");
        }
        assert_eq!(counts.top(0, 2), vec![11, 12]);
        assert_eq!(counts.top(0, 4), vec![10, 11, 12, 13]);
        assert_eq!(counts.top(0, 9), vec![10, 11, 12, 13, 14]);
        assert_eq!(counts.distinct(0), 5);
    }
}
