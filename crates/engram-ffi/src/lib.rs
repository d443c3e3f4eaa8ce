//! The C ABI of engram-prefetch, for the Metal and CUDA runtimes written in
//! C, C++ and Objective-C. The header is `include/engram.h`, generated from
//! this crate by cbindgen (a test fails while the committed copy is stale).
//!
//! Rules every entry point keeps (see `docs/c-abi.md`):
//! - it returns an [`engram_status`]; on failure
//!   [`engram_last_error`] names what was wrong, per thread;
//! - no panic crosses the boundary (caught, reported as `ENGRAM_PANIC`);
//! - handles are opaque numbers looked up in a table of live objects, never
//!   dereferenced, so NULL, freed, ended and wrong-kind handles are
//!   statuses, not undefined behaviour;
//! - pointers from the caller are checked for NULL and alignment, lengths
//!   before any byte is touched.
//!
//! Ownership: an engine owns its model, row source, cache and reader
//! threads; a sequence owns its decode buffers and at most one live prefill
//! (its rings). Rows handed out point into those buffers, or are copied
//! into the caller's buffer by the `_into` variants.

#![deny(missing_docs)]

mod engine;
mod handles;
mod options;
mod prefill;
mod ptr;
mod rows;
mod seq;
mod status;
mod text;

pub use engine::{
    engram_close, engram_engine, engram_engine_info, engram_info, engram_open, engram_rows_read,
    engram_stats_json, engram_table, engram_table_info,
};
pub use options::{
    engram_options, engram_options_apply_env, engram_options_default, ENGRAM_BACKEND_AUTO,
    ENGRAM_BACKEND_MMAP, ENGRAM_BACKEND_PSYNC, ENGRAM_BACKEND_URING, ENGRAM_ENCODING_BF16,
    ENGRAM_ENCODING_E4M3_E8M0_32_ROW264, ENGRAM_ENCODING_F16, ENGRAM_ENCODING_F32,
    ENGRAM_ENCODING_FP8_E4M3, ENGRAM_ENCODING_LLOYD4_E5M3_32_R136, ENGRAM_ENCODING_MLX4,
    ENGRAM_ENCODING_Q4_0, ENGRAM_ENCODING_Q4_1, ENGRAM_ENCODING_Q5_1, ENGRAM_ENCODING_Q8_0,
    ENGRAM_FORMAT_F32, ENGRAM_FORMAT_RAW, ENGRAM_PREFILL_ORDER_AUTO, ENGRAM_PREFILL_ORDER_CHUNK,
    ENGRAM_READERS_BATCH, ENGRAM_READERS_NORMAL, ENGRAM_READERS_RAISED, ENGRAM_READERS_REALTIME,
};
pub use prefill::{
    engram_prefill, engram_prefill_begin, engram_prefill_end, engram_prefill_info,
    engram_prefill_release, engram_prefill_wait, engram_prefill_wait_into,
};
pub use rows::engram_rows;
pub use seq::{
    engram_hint, engram_hint_ex, engram_hints, engram_seq, engram_seq_free, engram_seq_new,
    engram_seq_row_ids, engram_seq_stall, engram_seq_stats_json, engram_stall, engram_step_begin,
    engram_step_wait, engram_step_wait_into, ENGRAM_PHASE_DECODE, ENGRAM_PHASE_PREFILL,
};
pub use status::{engram_last_error, engram_status, engram_status_name};
pub use text::engram_string_free;
