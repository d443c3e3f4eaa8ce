//! What the replay offers the engine as guesses of the next token.

use engram::{Error, Result};

/// Hints given to the `full` schedule during decode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum HintMode {
    /// None.
    None,
    /// The engine's own prompt-lookup predictor (no help from the runtime).
    Lookup,
    /// Stands in for a runtime's multi-token-prediction drafts: right after
    /// each step begins, the token that follows is offered with
    /// probability `P`, else a wrong token. `P = 0.79` is a published MTP
    /// acceptance rate.
    Draft(f64),
}

impl HintMode {
    /// The default of `engram bench`: MTP-like drafts accepted 79% of the
    /// time.
    pub const DEFAULT: HintMode = HintMode::Draft(0.79);

    /// Parses `none`, `lookup` or `draft:P` (0 <= P <= 1).
    pub fn parse(text: &str) -> Result<HintMode> {
        match text {
            "none" => return Ok(HintMode::None),
            "lookup" => return Ok(HintMode::Lookup),
            _ => {}
        }
        text.strip_prefix("draft:")
            .and_then(|p| p.parse::<f64>().ok())
            .filter(|p| (0.0..=1.0).contains(p))
            .map(HintMode::Draft)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "--hints {text:?}: expected none, lookup or draft:P with P in [0, 1]"
                ))
            })
    }

    /// The name in reports (`none`, `lookup`, `draft:0.79`).
    pub fn label(self) -> String {
        match self {
            HintMode::None => "none".into(),
            HintMode::Lookup => "lookup".into(),
            HintMode::Draft(p) => format!("draft:{p}"),
        }
    }
}

/// Draws the draft hints: deterministic for a seed, so every schedule and
/// every run sees the same right and wrong guesses.
#[derive(Debug, Clone)]
pub struct Drafter {
    state: u64,
    accept: f64,
    vocab: u32,
}

impl Drafter {
    /// A drafter right with probability `accept` over a vocabulary of
    /// `vocab` tokens.
    pub fn new(seed: u64, accept: f64, vocab: u32) -> Drafter {
        Drafter {
            state: seed ^ 0x9e37_79b9_7f4a_7c15,
            accept,
            vocab: vocab.max(2),
        }
    }

    /// The guess offered for a next token that will be `actual`.
    pub fn guess(&mut self, actual: u32) -> u32 {
        let roll = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        if roll < self.accept {
            return actual;
        }
        // A wrong token: any other id of the vocabulary.
        let other = (self.next() % u64::from(self.vocab - 1)) as u32;
        if other >= actual.min(self.vocab - 1) {
            other + 1
        } else {
            other
        }
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
            HintMode::Draft(0.79)
        );
        for bad in ["draft", "draft:1.5", "draft:x", "mtp", ""] {
            assert!(HintMode::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn drafts_are_right_at_the_asked_rate_and_wrong_otherwise() {
        let mut d = Drafter::new(7, 0.79, 1000);
        let mut right = 0;
        for i in 0..20_000u32 {
            let actual = i % 1000;
            let g = d.guess(actual);
            assert!(g < 1000);
            right += u32::from(g == actual);
        }
        let rate = f64::from(right) / 20_000.0;
        assert!((rate - 0.79).abs() < 0.02, "{rate}");
        let mut never = Drafter::new(1, 0.0, 3);
        for actual in [0, 1, 2, 2, 1, 0] {
            assert_ne!(never.guess(actual), actual);
        }
    }
}
