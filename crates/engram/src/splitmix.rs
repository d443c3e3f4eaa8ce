//! SplitMix64: the small deterministic generator the crate's fault injection,
//! the benchmarks' random rows and the replay's random weights draw from, so
//! none needs a random-number crate and a seed reproduces a run.

/// The golden-ratio increment of the generator's state (also a term of the
/// Qwen4-Exp multiplier seeds).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finalizer: a well-spread hash of `z`.
pub fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A well-spread hash of `x`: one step of the generator from state `x`
/// (add [`GAMMA`], then [`finalize`]): the standard `splitmix64(x)`.
pub fn mix(x: u64) -> u64 {
    finalize(x.wrapping_add(GAMMA))
}

/// A SplitMix64 generator; its state is the seed until the first draw.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        finalize(self.0)
    }

    /// Uniform in `0..n` (`0` for `n == 0`), by a multiply and shift: the
    /// bias is below 2^-30 for `n` < 2^34.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of SplitMix64 seeded with 1234567 in the
        // reference C implementation (Vigna's splitmix64.c).
        let mut g = SplitMix64(1_234_567);
        assert_eq!(g.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(g.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(mix(1_234_567), 6_457_827_717_110_365_317);
    }

    #[test]
    fn below_stays_in_range() {
        let mut g = SplitMix64(7);
        assert!((0..1000).all(|_| g.below(10) < 10));
        assert_eq!(g.below(0), 0);
    }
}
