//! The peer's read path: dedup within one batch, one `pread` per row,
//! batches under [`SERIAL_LIMIT`] unique rows read serially on the calling
//! thread, larger ones split over [`BATCH_THREADS`] threads created for that
//! batch and joined at its end.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use engram::codec::Encoding;
use engram::model::{Model, TableLocation};
use engram::{Error, Result};

use super::super::IoCounters;

/// Batches with fewer unique rows than this are read serially.
pub(super) const SERIAL_LIMIT: usize = 256;

/// Threads created for each batch of [`SERIAL_LIMIT`] rows or more.
pub(super) const BATCH_THREADS: usize = 16;

/// One table's open files, as the peer holds them: plain descriptors, no
/// cache advice, no direct I/O.
pub(super) struct TableFile {
    index: usize,
    location: TableLocation,
    values: File,
    scales: Option<File>,
}

impl TableFile {
    /// Bytes of one packed row (values, then split scales if any).
    pub(super) fn width(&self) -> usize {
        self.location.full_row_bytes()
    }

    /// The encoding rows of this table decode with.
    pub(super) fn encoding(&self) -> Encoding {
        self.location.encoding
    }

    /// Reads row `row` into `out` (`width()` bytes): one `pread` for the
    /// values, a second for split scales.
    fn read_row(&self, row: u32, out: &mut [u8], io: &Counters) -> Result<()> {
        let loc = &self.location;
        let (values, scales) = out.split_at_mut(loc.row_bytes as usize);
        let offset = loc.offset + u64::from(row) * u64::from(loc.row_bytes);
        self.pread(&self.values, &loc.file, offset, row, values, io)?;
        if let (Some(file), Some(split)) = (&self.scales, &loc.scales) {
            let offset = split.offset + u64::from(row) * u64::from(split.bytes_per_row);
            self.pread(file, &split.file, offset, row, scales, io)?;
        }
        Ok(())
    }

    fn pread(
        &self,
        file: &File,
        path: &Path,
        offset: u64,
        row: u32,
        out: &mut [u8],
        io: &Counters,
    ) -> Result<()> {
        io.reads.fetch_add(1, Ordering::Relaxed);
        file.read_exact_at(out, offset)
            .map_err(|source| Error::RowRead {
                table: self.index,
                row: u64::from(row),
                file: path.to_path_buf(),
                offset,
                source,
            })?;
        io.bytes.fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Opens every table of `model` for the peer's read path. Checks what the
/// row hash can address exists and what a row decodes with matches its
/// stored width, so reads later need no per-row checks.
pub(super) fn open_tables(model: &Model) -> Result<Vec<TableFile>> {
    let layout = &model.layout;
    if model.tables.len() != 2 || layout.tables.len() != 2 {
        return Err(Error::InvalidArgument(format!(
            "the ds4 schedule reads exactly two Engram tables (the peer's model); this model has {}",
            model.tables.len()
        )));
    }
    let mut files = Vec::with_capacity(2);
    for (index, (loc, table)) in model.tables.iter().zip(&layout.tables).enumerate() {
        if loc.rows < table.rows {
            return Err(Error::format(
                &loc.file,
                format!("table {index} rows"),
                format!(
                    "{} rows stored, the layout hashes to {}",
                    loc.rows, table.rows
                ),
            ));
        }
        if loc.full_row_bytes() != loc.encoding.row_bytes() {
            return Err(Error::format(
                &loc.file,
                format!("table {index} row bytes"),
                format!(
                    "{} bytes per row stored, {} decodes {}",
                    loc.full_row_bytes(),
                    loc.encoding.name(),
                    loc.encoding.row_bytes()
                ),
            ));
        }
        let (values, scales) = loc.open_files()?;
        files.push(TableFile {
            index,
            location: loc.clone(),
            values,
            scales,
        });
    }
    if files[0].width() != files[1].width() {
        return Err(Error::InvalidArgument(format!(
            "the ds4 schedule shares one buffer between the tables, which needs equal row \
             widths (table 0: {} bytes, table 1: {})",
            files[0].width(),
            files[1].width()
        )));
    }
    Ok(files)
}

/// I/O counters shared by the reader threads and the schedule.
#[derive(Debug, Default)]
pub(super) struct Counters {
    requested: AtomicU64,
    unique: AtomicU64,
    bytes: AtomicU64,
    reads: AtomicU64,
}

impl Counters {
    /// The totals so far.
    pub(super) fn snapshot(&self) -> IoCounters {
        IoCounters {
            rows_requested: self.requested.load(Ordering::Relaxed),
            rows_unique: self.unique.load(Ordering::Relaxed),
            cache_hits: 0,
            bytes_read: self.bytes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            ..IoCounters::default()
        }
    }
}

/// The unique rows of one batch and their bytes, ready to scatter to the
/// positions that asked for them.
#[derive(Debug, Default)]
pub(super) struct Fetched {
    unique: Vec<u32>,
    raw: Vec<u8>,
    width: usize,
}

impl Fetched {
    /// Reads the rows `ids` ask for (duplicates read once) with the peer's
    /// batch path. Returns [`Error::Cancelled`] once `stop` is set.
    pub(super) fn fetch(
        &mut self,
        table: &TableFile,
        ids: &[u32],
        stop: &AtomicBool,
        io: &Counters,
    ) -> Result<()> {
        self.unique.clear();
        self.unique.extend_from_slice(ids);
        self.unique.sort_unstable();
        self.unique.dedup();
        self.width = table.width();
        self.raw.clear();
        self.raw.resize(self.unique.len() * self.width, 0);
        io.requested.fetch_add(ids.len() as u64, Ordering::Relaxed);
        io.unique
            .fetch_add(self.unique.len() as u64, Ordering::Relaxed);
        Batch { table, stop, io }.read(&self.unique, &mut self.raw)
    }

    /// Copies the row of each of `ids` (all fetched) to consecutive
    /// `width`-byte slots of `out`.
    pub(super) fn scatter(&self, ids: &[u32], out: &mut [u8]) {
        for (&id, slot) in ids.iter().zip(out.chunks_exact_mut(self.width)) {
            // Every id was fetched, so the search always finds it.
            if let Ok(at) = self.unique.binary_search(&id) {
                slot.copy_from_slice(&self.raw[at * self.width..(at + 1) * self.width]);
            }
        }
    }
}

/// One batch's reads: the table, the cancel flag and the counters.
#[derive(Clone, Copy)]
struct Batch<'a> {
    table: &'a TableFile,
    stop: &'a AtomicBool,
    io: &'a Counters,
}

impl Batch<'_> {
    /// Reads `rows` (unique) into `out`, `width` bytes each: serially
    /// under [`SERIAL_LIMIT`] rows, else on [`BATCH_THREADS`] fresh threads,
    /// each taking a contiguous slice of the list.
    fn read(self, rows: &[u32], out: &mut [u8]) -> Result<()> {
        if rows.len() < SERIAL_LIMIT {
            return self.read_serial(rows, out);
        }
        let per_thread = rows.len().div_ceil(BATCH_THREADS);
        let width = self.table.width();
        std::thread::scope(|scope| {
            let workers: Vec<_> = rows
                .chunks(per_thread)
                .zip(out.chunks_mut(per_thread * width))
                .map(|(rows, out)| scope.spawn(move || self.read_serial(rows, out)))
                .collect();
            // Join every worker (none outlives the batch), keep the first error.
            let mut result = Ok(());
            for worker in workers {
                let outcome = worker.join().unwrap_or_else(|_| {
                    Err(Error::io(
                        &self.table.location.file,
                        io::Error::other("a ds4 batch reader thread panicked"),
                    ))
                });
                if result.is_ok() {
                    result = outcome;
                }
            }
            result
        })
    }

    /// One `pread` per row on the calling thread, checking `stop` between rows.
    fn read_serial(self, rows: &[u32], out: &mut [u8]) -> Result<()> {
        for (&row, slot) in rows.iter().zip(out.chunks_exact_mut(self.table.width())) {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
            self.table.read_row(row, slot, self.io)?;
        }
        Ok(())
    }
}
