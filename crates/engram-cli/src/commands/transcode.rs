//! `engram transcode M --to ENCODING --out FILE.gguf`: every row re-encoded,
//! streamed in bounded chunks, into a new ds4 GGUF.

use std::path::PathBuf;

use engram::codec::Encoding;
use engram::model::{convert, Model};

/// Arguments of `engram transcode`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A .gguf file or a Hugging Face checkpoint directory.
    model: PathBuf,
    /// Target encoding.
    #[arg(long, value_parser = super::parse_encoding)]
    to: Encoding,
    /// Output .gguf file.
    #[arg(long)]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs `engram transcode`.
pub fn run(args: Args) -> engram::Result<()> {
    let model = Model::open(&args.model)?;
    let bar = crate::progress::Bar::new("transcode", args.quiet);
    let out = convert::transcode(&model, args.to, &args.out, &bar)?;
    bar.finish();
    eprintln!(
        "wrote {} ({} tables, {})",
        args.out.display(),
        out.tables.len(),
        args.to
    );
    Ok(())
}
