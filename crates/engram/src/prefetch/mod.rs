//! The prefetch scheduler: reads Engram rows ahead of the layer that needs
//! them, in prefill (a bounded ring of chunks per table) and in decode (both
//! tables' reads issued the moment the token is known).
//!
//! An [`Engine`] owns a model's row source and a persistent pool of reader
//! threads; [`Sequence`]s on it (several at once) share both, and the row
//! cache if the source has one. A sequence runs a [`Prefill`] over a prompt,
//! then decode steps ([`Sequence::step_begin`] / [`Sequence::step_wait`]),
//! and may send hints (rows of likely next tokens) at low priority.
//!
//! Lifetimes: dropping a prefill, a sequence or the engine cancels its
//! pending reads and waits until no reader touches its buffers; waiters see
//! [`crate::Error::Cancelled`].

mod config;
mod decode;
mod guard;
mod hint;
pub mod lookup;
mod pool;
mod prefill;
mod read;
pub mod ready;
mod reuse;
mod ring;
mod sequence;
pub mod source;
mod sync;
#[cfg(all(test, not(loom)))]
mod tests;
mod view;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use config::{PrefetchConfig, PrefillOrder, RowFormat};
#[cfg(any(test, feature = "test_utils"))]
pub use guard::PanicSite;
pub use hint::{Hints, MAX_ALTERNATIVES, MAX_DRAFT};
pub use prefill::Prefill;
pub use sequence::Sequence;
pub use view::RowsView;

use crate::codec::Encoding;
use crate::hash::Hasher;
use crate::layout::Layout;
use crate::model::Model;
use crate::{Error, Result};
use pool::{Pool, PoolShared};
use source::RowSource;

struct Shared {
    source: Arc<dyn RowSource>,
    hasher: Hasher,
    /// Per table: Some(encoding) when rows are handed out decoded to f32.
    decode: Vec<Option<Encoding>>,
    layout: Layout,
    config: PrefetchConfig,
    columns: usize,
    pool: Arc<PoolShared>,
    next_id: AtomicU64,
}

impl Shared {
    fn ids(&self, n: u64) -> u64 {
        self.next_id.fetch_add(n, Ordering::Relaxed)
    }
}

/// A prefetch engine over one model's rows.
pub struct Engine {
    shared: Arc<Shared>,
    pool: Pool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("source", &self.shared.source.name())
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine reading `layout`'s tables from `source`, with its reader
    /// threads started. Checks that the source has the layout's tables.
    pub fn new(
        source: Arc<dyn RowSource>,
        layout: Layout,
        config: PrefetchConfig,
    ) -> Result<Engine> {
        Engine::with_encodings(source, layout, None, config)
    }

    /// An engine over `model`'s tables read through `source` (opened on the
    /// model's table locations); knows the encodings ([`RowFormat::F32`]).
    pub fn for_model(
        model: &Model,
        source: Arc<dyn RowSource>,
        config: PrefetchConfig,
    ) -> Result<Engine> {
        let encodings = model.tables.iter().map(|t| t.encoding).collect();
        Engine::with_encodings(source, model.layout.clone(), Some(encodings), config)
    }

    fn with_encodings(
        source: Arc<dyn RowSource>,
        layout: Layout,
        encodings: Option<Vec<Encoding>>,
        config: PrefetchConfig,
    ) -> Result<Engine> {
        config.validate()?;
        let columns = check_layout(&layout, source.as_ref())?;
        let decode = decode_plan(&config, encodings, source.as_ref())?;
        let pool = Pool::start(
            config.workers,
            config.decode_workers,
            pool::hint_threads(config.workers),
            config.max_queued_hints,
            config.readers,
        )
        .map_err(|e| Error::io("prefetch reader threads", e))?;
        Ok(Engine {
            shared: Arc::new(Shared {
                hasher: Hasher::new(&layout)?,
                source,
                decode,
                layout,
                config,
                columns,
                pool: pool.shared(),
                next_id: AtomicU64::new(1),
            }),
            pool,
        })
    }

    /// A new, empty sequence.
    pub fn sequence(&self) -> Sequence {
        Sequence::new(self.shared.clone())
    }

    /// The options in force.
    pub fn config(&self) -> &PrefetchConfig {
        &self.shared.config
    }

    /// The layout the engine hashes with.
    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// The row source.
    pub fn source(&self) -> &Arc<dyn RowSource> {
        &self.shared.source
    }

    /// Test switch: makes every reader task of `site` on `table` panic
    /// (outside the row-source call) until called again with `on` false.
    #[cfg(any(test, feature = "test_utils"))]
    pub fn inject_panic(&self, site: PanicSite, table: usize, on: bool) {
        self.shared.pool.faults.set(site, table, on);
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Abandon queued work (its waiters see Cancelled) and join the
        // threads; sequences still alive get Cancelled from then on.
        self.pool.shutdown();
    }
}

fn decode_plan(
    config: &PrefetchConfig,
    encodings: Option<Vec<Encoding>>,
    source: &dyn RowSource,
) -> Result<Vec<Option<Encoding>>> {
    let tables = source.tables();
    match (config.format, encodings) {
        (RowFormat::Raw, _) => Ok(vec![None; tables]),
        (RowFormat::F32, None) => Err(Error::InvalidArgument(
            "f32 rows need the tables' encodings: build the engine with Engine::for_model".into(),
        )),
        (RowFormat::F32, Some(encodings)) => {
            if encodings.len() != tables {
                return Err(Error::InvalidArgument(format!(
                    "{} encodings for {tables} tables",
                    encodings.len()
                )));
            }
            for (t, e) in encodings.iter().enumerate() {
                if e.row_bytes() != source.row_bytes(t) {
                    return Err(Error::InvalidArgument(format!(
                        "table {t}: {e} rows are {} bytes but the source delivers {}",
                        e.row_bytes(),
                        source.row_bytes(t)
                    )));
                }
            }
            Ok(encodings.into_iter().map(Some).collect())
        }
    }
}

/// `n` prompt tokens as a prefill's count, refused above what its ready
/// counters hold.
fn prefill_tokens(n: usize) -> Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|&n| n <= ready::MAX_COUNT)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "a prefill of {n} tokens exceeds {}",
                ready::MAX_COUNT
            ))
        })
}

fn check_layout(layout: &Layout, source: &dyn RowSource) -> Result<usize> {
    let columns = layout.max_ngram_size.saturating_sub(1) * layout.n_heads;
    if layout.tables.is_empty() || columns == 0 {
        return Err(Error::layout("tables", "the layout has no Engram columns"));
    }
    if source.tables() != layout.tables.len() {
        return Err(Error::layout(
            "tables",
            format!(
                "the layout has {} tables but the row source {} has {}",
                layout.tables.len(),
                source.name(),
                source.tables()
            ),
        ));
    }
    for (i, t) in layout.tables.iter().enumerate() {
        let field = |f: &str| format!("tables[{i}].{f}");
        if t.primes.len() != columns || t.offsets.len() != columns {
            return Err(Error::layout(
                field("primes"),
                format!("expected {columns} columns"),
            ));
        }
        if t.multipliers.len() < layout.max_ngram_size {
            return Err(Error::layout(
                field("multipliers"),
                format!("expected {} values", layout.max_ngram_size),
            ));
        }
        let fits = t.primes.iter().zip(&t.offsets).all(|(&p, &o)| {
            p > 0 && u64::from(o) + u64::from(p) <= t.rows.min(source.table_rows(i))
        });
        if !fits {
            return Err(Error::layout(
                field("rows"),
                format!(
                    "a column runs past the table ({} rows in the layout, {} in the source)",
                    t.rows,
                    source.table_rows(i)
                ),
            ));
        }
        if source.row_bytes(i) == 0 {
            return Err(Error::layout(
                field("row_bytes"),
                "the source reports 0-byte rows",
            ));
        }
    }
    Ok(columns)
}
