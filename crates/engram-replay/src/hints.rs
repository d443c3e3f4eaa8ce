//! What the replay offers the engine as guesses of the next tokens.

use std::collections::VecDeque;

use engram::{Error, Hints, Result};

/// Tokens of each draft chain the bench offers: a multi-token-prediction
/// head's guesses of the next two tokens.
///
/// Why two and not one: the chain's second token is the next step's first,
/// so its rows are read a whole step ahead at no more reads per step (the
/// next call offers it again and finds it read).
pub const DRAFT_CHAIN: usize = 2;

/// Hints given to the `full` schedule during decode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HintMode {
    /// None.
    None,
    /// The engine's own prompt-lookup predictor (no help from the runtime).
    Lookup,
    /// Stands in for a runtime's multi-token-prediction drafts and its
    /// top-3 (see [`Drafter`]): right after each step begins, a draft
    /// chain of the next [`DRAFT_CHAIN`] tokens, each right at top-1 with
    /// probability `top1`, and the next token's alternatives 2 and 3, the
    /// true token among them with probability `(top3 - top1) / (1 -
    /// top1)` when the draft is wrong.
    Draft {
        /// Probability the draft (the top-1 guess) is right.
        top1: f64,
        /// Probability the true token is within the top 3 (`>= top1`;
        /// equal: no alternatives are offered).
        top3: f64,
    },
}

impl HintMode {
    /// The default of `engram bench`: drafts right 79% at top-1 (a
    /// published MTP acceptance rate) and 95% within top-3.
    pub const DEFAULT: HintMode = HintMode::Draft {
        top1: 0.79,
        top3: 0.95,
    };

    /// Parses `none`, `lookup`, `draft:P` (top-1 right with probability
    /// P, no alternatives) or `draft:P,Q` (and within top-3 with Q; 0 <= P
    /// <= Q <= 1).
    pub fn parse(text: &str) -> Result<HintMode> {
        match text {
            "none" => return Ok(HintMode::None),
            "lookup" => return Ok(HintMode::Lookup),
            _ => {}
        }
        let prob = |p: &str| p.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p));
        text.strip_prefix("draft:")
            .and_then(|rest| match rest.split_once(',') {
                None => prob(rest).map(|p| (p, p)),
                Some((p, q)) => prob(p).zip(prob(q)),
            })
            .filter(|(p, q)| p <= q)
            .map(|(top1, top3)| HintMode::Draft { top1, top3 })
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "--hints {text:?}: expected none, lookup, draft:P or draft:P,Q \
                     with 0 <= P <= Q <= 1"
                ))
            })
    }

    /// The name in reports (`none`, `lookup`, `draft:0.79`,
    /// `draft:0.79,0.95`).
    pub fn label(self) -> String {
        match self {
            HintMode::None => "none".into(),
            HintMode::Lookup => "lookup".into(),
            HintMode::Draft { top1, top3 } if top1 == top3 => format!("draft:{top1}"),
            HintMode::Draft { top1, top3 } => format!("draft:{top1},{top3}"),
        }
    }
}

/// One step's hints, owned ([`Offer::hints`] borrows them as [`Hints`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offer {
    /// The draft chain.
    pub draft: Vec<u32>,
    /// Its per-token probabilities.
    pub draft_probs: Vec<f32>,
    /// Alternatives 2 and 3 of the next token.
    pub alternatives: Vec<u32>,
    /// Their probabilities.
    pub alternative_probs: Vec<f32>,
}

impl Offer {
    /// The offer as the engine takes it.
    pub fn hints(&self) -> Hints<'_> {
        Hints::draft(&self.draft)
            .with_draft_probs(&self.draft_probs)
            .with_alternatives(&self.alternatives, &self.alternative_probs)
    }
}

/// Draws the hints: deterministic for a seed, so every schedule and every
/// run sees the same right and wrong guesses.
///
/// The model: each position's ranked top-3 is drawn once (so the chain's
/// second token is the next step's draft). With probability `top1` the
/// true token is ranked first; else with probability `(top3 - top1) / (1 -
/// top1)` it is second or third (either equally), else it is not among
/// them. The other ranks are distinct wrong tokens. The probabilities
/// attached are the model's own rates: `top1` for each draft token (given
/// the chain before it), `(top3 - top1) / 2` for each alternative.
#[derive(Debug, Clone)]
pub struct Drafter {
    state: u64,
    top1: f64,
    top3: f64,
    vocab: u32,
    /// The ranked guesses of positions drawn ahead, oldest first.
    drawn: VecDeque<(usize, [u32; 3])>,
}

impl Drafter {
    /// A drafter right at top-1 with probability `top1` and within top-3
    /// with `top3` over a vocabulary of `vocab` tokens.
    pub fn new(seed: u64, top1: f64, top3: f64, vocab: u32) -> Drafter {
        Drafter {
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            top1,
            top3: top3.max(top1),
            vocab: vocab.max(4),
            drawn: VecDeque::new(),
        }
    }

    /// The hints offered right after the step of `tokens[at]` began:
    /// guesses of `tokens[at + 1..]` (those the replay will decode).
    pub fn offer(&mut self, tokens: &[u32], at: usize) -> Offer {
        // Positions before the next one are decoded: forget them.
        while self.drawn.front().is_some_and(|&(p, _)| p <= at) {
            self.drawn.pop_front();
        }
        let mut offer = Offer::default();
        for pos in (at + 1..tokens.len()).take(DRAFT_CHAIN) {
            let ranked = self.ranked(pos, tokens[pos]);
            offer.draft.push(ranked[0]);
            offer.draft_probs.push(self.top1 as f32);
            if pos == at + 1 && self.top3 > self.top1 {
                offer.alternatives.extend_from_slice(&ranked[1..]);
                let p = ((self.top3 - self.top1) / 2.0) as f32;
                offer.alternative_probs.extend_from_slice(&[p, p]);
            }
        }
        offer
    }

    /// The top-3 of position `pos`, whose token is `actual`: drawn at its
    /// first use, the same after.
    fn ranked(&mut self, pos: usize, actual: u32) -> [u32; 3] {
        if let Some(&(_, r)) = self.drawn.iter().find(|(p, _)| *p == pos) {
            return r;
        }
        let rank = if self.roll() < self.top1 {
            Some(0)
        } else if self.roll() < (self.top3 - self.top1) / (1.0 - self.top1) {
            Some(1 + (self.next() & 1) as usize)
        } else {
            None
        };
        let mut ranked = [actual; 3];
        for i in 0..3 {
            if Some(i) != rank {
                ranked[i] = self.wrong(actual, &ranked[..i]);
            }
        }
        self.drawn.push_back((pos, ranked));
        ranked
    }

    /// A token other than `actual` and those in `taken`.
    fn wrong(&mut self, actual: u32, taken: &[u32]) -> u32 {
        loop {
            let t = (self.next() % u64::from(self.vocab)) as u32;
            if t != actual && !taken.contains(&t) {
                return t;
            }
        }
    }

    /// Uniform in [0, 1).
    fn roll(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_modes() {
        assert_eq!(HintMode::parse("none").unwrap(), HintMode::None);
        assert_eq!(HintMode::parse("lookup").unwrap(), HintMode::Lookup);
        assert_eq!(
            HintMode::parse("draft:0.79").unwrap(),
            HintMode::Draft {
                top1: 0.79,
                top3: 0.79
            }
        );
        assert_eq!(
            HintMode::parse("draft:0.79,0.95").unwrap(),
            HintMode::DEFAULT
        );
        assert_eq!(HintMode::DEFAULT.label(), "draft:0.79,0.95");
        assert_eq!(HintMode::parse("draft:0.5").unwrap().label(), "draft:0.5");
        for bad in [
            "draft",
            "draft:1.5",
            "draft:x",
            "draft:0.9,0.8",
            "draft:0.5,",
            "mtp",
            "",
        ] {
            assert!(HintMode::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn drafts_are_right_at_top1_and_top3_at_the_asked_rates() {
        let tokens: Vec<u32> = (0..20_001u32).map(|i| i % 1000).collect();
        let mut d = Drafter::new(7, 0.79, 0.95, 1000);
        let (mut top1, mut top3) = (0u32, 0u32);
        for at in 0..20_000 {
            let offer = d.offer(&tokens, at);
            let next = tokens[at + 1];
            assert_eq!(offer.draft.len(), (tokens.len() - at - 1).min(DRAFT_CHAIN));
            assert_eq!(offer.alternatives.len(), 2);
            assert_eq!(offer.draft_probs, vec![0.79f32; offer.draft.len()]);
            assert!(offer
                .alternative_probs
                .iter()
                .all(|&p| (p - 0.08).abs() < 1e-6));
            let mut all = vec![offer.draft[0]];
            all.extend(&offer.alternatives);
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len(), 3, "three distinct guesses");
            top1 += u32::from(offer.draft[0] == next);
            top3 += u32::from(offer.draft[0] == next || offer.alternatives.contains(&next));
        }
        let rate = |n: u32| f64::from(n) / 20_000.0;
        assert!((rate(top1) - 0.79).abs() < 0.015, "{}", rate(top1));
        assert!((rate(top3) - 0.95).abs() < 0.01, "{}", rate(top3));
    }

    #[test]
    fn a_chain_second_token_is_the_next_steps_draft() {
        let tokens: Vec<u32> = (0..50).collect();
        let mut d = Drafter::new(3, 0.5, 0.9, 100);
        let mut e = d.clone();
        for at in 0..47 {
            let now = d.offer(&tokens, at);
            let next = d.offer(&tokens, at + 1);
            assert_eq!(now.draft[1], next.draft[0], "step {at}");
            // Drawn once per position: the same whatever the call order.
            assert_eq!(e.offer(&tokens, at), now);
            e.offer(&tokens, at + 1);
        }
        let last = d.offer(&tokens, 48);
        assert_eq!(last.draft.len(), 1, "only tokens the replay decodes");
        assert!(d.offer(&tokens, 49).draft.is_empty());
        let mut none = Drafter::new(1, 0.0, 0.0, 4);
        for at in 0..40 {
            let offer = none.offer(&tokens, at);
            assert!(offer.alternatives.is_empty());
            assert_ne!(offer.draft[0], tokens[at + 1]);
        }
    }
}
