//! Shared helpers of the engram-ffi tests: a small synthetic model, calls
//! checked for status and message.
#![allow(dead_code)]

use std::ffi::CStr;
use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::layout::preset;
use engram::model::{synth, NoProgress};
use engram_ffi::*;

// Not every test binary that includes this module waits on a thread.
#[allow(unused_imports)]
pub use engram::testing::within;

/// Writes a synthetic V4.1-Flash model with the engram vocab divided by
/// `scale` into `dir`.
pub fn write_model(dir: &Path, scale: u64) -> PathBuf {
    let path = dir.join("v41-flash.gguf");
    let layout = preset("deepseek-v4.1-flash", scale).unwrap();
    synth::write_gguf(&path, &layout, Encoding::E4m3E8m0Row264, 3, &NoProgress).unwrap();
    path
}

/// The thread's last error message.
pub fn last_error() -> String {
    // SAFETY: never NULL; valid until the next call on this thread.
    unsafe { CStr::from_ptr(engram_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts `status` is `want` and the last error mentions `needle`.
#[track_caller]
pub fn expect(status: engram_status, want: engram_status, needle: &str) {
    let message = last_error();
    assert_eq!(status, want, "message: {message}");
    assert!(
        message.contains(needle),
        "message {message:?} does not mention {needle:?}"
    );
}

/// Asserts success.
#[track_caller]
pub fn ok(status: engram_status) {
    assert_eq!(status, engram_status::ENGRAM_OK, "{}", last_error());
    assert_eq!(last_error(), "", "success leaves no message");
}
