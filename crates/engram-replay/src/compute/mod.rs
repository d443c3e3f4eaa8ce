//! Compute models: what stands in for a runtime's forward pass while the
//! replay measures how long it stalls on Engram rows.
//!
//! A [`Compute`] is driven one (layer, token range) at a time by the replay
//! loop. At an Engram layer it receives the rows of those tokens (decoded to
//! f32, `[token][column][row values]`) when it asked for them
//! ([`Compute::wants_rows`]); a stand-in GPU only needs to know they are
//! there and gets `None`.

mod cpu;
mod gpu;

use std::ops::Range;
use std::time::Duration;

use engram::{Error, Result};

pub use cpu::{CpuCompute, CpuShape};
pub use gpu::{GpuCompute, GpuProfile, NamedProfile, PROFILES};

/// A forward pass the replay drives layer by layer.
pub trait Compute: Send {
    /// Layers of the forward pass.
    fn layers(&self) -> u32;

    /// Whether Engram layers need the rows' values (`true`) or only their
    /// arrival (`false`, the default: rows are waited for but not copied
    /// out; only a model that computes with them wants them).
    fn wants_rows(&self) -> bool {
        false
    }

    /// Whether the replay charges the thread CPU time of each call to the
    /// model (`true`, the default), so that the CPU figures count only what
    /// a schedule adds outside it. A model that only sleeps says `false`:
    /// its CPU is a few clock reads a layer, while charging it costs two
    /// thread-CPU clock reads a layer, system calls (about 0.75 us each on
    /// the 2-core VM), which would land in the gaps between layers and
    /// count against every schedule's decode rate.
    fn charges_cpu(&self) -> bool {
        true
    }

    /// Starts a prefill of `tokens` (positions `0..tokens.len()` of a new
    /// sequence). Called once, before any layer.
    fn begin_prefill(&mut self, tokens: &[u32]);

    /// Runs `layer` over prompt positions `range`. `rows` holds, at an
    /// Engram layer with [`Compute::wants_rows`], the rows of those tokens.
    fn prefill_layer(&mut self, layer: u32, range: Range<usize>, rows: Option<&[f32]>);

    /// Starts one decode step of `token` (the next position).
    fn begin_step(&mut self, token: u32);

    /// Runs `layer` of the current decode step.
    fn step_layer(&mut self, layer: u32, rows: Option<&[f32]>);

    /// Compute time spent so far (measured, including any sleep overshoot),
    /// and resets the counter: the replay reads it once at the end of each
    /// phase (prefill, decode).
    fn take_compute_time(&mut self) -> Duration;

    /// A digest of the final hidden states, for models that compute some
    /// (`None`, the default, for those that only take time).
    fn output_checksum(&self) -> Option<String> {
        None
    }
}

/// Which compute model to build, as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub enum ComputeSpec {
    /// A stand-in GPU that blocks for each layer's time.
    Gpu(GpuProfile),
    /// A small real transformer on the CPU.
    Cpu(CpuShape),
}

impl ComputeSpec {
    /// Parses `gpu:NAME` (a name of [`PROFILES`]: `m4-max-ds4`,
    /// `flash`, `m4-max-qwen38`, `m1-max-qwen38`, `h200-transformers-qwen38`),
    /// `gpu:custom:PREFILL_US,DECODE_US[,LAYERS]`
    /// (microseconds per token per layer in prefill, per layer in decode),
    /// `cpu` or `cpu:KEY=VALUE,..` (see [`CpuShape::parse`]).
    pub fn parse(text: &str) -> Result<ComputeSpec> {
        let bad = |why: String| Error::InvalidArgument(format!("--compute {text:?}: {why}"));
        match text.split_once(':') {
            Some(("gpu", profile)) => GpuProfile::parse(profile)
                .map(ComputeSpec::Gpu)
                .map_err(bad),
            Some(("cpu", shape)) => CpuShape::parse(shape).map(ComputeSpec::Cpu).map_err(bad),
            None if text == "cpu" => Ok(ComputeSpec::Cpu(CpuShape::default())),
            _ => Err(bad(
                "expected gpu:PROFILE, gpu:custom:P,D[,L], cpu or cpu:SHAPE".into(),
            )),
        }
    }

    /// Builds a fresh compute model. `engram_layers[t]` is the layer that
    /// consumes table `t`.
    pub fn build(&self, engram_layers: &[u32]) -> Result<Box<dyn Compute>> {
        Ok(match self {
            ComputeSpec::Gpu(profile) => Box::new(GpuCompute::new(profile.clone())),
            ComputeSpec::Cpu(shape) => Box::new(CpuCompute::new(shape.clone(), engram_layers)?),
        })
    }

    /// Layers of the forward pass this spec builds.
    pub fn layers(&self) -> u32 {
        match self {
            ComputeSpec::Gpu(profile) => profile.layers,
            ComputeSpec::Cpu(shape) => shape.layers,
        }
    }

    /// A short name for reports (`gpu:m4-max-ds4`, `cpu:16x64`).
    pub fn label(&self) -> String {
        match self {
            ComputeSpec::Gpu(profile) => format!("gpu:{}", profile.name),
            ComputeSpec::Cpu(shape) => format!("cpu:{}x{}", shape.layers, shape.dim),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_specs() {
        let ds4 = ComputeSpec::parse("gpu:m4-max-ds4").unwrap();
        assert_eq!(ds4.layers(), 43);
        let custom = ComputeSpec::parse("gpu:custom:100,900,20").unwrap();
        match custom {
            ComputeSpec::Gpu(p) => {
                assert_eq!(p.layers, 20);
                assert_eq!(p.prefill_token_layer, Duration::from_micros(100));
                assert_eq!(p.decode_layer, Duration::from_micros(900));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(ComputeSpec::parse("cpu"), Ok(ComputeSpec::Cpu(_))));
        for bad in [
            "gpu",
            "gpu:nope",
            "gpu:custom:1",
            "gpu:custom:a,b",
            "tpu:x",
            "",
        ] {
            assert!(ComputeSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
