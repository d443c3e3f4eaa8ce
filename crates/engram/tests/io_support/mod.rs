//! Shared helpers of the io_* tests: table files with known bytes.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};

use engram::codec::Encoding;
use engram::model::{RowPart, RowShard, TableLocation};

/// Byte `j` of row `r` of the table with `seed`: distinct per row, table and
/// position, so a row delivered to the wrong place is caught.
pub fn byte_of(seed: u64, row: u64, j: usize) -> u8 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ row.wrapping_mul(0xBF58_476D_1CE4_E5B9)
        ^ (j as u64);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    (x >> 29) as u8
}

/// The expected delivered bytes of `rows`, in request order.
pub fn expected(seed: u64, row_bytes: usize, rows: &[u32]) -> Vec<u8> {
    rows.iter()
        .flat_map(|&r| (0..row_bytes).map(move |j| byte_of(seed, u64::from(r), j)))
        .collect()
}

/// Writes a packed table of `rows` 264-byte rows at `offset` (after filler
/// bytes) in `dir/name`, plus `tail` bytes after it.
pub fn packed_table(
    dir: &Path,
    name: &str,
    seed: u64,
    rows: u64,
    offset: u64,
    tail: usize,
) -> TableLocation {
    let path = dir.join(name);
    let row_bytes = Encoding::E4m3E8m0Row264.row_bytes();
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    f.write_all(&vec![0xAB; offset as usize]).unwrap();
    for r in 0..rows {
        let row: Vec<u8> = (0..row_bytes).map(|j| byte_of(seed, r, j)).collect();
        f.write_all(&row).unwrap();
    }
    f.write_all(&vec![0xCD; tail]).unwrap();
    f.flush().unwrap();
    TableLocation::packed(seed as u32, path, offset, rows, Encoding::E4m3E8m0Row264)
}

/// Writes a split (Hugging Face style) table: 256 value bytes per row in
/// one region and 8 scale bytes per row in another file.
pub fn split_table(dir: &Path, seed: u64, rows: u64) -> TableLocation {
    let values: PathBuf = dir.join(format!("values-{seed}.bin"));
    let scales: PathBuf = dir.join(format!("scales-{seed}.bin"));
    let (value_off, scale_off) = (1000u64, 77u64);
    let mut v = vec![0x11u8; value_off as usize];
    let mut s = vec![0x22u8; scale_off as usize];
    for r in 0..rows {
        v.extend((0..256).map(|j| byte_of(seed, r, j)));
        s.extend((256..264).map(|j| byte_of(seed, r, j)));
    }
    std::fs::write(&values, v).unwrap();
    std::fs::write(&scales, s).unwrap();
    TableLocation {
        layer_id: seed as u32,
        rows,
        encoding: Encoding::E4m3E8m0Row264,
        shards: vec![RowShard {
            first_row: 0,
            rows,
            parts: vec![
                RowPart {
                    file: values,
                    offset: value_off,
                    bytes_per_row: 256,
                },
                RowPart {
                    file: scales,
                    offset: scale_off,
                    bytes_per_row: 8,
                },
            ],
        }],
    }
}

/// Writes a sharded table of 264-byte rows as a Qwen4-Exp MLX checkpoint
/// lays one out: `shards` shards sized by divmod (the first `rows % shards`
/// one row longer), each stored in three parts of 200, 40 and 24 bytes a
/// row; even shards in `dir/even.bin`, odd ones in `dir/odd.bin`, each part
/// its own region after filler bytes.
pub fn sharded_table(dir: &Path, seed: u64, rows: u64, shards: u64) -> TableLocation {
    let widths = [200usize, 40, 24];
    let mut files: [Vec<u8>; 2] = [vec![0x33; 333], vec![0x44; 4097]];
    let paths = [
        dir.join(format!("even-{seed}.bin")),
        dir.join(format!("odd-{seed}.bin")),
    ];
    let (per, extra) = (rows / shards, rows % shards);
    let mut out = Vec::new();
    let mut first = 0u64;
    for s in 0..shards {
        let n = per + u64::from(s < extra);
        let f = (s % 2) as usize;
        let mut parts = Vec::new();
        let mut at = 0usize;
        for &w in &widths {
            let offset = files[f].len() as u64;
            for r in first..first + n {
                files[f].extend((at..at + w).map(|j| byte_of(seed, r, j)));
            }
            files[f].extend([0x55; 17]);
            parts.push(RowPart {
                file: paths[f].clone(),
                offset,
                bytes_per_row: w as u32,
            });
            at += w;
        }
        out.push(RowShard {
            first_row: first,
            rows: n,
            parts,
        });
        first += n;
    }
    for (path, bytes) in paths.iter().zip(&files) {
        std::fs::write(path, bytes).unwrap();
    }
    TableLocation {
        layer_id: seed as u32,
        rows,
        encoding: Encoding::E4m3E8m0Row264,
        shards: out,
    }
}

/// A deterministic pseudo-random sequence of row ids below `rows`, with
/// duplicates.
pub fn random_rows(seed: u64, rows: u64, n: usize) -> Vec<u32> {
    let mut x = seed | 1;
    let mut out: Vec<u32> = Vec::with_capacity(n);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let id = if i % 7 == 3 {
            out[(x % i as u64) as usize]
        } else {
            (x % rows) as u32
        };
        out.push(id);
    }
    out
}

/// Runs `f` on a thread and fails the test if it takes longer than
/// `seconds` (a hang), instead of hanging the suite.
pub fn within<T: Send + 'static>(seconds: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    engram::testing::within(std::time::Duration::from_secs(seconds), f)
}
