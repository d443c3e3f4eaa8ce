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

/// A named profile: whole-model speeds of a published measurement, spread
/// evenly over the layers ([`GpuProfile::from_speeds`]). Adding a profile
/// is one entry of [`PROFILES`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NamedProfile {
    /// Name after `gpu:`.
    pub name: &'static str,
    /// Layers of the forward pass.
    pub layers: u32,
    /// Prefill tokens per second.
    pub prefill_tps: f64,
    /// Decode tokens per second.
    pub decode_tps: f64,
    /// Where the figures come from.
    pub source: &'static str,
}

/// The named profiles `gpu:NAME` knows.
///
/// - `m4-max-ds4`: ds4 on an M4 Max, DeepSeek V4.1-Flash (its speed-bench
///   at 2K context): 43 layers, prefill 344 tok/s, decode 26.76 tok/s.
/// - `m4-max-qwen38`: ds4 on an M4 Max 64 GB, Qwen3.8-Flash-Next (peer
///   sheet section 7, ds4-metal issue #4, build `1996434`, Q2K-down + Q4_1
///   sidecar, MTP): decode about 53 tok/s (at 131K context), prefill the
///   middle of 600-640 tok/s (2K prompt), 620; 48 layers, so 393 us a
///   decode layer and 33.6 us a prefill token-layer; the PLE table at layer
///   1 leaves one layer (393 us) to hide a decode token's rows.
/// - `m1-max-qwen38`: ds4 on an M1 Max 64 GB, Qwen3.8-Flash-Next (section
///   7): decode 21.9 tok/s (ds4-metal issue #9, `PREFETCH_FULL=1`, the
///   sidecar in RAM, 128K context + MTP: the rate without table reads),
///   prefill 275 tok/s (antirez/ds4 PR #1068, ctx 2K-16K); 48 layers: 951
///   us a decode layer, 75.8 us a prefill token-layer.
/// - `flash`: DeepSeek V4.1-Flash on one H200 ([`GpuProfile::flash`]).
/// - `h200-transformers-qwen38`: stock transformers 5.23 on the device
///   machine's H200 (`scripts/device-transformers.sh`, `LAYERS=12`): a
///   Qwen4-Exp model at Qwen3.8-Flash-Next's widths (hidden 2560, 512
///   experts, top 10), random bf16 weights, eager, with transformers'
///   reference kernels (no flash-linear-attention, no causal-conv1d). Of 12
///   layers measured by CUDA events, a decode layer took 3.23 ms (median
///   step 38.76 ms) and a prefill token-layer 137 us (2,048-token prompt);
///   scaled to 48 layers: 6.45 tok/s decode, 152 tok/s prefill. Spread
///   evenly, it gives layer 0 the mean: the measured layer 0 took 2.67 ms
///   of decode and 4.8 us a prefill token (a linear-attention layer; the
///   indexed-attention layers took 0.51-0.57 ms a token).
pub const PROFILES: &[NamedProfile] = &[
    NamedProfile {
        name: "m4-max-ds4",
        layers: 43,
        prefill_tps: 344.0,
        decode_tps: 26.76,
        source: "ds4 speed-bench, M4 Max, DeepSeek V4.1-Flash, 2K context",
    },
    NamedProfile {
        name: "m4-max-qwen38",
        layers: 48,
        prefill_tps: 620.0,
        decode_tps: 53.0,
        source: "ds4 on M4 Max 64 GB, Qwen3.8-Flash-Next + MTP (ds4-metal issue #4)",
    },
    NamedProfile {
        name: "m1-max-qwen38",
        layers: 48,
        prefill_tps: 275.0,
        decode_tps: 21.9,
        source: "ds4 on M1 Max 64 GB, Qwen3.8-Flash-Next (ds4-metal #9, antirez/ds4 #1068)",
    },
    NamedProfile {
        name: "flash",
        layers: 43,
        prefill_tps: 5000.0,
        decode_tps: 1000.0 / 13.0,
        source: "an independent CUDA host on the H200, DeepSeek V4.1-Flash: 13 ms steps, 5,000 prompt tok/s",
    },
    NamedProfile {
        name: "h200-transformers-qwen38",
        layers: 48,
        prefill_tps: 1000.0 / (0.13672 * 48.0),
        decode_tps: 1000.0 / (38.763 / 12.0 * 48.0),
        source: "stock transformers 5.23 on the H200, Qwen3.8-Flash-Next widths, 12 layers measured, scaled to 48",
    },
];

impl GpuProfile {
    /// ds4 on an M4 Max (its speed-bench at 2K context): 43 layers, prefill
    /// 344 tok/s, decode 26.76 tok/s, spread evenly over the layers.
    pub fn m4_max_ds4() -> GpuProfile {
        GpuProfile::named("m4-max-ds4").expect("a listed profile")
    }

    /// The profile of [`PROFILES`] called `name`.
    pub fn named(name: &str) -> Option<GpuProfile> {
        PROFILES
            .iter()
            .find(|p| p.name == name)
            .map(|p| GpuProfile::from_speeds(p.name, p.layers, p.prefill_tps, p.decode_tps))
    }

    /// DeepSeek V4.1-Flash on one H200 (43 layers; Engram tables at layers 1
    /// and 14), from the figures of a CUDA host measured on the device
    /// machine: decode steps of 13 ms (76.9 tok/s, 302 us a layer) and a
    /// prefill at 5,000 prompt tok/s (4.65 us per token per layer, 38 ms a
    /// layer for an 8K prompt), spread evenly over the layers.
    pub fn flash() -> GpuProfile {
        GpuProfile::named("flash").expect("a listed profile")
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

    /// Parses what follows `gpu:`: a name of [`PROFILES`], or
    /// `custom:PREFILL_US,DECODE_US[,LAYERS]` (43 layers if not given).
    pub fn parse(text: &str) -> Result<GpuProfile, String> {
        if let Some(profile) = GpuProfile::named(text) {
            return Ok(profile);
        }
        let Some(values) = text.strip_prefix("custom:") else {
            let known: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
            return Err(format!(
                "unknown GPU profile {text:?} (known: {}, custom:P,D[,L])",
                known.join(", ")
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

    fn charges_cpu(&self) -> bool {
        false
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
    fn the_qwen_profiles_take_their_published_speeds_over_48_layers() {
        for (name, prefill, decode) in [
            ("m4-max-qwen38", 620.0, 53.0),
            ("m1-max-qwen38", 275.0, 21.9),
            ("h200-transformers-qwen38", 152.37, 6.449),
        ] {
            let p = GpuProfile::parse(name).unwrap();
            assert_eq!(p.layers, 48, "{name}");
            let layers = f64::from(p.layers);
            let got_prefill = 1.0 / (p.prefill_token_layer.as_secs_f64() * layers);
            let got_decode = 1.0 / (p.decode_layer.as_secs_f64() * layers);
            assert!(
                (got_prefill - prefill).abs() < 0.01,
                "{name}: {got_prefill}"
            );
            assert!((got_decode - decode).abs() < 0.01, "{name}: {got_decode}");
        }
        assert!(GpuProfile::parse("h200-qwen38").is_err());
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
