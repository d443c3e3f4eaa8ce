//! NumPy's `default_rng` re-implemented bit for bit: `SeedSequence` (entropy
//! mixing), `PCG64` (XSL-RR 128/64) and `Generator.integers` for `int64`
//! (Lemire's bounded draws with rejection).
//!
//! The Engram multipliers are drawn with NumPy in the reference, so a layout
//! derived here must reproduce NumPy's stream exactly; only the pieces that
//! draw path uses are implemented. Checked against vectors produced by
//! `tests/reference/numpy_vectors.py`.

/// Words in the SeedSequence entropy pool (NumPy's default `pool_size`).
const POOL_SIZE: usize = 4;
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;

/// NumPy's `SeedSequence` for a non-negative integer seed and no spawn key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

/// The multiply-xorshift step NumPy applies to every word it reads; the
/// multiplier constant advances on each call, so it is passed by reference.
fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

/// Combines two pool words (NumPy's `mix`).
fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

/// Splits an integer into 32-bit words, least significant first; zero is one
/// zero word (NumPy's `_coerce_to_uint32_array` for a Python int).
fn entropy_words(mut entropy: u128) -> Vec<u32> {
    let mut words = Vec::with_capacity(4);
    loop {
        words.push(entropy as u32);
        entropy >>= 32;
        if entropy == 0 {
            return words;
        }
    }
}

impl SeedSequence {
    /// Builds the sequence NumPy builds for `SeedSequence(entropy)`.
    pub fn new(entropy: u128) -> Self {
        let words = entropy_words(entropy);
        let mut hash_const = INIT_A;
        let mut pool = [0u32; POOL_SIZE];
        for (i, slot) in pool.iter_mut().enumerate() {
            *slot = hashmix(words.get(i).copied().unwrap_or(0), &mut hash_const);
        }
        for src in 0..POOL_SIZE {
            for dst in 0..POOL_SIZE {
                if src != dst {
                    let h = hashmix(pool[src], &mut hash_const);
                    pool[dst] = mix(pool[dst], h);
                }
            }
        }
        for &word in words.iter().skip(POOL_SIZE) {
            for slot in pool.iter_mut() {
                let h = hashmix(word, &mut hash_const);
                *slot = mix(*slot, h);
            }
        }
        SeedSequence { pool }
    }

    /// The mixed entropy pool (NumPy's `SeedSequence.pool`).
    pub fn pool(&self) -> [u32; POOL_SIZE] {
        self.pool
    }

    /// `generate_state(n_words, dtype=np.uint32)`.
    pub fn generate_state_u32(&self, n_words: usize) -> Vec<u32> {
        let mut hash_const = INIT_B;
        (0..n_words)
            .map(|i| {
                let mut v = self.pool[i % POOL_SIZE] ^ hash_const;
                hash_const = hash_const.wrapping_mul(MULT_B);
                v = v.wrapping_mul(hash_const);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// `generate_state(n_words, dtype=np.uint64)`: pairs of 32-bit words,
    /// the first of each pair the low half (NumPy views the array in
    /// little-endian order).
    pub fn generate_state_u64(&self, n_words: usize) -> Vec<u64> {
        self.generate_state_u32(2 * n_words)
            .chunks_exact(2)
            .map(|pair| u64::from(pair[0]) | (u64::from(pair[1]) << 32))
            .collect()
    }
}

const PCG_MULTIPLIER: u128 = 0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645;

/// NumPy's `PCG64` bit generator (PCG XSL-RR 128/64), including the
/// half-word buffer behind `next_uint32`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pcg64 {
    state: u128,
    increment: u128,
    /// High half of the last 64-bit draw, served by the next `next_u32`.
    buffered_u32: Option<u32>,
}

impl Pcg64 {
    /// Seeds the generator the way `numpy.random.PCG64(seed)` does: four
    /// 64-bit words from the seed sequence give the initial state and stream.
    pub fn from_seed_sequence(seq: &SeedSequence) -> Self {
        let s = seq.generate_state_u64(4);
        let init_state = (u128::from(s[0]) << 64) | u128::from(s[1]);
        let init_seq = (u128::from(s[2]) << 64) | u128::from(s[3]);
        Self::from_state_and_sequence(init_state, init_seq)
    }

    /// PCG's `srandom`: state 0, odd increment from the stream id, one step,
    /// add the initial state, one more step.
    pub fn from_state_and_sequence(init_state: u128, init_seq: u128) -> Self {
        let mut rng = Pcg64 {
            state: 0,
            increment: (init_seq << 1) | 1,
            buffered_u32: None,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(init_state);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self
            .state
            .wrapping_mul(PCG_MULTIPLIER)
            .wrapping_add(self.increment);
    }

    /// One 64-bit output: advance, then xor-fold the new state and rotate it
    /// by its top six bits.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let folded = ((self.state >> 64) as u64) ^ (self.state as u64);
        folded.rotate_right((self.state >> 122) as u32)
    }

    /// One 32-bit output: the low half of a fresh 64-bit draw, or the high
    /// half of the previous one if it is still buffered.
    pub fn next_u32(&mut self) -> u32 {
        if let Some(high) = self.buffered_u32.take() {
            return high;
        }
        let draw = self.next_u64();
        self.buffered_u32 = Some((draw >> 32) as u32);
        draw as u32
    }
}

/// NumPy's `Generator` over `PCG64`, as returned by `default_rng(seed)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generator {
    bits: Pcg64,
}

/// Lemire's multiply-shift bounded draw in `0..=span`, rejecting the low
/// products that would bias the result: one body for both output widths
/// NumPy uses (`$word` outputs, their product in `$wide`).
macro_rules! lemire {
    ($(#[$doc:meta])* $name:ident, $word:ty, $wide:ty, $next:ident) => {
        $(#[$doc])*
        fn $name(&mut self, span: $word) -> $word {
            let bound = span + 1;
            let mut product = <$wide>::from(self.bits.$next()) * <$wide>::from(bound);
            if (product as $word) < bound {
                let threshold = bound.wrapping_neg() % bound;
                while (product as $word) < threshold {
                    product = <$wide>::from(self.bits.$next()) * <$wide>::from(bound);
                }
            }
            (product >> <$word>::BITS) as $word
        }
    };
}

impl Generator {
    /// `numpy.random.default_rng(seed)` for a non-negative integer seed.
    pub fn default_rng(seed: u128) -> Self {
        Generator {
            bits: Pcg64::from_seed_sequence(&SeedSequence::new(seed)),
        }
    }

    /// The underlying bit generator.
    pub fn bit_generator(&mut self) -> &mut Pcg64 {
        &mut self.bits
    }

    /// `integers(low, high, size=count, dtype=np.int64)`: `count` values in
    /// `[low, high)`. Returns `None` when `high <= low` (NumPy raises).
    pub fn integers_i64(&mut self, low: i64, high: i64, count: usize) -> Option<Vec<i64>> {
        if high <= low {
            return None;
        }
        // Span of the inclusive range [low, high - 1]; fits u64 for any i64 pair.
        let span = (high as i128 - 1 - low as i128) as u64;
        let draws = (0..count).map(|_| self.bounded_u64(span));
        Some(draws.map(|d| (low as i128 + d as i128) as i64).collect())
    }

    /// A uniform value in `[0, span]` drawn exactly as NumPy's
    /// `random_bounded_uint64_fill` (unmasked) draws it.
    fn bounded_u64(&mut self, span: u64) -> u64 {
        if span == 0 {
            0
        } else if span == u64::from(u32::MAX) {
            u64::from(self.bits.next_u32())
        } else if span < u64::from(u32::MAX) {
            u64::from(self.lemire_u32(span as u32))
        } else if span == u64::MAX {
            self.bits.next_u64()
        } else {
            self.lemire_u64(span)
        }
    }

    lemire!(
        /// Lemire's bounded draw on 32-bit outputs.
        lemire_u32, u32, u64, next_u32
    );
    lemire!(
        /// Lemire's bounded draw on 64-bit outputs with a 128-bit product.
        lemire_u64, u64, u128, next_u64
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_words_are_little_endian_and_zero_is_one_word() {
        assert_eq!(entropy_words(0), vec![0]);
        assert_eq!(entropy_words(0x1_0000_0002), vec![2, 1]);
    }

    #[test]
    fn empty_range_is_rejected_and_unit_range_returns_low() {
        let mut g = Generator::default_rng(0);
        assert_eq!(g.integers_i64(5, 5, 3), None);
        assert_eq!(g.integers_i64(-7, -6, 3), Some(vec![-7, -7, -7]));
    }
}
