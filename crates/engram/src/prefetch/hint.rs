//! Hint reads: rows of likely next tokens read into the row cache at low
//! priority. Nobody waits on them; a sequence's drop waits only for those
//! running (see `decode::HeldHints` for when they are queued).
//!
//! A runtime offers two kinds of guesses ([`Hints`]): a draft chain (a
//! multi-token-prediction head's next k tokens, each hashed after the ones
//! before it) and alternatives for the next position (its top-k). Each
//! guessed token at its position is a [`Candidate`]: its rows per table,
//! the probability that they are needed, and per table whether its read
//! is queued, running, done or dropped. The pool serves queued hint reads
//! likeliest first ([`super::pool`]); a step that begins resolves the
//! candidates it makes stale ([`HintBook::resolve`]): their queued reads
//! are dropped and their rows counted as used or not in the stats.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use super::guard::{Leaving, PanicSite};
use super::pool::{PoolShared, Task};
use super::read::ReadCtx;
use super::ready::InFlight;
use super::source::{Priority, RowSource};
use crate::stats::{HintKind, HintKindUse, HintUse, Phase, StatsRecorder};
use crate::{Error, Result};

/// Most tokens a draft chain may hold ([`Hints::draft`]).
pub const MAX_DRAFT: usize = 16;
/// Most alternatives one call may offer ([`Hints::alternatives`]).
pub const MAX_ALTERNATIVES: usize = 32;

/// What a runtime guesses of the tokens to come, for
/// [`Sequence::hint`](super::Sequence::hint).
///
/// - `draft`: a chain, `draft[i]` the guess for the token `i + 1` positions
///   after the sequence's last one, each hashed after the chain's tokens
///   before it (as a multi-token-prediction head drafts). `draft_probs[i]`
///   is the probability that `draft[i]` is right given the chain before it
///   is right; empty means 1 for each. The chain's `i`-th token is needed
///   with the product of `draft_probs[..=i]`.
/// - `alternatives`: other guesses of the next token alone (a top-k), each
///   needed with its `alternative_probs[i]` (required, one per token).
///
/// A token offered twice for the same position and history (the draft's
/// first token among the alternatives, or again in a later call) is read
/// once, with the larger probability, and counted as a draft. Reads go
/// likeliest first, then the nearer position, then in the order given.
///
/// A slice of tokens is a draft chain without probabilities
/// (`seq.hint(&[a, b])`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Hints<'a> {
    /// The draft chain: guesses of the next `draft.len()` tokens, in order.
    pub draft: &'a [u32],
    /// Per draft token, its probability given the chain before it (empty:
    /// 1 each; else as many as `draft`, each in [0, 1]).
    pub draft_probs: &'a [f32],
    /// Other guesses of the next token.
    pub alternatives: &'a [u32],
    /// Per alternative, its probability (as many as `alternatives`, each
    /// in [0, 1]).
    pub alternative_probs: &'a [f32],
}

impl<'a> Hints<'a> {
    /// A draft chain without probabilities.
    pub fn draft(tokens: &'a [u32]) -> Hints<'a> {
        Hints {
            draft: tokens,
            ..Hints::default()
        }
    }

    /// The same with the draft's per-token probabilities.
    pub fn with_draft_probs(self, probs: &'a [f32]) -> Hints<'a> {
        Hints {
            draft_probs: probs,
            ..self
        }
    }

    /// The same with alternatives of the next token and their
    /// probabilities.
    pub fn with_alternatives(self, tokens: &'a [u32], probs: &'a [f32]) -> Hints<'a> {
        Hints {
            alternatives: tokens,
            alternative_probs: probs,
            ..self
        }
    }

    /// Checks the lengths and probabilities; the error names the argument.
    pub(crate) fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.draft.len() > MAX_DRAFT {
            return bad(format!(
                "draft: {} tokens, at most {MAX_DRAFT}",
                self.draft.len()
            ));
        }
        if self.alternatives.len() > MAX_ALTERNATIVES {
            return bad(format!(
                "alternatives: {} tokens, at most {MAX_ALTERNATIVES}",
                self.alternatives.len()
            ));
        }
        if !self.draft_probs.is_empty() && self.draft_probs.len() != self.draft.len() {
            return bad(format!(
                "draft_probs: {} probabilities for {} draft tokens",
                self.draft_probs.len(),
                self.draft.len()
            ));
        }
        if self.alternative_probs.len() != self.alternatives.len() {
            return bad(format!(
                "alternative_probs: {} probabilities for {} alternatives",
                self.alternative_probs.len(),
                self.alternatives.len()
            ));
        }
        for (name, probs) in [
            ("draft_probs", self.draft_probs),
            ("alternative_probs", self.alternative_probs),
        ] {
            // `contains` is false for NaN, so NaN is refused too.
            if let Some((i, p)) = probs
                .iter()
                .enumerate()
                .find(|(_, p)| !(0.0..=1.0).contains(*p))
            {
                return bad(format!("{name}[{i}]: {p} is not a probability in [0, 1]"));
            }
        }
        Ok(())
    }
}

impl<'a> From<&'a [u32]> for Hints<'a> {
    fn from(tokens: &'a [u32]) -> Hints<'a> {
        Hints::draft(tokens)
    }
}

impl<'a, const N: usize> From<&'a [u32; N]> for Hints<'a> {
    fn from(tokens: &'a [u32; N]) -> Hints<'a> {
        Hints::draft(tokens)
    }
}

impl<'a> From<&'a Vec<u32>> for Hints<'a> {
    fn from(tokens: &'a Vec<u32>) -> Hints<'a> {
        Hints::draft(tokens)
    }
}

/// A hint read's state, per candidate and table.
const QUEUED: u8 = 0;
const READING: u8 = 1;
const DONE: u8 = 2;
const DROPPED: u8 = 3;

/// One guessed token at one position: its rows and how far their reads got.
pub(crate) struct Candidate {
    /// Probability its rows are needed (f32 bits): raised when the same
    /// guess comes again likelier; the pool reads it at dispatch.
    prob: AtomicU32,
    /// Position of the guessed token (its rows' token).
    position: u64,
    /// Per table, its rows.
    rows: Vec<Vec<u32>>,
    /// Per table, QUEUED, READING, DONE or DROPPED.
    state: Vec<AtomicU8>,
}

impl Candidate {
    /// A guess at `position`, needed with `prob`, of `rows` per table, its
    /// reads queued.
    pub(crate) fn new(prob: f32, position: u64, rows: Vec<Vec<u32>>) -> Candidate {
        Candidate {
            prob: AtomicU32::new(prob.to_bits()),
            position,
            state: rows.iter().map(|_| AtomicU8::new(QUEUED)).collect(),
            rows,
        }
    }

    /// The probability its rows are needed.
    pub(crate) fn prob(&self) -> f32 {
        f32::from_bits(self.prob.load(Ordering::Relaxed))
    }

    /// Drops `table`'s read if it is still queued; the state it had.
    fn drop_queued(&self, table: usize) -> u8 {
        match self.state[table].compare_exchange(
            QUEUED,
            DROPPED,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => QUEUED,
            Err(state) => state,
        }
    }
}

/// One outstanding candidate of a sequence.
struct Entry {
    candidate: Arc<Candidate>,
    kind: HintKind,
    /// The guessed tokens from `start` up to the candidate's position: the
    /// history its rows were hashed with beyond the sequence's tokens.
    path: Vec<u32>,
    /// Position of `path[0]`.
    start: u64,
}

impl Entry {
    /// The guessed token at `position` (`start <= position <=` the
    /// candidate's).
    fn token_at(&self, position: u64) -> Option<u32> {
        let i = position.checked_sub(self.start)?;
        self.path.get(usize::try_from(i).ok()?).copied()
    }

    /// True when it guesses `path` from `start` (a later start compares
    /// its own suffix: the positions before were checked by the steps).
    fn same_guess(&self, start: u64, path: &[u32]) -> bool {
        let Some(skip) = start
            .checked_sub(self.start)
            .and_then(|s| usize::try_from(s).ok())
        else {
            return false;
        };
        self.path.get(skip..) == Some(path)
    }
}

/// A guess as [`Sequence::hint`](super::Sequence::hint) makes it, before
/// it is in the book.
pub(crate) struct Guess {
    /// Tokens from the sequence's next position up to the guessed one.
    pub path: Vec<u32>,
    /// Probability its rows are needed.
    pub prob: f32,
    /// Draft or alternative.
    pub kind: HintKind,
    /// Per table, its rows.
    pub rows: Vec<Vec<u32>>,
}

/// A sequence's outstanding hint candidates (on the sequence's thread
/// only; the tasks share each [`Candidate`]).
#[derive(Default)]
pub(crate) struct HintBook {
    entries: Vec<Entry>,
}

impl HintBook {
    /// Adds the guesses made at `start` (the sequence's next position) and
    /// returns the new candidates to read, likeliest first. A guess already
    /// in the book is not read again: its probability is raised to the
    /// larger, and a draft makes it a draft.
    pub(crate) fn add(&mut self, start: u64, guesses: Vec<Guess>) -> Vec<Arc<Candidate>> {
        let mut new = Vec::new();
        for g in guesses {
            if let Some(e) = self
                .entries
                .iter_mut()
                .find(|e| e.same_guess(start, &g.path))
            {
                if g.prob > e.candidate.prob() {
                    e.candidate.prob.store(g.prob.to_bits(), Ordering::Relaxed);
                }
                if g.kind == HintKind::Draft {
                    e.kind = HintKind::Draft;
                }
                continue;
            }
            let position = start + g.path.len() as u64 - 1;
            let candidate = Arc::new(Candidate::new(g.prob, position, g.rows));
            new.push(candidate.clone());
            self.entries.push(Entry {
                candidate,
                kind: g.kind,
                path: g.path,
                start,
            });
        }
        new.sort_by(|a, b| b.prob().total_cmp(&a.prob()));
        new
    }

    /// A step at `position` began with `token`, its rows `ids` (per table
    /// `cols` of them): resolves the candidates it makes stale (those of
    /// this position, and later ones whose path guessed another token
    /// here). Their queued reads are dropped; their rows are counted in
    /// `stats` per kind as read (a read that ran or runs), of which used
    /// (among the step's rows), or dropped. Returns whether any read was
    /// dropped (the caller then purges the queues).
    pub(crate) fn resolve(
        &mut self,
        position: u64,
        token: u32,
        ids: &[u32],
        cols: usize,
        stats: &StatsRecorder,
    ) -> bool {
        let mut dropped = false;
        // Counted here and recorded once: this runs at the start of a
        // step, on the caller's thread.
        let mut uses = HintUse::default();
        let mut resolved = false;
        self.entries.retain(|e| {
            let at = e.candidate.position == position;
            let wrong = e.token_at(position).is_some_and(|t| t != token);
            if !at && !wrong {
                return true;
            }
            let step = at.then_some(ids);
            dropped |= account(e, step, cols, &mut uses);
            resolved = true;
            false
        });
        if resolved {
            stats.record_hint_uses(&uses);
        }
        dropped
    }

    /// Resolves every candidate as stale (a rollback or a prefill changed
    /// the history they were hashed after). Returns whether any queued
    /// read was dropped.
    pub(crate) fn clear(&mut self, stats: &StatsRecorder) -> bool {
        let mut dropped = false;
        let mut uses = HintUse::default();
        for e in self.entries.drain(..) {
            dropped |= account(&e, None, 0, &mut uses);
        }
        stats.record_hint_uses(&uses);
        dropped
    }
}

/// Drops `e`'s queued reads and counts its rows into `uses`: read (and,
/// with the step's `ids`, used where they are among them) or dropped.
/// True when a queued read was dropped.
fn account(e: &Entry, ids: Option<&[u32]>, cols: usize, uses: &mut HintUse) -> bool {
    let c = &e.candidate;
    let (mut read, mut used, mut dropped) = (0u64, 0u64, 0u64);
    let mut purged = false;
    for (table, rows) in c.rows.iter().enumerate() {
        let n = rows.len() as u64;
        match c.drop_queued(table) {
            READING | DONE => {
                read += n;
                if let Some(ids) = ids {
                    let step = ids.get(table * cols..(table + 1) * cols).unwrap_or(&[]);
                    used += rows.iter().filter(|r| step.contains(r)).count() as u64;
                }
            }
            QUEUED => {
                purged = true;
                dropped += n;
            }
            _ => dropped += n,
        }
    }
    uses.of_kind_mut(e.kind).add(&HintKindUse {
        rows_read: read,
        rows_used: used,
        rows_dropped: dropped,
        hit_rate: None,
    });
    purged
}

/// A speculative read of one candidate's rows of one table into the row
/// cache; errors are ignored (nobody waits on a hint) but the batch is
/// counted under [`Phase::Hint`].
pub(crate) struct HintTask {
    pub owner: u64,
    /// The sequence's hint counter: its drop waits for running hints.
    pub flight: Arc<InFlight>,
    pub table: usize,
    pub candidate: Arc<Candidate>,
    pub source: Arc<dyn RowSource>,
    pub stats: Arc<StatsRecorder>,
    pub pool: Arc<PoolShared>,
}

impl HintTask {
    /// The task under the guard that leaves its hint count once the task
    /// (its shares of the source, stats and pool) is dropped, a panic
    /// included: how it ends whether it runs or is abandoned.
    fn guarded(self: Box<Self>) -> Leaving<Box<HintTask>> {
        let flight = self.flight.clone();
        Leaving::new(self, vec![flight])
    }
}

impl Task for HintTask {
    fn run(self: Box<Self>) {
        let task = self.guarded();
        let state = &task.candidate.state[task.table];
        // A read dropped after the pool took it (a step made it stale)
        // does nothing.
        if state
            .compare_exchange(QUEUED, READING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        // Nobody waits on a hint: a panic only ends this one (the guard
        // leaves the count as it unwinds).
        let _ = catch_unwind(AssertUnwindSafe(|| {
            task.pool.faults.hit(PanicSite::Hint, task.table);
            let rows = &task.candidate.rows[task.table];
            let mut out = vec![0u8; rows.len() * task.source.row_bytes(task.table)];
            let _ = ReadCtx {
                source: &task.source,
                stats: &task.stats,
                phase: Phase::Hint,
                priority: Priority::Hint,
                batch: true,
            }
            .read(task.table, rows, &mut out);
        }));
        state.store(DONE, Ordering::Release);
    }

    fn abandon(self: Box<Self>) {
        self.candidate.drop_queued(self.table);
        drop(self.guarded());
    }

    fn owner(&self) -> u64 {
        self.owner
    }

    fn hint_rank(&self) -> (f32, u64) {
        (self.candidate.prob(), self.candidate.position)
    }

    fn stale(&self) -> bool {
        self.candidate.state[self.table].load(Ordering::Acquire) == DROPPED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_hints_are_refused_naming_the_argument() {
        let t = [1u32, 2, 3];
        let cases: [(Hints<'_>, &str); 7] = [
            (Hints::draft(&[7; MAX_DRAFT + 1]), "draft:"),
            (
                Hints::default().with_alternatives(&[7; MAX_ALTERNATIVES + 1], &[0.1; 33]),
                "alternatives:",
            ),
            (
                Hints::draft(&t).with_draft_probs(&[0.5, 0.5]),
                "draft_probs:",
            ),
            (
                Hints::draft(&t).with_alternatives(&t, &[0.5]),
                "alternative_probs:",
            ),
            (
                Hints::draft(&t).with_draft_probs(&[0.5, 1.5, 0.5]),
                "draft_probs[1]",
            ),
            (
                Hints::draft(&t).with_alternatives(&t[..1], &[f32::NAN]),
                "alternative_probs[0]",
            ),
            (
                Hints::draft(&t).with_alternatives(&t[..1], &[-0.0 - 1e-3]),
                "alternative_probs[0]",
            ),
        ];
        for (hints, name) in cases {
            let e = hints.check().unwrap_err().to_string();
            assert!(e.contains(name), "{e} should name {name}");
        }
        Hints::draft(&t)
            .with_draft_probs(&[0.0, 1.0, 0.5])
            .with_alternatives(&t, &[1.0, 0.0, 0.25])
            .check()
            .unwrap();
        assert_eq!(Hints::from(&t), Hints::draft(&t));
    }

    #[test]
    fn a_guess_made_again_is_one_candidate_with_the_larger_probability() {
        let mut book = HintBook::default();
        let guess = |path: Vec<u32>, prob, kind| Guess {
            path,
            prob,
            kind,
            rows: vec![vec![1, 2]],
        };
        let new = book.add(
            10,
            vec![
                guess(vec![5], 0.1, HintKind::Alternative),
                guess(vec![4], 0.8, HintKind::Draft),
                guess(vec![4, 6], 0.6, HintKind::Draft),
            ],
        );
        let probs: Vec<f32> = new.iter().map(|c| c.prob()).collect();
        assert_eq!(probs, [0.8, 0.6, 0.1], "likeliest first");
        // The next step's call guesses position 11 again after 4: the
        // same candidate, likelier now; an alternative 5 at 11 is new.
        let again = book.add(
            11,
            vec![
                guess(vec![6], 0.9, HintKind::Alternative),
                guess(vec![5], 0.1, HintKind::Alternative),
            ],
        );
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].position, 11);
        assert_eq!(new[1].prob(), 0.9);
        assert_eq!(book.entries.len(), 4);
        assert_eq!(
            book.entries[2].kind,
            HintKind::Draft,
            "a draft stays a draft"
        );
    }
}
