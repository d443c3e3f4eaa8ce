//! The peer's read path: dedup within one batch (sort, drop equal
//! neighbours), one `pread` per row, and per platform ([`Ds4Flavor`]):
//!
//! - `Linux`: plain buffered descriptors; batches under
//!   [`LINUX_SERIAL_LIMIT`] unique rows read serially on the calling thread,
//!   larger ones split over [`PARTS`] threads created for that batch and
//!   joined at its end.
//! - `Mac`: uncached descriptors (`F_NOCACHE` + `F_RDAHEAD` 0 on macOS; on
//!   Linux `O_DIRECT` reads of the aligned 4 KiB page(s) holding the row,
//!   which is what an uncached read costs the device); batches of
//!   [`MAC_PARALLEL_MIN`] rows or more split into [`PARTS`] parts run on a
//!   persistent pool of [`PARTS`] workers (GCD's global queue under
//!   `dispatch_apply_f`), smaller ones serially.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use engram::codec::Encoding;
use engram::io::cachectl;
use engram::model::{Model, TableLocation};
use engram::{Error, Result};

use super::super::{IoCounters, IoTotals};
use super::pool::ApplyPool;
use super::Ds4Flavor;

/// Linux flavor: batches with fewer unique rows than this are read serially.
pub(in crate::schedule) const LINUX_SERIAL_LIMIT: usize = 256;

/// Mac flavor: batches of at least this many unique rows are read in parallel.
pub(in crate::schedule) const MAC_PARALLEL_MIN: usize = 8;

/// Parts a parallel batch is split into (threads per batch on Linux, the
/// `dispatch_apply_f` iteration count and pool size on macOS).
pub(in crate::schedule) const PARTS: usize = 16;

/// Alignment and granule of uncached reads emulated with `O_DIRECT`.
#[cfg(target_os = "linux")]
const PAGE: u64 = engram::io::PAGE;

/// One table's open files, as the peer holds them.
pub(in crate::schedule) struct TableFile {
    index: usize,
    location: TableLocation,
    /// The table's files, in [`TableLocation::files`] order.
    files: Vec<File>,
    /// Opened uncached (the Mac flavor).
    uncached: bool,
}

impl TableFile {
    /// Bytes of one packed row (values, then split scales if any).
    pub(in crate::schedule) fn width(&self) -> usize {
        self.location.full_row_bytes()
    }

    /// The encoding rows of this table decode with.
    pub(in crate::schedule) fn encoding(&self) -> Encoding {
        self.location.encoding
    }

    /// Reads row `row` into `out` (`width()` bytes): one `pread` per stored
    /// part (values, then split scales if any). `scratch` holds the aligned
    /// pages of an uncached read where the platform needs them.
    fn read_row(
        &self,
        row: u32,
        out: &mut [u8],
        scratch: &mut Scratch,
        io: &Counters,
    ) -> Result<()> {
        let loc = &self.location;
        let paths = loc.files();
        let mut at_byte = 0;
        for span in loc.spans(u64::from(row)) {
            let file = paths
                .iter()
                .position(|p| *p == span.file)
                .map(|i| &self.files[i])
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("row {row}: its file is not open"))
                })?;
            let at = Spot {
                file,
                path: span.file,
                offset: span.offset,
                row,
            };
            self.pread(at, &mut out[at_byte..at_byte + span.len], scratch, io)?;
            at_byte += span.len;
        }
        Ok(())
    }

    fn pread(
        &self,
        at: Spot<'_>,
        out: &mut [u8],
        scratch: &mut Scratch,
        io: &Counters,
    ) -> Result<()> {
        io.reads.fetch_add(1, Ordering::Relaxed);
        let read = if self.uncached {
            scratch.read_uncached(at.file, at.offset, out)
        } else {
            at.file.read_exact_at(out, at.offset).map(|()| out.len())
        };
        let bytes = read.map_err(|source| Error::RowRead {
            table: self.index,
            row: u64::from(at.row),
            file: at.path.to_path_buf(),
            offset: at.offset,
            source,
        })?;
        io.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Where one `pread` goes.
#[derive(Clone, Copy)]
struct Spot<'a> {
    file: &'a File,
    path: &'a Path,
    offset: u64,
    row: u32,
}

/// Aligned pages for `O_DIRECT` reads (Linux); nothing elsewhere, where
/// `F_NOCACHE` reads go straight into the row's slot.
#[derive(Default)]
pub(in crate::schedule) struct Scratch {
    #[cfg(target_os = "linux")]
    pages: Option<engram::io::batch::BounceBuf>,
}

impl Scratch {
    /// Reads `out.len()` bytes at `offset` bypassing the page cache;
    /// returns the bytes the device transferred.
    #[cfg(target_os = "linux")]
    fn read_uncached(&mut self, file: &File, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        let start = offset / PAGE * PAGE;
        let skip = (offset - start) as usize;
        let need = skip + out.len();
        let span = need.div_ceil(PAGE as usize) * PAGE as usize;
        if self.pages.as_ref().is_none_or(|p| p.len() < span) {
            let pages = engram::io::batch::BounceBuf::zeroed(span).map_err(io::Error::other)?;
            self.pages = Some(pages);
        }
        let pages = self.pages.as_mut().map(|p| &mut p.as_mut_slice()[..span]);
        let pages = pages.ok_or_else(|| io::Error::other("no bounce pages"))?;
        let mut got = 0;
        // O_DIRECT may return less than asked only at the end of the file:
        // enough as long as the row's bytes are in.
        while got < need {
            let n = file.read_at(&mut pages[got..], start + got as u64)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "the file ends {} bytes into a {}-byte row read",
                        got.saturating_sub(skip),
                        out.len()
                    ),
                ));
            }
            got += n;
        }
        out.copy_from_slice(&pages[skip..need]);
        Ok(got)
    }

    /// Reads `out.len()` bytes at `offset`: the descriptor has `F_NOCACHE`
    /// (macOS), so the read itself bypasses the cache.
    #[cfg(not(target_os = "linux"))]
    fn read_uncached(&mut self, file: &File, offset: u64, out: &mut [u8]) -> io::Result<usize> {
        file.read_exact_at(out, offset).map(|()| out.len())
    }
}

thread_local! {
    /// A pool worker's aligned pages, kept between batches (as the peer's
    /// stack buffers cost it no allocation per read).
    static WORKER_SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// Opens `path` as the flavor's peer does.
fn open_file(path: &Path, flavor: Ds4Flavor) -> Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    if flavor == Ds4Flavor::Mac {
        use std::os::unix::fs::OpenOptionsExt;
        // O_DIRECT on Linux; 0 on macOS, where F_NOCACHE follows.
        options.custom_flags(cachectl::DIRECT_OPEN_FLAGS);
    }
    let file = options.open(path).map_err(|e| Error::io(path, e))?;
    if flavor == Ds4Flavor::Mac {
        cachectl::set_nocache(&file).map_err(|e| Error::io(path, e))?;
        // On macOS this is F_RDAHEAD 0 (the peer's); on Linux O_DIRECT
        // already reads no more than asked, so no advice is given.
        #[cfg(target_os = "macos")]
        cachectl::advise_random(&file).map_err(|e| Error::io(path, e))?;
    }
    Ok(file)
}

/// The tables of a model opened for the peer's read path, and the
/// machinery that reads their batches.
pub(in crate::schedule) struct PeerFiles {
    tables: Vec<TableFile>,
    flavor: Ds4Flavor,
    /// The Mac flavor's persistent workers.
    pool: Option<ApplyPool>,
}

impl std::ops::Index<usize> for PeerFiles {
    type Output = TableFile;
    fn index(&self, table: usize) -> &TableFile {
        &self.tables[table]
    }
}

impl PeerFiles {
    /// Opens every table of `model` for `flavor`. Checks what the row hash
    /// can address exists and what a row decodes with matches its stored
    /// width, so reads later need no per-row checks.
    pub(in crate::schedule) fn open(model: &Model, flavor: Ds4Flavor) -> Result<PeerFiles> {
        let layout = &model.layout;
        if model.tables.len() != layout.tables.len() {
            return Err(Error::InvalidArgument(format!(
                "the model stores {} tables but its layout hashes {}",
                model.tables.len(),
                layout.tables.len()
            )));
        }
        let mut tables = Vec::with_capacity(model.tables.len());
        for (index, (loc, table)) in model.tables.iter().zip(&layout.tables).enumerate() {
            check_table(index, loc, table.rows)?;
            let open = loc
                .files()
                .into_iter()
                .map(|path| open_file(path, flavor))
                .collect::<Result<Vec<File>>>()?;
            tables.push(TableFile {
                index,
                location: loc.clone(),
                files: open,
                uncached: flavor == Ds4Flavor::Mac,
            });
        }
        let pool = match flavor {
            Ds4Flavor::Mac => Some(ApplyPool::new(PARTS)?),
            Ds4Flavor::Linux => None,
        };
        Ok(PeerFiles {
            tables,
            flavor,
            pool,
        })
    }
}

fn check_table(index: usize, loc: &TableLocation, hashed_rows: u64) -> Result<()> {
    if loc.rows < hashed_rows {
        return Err(Error::format(
            loc.first_file(),
            format!("table {index} rows"),
            format!(
                "{} rows stored, the layout hashes to {hashed_rows}",
                loc.rows
            ),
        ));
    }
    if loc.full_row_bytes() != loc.encoding.row_bytes() {
        return Err(Error::format(
            loc.first_file(),
            format!("table {index} row bytes"),
            format!(
                "{} bytes per row stored, {} decodes {}",
                loc.full_row_bytes(),
                loc.encoding.name(),
                loc.encoding.row_bytes()
            ),
        ));
    }
    Ok(())
}

/// I/O counters shared by the reader threads and the schedule.
#[derive(Debug, Default)]
pub(in crate::schedule) struct Counters {
    requested: AtomicU64,
    unique: AtomicU64,
    bytes: AtomicU64,
    reads: AtomicU64,
}

impl Counters {
    /// Counts one batch: `requested` row ids, `unique` of them fetched,
    /// `reads` read requests moving `bytes` bytes.
    pub(in crate::schedule) fn add(&self, requested: u64, unique: u64, reads: u64, bytes: u64) {
        self.requested.fetch_add(requested, Ordering::Relaxed);
        self.unique.fetch_add(unique, Ordering::Relaxed);
        self.reads.fetch_add(reads, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The totals so far.
    pub(in crate::schedule) fn snapshot(&self) -> IoCounters {
        IoCounters {
            totals: IoTotals {
                rows_requested: self.requested.load(Ordering::Relaxed),
                rows_unique: self.unique.load(Ordering::Relaxed),
                cache_hits: 0,
                bytes_read: self.bytes.load(Ordering::Relaxed),
                reads: self.reads.load(Ordering::Relaxed),
                ..IoTotals::default()
            },
            ..IoCounters::default()
        }
    }
}

/// The unique rows of one batch and their bytes, ready to scatter to the
/// positions that asked for them.
#[derive(Default)]
pub(in crate::schedule) struct Fetched {
    unique: Vec<u32>,
    raw: Vec<u8>,
    width: usize,
    scratch: Scratch,
}

impl Fetched {
    /// Reads the rows `ids` of table `table` ask for (duplicates read once)
    /// with the flavor's batch path. Returns [`Error::Cancelled`] once
    /// `stop` is set.
    pub(in crate::schedule) fn fetch(
        &mut self,
        files: &PeerFiles,
        table: usize,
        ids: &[u32],
        stop: &AtomicBool,
        io: &Counters,
    ) -> Result<()> {
        self.unique.clear();
        self.unique.extend_from_slice(ids);
        self.unique.sort_unstable();
        self.unique.dedup();
        self.width = files[table].width();
        self.raw.clear();
        self.raw.resize(self.unique.len() * self.width, 0);
        io.requested.fetch_add(ids.len() as u64, Ordering::Relaxed);
        io.unique
            .fetch_add(self.unique.len() as u64, Ordering::Relaxed);
        let batch = Batch {
            table: &files[table],
            stop,
            io,
        };
        match (files.flavor, &files.pool) {
            (Ds4Flavor::Mac, Some(pool)) if self.unique.len() >= MAC_PARALLEL_MIN => {
                batch.read_on_pool(pool, &self.unique, &mut self.raw)
            }
            (Ds4Flavor::Linux, _) if self.unique.len() >= LINUX_SERIAL_LIMIT => {
                batch.read_on_fresh_threads(&self.unique, &mut self.raw)
            }
            _ => batch.read_serial(&self.unique, &mut self.raw, &mut self.scratch),
        }
    }

    /// Copies the row of each of `ids` (all fetched) to consecutive
    /// `width`-byte slots of `out`.
    pub(in crate::schedule) fn scatter(&self, ids: &[u32], out: &mut [u8]) {
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
    /// The peer's Linux batch: [`PARTS`] fresh threads, each taking a
    /// contiguous slice of `rows`, joined at the end.
    fn read_on_fresh_threads(self, rows: &[u32], out: &mut [u8]) -> Result<()> {
        let per_thread = rows.len().div_ceil(PARTS);
        let width = self.table.width();
        std::thread::scope(|scope| {
            let workers: Vec<_> = rows
                .chunks(per_thread)
                .zip(out.chunks_mut(per_thread * width))
                .map(|(rows, out)| {
                    scope.spawn(move || self.read_serial(rows, out, &mut Scratch::default()))
                })
                .collect();
            // Join every worker (none outlives the batch), keep the first error.
            let mut result = Ok(());
            for worker in workers {
                let outcome = worker.join().unwrap_or_else(|_| {
                    Err(Error::io(
                        self.table.location.first_file(),
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

    /// The peer's macOS batch: `dispatch_apply_f` over [`PARTS`] parts, part
    /// `i` reading the `i`-th contiguous slice of `rows`.
    fn read_on_pool(self, pool: &ApplyPool, rows: &[u32], out: &mut [u8]) -> Result<()> {
        let per_part = rows.len().div_ceil(PARTS);
        let width = self.table.width();
        // One uncontended lock per part hands each its own slice safely.
        let parts: Vec<Mutex<(&[u32], &mut [u8])>> = rows
            .chunks(per_part)
            .zip(out.chunks_mut(per_part * width))
            .map(Mutex::new)
            .collect();
        let first_error: Mutex<Option<Error>> = Mutex::new(None);
        pool.apply(PARTS, &|i| {
            let Some(part) = parts.get(i) else { return };
            let mut part = part.lock().unwrap_or_else(PoisonError::into_inner);
            let (rows, out) = &mut *part;
            let read = WORKER_SCRATCH.with_borrow_mut(|s| self.read_serial(rows, out, s));
            if let Err(e) = read {
                first_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert(e);
            }
        })?;
        match first_error
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One `pread` per row on the calling thread, checking `stop` between rows.
    fn read_serial(self, rows: &[u32], out: &mut [u8], scratch: &mut Scratch) -> Result<()> {
        for (&row, slot) in rows.iter().zip(out.chunks_exact_mut(self.table.width())) {
            if self.stop.load(Ordering::Relaxed) {
                return Err(Error::Cancelled);
            }
            self.table.read_row(row, slot, scratch, self.io)?;
        }
        Ok(())
    }
}
