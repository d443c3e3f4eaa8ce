//! The report as one JSON document and as the terminal table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::report::{PromptReport, RatioReport, Report};
use crate::summary::{figure, RATIO_FIGURES};

/// What the JSON's fields mean (the `about` object of the document).
pub fn about() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("prompts[].schedules", "per schedule, every figure over the repeats as {median, min, max}"),
        ("prompts[].repeats", "repeats[r][s]: repeat r of schedule s, every figure, with per-chunk and per-step series"),
        ("prompts[].ratios", "figure of `schedule` over figure of `over`, taken within each repeat; value = median, min, max over repeats"),
        ("geomean", "per ratio, geometric mean over prompts of the per-prompt medians (min, max: of those medians)"),
        ("prefill.stall_seconds", "wall time the forward thread was blocked waiting on rows, all tables"),
        ("decode.stall_us", "per decode step, time blocked in step_begin and the waits, microseconds"),
        ("decode.step_begin_us", "per decode step, the forward thread's time in step_begin, microseconds (in the stall): the hash, the reads' hand-off and any read the schedule makes there"),
        ("decode.hint_call_us", "per decode step, the forward thread's time in the hint call, microseconds (`full` with draft hints; not in the stall, but a host spends it before it launches the step's layers)"),
        ("floor.prefill_stall_seconds", "the least prefill stall a perfect scheduler would leave: max over waits of (unique reads needed so far, rows starting in one 4 KiB page counted once, / device.iops - compute before the wait)"),
        ("floor.stall_over_floor", "measured prefill stall / floor (absent when the floor is 0)"),
        ("cpu", "process user+system CPU time outside the compute model (the cpu compute model's own thread CPU time subtracted; a gpu stand-in only sleeps, and its few clock reads a layer are counted here)"),
        ("device.iops", "random 4 KiB uncached reads per second at device.depth reads in flight"),
        ("io.bytes_read", "bytes moved from storage (uncached reads move whole 4 KiB pages)"),
        ("io.warm_bytes", "engine schedules: bytes the prefill's page-cache warm-up moved from storage (rows read ahead of the ring only to bring them into the page cache, the bytes dropped; warm_rows and warm_reads count them), not in io.bytes_read, which holds the ring's later page-cache reads of those rows: the prefill's reads moved bytes_read + warm_bytes"),
        ("io.prefill_mean_in_flight", "engine schedules: storage reads in flight on average over the prefill's wall time (the reads' summed latencies over it, Little's law), to set against the engine's depth"),
        ("io.prefill_batch_in_flight", "engine schedules: storage reads in flight on average while a prefill batch was read (summed read latencies over io.prefill_batch_seconds; one-table models only, as two tables' batches overlap and share the depth): near the depth with a low io.prefill_mean_in_flight, the device waited between batches; well below it, the backend kept fewer reads at the device than it may"),
        ("io.prefill_batch_seconds", "engine schedules: the time a prefill batch call was under way, per table, summed over the tables (calls of one table that overlap count once: a one-table model reads its next batch while the last is in flight)"),
        ("io.prefill_per_token", "engine schedules: rows per prompt token served by the hot tier (hot_rows), read from storage (storage_rows: distinct per batch, neither hot nor cached), read requests (storage_reads), and the page-cache warm-up's rows and read requests (warm_rows, warm_reads; not in the other two)"),
        ("io.decode_per_step", "the same per decode step, hint reads between steps included"),
        ("io.hints", "engine schedules: per kind of hint (draft: the draft chains' tokens; alternative: the next token's alternatives), hinted rows whose read ran (rows_read), of those the rows the step at their position asked for (rows_used), rows dropped unread because a begun step made them stale or the queue was full (rows_dropped), and hit_rate = rows_used / rows_read; counted when the step at a hint's position begins or a step makes it stale"),
        ("hot", "the --hot set, loaded once per bench and shared by every engine schedule, prompt and repeat"),
    ])
}

impl Report {
    /// The report as one JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report holds only plain values")
    }

    /// The terminal table: per prompt one line per schedule (medians, then
    /// spreads when repeated), the ratios, and what the columns mean.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        if let Some(d) = &self.device {
            // A given rate (`--device-iops`) ran no measurement: 0 s.
            let took = if d.seconds > 0.0 {
                format!(", {:.1} s", d.seconds)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "device: {:.0} random 4 KiB reads/s at depth {} ({}{took})",
                d.iops, d.depth, d.source,
            );
        }
        if let Some(h) = &self.hot {
            let _ = writeln!(
                out,
                "hot set {}: {:?} rows, {:.1} MB loaded once in {:.2} s ({:.0} MB/s)",
                h.file,
                h.rows,
                h.file_bytes as f64 / 1e6,
                h.load_seconds,
                h.load_bytes_per_s / 1e6
            );
        }
        for p in &self.prompts {
            prompt_table(&mut out, p, self.repeat);
            rows_table(&mut out, p, self.repeat);
            if self.prompts.len() == 1 {
                ratio_table(&mut out, "ratios within a repeat", &p.ratios, self.repeat);
            }
        }
        if self.prompts.len() > 1 {
            let title = format!("geometric mean over {} prompts", self.prompts.len());
            ratio_table(&mut out, &title, &self.geomean, 1);
        }
        let _ = writeln!(
            out,
            "\nprefill: wall, compute and time blocked on rows (s), the floor a perfect scheduler \
             would leave on this device (s) and stall / floor; decode: steps/s against the \
             compute-only rate and the per-step stall over both tables (us); cpu: process CPU \
             outside the compute model per prefill token and per decode step (us); MB read: \
             bytes from storage, warm MB: the prefill's page-cache warm-up on top (engine \
             schedules); rows: rows served by the hot tier, rows read from storage (distinct per \
             batch, neither hot nor cached) and read requests, per prefill token and per decode \
             step (hint reads between steps included; engine schedules), and the prefill's warm-up \
             rows and read requests per token (not in the others)."
        );
        if self.repeat > 1 {
            let _ = writeln!(
                out,
                "{} repeats per schedule, interleaved; figures are medians, `~` lines give min-max.",
                self.repeat
            );
        }
        out
    }
}

/// The median of `path` in a schedule summary.
fn med(s: &Value, path: &str) -> f64 {
    figure(s, &format!("{path}.median")).unwrap_or(f64::NAN)
}

/// `min-max` of `path` in a schedule summary.
fn span(s: &Value, path: &str, digits: usize) -> String {
    let min = figure(s, &format!("{path}.min")).unwrap_or(f64::NAN);
    let max = figure(s, &format!("{path}.max")).unwrap_or(f64::NAN);
    format!("{min:.digits$}-{max:.digits$}")
}

fn prompt_table(out: &mut String, p: &PromptReport, repeat: usize) {
    let _ = writeln!(
        out,
        "\nprompt {} ({} tokens prefill, {} decode)",
        p.prompt, p.prefill_tokens, p.decode_tokens
    );
    let _ = writeln!(
        out,
        "{:<9} | {:>9} {:>9} {:>8} {:>8} {:>7} | {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} | {:>7} {:>8} | {:>8} {:>7} {:>7} {:>7}",
        "schedule", "prefill s", "compute s", "stall s", "floor s", "x floor", "decode/s", "floor/s",
        "mean us", "p50 us", "p99 us", "max us", "cpu/tok", "cpu/step", "MB read", "warm MB", "hits", "peak MB"
    );
    for s in &p.schedules {
        let name = s["name"].as_str().unwrap_or("?");
        let compute = med(s, "decode.compute_seconds");
        let tokens = med(s, "decode.tokens");
        let rate = if compute > 0.0 { tokens / compute } else { 0.0 };
        let over = med(s, "floor.stall_over_floor");
        let _ = writeln!(
            out,
            "{:<9} | {:>9.2} {:>9.2} {:>8.3} {:>8.3} {:>7} | {:>8.2} {:>8.2} {:>8.0} {:>8.0} {:>8.0} {:>8.0} | {:>7.1} {:>8.0} | {:>8.1} {:>7.1} {:>7.0} {:>7.0}",
            name,
            med(s, "prefill.seconds"),
            med(s, "prefill.compute_seconds"),
            med(s, "prefill.stall_seconds"),
            med(s, "floor.prefill_stall_seconds"),
            if over.is_finite() { format!("{over:.1}") } else { "-".into() },
            med(s, "decode.tokens_per_s"),
            rate,
            med(s, "decode.stall_us.mean"),
            med(s, "decode.stall_us.p50"),
            med(s, "decode.stall_us.p99"),
            med(s, "decode.stall_us.max"),
            med(s, "cpu.prefill_us_per_token"),
            med(s, "cpu.decode_us_per_step"),
            med(s, "io.bytes_read") / 1e6,
            med(s, "io.warm_bytes") / 1e6,
            med(s, "io.cache_hits"),
            med(s, "peak_rss_bytes") / 1e6,
        );
        if repeat > 1 {
            let _ = writeln!(
                out,
                "{:<9} ~ prefill stall {} s, decode mean {} us, p99 {} us, cpu {} us/tok, {} us/step",
                "",
                span(s, "prefill.stall_seconds", 3),
                span(s, "decode.stall_us.mean", 0),
                span(s, "decode.stall_us.p99", 0),
                span(s, "cpu.prefill_us_per_token", 1),
                span(s, "cpu.decode_us_per_step", 0),
            );
        }
        let hinted = |kind: &str, f: &str| med(s, &format!("io.hints.{kind}.{f}"));
        if hinted("draft", "rows_read") + hinted("alternative", "rows_read") > 0.0 {
            let _ = writeln!(
                out,
                "{:<9}   hint hit rate (rows used / read): draft {:.3} of {:.0}, alternative {:.3} of {:.0}",
                "",
                hinted("draft", "hit_rate"),
                hinted("draft", "rows_read"),
                hinted("alternative", "hit_rate"),
                hinted("alternative", "rows_read"),
            );
        }
        if let Some(sum) = s.get("output_checksum").and_then(Value::as_str) {
            let _ = writeln!(out, "{:<9}   output checksum {sum}", "");
        }
    }
}

/// Where the engine schedules' rows came from, per prefill token and per
/// decode step (medians; `~` lines give min-max when repeated). The peer's
/// path does not split its counters by phase, so it has no line.
fn rows_table(out: &mut String, p: &PromptReport, repeat: usize) {
    const RATES: [(&str, &str); 5] = [
        ("hot_rows", "hot"),
        ("storage_rows", "stor"),
        ("storage_reads", "reads"),
        ("warm_rows", "warm"),
        ("warm_reads", "wreads"),
    ];
    // Per phase, how many of RATES it shows: only a prefill warms.
    const PHASES: [(&str, &str, usize); 2] = [
        ("prefill_per_token", "tok", 5),
        ("decode_per_step", "step", 3),
    ];
    let phased: Vec<&Value> = p
        .schedules
        .iter()
        .filter(|s| {
            PHASES
                .iter()
                .all(|(phase, ..)| s["io"].get(phase).is_some())
        })
        .collect();
    if phased.is_empty() {
        return;
    }
    let mut head = format!("{:<9}", "rows");
    for (_, unit, shown) in PHASES {
        head.push_str(" |");
        for (_, label) in &RATES[..shown] {
            let _ = write!(head, " {:>10}", format!("{label}/{unit}"));
        }
    }
    let _ = writeln!(out, "\n{head}");
    for s in phased {
        let mut line = format!("{:<9}", s["name"].as_str().unwrap_or("?"));
        let mut spread = String::new();
        for (phase, unit, shown) in PHASES {
            line.push_str(" |");
            for (rate, label) in &RATES[..shown] {
                let path = format!("io.{phase}.{rate}");
                let _ = write!(line, " {:>10.2}", med(s, &path));
                let _ = write!(spread, " {label}/{unit} {}", span(s, &path, 2));
            }
        }
        let _ = writeln!(out, "{line}");
        if repeat > 1 {
            let _ = writeln!(out, "{:<9} ~{spread}", "");
        }
    }
}

/// One line per pair of schedules, one column per figure of
/// [`RATIO_FIGURES`]: median (min-max).
fn ratio_table(out: &mut String, title: &str, ratios: &[RatioReport], repeat: usize) {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for r in ratios {
        if !pairs.contains(&(r.schedule.as_str(), r.over.as_str())) {
            pairs.push((&r.schedule, &r.over));
        }
    }
    if pairs.is_empty() {
        return;
    }
    let width = title.len().max(24) + 1;
    let _ = writeln!(
        out,
        "\n{:<width$} {:>23} {:>23} {:>23} {:>23} {:>23}",
        format!("{title}:"),
        "prefill stall",
        "decode stall mean",
        "decode stall p99",
        "cpu per token",
        "cpu per step"
    );
    for (top, below) in pairs {
        let mut line = format!("{:<width$}", format!("{top} / {below}"));
        for path in RATIO_FIGURES {
            let r = ratios
                .iter()
                .find(|r| r.figure == path && r.schedule == top && r.over == below);
            let cell = match r.and_then(|r| r.value) {
                Some(v) if repeat > 1 || v.min != v.max => {
                    format!("{:.2} ({:.2}-{:.2})", v.median, v.min, v.max)
                }
                Some(v) => format!("{:.2}", v.median),
                None => "-".into(),
            };
            let _ = write!(line, " {cell:>23}");
        }
        let _ = writeln!(out, "{line}");
    }
}
