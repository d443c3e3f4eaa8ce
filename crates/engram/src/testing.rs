//! Helpers for tests of this crate and of the crates built on it (behind
//! `cfg(any(test, feature = "test_utils"))`, like the panic switch): one
//! timeout guard and one small scheduler configuration instead of a copy
//! per test suite.

use std::sync::mpsc;
use std::time::Duration;

use crate::prefetch::PrefetchConfig;

/// A scheduler configuration small enough that a prompt of a few dozen
/// tokens spans several chunks, read batches and ring laps (16-token chunks
/// after a 4-token first one, 8-token read batches, a 2-chunk ring), and
/// that always overlaps (no short-prompt threshold).
pub fn small_prefetch() -> PrefetchConfig {
    PrefetchConfig {
        chunk_tokens: 16,
        first_chunk_tokens: 4,
        read_batch_tokens: 8,
        ring_chunks: 2,
        overlap_threshold: 0,
        ..PrefetchConfig::default()
    }
}

/// Runs `f` on a thread and fails the test if it does not finish within
/// `limit`, so a wait that never ends is a failure, not a stuck suite. A
/// panic in `f` is passed on as the caller's own.
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    // Miri interprets about a thousand times slower than native code.
    let limit = if cfg!(miri) { limit * 200 } else { limit };
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => {
            handle.join().unwrap();
            value
        }
        // The closure panicked before sending: surface its panic.
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the closure sent nothing and did not panic"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("timed out after {limit:?}: a wait hung"),
    }
}
