//! The one table of engine options: each option's name (the same in Rust,
//! C and Python), its parser from text, its default (what
//! [`EngineBuilder::default`] holds) and its meaning. The bindings set
//! options by name through [`EngineBuilder::set`]; the environment
//! variables apply only through [`EngineBuilder::apply_env`].

use std::path::PathBuf;

use crate::io::threads::ReaderSched;
use crate::io::ReadOrder;
use crate::io::Backend;
use crate::prefetch::{PrefillOrder, RowFormat};
use crate::{Error, Result};

use super::EngineBuilder;

/// One engine option of [`OPTIONS`].
pub struct EngineOption {
    /// Its name in every binding (`EngineBuilder::set`, the C
    /// `engram_options` field, the Python keyword).
    pub name: &'static str,
    /// What it sets.
    pub doc: &'static str,
    /// What a value looks like (for error messages and docs).
    pub values: &'static str,
    set: fn(&mut EngineBuilder, &str) -> Result<()>,
    get: fn(&EngineBuilder) -> String,
}

impl EngineOption {
    /// The default value as text (what [`EngineBuilder::default`] holds).
    pub fn default_value(&self) -> String {
        (self.get)(&EngineBuilder::default())
    }
}

impl std::fmt::Debug for EngineOption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOption")
            .field("name", &self.name)
            .field("default", &self.default_value())
            .finish_non_exhaustive()
    }
}

/// A value an option holds, read from and written as text.
trait OptionValue: Sized {
    /// What a value looks like.
    const VALUES: &'static str;
    fn parse(text: &str) -> Option<Self>;
    fn show(&self) -> String;
}

impl OptionValue for bool {
    const VALUES: &'static str = "0 or 1 (also false/true, off/on)";
    fn parse(text: &str) -> Option<bool> {
        match text.trim() {
            "0" | "false" | "off" => Some(false),
            "1" | "true" | "on" => Some(true),
            _ => None,
        }
    }
    fn show(&self) -> String {
        u8::from(*self).to_string()
    }
}

macro_rules! whole_numbers {
    ($($t:ty),*) => {$(
        impl OptionValue for $t {
            const VALUES: &'static str = "a whole number";
            fn parse(text: &str) -> Option<$t> {
                text.trim().replace('_', "").parse().ok()
            }
            fn show(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
whole_numbers!(u32, u64, usize);

/// An enum option read by its `parse` and written by its `name`.
macro_rules! by_name {
    ($($t:ty: $values:literal, $parse:expr;)*) => {$(
        impl OptionValue for $t {
            const VALUES: &'static str = $values;
            fn parse(text: &str) -> Option<$t> {
                $parse(text.trim())
            }
            fn show(&self) -> String {
                self.name().into()
            }
        }
    )*};
}
by_name! {
    Backend: "auto, psync, uring or mmap", |t: &str| t.parse().ok();
    RowFormat: "raw or f32", RowFormat::parse;
    PrefillOrder: "auto or chunk", PrefillOrder::parse;
    ReaderSched: "normal, batch, raised or realtime", ReaderSched::parse;
    ReadOrder: "sorted or spread", ReadOrder::parse;
}

impl OptionValue for Option<PathBuf> {
    const VALUES: &'static str = "a file path (empty: none)";
    fn parse(text: &str) -> Option<Option<PathBuf>> {
        Some((!text.is_empty()).then(|| PathBuf::from(text)))
    }
    fn show(&self) -> String {
        self.as_ref()
            .map_or_else(String::new, |p| p.display().to_string())
    }
}

/// `text` as the value of option `name`, or an error naming both.
fn parse<T: OptionValue>(name: &str, text: &str) -> Result<T> {
    T::parse(text).ok_or_else(|| {
        Error::InvalidArgument(format!("option {name} = {text:?}: expected {}", T::VALUES))
    })
}

/// The type of a field, for [`OptionValue::VALUES`] in a `const`.
const fn values_of<T: OptionValue>(_: fn(&EngineBuilder) -> &T) -> &'static str {
    T::VALUES
}

/// The table: each row `name => field of the builder: "what it sets"`.
macro_rules! options {
    ($($name:literal => $($field:ident).+: $doc:literal;)*) => {
        /// Every engine option, in the order the docs list them.
        pub static OPTIONS: &[EngineOption] = &[$(EngineOption {
            name: $name,
            doc: $doc,
            values: values_of(|b: &EngineBuilder| &b.$($field).+),
            set: |b, text| {
                b.$($field).+ = parse($name, text)?;
                Ok(())
            },
            get: |b| OptionValue::show(&b.$($field).+),
        }),*];
    };
}

options! {
    "backend"                  => io.backend: "how rows are read";
    "io_depth"                 => io.depth: "reads in flight: pread threads or io_uring queue depth (1..=4096)";
    "direct_io"                => io.direct: "bypass the page cache (O_DIRECT, F_NOCACHE); turns warm_page_cache off";
    "advise_random"            => io.advise_random: "tell the kernel access is random (no readahead)";
    "max_batch_bytes"          => io.max_batch_bytes: "bounce memory of one batch call";
    "max_read_bytes"           => io.max_read_bytes: "longest single read after coalescing";
    "read_order"               => io.read_order: "order of a batch's reads: sorted (by offset) or spread (over the batch)";
    "format"                   => prefetch.format: "row format waits deliver: raw (as stored) or f32 (decoded)";
    "chunk_tokens"             => prefetch.chunk_tokens: "prefill ring chunk, in tokens";
    "ring_chunks"              => prefetch.ring_chunks: "chunks in a table's prefill ring";
    "first_chunk_tokens"       => prefetch.first_chunk_tokens: "tokens in a prefill's first read batch";
    "read_batch_tokens"        => prefetch.read_batch_tokens: "tokens per later prefill read batch";
    "prefill_batches_in_flight" => prefetch.prefill_batches_in_flight: "prefill read batches in flight at once";
    "prefill_order"            => prefetch.prefill_order: "the order the runtime's prefill takes the tables";
    "reuse_bytes"              => prefetch.reuse_bytes: "bytes per table of a prefill's reuse store (0: no whole-prompt dedup)";
    "warm_page_cache"          => prefetch.warm_page_cache: "past a full ring and store, advise the prompt's later rows into the page cache";
    "overlap_threshold"        => prefetch.overlap_threshold: "prompts shorter than this are read at the wait";
    "prefetch"                 => prefetch.prefetch: "read ahead of the consumer (0: read at the wait)";
    "pipeline"                 => prefetch.pipeline: "chunked prefill pipeline (0: whole tables)";
    "batch"                    => prefetch.batch: "batched reads (0: one request per row)";
    "workers"                  => prefetch.workers: "pool threads for prefill batches (hints get as many, at most 2, of their own)";
    "decode_workers"           => prefetch.decode_workers: "pool threads for decode steps only";
    "readers"                  => prefetch.readers: "scheduling class of every reader thread but the hint threads";
    "lookup_hints"             => prefetch.lookup_hints: "prompt-lookup hints after each decode step";
    "lookup_max_ngram"         => prefetch.lookup_max_ngram: "longest suffix n-gram the prompt-lookup predictor matches";
    "lookup_tokens"            => prefetch.lookup_tokens: "tokens the predictor proposes per step";
    "max_queued_hints"         => prefetch.max_queued_hints: "hint batches queued at most (older ones dropped)";
    "cache_bytes"              => cache_bytes: "row cache budget shared by the engine's sequences (0: none)";
    "hot_path"                 => hot.path: "hot-row file served from memory before the row cache (empty: none)";
    "hot_mlock"                => hot.mlock: "mlock the hot rows";
}

/// The environment variables [`EngineBuilder::apply_env`] reads: each sets
/// one option; `ENGRAM_REUSE_MIB` is in MiB, the others in the option's
/// own values.
pub static ENV_VARS: &[(&str, &str)] = &[
    ("ENGRAM_PREFETCH", "prefetch"),
    ("ENGRAM_PIPELINE", "pipeline"),
    ("ENGRAM_BATCH", "batch"),
    ("ENGRAM_WARM", "warm_page_cache"),
    ("ENGRAM_READERS", "readers"),
    ("ENGRAM_PREFILL_ORDER", "prefill_order"),
    ("ENGRAM_REUSE_MIB", "reuse_bytes"),
    ("ENGRAM_READ_BATCH_TOKENS", "read_batch_tokens"),
    ("ENGRAM_BATCHES_IN_FLIGHT", "prefill_batches_in_flight"),
    ("ENGRAM_READ_ORDER", "read_order"),
];

/// The option named `name`, if there is one.
pub fn option(name: &str) -> Option<&'static EngineOption> {
    OPTIONS.iter().find(|o| o.name == name)
}

fn unknown(name: &str) -> Error {
    let names: Vec<&str> = OPTIONS.iter().map(|o| o.name).collect();
    Error::InvalidArgument(format!(
        "unknown engine option {name:?} (the options: {})",
        names.join(", ")
    ))
}

impl EngineBuilder {
    /// Sets option `name` (a name of [`OPTIONS`]) from text; an unknown
    /// name or a value that does not parse is an error naming both, and
    /// leaves the builder as it was. Ranges are checked at open
    /// ([`EngineBuilder::validate`]).
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut EngineBuilder> {
        let option = option(name).ok_or_else(|| unknown(name))?;
        (option.set)(self, value)?;
        Ok(self)
    }

    /// The value of option `name` as text, if there is such an option.
    pub fn get(&self, name: &str) -> Option<String> {
        option(name).map(|o| (o.get)(self))
    }

    /// Applies the environment variables of [`ENV_VARS`] that are set; a
    /// value that does not parse is an error naming the variable and the
    /// value (and sets nothing). The plain builder reads no environment:
    /// this is the only place the library reads it.
    pub fn apply_env(&mut self) -> Result<&mut EngineBuilder> {
        self.apply_env_from(|name| std::env::var(name).ok())
    }

    /// [`EngineBuilder::apply_env`] with variables looked up by `var`.
    pub fn apply_env_from(
        &mut self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<&mut EngineBuilder> {
        let mut next = self.clone();
        for &(variable, name) in ENV_VARS {
            let Some(value) = var(variable) else {
                continue;
            };
            let text = if variable == "ENGRAM_REUSE_MIB" {
                value
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .and_then(|mib| mib.checked_mul(1 << 20))
                    .map(|bytes| bytes.to_string())
                    .unwrap_or_else(|| format!("{value} (not a whole number of MiB)"))
            } else {
                value.clone()
            };
            next.set(name, &text).map_err(|e| {
                Error::InvalidArgument(format!("environment variable {variable}={value:?}: {e}"))
            })?;
        }
        *self = next;
        Ok(self)
    }

    /// The defaults with the environment variables applied
    /// ([`EngineBuilder::apply_env`]).
    pub fn from_env() -> Result<EngineBuilder> {
        let mut builder = EngineBuilder::default();
        builder.apply_env()?;
        Ok(builder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_reads_back_its_default() {
        let mut b = EngineBuilder::default();
        for o in OPTIONS {
            let text = o.default_value();
            b.set(o.name, &text).unwrap();
            assert_eq!(b.get(o.name).unwrap(), text, "{}", o.name);
            assert!(!o.values.is_empty());
        }
        for &(_, name) in ENV_VARS {
            assert!(option(name).is_some(), "{name}");
        }
    }

    #[test]
    fn a_bad_value_names_the_option_and_the_value() {
        let mut b = EngineBuilder::default();
        let e = b.set("readers", "fast").unwrap_err().to_string();
        assert!(e.contains("readers") && e.contains("\"fast\""), "{e}");
        let e = b.set("io_depth", "-1").unwrap_err().to_string();
        assert!(e.contains("io_depth") && e.contains("-1"), "{e}");
        let e = b.set("no_such", "1").unwrap_err().to_string();
        assert!(e.contains("no_such") && e.contains("chunk_tokens"), "{e}");
        b.set("format", "f32")
            .unwrap()
            .set("hot_path", "x.hot")
            .unwrap();
        assert_eq!(b.prefetch.format, RowFormat::F32);
        assert_eq!(b.hot.path.as_deref(), Some(std::path::Path::new("x.hot")));
    }

    #[test]
    fn env_applies_only_when_asked_and_a_bad_value_is_an_error() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.to_string())
            }
        };
        let mut b = EngineBuilder::default();
        b.apply_env_from(env(&[
            ("ENGRAM_PREFETCH", "0"),
            ("ENGRAM_READERS", " batch "),
            ("ENGRAM_REUSE_MIB", "64"),
            ("ENGRAM_READ_ORDER", "spread"),
        ]))
        .unwrap();
        assert!(!b.prefetch.prefetch && b.prefetch.pipeline);
        assert_eq!(b.io.read_order, ReadOrder::Spread);
        assert_eq!(b.prefetch.readers, ReaderSched::Batch);
        assert_eq!(b.prefetch.reuse_bytes, 64 << 20);
        for (var, value) in [
            ("ENGRAM_READERS", "fast"),
            ("ENGRAM_REUSE_MIB", "lots"),
            ("ENGRAM_READ_ORDER", "backwards"),
        ] {
            let before = b.clone();
            let e = b
                .apply_env_from(|n| (n == var).then(|| value.to_string()))
                .unwrap_err()
                .to_string();
            assert!(e.contains(var) && e.contains(value), "{e}");
            assert_eq!(b.get("reuse_bytes"), before.get("reuse_bytes"));
            assert_eq!(b.get("readers"), before.get("readers"));
        }
    }
}
