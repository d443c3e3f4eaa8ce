//! Simple synchronous row reads with `pread`, for tools and tests.
//!
//! Rows stored in several parts (DeepSeek checkpoints' values and scales,
//! MLX codes, scales and biases) are reassembled into the delivered row, the
//! parts in order; sharded tables are read shard by shard. The prefetch
//! engine has its own batched readers; this is the reference they are
//! checked against.

use std::fs::File;
use std::os::unix::fs::FileExt;

use std::path::Path;

use super::{Model, TableLocation};
use crate::{Error, Result};

impl Model {
    /// Appends the raw (packed) bytes of rows `ids` of table `table` to `out`,
    /// `full_row_bytes()` per row, in the order given.
    pub fn read_raw_rows(&self, table: usize, ids: &[u64], out: &mut Vec<u8>) -> Result<()> {
        let loc = self.table(table)?;
        let files = OpenParts::new(loc)?;
        let width = loc.full_row_bytes();
        out.reserve(ids.len() * width);
        for &row in ids {
            check_row(table, loc, row, 1)?;
            let start = out.len();
            out.resize(start + width, 0);
            files.read_row(table, loc, row, &mut out[start..])?;
        }
        Ok(())
    }

    /// Reads `count` consecutive rows from `first` into `out` (replacing its
    /// contents), packed `full_row_bytes()` per row: one large read per part
    /// of each shard the range touches.
    pub fn read_row_range(
        &self,
        table: usize,
        first: u64,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let loc = self.table(table)?;
        let files = OpenParts::new(loc)?;
        check_row(table, loc, first, count as u64)?;
        let width = loc.full_row_bytes();
        out.clear();
        out.resize(count * width, 0);
        let end = first + count as u64;
        let mut row = first;
        let mut scratch = Vec::new();
        while row < end {
            let shard = loc.shard_of(row).ok_or_else(|| {
                Error::InvalidArgument(format!("row {row} of table {table} is in no shard"))
            })?;
            let run_end = end.min(shard.first_row + shard.rows);
            let run = (run_end - row) as usize;
            let local = row - shard.first_row;
            let dst_rows =
                &mut out[(row - first) as usize * width..(run_end - first) as usize * width];
            let mut at = 0;
            for part in &shard.parts {
                let bytes = part.bytes_per_row as usize;
                scratch.resize(run * bytes, 0);
                let offset = part.offset + local * u64::from(part.bytes_per_row);
                files.read_at(table, row, &part.file, offset, &mut scratch)?;
                for (dst, src) in dst_rows
                    .chunks_exact_mut(width)
                    .zip(scratch.chunks_exact(bytes))
                {
                    dst[at..at + bytes].copy_from_slice(src);
                }
                at += bytes;
            }
            row = run_end;
        }
        Ok(())
    }
}

/// A table's files, each opened once, for the reads of one call.
struct OpenParts<'a> {
    files: Vec<(&'a Path, File)>,
}

impl<'a> OpenParts<'a> {
    fn new(loc: &'a TableLocation) -> Result<Self> {
        let files = loc
            .files()
            .into_iter()
            .map(|path| Ok((path, File::open(path).map_err(|e| Error::io(path, e))?)))
            .collect::<Result<_>>()?;
        Ok(OpenParts { files })
    }

    /// Reads `buf.len()` bytes at `offset` of `path` (one of the table's
    /// files); `row` names the row in the error.
    fn read_at(
        &self,
        table: usize,
        row: u64,
        path: &Path,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let file = self
            .files
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, f)| f)
            .ok_or_else(|| {
                Error::io(path, std::io::Error::other("not one of the table's files"))
            })?;
        file.read_exact_at(buf, offset)
            .map_err(|source| Error::RowRead {
                table,
                row,
                file: path.to_path_buf(),
                offset,
                source,
            })
    }

    /// Reads row `row`'s parts into `out` (one delivered row).
    fn read_row(&self, table: usize, loc: &TableLocation, row: u64, out: &mut [u8]) -> Result<()> {
        let mut at = 0;
        for span in loc.spans(row) {
            self.read_at(
                table,
                row,
                span.file,
                span.offset,
                &mut out[at..at + span.len],
            )?;
            at += span.len;
        }
        Ok(())
    }
}

impl Model {
    /// Appends rows `ids` of table `table`, decoded to BF16-rounded f32
    /// (the encoding's values per row), to `out`. A corrupt row is an
    /// [`Error::CorruptRow`] naming it.
    pub fn read_rows_f32(&self, table: usize, ids: &[u64], out: &mut Vec<f32>) -> Result<()> {
        let loc = self.table(table)?;
        let mut raw = Vec::new();
        self.read_raw_rows(table, ids, &mut raw)?;
        let start = out.len();
        let dim = loc.encoding.values();
        out.resize(start + ids.len() * dim, 0.0);
        let rows = raw.chunks_exact(loc.full_row_bytes());
        for ((row, &id), dst) in rows.zip(ids).zip(out[start..].chunks_exact_mut(dim)) {
            loc.encoding
                .decode_row(row, dst)
                .map_err(|e| e.into_error(table, id))?;
        }
        Ok(())
    }

    /// Decodes `n` sampled rows of every table (see [`sample_rows`]) and fails
    /// on the first corrupt one, naming its table and row. Returns the number
    /// of rows checked.
    pub fn verify_rows(&self, n: usize) -> Result<u64> {
        let mut checked = 0;
        let mut raw = Vec::new();
        for (t, loc) in self.tables.iter().enumerate() {
            let ids = sample_rows(loc.rows, n);
            raw.clear();
            self.read_raw_rows(t, &ids, &mut raw)?;
            for (row, &id) in raw.chunks_exact(loc.full_row_bytes()).zip(&ids) {
                loc.encoding
                    .check_row(row)
                    .map_err(|e| e.into_error(t, id))?;
            }
            checked += ids.len() as u64;
        }
        Ok(checked)
    }
}

/// A deterministic sample of `n` row ids of a table of `rows` rows: the first
/// and the last row, and the rest spread pseudo-randomly (fixed seed) over
/// the table, in increasing order without repeats. All rows when `n >= rows`.
pub fn sample_rows(rows: u64, n: usize) -> Vec<u64> {
    if rows == 0 || n == 0 {
        return Vec::new();
    }
    if n as u64 >= rows {
        return (0..rows).collect();
    }
    let mut ids = std::collections::BTreeSet::new();
    ids.insert(0);
    ids.insert(rows - 1);
    let mut state = 0x5eed_u64;
    while ids.len() < n {
        // splitmix64 steps: well spread, reproducible everywhere.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ids.insert((z ^ (z >> 31)) % rows);
    }
    ids.into_iter().collect()
}

fn check_row(table: usize, loc: &TableLocation, first: u64, count: u64) -> Result<()> {
    if first.checked_add(count).is_none_or(|end| end > loc.rows) {
        return Err(Error::InvalidArgument(format!(
            "rows {first}..{} are outside table {table} (layer {}), which has {} rows",
            first.saturating_add(count),
            loc.layer_id,
            loc.rows
        )));
    }
    Ok(())
}
