//! The open files behind a set of tables, and what part of each delivered row
//! lives where.
//!
//! A table is one or more *shards* of consecutive rows, each stored in one
//! or more *parts*: packed rows (GGUF) are one shard of one part; DeepSeek
//! checkpoints keep values and scales in separate tensors, so a delivered
//! row is the value part followed by the scale part; Qwen4-Exp checkpoints
//! split the table into `split_ngram_parts` shards, and MLX stores each
//! shard's codes, scales and biases apart. Files are opened once even when
//! several tables or shards share one.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{cachectl, IoConfig};
use crate::model::{RowPart, RowShard, TableLocation};
use crate::{Error, Result};

/// Reads at a byte offset without moving a cursor (`pread`).
///
/// The pread pool reads through this trait so tests can put a
/// fault-injecting layer (`super::fault`, feature `test_utils`) between
/// the engine and the file.
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

/// Most parts a delivered row may be stored in (MLX 4-bit tables have
/// three: codes, scales, biases).
pub const MAX_PARTS: usize = 4;

/// One contiguous run of a delivered row stored in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Index of the file in [`TableFiles::files`].
    pub file: usize,
    /// Byte offset of the shard's first row's part in that file.
    pub base: u64,
    /// Table row id of the shard's first row.
    pub first_row: u64,
    /// Bytes of this part per row.
    pub bytes: usize,
    /// Where this part goes inside the delivered row.
    pub dst: usize,
}

impl Part {
    /// File offset of `row`'s part (`row` in this part's shard).
    pub fn offset_of(&self, row: u64) -> u64 {
        self.base + (row - self.first_row) * self.bytes as u64
    }
}

/// One table: its row count and where each row's parts are.
#[derive(Debug, Clone)]
pub struct TableSpec {
    /// Valid row ids are `0..rows`.
    pub rows: u64,
    /// Bytes per delivered row (sum of a shard's parts).
    pub row_bytes: usize,
    /// Parts per row (the same in every shard).
    pub parts_per_row: usize,
    /// Table row id of each shard's first row, increasing from 0.
    pub(crate) shard_starts: Vec<u64>,
    /// Every shard's parts, `parts_per_row` a shard, shards in order.
    pub(crate) parts: Vec<Part>,
}

impl TableSpec {
    /// The parts of `row` (a valid row id of the table), in delivered order.
    #[inline]
    pub fn parts_of(&self, row: u64) -> &[Part] {
        let shard = if self.shard_starts.len() == 1 {
            0
        } else {
            self.shard_starts.partition_point(|&s| s <= row) - 1
        };
        &self.parts[shard * self.parts_per_row..(shard + 1) * self.parts_per_row]
    }

    /// A spec of one shard of `parts` covering `rows` rows.
    pub fn single(rows: u64, parts: Vec<Part>) -> TableSpec {
        TableSpec {
            rows,
            row_bytes: parts.iter().map(|p| p.bytes).sum(),
            parts_per_row: parts.len(),
            shard_starts: vec![0],
            parts,
        }
    }
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
    /// Opens the files of `tables` and checks every table fits in its files.
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
        let field = |what: String| format!("table {index} (layer {}) {what}", loc.layer_id);
        loc.check_shape(loc.first_file())?;
        let parts_per_row = loc.shards[0].parts.len();
        if parts_per_row > MAX_PARTS {
            return Err(Error::format(
                loc.first_file(),
                field("parts".into()),
                format!("{parts_per_row} parts per row; at most {MAX_PARTS} are supported"),
            ));
        }
        let mut parts = Vec::with_capacity(loc.shards.len() * parts_per_row);
        let mut shard_starts = Vec::with_capacity(loc.shards.len());
        for (s, shard) in loc.shards.iter().enumerate() {
            shard_starts.push(shard.first_row);
            let mut dst = 0;
            for (p, part) in shard.parts.iter().enumerate() {
                let what = if loc.shards.len() == 1 {
                    format!("part {p}")
                } else {
                    format!("shard {s} part {p}")
                };
                parts.push(self.part(part, shard, dst, field(what), config)?);
                dst += part.bytes_per_row as usize;
            }
        }
        Ok(TableSpec {
            rows: loc.rows,
            row_bytes: loc.full_row_bytes(),
            parts_per_row,
            shard_starts,
            parts,
        })
    }

    /// Opens (or reuses) the file of `part` and checks its region fits.
    fn part(
        &mut self,
        part: &RowPart,
        shard: &RowShard,
        dst: usize,
        field: String,
        config: &IoConfig,
    ) -> Result<Part> {
        let (path, base, bytes) = (&part.file, part.offset, part.bytes_per_row as usize);
        if bytes == 0 {
            return Err(Error::format(path, field, "0 bytes per row"));
        }
        let file = self.file_index(path, config)?;
        let len = self.files[file].len;
        let rows = shard.rows;
        let end = rows
            .checked_mul(bytes as u64)
            .and_then(|n| n.checked_add(base));
        match end {
            Some(end) if end <= len => Ok(Part {
                file,
                base,
                first_row: shard.first_row,
                bytes,
                dst,
            }),
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
