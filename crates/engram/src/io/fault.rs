//! A fault-injecting row source for tests (of this crate and of the
//! scheduler): the pread pool over files that fail, return short, stall or
//! get truncated on command.
//!
//! Faults act at the level of single `pread` calls, below the batch logic,
//! so the tests exercise the real continuation, retry and error paths.

use std::fs::OpenOptions;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::batch::BatchSource;
use super::files::{PositionalRead, TableFiles};
use super::psync::PsyncEngine;
use super::{BatchStats, IoConfig, RowRequest, RowSource, TableShape};
use crate::model::TableLocation;
use crate::splitmix::mix;
use crate::{Error, Result};

/// Which faults to inject. Read numbers count every `pread` of the source
/// (all files), from 0.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// Read number that fails with `EIO` (once).
    pub eio_at_read: Option<u64>,
    /// Every read returns at most this many bytes.
    pub short_reads: Option<usize>,
    /// Every `n`th read first fails with `EINTR` (to be retried).
    pub interrupt_every: Option<u64>,
    /// Time added before every read.
    pub latency: Option<Duration>,
    /// At this read number, truncate the file read to this length first.
    pub truncate_at_read: Option<(u64, u64)>,
    /// Reads that overlap this byte range (of any file) fail with `EIO`,
    /// the first `n` of them (`u64::MAX`: all): a bad region of the device,
    /// transient or not.
    pub eio_in_range: Option<(std::ops::Range<u64>, u64)>,
    /// `(seed, n)`: about one read in `n` fails with `EIO`, chosen by a
    /// hash of the seed and the read number (reproducible for one order of
    /// reads).
    pub eio_one_in: Option<(u64, u64)>,
}

/// Shared fault state: the plan and the read counter.
#[derive(Debug)]
struct FaultState {
    plan: FaultPlan,
    reads: AtomicU64,
    eio_fired: AtomicBool,
    /// Reads failed by `eio_in_range` so far.
    range_fired: AtomicU64,
    /// Reads failed by any injected `EIO` so far.
    eio_count: AtomicU64,
}

impl FaultState {
    fn eio(&self) -> io::Result<usize> {
        self.eio_count.fetch_add(1, Ordering::SeqCst);
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// A file that injects the faults of its [`FaultState`].
struct FaultyFile {
    file: Arc<std::fs::File>,
    path: PathBuf,
    state: Arc<FaultState>,
}

impl PositionalRead for FaultyFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let plan = &self.state.plan;
        let n = self.state.reads.fetch_add(1, Ordering::SeqCst);
        if let Some(latency) = plan.latency {
            std::thread::sleep(latency);
        }
        if plan.truncate_at_read.is_some_and(|(at, _)| at == n) {
            let len = plan.truncate_at_read.map_or(0, |(_, len)| len);
            OpenOptions::new()
                .write(true)
                .open(&self.path)?
                .set_len(len)?;
        }
        if plan.eio_at_read == Some(n) && !self.state.eio_fired.swap(true, Ordering::SeqCst) {
            return self.state.eio();
        }
        if let Some((range, times)) = &plan.eio_in_range {
            let end = offset.saturating_add(buf.len() as u64);
            let overlaps = offset < range.end && end > range.start;
            if overlaps && self.state.range_fired.fetch_add(1, Ordering::SeqCst) < *times {
                return self.state.eio();
            }
        }
        if let Some((seed, one_in)) = plan.eio_one_in {
            if one_in > 0 && mix(seed ^ n) % one_in == 0 {
                return self.state.eio();
            }
        }
        if plan
            .interrupt_every
            .is_some_and(|every| every > 0 && n % every == 0)
        {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        let len = plan
            .short_reads
            .map_or(buf.len(), |max| max.max(1).min(buf.len()));
        std::os::unix::fs::FileExt::read_at(self.file.as_ref(), &mut buf[..len], offset)
    }
}

/// The pread-pool row source over fault-injecting files.
pub struct FaultSource {
    inner: BatchSource<PsyncEngine>,
    state: Arc<FaultState>,
}

impl FaultSource {
    /// Opens `tables` with `config` (its backend is ignored: always the
    /// pread pool) and injects the faults of `plan`.
    pub fn open(
        tables: &[TableLocation],
        config: &IoConfig,
        plan: FaultPlan,
    ) -> Result<FaultSource> {
        config.validate()?;
        let files = Arc::new(TableFiles::open(tables, config)?);
        let state = Arc::new(FaultState {
            plan,
            reads: AtomicU64::new(0),
            eio_fired: AtomicBool::new(false),
            range_fired: AtomicU64::new(0),
            eio_count: AtomicU64::new(0),
        });
        let faulty: Vec<Arc<dyn PositionalRead>> = files
            .files
            .iter()
            .map(|f| {
                Arc::new(FaultyFile {
                    file: f.file.clone(),
                    path: f.path.clone(),
                    state: state.clone(),
                }) as Arc<dyn PositionalRead>
            })
            .collect();
        let engine = PsyncEngine::new(faulty, config.depth, files.direct, config.readers, config.read_order)
            .map_err(|e| Error::io("pread pool", e))?;
        Ok(FaultSource {
            inner: BatchSource::new(files, engine, config),
            state,
        })
    }

    /// `pread` calls made so far (including failed and retried ones).
    pub fn reads(&self) -> u64 {
        self.state.reads.load(Ordering::SeqCst)
    }

    /// `EIO` errors injected so far (all kinds).
    pub fn eio_injected(&self) -> u64 {
        self.state.eio_count.load(Ordering::SeqCst)
    }
}

impl RowSource for FaultSource {
    fn name(&self) -> String {
        format!("fault({})", self.inner.name())
    }
    fn shapes(&self) -> &[TableShape] {
        self.inner.shapes()
    }
    fn read(&self, request: RowRequest<'_>, out: &mut [u8]) -> Result<BatchStats> {
        self.inner.read(request, out)
    }
}
