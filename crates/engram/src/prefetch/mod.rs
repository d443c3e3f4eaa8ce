//! The prefetch scheduler: reads Engram rows ahead of the layer that needs
//! them, in prefill (a bounded ring of chunks per table) and in decode (both
//! tables' reads issued the moment the token is known).

pub mod ready;
pub mod source;
mod sync;
