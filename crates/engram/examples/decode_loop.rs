//! The Rust side of `crates/engram-py/bench/overhead.py`: decode steps
//! (`step_begin` and both tables' `step_wait`) on a model, timed per step,
//! so the Python package's cost can be told apart from the engine's.
//!
//! `cargo run --release -p engram --example decode_loop -- MODEL [STEPS] [WARMUP] [PREFETCH]`
//!
//! PREFETCH 1 (default): reads on the engine's decode threads; 0: reads at
//! the wait on the calling thread (`PrefetchConfig::prefetch` off).
//!
//! Tokens are `(i * 7919 + 13) % vocab` for step `i`, as in the Python
//! script. Prints one JSON line: per-step median, mean, p10 and p90 in
//! microseconds.

mod args;

use std::time::Instant;

use engram::open::EngineBuilder;
use engram::prefetch::RowFormat;

fn main() -> engram::Result<()> {
    let args = args::Args::new("decode_loop MODEL [STEPS] [WARMUP] [PREFETCH]");
    let model = args.required(1);
    let steps: usize = args.number(2, "STEPS", 2000);
    let warmup: usize = args.number(3, "WARMUP", 200);
    let prefetch = args.optional(4).is_none_or(|s| s != "0");
    let mut builder = EngineBuilder::default();
    builder.prefetch.format = RowFormat::F32;
    builder.prefetch.prefetch = prefetch;
    let opened = builder.open(model)?;
    let vocab = opened.engine.layout().vocab_size() as u64;
    let tables = opened.tables();
    let mut seq = opened.engine.sequence();
    let mut times = Vec::with_capacity(steps);
    let mut checksum = 0u64;
    for i in 0..warmup + steps {
        let token = ((i as u64 * 7919 + 13) % vocab) as u32;
        let start = Instant::now();
        seq.step_begin(token)?;
        for table in 0..tables {
            // Touch the rows as a consumer would (one byte), so the loop
            // cannot skip the wait's result.
            let view = seq.step_wait(table)?;
            checksum = checksum.wrapping_add(u64::from(view.parts().0[0]));
        }
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    println!(
        "{{\"steps\": {steps}, \"median_us\": {:.3}, \"mean_us\": {mean:.3}, \"p10_us\": {:.3}, \"p90_us\": {:.3}, \"checksum\": {checksum}}}",
        at(0.5),
        at(0.1),
        at(0.9)
    );
    Ok(())
}
