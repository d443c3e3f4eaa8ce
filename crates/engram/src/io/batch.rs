//! The engine-independent half of a row source: validation, planning,
//! bounce buffers and the scatter back into request order.

use std::alloc::{self, Layout};
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::files::{TableFiles, TableSpec};
use super::plan::{self, PlanLimits, ReadOp, Request, SubBatch};
use super::{BatchStats, IoConfig, Priority, RowRequest, RowSource, TableShape, PAGE};
use crate::{Error, Result};

/// A failed read: which one and why.
#[derive(Debug)]
pub struct OpError {
    /// Index of the failed read in the list given to the engine.
    pub op: usize,
    /// What went wrong.
    pub error: io::Error,
}

/// What an engine hands back for a submitted list of reads.
#[derive(Debug)]
pub struct Completed {
    /// The bounce buffer, filled; `None` when the engine had to leak it
    /// (a broken io_uring may still write into it).
    pub buf: Option<BounceBuf>,
    /// Latency of each read issued, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// The first failed read, if any (later reads may have been skipped).
    pub failure: Option<OpError>,
}

impl Completed {
    /// Done without a queued read (nothing to read, a list refused, or rows
    /// read inline): `buf` handed back, no latencies, `error` charged to
    /// the first read if any.
    pub fn immediate(buf: BounceBuf, error: Option<io::Error>) -> Completed {
        Completed {
            buf: Some(buf),
            latencies_ns: Vec::new(),
            failure: error.map(|error| OpError { op: 0, error }),
        }
    }
}

/// What an engine's `submit` does before it queues anything: an empty list
/// is done at once and a list that does not fit `buf` ([`plan::check_ops`])
/// fails at once (both `Err`, the answer to return); otherwise `buf` comes
/// back to be read into.
pub fn check_submission(ops: &[ReadOp], buf: BounceBuf) -> std::result::Result<BounceBuf, Pending> {
    if ops.is_empty() {
        return Err(Pending::ready(Completed::immediate(buf, None)));
    }
    match plan::check_ops(ops, buf.len()) {
        Ok(()) => Ok(buf),
        Err(error) => Err(Pending::ready(Completed::immediate(buf, Some(error)))),
    }
}

/// Reads in progress; [`Pending::wait`] blocks until they are done.
///
/// The engine owns the bounce buffer while reads are in flight, so dropping
/// a `Pending` without waiting is safe: the reads finish (or fail) in the
/// background and the engine frees the buffer.
pub struct Pending(Box<dyn FnOnce() -> Completed + Send>);

impl Pending {
    /// Wraps the function that waits for the reads.
    pub fn new(wait: impl FnOnce() -> Completed + Send + 'static) -> Pending {
        Pending(Box::new(wait))
    }

    /// Reads that are already done.
    pub fn ready(done: Completed) -> Pending {
        Pending::new(move || done)
    }

    /// Blocks until every read is done and returns the buffer and results.
    pub fn wait(self) -> Completed {
        (self.0)()
    }
}

/// How reads are carried out: the only part that differs between backends.
///
/// `submit` takes ownership of `buf` and reads every op into its range of
/// it (ranges are disjoint and increasing; engines check this with
/// [`plan::check_ops`]). A read succeeds once `need` bytes arrived; short
/// reads are continued. Taking the buffer by value lets a source keep two
/// sub-batches in flight (the queue stays full across their boundary)
/// without any borrow outliving a call.
pub trait ReadEngine: Send + Sync {
    /// Backend name.
    fn name(&self) -> &'static str;
    /// Starts `ops` into `buf` at `priority`.
    fn submit(&self, ops: Vec<ReadOp>, buf: BounceBuf, priority: Priority) -> Pending;
}

/// A [`RowSource`] over a set of table files, reading with engine `E`.
pub struct BatchSource<E> {
    // Declared before `files`: dropped (threads joined, ring closed) while
    // the descriptors it reads are still open.
    engine: E,
    files: Arc<TableFiles>,
    /// The tables' shapes, as [`RowSource::shapes`] answers them.
    shapes: Vec<TableShape>,
    limits: PlanLimits,
    /// Bounce buffers kept for reuse: a fresh allocation costs a page fault
    /// per page on first touch (inside the read syscall for direct I/O),
    /// which shows in the read rate. At most [`SPARE_BUFFERS`] are kept.
    spare: Mutex<Vec<BounceBuf>>,
}

/// Bounce buffers a source keeps between batches (one per concurrent
/// reader thread is enough: a scheduler reads two tables at once, plus hints).
const SPARE_BUFFERS: usize = 4;

impl<E: ReadEngine> BatchSource<E> {
    /// Wraps `engine` reading `files` with the limits of `config`.
    pub fn new(files: Arc<TableFiles>, engine: E, config: &IoConfig) -> BatchSource<E> {
        let limits = PlanLimits {
            align: files.direct,
            max_read: config.max_read_bytes,
            // Two sub-batches are in flight at once.
            max_batch: (config.max_batch_bytes / 2).max(config.max_read_bytes),
        };
        let shapes = files
            .tables
            .iter()
            .map(|t| TableShape {
                rows: t.rows,
                row_bytes: t.row_bytes,
            })
            .collect();
        BatchSource {
            files,
            shapes,
            engine,
            limits,
            spare: Mutex::new(Vec::new()),
        }
    }

    /// The files read.
    pub fn files(&self) -> &TableFiles {
        &self.files
    }

    /// The engine.
    pub fn engine(&self) -> &E {
        &self.engine
    }

    fn spec(&self, table: usize) -> Result<&TableSpec> {
        self.files.tables.get(table).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "table {table} does not exist ({} tables)",
                self.files.tables.len()
            ))
        })
    }

    /// Asks the kernel to read `request`'s rows into the page cache
    /// (`POSIX_FADV_WILLNEED`, `F_RDADVISE` on macOS), each page once, and
    /// counts the advice as the batch's reads. [`Priority::Warm`] rows are
    /// wanted only there, and advice puts the device to work at once
    /// without a reader thread, a wake-up or a copy per row.
    fn advise(&self, spec: &TableSpec, request: &Request, stats: &mut BatchStats) {
        for p in 0..spec.parts_per_row {
            // Rows come in increasing order: a page advised for the row
            // before (in the same file) is not advised again.
            // (file, offset of the last row advised, end of its advice)
            let mut advised: Option<(usize, u64, u64)> = None;
            for u in 0..request.unique_rows() {
                let row = request.row(u);
                let part = &spec.parts_of(row)[p];
                let offset = part.offset_of(row);
                let end = offset + part.bytes as u64;
                let mut start = offset / PAGE * PAGE;
                if let Some((file, last, to)) = advised {
                    if file == part.file && offset >= last {
                        start = start.max(to);
                    }
                }
                if start >= end {
                    continue;
                }
                let file = &self.files.files[part.file].file;
                // Advisory: a refusal leaves the rows to be read when needed.
                let _ = super::cachectl::advise_willneed(file, start, end - start);
                let to = end.div_ceil(PAGE) * PAGE;
                advised = Some((part.file, offset, to));
                stats.reads_issued += 1;
                stats.bytes_read += to - start;
            }
        }
    }

    /// Plans the sub-batch at `first` and submits it.
    fn start_sub_batch(
        &self,
        spec: &TableSpec,
        request: &Request,
        first: usize,
        priority: Priority,
    ) -> Result<(SubBatch, Pending)> {
        let batch = plan::sub_batch(spec, request, first, self.limits);
        let buf = self.take_buffer(batch.buf_len)?;
        let pending = self.engine.submit(batch.ops.clone(), buf, priority);
        Ok((batch, pending))
    }

    /// Waits for a submitted sub-batch and scatters its rows into `out`.
    fn finish_sub_batch(
        &self,
        table: usize,
        request: &Request,
        batch: &SubBatch,
        pending: Pending,
        out: &mut [u8],
        stats: &mut BatchStats,
    ) -> Result<()> {
        let spec = &self.files.tables[table];
        let done = pending.wait();
        stats.reads_issued += done.latencies_ns.len() as u64;
        stats
            .read_latencies_ns
            .extend_from_slice(&done.latencies_ns);
        if let Some(OpError { op, error }) = done.failure {
            let (row, file, offset) = plan::row_of_op(&self.files, spec, request, batch, op);
            return Err(Error::RowRead {
                table,
                row,
                file: file.to_path_buf(),
                offset,
                source: error,
            });
        }
        let Some(bounce) = done.buf else {
            return Err(Error::Io {
                path: self.files.files[0].path.clone(),
                source: io::Error::other(
                    "the I/O engine lost its buffer without reporting an error",
                ),
            });
        };
        stats.bytes_read += batch.ops.iter().map(|op| op.len as u64).sum::<u64>();
        scatter(spec, request, batch, bounce.as_slice(), out);
        self.return_buffer(bounce);
        Ok(())
    }

    /// A bounce buffer of at least `len` bytes: a kept one if one is large
    /// enough, else a new one.
    fn take_buffer(&self, len: usize) -> Result<BounceBuf> {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = spare.iter().position(|b| b.len() >= len) {
            return Ok(spare.swap_remove(i));
        }
        drop(spare);
        BounceBuf::zeroed(len)
    }

    fn return_buffer(&self, buf: BounceBuf) {
        if buf.is_empty() {
            return;
        }
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARE_BUFFERS {
            spare.push(buf);
        } else if let Some(smallest) = spare.iter_mut().min_by_key(|b| b.len()) {
            // Keep the larger buffers: they serve every request size.
            if smallest.len() < buf.len() {
                *smallest = buf;
            }
        }
    }
}

/// Copies each distinct row's parts from the bounce buffer to every request
/// position that asked for it.
fn scatter(spec: &TableSpec, request: &Request, batch: &SubBatch, bounce: &[u8], out: &mut [u8]) {
    let parts = spec.parts_per_row;
    for k in 0..batch.count {
        let u = batch.first + k;
        for (p, part) in spec.parts_of(request.row(u)).iter().enumerate() {
            let (op, off) = batch.places[k * parts + p];
            let src = batch.ops[op as usize].buf_off + off as usize;
            let bytes = &bounce[src..src + part.bytes];
            for &i in request.requesters(u) {
                let dst = i as usize * spec.row_bytes + part.dst;
                out[dst..dst + part.bytes].copy_from_slice(bytes);
            }
        }
    }
}

impl<E: ReadEngine> RowSource for BatchSource<E> {
    fn name(&self) -> String {
        let mut name = self.engine.name().to_string();
        if self.files.direct {
            name.push_str("+direct");
        }
        name
    }

    fn shapes(&self) -> &[TableShape] {
        &self.shapes
    }

    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        let RowRequest {
            table,
            rows,
            priority,
        } = request;
        let started = Instant::now();
        let spec = self.spec(table)?;
        check_out_len(table, rows.len(), spec.row_bytes, out.len())?;
        let request = Request::new(table, spec, rows)?;
        let mut stats = BatchStats {
            rows_requested: rows.len() as u64,
            rows_unique: request.unique_rows() as u64,
            ..BatchStats::default()
        };
        if priority == Priority::Warm && !self.files.direct {
            self.advise(spec, &request, &mut stats);
            stats.elapsed = started.elapsed();
            return Ok(stats);
        }
        // Two sub-batches in flight: the next is queued before the current
        // is waited for, so the device queue does not drain at each
        // boundary. Each holds at most half the configured bounce memory.
        let mut in_flight: VecDeque<(SubBatch, Pending)> = VecDeque::with_capacity(2);
        let mut first = 0;
        loop {
            while in_flight.len() < 2 && first < request.unique_rows() {
                let (batch, pending) = self.start_sub_batch(spec, &request, first, priority)?;
                first += batch.count;
                in_flight.push_back((batch, pending));
            }
            let Some((batch, pending)) = in_flight.pop_front() else {
                break;
            };
            self.finish_sub_batch(table, &request, &batch, pending, out, &mut stats)?;
        }
        stats.elapsed = started.elapsed();
        Ok(stats)
    }
}

/// Checks an output buffer holds exactly `rows` rows of `row_bytes` (an
/// [`Error::InvalidArgument`] otherwise).
pub fn check_out_len(table: usize, rows: usize, row_bytes: usize, out_len: usize) -> Result<()> {
    if rows.checked_mul(row_bytes) != Some(out_len) {
        return Err(Error::InvalidArgument(format!(
            "output buffer for {rows} rows of table {table} is {out_len} bytes; expected {rows} x {row_bytes}"
        )));
    }
    Ok(())
}

/// A zeroed, page-aligned bounce buffer (`O_DIRECT` needs aligned memory).
#[derive(Debug)]
pub struct BounceBuf {
    ptr: *mut u8,
    len: usize,
}

impl BounceBuf {
    /// Allocates `len` zeroed bytes aligned to [`PAGE`].
    pub fn zeroed(len: usize) -> Result<BounceBuf> {
        if len == 0 {
            return Ok(BounceBuf {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len,
            });
        }
        let layout = Layout::from_size_align(len, PAGE as usize)
            .map_err(|e| Error::InvalidArgument(format!("bounce buffer of {len} bytes: {e}")))?;
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc::alloc(layout) };
        if ptr.is_null() {
            alloc::handle_alloc_error(layout);
        }
        // Writing (rather than alloc_zeroed's lazily mapped zero pages)
        // faults every page in now, not one by one inside the direct-I/O
        // read syscalls of the first batch.
        // SAFETY: ptr is valid for len bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(BounceBuf { ptr, len })
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialized (zeroed) bytes, or dangling with len 0.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl BounceBuf {
    /// Gives up the allocation without freeing it (the kernel may still
    /// write into it).
    pub fn leak(self) {
        std::mem::forget(self);
    }

    /// Base pointer, for engines that hand ranges to other threads or the
    /// kernel while they own the buffer.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for BounceBuf {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe {
                alloc::dealloc(
                    self.ptr,
                    Layout::from_size_align_unchecked(self.len, PAGE as usize),
                )
            }
        }
    }
}

// SAFETY: BounceBuf owns its allocation like a Vec<u8>.
unsafe impl Send for BounceBuf {}
// SAFETY: shared access only reads, like &Vec<u8>.
unsafe impl Sync for BounceBuf {}

/// Reads `op` through a positional reader into `buf` (exactly the op's
/// range), continuing short reads and retrying `EINTR`/`EAGAIN`.
///
/// With direct I/O a short read that stops off a page boundary before
/// `need` cannot be continued (the next read would be unaligned): it is end
/// of file.
pub(crate) fn read_op_positional(
    file: &dyn super::files::PositionalRead,
    op: &ReadOp,
    buf: &mut [u8],
    direct: bool,
) -> io::Result<()> {
    // Consecutive retries without progress before the error is returned.
    const MAX_RETRIES: u32 = 1000;
    let mut got = 0usize;
    let mut retries = 0;
    while got < op.need {
        match file.read_at(&mut buf[got..op.len], op.offset + got as u64) {
            Ok(0) => return Err(eof_error(op, got)),
            Ok(n) => {
                got += n;
                retries = 0;
                if got < op.need && direct && got as u64 % PAGE != 0 {
                    return Err(eof_error(op, got));
                }
            }
            Err(e) if is_retryable(&e) && retries < MAX_RETRIES => {
                retries += 1;
                std::thread::yield_now();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Errors a read is simply repeated after.
pub(crate) fn is_retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

/// The error for a read that hit end of file before its rows' last byte.
pub(crate) fn eof_error(op: &ReadOp, got: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "file ends at byte {} but the rows need bytes up to {} (truncated file?)",
            op.offset + got as u64,
            op.offset + op.need as u64
        ),
    )
}
