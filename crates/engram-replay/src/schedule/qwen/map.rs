//! One table mapped into memory as the mmap-based Qwen4-Exp runtimes map
//! it, and the three things they do with the mapping: the faulting gather
//! (llama.cpp's CPU `get_rows`, oMLX's numpy fancy index, ds4's demand
//! paging), `MADV_WILLNEED` over a batch's sorted, deduplicated row pages
//! (the llama.cpp readahead fork), and oMLX's pre-fault of merged page spans
//! by a pool of `pread` workers.
//!
//! Caveat of mmap itself (as the engine's `mmap` backend says): a file
//! truncated under the mapping raises SIGBUS on access. Spans past the end
//! of a file at open time are refused.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

use engram::io::PAGE;
use engram::model::TableLocation;
use engram::{Error, Result};
use memmap2::{Advice, Mmap};

use super::super::ds4::pool::ApplyPool;

/// Largest single `pread` of oMLX's pre-fault (1 MiB pieces).
pub(super) const PREFAULT_PIECE: u64 = 1 << 20;

/// How the mapping is advised when it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MapAdvice {
    /// `MADV_RANDOM` over the table's byte ranges (no fault-around).
    Random,
    /// No advice: the kernel's default readahead around each fault.
    Normal,
}

/// One stored array of one shard, in the mapping.
#[derive(Debug, Clone, Copy)]
struct MappedPart {
    /// Index into the table's maps.
    map: usize,
    /// Byte offset of the shard's first row.
    offset: u64,
    /// Bytes per row.
    bytes: usize,
}

#[derive(Debug, Clone)]
struct MappedShard {
    first_row: u64,
    rows: u64,
    parts: Vec<MappedPart>,
}

/// One table's files, mapped read-only.
pub(super) struct MappedTable {
    index: usize,
    paths: Vec<PathBuf>,
    files: Vec<File>,
    maps: Vec<Mmap>,
    shards: Vec<MappedShard>,
    rows: u64,
    width: usize,
    parts: usize,
}

/// What one pre-fault issued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Prefaulted {
    /// `pread` calls.
    pub reads: u64,
    /// Bytes they read.
    pub bytes: u64,
}

impl MappedTable {
    /// Maps every file of table `index` (`loc`), advised as `advice` says.
    pub(super) fn open(
        index: usize,
        loc: &TableLocation,
        advice: MapAdvice,
    ) -> Result<MappedTable> {
        let paths: Vec<PathBuf> = loc.files().into_iter().map(PathBuf::from).collect();
        let mut files = Vec::with_capacity(paths.len());
        let mut maps = Vec::with_capacity(paths.len());
        for path in &paths {
            let file = File::open(path).map_err(|e| Error::io(path, e))?;
            // SAFETY: read-only mapping; a truncation under it faults
            // (SIGBUS), the hazard the module documents.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
            files.push(file);
            maps.push(map);
        }
        let mut shards = Vec::with_capacity(loc.shards.len());
        for shard in &loc.shards {
            let mut parts = Vec::with_capacity(shard.parts.len());
            for part in &shard.parts {
                let map = paths.iter().position(|p| *p == part.file).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "table {index}: {} is not among its files",
                        part.file.display()
                    ))
                })?;
                let bytes = part.bytes_per_row as usize;
                let end = part.offset + shard.rows * bytes as u64;
                if end > maps[map].len() as u64 {
                    return Err(Error::format(
                        &part.file,
                        format!("table {index} rows"),
                        format!(
                            "rows {}..{} end at byte {end}, past the file's {} bytes",
                            shard.first_row,
                            shard.first_row + shard.rows,
                            maps[map].len()
                        ),
                    ));
                }
                if advice == MapAdvice::Random && shard.rows > 0 {
                    let len = (end - part.offset) as usize;
                    maps[map]
                        .advise_range(Advice::Random, part.offset as usize, len)
                        .map_err(|e| Error::io(&part.file, e))?;
                }
                parts.push(MappedPart {
                    map,
                    offset: part.offset,
                    bytes,
                });
            }
            shards.push(MappedShard {
                first_row: shard.first_row,
                rows: shard.rows,
                parts,
            });
        }
        let parts = shards.first().map_or(1, |s| s.parts.len());
        Ok(MappedTable {
            index,
            paths,
            files,
            maps,
            shards,
            rows: loc.rows,
            width: loc.full_row_bytes(),
            parts,
        })
    }

    /// Stored arrays per row (three for MLX 4-bit).
    pub(super) fn parts(&self) -> usize {
        self.parts
    }

    /// The shard holding `row`, or an error naming the table and row.
    fn shard(&self, row: u32) -> Result<&MappedShard> {
        let row = u64::from(row);
        let at = self.shards.partition_point(|s| s.first_row <= row);
        at.checked_sub(1)
            .map(|i| &self.shards[i])
            .filter(|s| row < s.first_row + s.rows)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "row {row} is outside table {} (0..{})",
                    self.index, self.rows
                ))
            })
    }

    /// Where part `part` of `row` is: map index, byte offset, length.
    fn locate(&self, row: u32, part: usize) -> Result<(usize, usize, usize)> {
        let shard = self.shard(row)?;
        let p = shard.parts[part];
        let offset = p.offset + (u64::from(row) - shard.first_row) * p.bytes as u64;
        Ok((p.map, offset as usize, p.bytes))
    }

    /// Byte offset of part `part` within a delivered row.
    fn part_start(&self, part: usize) -> usize {
        self.shards
            .first()
            .map_or(0, |s| s.parts[..part].iter().map(|p| p.bytes).sum())
    }

    /// Copies part `part` of each row of `ids` out of the mapping into its
    /// place in `out` (`ids.len() * width()` bytes, row after row): every
    /// page not resident is a synchronous fault on this thread.
    pub(super) fn gather_part(&self, part: usize, ids: &[u32], out: &mut [u8]) -> Result<()> {
        let start = self.part_start(part);
        for (&row, slot) in ids.iter().zip(out.chunks_exact_mut(self.width)) {
            let (map, offset, len) = self.locate(row, part)?;
            slot[start..start + len].copy_from_slice(&self.maps[map][offset..offset + len]);
        }
        Ok(())
    }

    /// [`MappedTable::gather_part`] of every part, row by row.
    pub(super) fn gather(&self, ids: &[u32], out: &mut [u8]) -> Result<()> {
        for (&row, slot) in ids.iter().zip(out.chunks_exact_mut(self.width)) {
            let mut at = 0;
            for part in 0..self.parts {
                let (map, offset, len) = self.locate(row, part)?;
                slot[at..at + len].copy_from_slice(&self.maps[map][offset..offset + len]);
                at += len;
            }
        }
        Ok(())
    }

    /// The pages of `parts` of the rows `ids`, `(map, page)`, sorted and
    /// deduplicated.
    fn pages(&self, ids: &[u32], parts: std::ops::Range<usize>) -> Result<Vec<(usize, u64)>> {
        let mut pages = Vec::with_capacity(ids.len() * parts.len());
        for &row in ids {
            for part in parts.clone() {
                let (map, offset, len) = self.locate(row, part)?;
                let first = offset as u64 / PAGE;
                let last = (offset + len - 1) as u64 / PAGE;
                pages.extend((first..=last).map(|p| (map, p)));
            }
        }
        pages.sort_unstable();
        pages.dedup();
        Ok(pages)
    }

    /// Runs of consecutive pages, `(map, first page, pages)`.
    fn runs(pages: &[(usize, u64)]) -> Vec<(usize, u64, u64)> {
        let mut runs: Vec<(usize, u64, u64)> = Vec::new();
        for &(map, page) in pages {
            match runs.last_mut() {
                Some((m, first, n)) if *m == map && *first + *n == page => *n += 1,
                _ => runs.push((map, page, 1)),
            }
        }
        runs
    }

    /// `MADV_WILLNEED` over the sorted, deduplicated pages of every part of
    /// the rows `ids`, one call per run of consecutive pages; returns the
    /// calls made.
    pub(super) fn willneed(&self, ids: &[u32]) -> Result<u64> {
        let runs = Self::runs(&self.pages(ids, 0..self.parts)?);
        for &(map, first, pages) in &runs {
            let start = (first * PAGE) as usize;
            let len = ((pages * PAGE) as usize).min(self.maps[map].len() - start);
            self.maps[map]
                .advise_range(Advice::WillNeed, start, len)
                .map_err(|e| Error::io(&self.paths[map], e))?;
        }
        Ok(runs.len() as u64)
    }

    /// oMLX's pre-fault of part `part` of the rows `ids`: their pages
    /// sorted, deduplicated and merged into spans, each span `pread` in
    /// pieces of at most [`PREFAULT_PIECE`] bytes by the workers of `pool`
    /// (dynamically claimed), the bytes dropped; returns when all are read.
    pub(super) fn prefault_part(
        &self,
        part: usize,
        ids: &[u32],
        pool: &ApplyPool,
    ) -> Result<Prefaulted> {
        let piece_pages = PREFAULT_PIECE / PAGE;
        let mut pieces = Vec::new();
        for (map, first, pages) in Self::runs(&self.pages(ids, part..part + 1)?) {
            let mut at = 0;
            while at < pages {
                let n = piece_pages.min(pages - at);
                pieces.push((map, (first + at) * PAGE, n * PAGE));
                at += n;
            }
        }
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        let bytes = std::sync::atomic::AtomicU64::new(0);
        pool.apply(pieces.len(), &|i| {
            let (map, offset, len) = pieces[i];
            let mut buf = vec![0u8; len as usize];
            match self.files[map].read_at(&mut buf, offset) {
                Ok(n) => {
                    bytes.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                }
                Err(e) => {
                    let mut slot = failed.lock().unwrap_or_else(|p| p.into_inner());
                    slot.get_or_insert(Error::RowRead {
                        table: self.index,
                        row: u64::from(ids.first().copied().unwrap_or(0)),
                        file: self.paths[map].clone(),
                        offset,
                        source: e,
                    });
                }
            }
        })?;
        if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        Ok(Prefaulted {
            reads: pieces.len() as u64,
            bytes: bytes.into_inner(),
        })
    }
}
