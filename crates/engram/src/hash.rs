//! Per-sequence n-gram history and the row hash.
