//! Tests of the CPU transformer: prefill in either sweep gives the same bits,
//! Engram rows change the output, driver mistakes are reported.

use super::layers::{Rng, Stream};
use super::*;
use engram::codec::ROW_DIM;

/// How a test drives the prefill.
#[derive(Clone, Copy, Debug)]
enum Sweep {
    /// Every chunk through layer 0, then layer 1, ...
    Layer,
    /// Chunk 0 through every layer, then chunk 1, ...
    Chunk,
}

/// A sequence and the rows of each table at each of its positions.
struct Case {
    shape: CpuShape,
    engram_layers: Vec<u32>,
    prompt: Vec<u32>,
    decode: Vec<u32>,
    rows_per_token: usize,
    /// `[table][position][rows_per_token * ROW_DIM]`, flattened.
    rows: Vec<Vec<f32>>,
}

impl Case {
    fn tiny() -> Case {
        let shape = CpuShape::parse("layers=4,dim=16,heads=2,ffn=32,conv=3,seed=7").unwrap();
        Case::new(shape, vec![1, 2], 40, 5, 3)
    }

    fn new(shape: CpuShape, engram_layers: Vec<u32>, prompt: u32, decode: u32, rpt: usize) -> Case {
        let positions = (prompt + decode) as usize;
        let rows = (0..engram_layers.len() as u64)
            .map(|t| Rng::stream(99, Stream::Embedding, t).fill(positions * rpt * ROW_DIM, 1.0))
            .collect();
        Case {
            shape,
            engram_layers,
            // Token ids far apart, including the extremes of u32.
            prompt: (0..prompt).map(|i| i.wrapping_mul(0x9E37_79B9)).collect(),
            decode: (0..decode).map(|i| u32::MAX - i).collect(),
            rows_per_token: rpt,
            rows,
        }
    }

    /// The rows of `layer` over `range`, if it is an Engram layer.
    fn rows_at(&self, layer: u32, range: Range<usize>) -> Option<&[f32]> {
        let per = self.rows_per_token * ROW_DIM;
        let table = self.engram_layers.iter().position(|&l| l == layer)?;
        Some(&self.rows[table][range.start * per..range.end * per])
    }

    /// Runs the prefill in `sweep` order with `chunk`-token chunks, then
    /// the decode steps.
    fn run(&self, sweep: Sweep, chunk: usize) -> CpuCompute {
        let mut cpu = CpuCompute::new(self.shape.clone(), &self.engram_layers).unwrap();
        let n = self.prompt.len();
        let chunks: Vec<Range<usize>> = (0..n)
            .step_by(chunk)
            .map(|s| s..(s + chunk).min(n))
            .collect();
        let mut pairs = Vec::new();
        for outer in 0..self.shape.layers.max(chunks.len() as u32) {
            for inner in 0..self.shape.layers.max(chunks.len() as u32) {
                let (layer, c) = match sweep {
                    Sweep::Layer => (outer, inner),
                    Sweep::Chunk => (inner, outer),
                };
                if layer < self.shape.layers && (c as usize) < chunks.len() {
                    pairs.push((layer, chunks[c as usize].clone()));
                }
            }
        }
        cpu.begin_prefill(&self.prompt);
        for (layer, range) in pairs {
            cpu.prefill_layer(layer, range.clone(), self.rows_at(layer, range));
        }
        for (i, &token) in self.decode.iter().enumerate() {
            let p = n + i;
            cpu.begin_step(token);
            for layer in 0..self.shape.layers {
                cpu.step_layer(layer, self.rows_at(layer, p..p + 1));
            }
        }
        cpu
    }

    fn checksum(&self, sweep: Sweep, chunk: usize) -> String {
        let cpu = self.run(sweep, chunk);
        assert_eq!(cpu.error(), None);
        cpu.output_checksum().unwrap()
    }
}

#[test]
fn sweep_orders_and_chunk_sizes_give_the_same_bits() {
    let case = Case::tiny();
    let reference = case.run(Sweep::Layer, 40);
    assert_eq!(reference.error(), None);
    assert_eq!(reference.blocks[3].done, 45);
    for (sweep, chunk) in [
        (Sweep::Chunk, 40),
        (Sweep::Chunk, 7),
        (Sweep::Layer, 16),
        (Sweep::Chunk, 1),
        (Sweep::Layer, 3),
    ] {
        let other = case.run(sweep, chunk);
        assert_eq!(other.error(), None);
        // Every position's state, not only the digest.
        let same = reference
            .hidden
            .iter()
            .zip(&other.hidden)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{sweep:?} sweep, {chunk}-token chunks");
        assert_eq!(other.output_checksum(), reference.output_checksum());
    }
}

#[test]
fn the_checksum_is_none_before_a_position_finishes() {
    let case = Case::tiny();
    let mut cpu = CpuCompute::new(case.shape.clone(), &case.engram_layers).unwrap();
    assert_eq!(cpu.output_checksum(), None);
    cpu.begin_prefill(&case.prompt);
    for layer in 0..3 {
        cpu.prefill_layer(layer, 0..10, case.rows_at(layer, 0..10));
    }
    assert_eq!(cpu.output_checksum(), None);
    cpu.prefill_layer(3, 0..10, None);
    let first = cpu.output_checksum().unwrap();
    assert_eq!(first.len(), 16, "{first}");
}

#[test]
fn one_row_value_of_either_table_changes_the_output_but_not_earlier_positions() {
    let base = Case::tiny();
    let reference = base.run(Sweep::Chunk, 8);
    let per = base.rows_per_token * ROW_DIM;
    // Table 0 and 1 in the prompt (position 25), and in a decode step.
    for (table, position) in [(0, 25), (1, 25), (1, 42)] {
        let mut case = Case::tiny();
        case.rows[table][position * per + 300] += 0.25;
        let changed = case.run(Sweep::Chunk, 8);
        assert_ne!(
            changed.output_checksum(),
            reference.output_checksum(),
            "table {table}, position {position}"
        );
        // Causal: positions before the changed one keep their bits.
        let dim = base.shape.dim;
        let before = position * dim;
        assert_eq!(changed.hidden[..before], reference.hidden[..before]);
        assert_ne!(
            changed.hidden[before..before + dim],
            reference.hidden[before..before + dim]
        );
    }
}

#[test]
fn decode_is_deterministic_and_adds_to_the_digest() {
    let case = Case::tiny();
    let a = case.checksum(Sweep::Layer, 10);
    let b = case.checksum(Sweep::Layer, 10);
    assert_eq!(a, b);
    let mut prefill_only = Case::tiny();
    prefill_only.decode.clear();
    assert_ne!(prefill_only.checksum(Sweep::Layer, 10), a);
    let mut other_seed = Case::tiny();
    other_seed.shape.seed += 1;
    assert_ne!(other_seed.checksum(Sweep::Layer, 10), a);
    let mut other_token = Case::tiny();
    other_token.decode[2] = 5;
    assert_ne!(other_token.checksum(Sweep::Layer, 10), a);
}

#[test]
fn a_new_prefill_starts_a_new_sequence() {
    let case = Case::tiny();
    let mut cpu = case.run(Sweep::Layer, 40);
    let first = cpu.output_checksum();
    cpu.begin_prefill(&case.prompt);
    for layer in 0..case.shape.layers {
        cpu.prefill_layer(layer, 0..40, case.rows_at(layer, 0..40));
    }
    let mut prefill_only = Case::tiny();
    prefill_only.decode.clear();
    assert_eq!(
        cpu.output_checksum(),
        Some(prefill_only.checksum(Sweep::Chunk, 9))
    );
    assert_ne!(cpu.output_checksum(), first);
}

#[test]
fn full_width_rows_of_v4_1_work() {
    // 24 rows per token, Engram layers 1 and 14 as in DeepSeek V4.1.
    let shape = CpuShape::parse("layers=16,dim=16,heads=4,ffn=16,conv=4").unwrap();
    let case = Case::new(shape, vec![1, 14], 6, 2, 24);
    assert_eq!(
        case.checksum(Sweep::Layer, 4),
        case.checksum(Sweep::Chunk, 3)
    );
}

#[test]
fn bad_engram_layers_and_shapes_are_errors() {
    let shape = CpuShape::parse("layers=4,dim=16,heads=2").unwrap();
    for (layers, needle) in [
        (&[][..], "no Engram layer"),
        (&[1, 4][..], "table 1 is at layer 4"),
        (&[2, 2][..], "tables 0 and 1 are both at layer 2"),
    ] {
        match CpuCompute::new(shape.clone(), layers) {
            Err(Error::InvalidArgument(why)) => assert!(why.contains(needle), "{why}"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("{layers:?} accepted"),
        }
    }
    let mut odd = shape.clone();
    odd.heads = 3;
    assert!(CpuCompute::new(odd, &[1]).is_err());
    let mut empty = shape;
    empty.conv = 0;
    assert!(CpuCompute::new(empty, &[1]).is_err());
}

/// Runs `mistake` on a fresh tiny model after `begin_prefill` and returns
/// the recorded error.
fn mistake(what: impl FnOnce(&mut CpuCompute, &Case)) -> String {
    let case = Case::tiny();
    let mut cpu = CpuCompute::new(case.shape.clone(), &case.engram_layers).unwrap();
    cpu.begin_prefill(&case.prompt);
    what(&mut cpu, &case);
    // Later calls do nothing, and do not panic.
    cpu.prefill_layer(0, 0..40, None);
    cpu.begin_step(1);
    cpu.step_layer(0, None);
    let sum = cpu.output_checksum().unwrap();
    let why = cpu.error().unwrap().to_string();
    assert_eq!(sum, format!("error:{why}"));
    why
}

#[test]
fn driver_mistakes_are_reported_not_panicked() {
    let missing = mistake(|cpu, case| {
        cpu.prefill_layer(0, 0..8, None);
        cpu.prefill_layer(1, 0..8, None);
        let _ = case;
    });
    assert!(
        missing.starts_with("missing-rows: Engram layer 1 (table 0)"),
        "{missing}"
    );
    let short = mistake(|cpu, case| {
        cpu.prefill_layer(0, 0..8, None);
        let rows = case.rows_at(1, 0..8).unwrap();
        cpu.prefill_layer(1, 0..8, Some(&rows[1..]));
    });
    assert!(short.starts_with("bad-rows"), "{short}");
    let changed = mistake(|cpu, case| {
        cpu.prefill_layer(0, 0..8, None);
        let rows = case.rows_at(1, 0..8).unwrap();
        cpu.prefill_layer(1, 0..4, Some(&rows[..4 * 3 * ROW_DIM]));
        cpu.prefill_layer(1, 4..8, Some(&rows[..4 * 2 * ROW_DIM]));
    });
    let (now, before) = (2 * ROW_DIM, 3 * ROW_DIM);
    assert!(
        changed.ends_with(&format!("{now} values per token, {before} before")),
        "{changed}"
    );
    let unexpected = mistake(|cpu, case| cpu.prefill_layer(0, 0..8, case.rows_at(1, 0..8)));
    assert!(unexpected.starts_with("unexpected-rows"), "{unexpected}");
    let skipped = mistake(|cpu, _| cpu.prefill_layer(0, 8..16, None));
    assert!(skipped.contains("in order"), "{skipped}");
    let early = mistake(|cpu, case| cpu.prefill_layer(1, 0..8, case.rows_at(1, 0..8)));
    assert!(early.contains("before layer 0 reached 8"), "{early}");
    let beyond = mistake(|cpu, _| cpu.prefill_layer(0, 0..41, None));
    assert!(beyond.contains("0..40"), "{beyond}");
    let no_layer = mistake(|cpu, _| cpu.prefill_layer(4, 0..8, None));
    assert!(no_layer.contains("out of 0..4"), "{no_layer}");
    let unfinished = mistake(|cpu, _| cpu.begin_step(3));
    assert!(
        unfinished.starts_with("begin_step: layer 0"),
        "{unfinished}"
    );
}

#[test]
fn empty_ranges_run_nothing() {
    let case = Case::tiny();
    let mut cpu = CpuCompute::new(case.shape.clone(), &case.engram_layers).unwrap();
    cpu.begin_prefill(&case.prompt);
    // Rows of an empty range are not looked at (not even their count).
    cpu.prefill_layer(0, 0..0, None);
    cpu.prefill_layer(1, 0..0, Some(&[1.0]));
    for layer in 0..case.shape.layers {
        cpu.prefill_layer(layer, 0..40, case.rows_at(layer, 0..40));
        cpu.prefill_layer(layer, 40..40, None);
    }
    let mut prefill_only = Case::tiny();
    prefill_only.decode.clear();
    assert_eq!(
        cpu.output_checksum(),
        Some(prefill_only.checksum(Sweep::Layer, 40))
    );
}

#[test]
fn a_step_before_any_position_is_reported() {
    let case = Case::tiny();
    let mut cpu = CpuCompute::new(case.shape.clone(), &case.engram_layers).unwrap();
    cpu.step_layer(0, None);
    assert!(cpu
        .output_checksum()
        .unwrap()
        .starts_with("error:step_layer(0)"));
}

#[test]
fn compute_time_is_measured_and_reset() {
    let mut cpu = Case::tiny().run(Sweep::Layer, 40);
    assert!(cpu.take_compute_time() > Duration::ZERO);
    assert_eq!(cpu.take_compute_time(), Duration::ZERO);
    assert_eq!(cpu.layers(), 4);
    assert!(cpu.wants_rows());
}
