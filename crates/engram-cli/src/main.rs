//! The `engram` command: a thin shell over the `engram` library.

mod commands;

use clap::{Parser, Subcommand};

/// Inspect, hash, read, synthesize and benchmark Engram models.
#[derive(Debug, Parser)]
#[command(name = "engram", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure row reads from storage: single rows, decode and prefill batches.
    Iobench(commands::iobench::IobenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Iobench(args) => commands::iobench::run(args),
    };
    if let Err(err) = result {
        eprintln!("engram: error: {err}");
        std::process::exit(1);
    }
}
