//! The row-source contract the scheduler reads through: the row I/O
//! engine's trait and types, re-exported so scheduler users need one path.

pub use crate::io::{BatchStats, Priority, RowRequest, RowSource, TableShape};
