//! Environment variables reach an engine's options only through
//! `engram_options_apply_env`, and a value that does not parse is an
//! error naming the variable and the value. A test binary of its own, as it
//! sets the process's environment.

mod support;

use engram_ffi::engram_status::*;
use engram_ffi::*;
use support::{expect, ok};

fn defaults() -> engram_options {
    // SAFETY: zeroed plain integers, then filled by the library.
    let mut opts: engram_options = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    ok(unsafe { engram_options_default(&mut opts) });
    opts
}

#[test]
fn env_applies_only_when_asked_and_bad_values_are_named() {
    std::env::set_var("ENGRAM_READERS", "batch");
    std::env::set_var("ENGRAM_REUSE_MIB", "3");
    std::env::set_var("ENGRAM_PREFETCH", "0");
    // The defaults read no environment: they are the core's.
    let plain = defaults();
    assert_eq!(plain.readers, ENGRAM_READERS_NORMAL);
    assert_eq!(plain.reuse_bytes, 16 << 20);
    assert_eq!((plain.prefetch, plain.prefill_batches_in_flight), (1, 2));
    assert_eq!(plain.format, ENGRAM_FORMAT_RAW);

    let mut opts = plain;
    // SAFETY: valid options.
    ok(unsafe { engram_options_apply_env(&mut opts) });
    assert_eq!(opts.readers, ENGRAM_READERS_BATCH);
    assert_eq!(opts.reuse_bytes, 3 << 20);
    assert_eq!(opts.prefetch, 0);
    assert_eq!(opts.chunk_tokens, plain.chunk_tokens);

    for (var, value) in [("ENGRAM_READERS", "fast"), ("ENGRAM_REUSE_MIB", "lots")] {
        std::env::set_var(var, value);
        let mut opts = plain;
        // SAFETY: valid options.
        let status = unsafe { engram_options_apply_env(&mut opts) };
        expect(status, ENGRAM_INVALID_ARGUMENT, var);
        expect(status, ENGRAM_INVALID_ARGUMENT, value);
        assert_eq!(opts, plain, "a failed call changes nothing");
        std::env::remove_var(var);
    }

    // An older caller's struct (before `readers`) gets only its own bytes
    // written.
    #[repr(C)]
    struct Older {
        base: engram_options,
        guard: u64,
    }
    let mut older = Older {
        base: plain,
        guard: 0,
    };
    let old_size = std::mem::offset_of!(engram_options, readers);
    older.base.struct_size = old_size as u32;
    older.base.readers = 99; // past the caller's struct: must stay
                             // SAFETY: valid options of an older size.
    ok(unsafe { engram_options_apply_env(&mut older.base) });
    assert_eq!(older.base.prefetch, 0);
    assert_eq!(older.base.readers, 99);
    assert_eq!(older.base.struct_size as usize, old_size);
    assert_eq!(older.guard, 0);
}
