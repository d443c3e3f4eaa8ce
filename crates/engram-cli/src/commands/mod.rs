//! One module per subcommand.

pub mod inspect;
pub mod iobench;
pub mod pack;
pub mod rows;
pub mod synth;
pub mod transcode;

/// Parses an encoding name as written in model files.
pub fn parse_encoding(name: &str) -> Result<engram::codec::Encoding, String> {
    engram::codec::Encoding::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = engram::codec::Encoding::ALL
            .iter()
            .map(|e| e.name())
            .collect();
        format!("unknown encoding {name:?} (known: {})", known.join(", "))
    })
}
