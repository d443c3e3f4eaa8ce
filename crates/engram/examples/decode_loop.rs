//! The Rust side of `crates/engram-py/bench/overhead.py`: decode steps
//! (`step_begin` and both tables' `step_wait`) on a model, timed per step,
//! so the Python package's cost can be told apart from the engine's.
//!
//! `cargo run --release -p engram --example decode_loop -- MODEL [STEPS] [WARMUP] [PREFETCH] [LEAD_US] [GAP_US] [f32|raw]`
//!
//! PREFETCH 1 (default): reads on the engine's decode threads; 0: reads at
//! the wait on the calling thread (`PrefetchConfig::prefetch` off).
//!
//! LEAD_US (default 0): the calling thread stays busy this long between
//! `step_begin` and the first table's wait, as a GPU host launching the
//! layers before it does. GAP_US (default 0): it sleeps this long after a
//! step, as a host blocked on the GPU for the rest of a forward pass does,
//! so the engine's threads have gone idle when the next step begins: the
//! step path's thread wake-ups are then in what the wait measures. The
//! rows are delivered as f32 (default) or raw.
//!
//! Tokens are `(i * 7919 + 13) % vocab` for step `i`, as in the Python
//! script. Prints one JSON line: per step, in microseconds, the median,
//! mean, p10 and p90 of the time from `step_begin` to both tables' rows
//! (LEAD_US included), and of `step_begin` alone and the first table's
//! wait alone.

mod args;

use std::time::{Duration, Instant};

use engram::open::EngineBuilder;
use engram::prefetch::RowFormat;

fn main() -> engram::Result<()> {
    let args = args::Args::new(
        "decode_loop MODEL [STEPS] [WARMUP] [PREFETCH] [LEAD_US] [GAP_US] [f32|raw]",
    );
    let model = args.required(1);
    let steps: usize = args.number(2, "STEPS", 2000);
    let warmup: usize = args.number(3, "WARMUP", 200);
    let prefetch = args.optional(4).is_none_or(|s| s != "0");
    let lead = Duration::from_micros(args.number(5, "LEAD_US", 0));
    let gap = Duration::from_micros(args.number(6, "GAP_US", 0));
    let mut builder = EngineBuilder::default();
    builder.prefetch.format = match args.optional(7) {
        Some("raw") => RowFormat::Raw,
        _ => RowFormat::F32,
    };
    builder.prefetch.prefetch = prefetch;
    let opened = builder.open(model)?;
    let vocab = opened.engine.layout().vocab_size() as u64;
    let tables = opened.tables();
    let mut seq = opened.engine.sequence();
    let (mut times, mut begins, mut firsts) = (Vec::new(), Vec::new(), Vec::new());
    let mut checksum = 0u64;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for i in 0..warmup + steps {
        let token = ((i as u64 * 7919 + 13) % vocab) as u32;
        let start = Instant::now();
        seq.step_begin(token)?;
        let begun = start.elapsed();
        while start.elapsed() < begun + lead {
            std::hint::spin_loop();
        }
        let mut first = Duration::ZERO;
        for table in 0..tables {
            let waited = Instant::now();
            // Touch the rows as a consumer would (one byte), so the loop
            // cannot skip the wait's result.
            let view = seq.step_wait(table)?;
            checksum = checksum.wrapping_add(u64::from(view.parts().0[0]));
            if table == 0 {
                first = waited.elapsed();
            }
        }
        if i >= warmup {
            times.push(us(start.elapsed()));
            begins.push(us(begun));
            firsts.push(us(first));
        }
        std::thread::sleep(gap);
    }
    let stats = |name: &str, v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        format!(
            "\"{name}median_us\": {:.3}, \"{name}mean_us\": {mean:.3}, \"{name}p10_us\": {:.3}, \"{name}p90_us\": {:.3}",
            at(0.5),
            at(0.1),
            at(0.9)
        )
    };
    println!(
        "{{\"steps\": {steps}, {}, {}, {}, \"checksum\": {checksum}}}",
        stats("", &mut times),
        stats("begin_", &mut begins),
        stats("wait0_", &mut firsts)
    );
    Ok(())
}
