//! A prefill with no compute: N synthetic tokens, every 512-token chunk
//! waited for in both tables in turn (a chunk sweep), in f32 or raw rows.
//! For counting the prefill path's instructions under callgrind, where the
//! replay bench would add its tokenizer's load:
//!
//! `valgrind --tool=callgrind target/release/examples/prefill_loop MODEL [TOKENS] [f32|raw]`
//!
//! Tokens are `(i * 7919 + i / 3) % min(vocab, 60000)`. Prints the number of
//! row bytes delivered.

mod args;

use engram::open::EngineBuilder;
use engram::prefetch::RowFormat;

fn main() -> engram::Result<()> {
    let args = args::Args::new("prefill_loop MODEL [TOKENS] [f32|raw]");
    let model = args.required(1);
    let tokens: u32 = args.number(2, "TOKENS", 4096);
    let mut builder = EngineBuilder::default();
    builder.prefetch.format = match args.optional(3).unwrap_or("f32") {
        "raw" => RowFormat::Raw,
        _ => RowFormat::F32,
    };
    let opened = builder.open(model)?;
    let vocab = u32::try_from(opened.engine.layout().vocab_size()).unwrap_or(u32::MAX);
    let prompt: Vec<u32> = (0..tokens)
        .map(|i| i.wrapping_mul(7919).wrapping_add(i / 3) % vocab.min(60_000))
        .collect();
    let mut seq = opened.engine.sequence();
    let mut delivered = 0usize;
    let mut prefill = seq.prefill(&prompt, None)?;
    let mut upto = 0;
    while upto < tokens {
        upto = (upto + 512).min(tokens);
        for table in 0..opened.tables() {
            delivered += prefill.wait(table, upto)?.to_vec().len();
        }
    }
    drop(prefill);
    println!("{delivered}");
    Ok(())
}
