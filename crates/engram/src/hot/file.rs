//! The hot-row file: format, writer and loader (`docs/model-files.md`
//! describes the bytes).
//!
//! ```text
//! 0       8      magic "ENGRMHOT"
//! 8       4      version (u32 LE, 1)
//! 12      4      header length H (u32 LE, at most 1 MiB)
//! 16      H      header: JSON (model identity, rows per table, profile)
//! ..             zero padding to a multiple of 64 bytes: the data start D
//! D       ..     per table in order: its sorted row ids (u32 LE), then
//!                their rows' raw bytes, row after row
//! end-16  8      trailer magic "HOTEND\0\0"
//! end-8   4      CRC-32 of bytes 0..D
//! end-4   4      CRC-32 of bytes D..end-16
//! ```
//!
//! Everything a loader sizes a buffer by is checked against the file's
//! real length first, so a bad header cannot make it allocate more than
//! the file holds.

use std::fs::File;
#[cfg(feature = "tools")]
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use memmap2::{Advice, Mmap, MmapOptions};

use serde::{Deserialize, Serialize};

use super::identity::ModelIdentity;
#[cfg(feature = "tools")]
use crate::model::output::TempFile;
use crate::{Error, Result};

/// The first eight bytes of every hot-row file.
pub const MAGIC: &[u8; 8] = b"ENGRMHOT";
/// The format version this library writes and reads.
pub const VERSION: u32 = 1;
/// The trailer's magic.
const TRAILER_MAGIC: &[u8; 8] = b"HOTEND\0\0";
/// Magic, version and header length.
const PREFIX: usize = 16;
/// Trailer magic and the two checksums.
const TRAILER: usize = 16;
/// Largest header accepted: a bound for untrusted lengths.
const MAX_HEADER: usize = 1 << 20;
/// The data start is aligned to this.
const DATA_ALIGN: usize = 64;
/// Bytes per checksum task while loading: large enough that the kernel
/// reads ahead in big runs, small enough to spread over threads evenly.
const LOAD_CHUNK: usize = 4 << 20;

/// How a hot set was profiled (informational).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    /// Tokens counted.
    pub tokens: u64,
    /// Corpus files counted.
    pub files: u64,
    /// Budget per table, bytes (row bytes plus 4 bytes of id per row).
    pub budget_bytes: u64,
}

/// The JSON header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Header {
    /// The model the rows were read from.
    pub model: ModelIdentity,
    /// Hot rows per table, in layout order.
    pub hot_rows: Vec<u64>,
    /// How the set was chosen.
    pub profile: ProfileInfo,
}

/// One table's hot rows about to be written.
#[cfg(feature = "tools")]
pub(crate) struct TableData {
    pub ids: Vec<u32>,
    pub rows: Vec<u8>,
}

fn data_start(header_len: usize) -> usize {
    (PREFIX + header_len).div_ceil(DATA_ALIGN) * DATA_ALIGN
}

/// Writes a hot-row file at `path` (under a temporary name, renamed when
/// complete). The profiler's (feature `tools`): the engine only loads.
#[cfg(feature = "tools")]
pub(crate) fn write(path: &Path, header: &Header, tables: &[TableData]) -> Result<u64> {
    let json = serde_json::to_vec(header).expect("the header holds only plain values");
    if json.len() > MAX_HEADER {
        return Err(Error::InvalidArgument(format!(
            "{}: hot-file header of {} bytes exceeds {MAX_HEADER}",
            path.display(),
            json.len()
        )));
    }
    let mut prefix = Vec::with_capacity(data_start(json.len()));
    prefix.extend_from_slice(MAGIC);
    prefix.extend_from_slice(&VERSION.to_le_bytes());
    prefix.extend_from_slice(&(json.len() as u32).to_le_bytes());
    prefix.extend_from_slice(&json);
    prefix.resize(data_start(json.len()), 0);
    let temp = TempFile::create_for(path)?;
    let io = |e| Error::io(temp.path(), e);
    let mut out = BufWriter::with_capacity(LOAD_CHUNK, temp.file());
    out.write_all(&prefix).map_err(io)?;
    let mut data_crc = crc32fast::Hasher::new();
    let mut written = prefix.len() as u64;
    for t in tables {
        let ids: Vec<u8> = t.ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        for part in [&ids[..], &t.rows[..]] {
            data_crc.update(part);
            out.write_all(part).map_err(io)?;
            written += part.len() as u64;
        }
    }
    out.write_all(TRAILER_MAGIC).map_err(io)?;
    out.write_all(&crc32fast::hash(&prefix).to_le_bytes())
        .map_err(io)?;
    out.write_all(&data_crc.finalize().to_le_bytes())
        .map_err(io)?;
    out.flush().map_err(io)?;
    drop(out);
    temp.file().sync_all().map_err(io)?;
    temp.persist()?;
    Ok(written + TRAILER as u64)
}

/// A hot-row file's header, checked against its length, ready to load.
pub(crate) struct Opened {
    pub file: File,
    pub header: Header,
    pub prefix: Vec<u8>,
    pub file_bytes: u64,
}

/// Opens `path` and checks magic, version, header and total size.
pub(crate) fn open(path: &Path) -> Result<Opened> {
    let bad = |field: &str, reason: String| Error::format(path, field, reason);
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let file_bytes = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut fixed = [0u8; PREFIX];
    if file_bytes < (PREFIX + TRAILER) as u64 {
        return Err(bad(
            "size",
            format!("{file_bytes} bytes is too short for a hot-row file (truncated?)"),
        ));
    }
    file.read_exact_at(&mut fixed, 0)
        .map_err(|e| Error::io(path, e))?;
    if &fixed[..8] != MAGIC {
        return Err(bad(
            "magic",
            format!("{:?} is not a hot-row file's {MAGIC:?}", &fixed[..8]),
        ));
    }
    let version = u32::from_le_bytes(fixed[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(
            "version",
            format!("version {version}; this library reads version {VERSION}"),
        ));
    }
    let header_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes")) as usize;
    let start = data_start(header_len);
    if header_len > MAX_HEADER || (start + TRAILER) as u64 > file_bytes {
        return Err(bad(
            "header length",
            format!("{header_len} bytes does not fit a {file_bytes}-byte file (truncated?)"),
        ));
    }
    let mut prefix = vec![0u8; start];
    file.read_exact_at(&mut prefix, 0)
        .map_err(|e| Error::io(path, e))?;
    let header: Header = serde_json::from_slice(&prefix[PREFIX..PREFIX + header_len])
        .map_err(|e| bad("header", format!("not a valid header: {e}")))?;
    if header.hot_rows.len() != header.model.tables.len() {
        return Err(bad(
            "hot_rows",
            format!(
                "{} tables of hot rows for {} model tables",
                header.hot_rows.len(),
                header.model.tables.len()
            ),
        ));
    }
    let mut expect = (start + TRAILER) as u128;
    for (t, (&n, table)) in header.hot_rows.iter().zip(&header.model.tables).enumerate() {
        if n > table.rows {
            return Err(bad(
                &format!("hot_rows[{t}]"),
                format!("{n} hot rows in a table of {} rows", table.rows),
            ));
        }
        expect += u128::from(n) * (4 + u128::from(table.row_bytes));
    }
    if expect != u128::from(file_bytes) {
        return Err(bad(
            "size",
            format!(
                "the file is {file_bytes} bytes but its header describes {expect} (truncated or \
                 extended)"
            ),
        ));
    }
    Ok(Opened {
        file,
        header,
        prefix,
        file_bytes,
    })
}

/// One loaded table: its hot row ids and where their bytes lie in the map.
pub(crate) type TableRows = (Vec<u32>, Range<usize>);

/// Maps the file read-only, populated (one sequential read), checks both
/// checksums ([`read_and_checksum`]) and the ids, and returns per table the
/// ids and where its rows lie in the mapping.
///
/// The rows are served from the mapping: the page cache holds them once,
/// and loading costs what reading the file costs (copying 2 GiB into fresh
/// anonymous memory measured 0.6x of `dd`: half a million page faults and
/// zeroing). Hot files are replaced by rename, never rewritten in place, so
/// a mapped file does not change under the engine.
pub(crate) fn load(path: &Path, opened: &Opened) -> Result<(Arc<Mmap>, Vec<TableRows>)> {
    let header = &opened.header;
    // SAFETY: a read-only private mapping the library never writes; the
    // file is not modified in place while mapped (see above), and every
    // access below is inside `map.len()`, checked against the header.
    // Populated (MAP_POPULATE on Linux): the kernel reads the file in one
    // sequential sweep at map time, measured as fast as `dd`; faulting the
    // pages in by touching them measured half that.
    let map = unsafe { MmapOptions::new().populate().map(&opened.file) }
        .map_err(|e| Error::io(path, e))?;
    if map.len() as u64 != opened.file_bytes {
        return Err(Error::format(
            path,
            "size",
            format!(
                "changed from {} to {} bytes while opening",
                opened.file_bytes,
                map.len()
            ),
        ));
    }
    let _ = map.advise(Advice::Sequential);
    let data = opened.prefix.len()..map.len() - TRAILER;
    let data_crc = read_and_checksum(&map[data.clone()]);
    let trailer = &map[map.len() - TRAILER..];
    let bad = |field: &str, reason: String| Error::format(path, field, reason);
    if &trailer[..8] != TRAILER_MAGIC {
        return Err(bad(
            "trailer",
            "missing end marker (truncated?)".to_string(),
        ));
    }
    let stored_prefix = u32::from_le_bytes(trailer[8..12].try_into().expect("4 bytes"));
    let stored_data = u32::from_le_bytes(trailer[12..16].try_into().expect("4 bytes"));
    let prefix_crc = crc32fast::hash(&opened.prefix);
    if stored_prefix != prefix_crc {
        return Err(bad(
            "header checksum",
            format!("stored {stored_prefix:08x}, computed {prefix_crc:08x} (corrupted)"),
        ));
    }
    if stored_data != data_crc {
        return Err(bad(
            "data checksum",
            format!("stored {stored_data:08x}, computed {data_crc:08x} (corrupted)"),
        ));
    }
    let mut tables = Vec::with_capacity(header.hot_rows.len());
    let mut at = data.start;
    for (t, (&n, table)) in header.hot_rows.iter().zip(&header.model.tables).enumerate() {
        // Sizes were checked against the file's length in `open`.
        let id_end = at + n as usize * 4;
        let ids: Vec<u32> = map[at..id_end]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        check_ids(path, t, &ids, table.rows)?;
        let rows_end = id_end + n as usize * table.row_bytes as usize;
        tables.push((ids, id_end..rows_end));
        at = rows_end;
    }
    Ok((Arc::new(map), tables))
}

/// Row ids must be strictly increasing (sorted, no repeats) and inside the
/// table: lookups binary-search them.
fn check_ids(path: &Path, table: usize, ids: &[u32], table_rows: u64) -> Result<()> {
    if let Some(i) = ids.windows(2).position(|w| w[0] >= w[1]) {
        return Err(Error::format(
            path,
            format!("table {table} row ids"),
            format!(
                "not increasing at index {} ({} then {})",
                i + 1,
                ids[i],
                ids[i + 1]
            ),
        ));
    }
    if let Some(&last) = ids.last() {
        if u64::from(last) >= table_rows {
            return Err(Error::format(
                path,
                format!("table {table} row ids"),
                format!("row {last} is outside the table's {table_rows} rows"),
            ));
        }
    }
    Ok(())
}

/// CRC-32 of `data`, computed by a few threads over interleaved chunks
/// (chunk `i` on thread `i % n`, so together they sweep the file front to
/// back where the pages still have to be read in), the chunk CRCs
/// combined in order.
fn read_and_checksum(data: &[u8]) -> u32 {
    let threads = std::thread::available_parallelism()
        .map_or(2, std::num::NonZero::get)
        .clamp(2, 8);
    let chunks: Vec<&[u8]> = data.chunks(LOAD_CHUNK).collect();
    let mut crcs: Vec<(usize, u32)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let chunks = &chunks;
                scope.spawn(move || {
                    (k..chunks.len())
                        .step_by(threads)
                        .map(|i| (i, crc32fast::hash(chunks[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    crcs.sort_unstable_by_key(|&(i, _)| i);
    let mut total = crc32fast::Hasher::new();
    for (i, crc) in crcs {
        total.combine(&crc32fast::Hasher::new_with_initial_len(
            crc,
            chunks[i].len() as u64,
        ));
    }
    total.finalize()
}
