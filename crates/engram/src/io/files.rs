//! The open files behind a set of tables, and what part of each delivered row
//! lives where.
//!
//! A table is one or two *parts*: packed rows (GGUF) are one part; Hugging
//! Face tables keep values and scales in separate tensors, so a delivered row
//! is the value part followed by the scale part. Files are opened once even
//! when several tables share a shard.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{cachectl, IoConfig};
use crate::model::TableLocation;
use crate::{Error, Result};

/// Reads at a byte offset without moving a cursor (`pread`).
///
/// The pread pool reads through this trait so tests can put a
/// fault-injecting layer ([`super::fault`]) between the engine and the file.
pub trait PositionalRead: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (0 at end of file).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Reads up to `buf.len()` bytes at `offset` only if they are in the
    /// page cache: `Ok(Some(n))` for the bytes read without waiting for
    /// storage (fewer than asked when only a prefix is cached), `Ok(None)`
    /// when the first byte is not cached or the platform cannot tell.
    /// Readers that cannot tell (the default, fault injection) say `None`,
    /// so every read of theirs goes the ordinary way.
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
        let _ = (buf, offset);
        Ok(None)
    }
}

impl PositionalRead for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }

    #[cfg(target_os = "linux")]
    fn read_at_nowait(&self, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
        use std::os::fd::AsRawFd;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
        // SAFETY: one iovec over `buf`, which outlives the call; the
        // descriptor is open for as long as `self` lives.
        let n = unsafe { libc::preadv2(self.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // EAGAIN: not cached. EOPNOTSUPP/EINVAL: a kernel or file system
            // without RWF_NOWAIT for buffered reads; the ordinary read
            // path serves the rows.
            Some(libc::EAGAIN | libc::EOPNOTSUPP | libc::EINVAL | libc::EINTR) => Ok(None),
            _ => Err(e),
        }
    }
}

/// One contiguous run of a delivered row stored in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Index of the file in [`TableFiles::files`].
    pub file: usize,
    /// Byte offset of row 0's part in that file.
    pub base: u64,
    /// Bytes of this part per row.
    pub bytes: usize,
    /// Where this part goes inside the delivered row.
    pub dst: usize,
}

impl Part {
    /// File offset of `row`'s part.
    pub fn offset_of(&self, row: u64) -> u64 {
        self.base + row * self.bytes as u64
    }
}

/// One table: its row count and parts.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// Valid row ids are `0..rows`.
    pub rows: u64,
    /// Bytes per delivered row (sum of the parts).
    pub row_bytes: usize,
    /// One part (packed rows) or two (values, then scales).
    pub parts: Vec<Part>,
}

/// An opened file.
#[derive(Debug)]
pub struct OpenFile {
    /// Its path, for error messages.
    pub path: PathBuf,
    /// The file, opened read-only (with `O_DIRECT` when configured on Linux).
    pub file: Arc<File>,
    /// Its length when opened.
    pub len: u64,
}

/// A region of a file that holds one part of every row of a table.
struct PartRequest<'a> {
    path: &'a Path,
    base: u64,
    bytes: usize,
    dst: usize,
    rows: u64,
}

/// The files and table specs a row source reads.
#[derive(Debug)]
pub struct TableFiles {
    /// Opened files, each path once.
    pub files: Vec<OpenFile>,
    /// One spec per table, in layout order.
    pub tables: Vec<TableSpec>,
    /// Whether files bypass the page cache (reads must be page aligned on
    /// Linux).
    pub direct: bool,
}

impl TableFiles {
    /// Opens the files of `tables` and checks every table fits in its file.
    pub fn open(tables: &[TableLocation], config: &IoConfig) -> Result<TableFiles> {
        let mut set = TableFiles {
            files: Vec::new(),
            tables: Vec::with_capacity(tables.len()),
            direct: config.direct,
        };
        for (index, loc) in tables.iter().enumerate() {
            let spec = set.spec_for(index, loc, config)?;
            set.tables.push(spec);
        }
        Ok(set)
    }

    fn spec_for(
        &mut self,
        index: usize,
        loc: &TableLocation,
        config: &IoConfig,
    ) -> Result<TableSpec> {
        let field = |what: &str| format!("table {index} (layer {}) {what}", loc.layer_id);
        let values = PartRequest {
            path: &loc.file,
            base: loc.offset,
            bytes: loc.row_bytes as usize,
            dst: 0,
            rows: loc.rows,
        };
        let mut parts = vec![self.part(values, field("rows"), config)?];
        if let Some(scales) = &loc.scales {
            let request = PartRequest {
                path: &scales.file,
                base: scales.offset,
                bytes: scales.bytes_per_row as usize,
                dst: loc.row_bytes as usize,
                rows: loc.rows,
            };
            parts.push(self.part(request, field("scales"), config)?);
        }
        let row_bytes = parts.iter().map(|p| p.bytes).sum();
        if row_bytes != loc.encoding.row_bytes() {
            return Err(Error::format(
                &loc.file,
                field("row_bytes"),
                format!(
                    "{row_bytes} bytes per row, but encoding {} has {}",
                    loc.encoding,
                    loc.encoding.row_bytes()
                ),
            ));
        }
        Ok(TableSpec {
            rows: loc.rows,
            row_bytes,
            parts,
        })
    }

    /// Opens (or reuses) the file of `request` and checks its region fits.
    fn part(&mut self, request: PartRequest<'_>, field: String, config: &IoConfig) -> Result<Part> {
        let PartRequest {
            path,
            base,
            bytes,
            dst,
            rows,
        } = request;
        if bytes == 0 {
            return Err(Error::format(path, field, "0 bytes per row"));
        }
        let file = self.file_index(path, config)?;
        let len = self.files[file].len;
        let end = rows
            .checked_mul(bytes as u64)
            .and_then(|n| n.checked_add(base));
        match end {
            Some(end) if end <= len => Ok(Part { file, base, bytes, dst }),
            _ => Err(Error::format(
                path,
                field,
                format!(
                    "{rows} rows of {bytes} bytes at offset {base} do not fit in the file ({len} bytes)"
                ),
            )),
        }
    }

    fn file_index(&mut self, path: &Path, config: &IoConfig) -> Result<usize> {
        if let Some(i) = self.files.iter().position(|f| f.path == path) {
            return Ok(i);
        }
        let file = open_for_rows(path, config)?;
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        self.files.push(OpenFile {
            path: path.to_path_buf(),
            file: Arc::new(file),
            len,
        });
        Ok(self.files.len() - 1)
    }

    /// The files as positional readers, for the pread pool.
    pub fn positional(&self) -> Vec<Arc<dyn PositionalRead>> {
        self.files
            .iter()
            .map(|f| f.file.clone() as Arc<dyn PositionalRead>)
            .collect()
    }

    /// Raw descriptors of the files, in order (valid while `self` lives).
    pub fn raw_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.files.iter().map(|f| f.file.as_raw_fd()).collect()
    }
}

/// Opens a table file read-only with the configured cache behaviour.
fn open_for_rows(path: &Path, config: &IoConfig) -> Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    if config.direct {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(cachectl::DIRECT_OPEN_FLAGS);
    }
    let file = options.open(path).map_err(|e| {
        let hint = if config.direct && e.raw_os_error() == Some(libc::EINVAL) {
            " (this file system does not support O_DIRECT; run without direct I/O)"
        } else {
            ""
        };
        Error::io(path, io::Error::new(e.kind(), format!("{e}{hint}")))
    })?;
    if config.direct {
        cachectl::set_nocache(&file).map_err(|e| Error::io(path, e))?;
    }
    if config.advise_random {
        cachectl::advise_random(&file).map_err(|e| Error::io(path, e))?;
    }
    Ok(file)
}
