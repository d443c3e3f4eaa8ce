//! Whole-prompt dedup for a prefill: a fixed-budget store of rows already
//! read that a later token of the prompt needs again.
//!
//! A prefill knows all of its row ids up front, so for every occurrence of a
//! row it knows the token of the row's next occurrence ([`next_uses`]).
//! [`ReuseStore`] keeps rows by that next use and evicts as Belady's optimal
//! policy does: the row needed farthest in the future goes first, a row is
//! not taken in if it is needed later than everything a full store holds,
//! and a row leaves after its last use. Its slab grows with the rows held,
//! up to the byte budget (never past it, whatever the prompt length): a
//! short prompt holds only what it reuses.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for row ids: they come out of a multiplicative hash already, so a
/// multiply-shift spreads them well, at a fraction of SipHash's cost (the
/// next-use pass hashes every row id of the prompt before the first read).
#[derive(Default)]
pub(crate) struct RowIdHasher(u64);

impl Hasher for RowIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type RowMap<V> = HashMap<u32, V, BuildHasherDefault<RowIdHasher>>;

/// Next use of a row that is not needed again.
pub(crate) const NEVER: u32 = u32::MAX;

/// For each of `len` occurrences (token-major, `cols` rows per token; the
/// row id of occurrence `i` is `row_at(i)`), how many tokens later the same
/// row id occurs next ([`NextUses::get`] turns it back into a token).
///
/// Distances are kept in 16 bits, half the memory of a token index (the
/// array is as long as the prompt): a row next needed 65,536 or more tokens
/// later counts as not needed again. A fixed-budget store would evict it
/// first anyway; at worst it is read once more.
pub(crate) fn next_uses(len: usize, cols: usize, mut row_at: impl FnMut(usize) -> u32) -> NextUses {
    let cols = cols.max(1);
    let mut distance = vec![0u16; len];
    let mut seen: RowMap<u32> = RowMap::default();
    for i in (0..len).rev() {
        let row = row_at(i);
        // Row ids of one table never repeat within a token (each column has
        // its own id range), so the next occurrence is in a later token.
        let token = u32::try_from(i / cols).unwrap_or(NEVER);
        if let Some(later) = seen.insert(row, token) {
            distance[i] = u16::try_from(later - token).unwrap_or(0);
        }
    }
    NextUses { distance, cols }
}

/// Next use of each row occurrence of a prompt (see [`next_uses`]).
pub(crate) struct NextUses {
    /// Tokens to the next occurrence; 0: none (or too far).
    distance: Vec<u16>,
    cols: usize,
}

impl NextUses {
    /// No occurrence is used again: every [`NextUses::get`] is [`NEVER`].
    pub(crate) fn none(cols: usize) -> NextUses {
        NextUses {
            distance: Vec::new(),
            cols: cols.max(1),
        }
    }

    /// Token of the next use of occurrence `i`, or [`NEVER`] (also for an
    /// occurrence past the table).
    pub(crate) fn get(&self, i: usize) -> u32 {
        match self.distance.get(i).copied().unwrap_or(0) {
            0 => NEVER,
            d => (i / self.cols) as u32 + u32::from(d),
        }
    }
}

/// Rows of one table kept for reuse, with a fixed byte budget.
pub(crate) struct ReuseStore {
    row_bytes: usize,
    /// Slots `0..fresh` of `row_bytes` each; grows by need up to `slots`.
    slab: Vec<u8>,
    /// Slots the budget allows.
    slots: u32,
    /// Slots handed out at least once (the slab's length in slots).
    fresh: u32,
    /// Row id -> (slot, token of its next use).
    index: RowMap<(u32, u32)>,
    /// (next use, row id) of every stored row, the largest on top: the one
    /// evicted first. A max-heap with lazy deletion: a move pushes the new
    /// pair and leaves the old one, which is skipped when it surfaces (it
    /// no longer matches `index`); rebuilt from `index` when stale pairs
    /// outnumber live ones. Why not an ordered set: its removal and insert
    /// per move were most of a prefill batch's bookkeeping (8K Qwen4-Exp
    /// prefill, 2-core VM: 15-17 ms of `keep_for_reuse` per prefill, with
    /// the device idle, as one table reads one batch at a time).
    by_next_use: BinaryHeap<(u32, u32)>,
    /// Slots below `fresh` that hold no row.
    free: Vec<u32>,
}

impl ReuseStore {
    /// A store of at most `budget_bytes / row_bytes` rows; `None` when that
    /// is zero rows (reuse off).
    pub(crate) fn new(budget_bytes: u64, row_bytes: usize) -> Option<ReuseStore> {
        let slots = budget_bytes / row_bytes.max(1) as u64;
        // Slot numbers are u32; a budget beyond 4G rows is capped.
        let slots = u32::try_from(slots).unwrap_or(u32::MAX - 1) as usize;
        if slots == 0 || row_bytes == 0 {
            return None;
        }
        Some(ReuseStore {
            row_bytes,
            slab: Vec::new(),
            slots: slots as u32,
            fresh: 0,
            index: RowMap::default(),
            by_next_use: BinaryHeap::new(),
            free: Vec::new(),
        })
    }

    /// A slot holding no row: a freed one, else a new one at the slab's
    /// end while the budget allows.
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        if self.fresh == self.slots {
            return None;
        }
        let len = (self.fresh as usize + 1) * self.row_bytes;
        if len > self.slab.capacity() {
            // Doubling, but never past the budget.
            let cap = (self.slab.capacity() * 2)
                .max(len)
                .min(self.slots as usize * self.row_bytes);
            self.slab.reserve_exact(cap - self.slab.len());
        }
        self.slab.resize(len, 0);
        self.fresh += 1;
        Some(self.fresh - 1)
    }

    /// Bytes the slab holds now: it grows with the rows kept.
    pub(crate) fn slab_bytes(&self) -> usize {
        self.slab.capacity()
    }

    /// The stored bytes of `row`, if it is held.
    pub(crate) fn get(&self, row: u32) -> Option<&[u8]> {
        let &(slot, _) = self.index.get(&row)?;
        let at = slot as usize * self.row_bytes;
        Some(&self.slab[at..at + self.row_bytes])
    }

    /// Rows held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether `row` is held.
    pub(crate) fn contains(&self, row: u32) -> bool {
        self.index.contains_key(&row)
    }

    /// Slots not holding a row.
    pub(crate) fn free_slots(&self) -> usize {
        self.free.len() + (self.slots - self.fresh) as usize
    }

    /// Records that `row` (its bytes `bytes`, just delivered) is next needed
    /// at token `next_use`: keeps it, moves it, or drops it, by Belady's
    /// rule. `bytes` is ignored when the row is already held.
    pub(crate) fn update(&mut self, row: u32, next_use: u32, bytes: &[u8]) {
        if let Some(held) = self.index.get_mut(&row) {
            // Held: moved (its old pair goes stale) or, after its last
            // use, dropped.
            if next_use == NEVER {
                let slot = held.0;
                self.index.remove(&row);
                self.free.push(slot);
            } else {
                held.1 = next_use;
                self.push_pair(next_use, row);
            }
            return;
        }
        if next_use == NEVER || bytes.len() != self.row_bytes {
            return;
        }
        if self.free_slots() == 0 && !self.evict_later_than(next_use) {
            return; // every held row is needed sooner than this one
        }
        let Some(slot) = self.take_slot() else { return };
        let at = slot as usize * self.row_bytes;
        self.slab[at..at + self.row_bytes].copy_from_slice(bytes);
        self.index.insert(row, (slot, next_use));
        self.push_pair(next_use, row);
    }

    /// Records `row`'s next use in the heap, rebuilding it from the index
    /// first when stale pairs outnumber live ones (so it stays within
    /// twice the store's slots, plus a constant).
    fn push_pair(&mut self, next_use: u32, row: u32) {
        if self.by_next_use.len() > 2 * self.index.len() + 1024 {
            self.by_next_use = self
                .index
                .iter()
                .filter(|&(&r, _)| r != row)
                .map(|(&r, &(_, next))| (next, r))
                .collect();
        }
        self.by_next_use.push((next_use, row));
    }

    /// Evicts the row needed farthest in the future if that is later than
    /// `next_use`; tells whether a slot was freed.
    fn evict_later_than(&mut self, next_use: u32) -> bool {
        while let Some(&(last, row)) = self.by_next_use.peek() {
            let held = self.index.get(&row).copied();
            if held.map(|(_, next)| next) != Some(last) {
                self.by_next_use.pop(); // stale: moved or dropped since
                continue;
            }
            if last <= next_use {
                return false;
            }
            self.by_next_use.pop();
            if let Some((slot, _)) = held {
                self.index.remove(&row);
                self.free.push(slot);
            }
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_uses_point_at_the_next_token() {
        // 2 columns: tokens [5, 7], [6, 8], [5, 9], [6, 7]
        let rows = [5, 7, 6, 8, 5, 9, 6, 7];
        let next = next_uses(rows.len(), 2, |i| rows[i]);
        let got: Vec<u32> = (0..rows.len()).map(|i| next.get(i)).collect();
        assert_eq!(got, vec![2, 3, 3, NEVER, NEVER, NEVER, NEVER, NEVER]);
    }

    #[test]
    fn far_next_uses_count_as_never() {
        // Row 1 at tokens 0 and 70,000; row 2 at tokens 1 and 65,535.
        let at = |i: usize| match i {
            0 | 70_000 => 1,
            1 | 65_535 => 2,
            _ => 3 + i as u32,
        };
        let next = next_uses(70_001, 1, at);
        assert_eq!(next.get(0), NEVER);
        assert_eq!(next.get(1), 65_535);
    }

    #[test]
    fn belady_evicts_the_farthest_and_refuses_later_rows() {
        let mut store = ReuseStore::new(2 * 4, 4).unwrap();
        store.update(1, 10, &[1; 4]);
        store.update(2, 20, &[2; 4]);
        store.update(3, 30, &[3; 4]); // later than all: refused
        assert!(store.get(3).is_none());
        store.update(4, 5, &[4; 4]); // evicts row 2 (next use 20)
        assert!(store.get(2).is_none());
        assert_eq!(store.get(4), Some(&[4u8; 4][..]));
        assert_eq!(store.get(1), Some(&[1u8; 4][..]));
        store.update(1, NEVER, &[]); // last use: dropped
        assert!(store.get(1).is_none());
        assert_eq!(store.len(), 1);
        store.update(4, 8, &[]); // moved, bytes kept
        assert_eq!(store.get(4), Some(&[4u8; 4][..]));
    }

    #[test]
    fn the_slab_grows_with_the_rows_held_up_to_the_budget() {
        let mut store = ReuseStore::new(1000 * 8, 8).unwrap();
        assert_eq!(store.slab_bytes(), 0, "nothing held, nothing allocated");
        assert_eq!(store.free_slots(), 1000);
        for row in 0..10 {
            store.update(row, 100 + row, &[row as u8; 8]);
        }
        assert!(store.slab_bytes() < 1000 * 8 / 4, "{}", store.slab_bytes());
        for row in 10..5000 {
            store.update(row, 100 + row, &[row as u8; 8]);
        }
        // Full: the budget, never more; the earliest next uses are kept.
        assert_eq!(store.slab_bytes(), 1000 * 8);
        assert_eq!(store.free_slots(), 0);
        assert_eq!(store.len(), 1000);
        assert_eq!(store.get(999), Some(&[231u8; 8][..]));
        assert!(store.get(1000).is_none());
        // A slot freed by a last use is taken again before the slab grows.
        store.update(3, NEVER, &[]);
        store.update(6000, 50, &[7; 8]);
        assert_eq!(store.get(6000), Some(&[7u8; 8][..]));
        assert_eq!(store.slab_bytes(), 1000 * 8);
    }

    /// The store against a plain list doing what `update` documents, over
    /// random moves, drops and inserts of a few rows (so moves, stale
    /// pairs and heap rebuilds all happen): the same rows held, with the
    /// same next uses and bytes, after every call.
    #[test]
    fn random_updates_hold_what_beladys_rule_holds() {
        let mut rng = crate::splitmix::SplitMix64(7);
        let mut store = ReuseStore::new(16 * 2, 2).unwrap();
        let mut model: Vec<(u32, u32, [u8; 2])> = Vec::new();
        for step in 0..20_000u32 {
            let row = rng.below(40) as u32;
            let next = match rng.below(8) {
                0 => NEVER,
                _ => rng.below(1_000) as u32,
            };
            let bytes = [row as u8, step as u8];
            store.update(row, next, &bytes);
            if let Some(i) = model.iter().position(|e| e.0 == row) {
                if next == NEVER {
                    model.remove(i);
                } else {
                    model[i].1 = next;
                }
            } else if next != NEVER {
                let room = model.len() < 16 || {
                    let far = (0..model.len()).max_by_key(|&i| (model[i].1, model[i].0));
                    match far {
                        Some(i) if model[i].1 > next => {
                            model.remove(i);
                            true
                        }
                        _ => false,
                    }
                };
                if room {
                    model.push((row, next, bytes));
                }
            }
            assert_eq!(store.len(), model.len(), "step {step}");
            for &(row, next, bytes) in &model {
                assert_eq!(store.get(row), Some(&bytes[..]), "step {step}, row {row}");
                assert_eq!(store.index[&row].1, next, "step {step}, row {row}");
            }
            assert!(store.by_next_use.len() <= 2 * 16 + 1025, "step {step}");
        }
    }

    #[test]
    fn zero_budget_is_off() {
        assert!(ReuseStore::new(100, 264).is_none());
        assert!(ReuseStore::new(264, 264).is_some());
    }
}
