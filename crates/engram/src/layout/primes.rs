//! Primality and the prime walk that sizes every hash head.
//!
//! The DeepSeek reference walks each (table, order) up from
//! `engram_vocab_size - 1`, taking the next `n_heads` primes no earlier head
//! of any table or order has taken, so every head of the model gets a
//! distinct prime modulus. The primes taken before any walk are always the
//! first ones above `engram_vocab_size - 1`, so each walk skips exactly those
//! and continues where the previous one stopped: head `g` of the model (tables
//! in turn, columns in order within each) gets the `(g + 1)`-th prime
//! `>= engram_vocab_size`. That is also Qwen4-Exp's rule (head `g = L *
//! columns + h` takes the `(g + 1)`-th prime `>= ngram_vocab_size_base`),
//! and one walk up computes it without re-testing the taken primes.

use crate::{Error, Result};

/// `a * b mod m` without overflow.
fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    ((u128::from(a) * u128::from(b)) % u128::from(m)) as u64
}

fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut acc = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = mul_mod(acc, base, m);
        }
        base = mul_mod(base, base, m);
        exp >>= 1;
    }
    acc
}

/// Deterministic primality for every `u64`: Miller-Rabin with the first
/// twelve primes as bases, which has no strong pseudoprime below 3.3e24.
pub fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    for &p in &BASES {
        if n % p == 0 {
            return n == p;
        }
    }
    let shift = (n - 1).trailing_zeros();
    let odd = (n - 1) >> shift;
    BASES.iter().all(|&a| passes_strong_test(n, a, odd, shift))
}

/// One Miller-Rabin round: does `a` fail to witness that `n` is composite?
fn passes_strong_test(n: u64, a: u64, odd: u64, shift: u32) -> bool {
    let mut x = pow_mod(a, odd, n);
    if x == 1 || x == n - 1 {
        return true;
    }
    for _ in 1..shift {
        x = mul_mod(x, x, n);
        if x == n - 1 {
            return true;
        }
    }
    false
}

/// The smallest prime greater than `after`, if one fits `u32`.
fn next_prime(after: u64) -> Option<u64> {
    (after.checked_add(1)?..=u64::from(u32::MAX)).find(|&c| is_prime(c))
}

/// The primes of every table: `result[table]` holds one prime per column,
/// orders 2..=`max_ngram_size` in turn and `n_heads` heads within each;
/// column `c` of table `t` is the `(t * columns + c + 1)`-th prime
/// `>= engram_vocab_size`.
///
/// Fails if a prime would not fit a `u32` row id.
pub fn derive_primes(
    tables: usize,
    max_ngram_size: usize,
    n_heads: usize,
    engram_vocab_size: u64,
) -> Result<Vec<Vec<u32>>> {
    if engram_vocab_size == 0 {
        return Err(Error::layout(
            "engram_vocab_size",
            "is 0; the prime walk starts at engram_vocab_size - 1",
        ));
    }
    let columns = max_ngram_size.saturating_sub(1) * n_heads;
    let mut last = engram_vocab_size - 1;
    let mut all = Vec::with_capacity(tables);
    for _ in 0..tables {
        let mut table = Vec::with_capacity(columns);
        for _ in 0..columns {
            let prime = next_prime(last).ok_or_else(|| {
                Error::layout(
                    "engram_vocab_size",
                    format!("{engram_vocab_size} leaves no free prime below 2^32 for a head"),
                )
            })?;
            table.push(prime as u32);
            last = prime;
        }
        all.push(table);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial_division(n: u64) -> bool {
        n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
    }

    #[test]
    fn miller_rabin_agrees_with_trial_division() {
        for n in 0..20_000u64 {
            assert_eq!(is_prime(n), trial_division(n), "{n}");
        }
        for n in 15_999_000..16_001_000u64 {
            assert_eq!(is_prime(n), trial_division(n), "{n}");
        }
    }

    #[test]
    fn miller_rabin_large_known_values() {
        assert!(is_prime(18_446_744_073_709_551_557)); // largest u64 prime
        assert!(!is_prime(18_446_744_073_709_551_555));
        assert!(!is_prime(3_215_031_751)); // strong pseudoprime to 2, 3, 5, 7
        assert!(!is_prime(3_825_123_056_546_413_051)); // to bases 2..=23
        assert!(is_prime(4_294_967_291)); // largest u32 prime
    }

    #[test]
    fn walk_restarts_per_order_and_skips_taken_primes() {
        // Primes above 9: 11, 13, 17, 19, 23, 29, 31, 37, ...
        let p = derive_primes(2, 3, 2, 10).unwrap();
        assert_eq!(p, vec![vec![11, 13, 17, 19], vec![23, 29, 31, 37]]);
        // engram_vocab_size itself is a candidate when prime.
        assert_eq!(derive_primes(1, 2, 1, 11).unwrap(), vec![vec![11]]);
    }

    /// The reference's walk as it is written: per (table, order), up from
    /// `engram_vocab_size - 1`, skipping primes taken before.
    fn restarting_walk(tables: usize, n: usize, heads: usize, base: u64) -> Vec<Vec<u32>> {
        let mut taken = std::collections::HashSet::new();
        let mut all = Vec::new();
        for _ in 0..tables {
            let mut table = Vec::new();
            for _order in 2..=n {
                let mut from = base - 1;
                for _head in 0..heads {
                    let p = (from + 1..)
                        .find(|&c| trial_division(c) && !taken.contains(&c))
                        .unwrap();
                    taken.insert(p);
                    table.push(p as u32);
                    from = p;
                }
            }
            all.push(table);
        }
        all
    }

    #[test]
    fn one_walk_up_equals_the_restarting_walk() {
        for (tables, n, heads, base) in [(2, 4, 8, 1000), (3, 3, 5, 2), (1, 5, 3, 97), (2, 2, 1, 1)]
        {
            assert_eq!(
                derive_primes(tables, n, heads, base).unwrap(),
                restarting_walk(tables, n, heads, base),
                "{tables} {n} {heads} {base}"
            );
        }
    }

    #[test]
    fn walk_past_u32_is_an_error() {
        let err = derive_primes(1, 2, 2, u64::from(u32::MAX) - 10).unwrap_err();
        assert!(err.to_string().contains("engram_vocab_size"), "{err}");
    }
}
