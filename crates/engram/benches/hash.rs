//! Hashing 1M tokens into the row ids of both DeepSeek V4.1-Flash tables.
//!
//! Run: `cargo bench -p engram --bench hash`. Target: under 0.1 s per 1M
//! tokens on one core. Besides wall time, the `cpu` variants report the
//! benchmark thread's CPU time, which stays meaningful on a machine shared
//! with other work.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use engram::hash::Hasher;
use engram::layout;

const TOKENS: usize = 1_000_000;

/// Deterministic tokens spread over the whole vocabulary (xorshift).
fn tokens(vocab: u32) -> Vec<u32> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..TOKENS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(vocab)) as u32
        })
        .collect()
}

/// CPU time consumed by the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn bench_hash(c: &mut Criterion) {
    let layout = layout::preset("deepseek-v4.1-flash", 1).expect("preset");
    let hasher = Hasher::new(&layout).expect("hasher");
    let tokens = tokens(layout.vocab_size() as u32);
    // One dead (padding) token in a thousand; true marks a real token.
    let mask: Vec<bool> = (0..TOKENS).map(|i| i % 1000 != 999).collect();
    let mut out = Vec::with_capacity(TOKENS * hasher.rows_per_token());

    let mut group = c.benchmark_group("hash");
    group.throughput(Throughput::Elements(TOKENS as u64));
    group.sample_size(10);
    for (name, mask) in [("", None), (", masked", Some(&mask[..]))] {
        for (clock_name, clock) in [
            ("wall", wall_time as fn() -> Duration),
            ("cpu", thread_cpu_time),
        ] {
            let id = format!("1M tokens, 2 tables{name} ({clock_name})");
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let mut history = hasher.new_history();
                        out.clear();
                        let start = clock();
                        hasher.hash(&mut history, &tokens, mask, &mut out).unwrap();
                        spent += clock() - start;
                    }
                    spent
                })
            });
        }
    }
    // As a prefill pipeline would: 4,096-token chunks into one reused
    // buffer, so the output stays in cache and the hash itself is measured.
    let mut chunk_out = Vec::with_capacity(4096 * hasher.rows_per_token());
    group.bench_function("1M tokens, 2 tables, 4096-token chunks (cpu)", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let mut history = hasher.new_history();
                let start = thread_cpu_time();
                for chunk in tokens.chunks(4096) {
                    chunk_out.clear();
                    hasher
                        .hash(&mut history, chunk, None, &mut chunk_out)
                        .unwrap();
                }
                spent += thread_cpu_time() - start;
            }
            spent
        })
    });
    group.finish();
}

/// Wall-clock time since the first call (Instant has no absolute value).
fn wall_time() -> Duration {
    use std::sync::OnceLock;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed()
}

criterion_group!(benches, bench_hash);
criterion_main!(benches);
