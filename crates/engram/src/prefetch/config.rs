//! Scheduler options (set by name, and from the environment, through
//! `crate::open::EngineBuilder`).

use crate::io::threads::ReaderSched;
use crate::{Error, Result};

/// Default `PrefetchConfig::reuse_bytes`: with the default ring it holds
/// the distinct rows of an 8K-token prompt's tokens past the ring (about a
/// third of their rows on the corpus), so a layer sweep reads the whole of
/// table 1 before its layer, and it is full there already, so longer
/// prompts hold no more (docs/bench.md, "Memory by need").
const DEFAULT_REUSE_BYTES: u64 = 16 << 20;

/// The order a runtime's prefill goes through the Engram tables, which
/// decides the order the readers fetch batches in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillOrder {
    /// Learned from the waits (default): the lower table first, since its
    /// layer comes first, until a consumer shows by waiting that it needs
    /// another table soon. Right for a layer sweep (every chunk through a
    /// layer before the next layer), where table 1 is needed only after all
    /// of table 0; in a chunk sweep it costs table 1's first wait, which
    /// sits behind table 0's later batches.
    #[default]
    Auto,
    /// The runtime sends each chunk through all layers before the next
    /// (a llama.cpp-style ubatch loop): batches are read in the order that
    /// consumer needs them, chunk by chunk (the span of its first wait) and
    /// within a chunk table by table.
    Chunk,
}

impl PrefillOrder {
    /// `auto` or `chunk`; `None` for anything else.
    pub fn parse(name: &str) -> Option<PrefillOrder> {
        match name.trim() {
            "auto" => Some(PrefillOrder::Auto),
            "chunk" => Some(PrefillOrder::Chunk),
            _ => None,
        }
    }

    /// The name [`PrefillOrder::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            PrefillOrder::Auto => "auto",
            PrefillOrder::Chunk => "chunk",
        }
    }
}

/// How rows are handed to the consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowFormat {
    /// The bytes as stored (`row_bytes` per row).
    #[default]
    Raw,
    /// Decoded to f32 (the encoding's values per row; DeepSeek encodings
    /// rounded to BF16, the others exact), by the
    /// reader threads, so the consumer gets values ready to use. Needs the
    /// tables' encodings ([`super::Engine::for_model`]).
    F32,
}

impl RowFormat {
    /// `raw` or `f32` (also `float32`); `None` for anything else.
    pub fn parse(name: &str) -> Option<RowFormat> {
        match name.trim() {
            "raw" => Some(RowFormat::Raw),
            "f32" | "float32" => Some(RowFormat::F32),
            _ => None,
        }
    }

    /// The name [`RowFormat::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            RowFormat::Raw => "raw",
            RowFormat::F32 => "f32",
        }
    }
}

/// Options of a prefetch [`super::Engine`]: `PrefetchConfig::default()` and
/// the `with_*` setters (non-exhaustive, so a new option is not a breaking
/// change).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrefetchConfig {
    /// Ring chunk size in tokens (default 1,024): the ring of a table holds
    /// `ring_chunks` of them. Also how far ahead of its consumer a table's
    /// reader must be before another table goes first, and the batch size
    /// before the consumer first reaches a table.
    pub chunk_tokens: u32,
    /// Tokens in the first read batch, smaller so the first consumer starts
    /// early (default 128).
    pub first_chunk_tokens: u32,
    /// Tokens per later read batch; batches end at multiples of it and each
    /// is published when read (default 256).
    pub read_batch_tokens: u32,
    /// Read batches of one prefill in flight at once (default 2): one per
    /// table while several tables have ring batches to schedule, else
    /// consecutive batches of one table. The most urgent goes to the device
    /// first; the others are read with the depth it leaves free
    /// ([`crate::io::Priority::PrefillLater`]), so the device's queue stays
    /// full between batches and a second table's ring fills while the
    /// consumer is blocked on the first.
    pub prefill_batches_in_flight: usize,
    /// The order the runtime's prefill consumes the tables in
    /// (ENGRAM_PREFILL_ORDER=auto or chunk; default [`PrefillOrder::Auto`]).
    pub prefill_order: PrefillOrder,
    /// Ring capacity per table, in chunks: prefill row memory per table is
    /// at most `ring_chunks * chunk_tokens * rows_per_token * row_bytes`
    /// (default 2 chunks of 1,024 tokens: 12.4 MiB of 264-byte rows per
    /// table), whatever the prompt length; one wait covers at most that
    /// many tokens. The ring is a zeroed allocation whose pages become
    /// resident as the readers first write them, and a prompt shorter than
    /// the ring gets a ring of its length. Reading further ahead than the
    /// ring goes to the reuse store, which holds each distinct row once
    /// (the ring holds every occurrence).
    pub ring_chunks: u32,
    /// Bytes per table of a prefill's reuse store: rows already read that a
    /// later token of the same prompt needs again are kept (Belady eviction
    /// by next use) and not read twice; while the ring is full, rows of
    /// tokens past it are read ahead into the free part of the store.
    /// Grows with the rows it holds, up to this budget, whatever the prompt
    /// length. Rows are kept as stored, also for a table delivered as f32
    /// (decoded as they are copied into the ring), so the budget holds as
    /// many rows whatever the delivered format. 0 turns whole-prompt dedup
    /// off (default 16 MiB).
    pub reuse_bytes: u64,
    /// `false` (ENGRAM_WARM=0): once a table's ring and reuse store are full,
    /// its readers stop until the consumer frees ring room. `true`
    /// (default): they go on bringing the prompt's later rows into the page
    /// cache (the file sources advise the kernel to read their pages), so
    /// the rows are there when the ring reads them (a long prompt's layer
    /// sweep: table 1's rows come in while the consumer is still on the
    /// earlier layers, without being held in process memory). Set it off
    /// with direct I/O (no page cache to warm; `EngineBuilder` does) or
    /// where page cache is scarce.
    pub warm_page_cache: bool,
    /// Prompts shorter than this are read synchronously at the wait, as the
    /// peers do (default 1,024).
    pub overlap_threshold: u32,
    /// `false` (ENGRAM_PREFETCH=0): no prefetch; rows are read at the wait,
    /// on the consumer's thread, in prefill and in decode.
    pub prefetch: bool,
    /// `false` (ENGRAM_PIPELINE=0): a prefill reads each table in one batch
    /// and a wait blocks for the whole table, not per chunk. The ring then
    /// holds the whole prompt, as the peers' buffer does.
    pub pipeline: bool,
    /// `false` (ENGRAM_BATCH=0): rows are read one at a time, one request
    /// per row, instead of in batches.
    pub batch: bool,
    /// Row format handed to the consumer.
    pub format: RowFormat,
    /// Pool threads serving prefill chunks (default 4). Hints get threads
    /// of their own, as many as these and at most two, in a scheduling
    /// class whose wake-up does not take the caller's core.
    pub workers: usize,
    /// Pool threads serving only decode steps, so a step never queues behind
    /// a prefill chunk (default 2: one per table).
    pub decode_workers: usize,
    /// Issue prompt-lookup hints after each decode step (default off).
    pub lookup_hints: bool,
    /// Longest suffix n-gram the prompt-lookup predictor matches (default 3).
    pub lookup_max_ngram: usize,
    /// Tokens the predictor proposes per step (default 2).
    pub lookup_tokens: usize,
    /// Hint batches queued at most; older ones are dropped (default 64).
    pub max_queued_hints: usize,
    /// Scheduling class of the pool's threads but its hint threads, which
    /// take one whose wake-up does not preempt (ENGRAM_READERS=batch,
    /// normal, raised or realtime; default normal). `EngineBuilder` gives
    /// the source's threads this class too; an embedder opening the source
    /// itself gives its `IoConfig::readers` the same value.
    pub readers: ReaderSched,
}

impl Default for PrefetchConfig {
    fn default() -> Self {
        PrefetchConfig {
            chunk_tokens: 1024,
            first_chunk_tokens: 128,
            read_batch_tokens: 256,
            prefill_batches_in_flight: 2,
            prefill_order: PrefillOrder::Auto,
            ring_chunks: 2,
            reuse_bytes: DEFAULT_REUSE_BYTES,
            warm_page_cache: true,
            overlap_threshold: 1024,
            prefetch: true,
            pipeline: true,
            batch: true,
            format: RowFormat::Raw,
            workers: 4,
            decode_workers: 2,
            lookup_hints: false,
            lookup_max_ngram: 3,
            lookup_tokens: 2,
            max_queued_hints: 64,
            readers: ReaderSched::default(),
        }
    }
}

// Setters, one per field: the struct is `#[non_exhaustive]`, so other
// crates start from `PrefetchConfig::default()` and chain these.
impl PrefetchConfig {
    /// Returns the config with [`PrefetchConfig::chunk_tokens`] set to `chunk_tokens`.
    #[must_use]
    pub fn with_chunk_tokens(mut self, chunk_tokens: u32) -> Self {
        self.chunk_tokens = chunk_tokens;
        self
    }

    /// Returns the config with [`PrefetchConfig::first_chunk_tokens`] set to `first_chunk_tokens`.
    #[must_use]
    pub fn with_first_chunk_tokens(mut self, first_chunk_tokens: u32) -> Self {
        self.first_chunk_tokens = first_chunk_tokens;
        self
    }

    /// Returns the config with [`PrefetchConfig::read_batch_tokens`] set to `read_batch_tokens`.
    #[must_use]
    pub fn with_read_batch_tokens(mut self, read_batch_tokens: u32) -> Self {
        self.read_batch_tokens = read_batch_tokens;
        self
    }

    /// Returns the config with [`PrefetchConfig::prefill_batches_in_flight`] set to `prefill_batches_in_flight`.
    #[must_use]
    pub fn with_prefill_batches_in_flight(mut self, prefill_batches_in_flight: usize) -> Self {
        self.prefill_batches_in_flight = prefill_batches_in_flight;
        self
    }

    /// Returns the config with [`PrefetchConfig::prefill_order`] set to `prefill_order`.
    #[must_use]
    pub fn with_prefill_order(mut self, prefill_order: PrefillOrder) -> Self {
        self.prefill_order = prefill_order;
        self
    }

    /// Returns the config with [`PrefetchConfig::ring_chunks`] set to `ring_chunks`.
    #[must_use]
    pub fn with_ring_chunks(mut self, ring_chunks: u32) -> Self {
        self.ring_chunks = ring_chunks;
        self
    }

    /// Returns the config with [`PrefetchConfig::reuse_bytes`] set to `reuse_bytes`.
    #[must_use]
    pub fn with_reuse_bytes(mut self, reuse_bytes: u64) -> Self {
        self.reuse_bytes = reuse_bytes;
        self
    }

    /// Returns the config with [`PrefetchConfig::warm_page_cache`] set to `warm_page_cache`.
    #[must_use]
    pub fn with_warm_page_cache(mut self, warm_page_cache: bool) -> Self {
        self.warm_page_cache = warm_page_cache;
        self
    }

    /// Returns the config with [`PrefetchConfig::overlap_threshold`] set to `overlap_threshold`.
    #[must_use]
    pub fn with_overlap_threshold(mut self, overlap_threshold: u32) -> Self {
        self.overlap_threshold = overlap_threshold;
        self
    }

    /// Returns the config with [`PrefetchConfig::prefetch`] set to `prefetch`.
    #[must_use]
    pub fn with_prefetch(mut self, prefetch: bool) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// Returns the config with [`PrefetchConfig::pipeline`] set to `pipeline`.
    #[must_use]
    pub fn with_pipeline(mut self, pipeline: bool) -> Self {
        self.pipeline = pipeline;
        self
    }

    /// Returns the config with [`PrefetchConfig::batch`] set to `batch`.
    #[must_use]
    pub fn with_batch(mut self, batch: bool) -> Self {
        self.batch = batch;
        self
    }

    /// Returns the config with [`PrefetchConfig::format`] set to `format`.
    #[must_use]
    pub fn with_format(mut self, format: RowFormat) -> Self {
        self.format = format;
        self
    }

    /// Returns the config with [`PrefetchConfig::workers`] set to `workers`.
    #[must_use]
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Returns the config with [`PrefetchConfig::decode_workers`] set to `decode_workers`.
    #[must_use]
    pub fn with_decode_workers(mut self, decode_workers: usize) -> Self {
        self.decode_workers = decode_workers;
        self
    }

    /// Returns the config with [`PrefetchConfig::lookup_hints`] set to `lookup_hints`.
    #[must_use]
    pub fn with_lookup_hints(mut self, lookup_hints: bool) -> Self {
        self.lookup_hints = lookup_hints;
        self
    }

    /// Returns the config with [`PrefetchConfig::lookup_max_ngram`] set to `lookup_max_ngram`.
    #[must_use]
    pub fn with_lookup_max_ngram(mut self, lookup_max_ngram: usize) -> Self {
        self.lookup_max_ngram = lookup_max_ngram;
        self
    }

    /// Returns the config with [`PrefetchConfig::lookup_tokens`] set to `lookup_tokens`.
    #[must_use]
    pub fn with_lookup_tokens(mut self, lookup_tokens: usize) -> Self {
        self.lookup_tokens = lookup_tokens;
        self
    }

    /// Returns the config with [`PrefetchConfig::max_queued_hints`] set to `max_queued_hints`.
    #[must_use]
    pub fn with_max_queued_hints(mut self, max_queued_hints: usize) -> Self {
        self.max_queued_hints = max_queued_hints;
        self
    }

    /// Returns the config with [`PrefetchConfig::readers`] set to `readers`.
    #[must_use]
    pub fn with_readers(mut self, readers: ReaderSched) -> Self {
        self.readers = readers;
        self
    }
}

impl PrefetchConfig {
    /// Checks the values are usable.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::InvalidArgument(what));
        if self.chunk_tokens == 0 || self.first_chunk_tokens == 0 || self.read_batch_tokens == 0 {
            return bad(
                "chunk_tokens, first_chunk_tokens and read_batch_tokens must be at least 1".into(),
            );
        }
        if self.prefill_batches_in_flight == 0 {
            return bad("prefill_batches_in_flight must be at least 1".into());
        }
        if self.ring_chunks == 0 {
            return bad("ring_chunks must be at least 1".into());
        }
        if self.chunk_tokens.checked_mul(self.ring_chunks).is_none() {
            return bad(format!(
                "ring of {} chunks of {} tokens overflows",
                self.ring_chunks, self.chunk_tokens
            ));
        }
        if self.workers == 0 || self.decode_workers == 0 || self.workers + self.decode_workers > 256
        {
            return bad(format!(
                "workers {} and decode_workers {} must be 1..=256 in total",
                self.workers, self.decode_workers
            ));
        }
        if self.lookup_max_ngram == 0 {
            return bad("lookup_max_ngram must be at least 1".into());
        }
        Ok(())
    }

    /// Ring capacity per table in tokens.
    pub fn ring_tokens(&self) -> u32 {
        self.chunk_tokens.saturating_mul(self.ring_chunks)
    }
}
