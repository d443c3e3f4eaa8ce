//! The replay loop: one schedule, one compute model, a prefill of the
//! prompt in the chosen sweep, then decode steps with teacher forcing.

use std::time::{Duration, Instant};

#[cfg(test)]
use engram::Hints;
use engram::{Error, Result};

use crate::compute::Compute;
use crate::cputime;
use crate::floor::WaitPoint;
use crate::hints::{Drafter, HintMode};
use crate::schedule::{PrefillRun, Schedule};

/// The order in which a prefill runs the (layer, chunk) pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Every chunk through layer i before any goes through layer i + 1.
    Layer,
    /// Each chunk through all layers before the next chunk starts.
    Chunk,
}

impl Sweep {
    /// Parses `layer` or `chunk`.
    pub fn parse(text: &str) -> Result<Sweep> {
        match text {
            "layer" => Ok(Sweep::Layer),
            "chunk" => Ok(Sweep::Chunk),
            _ => Err(Error::InvalidArgument(format!(
                "--sweep {text:?}: expected layer or chunk"
            ))),
        }
    }

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Sweep::Layer => "layer",
            Sweep::Chunk => "chunk",
        }
    }

    /// What a runtime with this sweep tells the engine: a chunk sweep says
    /// so; a layer sweep is what the engine's default learns.
    pub fn prefill_order(self) -> engram::prefetch::PrefillOrder {
        match self {
            Sweep::Layer => engram::prefetch::PrefillOrder::Auto,
            Sweep::Chunk => engram::prefetch::PrefillOrder::Chunk,
        }
    }
}

/// How the replay drives the forward pass.
#[derive(Debug, Clone)]
pub struct Drive {
    /// Prefill order.
    pub sweep: Sweep,
    /// Tokens per prefill chunk.
    pub ubatch: usize,
    /// Tokens one prefill wait asks for at least (0: one chunk): a host
    /// that waits once for this many tokens of a table and then runs their
    /// chunks through the layer, as a runtime whose waits are wider than
    /// its compute batches does. A wait never reaches past the prompt.
    pub wait_tokens: usize,
    /// `engram_layers[t]`: the layer that consumes table `t`.
    pub engram_layers: Vec<u32>,
    /// Hints offered during decode.
    pub hints: HintMode,
    /// Vocabulary size (wrong drafts are drawn from it).
    pub vocab: u32,
    /// Seed of the drafts.
    pub seed: u64,
}

/// What one replay measured, before it is put in a report.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Prefill wall time.
    pub prefill_wall: Duration,
    /// Prefill compute time.
    pub prefill_compute: Duration,
    /// Prefill stall per table.
    pub prefill_stall_table: Vec<Duration>,
    /// Prefill stall of each chunk (all tables), in chunk order.
    pub chunk_stall: Vec<Duration>,
    /// Decode wall time.
    pub decode_wall: Duration,
    /// Decode compute time.
    pub decode_compute: Duration,
    /// `step_stall[step][table]`.
    pub step_stall: Vec<Vec<Duration>>,
    /// Per decode step, the forward thread's time in the schedule's hint
    /// call (zero for a step without one): not stall, but time the host
    /// spends before it launches the step's layers.
    pub hint_call: Vec<Duration>,
    /// Per decode step, the forward thread's time in `step_begin` (in the
    /// stall): what starting a step costs the schedule's caller.
    pub step_begin: Vec<Duration>,
    /// Every prefill wait, in order, with the compute model's wall time
    /// before it (for the physical floor).
    pub prefill_waits: Vec<WaitPoint>,
    /// CPU time of the whole process (user + system, every thread) during
    /// the prefill and during decode.
    pub cpu: [Duration; 2],
    /// CPU time the forward thread spent inside the compute model, prefill
    /// and decode (subtracted from `cpu` for the schedule's own cost).
    pub compute_cpu: [Duration; 2],
}

/// Runs the prefill of `prompt`, then one decode step per token of
/// `continuation`, on `schedule` and `compute`.
pub fn replay(
    drive: &Drive,
    schedule: &mut dyn Schedule,
    compute: &mut dyn Compute,
    prompt: &[u32],
    continuation: &[u32],
) -> Result<Measured> {
    check_layers(drive, compute)?;
    let mut measured = Measured {
        prefill_stall_table: vec![Duration::ZERO; drive.engram_layers.len()],
        ..Measured::default()
    };
    if !prompt.is_empty() {
        let cpu = cputime::process();
        let started = Instant::now();
        let mut charged = Duration::ZERO;
        cputime::charged(&mut charged, || compute.begin_prefill(prompt));
        let mut run = schedule.prefill(prompt)?;
        let mut timed = Timed {
            compute,
            cpu: charged,
            wall: Duration::ZERO,
        };
        prefill(drive, run.as_mut(), &mut timed, prompt.len(), &mut measured)?;
        // Dropping the run joins its readers: their work is the prefill's.
        drop(run);
        measured.prefill_wall = started.elapsed();
        measured.cpu[0] = cputime::process().saturating_sub(cpu);
        measured.compute_cpu[0] = timed.cpu;
        measured.prefill_compute = compute.take_compute_time();
    }
    let cpu = cputime::process();
    let started = Instant::now();
    let mut timed = Timed {
        compute,
        cpu: Duration::ZERO,
        wall: Duration::ZERO,
    };
    decode(drive, schedule, &mut timed, continuation, &mut measured)?;
    measured.decode_wall = started.elapsed();
    measured.cpu[1] = cputime::process().saturating_sub(cpu);
    measured.compute_cpu[1] = timed.cpu;
    measured.decode_compute = compute.take_compute_time();
    Ok(measured)
}

/// The compute model with the forward thread's CPU time inside it counted
/// (and, in prefill, its wall time, which the floor subtracts).
struct Timed<'a> {
    compute: &'a mut dyn Compute,
    cpu: Duration,
    wall: Duration,
}

impl Timed<'_> {
    /// Runs `f` on the compute model, its thread CPU time charged to it
    /// when the model asks for that ([`Compute::charges_cpu`]).
    fn charged<T>(&mut self, f: impl FnOnce(&mut dyn Compute) -> T) -> T {
        let compute = &mut *self.compute;
        if compute.charges_cpu() {
            cputime::charged(&mut self.cpu, || f(compute))
        } else {
            f(compute)
        }
    }

    fn prefill_layer(&mut self, layer: u32, range: std::ops::Range<usize>, rows: Option<&[f32]>) {
        let started = Instant::now();
        self.charged(|c| c.prefill_layer(layer, range, rows));
        self.wall += started.elapsed();
    }

    fn begin_step(&mut self, token: u32) {
        self.charged(|c| c.begin_step(token));
    }

    fn step_layer(&mut self, layer: u32, rows: Option<&[f32]>) {
        self.charged(|c| c.step_layer(layer, rows));
    }
}

fn check_layers(drive: &Drive, compute: &dyn Compute) -> Result<()> {
    if drive.ubatch == 0 {
        return Err(Error::InvalidArgument("--ubatch must be at least 1".into()));
    }
    let layers = compute.layers();
    match drive.engram_layers.iter().find(|&&l| l >= layers) {
        Some(layer) => Err(Error::InvalidArgument(format!(
            "the model's Engram layer {layer} does not exist in a compute model of {layers} layers"
        ))),
        None => Ok(()),
    }
}

/// Runs every (layer, chunk) pair in the sweep's order, waiting for a
/// table's rows of the chunk right before its layer.
fn prefill(
    drive: &Drive,
    run: &mut dyn PrefillRun,
    compute: &mut Timed<'_>,
    tokens: usize,
    measured: &mut Measured,
) -> Result<()> {
    let chunks: Vec<(usize, usize)> = (0..tokens)
        .step_by(drive.ubatch)
        .map(|start| (start, (start + drive.ubatch).min(tokens)))
        .collect();
    measured.chunk_stall = vec![Duration::ZERO; chunks.len()];
    let layers = compute.compute.layers();
    let pairs: Vec<(u32, usize)> = match drive.sweep {
        Sweep::Layer => (0..layers)
            .flat_map(|l| (0..chunks.len()).map(move |c| (l, c)))
            .collect(),
        Sweep::Chunk => (0..chunks.len())
            .flat_map(|c| (0..layers).map(move |l| (l, c)))
            .collect(),
    };
    let mut rows = compute.compute.wants_rows().then(Vec::new);
    // Per table: the tokens its waits have covered, and the first of them
    // the rows in `rows` belong to.
    let mut waited = vec![(0usize, 0usize); drive.engram_layers.len()];
    for (layer, c) in pairs {
        let (start, end) = chunks[c];
        run.layer_start(layer, start as u32)?;
        let engram = drive.engram_layers.iter().position(|&l| l == layer);
        if let Some(table) = engram {
            let covered = waited[table].1;
            if end > covered {
                let upto = wait_end(drive, end, covered, tokens);
                measured.prefill_waits.push(WaitPoint {
                    table,
                    upto: upto as u32,
                    before: compute.wall,
                });
                let stall = run.wait(table, upto as u32, rows.as_mut())?;
                measured.prefill_stall_table[table] += stall;
                measured.chunk_stall[c] += stall;
                waited[table] = (covered, upto);
            }
        }
        let given = match (engram, rows.as_deref()) {
            (Some(table), Some(rows)) => Some(chunk_rows(rows, waited[table], start..end)),
            _ => None,
        };
        compute.prefill_layer(layer, start..end, given);
    }
    Ok(())
}

/// Where a wait that must cover tokens up to `end` ends, the table's waits
/// having covered `upto` so far: `end`, or `--wait-tokens` past `upto` if
/// that is further, never past the prompt.
fn wait_end(drive: &Drive, end: usize, upto: usize, tokens: usize) -> usize {
    end.max(upto.saturating_add(drive.wait_tokens)).min(tokens)
}

/// The rows of tokens `range` out of those of the wait that covered
/// `[from, upto)`.
fn chunk_rows(rows: &[f32], (from, upto): (usize, usize), range: std::ops::Range<usize>) -> &[f32] {
    let per_token = rows.len() / (upto - from).max(1);
    &rows[(range.start - from) * per_token..(range.end - from) * per_token]
}

/// One step per token: begin (reads issued), hints, then the layers with a
/// wait at each Engram layer. The schedule only ever sees tokens already
/// decoded; a draft hint stands for what an MTP head would have guessed.
fn decode(
    drive: &Drive,
    schedule: &mut dyn Schedule,
    compute: &mut Timed<'_>,
    continuation: &[u32],
    measured: &mut Measured,
) -> Result<()> {
    let tables = drive.engram_layers.len();
    let mut drafter = match drive.hints {
        HintMode::Draft { top1, top3 } => Some(Drafter::new(drive.seed, top1, top3, drive.vocab)),
        _ => None,
    };
    let mut rows = compute.compute.wants_rows().then(Vec::new);
    for (i, &token) in continuation.iter().enumerate() {
        let mut stall = vec![Duration::ZERO; tables];
        compute.begin_step(token);
        // The whole call is stall: the forward pass cannot start the step
        // until it returns, whatever it did (hash the token, queue reads,
        // read). What the schedule did not put on a table of its own (a
        // read at `step_begin`) goes to the first table, whose layer the
        // delay reaches first.
        let started = Instant::now();
        schedule.step_begin(token, &mut stall)?;
        let begin = started.elapsed();
        let attributed: Duration = stall.iter().sum();
        stall[0] += begin.saturating_sub(attributed);
        measured.step_begin.push(begin);
        let mut hint_call = Duration::ZERO;
        if let Some(drafter) = drafter.as_mut() {
            let offer = drafter.offer(continuation, i);
            if !offer.draft.is_empty() {
                let hints = offer.hints();
                let started = Instant::now();
                schedule.hint(&hints)?;
                hint_call = started.elapsed();
            }
        }
        measured.hint_call.push(hint_call);
        for layer in 0..compute.compute.layers() {
            let engram = drive.engram_layers.iter().position(|&l| l == layer);
            if let Some(table) = engram {
                stall[table] += schedule.step_wait(table, rows.as_mut())?;
            }
            compute.step_layer(layer, engram.and(rows.as_deref()));
        }
        measured.step_stall.push(stall);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ops::Range;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::schedule::IoCounters;

    /// How long the fake schedule's `step_begin` keeps the forward thread.
    const BEGIN_WORK: Duration = Duration::from_millis(2);

    /// What the fakes saw, in order.
    type Log = Arc<Mutex<Vec<String>>>;

    struct FakeSchedule(Log);
    struct FakePrefill(Log);
    struct FakeCompute {
        log: Log,
        layers: u32,
    }

    impl Schedule for FakeSchedule {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn prefill<'a>(&'a mut self, tokens: &[u32]) -> Result<Box<dyn PrefillRun + 'a>> {
            self.0
                .lock()
                .unwrap()
                .push(format!("prefill {}", tokens.len()));
            Ok(Box::new(FakePrefill(self.0.clone())))
        }
        fn step_begin(&mut self, token: u32, stall: &mut [Duration]) -> Result<()> {
            self.0.lock().unwrap().push(format!("begin {token}"));
            // A read of table 1 here, and forward-thread work besides.
            stall[1] += Duration::from_micros(5);
            std::thread::sleep(BEGIN_WORK);
            Ok(())
        }
        fn step_wait(&mut self, table: usize, rows: Option<&mut Vec<f32>>) -> Result<Duration> {
            assert!(rows.is_none());
            self.0.lock().unwrap().push(format!("step_wait {table}"));
            Ok(Duration::from_micros(10 * (table as u64 + 1)))
        }
        fn hint(&mut self, hints: &Hints<'_>) -> Result<()> {
            let list = |t: &[u32]| t.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
            self.0.lock().unwrap().push(format!(
                "hint [{}] [{}]",
                list(hints.draft),
                list(hints.alternatives)
            ));
            Ok(())
        }
        fn io(&mut self) -> IoCounters {
            IoCounters::default()
        }
    }

    impl PrefillRun for FakePrefill {
        fn layer_start(&mut self, _layer: u32, _start: u32) -> Result<()> {
            Ok(())
        }
        fn wait(
            &mut self,
            table: usize,
            upto: u32,
            _rows: Option<&mut Vec<f32>>,
        ) -> Result<Duration> {
            self.0.lock().unwrap().push(format!("wait {table} {upto}"));
            Ok(Duration::from_millis(u64::from(upto)))
        }
    }

    impl Compute for FakeCompute {
        fn layers(&self) -> u32 {
            self.layers
        }
        fn begin_prefill(&mut self, _tokens: &[u32]) {}
        fn prefill_layer(&mut self, layer: u32, range: Range<usize>, _rows: Option<&[f32]>) {
            self.log
                .lock()
                .unwrap()
                .push(format!("layer {layer} {}..{}", range.start, range.end));
        }
        fn begin_step(&mut self, _token: u32) {}
        fn step_layer(&mut self, layer: u32, _rows: Option<&[f32]>) {
            self.log.lock().unwrap().push(format!("step_layer {layer}"));
        }
        fn take_compute_time(&mut self) -> Duration {
            Duration::ZERO
        }
    }

    fn drive(sweep: Sweep, hints: HintMode) -> Drive {
        Drive {
            sweep,
            ubatch: 4,
            wait_tokens: 0,
            engram_layers: vec![1, 2],
            hints,
            vocab: 100,
            seed: 3,
        }
    }

    /// What the fakes should see, written one group a line (a layer's or a
    /// chunk's pass, a decode step), the group's events joined by ", " (no
    /// event of these tests holds one).
    fn events<'a>(groups: &[&'a str]) -> Vec<&'a str> {
        groups.iter().flat_map(|g| g.split(", ")).collect()
    }

    fn run(d: &Drive, prompt: &[u32], continuation: &[u32]) -> (Vec<String>, Measured) {
        let log = Log::default();
        let mut schedule = FakeSchedule(log.clone());
        let mut compute = FakeCompute {
            log: log.clone(),
            layers: 3,
        };
        let m = replay(d, &mut schedule, &mut compute, prompt, continuation).unwrap();
        let seen = log.lock().unwrap().clone();
        (seen, m)
    }

    #[test]
    fn each_sweep_takes_its_layer_or_chunk_through_before_the_next() {
        // Six tokens in chunks of 4, three layers, Engram tables at layers 1
        // and 2; a line per layer's pass over the chunks (layer sweep) or
        // chunk's pass through the layers (chunk sweep), each Engram
        // layer's pass after the wait for its rows.
        let orders: [(Sweep, &[&str]); 2] = [
            (
                Sweep::Layer,
                &[
                    "prefill 6",
                    "layer 0 0..4, layer 0 4..6",
                    "wait 0 4, layer 1 0..4, wait 0 6, layer 1 4..6",
                    "wait 1 4, layer 2 0..4, wait 1 6, layer 2 4..6",
                ],
            ),
            (
                Sweep::Chunk,
                &[
                    "prefill 6",
                    "layer 0 0..4, wait 0 4, layer 1 0..4, wait 1 4, layer 2 0..4",
                    "layer 0 4..6, wait 0 6, layer 1 4..6, wait 1 6, layer 2 4..6",
                ],
            ),
        ];
        for (sweep, groups) in orders {
            let (log, _) = run(&drive(sweep, HintMode::None), &[7; 6], &[]);
            assert_eq!(log, events(groups), "{sweep:?}");
        }
    }

    #[test]
    fn wide_waits_cover_several_chunks_and_stop_at_the_prompt() {
        let mut d = drive(Sweep::Layer, HintMode::None);
        d.ubatch = 2;
        d.wait_tokens = 4;
        let (seen, m) = run(&d, &[1, 2, 3, 4, 5, 6], &[]);
        let want = events(&[
            "prefill 6",
            "layer 0 0..2, layer 0 2..4, layer 0 4..6",
            "wait 0 4, layer 1 0..2, layer 1 2..4, wait 0 6, layer 1 4..6",
            "wait 1 4, layer 2 0..2, layer 2 2..4, wait 1 6, layer 2 4..6",
        ]);
        assert_eq!(seen, want);
        let waits: Vec<(usize, u32)> = m.prefill_waits.iter().map(|w| (w.table, w.upto)).collect();
        assert_eq!(waits, [(0, 4), (0, 6), (1, 4), (1, 6)]);
        // A wait's rows are cut into its chunks' rows.
        let rows: Vec<f32> = (0..8).map(|v| v as f32).collect();
        assert_eq!(chunk_rows(&rows, (2, 6), 4..6), [4.0, 5.0, 6.0, 7.0]);
    }

    #[test]
    fn prefill_stall_is_kept_per_chunk_and_per_table_and_every_wait_for_the_floor() {
        let (_, m) = run(&drive(Sweep::Layer, HintMode::None), &[7; 6], &[]);
        // Stall per chunk adds both tables' waits on that chunk.
        assert_eq!(
            m.chunk_stall,
            [Duration::from_millis(8), Duration::from_millis(12)]
        );
        assert_eq!(m.prefill_stall_table, [Duration::from_millis(10); 2]);
        // Every wait is recorded for the floor, in order, with the compute
        // before it (it only grows).
        let waits: Vec<(usize, u32)> = m.prefill_waits.iter().map(|w| (w.table, w.upto)).collect();
        assert_eq!(waits, [(0, 4), (0, 6), (1, 4), (1, 6)]);
        assert!(m
            .prefill_waits
            .windows(2)
            .all(|w| w[0].before <= w[1].before));
    }

    #[test]
    fn decode_waits_at_each_engram_layer_and_hints_only_known_futures() {
        let hints = HintMode::Draft {
            top1: 1.0,
            top3: 1.0,
        };
        let (log, m) = run(&drive(Sweep::Layer, hints), &[], &[5, 6, 7]);
        let steps = ", step_layer 0, step_wait 0, step_layer 1, step_wait 1, step_layer 2";
        let groups = [
            format!("begin 5, hint [6 7] []{steps}"),
            format!("begin 6, hint [7] []{steps}"),
            format!("begin 7{steps}"),
        ];
        let expected = events(&groups.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(log, expected);
        let micros = Duration::from_micros;
        // `step_begin`'s own time is stall too: what the schedule put on
        // table 1 stays there, the rest goes to table 0.
        for stall in &m.step_stall {
            assert_eq!(stall[1], micros(25));
            assert!(stall[0] >= micros(10) + BEGIN_WORK - micros(5), "{stall:?}");
        }
        assert_eq!(m.step_stall.len(), 3);
        // One hint call time per step; the last step had nothing to hint.
        assert_eq!(m.hint_call.len(), 3);
        assert_eq!(m.hint_call[2], Duration::ZERO);
        // And the call's own time, per step, all of it.
        assert_eq!(m.step_begin.len(), 3);
        assert!(
            m.step_begin.iter().all(|&t| t >= BEGIN_WORK),
            "{:?}",
            m.step_begin
        );
    }

    #[test]
    fn an_engram_layer_beyond_the_compute_is_an_error() {
        let mut d = drive(Sweep::Layer, HintMode::None);
        d.engram_layers = vec![1, 3];
        let log = Log::default();
        let err = replay(
            &d,
            &mut FakeSchedule(log.clone()),
            &mut FakeCompute { log, layers: 3 },
            &[1],
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("Engram layer 3"), "{err}");
    }
}
