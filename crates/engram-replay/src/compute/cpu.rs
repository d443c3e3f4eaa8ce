//! A small real transformer on the CPU whose Engram layers use the rows they
//! are given, so a schedule that delivered a wrong row changes its output.

use std::ops::Range;
use std::time::Duration;

use engram::{Error, Result};

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
        if shape.dim % shape.heads != 0 {
            return Err(format!(
                "dim {} does not divide by heads {}",
                shape.dim, shape.heads
            ));
        }
        Ok(shape)
    }
}

/// The CPU transformer.
pub struct CpuCompute {
    _shape: CpuShape,
}

impl CpuCompute {
    /// A transformer of `shape` with Engram layers at `engram_layers`.
    pub fn new(shape: CpuShape, engram_layers: &[u32]) -> Result<CpuCompute> {
        let _ = engram_layers;
        Err(Error::InvalidArgument(format!(
            "the cpu compute model ({shape:?}) is not built yet"
        )))
    }
}

impl Compute for CpuCompute {
    fn layers(&self) -> u32 {
        0
    }
    fn wants_rows(&self) -> bool {
        true
    }
    fn begin_prefill(&mut self, _tokens: &[u32]) {}
    fn prefill_layer(&mut self, _layer: u32, _range: Range<usize>, _rows: Option<&[f32]>) {}
    fn begin_step(&mut self, _token: u32) {}
    fn step_layer(&mut self, _layer: u32, _rows: Option<&[f32]>) {}
    fn take_compute_time(&mut self) -> Duration {
        Duration::ZERO
    }
    fn output_checksum(&self) -> Option<String> {
        None
    }
}
