//! engram-prefetch: stream Engram rows (hashed n-gram embedding rows) from SSD
//! and hide the reads behind the compute of the transformer blocks that precede
//! each Engram layer.
//!
//! Data flows one way: tokens -> [`hash::History`] -> row ids -> row source ->
//! per-table buffers -> the consumer at the Engram layer. See
//! `docs/ARCHITECTURE.md` for the map of the crate.

#![deny(missing_docs)]

pub mod cache;
pub mod codec;
pub mod error;
pub mod hash;
pub mod hot;
pub mod io;
pub mod layout;
pub mod model;
pub mod open;
pub mod prefetch;
pub mod splitmix;
pub mod stats;
#[cfg(any(test, feature = "test_utils"))]
pub mod testing;

pub use error::{Error, ErrorKind, Result};
