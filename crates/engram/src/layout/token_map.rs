//! Folding a tokenizer's vocabulary into compressed ids.
//!
//! Tokens whose decoded text normalizes to the same key share one compressed
//! id; ids are handed out in order of first appearance while walking token ids
//! upwards. A token whose decoded text contains U+FFFD (a partial UTF-8
//! sequence) is keyed on its raw token string instead, so distinct byte
//! fragments stay distinct.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, OnceLock};

use tokenizers::normalizers::{Lowercase, Replace, Sequence, Strip, StripAccents, NFD, NFKC};
/// The tokenizer type [`encode`] and [`tokenizer_from_file`] work with.
pub use tokenizers::Tokenizer;
use tokenizers::{NormalizedString, Normalizer};

use crate::{Error, Result};

/// The gzip-compressed DeepSeek V4 `tokenizer.json` (see assets/deepseek-v4/NOTICE.md).
#[cfg(feature = "vendored-tokenizer")]
static VENDORED_TOKENIZER_GZ: &[u8] =
    include_bytes!("../../../../assets/deepseek-v4/tokenizer.json.gz");

/// Name used in errors about the vendored tokenizer.
pub const VENDORED_SOURCE_NAME: &str = "vendored deepseek-v4 tokenizer.json";

/// Upper bound on the decompressed vendored tokenizer (it is about 6.4 MB).
const MAX_TOKENIZER_JSON_BYTES: u64 = 64 << 20;

/// A lone space survives normalization as this private-use character, which
/// `Strip` does not remove; it is turned back into a space at the end.
const LONE_SPACE_PLACEHOLDER: &str = "\u{E000}";

/// Tokenizer id -> compressed id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMap {
    /// `map[token]` is the compressed id of `token`.
    pub map: Arc<[u32]>,
    /// Number of distinct compressed ids (all entries are below it).
    pub compressed_vocab_size: u32,
}

impl TokenMap {
    /// Wraps an explicit map (as read from a model file). Entries are checked
    /// against `compressed_vocab_size` by layout validation.
    pub fn new(map: impl Into<Arc<[u32]>>, compressed_vocab_size: u32) -> Self {
        TokenMap {
            map: map.into(),
            compressed_vocab_size,
        }
    }

    /// Builds the map from the bytes of a `tokenizer.json`; `source_name`
    /// names the file in errors.
    pub fn from_tokenizer_json(bytes: &[u8], source_name: &str) -> Result<TokenMap> {
        let tokenizer = parse_tokenizer(bytes, source_name)?;
        Self::from_tokenizer(&tokenizer, source_name)
    }

    /// Builds the map from a loaded tokenizer, covering every id including
    /// added and special tokens.
    pub fn from_tokenizer(tokenizer: &Tokenizer, source_name: &str) -> Result<TokenMap> {
        let normalizer = key_normalizer(source_name)?;
        let vocab = tokenizer.get_vocab_size(true);
        let mut ids_by_key: HashMap<String, u32> = HashMap::with_capacity(vocab);
        let mut map = Vec::with_capacity(vocab);
        for token in 0..vocab as u32 {
            let key = fold_key(tokenizer, &normalizer, token, source_name)?;
            let next = ids_by_key.len() as u32;
            map.push(*ids_by_key.entry(key).or_insert(next));
        }
        Ok(TokenMap {
            map: map.into(),
            compressed_vocab_size: ids_by_key.len() as u32,
        })
    }

    /// The map of the vendored DeepSeek V4 tokenizer, built once per process.
    pub fn vendored() -> Result<&'static TokenMap> {
        static MAP: OnceLock<std::result::Result<TokenMap, String>> = OnceLock::new();
        let built = MAP.get_or_init(|| {
            let tokenizer = vendored_tokenizer().map_err(|e| e.to_string())?;
            Self::from_tokenizer(tokenizer, VENDORED_SOURCE_NAME).map_err(|e| e.to_string())
        });
        built
            .as_ref()
            .map_err(|reason| tokenizer_error(VENDORED_SOURCE_NAME, reason))
    }

    /// Number of tokenizer ids the map covers.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when the map covers no token.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

fn tokenizer_error(source_name: &str, reason: impl ToString) -> Error {
    Error::Tokenizer {
        source_name: source_name.to_string(),
        reason: reason.to_string(),
    }
}

fn parse_tokenizer(bytes: &[u8], source_name: &str) -> Result<Tokenizer> {
    Tokenizer::from_bytes(bytes).map_err(|e| tokenizer_error(source_name, e))
}

/// NFKC, NFD, strip accents, lowercase, whitespace runs to one space, a lone
/// space kept as a space, strip.
fn key_normalizer(source_name: &str) -> Result<Sequence> {
    let replace = |pattern: tokenizers::normalizers::replace::ReplacePattern, with: &str| {
        Replace::new(pattern, with).map_err(|e| tokenizer_error(source_name, e))
    };
    use tokenizers::normalizers::replace::ReplacePattern::{Regex, String as Literal};
    Ok(Sequence::new(vec![
        NFKC.into(),
        NFD.into(),
        StripAccents.into(),
        Lowercase.into(),
        replace(Regex("[ \t\r\n]+".into()), " ")?.into(),
        replace(Regex("^ $".into()), LONE_SPACE_PLACEHOLDER)?.into(),
        Strip::new(true, true).into(),
        replace(Literal(LONE_SPACE_PLACEHOLDER.into()), " ")?.into(),
    ]))
}

/// The string tokens are grouped by.
fn fold_key(
    tokenizer: &Tokenizer,
    normalizer: &Sequence,
    token: u32,
    source_name: &str,
) -> Result<String> {
    let text = tokenizer
        .decode(&[token], false)
        .map_err(|e| tokenizer_error(source_name, format!("decoding token {token}: {e}")))?;
    if text.contains('\u{FFFD}') {
        return tokenizer.id_to_token(token).ok_or_else(|| {
            tokenizer_error(source_name, format!("token {token} has no token string"))
        });
    }
    if text.is_ascii() {
        let key = ascii_key(&text);
        return Ok(if key.is_empty() { text } else { key });
    }
    let mut normalized = NormalizedString::from(text.as_str());
    normalizer
        .normalize(&mut normalized)
        .map_err(|e| tokenizer_error(source_name, format!("normalizing token {token}: {e}")))?;
    let key = normalized.get();
    Ok(if key.is_empty() {
        text
    } else {
        key.to_string()
    })
}

/// The key normalizer's result for ASCII text, computed directly: NFKC, NFD
/// and accent stripping leave ASCII unchanged, so only lowercasing,
/// whitespace collapsing, the lone-space rule and stripping remain. About
/// half the vocabulary is ASCII and this path is far cheaper than the
/// alignment-tracking normalizer; tests check it against that normalizer.
fn ascii_key(text: &str) -> String {
    let mut collapsed = String::with_capacity(text.len());
    let mut in_run = false;
    for c in text.chars() {
        // The regex `[ \t\r\n]+` (not `char::is_whitespace`, which also
        // covers \x0B and \x0C).
        if matches!(c, ' ' | '\t' | '\r' | '\n') {
            if !in_run {
                collapsed.push(' ');
            }
            in_run = true;
        } else {
            collapsed.push(c.to_ascii_lowercase());
            in_run = false;
        }
    }
    if collapsed == " " {
        return collapsed;
    }
    // `Strip` trims `char::is_whitespace`, which includes \x0B and \x0C.
    collapsed.trim_matches(char::is_whitespace).to_string()
}

/// The vendored DeepSeek V4 `tokenizer.json`, decompressed.
///
/// Without the `vendored-tokenizer` feature the library carries no copy,
/// and this (so every vendored accessor) is an [`Error::Tokenizer`] that
/// says so.
#[cfg(not(feature = "vendored-tokenizer"))]
pub fn vendored_tokenizer_json() -> Result<Vec<u8>> {
    Err(tokenizer_error(
        VENDORED_SOURCE_NAME,
        "not in this build of engram (cargo feature `vendored-tokenizer`); a model file \
         that leaves out its token map needs it (`engram transcode` writes the map into \
         the file)",
    ))
}

/// The vendored DeepSeek V4 `tokenizer.json`, decompressed.
#[cfg(feature = "vendored-tokenizer")]
pub fn vendored_tokenizer_json() -> Result<Vec<u8>> {
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(VENDORED_TOKENIZER_GZ)
        .take(MAX_TOKENIZER_JSON_BYTES)
        .read_to_end(&mut json)
        .map_err(|e| tokenizer_error(VENDORED_SOURCE_NAME, format!("decompressing: {e}")))?;
    Ok(json)
}

/// The vendored DeepSeek V4 tokenizer, parsed once per process.
pub fn vendored_tokenizer() -> Result<&'static Tokenizer> {
    static TOKENIZER: OnceLock<std::result::Result<Tokenizer, String>> = OnceLock::new();
    let parsed = TOKENIZER.get_or_init(|| {
        let json = vendored_tokenizer_json().map_err(|e| e.to_string())?;
        Tokenizer::from_bytes(json).map_err(|e| e.to_string())
    });
    parsed
        .as_ref()
        .map_err(|reason| tokenizer_error(VENDORED_SOURCE_NAME, reason))
}

/// A `tokenizer.json` read from `path` (at most 64 MiB) and parsed: for
/// layouts that ship no tokenizer (Qwen4-Exp hashes its own tokenizer's raw
/// ids). Errors name the file.
pub fn tokenizer_from_file(path: &std::path::Path) -> Result<Tokenizer> {
    let source_name = path.display().to_string();
    let file = std::fs::File::open(path)
        .map_err(|e| tokenizer_error(&source_name, format!("opening: {e}")))?;
    let mut json = Vec::new();
    file.take(MAX_TOKENIZER_JSON_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| tokenizer_error(&source_name, format!("reading: {e}")))?;
    if json.len() as u64 > MAX_TOKENIZER_JSON_BYTES {
        return Err(tokenizer_error(
            &source_name,
            format!("is larger than {MAX_TOKENIZER_JSON_BYTES} bytes"),
        ));
    }
    parse_tokenizer(&json, &source_name)
}

/// Tokenizes `text` without adding special tokens (as the hash is defined on
/// the raw token stream); `source_name` names the tokenizer in errors.
pub fn encode(tokenizer: &Tokenizer, text: &str, source_name: &str) -> Result<Vec<u32>> {
    let encoding = tokenizer
        .encode(text, false)
        .map_err(|e| tokenizer_error(source_name, format!("encoding text: {e}")))?;
    Ok(encoding.get_ids().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(text: &str) -> String {
        let normalizer = key_normalizer("test").unwrap();
        let mut n = NormalizedString::from(text);
        normalizer.normalize(&mut n).unwrap();
        n.get().to_string()
    }

    #[test]
    fn ascii_fast_path_equals_the_normalizer() {
        let pieces = [
            "", " ", "  ", "\t", "\r\n", "\x0b", "\x0c", "a", "Z", "\x00", "\x7f", "_",
        ];
        let mut samples: Vec<String> = (0u8..128).map(|b| char::from(b).to_string()).collect();
        for a in pieces {
            for b in pieces {
                for c in ["", "Ab", " x ", "\x0b "] {
                    samples.push(format!("{a}{c}{b}"));
                    samples.push(format!("{c}{a}{b}{c}"));
                }
            }
        }
        samples.extend(
            [
                "Hello World",
                "  Foo\tBAR \n",
                " \x0c ",
                "\x0c\x0c",
                " \x0b",
            ]
            .map(String::from),
        );
        for s in samples {
            assert_eq!(ascii_key(&s), key_of(&s), "{s:?}");
        }
    }

    #[test]
    fn normalizer_folds_case_accents_width_and_whitespace() {
        assert_eq!(key_of("  Héllo\t\n World "), "hello world");
        assert_eq!(key_of("ＡＢＣ"), "abc");
        assert_eq!(key_of(" "), " ");
        assert_eq!(key_of("\n"), " ");
        assert_eq!(key_of("\t\t"), " ");
        assert_eq!(key_of("  x"), "x");
    }
}
