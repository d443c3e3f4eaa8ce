//! What a reader task keeps on every exit path, a panic included: it leaves
//! its in-flight counters (so the owner's drop returns) only after dropping
//! its share of the job, and a panic becomes an error for the waiters
//! instead of a thread that vanished without publishing.
//!
//! Also the test-only switch that injects a panic into a task, outside the
//! row-source call (which [`super::read`] already guards).

use std::any::Any;
use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

use super::ready::InFlight;

/// The text of a panic payload (`&str` or `String`; anything else is named
/// as such).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// A task's share of its job (`held`) and the in-flight counters it
/// entered. Dropping it, normally or while unwinding, drops the share first
/// and then leaves every counter: once the owner's `wait_idle` returns, no
/// task holds the job's buffers.
pub(crate) struct Leaving<T> {
    held: ManuallyDrop<T>,
    flights: Vec<Arc<InFlight>>,
}

impl<T> Leaving<T> {
    /// Holds `held` until the drop, then leaves `flights`.
    pub(crate) fn new(held: T, flights: Vec<Arc<InFlight>>) -> Leaving<T> {
        Leaving {
            held: ManuallyDrop::new(held),
            flights,
        }
    }
}

impl<T> Deref for Leaving<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.held
    }
}

impl<T> Drop for Leaving<T> {
    fn drop(&mut self) {
        // SAFETY: `held` is dropped exactly once, here, and never used after.
        unsafe { ManuallyDrop::drop(&mut self.held) };
        for flight in self.flights.drain(..) {
            flight.leave();
        }
    }
}

/// A kind of reader task a test can make panic.
#[cfg(any(test, feature = "test_utils"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicSite {
    /// A prefill batch (ring or read-ahead) of the table.
    Prefill,
    /// A decode step's read of the table.
    Decode,
    /// A hint read of the table.
    Hint,
}

/// Panics armed by a test: each fires in every task of its site and table
/// until disarmed.
#[derive(Default)]
pub(crate) struct PanicSwitch {
    #[cfg(any(test, feature = "test_utils"))]
    armed: std::sync::Mutex<Vec<(PanicSite, usize)>>,
}

impl PanicSwitch {
    /// Arms (or with `on` false, disarms) a panic in tasks of `site` on
    /// `table`.
    #[cfg(any(test, feature = "test_utils"))]
    pub(crate) fn set(&self, site: PanicSite, table: usize, on: bool) {
        let mut armed = super::sync::lock_std(&self.armed);
        armed.retain(|&a| a != (site, table));
        if on {
            armed.push((site, table));
        }
    }

    /// True when a test armed `site` on `table`.
    #[cfg(any(test, feature = "test_utils"))]
    pub(crate) fn armed(&self, site: PanicSite, table: usize) -> bool {
        super::sync::lock_std(&self.armed).contains(&(site, table))
    }

    /// Panics if a test armed `site` on `table`.
    #[cfg(any(test, feature = "test_utils"))]
    pub(crate) fn hit(&self, site: PanicSite, table: usize) {
        if self.armed(site, table) {
            panic!("injected panic in a {site:?} task of table {table}");
        }
    }
}

/// Names a task site in builds without the test switch (where `hit` does
/// nothing), so the call sites read the same in every build.
#[cfg(not(any(test, feature = "test_utils")))]
#[derive(Debug, Clone, Copy)]
pub(crate) enum PanicSite {
    Prefill,
    Decode,
    Hint,
}

#[cfg(not(any(test, feature = "test_utils")))]
impl PanicSwitch {
    #[inline(always)]
    pub(crate) fn hit(&self, _site: PanicSite, _table: usize) {}

    #[inline(always)]
    pub(crate) fn armed(&self, _site: PanicSite, _table: usize) -> bool {
        false
    }
}
