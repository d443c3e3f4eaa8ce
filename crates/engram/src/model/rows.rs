//! Simple synchronous row reads with `pread`, for tools and tests.
//!
//! Split tables (Hugging Face checkpoints) are reassembled into the packed
//! row: value bytes, then scale bytes. The prefetch engine has its own
//! batched readers (and may hold split scales in RAM); this is the reference
//! they are checked against.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::{Model, TableLocation};
use crate::{Error, Result};

impl Model {
    /// Appends the raw (packed) bytes of rows `ids` of table `table` to `out`,
    /// `full_row_bytes()` per row, in the order given.
    pub fn read_raw_rows(&self, table: usize, ids: &[u64], out: &mut Vec<u8>) -> Result<()> {
        let loc = self.table(table)?;
        let (values, scales) = loc.open_files()?;
        let width = loc.full_row_bytes();
        out.reserve(ids.len() * width);
        for &row in ids {
            check_row(table, loc, row, 1)?;
            let start = out.len();
            out.resize(start + width, 0);
            read_rows_at(table, loc, &values, scales.as_ref(), row, &mut out[start..])?;
        }
        Ok(())
    }

    /// Reads `count` consecutive rows from `first` into `out` (replacing its
    /// contents), packed `full_row_bytes()` per row, in one or two large reads.
    pub fn read_row_range(
        &self,
        table: usize,
        first: u64,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let loc = self.table(table)?;
        let (values, scales) = loc.open_files()?;
        check_row(table, loc, first, count as u64)?;
        out.clear();
        out.resize(count * loc.full_row_bytes(), 0);
        read_rows_at(table, loc, &values, scales.as_ref(), first, out)
    }
}

impl Model {
    /// Appends rows `ids` of table `table`, decoded to f32 (the encoding's
    /// [`values`](crate::codec::Encoding::values) per row; BF16-rounded for
    /// the DeepSeek encodings), to `out`. A corrupt row is an
    /// [`Error::CorruptRow`] naming it.
    pub fn read_rows_f32(&self, table: usize, ids: &[u64], out: &mut Vec<f32>) -> Result<()> {
        let loc = self.table(table)?;
        let mut raw = Vec::new();
        self.read_raw_rows(table, ids, &mut raw)?;
        let start = out.len();
        let width = loc.encoding.values();
        out.resize(start + ids.len() * width, 0.0);
        let rows = raw.chunks_exact(loc.full_row_bytes());
        for ((row, &id), dst) in rows.zip(ids).zip(out[start..].chunks_exact_mut(width)) {
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

/// Reads rows `first..` of `loc` to fill `out` (a whole number of packed rows).
fn read_rows_at(
    table: usize,
    loc: &TableLocation,
    values: &File,
    scales: Option<&File>,
    first: u64,
    out: &mut [u8],
) -> Result<()> {
    let vb = loc.row_bytes as usize;
    let read = |file: &File, path: &std::path::Path, offset: u64, buf: &mut [u8]| {
        file.read_exact_at(buf, offset)
            .map_err(|source| Error::RowRead {
                table,
                row: first,
                file: path.to_path_buf(),
                offset,
                source,
            })
    };
    let value_offset = loc.offset + first * vb as u64;
    match (&loc.scales, scales) {
        (Some(split), Some(scale_file)) => {
            let sb = split.bytes_per_row as usize;
            let count = out.len() / (vb + sb);
            let mut v = vec![0u8; count * vb];
            let mut s = vec![0u8; count * sb];
            read(values, &loc.file, value_offset, &mut v)?;
            read(
                scale_file,
                &split.file,
                split.offset + first * sb as u64,
                &mut s,
            )?;
            for ((row, v), s) in out
                .chunks_exact_mut(vb + sb)
                .zip(v.chunks_exact(vb))
                .zip(s.chunks_exact(sb))
            {
                row[..vb].copy_from_slice(v);
                row[vb..].copy_from_slice(s);
            }
            Ok(())
        }
        _ => read(values, &loc.file, value_offset, out),
    }
}

/// A split table's scale bytes held in RAM (`rows * bytes_per_row` bytes:
/// 8 bytes a row, about 3 GiB per V4.1 table), so each row read is a single
/// read of its value bytes. Checkpoint tables only; packed tables have no
/// separate scales.
#[derive(Debug, Clone)]
pub struct ResidentScales {
    /// Table index.
    pub table: usize,
    /// Scale bytes per row.
    pub bytes_per_row: usize,
    /// All scale bytes of the table, row after row.
    pub bytes: Vec<u8>,
}

impl ResidentScales {
    /// The scale bytes of row `row`.
    pub fn row(&self, row: u64) -> &[u8] {
        let at = row as usize * self.bytes_per_row;
        &self.bytes[at..at + self.bytes_per_row]
    }
}

/// Scale bytes loaded per read when making scales resident.
const SCALE_LOAD_CHUNK: usize = 64 << 20;

impl Model {
    /// Reads table `table`'s split scales into RAM; `None` for a packed table.
    pub fn load_scales(&self, table: usize) -> Result<Option<ResidentScales>> {
        let loc = self.table(table)?;
        let Some(split) = &loc.scales else {
            return Ok(None);
        };
        let len = usize::try_from(loc.rows * u64::from(split.bytes_per_row))
            .map_err(|_| Error::InvalidArgument("scale tensor does not fit in memory".into()))?;
        let file = File::open(&split.file).map_err(|e| Error::io(&split.file, e))?;
        let mut bytes = vec![0u8; len];
        for (i, chunk) in bytes.chunks_mut(SCALE_LOAD_CHUNK).enumerate() {
            let offset = split.offset + (i * SCALE_LOAD_CHUNK) as u64;
            file.read_exact_at(chunk, offset)
                .map_err(|source| Error::RowRead {
                    table,
                    row: (i * SCALE_LOAD_CHUNK / split.bytes_per_row as usize) as u64,
                    file: split.file.clone(),
                    offset,
                    source,
                })?;
        }
        Ok(Some(ResidentScales {
            table,
            bytes_per_row: split.bytes_per_row as usize,
            bytes,
        }))
    }

    /// Like [`read_raw_rows`](Self::read_raw_rows) for a split table whose
    /// scales are resident: one read per row, scales copied from RAM.
    pub fn read_raw_rows_resident(
        &self,
        table: usize,
        ids: &[u64],
        scales: &ResidentScales,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let loc = self.table(table)?;
        if scales.table != table || loc.scales.is_none() {
            return Err(Error::InvalidArgument(format!(
                "resident scales of table {} do not belong to split table {table}",
                scales.table
            )));
        }
        let file = File::open(&loc.file).map_err(|e| Error::io(&loc.file, e))?;
        let vb = loc.row_bytes as usize;
        for &row in ids {
            check_row(table, loc, row, 1)?;
            let start = out.len();
            out.resize(start + vb, 0);
            let offset = loc.offset + row * vb as u64;
            file.read_exact_at(&mut out[start..], offset)
                .map_err(|source| Error::RowRead {
                    table,
                    row,
                    file: loc.file.clone(),
                    offset,
                    source,
                })?;
            out.extend_from_slice(scales.row(row));
        }
        Ok(())
    }
}
