//! Every backend delivers the bytes on disk, in request order, for packed
//! and split tables, buffered and direct, across sub-batches.

mod io_support;

use engram::io::{open_source, Backend, IoConfig, Priority, RowSource};
use engram::Error;
use io_support::*;

fn backends() -> Vec<Backend> {
    let mut all = vec![Backend::Psync, Backend::Mmap];
    if cfg!(target_os = "linux") {
        all.push(Backend::Uring);
    }
    all
}

/// Opens `tables` with `backend`, or None when the kernel refuses io_uring.
fn open(
    tables: &[engram::model::TableLocation],
    config: &IoConfig,
) -> Option<std::sync::Arc<dyn RowSource>> {
    match open_source(tables, config) {
        Ok(o) => Some(o.source),
        Err(e) if config.backend == Backend::Uring => {
            eprintln!("skipping io_uring: {e}");
            None
        }
        Err(e) => panic!("open {:?}: {e}", config.backend),
    }
}

/// `table` opened with every backend's default configuration (those the
/// kernel allows).
fn each_backend(table: &engram::model::TableLocation) -> Vec<std::sync::Arc<dyn RowSource>> {
    backends()
        .into_iter()
        .filter_map(|backend| {
            let config = IoConfig::default().with_backend(backend);
            open(std::slice::from_ref(table), &config)
        })
        .collect()
}

fn configs() -> Vec<IoConfig> {
    let mut out = Vec::new();
    for backend in backends() {
        for direct in [false, true] {
            for max_batch_bytes in [16 << 20, 64 << 10] {
                out.push(
                    IoConfig::default()
                        .with_backend(backend)
                        .with_depth(8)
                        .with_direct(direct)
                        .with_max_batch_bytes(max_batch_bytes)
                        .with_max_read_bytes(16 << 10),
                );
            }
        }
    }
    out
}

/// (table, seed, rows) of the tables [`packed_and_split`] writes.
const TABLES: [(usize, u64, u64); 3] = [(0, 1, 5003), (1, 2, 3001), (2, 3, 4007)];

/// A packed table at an odd offset whose end is not page aligned (aligned
/// reads at the end of the file come back short), a split table and a
/// sharded table of three parts (shards of two files), opened
/// with every config whose backend opens.
fn packed_and_split(dir: &std::path::Path) -> Vec<(IoConfig, std::sync::Arc<dyn RowSource>)> {
    let t0 = packed_table(dir, "t0.bin", 1, 5003, 321, 0);
    let t1 = split_table(dir, 2, 3001);
    let t2 = sharded_table(dir, 3, 4007, 5);
    let tables = [t0, t1, t2];
    configs()
        .into_iter()
        .filter_map(|config| open(&tables, &config).map(|source| (config, source)))
        .collect()
}

#[test]
fn all_backends_return_rows_in_request_order() {
    let dir = tempfile::tempdir().unwrap();
    for (_, source) in packed_and_split(dir.path()) {
        assert_eq!(source.tables(), 3);
        for (table, seed, rows) in TABLES {
            assert_eq!(source.row_bytes(table), 264);
            assert_eq!(source.table_rows(table), rows);
            let mut ids = random_rows(seed * 31 + 5, rows, 2000);
            let last = rows as u32 - 1;
            ids.extend([last, 0, last, last - 1, 1, 2, 3]);
            let mut out = vec![0u8; ids.len() * 264];
            let stats = source.read_rows(table, &ids, &mut out).unwrap();
            assert!(
                out == expected(seed, 264, &ids),
                "{} table {table}: wrong bytes",
                source.name()
            );
            let mut unique = ids.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(stats.rows_requested, ids.len() as u64);
            assert_eq!(stats.rows_unique, unique.len() as u64);
            assert!(stats.reads_issued as usize <= unique.len() * 3);
            assert_eq!(stats.read_latencies_ns.len() as u64, stats.reads_issued);
            // Hint priority delivers the same bytes.
            let mut hinted = vec![0u8; out.len()];
            source
                .read_rows_at(table, &ids, &mut hinted, Priority::Hint)
                .unwrap();
            assert!(hinted == out);
        }
    }
}

#[test]
fn rows_sharing_a_page_are_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let t = packed_table(dir.path(), "t.bin", 3, 64, 0, 0);
    for source in each_backend(&t) {
        // Rows 0..=15 cover bytes 0..4224: every row shares a page with the
        // next, so the run is a single read.
        let ids: Vec<u32> = (0..16).rev().collect();
        let mut out = vec![0u8; ids.len() * 264];
        let stats = source.read_rows(0, &ids, &mut out).unwrap();
        assert_eq!(stats.reads_issued, 1, "{}", source.name());
        assert_eq!(out, expected(3, 264, &ids));
        // Rows 0 and 40 (byte 10560) share no page: two reads.
        let ids = [40u32, 0, 40];
        let mut out = vec![0u8; 3 * 264];
        let stats = source.read_rows(0, &ids, &mut out).unwrap();
        assert_eq!((stats.rows_unique, stats.reads_issued), (2, 2));
        assert_eq!(out, expected(3, 264, &ids));
    }
}

#[test]
fn bad_requests_are_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let t = packed_table(dir.path(), "t.bin", 4, 10, 0, 0);
    for source in each_backend(&t) {
        let mut out = vec![0u8; 2 * 264];
        let err = source.read_rows(0, &[3, 10], &mut out).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument(ref m) if m.contains("row 10")),
            "{err}"
        );
        let err = source.read_rows(0, &[3], &mut out).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        let err = source.read_rows(1, &[3, 4], &mut out).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        // An empty request is fine.
        let stats = source.read_rows(0, &[], &mut []).unwrap();
        assert_eq!(stats.reads_issued, 0);
    }
}

#[test]
fn a_table_past_the_end_of_its_file_is_a_format_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = packed_table(dir.path(), "t.bin", 5, 10, 0, 0);
    t.rows = 11;
    t.shards[0].rows = 11;
    let err = open_source(&[t], &IoConfig::default())
        .err()
        .expect("must fail");
    assert!(matches!(err, Error::Format { .. }), "{err}");
    assert!(err.to_string().contains("t.bin"), "{err}");
}

#[test]
fn two_tables_read_concurrently_share_one_source() {
    let dir = tempfile::tempdir().unwrap();
    let tables = [
        packed_table(dir.path(), "a.bin", 6, 4000, 0, 0),
        packed_table(dir.path(), "b.bin", 7, 4000, 4096, 0),
    ];
    for backend in backends() {
        let config = IoConfig::default().with_backend(backend).with_depth(4);
        let Some(source) = open(&tables, &config) else {
            continue;
        };
        within(60, move || {
            let workers: Vec<_> = (0..2usize)
                .map(|table| {
                    let source = source.clone();
                    std::thread::spawn(move || {
                        for round in 0..20u64 {
                            let ids = random_rows(
                                round * 2 + table as u64 + 1,
                                4000,
                                24 + round as usize * 50,
                            );
                            let mut out = vec![0u8; ids.len() * 264];
                            let priority = if round % 3 == 0 {
                                Priority::Hint
                            } else {
                                Priority::Demand
                            };
                            source
                                .read_rows_at(table, &ids, &mut out, priority)
                                .unwrap();
                            assert!(out == expected(6 + table as u64, 264, &ids));
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
        });
    }
}

#[test]
fn auto_picks_a_working_backend() {
    let dir = tempfile::tempdir().unwrap();
    let t = packed_table(dir.path(), "t.bin", 8, 100, 0, 0);
    // Buffered: the pread pool everywhere, no note.
    let opened = open_source(std::slice::from_ref(&t), &IoConfig::default()).unwrap();
    assert_eq!(
        (opened.backend, opened.note.is_none()),
        (Backend::Psync, true)
    );
    // Direct: io_uring on Linux when the kernel allows it, else the pool
    // with a note saying why.
    let config = IoConfig::default().with_direct(true);
    let opened = open_source(std::slice::from_ref(&t), &config).unwrap();
    let linux = cfg!(target_os = "linux");
    match opened.backend {
        Backend::Uring => assert!(linux),
        Backend::Psync => assert!(!linux || opened.note.is_some()),
        other => panic!("auto chose {other:?}"),
    }
    let mut out = vec![0u8; 264];
    opened.source.read_rows(0, &[99], &mut out).unwrap();
    assert_eq!(out, expected(8, 264, &[99]));
    assert!("nope".parse::<Backend>().is_err());
}
