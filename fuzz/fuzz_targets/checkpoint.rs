//! Fuzzes the checkpoint readers: `config.json` parsing and safetensors
//! header parsing. The input is split at the first NUL byte: the part before
//! is a config.json document, the part after is a safetensors file.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (config, shard) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let _ = engram::model::hf::HfConfig::parse(Path::new("config.json"), config);
    let mut reader = shard;
    if let Ok(h) = engram::model::hf::read_safetensors_header_from(
        &mut reader,
        shard.len() as u64,
        Path::new("model.safetensors"),
    ) {
        // Exercise the parsed tensor infos the way the reader does.
        for (name, info) in h.metadata.tensors() {
            let _ = (name.len(), info.shape.len(), info.data_offsets);
        }
    }
});
