//! The `engram` command: a thin shell over the `engram` library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod progress;

/// Streams Engram rows from SSD; inspects, reads, builds and converts Engram models.
#[derive(Debug, Parser)]
#[command(name = "engram", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a model's layout and where its tables are (.gguf file or checkpoint directory).
    Inspect(commands::inspect::Args),
    /// Read rows of a table, decoded to f32 or raw.
    Rows(commands::rows::Args),
    /// Write a synthetic model with a preset's layout and random valid rows.
    Synth(commands::synth::Args),
    /// Re-encode a model's tables into a new GGUF.
    Transcode(commands::transcode::Args),
    /// Pack a Hugging Face checkpoint into a GGUF with 264-byte rows.
    Pack(commands::pack::Args),
    /// Measure row reads from storage: single rows, decode and prefill batches.
    Iobench(commands::iobench::IobenchArgs),
}

/// Writes `text` and a newline to stdout. A closed pipe (`engram ... | head`)
/// ends the output quietly instead of panicking like `println!`.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Inspect(a) => commands::inspect::run(a),
        Command::Rows(a) => commands::rows::run(a),
        Command::Synth(a) => commands::synth::run(a),
        Command::Transcode(a) => commands::transcode::run(a),
        Command::Pack(a) => commands::pack::run(a),
        Command::Iobench(a) => commands::iobench::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engram: {e}");
            ExitCode::FAILURE
        }
    }
}
