//! The engine-independent half of a row source: validation, planning,
//! bounce buffers and the scatter back into request order.

use std::alloc::{self, Layout};
use std::io;
use std::sync::Arc;
use std::time::Instant;

use super::files::{TableFiles, TableSpec};
use super::plan::{self, PlanLimits, ReadOp, Request, SubBatch};
use super::{BatchStats, IoConfig, Priority, RowSource, PAGE};
use crate::{Error, Result};

/// A failed read: which one and why.
#[derive(Debug)]
pub struct OpError {
    /// Index of the failed read in the list given to the engine.
    pub op: usize,
    /// What went wrong.
    pub error: io::Error,
}

/// How reads are carried out: the only part that differs between backends.
///
/// `execute` reads every op into its range of `buf` (ranges are disjoint and
/// increasing; engines check this with [`plan::check_ops`]) and returns only
/// once no read touches `buf` any more, also on failure. The one exception:
/// an engine that loses track of reads the kernel still holds (a broken
/// io_uring) calls [`BounceBuf::leak`] so the memory is never reused. A read
/// succeeds once `need` bytes arrived; short reads are continued.
pub trait ReadEngine: Send + Sync {
    /// Backend name.
    fn name(&self) -> &'static str;
    /// Reads in flight at once.
    fn depth(&self) -> usize;
    /// Carries out `ops`, appending one latency (ns) per read issued.
    fn execute(
        &self,
        ops: &[ReadOp],
        buf: &mut BounceBuf,
        priority: Priority,
        latencies_ns: &mut Vec<u64>,
    ) -> std::result::Result<(), OpError>;
}

/// A [`RowSource`] over a set of table files, reading with engine `E`.
pub struct BatchSource<E> {
    // Declared before `files`: dropped (threads joined, ring closed) while
    // the descriptors it reads are still open.
    engine: E,
    files: Arc<TableFiles>,
    limits: PlanLimits,
}

impl<E: ReadEngine> BatchSource<E> {
    /// Wraps `engine` reading `files` with the limits of `config`.
    pub fn new(files: Arc<TableFiles>, engine: E, config: &IoConfig) -> BatchSource<E> {
        let limits = PlanLimits {
            align: files.direct,
            max_read: config.max_read_bytes,
            max_batch: config.max_batch_bytes,
        };
        BatchSource {
            files,
            engine,
            limits,
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

    fn run_sub_batch(
        &self,
        table: usize,
        request: &Request,
        batch: &SubBatch,
        out: &mut [u8],
        priority: Priority,
        stats: &mut BatchStats,
    ) -> Result<()> {
        let spec = &self.files.tables[table];
        let mut bounce = BounceBuf::zeroed(batch.buf_len)?;
        let issued_before = stats.read_latencies_ns.len();
        let result = self.engine.execute(
            &batch.ops,
            &mut bounce,
            priority,
            &mut stats.read_latencies_ns,
        );
        stats.reads_issued += (stats.read_latencies_ns.len() - issued_before) as u64;
        if let Err(OpError { op, error }) = result {
            let (row, file, offset) = plan::row_of_op(&self.files, spec, request, batch, op);
            return Err(Error::RowRead {
                table,
                row,
                file: file.to_path_buf(),
                offset,
                source: error,
            });
        }
        stats.bytes_read += batch.ops.iter().map(|op| op.len as u64).sum::<u64>();
        scatter(spec, request, batch, bounce.as_slice(), out);
        Ok(())
    }
}

/// Copies each distinct row's parts from the bounce buffer to every request
/// position that asked for it.
fn scatter(spec: &TableSpec, request: &Request, batch: &SubBatch, bounce: &[u8], out: &mut [u8]) {
    let parts = spec.parts.len();
    for k in 0..batch.count {
        let u = batch.first + k;
        for (p, part) in spec.parts.iter().enumerate() {
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

    fn tables(&self) -> usize {
        self.files.tables.len()
    }

    fn table_rows(&self, table: usize) -> u64 {
        self.files.tables.get(table).map_or(0, |t| t.rows)
    }

    fn row_bytes(&self, table: usize) -> usize {
        self.files.tables.get(table).map_or(0, |t| t.row_bytes)
    }

    fn read_rows_at(
        &self,
        table: usize,
        rows: &[u64],
        out: &mut [u8],
        priority: Priority,
    ) -> Result<BatchStats> {
        let started = Instant::now();
        let spec = self.spec(table)?;
        check_out_len(table, rows.len(), spec.row_bytes, out.len())?;
        let request = Request::new(table, spec, rows)?;
        let mut stats = BatchStats {
            rows_requested: rows.len() as u64,
            rows_unique: request.unique_rows() as u64,
            ..BatchStats::default()
        };
        let mut first = 0;
        while first < request.unique_rows() {
            let batch = plan::sub_batch(spec, &request, first, self.limits);
            self.run_sub_batch(table, &request, &batch, out, priority, &mut stats)?;
            first += batch.count;
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
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            alloc::handle_alloc_error(layout);
        }
        Ok(BounceBuf { ptr, len })
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
    /// write into it) and leaves an empty buffer behind.
    pub fn leak(&mut self) {
        self.ptr = std::ptr::NonNull::dangling().as_ptr();
        self.len = 0;
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
