//! The `engram` command: a thin shell over the `engram` library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

/// Streams Engram rows from SSD behind transformer compute; inspect, hash,
/// read and benchmark Engram models.
#[derive(Debug, Parser)]
#[command(name = "engram", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print a layout: tables, rows, primes and multipliers.
    Layout(commands::layout::LayoutArgs),
    /// Hash text or token ids into the row ids of every table.
    Hash(commands::hash::HashArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Layout(args) => commands::layout::run(args),
        Command::Hash(args) => commands::hash::run(args),
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
