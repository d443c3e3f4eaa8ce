//! A small real transformer on the CPU whose Engram layers use the rows they
//! are given, so a schedule that delivered a wrong row changes its output.
//!
//! Architecture: a token's embedding is drawn from its id; each of `layers`
//! layers is a pre-RMSNorm causal self-attention (rotary positions) and a
//! pre-RMSNorm SiLU MLP, both residual. At an Engram layer an Engram block
//! runs first: the token's rows (`rows_per_token x row values`, `e`: 256
//! values a row for DeepSeek, the table's width, e.g. 160, for Qwen4-Exp)
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
mod shape;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::time::{Duration, Instant};

use engram::{Error, Result};

use self::layers::{embed, Block, EngramBlock, Scratch};
use super::Compute;

pub use self::shape::CpuShape;

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
    /// many values a token brings (`rows.len() / tokens`: rows per token
    /// times the table's row width, whatever it is); building them is not
    /// counted as compute time.
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
                let per_token = values_per_token(rows.len(), range.len()).map_err(bad)?;
                engram
                    .prepare(per_token, dim)
                    .map_err(|before| bad(format!("{per_token} values per token, {before} before")))
            }
        }
    }
}

/// Values per token of `values` f32 over `tokens` (at least one) tokens, if
/// whole.
fn values_per_token(values: usize, tokens: usize) -> Result<usize, String> {
    if values == 0 || values % tokens != 0 {
        return Err(format!(
            "{values} values are not a whole number of values for each of {tokens} tokens"
        ));
    }
    Ok(values / tokens)
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
