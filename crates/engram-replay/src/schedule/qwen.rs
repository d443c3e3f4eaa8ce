//! The Qwen4-Exp (Qwen3.8-Flash-Next) peers: the read paths the runtimes
//! that serve this family's PLE n-gram table publish, re-implemented from
//! `qwen4exp-peers.md` (the design notes' peer sheet; its section numbers
//! are cited below) so this project's engine is benchmarked against them.
//!
//! Every peer hashes a token's rows on the host (16 per token for the
//! release) and hands the consumer the same rows (the bench's CPU compute
//! gives the same checksum under every schedule). What differs is how and
//! when the rows come off storage:
//!
//! - `llama-lazy` ([`QwenPeer::LlamaLazy`], sheet section 2, llama.cpp
//!   `--lazy-mode on`, PRs #27794/#27837/#27881): the table mapped, its byte
//!   range advised `MADV_RANDOM`, rows copied out of the mapping by the CPU
//!   gather at the table's layer, each row (duplicates too) one synchronous
//!   fault when not resident; per ubatch in prefill, per token in decode.
//! - `llama-readahead` ([`QwenPeer::LlamaReadahead`], section 2, unslothai
//!   llama.cpp PR #137): the same mapping, but before the gather one
//!   `MADV_WILLNEED` per run of the batch's sorted, deduplicated row pages.
//! - `omlx` ([`QwenPeer::Omlx`], section 4, the vendored `language.py`
//!   @85e4f24): in layer 1, per stored array (three for MLX 4-bit: codes,
//!   scales, biases), when a batch has 4 rows or more: the rows' pages
//!   sorted, deduplicated and merged into spans, `pread` in pieces of at
//!   most 1 MiB by a pool of 16 workers and waited for, then the gather from
//!   the `MADV_RANDOM` mapping.
//! - `ds4-qwen` ([`QwenPeer::Ds4Qwen`], section 1, ds4's merged qwen4-exp
//!   engine as `docs/QWEN38_FLASH_NEXT.md` describes it): the sidecar mapped
//!   (no advice named: the kernel's default readahead) and demand-paged;
//!   prefill in 8,192-token chunks, each chunk's rows gathered when its
//!   first ubatch reaches the table; decode's rows gathered at the layer.
//!   The sheet marks the merged engine's reader internals as not verified;
//!   the whole-sidecar prefetch it does when RAM allows is the table in
//!   memory, which a cold run of a table larger than memory rules out.
//! - `ds4-qwen-chunked` ([`QwenPeer::Ds4QwenChunked`]): the design brief's
//!   description of ds4's Qwen n-gram reads, which the peer sheet (sections
//!   1 and 9) says may describe ds4's DeepSeek-V4.1 reader (`ds4_engram.c`)
//!   instead: each 256-token chunk's rows read synchronously, sorted by row
//!   id and deduplicated, one buffered `pread` per row part, by 16 threads
//!   created for the batch when it has 256 unique rows or more (serially
//!   otherwise), before the rows are used; decode's rows read serially
//!   before the step. It reuses the `ds4-linux` read path.
//! - `freetoken` ([`QwenPeer::FreeToken`], section 6, FlashML-org/FreeToken
//!   PR #311): `O_DIRECT` reads through io_uring at depth 64 (the engine's
//!   `uring` backend: duplicates read once, rows sharing a page in one
//!   read), no row cache, on a fill thread: a ubatch's fill is issued when
//!   the forward starts layer 0 on it and waited for at the table's layer;
//!   a decode step's fill is issued at the step's start and waited for at
//!   the layer (the GPU-side flag wait). Linux only: elsewhere building it
//!   is an error.
//!
//! Where this is an approximation:
//! - A synchronous read before layer 0 or at the table's layer costs the
//!   forward thread the same time; the peers that read synchronously do it
//!   at the table's wait.
//! - Under `--sweep layer`, `freetoken`'s fills of later ubatches are issued
//!   during layer 0's pass over the prompt and queue on its fill thread: a
//!   deeper pipeline than its own one-ubatch forward calls (`--sweep chunk`).
//! - The mmap peers' `reads` count the major page faults their gathers took
//!   (`getrusage`), plus `omlx`'s and `ds4-qwen-chunked`'s explicit reads;
//!   `bytes_read` counts only explicit reads.

mod fill;
mod map;

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::codec::Encoding;
use engram::hash::{Hasher, History};
use engram::layout::Family;
use engram::{Error, Result};

use super::ds4::pool::ApplyPool;
use super::ds4::read::{Counters, Fetched, PeerFiles};
use super::ds4::Ds4Flavor;
use super::{IoCounters, PrefillRun, Schedule, ScheduleSetup};
use fill::Filler;
use map::{MapAdvice, MappedTable};

/// Rows a batch needs before oMLX pre-faults it (`>= 4 rows`).
pub const OMLX_PREFAULT_MIN_ROWS: usize = 4;

/// Workers of oMLX's pre-fault pool (`OMLX_QWEN4_PLE_PREFAULT_WORKERS`).
pub const OMLX_PREFAULT_WORKERS: usize = 16;

/// Tokens per ds4 prefill chunk (`DS4_QWEN4_PREFILL_CHUNK` default).
pub const DS4_QWEN_PREFILL_CHUNK: u32 = 8192;

/// Tokens per chunk of the design brief's ds4 reader.
pub const DS4_QWEN_CHUNKED_TOKENS: u32 = 256;

/// FreeToken's io_uring queue depth.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const FREETOKEN_DEPTH: usize = 64;

/// Which Qwen4-Exp peer a [`QwenSchedule`] replays (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QwenPeer {
    /// llama.cpp `--lazy-mode on`: MADV_RANDOM mapping, faulting gather.
    LlamaLazy,
    /// The readahead fork: WILLNEED over the batch's pages, then the gather.
    LlamaReadahead,
    /// oMLX: 16-worker pread pre-fault of merged spans, then the gather.
    Omlx,
    /// ds4's merged engine: demand-paged mapping, 8,192-token chunks.
    Ds4Qwen,
    /// The design brief's ds4 reader: 256-token chunks, sorted, 16 readers.
    Ds4QwenChunked,
    /// FreeToken: O_DIRECT io_uring at depth 64 on a fill thread.
    FreeToken,
}

impl QwenPeer {
    /// The schedule's name (`llama-lazy`, ..).
    pub fn name(self) -> &'static str {
        match self {
            QwenPeer::LlamaLazy => "llama-lazy",
            QwenPeer::LlamaReadahead => "llama-readahead",
            QwenPeer::Omlx => "omlx",
            QwenPeer::Ds4Qwen => "ds4-qwen",
            QwenPeer::Ds4QwenChunked => "ds4-qwen-chunked",
            QwenPeer::FreeToken => "freetoken",
        }
    }

    /// The runtime this peer stands for, for reports and the demo.
    pub fn runtime(self) -> &'static str {
        match self {
            QwenPeer::LlamaLazy => "llama.cpp --lazy-mode on (mmap + MADV_RANDOM, faulting get_rows)",
            QwenPeer::LlamaReadahead => {
                "llama.cpp batched-readahead fork (MADV_WILLNEED over the ubatch's pages)"
            }
            QwenPeer::Omlx => "oMLX (16-worker pread pre-fault of merged page spans in layer 1)",
            QwenPeer::Ds4Qwen => "ds4 merged qwen4-exp engine (demand-paged sidecar, 8192-token chunks)",
            QwenPeer::Ds4QwenChunked => {
                "the design brief's ds4 reader (256-token chunks, sorted, 16 readers; may be ds4's V4.1 reader)"
            }
            QwenPeer::FreeToken => "FreeToken --ple-backend disk (O_DIRECT io_uring QD64, filled during layer 0)",
        }
    }
}

/// How a peer gets rows off storage.
enum Reader {
    /// The mmap peers.
    Mapped {
        tables: Vec<MappedTable>,
        /// oMLX's pre-fault workers.
        pool: Option<ApplyPool>,
    },
    /// The brief's ds4 reader (the `ds4-linux` read path).
    Pread { files: PeerFiles, fetched: Fetched },
    /// FreeToken's fill thread.
    Fill(Filler),
}

/// One run of a Qwen4-Exp peer: a prefill, then decode steps.
pub struct QwenSchedule {
    peer: QwenPeer,
    hasher: Hasher,
    history: History,
    columns: usize,
    tables: usize,
    encodings: Vec<Encoding>,
    widths: Vec<usize>,
    ubatch: u32,
    reader: Reader,
    io: Arc<Counters>,
    /// Never set: reads run to completion.
    stop: AtomicBool,
    step: Step,
}

/// The current decode step.
#[derive(Default)]
struct Step {
    /// Row ids, `[table][column]`; empty before the first step.
    ids: Vec<u32>,
    /// Rows per table (read at `step_begin` by the peers that read there).
    raw: Vec<Vec<u8>>,
    /// Whether `raw[table]` holds this step's rows.
    ready: Vec<bool>,
    /// FreeToken's issued fills.
    pending: Vec<Option<Receiver<fill::Filled>>>,
}

fn major_faults() -> u64 {
    // SAFETY: getrusage writes the struct it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0 {
            usage.ru_majflt as u64
        } else {
            0
        }
    }
}

impl QwenSchedule {
    /// A fresh run of `peer` over `setup`'s model, which must be a
    /// Qwen4-Exp one.
    pub fn new(setup: &ScheduleSetup<'_>, peer: QwenPeer) -> Result<QwenSchedule> {
        let model = setup.model;
        super::check_family(model, Family::Qwen4ExpPle, peer.name())?;
        let hasher = Hasher::new(&model.layout)?;
        let reader = match peer {
            QwenPeer::LlamaLazy | QwenPeer::LlamaReadahead | QwenPeer::Omlx | QwenPeer::Ds4Qwen => {
                let advice = match peer {
                    QwenPeer::Ds4Qwen => MapAdvice::Normal,
                    _ => MapAdvice::Random,
                };
                let tables = (model.tables.iter().enumerate())
                    .map(|(i, loc)| MappedTable::open(i, loc, advice))
                    .collect::<Result<Vec<_>>>()?;
                let pool = match peer {
                    QwenPeer::Omlx => Some(ApplyPool::new(OMLX_PREFAULT_WORKERS)?),
                    _ => None,
                };
                Reader::Mapped { tables, pool }
            }
            QwenPeer::Ds4QwenChunked => Reader::Pread {
                files: PeerFiles::open(model, Ds4Flavor::Linux)?,
                fetched: Fetched::default(),
            },
            QwenPeer::FreeToken => Reader::Fill(Filler::start(freetoken_source(setup)?)?),
        };
        let tables = model.tables.len();
        Ok(QwenSchedule {
            peer,
            history: hasher.new_history(),
            columns: hasher.columns(),
            hasher,
            tables,
            encodings: model.tables.iter().map(|t| t.encoding).collect(),
            widths: model.tables.iter().map(|t| t.full_row_bytes()).collect(),
            ubatch: u32::try_from(setup.ubatch.max(1)).unwrap_or(u32::MAX),
            reader,
            io: Arc::new(Counters::default()),
            stop: AtomicBool::new(false),
            step: Step {
                raw: vec![Vec::new(); tables],
                ready: vec![false; tables],
                pending: (0..tables).map(|_| None).collect(),
                ids: Vec::new(),
            },
        })
    }

    /// Reads the rows `ids` of `table` synchronously on this thread, the
    /// peer's way, into `out` (request order).
    fn read_now(&mut self, table: usize, ids: &[u32], out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        out.resize(ids.len() * self.widths[table], 0);
        match &mut self.reader {
            Reader::Mapped { tables, pool } => {
                let t = &tables[table];
                let faults = major_faults();
                let (mut reads, mut bytes, mut unique) = (0, 0, ids.len() as u64);
                match self.peer {
                    QwenPeer::LlamaReadahead => {
                        t.willneed(ids)?;
                        unique = distinct(ids);
                        t.gather(ids, out)?;
                    }
                    QwenPeer::Omlx => {
                        let prefault = ids.len() >= OMLX_PREFAULT_MIN_ROWS;
                        if prefault {
                            unique = distinct(ids);
                        }
                        // Per stored array: pre-fault, then its gather.
                        for part in 0..t.parts() {
                            if let (true, Some(pool)) = (prefault, pool.as_ref()) {
                                let done = t.prefault_part(part, ids, pool)?;
                                reads += done.reads;
                                bytes += done.bytes;
                            }
                            t.gather_part(part, ids, out)?;
                        }
                    }
                    _ => t.gather(ids, out)?,
                }
                reads += major_faults().saturating_sub(faults);
                self.io.add(ids.len() as u64, unique, reads, bytes);
                Ok(())
            }
            Reader::Pread { files, fetched } => {
                fetched.fetch(files, table, ids, &self.stop, &self.io)?;
                fetched.scatter(ids, out);
                Ok(())
            }
            Reader::Fill(filler) => {
                let done = filler.issue(table, ids.to_vec());
                let (rows, stats) = fill::collect(&done)?;
                *out = rows;
                self.count(&stats);
                Ok(())
            }
        }
    }

    fn count(&self, stats: &engram::io::BatchStats) {
        self.io.add(
            stats.rows_requested,
            stats.rows_unique,
            stats.reads_issued,
            stats.bytes_read,
        );
    }

    /// The current step's rows of `table`.
    fn step_ids(&self, table: usize) -> &[u32] {
        &self.step.ids[table * self.columns..(table + 1) * self.columns]
    }

    fn check_table(&self, table: usize) -> Result<()> {
        if table >= self.tables {
            return Err(Error::InvalidArgument(format!(
                "table {table} out of range (the model has {})",
                self.tables
            )));
        }
        Ok(())
    }
}

/// Distinct values of `ids`.
fn distinct(ids: &[u32]) -> u64 {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    sorted.len() as u64
}

/// FreeToken's source: the engine's io_uring backend, `O_DIRECT`, depth 64.
#[cfg(target_os = "linux")]
fn freetoken_source(setup: &ScheduleSetup<'_>) -> Result<Arc<dyn engram::io::RowSource>> {
    let io = engram::io::IoConfig::default()
        .with_backend(engram::io::Backend::Uring)
        .with_direct(true)
        .with_depth(FREETOKEN_DEPTH)
        .with_readers(setup.io.readers);
    Ok(engram::io::open_source(&setup.model.tables, &io)?.source)
}

/// FreeToken reads with io_uring and `O_DIRECT`, which this OS lacks.
#[cfg(not(target_os = "linux"))]
fn freetoken_source(_setup: &ScheduleSetup<'_>) -> Result<Arc<dyn engram::io::RowSource>> {
    Err(Error::InvalidArgument(
        "the freetoken schedule reads with O_DIRECT io_uring, which is not on this OS (Linux only)"
            .into(),
    ))
}

/// Decodes `raw` rows of `encoding` into `rows` (f32) if asked.
fn hand_out(
    encoding: Encoding,
    table: usize,
    ids: &[u32],
    raw: &[u8],
    rows: Option<&mut Vec<f32>>,
) -> Result<()> {
    if let Some(rows) = rows {
        rows.clear();
        rows.resize(ids.len() * encoding.values(), 0.0);
        encoding
            .decode_rows(raw, rows)
            .map_err(|e| e.into_error_at(table, ids))?;
    }
    Ok(())
}

impl Schedule for QwenSchedule {
    fn name(&self) -> &'static str {
        self.peer.name()
    }

    fn prefill<'a>(&'a mut self, tokens: &[u32]) -> Result<Box<dyn PrefillRun + 'a>> {
        let (count, ids) = super::prompt_ids(&self.hasher, &mut self.history, tokens)?;
        // Per table, the prompt's ids in token order.
        let per_token = self.tables * self.columns;
        let table_ids = (0..self.tables)
            .map(|t| {
                ids.chunks_exact(per_token)
                    .flat_map(|tok| &tok[t * self.columns..(t + 1) * self.columns])
                    .copied()
                    .collect()
            })
            .collect();
        let tables = self.tables;
        Ok(Box::new(QwenPrefill {
            schedule: self,
            tokens: count,
            ids: table_ids,
            staged: (0..tables).map(|_| Staged::default()).collect(),
            issued: 0,
            fills: VecDeque::new(),
        }))
    }

    fn step_begin(&mut self, token: u32, stall: &mut [Duration]) -> Result<()> {
        self.step.ids.clear();
        self.step.ready.iter_mut().for_each(|r| *r = false);
        self.step.pending.iter_mut().for_each(|p| *p = None);
        let mut ids = Vec::new();
        self.hasher
            .hash(&mut self.history, &[token], None, &mut ids)?;
        self.step.ids = ids;
        for table in 0..self.tables {
            match (&self.reader, self.peer) {
                (Reader::Fill(filler), _) => {
                    let ids = self.step_ids(table).to_vec();
                    self.step.pending[table] = Some(filler.issue(table, ids));
                }
                (_, QwenPeer::Ds4QwenChunked) => {
                    // Read before the step: the step cannot start meanwhile.
                    let started = Instant::now();
                    let ids = self.step_ids(table).to_vec();
                    let mut raw = std::mem::take(&mut self.step.raw[table]);
                    let read = self.read_now(table, &ids, &mut raw);
                    self.step.raw[table] = raw;
                    if let Some(slot) = stall.get_mut(table) {
                        *slot += started.elapsed();
                    }
                    if let Err(e) = read {
                        self.step.ids.clear();
                        return Err(e);
                    }
                    self.step.ready[table] = true;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn step_wait(&mut self, table: usize, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        self.check_table(table)?;
        if self.step.ids.is_empty() {
            return Err(Error::InvalidArgument(
                "step_wait without a step: call step_begin first".into(),
            ));
        }
        let started = Instant::now();
        if let Some(done) = self.step.pending[table].take() {
            let (raw, stats) = fill::collect(&done)?;
            self.count(&stats);
            self.step.raw[table] = raw;
        } else if !self.step.ready[table] {
            let ids = self.step_ids(table).to_vec();
            let mut raw = std::mem::take(&mut self.step.raw[table]);
            let read = self.read_now(table, &ids, &mut raw);
            self.step.raw[table] = raw;
            read?;
        }
        self.step.ready[table] = true;
        let stall = started.elapsed();
        hand_out(
            self.encodings[table],
            table,
            self.step_ids(table),
            &self.step.raw[table],
            rows,
        )?;
        Ok(stall)
    }

    fn hint(&mut self, _hints: &engram::Hints<'_>) -> Result<()> {
        Ok(())
    }

    fn io(&mut self) -> IoCounters {
        self.io.snapshot()
    }
}

/// One table's rows read so far and not yet handed out.
#[derive(Default)]
struct Staged {
    /// First token of `raw`.
    from: u32,
    /// Tokens in `raw`.
    len: u32,
    raw: Vec<u8>,
    /// Tokens handed out (`0..handed`).
    handed: u32,
}

/// A FreeToken fill in flight: table, tokens `from..to`.
struct Fill {
    table: usize,
    from: u32,
    to: u32,
    done: Receiver<fill::Filled>,
}

/// A running prefill of a Qwen peer.
struct QwenPrefill<'a> {
    schedule: &'a mut QwenSchedule,
    tokens: u32,
    /// `ids[table]`: the prompt's row ids of the table, `[token][column]`.
    ids: Vec<Vec<u32>>,
    staged: Vec<Staged>,
    /// FreeToken: tokens `0..issued` have fills issued.
    issued: u32,
    fills: VecDeque<Fill>,
}

impl QwenPrefill<'_> {
    fn token_ids(&self, table: usize, from: u32, to: u32) -> &[u32] {
        let c = self.schedule.columns;
        &self.ids[table][from as usize * c..to as usize * c]
    }

    /// Appends `raw` (tokens `from..to` of `table`) to the table's staged rows.
    fn stage(&mut self, table: usize, from: u32, to: u32, raw: &[u8]) -> Result<()> {
        let s = &mut self.staged[table];
        if from != s.from + s.len {
            return Err(Error::InvalidArgument(format!(
                "table {table}: rows of tokens {from}..{to} arrived after tokens up to {}",
                s.from + s.len
            )));
        }
        s.raw.extend_from_slice(raw);
        s.len += to - from;
        Ok(())
    }

    /// Reads, the peer's way, until tokens `..upto` of `table` are staged.
    fn read_until(&mut self, table: usize, upto: u32) -> Result<()> {
        let mut raw = Vec::new();
        loop {
            let s = &self.staged[table];
            let have = s.from + s.len;
            if have >= upto {
                return Ok(());
            }
            let end = match self.schedule.peer {
                QwenPeer::Ds4Qwen => round_up(have + 1, DS4_QWEN_PREFILL_CHUNK),
                QwenPeer::Ds4QwenChunked => round_up(have + 1, DS4_QWEN_CHUNKED_TOKENS),
                QwenPeer::FreeToken => {
                    if let Some(fill) = self.fills.iter().position(|f| f.table == table) {
                        let fill = self.fills.remove(fill).expect("found above");
                        let (rows, stats) = fill::collect(&fill.done)?;
                        self.schedule.count(&stats);
                        self.stage(table, fill.from, fill.to, &rows)?;
                        continue;
                    }
                    upto
                }
                _ => upto,
            }
            .min(self.tokens);
            let ids = self.token_ids(table, have, end).to_vec();
            self.schedule.read_now(table, &ids, &mut raw)?;
            self.stage(table, have, end, &raw)?;
            // A fill issued later starts after what was read here.
            self.issued = self.issued.max(end);
        }
    }
}

fn round_up(value: u32, multiple: u32) -> u32 {
    value.div_ceil(multiple).saturating_mul(multiple)
}

impl PrefillRun for QwenPrefill<'_> {
    fn layer_start(&mut self, layer: u32, start: u32) -> Result<()> {
        if layer != 0 || !matches!(self.schedule.reader, Reader::Fill(_)) || start < self.issued {
            return Ok(());
        }
        let end = start.saturating_add(self.schedule.ubatch).min(self.tokens);
        for table in 0..self.schedule.tables {
            let ids = self.token_ids(table, start, end).to_vec();
            if let Reader::Fill(filler) = &self.schedule.reader {
                let done = filler.issue(table, ids);
                self.fills.push_back(Fill {
                    table,
                    from: start,
                    to: end,
                    done,
                });
            }
        }
        self.issued = end;
        Ok(())
    }

    fn wait(&mut self, table: usize, upto: u32, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
        self.schedule.check_table(table)?;
        let upto = upto.min(self.tokens);
        let from = self.staged[table].handed;
        if upto < from {
            return Err(Error::InvalidArgument(format!(
                "wait on table {table} up to token {upto}, after tokens up to {from} were handed out"
            )));
        }
        let started = Instant::now();
        self.read_until(table, upto)?;
        let stall = started.elapsed();
        let columns = self.schedule.columns;
        // Bytes of one token's rows.
        let width = self.schedule.widths[table] * columns;
        let encoding = self.schedule.encodings[table];
        let s = &mut self.staged[table];
        let at = (from - s.from) as usize * width;
        let end = (upto - s.from) as usize * width;
        let ids = &self.ids[table][from as usize * columns..upto as usize * columns];
        hand_out(encoding, table, ids, &s.raw[at..end], rows)?;
        // Handed-out rows are not needed again.
        s.raw.drain(..end);
        s.len -= upto - s.from;
        s.from = upto;
        s.handed = upto;
        Ok(stall)
    }
}
