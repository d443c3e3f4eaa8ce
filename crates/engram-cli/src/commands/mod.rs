//! One module per subcommand, plus the arguments several of them share.

pub mod bench;
pub mod demo;
pub mod hash;
pub mod inspect;
pub mod iobench;
pub mod layout;
pub mod pack;
pub mod profile;
pub mod rows;
pub mod synth;
pub mod transcode;

use engram::layout::{self as engram_layout, Layout};

/// Any error a command reports: printed on stderr, exit status 1.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Where a command's layout comes from. Today: a named preset at a scale;
/// a model file (`--model`) joins here later.
#[derive(Debug, Clone, clap::Args)]
pub struct LayoutSource {
    /// Named layout (see `engram layout --help` for the list).
    #[arg(long, default_value = "deepseek-v4.1-flash")]
    pub preset: String,
    /// Divide the preset's engram vocab size by DIV (small models, same hash).
    #[arg(long, value_name = "DIV", default_value_t = 1)]
    pub scale: u64,
}

impl LayoutSource {
    /// A short description for human output.
    pub fn describe(&self) -> String {
        if self.scale == 1 {
            format!("preset {}", self.preset)
        } else {
            format!("preset {} at scale 1/{}", self.preset, self.scale)
        }
    }

    /// Derives and validates the layout.
    pub fn load(&self) -> engram::Result<Layout> {
        engram_layout::preset(&self.preset, self.scale)
    }

    /// Tokenizes `text` with the layout's tokenizer, adding no special tokens.
    pub fn encode(&self, text: &str) -> engram::Result<Vec<u32>> {
        let tokenizer = engram_layout::vendored_tokenizer()?;
        engram_layout::encode(
            tokenizer,
            text,
            engram_layout::token_map::VENDORED_SOURCE_NAME,
        )
    }

    /// The tokenizer's string for `token`, for human output.
    pub fn token_text(&self, token: u32) -> Option<String> {
        let tokenizer = engram_layout::vendored_tokenizer().ok()?;
        tokenizer.decode(&[token], false).ok()
    }
}

/// Formats an integer with thousands separators.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

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
