//! Fuzzes the Qwen4-Exp GGUF interpretation: a parsed header's
//! `qwen4exp.*` keys and tensor must give a model or an error, never a
//! panic or an allocation out of proportion to the input.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.gguf");
    if let Ok(header) = engram::model::gguf::read_header_from(data, data.len() as u64, path) {
        let _ = engram::model::qwen::gguf::model_from_header(path, &header);
    }
});
