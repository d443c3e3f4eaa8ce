//! The session row cache: bit-identical results, counters, byte budget.

mod io_support;

use std::sync::Arc;

use engram::cache::{CachedSource, RowCache};
use engram::io::{open_source, Backend, IoConfig, Priority, RowSource};
use io_support::*;

fn source(dir: &std::path::Path) -> Arc<dyn RowSource> {
    let tables = [
        packed_table(dir, "a.bin", 11, 3000, 0, 0),
        split_table(dir, 12, 2000),
    ];
    let config = IoConfig::default()
        .with_backend(Backend::Psync)
        .with_depth(4);
    open_source(&tables, &config).unwrap().source
}

#[test]
fn cached_reads_are_bit_identical_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let plain = source(dir.path());
    let cache = Arc::new(RowCache::new(64 << 20, 264));
    let cached = CachedSource::new(plain.clone(), cache.clone());
    assert_eq!(cached.tables(), 2);
    let mut total_unique = 0;
    for round in 0..6u64 {
        for (table, rows) in [(0usize, 3000u64), (1, 2000)] {
            let ids = random_rows(round + 100 * table as u64, rows, 700);
            let mut a = vec![0u8; ids.len() * 264];
            let mut b = vec![0u8; ids.len() * 264];
            plain.read_rows(table, &ids, &mut a).unwrap();
            let stats = cached.read_rows(table, &ids, &mut b).unwrap();
            assert!(a == b, "cached bytes differ (round {round}, table {table})");
            assert!(b == expected(11 + table as u64, 264, &ids));
            assert_eq!(stats.rows_requested, ids.len() as u64);
            assert!(stats.cache_hits <= stats.rows_unique);
            total_unique += stats.rows_unique;
        }
    }
    assert_eq!(cache.hits() + cache.misses(), total_unique);
    assert!(cache.hits() > 0, "repeated rows must hit");
    // A request of rows all read before: no storage read at all.
    let ids: Vec<u32> = random_rows(3, 3000, 700);
    let mut out = vec![0u8; ids.len() * 264];
    let stats = cached.read_rows(0, &ids, &mut out).unwrap();
    assert_eq!(stats.reads_issued, 0);
    assert_eq!(stats.cache_hits, stats.rows_unique);
    assert!(out == expected(11, 264, &ids));
}

#[test]
fn cache_stays_within_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let plain = source(dir.path());
    let budget = 100 * (264 + 64);
    let cache = Arc::new(RowCache::new(budget, 264));
    let cached = CachedSource::new(plain, cache.clone());
    for round in 0..5 {
        let ids: Vec<u32> = (round * 500..round * 500 + 500).collect();
        let mut out = vec![0u8; ids.len() * 264];
        cached.read_rows(0, &ids, &mut out).unwrap();
        assert!(out == expected(11, 264, &ids));
        assert!(cache.bytes() <= budget, "{} > {budget}", cache.bytes());
        assert!(cache.len() <= 100);
    }
}

#[test]
fn cached_source_rejects_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let cached = CachedSource::new(source(dir.path()), Arc::new(RowCache::new(1 << 20, 264)));
    let mut out = vec![0u8; 264];
    assert!(cached.read_rows(0, &[3000], &mut out).is_err());
    assert!(cached.read_rows(2, &[0], &mut out).is_err());
    assert!(cached.read_rows(0, &[1, 2], &mut out).is_err());
    assert_eq!(cached.cache().misses(), 0);
}

#[test]
fn a_prefill_row_is_kept_from_its_second_read_demand_and_hint_rows_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(RowCache::new(64 << 20, 264));
    let cached = CachedSource::new(source(dir.path()), cache.clone());
    let read = |ids: &[u32], priority| {
        let mut out = vec![0u8; ids.len() * 264];
        let stats = cached.read_rows_at(0, ids, &mut out, priority).unwrap();
        // Warm rows are wanted only in the page cache: the file source
        // advises the kernel to read them and writes no bytes.
        if priority != Priority::Warm {
            assert!(out == expected(11, 264, ids), "bytes at {priority:?}");
        }
        stats
    };
    // Seen once in a prefill: read, not kept.
    let once: Vec<u32> = (100..400).collect();
    read(&once, Priority::Prefill);
    assert_eq!(cache.len(), 0, "a prefill row read once is not kept");
    // Seen twice: kept, and a third read is a hit with no storage read.
    let stats = read(&once, Priority::Prefill);
    assert_eq!(stats.cache_hits, 0);
    assert_eq!(cache.len(), once.len(), "a prefill row read twice is kept");
    let stats = read(&once, Priority::Prefill);
    assert_eq!(stats.cache_hits, once.len() as u64);
    assert_eq!(stats.reads_issued, 0);
    // Rows read only to warm the page cache are neither kept nor marked
    // as seen: a prefill read after them is still the first.
    let warmed: Vec<u32> = (500..600).collect();
    read(&warmed, Priority::Warm);
    read(&warmed, Priority::Prefill);
    assert!(
        warmed.iter().all(|&row| cache.get(0, row).is_none()),
        "a warm read is not a sighting"
    );
    // Decode (demand) and hint rows are kept the first time.
    read(&[1000, 1001], Priority::Demand);
    read(&[2000, 2001], Priority::Hint);
    for row in [1000, 1001, 2000, 2001] {
        assert!(cache.get(0, row).is_some(), "row {row} kept at once");
    }
    // The same row id of the other table is a different row for the
    // doorkeeper: table 1 has not seen it.
    let mut out = vec![0u8; 264];
    cached
        .read_rows_at(1, &[150], &mut out, Priority::Prefill)
        .unwrap();
    assert!(cache.get(1, 150).is_none());
}

/// A warm read over buffered files advises the kernel instead of reading:
/// no bytes land in the caller's buffer, and the rows' pages come into the
/// page cache by themselves (the later prefill read finds them there).
#[test]
fn a_warm_read_brings_the_pages_in_without_writing_the_buffer() {
    use engram::io::files::PositionalRead;
    if !cfg!(target_os = "linux") {
        return; // only Linux can tell a cached page (`RWF_NOWAIT`)
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = source(dir.path());
    let path = dir.path().join("a.bin");
    let file = std::fs::File::open(&path).unwrap();
    engram::io::cachectl::evict(&file).unwrap();
    // Rows 2,000 and on (row 0 at offset 0, 264 bytes each, table 0).
    let offset = 2000 * 264;
    let mut probe = vec![0u8; 264];
    if file.read_at_nowait(&mut probe, offset).unwrap().is_some() {
        eprintln!(
            "the page cache kept {} here: nothing to show",
            path.display()
        );
        return;
    }
    let rows: Vec<u32> = (2000..2100).collect();
    let mut out = vec![0u8; rows.len() * 264];
    let stats = plain
        .read_rows_at(0, &rows, &mut out, Priority::Warm)
        .unwrap();
    assert!(out.iter().all(|&b| b == 0), "a warm read writes no bytes");
    assert!(
        stats.reads_issued > 0 && stats.bytes_read >= 100 * 264,
        "{stats:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while file.read_at_nowait(&mut probe, offset).unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the advised pages never came in"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(
        probe == expected(11, 264, &[2000]),
        "the cached row is the file's"
    );
}
