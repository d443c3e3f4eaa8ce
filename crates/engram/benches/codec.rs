//! Row codec throughput: decode row264 and row136 to f32, encode row264 -> row136.
//!
//! Throughput is reported in bytes of f32 output (256 values * 4 bytes per
//! row) for the decoders, and in bytes of row264 input for the encoder.
//! Run: `cargo bench -p engram --bench codec`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use engram::codec::{encode_row136, Encoding, ROW_DIM};
use engram::splitmix::SplitMix64;
use std::hint::black_box;

/// Rows per batch: 1 MiB of row264 input, 4 MiB of f32 output.
const ROWS: usize = 4096;

/// Valid row264 rows shaped like real embeddings: random non-NaN codes and
/// scales spread over 2^-22..2^6 (bytes 105..=133), so nothing overflows and every
/// group has an E5M3 scale.
fn row264_rows(rng: &mut SplitMix64) -> Vec<u8> {
    let mut rows = vec![0u8; ROWS * Encoding::E4m3E8m0Row264.row_bytes()];
    for row in rows.chunks_exact_mut(Encoding::E4m3E8m0Row264.row_bytes()) {
        let (codes, scales) = row.split_at_mut(ROW_DIM);
        for code in codes {
            let byte = rng.next_u64() as u8;
            *code = if byte & 0x7f == 0x7f { byte ^ 1 } else { byte };
        }
        for scale in scales {
            *scale = 105 + (rng.next_u64() % 29) as u8;
        }
    }
    rows
}

fn bench_decode(c: &mut Criterion) {
    let mut rng = SplitMix64(0x5eed);
    let rows264 = row264_rows(&mut rng);
    let mut rows136 = vec![0u8; ROWS * Encoding::Lloyd4E5m3Row136.row_bytes()];
    for (src, dst) in rows264
        .chunks_exact(Encoding::E4m3E8m0Row264.row_bytes())
        .zip(rows136.chunks_exact_mut(Encoding::Lloyd4E5m3Row136.row_bytes()))
    {
        encode_row136(src, dst).expect("bench rows are valid");
    }
    let mut out = vec![0f32; ROWS * ROW_DIM];

    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Bytes((ROWS * ROW_DIM * 4) as u64));
    group.bench_function("row264_to_f32", |b| {
        b.iter(|| {
            Encoding::E4m3E8m0Row264
                .decode_rows(black_box(&rows264), &mut out)
                .expect("valid rows")
        })
    });
    group.bench_function("row136_to_f32", |b| {
        b.iter(|| {
            Encoding::Lloyd4E5m3Row136
                .decode_rows(black_box(&rows136), &mut out)
                .expect("valid rows")
        })
    });
    group.finish();

    let mut group = c.benchmark_group("check");
    group.throughput(Throughput::Bytes(rows264.len() as u64));
    group.bench_function("row264", |b| {
        b.iter(|| {
            for row in black_box(&rows264).chunks_exact(Encoding::E4m3E8m0Row264.row_bytes()) {
                Encoding::E4m3E8m0Row264.check_row(row).expect("valid row");
            }
        })
    });
    group.finish();
}

fn bench_encode(c: &mut Criterion) {
    let mut rng = SplitMix64(0xe4c0de);
    let rows264 = row264_rows(&mut rng);
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Bytes(rows264.len() as u64));
    group.sample_size(20);
    group.bench_function("row264_to_row136", |b| {
        b.iter_batched_ref(
            || vec![0u8; ROWS * Encoding::Lloyd4E5m3Row136.row_bytes()],
            |dst| {
                for (src, dst) in black_box(&rows264)
                    .chunks_exact(Encoding::E4m3E8m0Row264.row_bytes())
                    .zip(dst.chunks_exact_mut(Encoding::Lloyd4E5m3Row136.row_bytes()))
                {
                    encode_row136(src, dst).expect("valid row");
                }
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_decode, bench_encode);
criterion_main!(benches);
