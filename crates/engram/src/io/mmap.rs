//! The lazy-mmap baseline: map the files and copy rows out, so every row
//! that is not resident costs a synchronous page fault on the calling
//! thread. This is how several runtimes read Engram tables today; it is here
//! to be measured against, not to be used.
//!
//! Caveat of mmap itself: a file truncated under a mapping raises SIGBUS on
//! access instead of returning an error, so this backend cannot give the
//! truncation guarantee the pread and io_uring backends give.

use std::time::Instant;

use memmap2::{Advice, Mmap};

use super::batch::{eof_error, BounceBuf, Completed, OpError, Pending, ReadEngine};
use super::files::TableFiles;
use super::plan::{check_ops, ReadOp};
use super::Priority;
use crate::Error;

/// Copies rows out of read-only mappings of the table files.
pub struct MmapEngine {
    maps: Vec<Mmap>,
}

impl MmapEngine {
    /// Maps every file of `files`; with `advise_random`, `MADV_RANDOM`
    /// turns off fault-around read-ahead.
    pub fn new(files: &TableFiles, advise_random: bool) -> crate::Result<MmapEngine> {
        let mut maps = Vec::with_capacity(files.files.len());
        for f in &files.files {
            // SAFETY: the mapping is read-only; a concurrent truncation
            // faults (SIGBUS), documented above as the baseline's hazard.
            let map = unsafe { Mmap::map(f.file.as_ref()) }.map_err(|e| Error::io(&f.path, e))?;
            if advise_random {
                map.advise(Advice::Random)
                    .map_err(|e| Error::io(&f.path, e))?;
            }
            maps.push(map);
        }
        Ok(MmapEngine { maps })
    }
}

impl ReadEngine for MmapEngine {
    fn name(&self) -> &'static str {
        "mmap"
    }

    fn submit(&self, ops: Vec<ReadOp>, mut buf: BounceBuf, _priority: Priority) -> Pending {
        let mut latencies_ns = Vec::with_capacity(ops.len());
        let failure = self
            .copy_out(&ops, buf.as_mut_slice(), &mut latencies_ns)
            .err();
        Pending::ready(Completed {
            buf: Some(buf),
            latencies_ns,
            failure,
        })
    }
}

impl MmapEngine {
    /// Copies every read out of the mappings, faulting pages in on the way.
    fn copy_out(
        &self,
        ops: &[ReadOp],
        buf: &mut [u8],
        latencies_ns: &mut Vec<u64>,
    ) -> Result<(), OpError> {
        check_ops(ops, buf.len()).map_err(|error| OpError { op: 0, error })?;
        for (i, op) in ops.iter().enumerate() {
            let started = Instant::now();
            let map = &self.maps[op.file];
            let start = op.offset as usize;
            // The bytes past `need` (page padding) may lie past the end of
            // the file; copy what the mapping has.
            let end = (start + op.len).min(map.len());
            if start + op.need > end {
                return Err(OpError {
                    op: i,
                    error: eof_error(op, end.saturating_sub(start)),
                });
            }
            buf[op.buf_off..op.buf_off + (end - start)].copy_from_slice(&map[start..end]);
            latencies_ns.push(started.elapsed().as_nanos() as u64);
        }
        Ok(())
    }
}
