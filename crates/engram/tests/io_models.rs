//! Row sources over real model files (synthetic GGUF and Hugging Face
//! checkpoints, both encodings) return exactly the generator's rows, with
//! every backend, buffered and direct, with and without the row cache.

use std::sync::Arc;
use tempfile::TempDir;

use engram::cache::{CachedSource, RowCache};
use engram::codec::Encoding;
use engram::io::{open_source, Backend, IoConfig, RowSource};
use engram::model::synth::{self, SynthFormat};
use engram::model::{Model, NoProgress};

const PRESET: &str = "deepseek-v4.1-flash";
/// About 5.9K rows per table.
const SCALE: u64 = 65536;
const SEED: u64 = 5;

/// A synthetic model of `format` in `encoding`, opened, and the temporary
/// directory that holds its files (removed on drop).
fn synth_model(format: SynthFormat, encoding: Encoding) -> (TempDir, Model) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(encoding.name());
    let (path, _) =
        synth::synth_preset(&out, format, PRESET, SCALE, encoding, SEED, &NoProgress).unwrap();
    (dir, Model::open(path).unwrap())
}

fn ids(rows: u64, n: usize, seed: u64) -> Vec<u32> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 5 == 0 {
                (rows - 1 - (x >> 60)) as u32
            } else {
                ((x >> 20) % rows) as u32
            }
        })
        .collect()
}

fn check(model: &Model, encoding: Encoding) {
    let backends = if cfg!(target_os = "linux") {
        vec![Backend::Psync, Backend::Uring, Backend::Mmap]
    } else {
        vec![Backend::Psync, Backend::Mmap]
    };
    let width = encoding.row_bytes();
    for backend in backends {
        for direct in [false, true] {
            let config = IoConfig::default()
                .with_backend(backend)
                .with_direct(direct)
                .with_depth(8);
            let Ok(opened) = open_source(&model.tables, &config) else {
                assert_eq!(backend, Backend::Uring, "only io_uring may be unavailable");
                continue;
            };
            let plain = opened.source;
            let cached = CachedSource::new(plain.clone(), Arc::new(RowCache::new(1 << 20, width)));
            for (t, loc) in model.tables.iter().enumerate() {
                assert_eq!(plain.row_bytes(t), width);
                let request = ids(loc.rows, 1500, t as u64 + 1);
                let mut got = vec![0u8; request.len() * width];
                plain.read_rows(t, &request, &mut got).unwrap();
                let mut want = vec![0u8; width];
                for (i, &row) in request.iter().enumerate() {
                    synth::fill_rows(SEED, t, encoding, u64::from(row), &mut want).unwrap();
                    assert!(
                        got[i * width..(i + 1) * width] == want[..],
                        "{} table {t} row {row}",
                        plain.name()
                    );
                }
                for _ in 0..2 {
                    let mut again = vec![0u8; got.len()];
                    cached.read_rows(t, &request, &mut again).unwrap();
                    assert!(again == got, "cached rows differ ({})", plain.name());
                }
            }
            assert!(cached.cache().hits() > 0);
        }
    }
}

#[test]
fn gguf_rows_match_the_generator() {
    for encoding in Encoding::ALL {
        let (_dir, model) = synth_model(SynthFormat::Gguf, encoding);
        check(&model, encoding);
    }
}

#[test]
fn split_checkpoint_rows_are_reassembled() {
    let (_dir, model) = synth_model(SynthFormat::Hf, Encoding::E4m3E8m0Row264);
    assert!(model.tables.iter().all(|t| t.shards[0].parts.len() == 2));
    check(&model, Encoding::E4m3E8m0Row264);
}
