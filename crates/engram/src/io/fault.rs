//! Fault injection (below).
