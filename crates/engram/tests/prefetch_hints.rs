//! Hints with draft chains and alternatives: reads go likeliest first, a
//! begun step drops the hints it makes stale (queued ones are never read),
//! each kind's rows read / used / dropped are counted, and bad input is
//! refused naming the argument, before anything is read.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engram::layout::Layout;
use engram::prefetch::{Engine, Sequence};
use engram::testing::{small_prefetch, within, MemSource};
use engram::{Error, Hints};

const LIMIT: Duration = Duration::from_secs(60);
/// Rows per token of each table (V4.1: 3 orders x 8 heads).
const COLS: usize = 24;

/// The real V4.1-Flash layout: hundreds of millions of rows per table, so
/// two different guesses share no row (the counts below are exact).
fn layout() -> Layout {
    engram::layout::preset("deepseek-v4.1-flash", 1).unwrap()
}

/// An engine on `source` with one general reader (hint reads run one at a
/// time, in the pool's order) and one decode reader.
fn engine(source: &Arc<MemSource>) -> Engine {
    let config = small_prefetch().with_workers(1).with_decode_workers(1);
    Engine::new(source.clone(), layout(), config).unwrap()
}

/// Waits until `source` has seen `n` hint read calls.
fn hint_calls(source: &MemSource, n: usize) {
    let deadline = Instant::now() + LIMIT;
    while source.hint_calls.load(std::sync::atomic::Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "fewer than {n} hint reads");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One step: begun with `token`, both tables waited for.
fn step(seq: &mut Sequence, token: u32) {
    seq.step_begin(token).unwrap();
    for table in 0..2 {
        seq.step_wait(table).unwrap();
    }
}

/// `table`'s rows of the last of `tokens` appended to `seq`.
fn rows_of(seq: &Sequence, tokens: &[u32], table: usize) -> Vec<u32> {
    let ids = seq.row_ids(tokens, None).unwrap();
    let last = &ids[(tokens.len() - 1) * 2 * COLS..];
    last[table * COLS..(table + 1) * COLS].to_vec()
}

#[test]
fn hint_reads_go_likeliest_first() {
    let source = Arc::new(MemSource::for_layout(&layout()));
    let engine = engine(&source);
    let s = source.clone();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        step(&mut seq, 100);
        // Held at the gate: the pool's one general thread takes the first
        // read and every other one is queued before it is let go.
        let (open, gate) = mpsc::channel();
        *s.hint_gate.lock().unwrap() = Some(gate);
        // Needed with: a 0.5, then b 0.5 * 0.5 = 0.25 (after a); c 0.4, d 0.1.
        let (a, b, c, d) = (11, 12, 13, 14);
        seq.hint(
            Hints::draft(&[a, b])
                .with_draft_probs(&[0.5, 0.5])
                .with_alternatives(&[d, c], &[0.1, 0.4]),
        )
        .unwrap();
        hint_calls(&s, 1);
        drop(open);
        hint_calls(&s, 8);
        let log = s.hint_log.lock().unwrap().clone();
        let want: Vec<(usize, Vec<u32>)> = [&[a][..], &[c], &[a, b], &[d]]
            .iter()
            .flat_map(|tokens| (0..2).map(|t| (t, rows_of(&seq, tokens, t))))
            .collect();
        assert_eq!(log, want, "a, c, b, d; table 0 before table 1");
        drop(seq);
        drop(engine);
    });
}

#[test]
fn a_begun_step_drops_the_hints_it_makes_stale() {
    let source = Arc::new(MemSource::for_layout(&layout()));
    let engine = engine(&source);
    let s = source.clone();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        step(&mut seq, 100);
        let (open, gate) = mpsc::channel();
        *s.hint_gate.lock().unwrap() = Some(gate);
        // x1 then x2 after it; y an alternative of the next token.
        let (x1, x2, y) = (21, 22, 23);
        seq.hint(Hints::draft(&[x1, x2]).with_alternatives(&[y], &[0.2]))
            .unwrap();
        // x1's table 0 is being read (held); the other five are queued.
        hint_calls(&s, 1);
        // The next token is y: x1 is wrong, x2 was hashed after x1, and
        // y's own step reads its rows: none of the queued five is read.
        step(&mut seq, y);
        // A new guess at the lowest rank runs after anything still queued.
        let z = 24;
        seq.hint(Hints::default().with_alternatives(&[z], &[0.0]))
            .unwrap();
        drop(open);
        hint_calls(&s, 3);
        std::thread::sleep(Duration::from_millis(20));
        let log = s.hint_log.lock().unwrap().clone();
        // Row ids from a fresh sequence: each guess after its history.
        let fresh = engine.sequence();
        let want = vec![
            (0, rows_of(&fresh, &[100, x1], 0)),
            (0, rows_of(&fresh, &[100, y, z], 0)),
            (1, rows_of(&fresh, &[100, y, z], 1)),
        ];
        assert_eq!(log, want, "only x1's running read and z's reads");
        let use_ = seq.stats().hint_use;
        // x1: table 0 read (not used: the token was y), table 1 dropped;
        // x2: both dropped.
        assert_eq!(
            (
                use_.draft.rows_read,
                use_.draft.rows_used,
                use_.draft.rows_dropped
            ),
            (COLS as u64, 0, 3 * COLS as u64)
        );
        assert_eq!(use_.draft.hit_rate, Some(0.0));
        // y: dropped (its step read it); z is not resolved yet.
        assert_eq!(
            (use_.alternative.rows_read, use_.alternative.rows_dropped),
            (0, 2 * COLS as u64)
        );
        assert_eq!(use_.alternative.hit_rate, None);
        drop((fresh, seq));
        drop(engine);
    });
}

#[test]
fn each_kind_counts_the_rows_its_steps_used() {
    let source = Arc::new(MemSource::for_layout(&layout()));
    let engine = engine(&source);
    let s = source.clone();
    within(LIMIT, move || {
        let mut seq = engine.sequence();
        step(&mut seq, 100);
        let (a, b, c) = (31, 32, 33);
        seq.hint(Hints::draft(&[a, b]).with_alternatives(&[c], &[0.2]))
            .unwrap();
        hint_calls(&s, 6);
        // The next token is the alternative c: its rows were all used; a
        // and b (after a) were read for nothing.
        step(&mut seq, c);
        let u = seq.stats().hint_use;
        assert_eq!((u.draft.rows_read, u.draft.rows_used), (96, 0));
        assert_eq!((u.alternative.rows_read, u.alternative.rows_used), (48, 48));
        assert_eq!(u.alternative.hit_rate, Some(1.0));
        // A right draft chain of two: both used, the second a step later;
        // the next call's guess of the same token and history is not read
        // again.
        let (d, e) = (34, 35);
        seq.hint(&[d, e]).unwrap();
        hint_calls(&s, 10);
        step(&mut seq, d);
        seq.hint(&[e]).unwrap();
        step(&mut seq, e);
        assert_eq!(s.hint_calls.load(std::sync::atomic::Ordering::SeqCst), 10);
        let u = seq.stats().hint_use;
        assert_eq!((u.draft.rows_read, u.draft.rows_used), (192, 96));
        assert_eq!(u.draft.hit_rate, Some(0.5));
        // A rollback makes outstanding hints stale: read, not used.
        seq.hint(&[36]).unwrap();
        hint_calls(&s, 12);
        seq.rollback(1).unwrap();
        let u = seq.stats().hint_use;
        assert_eq!((u.draft.rows_read, u.draft.rows_used), (240, 96));
        drop(seq);
        drop(engine);
    });
}

#[test]
fn bad_hints_are_refused_naming_the_argument_and_read_nothing() {
    let source = Arc::new(MemSource::for_layout(&layout()));
    let engine = engine(&source);
    let mut seq = engine.sequence();
    let t = [1u32, 2];
    let cases = [
        (
            Hints::draft(&t).with_draft_probs(&[0.5, f32::NAN]),
            "draft_probs[1]",
        ),
        (Hints::draft(&t).with_draft_probs(&[0.5]), "draft_probs"),
        (
            Hints::draft(&t).with_alternatives(&t, &[0.5, 2.0]),
            "alternative_probs[1]",
        ),
        (
            Hints::draft(&t).with_alternatives(&t, &[]),
            "alternative_probs",
        ),
        (Hints::draft(&[3; 17]), "draft"),
        (
            Hints::default().with_alternatives(&[3; 33], &[0.1; 33]),
            "alternatives",
        ),
        (Hints::draft(&[1, u32::MAX]), "outside the vocabulary"),
    ];
    for (hints, name) in cases {
        let e = seq.hint(hints).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument(_)) || name == "outside the vocabulary",
            "{e}"
        );
        assert!(e.to_string().contains(name), "{e} should name {name}");
    }
    // A refused call read nothing and left nothing to resolve.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        source.hint_calls.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    seq.step_begin(1).unwrap();
    let u = seq.stats().hint_use;
    assert_eq!(u.draft.rows_dropped + u.alternative.rows_dropped, 0);
}
