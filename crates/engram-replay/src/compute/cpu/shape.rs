//! The CPU transformer's dimensions and the `cpu:KEY=VALUE,...` text that
//! sets them.

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
    pub(super) fn check(&self) -> Result<(), String> {
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
