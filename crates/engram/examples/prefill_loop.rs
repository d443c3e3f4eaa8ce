//! A prefill with no compute: the first TOKENS tokens of a text file (the
//! vendored tokenizer), every 512-token chunk waited for in both tables in
//! turn (a chunk sweep), in f32 or raw rows. For counting the prefill
//! path's instructions under callgrind: the readers' are the inclusive
//! count of `ChunkTask::run` (the tokenizer's load is outside it).
//!
//! `valgrind --tool=callgrind target/release/examples/prefill_loop MODEL PROMPT [TOKENS] [f32|raw]`
//!
//! Prints the number of row bytes delivered.

mod args;

use engram::layout::token_map::{encode, vendored_tokenizer};
use engram::open::EngineBuilder;
use engram::prefetch::RowFormat;

fn main() -> engram::Result<()> {
    let args = args::Args::new("prefill_loop MODEL PROMPT [TOKENS] [f32|raw]");
    let model = args.required(1);
    let prompt_file = args.required(2);
    let tokens: usize = args.number(3, "TOKENS", 4096);
    let mut builder = EngineBuilder::default();
    builder.prefetch.format = match args.optional(4).unwrap_or("f32") {
        "raw" => RowFormat::Raw,
        _ => RowFormat::F32,
    };
    let text =
        std::fs::read_to_string(prompt_file).map_err(|e| engram::Error::io(prompt_file, e))?;
    let mut prompt = encode(vendored_tokenizer()?, &text, prompt_file)?;
    prompt.truncate(tokens);
    let tokens = prompt.len() as u32;
    let opened = builder.open(model)?;
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
