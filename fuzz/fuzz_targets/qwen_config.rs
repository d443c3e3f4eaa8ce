//! Fuzzes the Qwen4-Exp checkpoint readers' parsers: `config.json` (the
//! bytes up to the first NUL) and PLE tensor names (each later line).
//! Any input must give a value or an error, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (config, names) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(config) {
        let path = Path::new("config.json");
        if let Ok(c) = engram::model::qwen::config::QwenConfig::parse(path, &json) {
            let _ = engram::model::qwen::derive_layout(path, &c.params);
        }
    }
    for line in String::from_utf8_lossy(names).lines() {
        let _ = engram::model::qwen::names::parse(line);
    }
});
