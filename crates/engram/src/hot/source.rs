//! [`HotSource`]: a [`RowSource`] that serves hot rows from memory and
//! forwards the rest to the source it wraps (the row cache, then storage).

use std::sync::Arc;

use super::HotSet;
use crate::cache::{read_through, Tier, Tiered};
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
    fn label(&self) -> &'static str {
        "hot"
    }

    fn read<S: RowSource + ?Sized>(
        &self,
        inner: &S,
        table: usize,
        rows: &[u32],
        out: &mut [u8],
        priority: Priority,
    ) -> Result<BatchStats> {
        let hot = self.table(table);
        let through = read_through(
            inner,
            table,
            rows,
            out,
            priority,
            |row| hot.and_then(|h| h.get(row)),
            |_, _| {},
        )?;
        let mut stats = through.stats;
        stats.hot_hits = through.hits;
        Ok(stats)
    }
}
