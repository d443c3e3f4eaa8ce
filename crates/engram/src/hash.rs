//! Per-sequence n-gram history and the row hash, for both layout families.
//!
//! For each token, `ids[k]` is the compressed id `k` tokens back
//! (`k = 0..max_ngram_size`). Per table, `mix = ids[0] * m[0]`, then for
//! `k = 1..max_ngram_size` `mix ^= ids[k] * m[k]` and the `n_heads` columns
//! of order `k + 1` get `row = mix % prime[col] + offset[col]`. Validation
//! bounds every product below 2^63, so `u64` arithmetic equals the
//! references' `int64`.
//!
//! What `ids` holds depends on the layout's [`Family`]:
//! - DeepSeek Engram: walking back from the current token, the first dead
//!   position (masked, or before the start of the sequence) and every older
//!   one read as the pad's compressed id; a masked current token reads as
//!   pad too.
//! - Qwen4-Exp PLE: a masked token is replaced by EOS (the pad) before
//!   hashing, and a sequence starts as if preceded by EOS. `ids[0]` is the
//!   current token whatever it is; walking back from it, the first EOS met is
//!   kept and every older position reads as EOS.
//!
//! Rows come out in order `[token][table][column]`, columns by n-gram order
//! then head.

use std::sync::Arc;

use crate::layout::{Family, Layout, MAX_NGRAM_SIZE};
use crate::{Error, Result};

/// Marks a dead (masked) position in a [`History`].
const DEAD: u32 = u32::MAX;

/// What a sequence's hash depends on: the compressed id of every position so
/// far, with masked positions marked dead (DeepSeek) or stored as EOS
/// (Qwen4-Exp). A history belongs to the [`Hasher`] (family) that filled it.
///
/// Cloning forks the sequence; [`History::rollback`] truncates it (e.g. after
/// rejected draft tokens); [`History::snapshot`] captures the little the
/// next token's hash needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History {
    /// `max_ngram_size - 1`: how many earlier positions a hash reads.
    context: usize,
    /// Sequence position of `ids[0]` (non-zero after [`History::from_snapshot`]).
    base: u64,
    /// Compressed id per position from `base` on, [`DEAD`] where masked
    /// (DeepSeek) or the EOS id (Qwen4-Exp).
    ids: Vec<u32>,
}

/// The state a [`History`] needs to continue a sequence: its length and the
/// compressed ids of its last `max_ngram_size - 1` positions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    position: u64,
    context: usize,
    /// Oldest first; shorter than `context` only near the sequence start.
    tail: Vec<u32>,
}

impl Snapshot {
    /// Number of tokens the sequence had when the snapshot was taken.
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl History {
    /// An empty sequence for a layout with this `max_ngram_size`.
    pub fn new(max_ngram_size: usize) -> Result<Self> {
        if !(2..=MAX_NGRAM_SIZE).contains(&max_ngram_size) {
            return Err(Error::InvalidArgument(format!(
                "max_ngram_size {max_ngram_size} is outside 2..={MAX_NGRAM_SIZE}"
            )));
        }
        Ok(History {
            context: max_ngram_size - 1,
            base: 0,
            ids: Vec::new(),
        })
    }

    /// Number of tokens in the sequence (the position of the next token).
    pub fn position(&self) -> u64 {
        self.base + self.ids.len() as u64
    }

    /// Largest n-gram order the history serves.
    pub fn max_ngram_size(&self) -> usize {
        self.context + 1
    }

    /// The compressed id at `position`: `None` if it is dead (masked, in a
    /// DeepSeek history; a Qwen4-Exp history holds EOS there), outside the
    /// sequence, or no longer held (before a snapshot's tail).
    pub fn compressed_id(&self, position: u64) -> Option<u32> {
        let index = usize::try_from(position.checked_sub(self.base)?).ok()?;
        self.ids.get(index).copied().filter(|&id| id != DEAD)
    }

    /// Captures the position and the last `max_ngram_size - 1` ids; costs
    /// `O(max_ngram_size)` whatever the sequence length.
    pub fn snapshot(&self) -> Snapshot {
        let keep = self.ids.len().min(self.context);
        Snapshot {
            position: self.position(),
            context: self.context,
            tail: self.ids[self.ids.len() - keep..].to_vec(),
        }
    }

    /// A history that continues from `snapshot` exactly as the original
    /// would; it cannot roll back before the snapshot's tail.
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        History {
            context: snapshot.context,
            base: snapshot.position - snapshot.tail.len() as u64,
            ids: snapshot.tail.clone(),
        }
    }

    /// Forgets every token from `to_position` on, so the next token hashed
    /// is at `to_position`.
    pub fn rollback(&mut self, to_position: u64) -> Result<()> {
        let now = self.position();
        if to_position > now {
            return Err(Error::InvalidArgument(format!(
                "rollback to position {to_position}, past the sequence end {now}"
            )));
        }
        // Hashing at `to_position` reads the `context` positions before it.
        let needed_from = to_position.saturating_sub(self.context as u64);
        if needed_from < self.base {
            return Err(Error::InvalidArgument(format!(
                "rollback to position {to_position}: this history starts at position {} (restored from a snapshot)",
                self.base
            )));
        }
        self.ids.truncate((to_position - self.base) as usize);
        Ok(())
    }

    /// The window of the last token hashed: `window[j]` is the id `j + 1`
    /// positions back from the next token, from the first position equal to
    /// `cut` on (and before the start) as `pad`. The rule's `shift_in` turns
    /// it into the next token's window.
    fn window(&self, cut: u32, pad: u64) -> [u64; MAX_NGRAM_SIZE] {
        window_before(&self.ids, self.context, cut, pad)
    }

    /// The compressed ids from sequence position `from` on, led by the
    /// (up to `max_ngram_size - 1`) ids before it that its hash reads, and
    /// how many lead: what [`Hasher::hash_run`] needs to hash any token
    /// from `from` on again, at 4 bytes a token instead of the rows' 4
    /// bytes per row.
    pub(crate) fn run_from(&self, from: u64) -> (Vec<u32>, usize) {
        let index = from.saturating_sub(self.base) as usize;
        let index = index.min(self.ids.len());
        let lead = index.min(self.context);
        (self.ids[index - lead..].to_vec(), lead)
    }
}

/// The window of the token after `ids`: `window[j]` is the id `j + 1`
/// positions back, the first position equal to `cut` and every older one
/// (and before-start positions) as `pad`.
///
/// DeepSeek's `cut` is [`DEAD`]. Qwen4-Exp's is EOS, which is also its pad:
/// an EOS at `j >= 1` keeps its own value (pad) and hides the older ones,
/// as the rule says. At `j = 0` (the last token) an EOS makes the whole
/// window pad, which is not that token's own window (an EOS does not cut its
/// own context) but is exactly what the next token's `shift_in` keeps of it.
fn window_before(ids: &[u32], context: usize, cut: u32, pad: u64) -> [u64; MAX_NGRAM_SIZE] {
    let mut window = [pad; MAX_NGRAM_SIZE];
    for (j, slot) in window.iter_mut().enumerate().take(context) {
        match ids.len().checked_sub(j + 1).map(|i| ids[i]) {
            Some(id) if id != cut => *slot = u64::from(id),
            _ => break,
        }
    }
    window
}

/// How a family moves its window on by one token and marks masked tokens;
/// the hash loops are generic over it so each family's loop is compiled
/// (and unrolled) on its own.
trait WindowRule: Copy {
    /// The id a masked token is stored as in the history.
    fn masked_id(self) -> u32;
    /// The history id from which [`window_before`] reads pad.
    fn cut(self) -> u32;
    /// The next token's window from the last token's: `id` at `k = 0`,
    /// the older ones one step further back, cut by the family's rule.
    fn shift_in(self, window: &mut [u64; MAX_NGRAM_SIZE], max_ngram_size: usize, id: u32);
}

/// DeepSeek Engram: a dead (masked) token reads as pad, and so does
/// everything behind it.
#[derive(Debug, Clone, Copy)]
struct DeadCuts {
    pad: u64,
}

impl WindowRule for DeadCuts {
    fn masked_id(self) -> u32 {
        DEAD
    }

    fn cut(self) -> u32 {
        DEAD
    }

    #[inline(always)]
    fn shift_in(self, window: &mut [u64; MAX_NGRAM_SIZE], max_ngram_size: usize, id: u32) {
        if id == DEAD {
            window[..max_ngram_size].fill(self.pad);
        } else {
            window.copy_within(0..max_ngram_size - 1, 1);
            window[0] = u64::from(id);
        }
    }
}

/// Qwen4-Exp PLE: a masked token is EOS; the current token is always
/// `ids[0]`, and an EOS one step back or more is kept while everything
/// older reads as EOS.
#[derive(Debug, Clone, Copy)]
struct EosCuts {
    eos: u32,
}

impl WindowRule for EosCuts {
    fn masked_id(self) -> u32 {
        self.eos
    }

    fn cut(self) -> u32 {
        self.eos
    }

    #[inline(always)]
    fn shift_in(self, window: &mut [u64; MAX_NGRAM_SIZE], max_ngram_size: usize, id: u32) {
        // The last token moves to k = 1. If it is EOS, it stays EOS there
        // and hides everything older, which reads as EOS as well.
        if window[0] == u64::from(self.eos) {
            window[1..max_ngram_size].fill(u64::from(self.eos));
        } else {
            window.copy_within(0..max_ngram_size - 1, 1);
        }
        window[0] = u64::from(id);
    }
}

/// `x % divisor` for any `u64` x by Barrett reduction: one high multiply,
/// one low multiply and a conditional subtract instead of a hardware
/// division.
#[derive(Debug, Clone, Copy)]
struct Modulus {
    divisor: u64,
    /// `floor(2^64 / divisor)`: the estimated quotient is short by at most one.
    reciprocal: u64,
    offset: u32,
}

impl Modulus {
    fn new(divisor: u32, offset: u32) -> Self {
        let divisor = u64::from(divisor);
        Modulus {
            divisor,
            reciprocal: ((1u128 << 64) / u128::from(divisor)) as u64,
            offset,
        }
    }

    #[inline(always)]
    fn row(&self, x: u64) -> u32 {
        let quotient = ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64;
        let mut rem = x - quotient * self.divisor;
        if rem >= self.divisor {
            rem -= self.divisor;
        }
        rem as u32 + self.offset
    }
}

/// One table's multipliers and per-column moduli.
#[derive(Debug, Clone)]
struct TableHash {
    multipliers: [u64; MAX_NGRAM_SIZE],
    columns: Vec<Modulus>,
}

/// Turns tokens into row ids for every table of a [`Layout`].
#[derive(Debug, Clone)]
pub struct Hasher {
    family: Family,
    token_map: Arc<[u32]>,
    pad: u64,
    max_ngram_size: usize,
    n_heads: usize,
    tables: Vec<TableHash>,
}

impl Hasher {
    /// Precomputes the hash of `layout` (validated first).
    pub fn new(layout: &Layout) -> Result<Self> {
        layout.validate()?;
        let tables = layout
            .tables
            .iter()
            .map(|t| {
                let mut multipliers = [0; MAX_NGRAM_SIZE];
                multipliers[..t.multipliers.len()].copy_from_slice(&t.multipliers);
                let columns = (t.primes.iter().zip(&t.offsets))
                    .map(|(&p, &o)| Modulus::new(p, o))
                    .collect();
                TableHash {
                    multipliers,
                    columns,
                }
            })
            .collect();
        Ok(Hasher {
            family: layout.family,
            token_map: layout.token_map.clone(),
            pad: u64::from(layout.pad_compressed_id),
            max_ngram_size: layout.max_ngram_size,
            n_heads: layout.n_heads,
            tables,
        })
    }

    /// The family whose hash and history rule this hasher follows.
    pub fn family(&self) -> Family {
        self.family
    }

    /// An empty history for this layout.
    pub fn new_history(&self) -> History {
        History {
            context: self.max_ngram_size - 1,
            base: 0,
            ids: Vec::new(),
        }
    }

    /// Row ids per token per table.
    pub fn columns(&self) -> usize {
        (self.max_ngram_size - 1) * self.n_heads
    }

    /// Row ids appended per token (all tables).
    pub fn rows_per_token(&self) -> usize {
        self.columns() * self.tables.len()
    }

    /// Appends the rows of `tokens` to `out` (`[token][table][column]`) and
    /// extends `history` with them. `mask[i] == true` marks token `i` real
    /// and `false` dead (padding), as a Hugging Face `attention_mask` does:
    /// a dead token still gets rows. DeepSeek: it reads as pad and later
    /// tokens do not see past it. Qwen4-Exp: it is replaced by EOS (as
    /// transformers' `where(mask, ids, eos)`), which later tokens see and do
    /// not see past. No mask: every token is real. A token id outside the
    /// vocabulary is an error naming it, its index and its sequence
    /// position. On error nothing is appended and `history` is unchanged.
    pub fn hash(
        &self,
        history: &mut History,
        tokens: &[u32],
        mask: Option<&[bool]>,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        self.check_input(history, tokens, mask)?;
        out.reserve(tokens.len() * self.rows_per_token());
        let window = history.window(self.cut(), self.pad);
        let first_new = history.ids.len();
        // Map every token first: these lookups are independent, so their
        // cache misses overlap instead of stalling the hash one by one.
        self.push_compressed(history, tokens, mask);
        self.hash_ids(window, &history.ids[first_new..], out);
        Ok(())
    }

    /// Checks `tokens` and `mask` as [`Hasher::hash`] does and extends
    /// `history` with them, without hashing: a prefill hashes its tokens
    /// batch by batch ([`Hasher::hash_run`]) instead of holding every row
    /// id of the prompt. On error `history` is unchanged.
    pub(crate) fn extend(
        &self,
        history: &mut History,
        tokens: &[u32],
        mask: Option<&[bool]>,
    ) -> Result<()> {
        self.check_input(history, tokens, mask)?;
        self.push_compressed(history, tokens, mask);
        Ok(())
    }

    /// Appends the rows (`[token][table][column]`) of tokens `from..to` of
    /// `run`, compressed ids whose first `lead` only lead the tokens
    /// ([`History::run_from`]): exactly what [`Hasher::hash`] gave for them.
    pub(crate) fn hash_run(
        &self,
        run: &[u32],
        lead: usize,
        from: usize,
        to: usize,
        out: &mut Vec<u32>,
    ) {
        let context = self.max_ngram_size - 1;
        let before = &run[(lead + from).saturating_sub(context)..lead + from];
        let window = window_before(before, context, self.cut(), self.pad);
        out.reserve((to - from) * self.rows_per_token());
        self.hash_ids(window, &run[lead + from..lead + to], out);
    }

    /// The history id from which a window reads pad: [`DEAD`] or EOS.
    fn cut(&self) -> u32 {
        match self.family {
            Family::DeepSeekEngram => DeadCuts { pad: self.pad }.cut(),
            Family::Qwen4ExpPle => self.eos_cuts().cut(),
        }
    }

    /// The Qwen4-Exp rule; its EOS is the layout's pad (validated inside
    /// the vocabulary, so it fits `u32`).
    fn eos_cuts(&self) -> EosCuts {
        EosCuts {
            eos: self.pad as u32,
        }
    }

    /// Appends the rows of `ids`, hashed from `window` on.
    fn hash_ids(&self, window: [u64; MAX_NGRAM_SIZE], ids: &[u32], out: &mut Vec<u32>) {
        match self.family {
            Family::DeepSeekEngram => {
                self.hash_ids_by(DeadCuts { pad: self.pad }, window, ids, out)
            }
            Family::Qwen4ExpPle => self.hash_ids_by(self.eos_cuts(), window, ids, out),
        }
    }

    /// [`Hasher::hash_ids`] under `rule`.
    fn hash_ids_by<R: WindowRule>(
        &self,
        rule: R,
        window: [u64; MAX_NGRAM_SIZE],
        ids: &[u32],
        out: &mut Vec<u32>,
    ) {
        // The V4.1 shape, Qwen4-Exp's (3, 8) and their neighbours get loops
        // the compiler unrolls.
        match (self.max_ngram_size, self.n_heads) {
            (4, 8) => self.hash_fixed::<4, 8, R>(rule, window, ids, out),
            (3, 8) => self.hash_fixed::<3, 8, R>(rule, window, ids, out),
            (5, 8) => self.hash_fixed::<5, 8, R>(rule, window, ids, out),
            (4, 4) => self.hash_fixed::<4, 4, R>(rule, window, ids, out),
            _ => self.hash_any_shape(rule, window, ids, out),
        }
    }

    /// Appends the compressed id of each token to `history`, the family's
    /// masked id ([`DEAD`], or EOS) where the mask says the token is not
    /// real. Inputs were checked, so indexing cannot fail.
    fn push_compressed(&self, history: &mut History, tokens: &[u32], mask: Option<&[bool]>) {
        let masked = match self.family {
            Family::DeepSeekEngram => DeadCuts { pad: self.pad }.masked_id(),
            Family::Qwen4ExpPle => self.eos_cuts().masked_id(),
        };
        let map = &self.token_map[..];
        match mask {
            None => history.ids.extend(tokens.iter().map(|&t| map[t as usize])),
            Some(mask) => history
                .ids
                .extend(
                    tokens
                        .iter()
                        .zip(mask)
                        .map(|(&t, &real)| if real { map[t as usize] } else { masked }),
                ),
        }
    }

    /// The hash for `N = max_ngram_size` and `H = n_heads` known at compile
    /// time. `window` is the state before `ids[0]`.
    fn hash_fixed<const N: usize, const H: usize, R: WindowRule>(
        &self,
        rule: R,
        mut window: [u64; MAX_NGRAM_SIZE],
        ids: &[u32],
        out: &mut Vec<u32>,
    ) {
        let mut rows = [[0u32; H]; MAX_NGRAM_SIZE];
        for &id in ids {
            rule.shift_in(&mut window, N, id);
            for table in &self.tables {
                let m = &table.multipliers;
                let mut mix = window[0].wrapping_mul(m[0]);
                for k in 1..N {
                    mix ^= window[k].wrapping_mul(m[k]);
                    let moduli = &table.columns[(k - 1) * H..k * H];
                    for h in 0..H {
                        rows[k - 1][h] = moduli[h].row(mix);
                    }
                }
                out.extend_from_slice(rows[..N - 1].as_flattened());
            }
        }
    }

    /// The hash for any shape, with run-time loop bounds.
    fn hash_any_shape<R: WindowRule>(
        &self,
        rule: R,
        mut window: [u64; MAX_NGRAM_SIZE],
        ids: &[u32],
        out: &mut Vec<u32>,
    ) {
        let start = out.len();
        out.resize(start + ids.len() * self.rows_per_token(), 0);
        let rows = out[start..].chunks_exact_mut(self.rows_per_token());
        for (&id, token_rows) in ids.iter().zip(rows) {
            rule.shift_in(&mut window, self.max_ngram_size, id);
            self.hash_window(&window, token_rows);
        }
    }

    fn check_input(&self, history: &History, tokens: &[u32], mask: Option<&[bool]>) -> Result<()> {
        if history.context + 1 != self.max_ngram_size {
            return Err(Error::InvalidArgument(format!(
                "history serves max_ngram_size {}, the layout has {}",
                history.context + 1,
                self.max_ngram_size
            )));
        }
        if let Some(m) = mask.filter(|m| m.len() != tokens.len()) {
            return Err(Error::InvalidArgument(format!(
                "mask has {} entries for {} tokens",
                m.len(),
                tokens.len()
            )));
        }
        let vocab = self.token_map.len();
        if let Some(i) = tokens.iter().position(|&t| t as usize >= vocab) {
            return Err(Error::InvalidArgument(format!(
                "token {} at index {i} (sequence position {}) is outside the vocabulary of {vocab} tokens",
                tokens[i],
                history.position() + i as u64
            )));
        }
        Ok(())
    }

    /// Rows of one token for every table, from its window of ids.
    #[inline(always)]
    fn hash_window(&self, window: &[u64; MAX_NGRAM_SIZE], out: &mut [u32]) {
        let columns = self.columns();
        for (table, table_rows) in self.tables.iter().zip(out.chunks_exact_mut(columns)) {
            let mut mix = window[0].wrapping_mul(table.multipliers[0]);
            let order_rows = table_rows.chunks_exact_mut(self.n_heads);
            let order_moduli = table.columns.chunks_exact(self.n_heads);
            for (k, (rows, moduli)) in order_rows.zip(order_moduli).enumerate() {
                mix ^= window[k + 1].wrapping_mul(table.multipliers[k + 1]);
                for (row, modulus) in rows.iter_mut().zip(moduli) {
                    *row = modulus.row(mix);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_run_gives_the_rows_hash_gave_for_any_span() {
        let layout = crate::layout::preset("deepseek-v4.1-flash", 65536).unwrap();
        let hasher = Hasher::new(&layout).unwrap();
        let rpt = hasher.rows_per_token();
        let tokens: Vec<u32> = (0..50).map(|i| i * 37 % 1000).collect();
        let mask: Vec<bool> = (0..50).map(|i| i % 11 != 3).collect();
        // From the sequence start (no lead), after earlier tokens, and
        // continuing a snapshot.
        let fresh = hasher.new_history();
        let mut after = hasher.new_history();
        hasher
            .hash(&mut after, &[5, 6, 7, 8], None, &mut Vec::new())
            .unwrap();
        let restored = History::from_snapshot(&after.snapshot());
        for mut history in [fresh, after, restored] {
            let first = history.position();
            let mut probe = history.clone();
            let mut expected = Vec::new();
            hasher
                .hash(&mut probe, &tokens, Some(&mask), &mut expected)
                .unwrap();
            hasher.extend(&mut history, &tokens, Some(&mask)).unwrap();
            assert_eq!(history, probe, "extend adds what hash adds");
            let (run, lead) = history.run_from(first);
            for (from, to) in [(0, 50), (0, 1), (1, 4), (3, 5), (13, 49), (49, 50)] {
                let mut got = Vec::new();
                hasher.hash_run(&run, lead, from, to, &mut got);
                assert_eq!(got, expected[from * rpt..to * rpt], "{first}: {from}..{to}");
            }
        }
        // A refused input changes nothing.
        let mut history = hasher.new_history();
        assert!(hasher.extend(&mut history, &[1, 2], Some(&[true])).is_err());
        assert_eq!(history.position(), 0);
    }

    /// A vector case's tokens and mask (`attention_mask`: 1 real, 0 padding).
    fn case_input(
        case: &serde_json::Value,
        tokens: &str,
        mask: &str,
    ) -> (Vec<u32>, Option<Vec<bool>>) {
        let ids = crate::testing::json_u64s(&case[tokens]);
        let mask = case.get(mask).map(|m| {
            crate::testing::json_u64s(m)
                .iter()
                .map(|&m| m != 0)
                .collect()
        });
        (ids.iter().map(|&t| t as u32).collect(), mask)
    }

    #[test]
    fn qwen_extend_and_hash_run_match_the_reference_vectors() {
        let doc = crate::testing::qwen_vectors();
        for config in doc["configs"].as_array().unwrap() {
            let layout = crate::testing::qwen_vector_layout(config).unwrap();
            let hasher = Hasher::new(&layout).unwrap();
            let rpt = hasher.rows_per_token();
            for case in config["cases"].as_array().unwrap() {
                let name = format!("{} {}", config["name"], case["name"]);
                let (tokens, mask) = case_input(case, "tokens", "attention_mask");
                let want = crate::testing::json_token_rows(case);
                assert_eq!(want.len(), tokens.len() * rpt, "{name}");
                // The prompt added in pieces (a prefill's `extend`), then
                // hashed back in batches of every size from the stored run.
                for piece in [1, 3, tokens.len()] {
                    let mut history = hasher.new_history();
                    for (start, chunk) in (0..).step_by(piece).zip(tokens.chunks(piece)) {
                        let m = mask.as_ref().map(|m| &m[start..start + chunk.len()]);
                        hasher.extend(&mut history, chunk, m).unwrap();
                    }
                    let (run, lead) = history.run_from(0);
                    assert_eq!(lead, 0);
                    for batch in [1, 2, 5, 7] {
                        let mut got = Vec::new();
                        let mut from = 0;
                        while from < tokens.len() {
                            let to = (from + batch).min(tokens.len());
                            hasher.hash_run(&run, lead, from, to, &mut got);
                            from = to;
                        }
                        assert_eq!(got, want, "{name}: pieces of {piece}, batches of {batch}");
                    }
                    // A run taken from the middle is led by the ids before it.
                    for first in 1..tokens.len() as u64 {
                        let (run, lead) = history.run_from(first);
                        let mut got = Vec::new();
                        let n = tokens.len() - first as usize;
                        hasher.hash_run(&run, lead, 0, n, &mut got);
                        assert_eq!(
                            got,
                            want[first as usize * rpt..],
                            "{name}: run from {first}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn barrett_matches_hardware_remainder() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for &p in &[2u32, 3, 16_000_057, 4_294_967_291, 1_000_003] {
            let m = Modulus::new(p, 0);
            for edge in [
                0,
                1,
                u64::from(p) - 1,
                u64::from(p),
                u64::MAX,
                i64::MAX as u64,
            ] {
                assert_eq!(u64::from(m.row(edge)), edge % u64::from(p));
            }
            for _ in 0..100_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                assert_eq!(u64::from(m.row(x)), x % u64::from(p), "{x} % {p}");
            }
        }
        assert_eq!(Modulus::new(13, 100).row(27), 101);
    }

    #[test]
    fn window_reads_pad_from_the_first_dead_position() {
        let mut h = History::new(4).unwrap();
        h.ids = vec![10, DEAD, 11, 12];
        assert_eq!(h.window(DEAD, 2)[..4], [12, 11, 2, 2]);
        h.ids = vec![9, 10, 11, 12];
        assert_eq!(h.window(DEAD, 2)[..4], [12, 11, 10, 2]);
        h.ids = vec![10, 11];
        assert_eq!(h.window(DEAD, 2)[..4], [11, 10, 2, 2]);
        h.ids.push(DEAD);
        assert_eq!(h.window(DEAD, 2)[..4], [2, 2, 2, 2]);
    }
}
