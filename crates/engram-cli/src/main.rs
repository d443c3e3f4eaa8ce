//! The `engram` command: a thin shell over the `engram` library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod progress;

/// Streams Engram rows from SSD behind transformer compute; inspect, hash,
/// read, build, convert and benchmark Engram models.
#[derive(Debug, Parser)]
#[command(name = "engram", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build a small model and show the stall each prefetch schedule leaves.
    Demo(commands::demo::Args),
    /// Print a layout: tables, rows, primes and multipliers.
    Layout(commands::layout::LayoutArgs),
    /// Show a model's layout and where its tables are (.gguf file or checkpoint directory).
    Inspect(commands::inspect::Args),
    /// Hash text or token ids into the row ids of every table.
    Hash(commands::hash::HashArgs),
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
    /// Replay a prompt's prefill and decode under several schedules; report the stall.
    Bench(commands::bench::Args),
    /// Count the rows a corpus looks up most; write them to a hot-row file.
    Profile(commands::profile::Args),
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
    let result: commands::CmdResult = match cli.command {
        Command::Demo(a) => commands::demo::run(&a).map_err(Into::into),
        Command::Layout(a) => commands::layout::run(&a),
        Command::Inspect(a) => commands::inspect::run(a).map_err(Into::into),
        Command::Hash(a) => commands::hash::run(&a),
        Command::Rows(a) => commands::rows::run(a).map_err(Into::into),
        Command::Synth(a) => commands::synth::run(a).map_err(Into::into),
        Command::Transcode(a) => commands::transcode::run(a).map_err(Into::into),
        Command::Pack(a) => commands::pack::run(a).map_err(Into::into),
        Command::Iobench(a) => commands::iobench::run(&a).map_err(Into::into),
        Command::Bench(a) => commands::bench::run(&a).map_err(Into::into),
        Command::Profile(a) => commands::profile::run(&a).map_err(Into::into),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that stopped early (`engram hash ... | head`) is not an error.
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("engram: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let io = match e.downcast_ref::<serde_json::Error>() {
        Some(json) => json.io_error_kind(),
        None => e.downcast_ref::<std::io::Error>().map(std::io::Error::kind),
    };
    io == Some(std::io::ErrorKind::BrokenPipe)
}
