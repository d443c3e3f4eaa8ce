//! [`HotSource`]: a [`RowSource`] that serves hot rows from memory and
//! forwards the rest to the source it wraps (the row cache, then storage).

use std::sync::Arc;

use super::HotSet;
use crate::cache::{Tier, Tiered};
use crate::io::{BatchStats, Priority, RowSource};
use crate::{Error, Result};

/// A hot tier in front of `inner`. Hot rows are not copied into the row
/// cache behind it: they never miss, so caching them would only spend the
/// cache's budget twice.
pub type HotSource<S> = Tiered<S, Arc<HotSet>>;

impl<S: RowSource> HotSource<S> {
    /// Wraps `inner` with `hot`, after checking they agree on tables and
    /// row sizes and that sampled hot rows equal `inner`'s
    /// ([`HotSet::verify`]).
    pub fn new(inner: S, hot: Arc<HotSet>) -> Result<HotSource<S>> {
        if hot.tables().len() != inner.tables() {
            return Err(Error::format(
                hot.path(),
                "tables",
                format!(
                    "{} tables of hot rows for a source of {}",
                    hot.tables().len(),
                    inner.tables()
                ),
            ));
        }
        for (t, table) in hot.tables().iter().enumerate() {
            if table.row_bytes() != inner.row_bytes(t) {
                return Err(Error::format(
                    hot.path(),
                    format!("table {t} row bytes"),
                    format!(
                        "hot rows of {} bytes for a source delivering {}",
                        table.row_bytes(),
                        inner.row_bytes(t)
                    ),
                ));
            }
        }
        hot.verify(&inner)?;
        Ok(Tiered::with_tier(inner, hot))
    }

    /// The hot set.
    pub fn hot(&self) -> &Arc<HotSet> {
        self.tier()
    }
}

impl Tier for Arc<HotSet> {
    type Row<'a> = &'a [u8];

    fn label(&self) -> &'static str {
        "hot"
    }

    fn held(&self, table: usize, row: u32) -> Option<&[u8]> {
        self.table(table).and_then(|h| h.get(row))
    }

    /// Rows read past the hot set are left to the tiers behind it.
    fn fetched(&self, _table: usize, _row: u32, _bytes: &[u8], _priority: Priority) {}

    fn count(&self, hits: u64, _distinct: u64, stats: &mut BatchStats) {
        stats.hot_hits = hits;
    }
}
