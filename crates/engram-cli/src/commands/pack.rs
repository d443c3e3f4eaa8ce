//! `engram pack DIR --out FILE.gguf`: a checkpoint's split rows packed into
//! 264-byte rows in a ds4 GGUF, streamed in bounded chunks.

use std::path::PathBuf;

use engram::model::convert;

/// Arguments of `engram pack`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Hugging Face checkpoint directory.
    dir: PathBuf,
    /// Output .gguf file.
    #[arg(long)]
    out: PathBuf,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// Runs `engram pack`.
pub fn run(args: Args) -> engram::Result<()> {
    let bar = crate::progress::Bar::new("pack", args.quiet);
    let out = convert::pack(&args.dir, &args.out, &bar)?;
    bar.finish();
    eprintln!("wrote {} ({} tables)", args.out.display(), out.tables.len());
    Ok(())
}
