//! engram's SeedSequence / PCG64 / Generator.integers against vectors made by
//! NumPy itself (tests/reference/numpy_vectors.py).

use engram::layout::numpy_rng::{Generator, Pcg64, SeedSequence};
use serde_json::Value;

fn vectors() -> Value {
    let text = include_str!("data/numpy_vectors.json");
    serde_json::from_str(text).unwrap()
}

fn num<T: std::str::FromStr>(v: &Value) -> T
where
    T::Err: std::fmt::Debug,
{
    match v {
        Value::String(s) => s.parse().unwrap(),
        other => other.to_string().parse().unwrap(),
    }
}

fn list<T: std::str::FromStr>(v: &Value) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    v.as_array().unwrap().iter().map(num).collect()
}

fn cases(section: &str) -> Vec<Value> {
    let v = vectors()[section].as_array().unwrap().clone();
    assert!(
        v.len() >= 10,
        "section {section} has only {} cases",
        v.len()
    );
    v
}

#[test]
fn seed_sequence_pool_and_state() {
    for case in cases("seed_sequence") {
        let seq = SeedSequence::new(num(&case["seed"]));
        assert_eq!(seq.pool().to_vec(), list::<u32>(&case["pool"]), "{case}");
        assert_eq!(seq.generate_state_u32(8), list::<u32>(&case["state_u32_8"]));
        assert_eq!(seq.generate_state_u64(4), list::<u64>(&case["state_u64_4"]));
    }
}

/// Each case of `section`: PCG64 seeded from the case's seed gives the
/// case's `key` list, one `next` call per value.
fn check_outputs<T>(section: &str, key: &str, next: impl Fn(&mut Pcg64) -> T)
where
    T: std::str::FromStr + PartialEq + std::fmt::Debug,
    T::Err: std::fmt::Debug,
{
    for case in cases(section) {
        let mut rng = Pcg64::from_seed_sequence(&SeedSequence::new(num(&case["seed"])));
        let want: Vec<T> = list(&case[key]);
        let got: Vec<T> = want.iter().map(|_| next(&mut rng)).collect();
        assert_eq!(got, want, "{section}: seed {}", case["seed"]);
    }
}

#[test]
fn pcg64_raw_outputs() {
    check_outputs("pcg64_raw", "u64", Pcg64::next_u64);
}

#[test]
fn pcg64_next_u32_buffers_high_halves() {
    check_outputs("pcg64_next_uint32", "u32", Pcg64::next_u32);
}

#[test]
fn generator_integers_int64() {
    let all = cases("integers_int64");
    let mut small_ranges = 0;
    for case in &all {
        let (low, high): (i64, i64) = (num(&case["low"]), num(&case["high"]));
        let want: Vec<i64> = list(&case["values"]);
        let got = Generator::default_rng(num(&case["seed"]))
            .integers_i64(low, high, want.len())
            .unwrap();
        assert_eq!(got, want, "{case}");
        if (high as i128 - low as i128) < 1 << 32 {
            small_ranges += 1;
        }
    }
    assert!(small_ranges >= 10 && all.len() - small_ranges >= 10);
}
