//! Hot-row lookup: the bucketed index of `HotTable::get` against a plain
//! binary search over the sorted ids, on a scale-8 sized table (48M rows)
//! holding 1 GiB of hot rows (4,006,523 rows of 264 bytes plus their ids).
//!
//! Run: `cargo bench -p engram --bench hot`. One iteration looks up one
//! decode step's worth of rows of one table (24 ids, about half hot).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use engram::hot::HotTable;

const TABLE_ROWS: u64 = 48_000_000;
const HOT_ROWS: usize = (1 << 30) / 268;
const ROW_BYTES: usize = 264;

/// xorshift64.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn table() -> (HotTable, Vec<u32>) {
    let mut x = 0x9e37_79b9_7f4a_7c15;
    let mut ids: Vec<u32> = (0..HOT_ROWS * 11 / 10)
        .map(|_| (next(&mut x) % TABLE_ROWS) as u32)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.truncate(HOT_ROWS);
    // Probes: half hot ids, half random rows (mostly not hot).
    let probes: Vec<u32> = (0..1 << 16)
        .map(|i| {
            let r = next(&mut x);
            if i % 2 == 0 {
                ids[(r % ids.len() as u64) as usize]
            } else {
                (r % TABLE_ROWS) as u32
            }
        })
        .collect();
    let rows = vec![7u8; ids.len() * ROW_BYTES];
    let table = HotTable::from_rows(ids, rows, ROW_BYTES, TABLE_ROWS).unwrap();
    (table, probes)
}

fn lookups(c: &mut Criterion) {
    let (table, probes) = table();
    let mut group = c.benchmark_group("hot_lookup_24_rows");
    group.throughput(Throughput::Elements(24));
    type Lookup = for<'a> fn(&'a HotTable, u32) -> Option<&'a [u8]>;
    let ways: [(&str, Lookup); 2] = [
        ("bucketed", HotTable::get),
        ("binary_search", HotTable::get_by_binary_search),
    ];
    for (name, lookup) in ways {
        let mut at = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                at = (at + 24) % (probes.len() - 24);
                let hits = probes[at..at + 24]
                    .iter()
                    .filter(|&&r| lookup(&table, black_box(r)).is_some())
                    .count();
                black_box(hits)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookups);
criterion_main!(benches);
