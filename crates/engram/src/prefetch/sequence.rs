//! A sequence on an engine: its tokens and n-gram history, its prefills
//! and decode steps, its hints and its stats.

use std::sync::Arc;
use std::time::Duration;

use super::decode::{ReadMode, StepJob};
use super::hint::{Guess, HintBook, HintTask};
use super::prefill::{Mode, Plan, PrefillSetup, PromptRows};
use super::{lookup, prefill_tokens, Prefill, RowsView, Shared};
use super::{Hints, MAX_DRAFT};
use crate::hash::History;
use crate::stats::{HintKind, Phase, Stats, StatsRecorder};
use crate::{Error, Result};

/// One sequence's tokens, its decode buffers and its stats.
pub struct Sequence {
    shared: Arc<Shared>,
    pub(super) steps: Arc<StepJob>,
    /// Decode steps begun (u64: cannot wrap within a sequence's life).
    step: u64,
    /// Position of the current step's token (its rows' first token).
    step_token: u32,
    step_stall: Duration,
    step_open: bool,
    stats: Arc<StatsRecorder>,
    tokens: Vec<u32>,
    history: History,
    /// Hints not yet resolved by the step at their position.
    hints: HintBook,
    /// The current step's row ids, kept so a step allocates none.
    step_ids: Vec<u32>,
}

impl std::fmt::Debug for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sequence")
            .field("tokens", &self.tokens.len())
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl Sequence {
    pub(super) fn new(shared: Arc<Shared>) -> Sequence {
        let stats = Arc::new(StatsRecorder::new(shared.layout.tables.len()));
        let cols = vec![shared.columns; shared.layout.tables.len()];
        let steps = Arc::new(StepJob::new(
            shared.ids(1),
            &cols,
            &shared.decode,
            ReadMode {
                batch: shared.config.batch,
            },
            &shared.source,
            &stats,
        ));
        Sequence {
            history: shared.hasher.new_history(),
            shared,
            steps,
            step: 0,
            step_token: 0,
            step_stall: Duration::ZERO,
            step_open: false,
            stats,
            tokens: Vec::new(),
            hints: HintBook::default(),
            step_ids: Vec::new(),
        }
    }

    /// Tokens in the sequence so far.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True before the first token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The sequence's tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Number of tables.
    pub fn tables(&self) -> usize {
        self.shared.layout.tables.len()
    }

    /// The transformer layer that consumes `table`.
    pub fn layer_id(&self, table: usize) -> Option<u32> {
        self.shared.layout.tables.get(table).map(|t| t.layer_id)
    }

    /// Rows per token of each table.
    pub fn rows_per_token(&self) -> usize {
        self.shared.columns
    }

    /// Row ids (`[token][table][column]`) the sequence's hash gives
    /// `tokens` appended to it, without appending them. `mask[i] == true`
    /// marks token `i` real and `false` dead (padding), as a Hugging Face
    /// `attention_mask` does ([`crate::hash::Hasher::hash`]).
    pub fn row_ids(&self, tokens: &[u32], mask: Option<&[bool]>) -> Result<Vec<u32>> {
        // A history restored from a snapshot continues the sequence exactly
        // and costs O(max_ngram_size), whatever the sequence length.
        let mut history = History::from_snapshot(&self.history.snapshot());
        let mut out = Vec::new();
        self.shared
            .hasher
            .hash(&mut history, tokens, mask, &mut out)?;
        Ok(out)
    }

    /// Appends `tokens` (`mask[i] == true` marks token `i` real, `false`
    /// dead, as padding is: a Hugging Face `attention_mask`) and starts reading their rows: one reader job per table at once,
    /// ahead of the consumer's [`Prefill::wait`]s.
    pub fn prefill(&mut self, tokens: &[u32], mask: Option<&[bool]>) -> Result<Prefill<'_>> {
        self.begin_prefill(tokens, mask)
    }

    /// [`Sequence::prefill`] without the borrow of the sequence, for owners
    /// that cannot express it (the C ABI keeps a prefill handle apart from
    /// its sequence handle).
    ///
    /// Sound because a prefill owns everything its readers touch (its rings,
    /// row ids and a share of the source, pool and stats): dropping it
    /// cancels and joins its readers whether or not the sequence is still
    /// alive. The borrow only keeps the consumer's order, so the caller
    /// keeps it instead: no step or other prefill on this sequence until the
    /// prefill is dropped.
    pub fn prefill_detached(
        &mut self,
        tokens: &[u32],
        mask: Option<&[bool]>,
    ) -> Result<Prefill<'static>> {
        self.begin_prefill(tokens, mask)
    }

    fn begin_prefill<'p>(&mut self, tokens: &[u32], mask: Option<&[bool]>) -> Result<Prefill<'p>> {
        self.check_open()?;
        // Every check before the history changes: a refused prefill leaves
        // the sequence as it was (the hash checks its input first).
        let n = prefill_tokens(tokens.len())?;
        let first = self.history.position();
        self.shared.hasher.extend(&mut self.history, tokens, mask)?;
        self.tokens.extend_from_slice(tokens);
        // The hints guessed tokens at the positions the prompt now fills.
        self.clear_hints();
        let (run, lead) = self.history.run_from(first);
        let prompt = PromptRows::new(self.shared.hasher.clone(), run, lead);
        Ok(self.start_prefill(n, prompt))
    }

    fn start_prefill<'p>(&mut self, tokens: u32, prompt: PromptRows) -> Prefill<'p> {
        let config = &self.shared.config;
        let overlap = config.prefetch && tokens >= config.overlap_threshold;
        let whole = !config.pipeline;
        // Pipeline off: the ring and every batch are the whole prompt.
        let sized = |pipelined: u32| if whole { tokens } else { pipelined }.max(1);
        let plan = Plan {
            tokens,
            // A prompt shorter than the ring gets a ring of its own size.
            ring_tokens: sized(config.ring_tokens().min(tokens)),
            first_chunk: sized(config.first_chunk_tokens),
            read_batch: sized(config.read_batch_tokens),
            in_flight: config.prefill_batches_in_flight,
            mode: if overlap { Mode::Overlap } else { Mode::AtWait },
            batch: config.batch,
            whole_table: whole,
            reuse_bytes: config.reuse_bytes,
            warm: config.warm_page_cache,
            chunk: config.chunk_tokens,
            order: config.prefill_order,
        };
        let tables = self.tables();
        let cols = vec![self.shared.columns; tables];
        Prefill::start(PrefillSetup {
            id: self.shared.ids(1),
            decode: &self.shared.decode,
            prompt: Arc::new(prompt),
            cols: &cols,
            plan,
            source: &self.shared.source,
            stats: &self.stats,
            pool: &self.shared.pool,
        })
    }

    /// Appends `token` and issues both tables' reads of its rows without
    /// blocking. Blocks only if the previous step's reads are still running.
    ///
    /// An error leaves the sequence as it was: its tokens, history, step
    /// count, stats and the previous step's rows.
    pub fn step_begin(&mut self, token: u32) -> Result<()> {
        self.check_open()?;
        self.steps.ready_for_step(&self.shared.pool)?;
        let step_token = u32::try_from(self.tokens.len()).map_err(|_| {
            Error::InvalidArgument(format!(
                "a sequence of {} tokens has no room for a decode step",
                self.tokens.len()
            ))
        })?;
        let ids = &mut self.step_ids;
        ids.clear();
        // The hash checks the token before it changes the history.
        self.shared
            .hasher
            .hash(&mut self.history, &[token], None, ids)?;
        // Nothing below fails.
        // Hints this step makes stale go before its reads are queued: a
        // queued one would only share the device with them.
        let cols = self.shared.columns;
        if self
            .hints
            .resolve(u64::from(step_token), token, ids, cols, &self.stats)
        {
            self.steps.drop_stale_hints(&self.shared.pool);
        }
        self.finish_step_stats();
        self.step += 1;
        self.step_token = step_token;
        self.step_open = true;
        self.steps.start(
            &self.step_ids,
            self.shared.config.prefetch,
            &self.shared.pool,
        );
        self.tokens.push(token);
        if self.shared.config.lookup_hints {
            let config = &self.shared.config;
            let mut guess =
                lookup::predict(&self.tokens, config.lookup_max_ngram, config.lookup_tokens);
            // The tokens that followed: a draft chain, as long as one may be.
            guess.truncate(MAX_DRAFT);
            // The step has begun: a hint that cannot go out (the engine
            // is going away) must not make the call report failure.
            let _ = self.hint(&guess);
        }
        Ok(())
    }

    /// Blocks until the current step's rows of `table` are read and returns
    /// them (valid until the next step). Call at the table's layer.
    ///
    /// A read error fails this step's waits on the table (without prefetch
    /// the wait can be repeated and reads again); the next step reads
    /// afresh.
    pub fn step_wait(&mut self, table: usize) -> Result<RowsView<'_>> {
        if self.step == 0 {
            return Err(Error::InvalidArgument("step_wait before step_begin".into()));
        }
        let (rows, stall) =
            self.steps
                .wait(table, self.shared.config.prefetch, &self.shared.pool)?;
        self.stats.record_wait(Phase::Decode, table, 1, stall);
        self.step_stall += stall;
        Ok(RowsView {
            first_token: self.step_token,
            rows_per_token: self.shared.columns,
            row_bytes: self.steps.row_bytes(table),
            f32: self.steps.decoded(table),
            parts: [rows, &[]],
        })
    }

    /// Reads the rows of guessed next tokens into the row cache, at low
    /// priority: served only when no demand read is queued, and not before
    /// the current step's first table is read. Nothing waits on hints.
    ///
    /// `hints` is a draft chain (the guesses of the next tokens in order,
    /// each hashed after those before it), alternatives of the next token
    /// with their probabilities, or both ([`Hints`]); a slice of tokens is
    /// a draft chain. The likeliest rows are read first. A step that begins
    /// drops the hints it makes stale: those of its position, and those
    /// hashed after a guess of its position that was not its token (a
    /// rollback or a prefill drops them all). Their use is counted in
    /// [`Stats::hint_use`].
    ///
    /// Errors (the argument named) for more than [`MAX_DRAFT`] draft
    /// tokens or [`MAX_ALTERNATIVES`](super::MAX_ALTERNATIVES)
    /// alternatives, probabilities not one per token or outside [0, 1]
    /// (NaN included), or a token the hash refuses; nothing is read then.
    pub fn hint<'h>(&mut self, hints: impl Into<Hints<'h>>) -> Result<()> {
        let hints = hints.into();
        self.check_open()?;
        hints.check()?;
        let tables = self.tables();
        let cols = self.shared.columns;
        let per_table = |ids: &[u32]| -> Vec<Vec<u32>> {
            (0..tables)
                .map(|t| ids[t * cols..(t + 1) * cols].to_vec())
                .collect()
        };
        let mut guesses = Vec::with_capacity(hints.draft.len() + hints.alternatives.len());
        // One hash of the chain gives every token's rows after the ones
        // before it.
        let chain = self.row_ids(hints.draft, None)?;
        let mut prob = 1.0f32;
        for (i, ids) in chain.chunks_exact(tables * cols).enumerate() {
            prob *= hints.draft_probs.get(i).copied().unwrap_or(1.0);
            guesses.push(Guess {
                path: hints.draft[..=i].to_vec(),
                prob,
                kind: HintKind::Draft,
                rows: per_table(ids),
            });
        }
        for (&token, &prob) in hints.alternatives.iter().zip(hints.alternative_probs) {
            let ids = self.row_ids(&[token], None)?;
            guesses.push(Guess {
                path: vec![token],
                prob,
                kind: HintKind::Alternative,
                rows: per_table(&ids),
            });
        }
        // Nothing below fails.
        let start = self.tokens.len() as u64;
        let mut tasks: Vec<Box<dyn super::pool::Task>> = Vec::new();
        for candidate in self.hints.add(start, guesses) {
            for table in 0..tables {
                self.steps.hints.enter();
                tasks.push(Box::new(HintTask {
                    owner: self.steps.id,
                    flight: self.steps.hints.clone(),
                    table,
                    candidate: candidate.clone(),
                    source: self.shared.source.clone(),
                    stats: self.stats.clone(),
                    pool: self.shared.pool.clone(),
                }));
            }
        }
        self.steps.submit_hints(tasks, &self.shared.pool);
        Ok(())
    }

    /// Resolves every outstanding hint as stale (the history they were
    /// hashed after changed) and drops their queued reads.
    fn clear_hints(&mut self) {
        if self.hints.clear(&self.stats) {
            self.steps.drop_stale_hints(&self.shared.pool);
        }
    }

    /// Drops the last `n` tokens (rejected draft tokens): later hashes see
    /// the sequence as it was before them.
    pub fn rollback(&mut self, n: usize) -> Result<()> {
        if n > self.tokens.len() {
            return Err(Error::InvalidArgument(format!(
                "rollback of {n} tokens in a sequence of {}",
                self.tokens.len()
            )));
        }
        let keep = self.tokens.len() - n;
        self.history.rollback(keep as u64)?;
        self.tokens.truncate(keep);
        self.clear_hints();
        Ok(())
    }

    /// The sequence's stats collector, shared: it outlives the sequence and
    /// can be read from another thread while the sequence waits. Its
    /// snapshots leave out the decode step in progress (see
    /// [`Sequence::stats`]) and a running prefill's waits since its last
    /// wait that blocked (they are recorded then, or when it is dropped).
    pub fn stats_recorder(&self) -> Arc<StatsRecorder> {
        self.stats.clone()
    }

    /// Everything measured on this sequence so far (closes the current
    /// decode step's per-token total).
    pub fn stats(&mut self) -> Stats {
        self.finish_step_stats();
        self.stats.snapshot()
    }

    fn finish_step_stats(&mut self) {
        if self.step_open {
            self.stats
                .record_token_total(Phase::Decode, self.step_stall, 1);
        }
        self.step_open = false;
        self.step_stall = Duration::ZERO;
    }

    fn check_open(&self) -> Result<()> {
        if self.shared.pool.is_shutdown() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}

impl Drop for Sequence {
    fn drop(&mut self) {
        self.steps.cancel_and_join(&self.shared.pool);
    }
}
