//! The replay benchmark of engram-prefetch: replays the prefill of a prompt
//! and the decode of its continuation against a compute model (a stand-in
//! GPU or a small real transformer), under several row-fetching schedules,
//! and reports the per-token stall each one leaves.
//!
//! The pieces: [`compute`] (what stands in for the forward pass),
//! [`schedule`] (how rows reach it: `sync`, `ds4`, `overlap`, `full`),
//! [`driver`] (the replay loop: prefill sweeps, decode steps, hints),
//! [`bench`](mod@bench) (every schedule in turn, cold, repeated, over a corpus),
//! [`report`] (the JSON document and the terminal table), [`summary`]
//! (medians, spreads, ratios), [`floor`] and [`device`] (the physical floor,
//! and the one device probe and table eviction), [`iobench`] (the harness
//! of `engram iobench`), [`cputime`] (CPU cost), [`cores`]
//! (pinning), [`plot`] (the SVG), [`prompt`] and [`rss`].

#![deny(missing_docs)]

pub mod bench;
pub mod compute;
pub mod cores;
pub mod cputime;
pub mod device;
pub mod driver;
pub mod floor;
pub mod hints;
pub mod iobench;
pub mod plot;
pub mod prompt;
pub mod report;
pub mod rss;
pub mod schedule;
pub mod summary;
mod table;

pub use bench::{run_bench, BenchConfig, Progress};
pub use prompt::Prompt;
pub use report::Report;
