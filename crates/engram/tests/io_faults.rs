//! Faults reach the caller as errors naming table, row and offset; nothing
//! hangs or panics. Every call runs under a timeout (`within`).

mod io_support;

use std::sync::Arc;
use std::time::Duration;

use engram::io::fault::{FaultPlan, FaultSource};
use engram::io::{open_source, Backend, IoConfig, RowSource};
use engram::Error;
use io_support::*;

const ROWS: u64 = 4000;
const BASE: u64 = 512;

fn config(direct: bool) -> IoConfig {
    IoConfig::default()
        .with_backend(Backend::Psync)
        .with_depth(4)
        .with_direct(direct)
        .with_max_read_bytes(8192)
        .with_max_batch_bytes(64 << 10)
}

fn faulty(
    dir: &std::path::Path,
    plan: FaultPlan,
    direct: bool,
) -> (Arc<FaultSource>, engram::model::TableLocation) {
    let t = packed_table(dir, "t.bin", 21, ROWS, BASE, 0);
    let source = FaultSource::open(std::slice::from_ref(&t), &config(direct), plan).unwrap();
    (Arc::new(source), t)
}

/// Checks `err` is a RowRead naming a row of `ids` of table 0 at its offset.
fn assert_row_read(err: &Error, ids: &[u32], path: &std::path::Path) {
    match err {
        Error::RowRead {
            table,
            row,
            file,
            offset,
            ..
        } => {
            assert_eq!(*table, 0);
            assert!(
                ids.iter().any(|&i| u64::from(i) == *row),
                "row {row} was not requested"
            );
            assert_eq!(*offset, BASE + row * 264, "offset of row {row}");
            assert_eq!(file, path);
        }
        other => panic!("expected RowRead, got {other}"),
    }
}

#[test]
fn eio_at_the_nth_read_names_table_row_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan {
        eio_at_read: Some(5),
        ..FaultPlan::default()
    };
    let (source, t) = faulty(dir.path(), plan, false);
    let ids = random_rows(9, ROWS, 300);
    let s = source.clone();
    let ids2 = ids.clone();
    let result = within(30, move || {
        let mut out = vec![0u8; ids2.len() * 264];
        s.read_rows(0, &ids2, &mut out).map(|_| ())
    });
    let err = result.unwrap_err();
    assert_row_read(&err, &ids, t.first_file());
    assert!(std::error::Error::source(&err).is_some());
    if let Error::RowRead { source: io, .. } = &err {
        assert_eq!(io.raw_os_error(), Some(libc::EIO));
    }
    assert!(err.to_string().contains("t.bin"), "{err}");
    // The fault was transient: the next batch succeeds.
    let s = source.clone();
    let out = within(30, move || {
        let mut out = vec![0u8; ids.len() * 264];
        s.read_rows(0, &ids, &mut out).unwrap();
        (out, ids)
    });
    assert!(out.0 == expected(21, 264, &out.1));
}

#[test]
fn short_reads_interrupts_and_latency_still_deliver_exact_rows() {
    let dir = tempfile::tempdir().unwrap();
    for (direct, short, latency_us) in [(false, 100usize, 200u64), (false, 1, 0), (true, 4096, 50)]
    {
        let plan = FaultPlan {
            short_reads: Some(short),
            interrupt_every: Some(3),
            latency: Some(Duration::from_micros(latency_us)),
            ..FaultPlan::default()
        };
        let (source, _) = faulty(dir.path(), plan, direct);
        let s = source.clone();
        let (out, ids, stats) = within(60, move || {
            let ids = random_rows(4, ROWS, 200);
            let mut out = vec![0u8; ids.len() * 264];
            let stats = s.read_rows(0, &ids, &mut out).unwrap();
            (out, ids, stats)
        });
        assert!(
            out == expected(21, 264, &ids),
            "direct {direct} short {short}"
        );
        assert!(
            source.reads() > stats.reads_issued,
            "short reads must have been continued"
        );
        let hist = stats.latency_histogram();
        assert!(
            hist.min() >= latency_us * 1000,
            "added latency shows in read latencies"
        );
    }
}

#[test]
fn truncation_under_a_reader_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let half = BASE + ROWS / 2 * 264;
    let plan = FaultPlan {
        truncate_at_read: Some((3, half)),
        ..FaultPlan::default()
    };
    let (source, t) = faulty(dir.path(), plan, false);
    let ids: Vec<u32> = (0..ROWS as u32).step_by(7).collect();
    let s = source.clone();
    let ids2 = ids.clone();
    let err = within(30, move || {
        let mut out = vec![0u8; ids2.len() * 264];
        s.read_rows(0, &ids2, &mut out).map(|_| ())
    })
    .unwrap_err();
    assert_row_read(&err, &ids, t.first_file());
    if let Error::RowRead {
        row, source: io, ..
    } = &err
    {
        assert!(
            BASE + (row + 1) * 264 > half,
            "row {row} is still inside the file"
        );
        assert_eq!(io.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}

/// A file truncated by another thread while readers run: every backend that
/// promises errors (not SIGBUS) reports them, and no call hangs.
#[test]
fn external_truncation_while_reading_each_backend() {
    let backends = if cfg!(target_os = "linux") {
        vec![Backend::Psync, Backend::Uring]
    } else {
        vec![Backend::Psync]
    };
    for backend in backends {
        for direct in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let t = packed_table(dir.path(), "t.bin", 22, ROWS, BASE, 0);
            let cfg = config(direct).with_backend(backend);
            let Ok(opened) = open_source(std::slice::from_ref(&t), &cfg) else {
                continue;
            };
            let source = opened.source;
            let path = t.first_file().to_path_buf();
            let (saw_error, saw_ok) = within(60, move || {
                let (mut saw_error, mut saw_ok) = (false, false);
                for round in 0..40u64 {
                    if round == 10 {
                        std::fs::OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .unwrap()
                            .set_len(BASE + 1000 * 264 + 5)
                            .unwrap();
                    }
                    let ids = random_rows(round + 1, ROWS, 64);
                    let mut out = vec![0u8; ids.len() * 264];
                    match source.read_rows(0, &ids, &mut out) {
                        Ok(_) => {
                            assert!(out == expected(22, 264, &ids));
                            saw_ok = true;
                        }
                        Err(err) => {
                            assert_row_read(&err, &ids, &path);
                            saw_error = true;
                        }
                    }
                }
                (saw_error, saw_ok)
            });
            assert!(
                saw_ok && saw_error,
                "{backend:?} direct {direct}: ok {saw_ok} error {saw_error}"
            );
        }
    }
}

/// Hint batches take a bounded share of the pool: a demand batch issued
/// while a long hint batch runs finishes long before it.
#[test]
fn demand_reads_overtake_a_running_hint_batch() {
    use engram::io::Priority;
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let plan = FaultPlan {
        latency: Some(Duration::from_millis(3)),
        ..FaultPlan::default()
    };
    let t = packed_table(dir.path(), "t.bin", 23, ROWS, BASE, 0);
    let cfg = config(false).with_depth(8);
    let source = Arc::new(FaultSource::open(std::slice::from_ref(&t), &cfg, plan).unwrap());
    let (hint_done, demand_done) = within(60, move || {
        let hinter = {
            let source = source.clone();
            std::thread::spawn(move || {
                // 300 rows far apart: 300 reads of 3 ms, at most 2 + 1 at once.
                let ids: Vec<u32> = (0..300u32).map(|i| i * 13).collect();
                let mut out = vec![0u8; ids.len() * 264];
                let started = Instant::now();
                source
                    .read_rows_at(0, &ids, &mut out, Priority::Hint)
                    .unwrap();
                assert!(out == expected(23, 264, &ids));
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        let ids: Vec<u32> = (0..12u32).map(|i| 3999 - i * 17).collect();
        let mut out = vec![0u8; ids.len() * 264];
        let started = Instant::now();
        source.read_rows(0, &ids, &mut out).unwrap();
        let demand = started.elapsed();
        assert!(out == expected(23, 264, &ids));
        (hinter.join().unwrap(), demand)
    });
    // 12 demand reads on >= 6 free workers: about 2 rounds of 3 ms; the hint
    // batch needs about 100 rounds.
    assert!(
        demand_done * 5 < hint_done,
        "demand {demand_done:?} vs hint {hint_done:?}"
    );
}
