//! Repeats and prompts reduced to what a reader compares: the median and
//! spread of every figure of a schedule, ratios between schedules taken
//! within a repeat (so drift between repeats cancels), and their geometric
//! mean over prompts.

use serde_json::{Map, Value};

use crate::report::{PromptReport, RatioReport, ScheduleReport, Spread};

/// The figures ratios are taken of, as JSON paths into a schedule report.
pub const RATIO_FIGURES: [&str; 5] = [
    "prefill.stall_seconds",
    "decode.stall_us.mean",
    "decode.stall_us.p99",
    "cpu.prefill_us_per_token",
    "cpu.decode_us_per_step",
];

/// Looks `path` (`a.b.c`) up in `value`, as a number.
pub fn figure(value: &Value, path: &str) -> Option<f64> {
    path.split('.')
        .try_fold(value, |v, key| v.get(key))
        .and_then(Value::as_f64)
}

/// Every figure of one schedule's `runs` (one per repeat) as
/// `{"median", "min", "max"}`; strings equal in every run kept, others
/// listed; per-chunk and per-step series left out (they stay in the runs).
pub fn summarize(runs: &[&ScheduleReport]) -> Value {
    let values: Vec<Value> = runs
        .iter()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    merge(&values)
}

fn merge(values: &[Value]) -> Value {
    let Some(first) = values.first() else {
        return Value::Null;
    };
    match first {
        Value::Object(map) => {
            let mut out = Map::new();
            for key in map.keys() {
                let column: Vec<Value> = values
                    .iter()
                    .map(|v| v.get(key).cloned().unwrap_or(Value::Null))
                    .collect();
                let merged = merge(&column);
                if !merged.is_null() || column.iter().all(Value::is_null) {
                    out.insert(key.clone(), merged);
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            // A fixed pair or list of figures (per table) merges element
            // by element; long series (per chunk, per step) are left out.
            if items.len() > 8 || items.iter().any(|i| !i.is_number() && !i.is_object()) {
                return Value::Null;
            }
            let merged: Vec<Value> = (0..items.len())
                .map(|i| {
                    let column: Vec<Value> = values
                        .iter()
                        .map(|v| v.get(i).cloned().unwrap_or(Value::Null))
                        .collect();
                    merge(&column)
                })
                .collect();
            Value::Array(merged)
        }
        Value::String(_) | Value::Bool(_) => {
            if values.iter().all(|v| v == first) {
                first.clone()
            } else {
                Value::Array(values.to_vec())
            }
        }
        Value::Number(_) | Value::Null => {
            let numbers: Vec<f64> = values.iter().filter_map(Value::as_f64).collect();
            match Spread::of(&numbers) {
                Some(s) => serde_json::to_value(s).unwrap_or(Value::Null),
                None => Value::Null,
            }
        }
    }
}

/// Ratios of every figure of [`RATIO_FIGURES`] between every pair of
/// schedules (the later one in run order over the earlier one), each taken
/// within a repeat; `repeats[r][s]` as in [`PromptReport::repeats`].
pub fn ratios(repeats: &[Vec<ScheduleReport>]) -> Vec<RatioReport> {
    let Some(first) = repeats.first() else {
        return Vec::new();
    };
    let json: Vec<Vec<Value>> = repeats
        .iter()
        .map(|run| {
            run.iter()
                .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    for below in 0..first.len() {
        for above in below + 1..first.len() {
            for path in RATIO_FIGURES {
                let per_repeat: Vec<f64> = json
                    .iter()
                    .filter_map(|run| {
                        let top = figure(run.get(above)?, path)?;
                        let bottom = figure(run.get(below)?, path)?;
                        (bottom > 0.0).then(|| top / bottom)
                    })
                    .collect();
                out.push(RatioReport {
                    figure: path.to_string(),
                    schedule: first[above].name.clone(),
                    over: first[below].name.clone(),
                    value: Spread::of(&per_repeat),
                    count: per_repeat.len(),
                });
            }
        }
    }
    out
}

/// Per ratio, the geometric mean over prompts of its per-prompt median
/// (prompts where it is undefined left out; a zero median makes it 0).
pub fn geomean(prompts: &[PromptReport]) -> Vec<RatioReport> {
    let Some(first) = prompts.first() else {
        return Vec::new();
    };
    first
        .ratios
        .iter()
        .map(|r| {
            let medians: Vec<f64> = prompts
                .iter()
                .filter_map(|p| {
                    p.ratios.iter().find(|q| {
                        q.figure == r.figure && q.schedule == r.schedule && q.over == r.over
                    })
                })
                .filter_map(|q| q.value.map(|v| v.median))
                .collect();
            let value = geometric_mean(&medians).map(|mean| Spread {
                median: mean,
                min: medians.iter().copied().fold(f64::INFINITY, f64::min),
                max: medians.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            });
            RatioReport {
                value,
                count: medians.len(),
                ..r.clone()
            }
        })
        .collect()
}

/// The geometric mean of non-negative `values` (0 if one is 0).
pub fn geometric_mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    if values.iter().any(|&v| v <= 0.0) {
        return Some(0.0);
    }
    let logs: f64 = values.iter().map(|v| v.ln()).sum();
    Some((logs / values.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{CpuReport, DecodeReport, PrefillReport, StallSummary};

    /// A fake schedule report whose prefill stall and decode mean stall
    /// are the given values.
    fn fake(name: &str, stall: f64, decode_mean: f64) -> ScheduleReport {
        ScheduleReport {
            name: name.into(),
            prefill: PrefillReport {
                tokens: 10,
                seconds: 1.0 + stall,
                compute_seconds: 1.0,
                stall_seconds: stall,
                stall_seconds_table: vec![stall, 0.0],
            },
            decode: DecodeReport {
                tokens: 5,
                seconds: 1.0,
                compute_seconds: 1.0,
                tokens_per_s: 5.0,
                stall_us: StallSummary {
                    mean: decode_mean,
                    ..StallSummary::default()
                },
                stall_us_table: vec![StallSummary::default(); 2],
                hint_call_us: StallSummary::default(),
                step_begin_us: StallSummary::default(),
            },
            io: Default::default(),
            cpu: CpuReport::default(),
            floor: None,
            peak_rss_bytes: 100,
            output_checksum: None,
            chunk_stall_seconds: vec![stall; 20],
            step_stall_us: vec![decode_mean; 5],
        }
    }

    #[test]
    fn repeat_medians_and_spreads_of_every_figure() {
        let runs = [
            fake("a", 3.0, 10.0),
            fake("a", 1.0, 30.0),
            fake("a", 2.0, 20.0),
        ];
        let refs: Vec<&ScheduleReport> = runs.iter().collect();
        let s = summarize(&refs);
        assert_eq!(s["name"], "a");
        assert_eq!(s["prefill"]["stall_seconds"]["median"], 2.0);
        assert_eq!(s["prefill"]["stall_seconds"]["min"], 1.0);
        assert_eq!(s["prefill"]["stall_seconds"]["max"], 3.0);
        assert_eq!(s["prefill"]["stall_seconds_table"][0]["median"], 2.0);
        assert_eq!(s["decode"]["stall_us"]["mean"]["median"], 20.0);
        assert_eq!(s["peak_rss_bytes"]["max"], 100.0);
        assert!(
            s.get("chunk_stall_seconds").is_none(),
            "series stay in the runs"
        );
        // Even counts take the mean of the middle two.
        let even = summarize(&refs[..2]);
        assert_eq!(even["prefill"]["stall_seconds"]["median"], 2.0);
    }

    #[test]
    fn ratios_are_taken_within_a_repeat_then_their_median() {
        // Repeat 1: b/a = 2/4; repeat 2: 3/1; repeat 3: 1/1. The medians of
        // the figures alone would give 2/1; within repeats: 0.5, 3, 1 -> 1.
        let repeats = vec![
            vec![fake("a", 4.0, 10.0), fake("b", 2.0, 5.0)],
            vec![fake("a", 1.0, 10.0), fake("b", 3.0, 5.0)],
            vec![fake("a", 1.0, 0.0), fake("b", 1.0, 5.0)],
        ];
        let r = ratios(&repeats);
        let stall = r
            .iter()
            .find(|r| r.figure == "prefill.stall_seconds")
            .unwrap();
        assert_eq!((stall.schedule.as_str(), stall.over.as_str()), ("b", "a"));
        let v = stall.value.unwrap();
        assert_eq!((v.median, v.min, v.max), (1.0, 0.5, 3.0));
        // A zero below leaves that repeat out.
        let decode = r
            .iter()
            .find(|r| r.figure == "decode.stall_us.mean")
            .unwrap();
        assert_eq!(decode.count, 2);
        assert_eq!(decode.value.unwrap().median, 0.5);
    }

    #[test]
    fn the_geometric_mean_over_prompts() {
        assert!((geometric_mean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert_eq!(geometric_mean(&[0.0, 8.0]), Some(0.0));
        assert_eq!(geometric_mean(&[]), None);
        let prompt = |b: f64| PromptReport {
            prompt: "p".into(),
            prefill_tokens: 10,
            decode_tokens: 5,
            schedules: Vec::new(),
            ratios: ratios(&[vec![fake("a", 1.0, 1.0), fake("b", b, 1.0)]]),
            repeats: Vec::new(),
        };
        let g = geomean(&[prompt(2.0), prompt(8.0)]);
        let stall = g
            .iter()
            .find(|r| r.figure == "prefill.stall_seconds")
            .unwrap();
        let v = stall.value.unwrap();
        assert!((v.median - 4.0).abs() < 1e-12 && v.min == 2.0 && v.max == 8.0);
        assert_eq!(stall.count, 2);
    }
}
