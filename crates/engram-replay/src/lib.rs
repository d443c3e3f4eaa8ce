//! The replay benchmark of engram-prefetch: replays the prefill of a prompt
//! and the decode of its continuation against a compute model (a stand-in
//! GPU or a small real transformer), under several row-fetching schedules,
//! and reports the per-token stall each one leaves.
//!
//! The pieces: [`compute`] (what stands in for the forward pass),
//! [`schedule`] (how rows reach it: `sync`, `ds4`, `overlap`, `full`),
//! [`driver`] (the replay loop: prefill sweeps, decode steps, hints),
//! [`bench`] (every schedule in turn, cold), [`report`] (JSON and the
//! terminal table), [`plot`] (the SVG), [`prompt`] and [`rss`].

#![deny(missing_docs)]

pub mod bench;
pub mod compute;
pub mod driver;
pub mod hints;
pub mod plot;
pub mod prompt;
pub mod report;
pub mod rss;
pub mod schedule;

pub use bench::{run_bench, BenchConfig};
pub use report::Report;
