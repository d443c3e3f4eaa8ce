//! The replay benchmark of engram-prefetch: replays the prefill of a prompt
//! and the decode of its continuation against a compute model (a stand-in
//! GPU or a small real transformer), under several row-fetching schedules,
//! and reports the per-token stall each one leaves.
//!
//! The pieces: [`compute`] (what stands in for the forward pass),
//! [`schedule`] (how rows reach it: `sync`, `ds4`, `overlap`, `full`).

#![deny(missing_docs)]

pub mod compute;
pub mod schedule;
