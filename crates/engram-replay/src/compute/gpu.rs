//! The stand-in GPU: the forward thread blocks for each layer's time, as a
//! runtime's thread blocks on a command buffer, and leaves the CPU to the
//! readers.

use std::ops::Range;
use std::time::{Duration, Instant};

use super::Compute;

/// Per-layer times of a measured runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProfile {
    /// Name in reports (`m4-max-ds4`, `custom`).
    pub name: String,
    /// Layers of the forward pass.
    pub layers: u32,
    /// Prefill time per token per layer.
    pub prefill_token_layer: Duration,
    /// Decode time per layer (one token).
    pub decode_layer: Duration,
}

impl GpuProfile {
    /// ds4 on an M4 Max (its speed-bench at 2K context): 43 layers, prefill
    /// 344 tok/s, decode 26.76 tok/s, spread evenly over the layers.
    pub fn m4_max_ds4() -> GpuProfile {
        GpuProfile::from_speeds("m4-max-ds4", 43, 344.0, 26.76)
    }

    /// DeepSeek V4.1-Flash on one H200 (43 layers; Engram tables at layers 1
    /// and 14), from the figures of a CUDA host measured on the device
    /// machine: decode steps of 13 ms (76.9 tok/s, 302 us a layer) and a
    /// prefill at 5,000 prompt tok/s (4.65 us per token per layer, 38 ms a
    /// layer for an 8K prompt), spread evenly over the layers.
    pub fn flash() -> GpuProfile {
        GpuProfile::from_speeds("flash", 43, 5000.0, 1000.0 / 13.0)
    }

    /// A profile from whole-model speeds in tokens per second.
    pub fn from_speeds(name: &str, layers: u32, prefill_tps: f64, decode_tps: f64) -> GpuProfile {
        let per_layer = |tps: f64| Duration::from_secs_f64(1.0 / tps / f64::from(layers));
        GpuProfile {
            name: name.to_string(),
            layers,
            prefill_token_layer: per_layer(prefill_tps),
            decode_layer: per_layer(decode_tps),
        }
    }

    /// Parses what follows `gpu:`: `m4-max-ds4`, `flash`, or
    /// `custom:PREFILL_US,DECODE_US[,LAYERS]` (43 layers if not given).
    pub fn parse(text: &str) -> Result<GpuProfile, String> {
        match text {
            "m4-max-ds4" => return Ok(GpuProfile::m4_max_ds4()),
            "flash" => return Ok(GpuProfile::flash()),
            _ => {}
        }
        let Some(values) = text.strip_prefix("custom:") else {
            return Err(format!(
                "unknown GPU profile {text:?} (known: m4-max-ds4, flash, custom:P,D[,L])"
            ));
        };
        let fields: Vec<&str> = values.split(',').map(str::trim).collect();
        if !(2..=3).contains(&fields.len()) {
            return Err("gpu:custom takes PREFILL_US,DECODE_US[,LAYERS]".into());
        }
        let micros = |s: &str, what: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0 && *v < 1e9)
                .map(|v| Duration::from_secs_f64(v / 1e6))
                .ok_or_else(|| format!("{what} {s:?} is not a number of microseconds"))
        };
        let layers = match fields.get(2) {
            None => 43,
            Some(s) => s
                .parse::<u32>()
                .ok()
                .filter(|&l| (1..=1024).contains(&l))
                .ok_or_else(|| format!("layers {s:?} is not in 1..=1024"))?,
        };
        Ok(GpuProfile {
            name: "custom".into(),
            layers,
            prefill_token_layer: micros(fields[0], "prefill per-token-layer time")?,
            decode_layer: micros(fields[1], "decode per-layer time")?,
        })
    }
}

/// A forward pass that sleeps for each layer's time.
///
/// The timeline runs against absolute deadlines: a layer ends at the
/// previous layer's deadline plus its own time, so the overshoot of one
/// sleep is taken back from the next instead of accumulating. Time spent
/// outside the compute between two layers (a wait on rows) pushes the
/// timeline back by that much: stall is never paid back by skipping compute.
pub struct GpuCompute {
    profile: GpuProfile,
    /// Deadline of the last layer and when its call returned.
    last: Option<(Instant, Instant)>,
    spent: Duration,
}

impl GpuCompute {
    /// A stand-in with `profile`'s times.
    pub fn new(profile: GpuProfile) -> GpuCompute {
        GpuCompute {
            profile,
            last: None,
            spent: Duration::ZERO,
        }
    }

    /// Blocks for one layer of `length`.
    fn run_layer(&mut self, length: Duration) {
        let start = Instant::now();
        let begins = match self.last {
            // The gap since the last return (a wait, the replay's own work)
            // moves the timeline; the last sleep's overshoot does not.
            Some((deadline, returned)) => deadline + start.saturating_duration_since(returned),
            None => start,
        };
        let deadline = begins + length;
        let now = Instant::now();
        if deadline > now {
            std::thread::sleep(deadline - now);
        }
        let returned = Instant::now();
        self.spent += returned - start;
        self.last = Some((deadline, returned));
    }
}

impl Compute for GpuCompute {
    fn layers(&self) -> u32 {
        self.profile.layers
    }

    fn begin_prefill(&mut self, _tokens: &[u32]) {
        self.last = None;
    }

    fn prefill_layer(&mut self, _layer: u32, range: Range<usize>, _rows: Option<&[f32]>) {
        let tokens = u32::try_from(range.len()).unwrap_or(u32::MAX);
        self.run_layer(self.profile.prefill_token_layer * tokens);
    }

    fn begin_step(&mut self, _token: u32) {}

    fn step_layer(&mut self, _layer: u32, _rows: Option<&[f32]>) {
        self.run_layer(self.profile.decode_layer);
    }

    fn take_compute_time(&mut self) -> Duration {
        // A phase ends here: the next one starts its own timeline, so the
        // last sleep's overshoot is not taken back from the next phase.
        self.last = None;
        std::mem::take(&mut self.spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ds4_profile_matches_its_published_speeds() {
        let p = GpuProfile::m4_max_ds4();
        let prefill = p.prefill_token_layer.as_secs_f64() * 43.0;
        let decode = p.decode_layer.as_secs_f64() * 43.0;
        assert!((1.0 / prefill - 344.0).abs() < 0.01, "{prefill}");
        assert!((1.0 / decode - 26.76).abs() < 0.01, "{decode}");
    }

    #[test]
    fn the_flash_profile_is_a_13_ms_step_and_38_ms_an_8k_layer() {
        let p = GpuProfile::parse("flash").unwrap();
        assert_eq!((p.name.as_str(), p.layers), ("flash", 43));
        let step = p.decode_layer.as_secs_f64() * 43.0;
        assert!((step - 0.013).abs() < 1e-6, "{step}");
        let layer_8k = p.prefill_token_layer.as_secs_f64() * 8192.0;
        assert!((layer_8k - 0.0381).abs() < 1e-3, "{layer_8k}");
    }

    #[test]
    fn overshoot_does_not_accumulate_but_gaps_do() {
        let profile = GpuProfile::parse("custom:0,200,10").unwrap();
        let mut gpu = GpuCompute::new(profile);
        let start = Instant::now();
        for layer in 0..50 {
            gpu.step_layer(layer, None);
        }
        let back_to_back = start.elapsed();
        // 50 layers of 200 us: the deadline timeline keeps the total near
        // 10 ms even though each sleep may overshoot by tens of us.
        assert!(back_to_back >= Duration::from_millis(10));
        let spent = gpu.take_compute_time();
        assert!(spent >= Duration::from_millis(10) && spent <= back_to_back);
        // A gap between layers (a stall) is not taken back from compute.
        let start = Instant::now();
        gpu.step_layer(0, None);
        std::thread::sleep(Duration::from_millis(3));
        gpu.step_layer(1, None);
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_micros(3400), "{elapsed:?}");
        assert!(gpu.take_compute_time() < elapsed - Duration::from_millis(3));
    }
}
