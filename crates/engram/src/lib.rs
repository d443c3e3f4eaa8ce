//! engram-prefetch: stream Engram rows (hashed n-gram embedding rows) from SSD
//! and hide the reads behind the compute of the transformer blocks that precede
//! each Engram layer.
//!
//! An embedder opens a model with [`EngineBuilder`] (options by field or by
//! name from [`OPTIONS`]; the environment only through
//! [`EngineBuilder::apply_env`]), gets an [`OpenEngine`], runs one
//! [`Sequence`] per request: a [`Prefill`] whose waits return a
//! [`RowsView`] per table, then decode steps. Data flows one way: tokens ->
//! row ids -> row source -> per-table buffers -> the consumer at the Engram
//! layer. See `docs/ARCHITECTURE.md` for the map of the crate.

#![deny(missing_docs)]

/// Declares the crate's internal modules: `pub`, since the bindings, the
/// bench and the CLI of this workspace reach into them, but hidden from the
/// docs, where an embedder finds the items re-exported below. One list, so
/// a module cannot be added without the attribute.
macro_rules! internal_modules {
    ($($name:ident),* $(,)?) => {
        $(#[doc(hidden)] pub mod $name;)*
    };
}

internal_modules!(
    cache, codec, error, hash, hot, io, layout, model, open, prefetch, splitmix, stats,
);
#[cfg(any(test, feature = "test_utils"))]
#[doc(hidden)]
pub mod testing;

pub use codec::Encoding;
pub use error::{Error, ErrorKind, Result};
pub use hot::{HotConfig, HotSet};
pub use io::threads::ReaderSched;
pub use io::{Backend, IoConfig};
pub use layout::Family;
pub use model::Model;
pub use open::{
    option, CacheReport, EngineBuilder, EngineInfo, EngineOption, OpenEngine, SeqCall, SeqError,
    SeqState, SharedSequence, TableInfo, ENV_VARS, OPTIONS,
};
pub use prefetch::{
    Engine, Hints, PrefetchConfig, Prefill, PrefillOrder, RowFormat, RowsView, Sequence,
};
pub use stats::{HintKindUse, HintUse, PhaseStats, Stats, TableStats};
