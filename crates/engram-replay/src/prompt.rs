//! Prompts: a text file, a corpus directory of them, or this repository's
//! own sources, tokenized with the vendored DeepSeek V4 tokenizer.

use std::path::{Path, PathBuf};

use engram::layout::{self, token_map::VENDORED_SOURCE_NAME};
use engram::{Error, Result};

/// One prompt of a benchmark: the tokens prefilled and the tokens decoded
/// after them, one step each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// Where it came from (a file's path), for reports.
    pub name: String,
    /// Prefilled tokens.
    pub prompt: Vec<u32>,
    /// Decoded tokens, teacher forced.
    pub continuation: Vec<u32>,
}

impl Prompt {
    /// The first `prefill` tokens of `tokens` as the prompt, the next
    /// `decode` as its continuation; an error naming `name` if too few.
    pub fn split(
        name: &str,
        mut tokens: Vec<u32>,
        prefill: usize,
        decode: usize,
    ) -> Result<Prompt> {
        let need = prefill.saturating_add(decode);
        if tokens.len() < need {
            return Err(Error::InvalidArgument(format!(
                "{name}: the prompt holds {} tokens; --prefill plus --decode asks for {need}",
                tokens.len()
            )));
        }
        tokens.truncate(need);
        let continuation = tokens.split_off(prefill);
        Ok(Prompt {
            name: name.to_string(),
            prompt: tokens,
            continuation,
        })
    }

    /// The first `prefill + decode` tokens of the text file at `path`.
    pub fn from_file(path: &Path, prefill: usize, decode: usize) -> Result<Prompt> {
        let tokens = file_tokens(path, prefill.saturating_add(decode))?;
        Prompt::split(&path.display().to_string(), tokens, prefill, decode)
    }
}

/// Every regular file of the corpus directory `dir`, sorted by name (files
/// whose name starts with `.` skipped), as prompts; an error naming the
/// directory if it holds none, or the file that is too short.
pub fn corpus(dir: &Path, prefill: usize, decode: usize) -> Result<Vec<Prompt>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        let hidden = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if path.is_file() && !hidden {
            files.push(path);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{}: the corpus directory holds no prompt file (build one with scripts/corpus.py)",
            dir.display()
        )));
    }
    files
        .iter()
        .map(|f| Prompt::from_file(f, prefill, decode))
        .collect()
}

/// The tokens of `text` under the vendored tokenizer.
pub fn tokenize(text: &str) -> Result<Vec<u32>> {
    let tokenizer = layout::vendored_tokenizer()?;
    layout::encode(tokenizer, text, VENDORED_SOURCE_NAME)
}

/// The first `need` tokens of the text file at `path`; an error naming the
/// file if it holds fewer.
pub fn file_tokens(path: &Path, need: usize) -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut tokens = tokenize(&text)?;
    if tokens.len() < need {
        return Err(Error::InvalidArgument(format!(
            "{}: the prompt file holds {} tokens; --prefill plus --decode asks for {need}",
            path.display(),
            tokens.len()
        )));
    }
    tokens.truncate(need);
    Ok(tokens)
}

/// Text of the repository's Rust sources and Markdown docs under `root`
/// (`crates/` and `docs/`), in path order, until it surely holds `need`
/// tokens (a token is at least one byte; eight bytes per token is ample).
pub fn repository_text(root: &Path, need: usize) -> Result<String> {
    let mut files = Vec::new();
    for sub in ["crates", "docs"] {
        collect_sources(&root.join(sub), &mut files)?;
    }
    files.sort();
    let mut text = String::new();
    for file in &files {
        if text.len() > need.saturating_mul(8) {
            break;
        }
        text.push_str(&std::fs::read_to_string(file).map_err(|e| Error::io(file, e))?);
    }
    Ok(text)
}

/// Appends every `.rs` and `.md` file under `dir` to `files`, skipping
/// build output.
fn collect_sources(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            collect_sources(&path, files)?;
        } else if path
            .extension()
            .is_some_and(|ext| ext == "rs" || ext == "md")
        {
            files.push(path);
        }
    }
    Ok(())
}
