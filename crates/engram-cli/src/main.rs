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
        Err(e) => {
            eprintln!("engram: error: {e}");
            ExitCode::FAILURE
        }
    }
}
