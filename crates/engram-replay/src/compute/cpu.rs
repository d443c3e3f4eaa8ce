//! A small real transformer on the CPU whose Engram layers use the rows they
//! are given, so a schedule that delivered a wrong row changes its output.
//!
//! Architecture: a token's embedding is drawn from its id; each of `layers`
//! layers is a pre-RMSNorm causal self-attention (rotary positions) and a
//! pre-RMSNorm SiLU MLP, both residual. At an Engram layer an Engram block
//! runs first: the token's rows (`rows_per_token x ROW_DIM` values, `e`)
//! give a key `Wk e` and a value `Wv e`; the gate
//! `sigmoid(rmsnorm(h) . rmsnorm(k) / sqrt(dim))` scales the value, and a
//! causal depthwise convolution over the last `conv` gated values is added
//! to the hidden state. Weights are random, drawn from the shape's seed.
//!
//! The driver may run the (layer, chunk) pairs of a prefill layer by layer
//! or chunk by chunk: the model keeps every position's hidden state and each
//! layer's attention cache and convolution history, and computes a position
//! the same way whatever the grouping, so both orders give the same bits.
//! [`CpuCompute::output_checksum`] digests the final hidden states.

mod layers;

use std::ops::Range;
use std::time::{Duration, Instant};

use engram::codec::ROW_DIM;
use engram::{Error, Result};

use self::layers::{embed, Block, EngramBlock, Scratch};
use super::Compute;

/// Dimensions of the CPU transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuShape {
    /// Layers (must exceed every Engram layer id of the model).
    pub layers: u32,
    /// Hidden size.
    pub dim: usize,
    /// Attention heads (`dim` must divide by it).
    pub heads: usize,
    /// MLP inner size.
    pub ffn: usize,
    /// Taps of the Engram layer's causal convolution.
    pub conv: usize,
    /// Seed of the random weights.
    pub seed: u64,
}

impl Default for CpuShape {
    fn default() -> Self {
        CpuShape {
            layers: 16,
            dim: 64,
            heads: 4,
            ffn: 128,
            conv: 4,
            seed: 0,
        }
    }
}

impl CpuShape {
    /// Parses what follows `cpu:`: `KEY=VALUE` pairs separated by commas,
    /// keys `layers`, `dim`, `heads`, `ffn`, `conv`, `seed`; the others keep
    /// their defaults (16 layers, dim 64, 4 heads, ffn 128, conv 4, seed 0).
    pub fn parse(text: &str) -> Result<CpuShape, String> {
        let mut shape = CpuShape::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not KEY=VALUE"))?;
            let number = value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{key}={value:?} is not a number"))?;
            let small = |limit: u64| {
                (1..=limit)
                    .contains(&number)
                    .then_some(number as usize)
                    .ok_or_else(|| format!("{key}={number} is not in 1..={limit}"))
            };
            match key.trim() {
                "layers" => shape.layers = small(256)? as u32,
                "dim" => shape.dim = small(4096)?,
                "heads" => shape.heads = small(64)?,
                "ffn" => shape.ffn = small(16384)?,
                "conv" => shape.conv = small(16)?,
                "seed" => shape.seed = number,
                other => return Err(format!("unknown key {other:?}")),
            }
        }
        shape.check()?;
        Ok(shape)
    }

    /// Says what is wrong with a shape built by hand (zero sizes, `dim` not
    /// a multiple of `heads`).
    fn check(&self) -> Result<(), String> {
        let sizes = [
            ("layers", self.layers as usize),
            ("dim", self.dim),
            ("heads", self.heads),
            ("ffn", self.ffn),
            ("conv", self.conv),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.dim % self.heads != 0 {
            return Err(format!(
                "dim {} does not divide by heads {}",
                self.dim, self.heads
            ));
        }
        Ok(())
    }
}

/// The CPU transformer.
///
/// A mistake of the driver (rows missing at an Engram layer, rows of the
/// wrong size, positions out of order) does not panic: the first one is
/// recorded ([`CpuCompute::error`]), later work is skipped, and
/// [`Compute::output_checksum`] returns `error:` and the message, which
/// matches no digest.
pub struct CpuCompute {
    shape: CpuShape,
    blocks: Vec<Block>,
    /// Hidden state of every position, `[position][dim]`, at the layer the
    /// position has reached.
    hidden: Vec<f32>,
    scratch: Scratch,
    error: Option<String>,
    spent: Duration,
}

impl CpuCompute {
    /// A transformer of `shape` whose layer `engram_layers[t]` consumes
    /// Engram table `t` (DeepSeek V4.1: `[1, 14]`).
    ///
    /// The Engram projections are built on first use, when the rows tell how
    /// many rows a token brings (`rows.len() / tokens / ROW_DIM`); building
    /// them is not counted as compute time.
    pub fn new(shape: CpuShape, engram_layers: &[u32]) -> Result<CpuCompute> {
        let bad = |why: String| Error::InvalidArgument(format!("cpu compute: {why}"));
        shape.check().map_err(bad)?;
        check_engram_layers(engram_layers, shape.layers).map_err(bad)?;
        let mut blocks: Vec<Block> = (0..shape.layers)
            .map(|layer| Block::new(&shape, layer))
            .collect();
        for (table, &layer) in engram_layers.iter().enumerate() {
            blocks[layer as usize].engram = Some(EngramBlock::new(&shape, table, layer));
        }
        Ok(CpuCompute {
            scratch: Scratch::new(shape.dim, shape.ffn, shape.dim / shape.heads),
            shape,
            blocks,
            hidden: Vec::new(),
            error: None,
            spent: Duration::ZERO,
        })
    }

    /// The first mistake of the driver in this sequence, if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Positions of the current sequence (prompt and decode steps so far).
    fn positions(&self) -> usize {
        self.hidden.len() / self.shape.dim
    }

    /// Runs `layer` over `range`, or records why it cannot.
    fn run(&mut self, layer: u32, range: Range<usize>, rows: Option<&[f32]>) {
        if self.error.is_some() {
            return;
        }
        if let Err(why) = self.check_order(layer, &range) {
            self.error = Some(why);
            return;
        }
        if range.is_empty() {
            // Nothing runs; rows (if any) are not looked at.
            return;
        }
        if let Err(why) = self.prepare_rows(layer, &range, rows) {
            self.error = Some(why);
            return;
        }
        let start = Instant::now();
        let dim = self.shape.dim;
        let hidden = &mut self.hidden[range.start * dim..range.end * dim];
        self.blocks[layer as usize].forward(hidden, rows, &mut self.scratch);
        self.spent += start.elapsed();
    }

    /// Checks that `layer` exists and that `range` is its next positions,
    /// which the layer below has already run over.
    fn check_order(&self, layer: u32, range: &Range<usize>) -> Result<(), String> {
        let positions = self.positions();
        let index = layer as usize;
        let Some(block) = self.blocks.get(index) else {
            return Err(format!("layer {layer} is out of 0..{}", self.shape.layers));
        };
        if range.start != block.done || range.end < range.start || range.end > positions {
            return Err(format!(
                "layer {layer} ran over positions {range:?}, but it has run over 0..{} of \
                 0..{positions}: each layer must take the positions in order",
                block.done
            ));
        }
        match index.checked_sub(1).map(|i| self.blocks[i].done) {
            Some(below) if below < range.end => Err(format!(
                "layer {layer} ran over positions {range:?} before layer {} reached {}",
                index - 1,
                range.end
            )),
            _ => Ok(()),
        }
    }

    /// Checks that `rows` are there exactly at Engram layers, with a whole
    /// number of rows per token of the non-empty `range`, and builds the
    /// Engram projections on their first use.
    fn prepare_rows(
        &mut self,
        layer: u32,
        range: &Range<usize>,
        rows: Option<&[f32]>,
    ) -> Result<(), String> {
        let dim = self.shape.dim;
        match (&mut self.blocks[layer as usize].engram, rows) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(format!(
                "unexpected-rows: layer {layer} got rows but is not an Engram layer"
            )),
            (Some(engram), None) => Err(format!(
                "missing-rows: Engram layer {layer} (table {}) ran over positions {range:?} \
                 without rows",
                engram.table
            )),
            (Some(engram), Some(rows)) => {
                let bad = |why: String| {
                    format!("bad-rows: Engram layer {layer}, positions {range:?}: {why}")
                };
                let per_token = rows_per_token(rows.len(), range.len()).map_err(bad)?;
                engram
                    .prepare(per_token, dim)
                    .map_err(|before| bad(format!("{per_token} rows per token, {before} before")))
            }
        }
    }
}

/// Rows per token of `values` f32 over `tokens` (at least one) tokens, if
/// whole.
fn rows_per_token(values: usize, tokens: usize) -> Result<usize, String> {
    let row_values = tokens * ROW_DIM;
    if values == 0 || values % row_values != 0 {
        return Err(format!(
            "{values} values are not a whole number of {ROW_DIM}-value rows for each of \
             {tokens} tokens"
        ));
    }
    Ok(values / row_values)
}

/// Says what is wrong with `engram_layers` for a model of `layers` layers.
fn check_engram_layers(engram_layers: &[u32], layers: u32) -> Result<(), String> {
    if engram_layers.is_empty() {
        return Err("the model has no Engram layer".into());
    }
    for (table, &layer) in engram_layers.iter().enumerate() {
        if layer >= layers {
            return Err(format!(
                "Engram table {table} is at layer {layer}, but the model has layers 0..{layers} \
                 (raise layers=)"
            ));
        }
        if let Some(other) = engram_layers[..table].iter().position(|&l| l == layer) {
            return Err(format!(
                "Engram tables {other} and {table} are both at layer {layer}"
            ));
        }
    }
    Ok(())
}

impl Compute for CpuCompute {
    fn layers(&self) -> u32 {
        self.shape.layers
    }

    fn wants_rows(&self) -> bool {
        true
    }

    /// Starts a new sequence: forgets the previous one and any recorded
    /// mistake.
    fn begin_prefill(&mut self, tokens: &[u32]) {
        let dim = self.shape.dim;
        self.error = None;
        self.hidden.clear();
        for &token in tokens {
            self.hidden.extend(embed(self.shape.seed, token, dim));
        }
        for block in &mut self.blocks {
            block.reset(tokens.len());
        }
    }

    fn prefill_layer(&mut self, layer: u32, range: Range<usize>, rows: Option<&[f32]>) {
        self.run(layer, range, rows);
    }

    fn begin_step(&mut self, token: u32) {
        if self.error.is_some() {
            return;
        }
        let positions = self.positions();
        if let Some(behind) = self.blocks.iter().position(|b| b.done != positions) {
            self.error = Some(format!(
                "begin_step: layer {behind} has run over 0..{} of 0..{positions}",
                self.blocks[behind].done
            ));
            return;
        }
        self.hidden
            .extend(embed(self.shape.seed, token, self.shape.dim));
    }

    fn step_layer(&mut self, layer: u32, rows: Option<&[f32]>) {
        match self.positions().checked_sub(1) {
            Some(last) => self.run(layer, last..last + 1, rows),
            None if self.error.is_none() => {
                self.error = Some(format!("step_layer({layer}) before any position"));
            }
            None => {}
        }
    }

    fn take_compute_time(&mut self) -> Duration {
        std::mem::take(&mut self.spent)
    }

    /// FNV-1a (64-bit) over the f32 bits of the final hidden state of every
    /// position through the last layer, in position order; `error:...` after
    /// a driver mistake; `None` before any position went through.
    fn output_checksum(&self) -> Option<String> {
        if let Some(why) = &self.error {
            return Some(format!("error:{why}"));
        }
        let done = self.blocks.last().map_or(0, |b| b.done);
        if done == 0 {
            return None;
        }
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for value in &self.hidden[..done * self.shape.dim] {
            for byte in value.to_bits().to_le_bytes() {
                hash = (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        Some(format!("{hash:016x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::layers::{Rng, Stream};
    use super::*;

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

        fn new(
            shape: CpuShape,
            engram_layers: Vec<u32>,
            prompt: u32,
            decode: u32,
            rpt: usize,
        ) -> Case {
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
        assert!(changed.ends_with("2 rows per token, 3 before"), "{changed}");
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
}
