//! Helpers the command-line tests share: running the binary and building a
//! small synthetic model with it.
// Not every test binary that includes this module uses every helper.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `engram` with `args`.
pub fn engram(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_engram"))
        .args(args)
        .output()
        .expect("running engram")
}

/// The standard error of a run, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `engram synth` of the V4.1 preset at `scale` into `dir/m`; returns the
/// path of its `model.gguf`.
pub fn synth_model(dir: &Path, scale: u64) -> String {
    let out = dir.join("m");
    let scale = scale.to_string();
    let o = engram(&[
        "synth",
        "--preset",
        "deepseek-v4.1-flash",
        "--scale",
        &scale,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "synth: {}", stderr(&o));
    out.join("model.gguf").to_string_lossy().into_owned()
}

/// The fields of a layout's JSON (`engram layout --json`, and `layout` in
/// `engram inspect --json`), in their documented order.
pub const LAYOUT_KEYS: [&str; 9] = [
    "layer_ids",
    "max_ngram_size",
    "n_heads",
    "vocab_size",
    "compressed_vocab_size",
    "pad_compressed_id",
    "rows",
    "primes",
    "multipliers",
];
