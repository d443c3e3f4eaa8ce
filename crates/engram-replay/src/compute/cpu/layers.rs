//! The pieces of the CPU transformer: a deterministic weight generator, dense
//! matrices, and one layer (Engram block, attention, MLP) run one position
//! at a time.
//!
//! Every reduction sums in a fixed order that depends only on the vector
//! length, never on how the positions were grouped into calls, so a position
//! gets the same bits whatever chunking or sweep order the driver uses.

use engram::splitmix::{finalize, SplitMix64};

use super::CpuShape;

/// Weights a matrix belongs to, for [`Rng::stream`]: each matrix draws from
/// its own stream, so when (or whether) another matrix is built does not
/// change its values.
#[derive(Clone, Copy)]
pub(super) enum Stream {
    Embedding = 1,
    Query,
    Key,
    Value,
    Output,
    Up,
    Down,
    EngramKey,
    EngramValue,
    EngramConv,
}

/// A splitmix64 generator per weight stream.
pub(super) struct Rng(SplitMix64);

impl Rng {
    /// The generator of stream `kind` of layer (or token) `index`.
    pub(super) fn stream(seed: u64, kind: Stream, index: u64) -> Rng {
        let state = finalize(seed ^ finalize(((kind as u64) << 32) ^ finalize(index)));
        Rng(SplitMix64(state))
    }

    /// Uniform in [-1, 1): variance 1/3.
    pub(super) fn uniform(&mut self) -> f32 {
        // 24 bits fill an f32 mantissa exactly, so the value is exact.
        (self.0.next_u64() >> 40) as f32 / (1u32 << 23) as f32 - 1.0
    }

    /// `count` uniform values times `gain`.
    pub(super) fn fill(&mut self, count: usize, gain: f32) -> Vec<f32> {
        (0..count).map(|_| self.uniform() * gain).collect()
    }
}

/// A dense `rows x cols` matrix, row-major.
pub(super) struct Matrix {
    cols: usize,
    w: Vec<f32>,
}

impl Matrix {
    /// Random weights whose output has `gain^2` times the input's variance
    /// (uniform of variance 1/3, scaled by `sqrt(3 / cols)`).
    pub(super) fn random(rows: usize, cols: usize, gain: f32, mut rng: Rng) -> Matrix {
        let scale = gain * (3.0 / cols as f32).sqrt();
        Matrix {
            cols,
            w: rng.fill(rows * cols, scale),
        }
    }

    /// Input size.
    pub(super) fn cols(&self) -> usize {
        self.cols
    }

    /// `out = W x` for each `cols`-long vector `x` of `xs` in turn (each
    /// `rows`-long piece of `out`). Tokens go in tiles so a weight row is
    /// read once per tile, not once per token; each output is the same
    /// [`dot`] whatever the tiling.
    pub(super) fn apply(&self, xs: &[f32], out: &mut [f32]) {
        const TILE: usize = 8;
        let rows = self.w.len() / self.cols;
        let tiles = xs.chunks(TILE * self.cols).zip(out.chunks_mut(TILE * rows));
        for (xs, out) in tiles {
            for (r, w) in self.w.chunks_exact(self.cols).enumerate() {
                for (x, o) in xs.chunks_exact(self.cols).zip(out.chunks_exact_mut(rows)) {
                    o[r] = dot(w, x);
                }
            }
        }
    }
}

/// Partial sums of [`dot`]: four SSE (two AVX) registers' worth, enough to
/// hide the latency of the additions.
const LANES: usize = 16;

/// A dot product with [`LANES`] fixed partial sums, folded in halves: the
/// compiler vectorizes it without shuffles, and the order of additions
/// depends only on the length.
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0] + tail
}

/// `out = x / rms(x)` (no learned gain: the weights are random anyway).
pub(super) fn rmsnorm(x: &[f32], out: &mut [f32]) {
    let scale = 1.0 / (dot(x, x) / x.len() as f32 + 1e-6).sqrt();
    for (o, v) in out.iter_mut().zip(x) {
        *o = v * scale;
    }
}

/// `h += delta`.
fn add(h: &mut [f32], delta: &[f32]) {
    for (a, b) in h.iter_mut().zip(delta) {
        *a += b;
    }
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// Working buffers of one position, reused across positions and layers.
pub(super) struct Scratch {
    normed: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mixed: Vec<f32>,
    out: Vec<f32>,
    inner: Vec<f32>,
    scores: Vec<f32>,
    /// Engram keys and values of the positions of the current call.
    engram_keys: Vec<f32>,
    engram_values: Vec<f32>,
    /// `cos, sin` pairs of the rotary embedding of the current position.
    rope: Vec<(f32, f32)>,
}

impl Scratch {
    pub(super) fn new(dim: usize, ffn: usize, head_dim: usize) -> Scratch {
        Scratch {
            normed: vec![0.0; dim],
            q: vec![0.0; dim],
            k: vec![0.0; dim],
            v: vec![0.0; dim],
            mixed: vec![0.0; dim],
            out: vec![0.0; dim],
            inner: vec![0.0; ffn],
            scores: Vec::new(),
            engram_keys: Vec::new(),
            engram_values: Vec::new(),
            rope: vec![(1.0, 0.0); head_dim / 2],
        }
    }

    /// Rotary angles of `position` (computed in f64: the same bits for the
    /// same position whenever it is computed).
    fn set_rope(&mut self, position: usize) {
        let half = self.rope.len() as f64;
        for (i, pair) in self.rope.iter_mut().enumerate() {
            let angle = position as f64 * 10_000f64.powf(-(i as f64) / half);
            *pair = (angle.cos() as f32, angle.sin() as f32);
        }
    }

    /// Rotates each head of `x` by the current position's angles.
    fn rotate(rope: &[(f32, f32)], x: &mut [f32], head_dim: usize) {
        let half = rope.len();
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(cos, sin)) in rope.iter().enumerate() {
                let (a, b) = (head[i], head[i + half]);
                head[i] = a * cos - b * sin;
                head[i + half] = a * sin + b * cos;
            }
        }
    }
}

/// The Engram key and value projections, built once the number of values
/// per token is known.
struct EngramProjection {
    /// Values each token's rows bring (rows per token times the row width).
    values_per_token: usize,
    wk: Matrix,
    wv: Matrix,
}

/// The Engram block of one layer: projects each token's rows to a key and a
/// value, gates the value by how well the key matches the hidden state, and
/// adds a short causal depthwise convolution of the gated values.
pub(super) struct EngramBlock {
    /// Table whose rows this block consumes.
    pub(super) table: usize,
    /// Built on first use ([`EngramBlock::prepare`]).
    projection: Option<EngramProjection>,
    seed: u64,
    layer: u64,
    /// `[tap][dim]`, tap 0 weighing the current position.
    taps: Vec<f32>,
    /// Gated values of every position so far, `[position][dim]`: the
    /// convolution reads the last `taps` of them, across chunks and steps.
    history: Vec<f32>,
}

impl EngramBlock {
    /// The block of `layer`, consuming Engram table `table`.
    pub(super) fn new(shape: &CpuShape, table: usize, layer: u32) -> Self {
        let layer = u64::from(layer);
        let gain = (3.0 / shape.conv as f32).sqrt();
        let mut taps = Rng::stream(shape.seed, Stream::EngramConv, layer);
        EngramBlock {
            table,
            projection: None,
            seed: shape.seed,
            layer,
            taps: taps.fill(shape.conv * shape.dim, gain),
            history: Vec::new(),
        }
    }

    /// Builds the projections for `values_per_token` values per token, or says
    /// why the count disagrees with the one they were built for.
    pub(super) fn prepare(&mut self, values_per_token: usize, dim: usize) -> Result<(), usize> {
        match &self.projection {
            Some(p) if p.values_per_token != values_per_token => Err(p.values_per_token),
            Some(_) => Ok(()),
            None => {
                let cols = values_per_token;
                let rng = |kind| Rng::stream(self.seed, kind, self.layer);
                self.projection = Some(EngramProjection {
                    values_per_token,
                    wk: Matrix::random(dim, cols, 1.0, rng(Stream::EngramKey)),
                    wv: Matrix::random(dim, cols, 1.0, rng(Stream::EngramValue)),
                });
                Ok(())
            }
        }
    }

    /// Forgets the positions of the previous sequence.
    fn reset(&mut self) {
        self.history.clear();
    }

    /// Projects the rows of each token of `rows` to its key and value, or
    /// returns `false` if the projections are not built.
    fn project(
        &self,
        rows: &[f32],
        keys: &mut Vec<f32>,
        values: &mut Vec<f32>,
        dim: usize,
    ) -> bool {
        let Some(p) = &self.projection else {
            return false;
        };
        let tokens = rows.len() / p.wk.cols();
        for (w, out) in [(&p.wk, &mut *keys), (&p.wv, &mut *values)] {
            out.resize(tokens * dim, 0.0);
            w.apply(rows, out);
        }
        true
    }

    /// Adds the block's output for the next position (projected rows
    /// `key`, `value`) to `h`.
    fn forward(&mut self, h: &mut [f32], key: &[f32], value: &[f32], s: &mut Scratch) {
        let dim = h.len();
        rmsnorm(h, &mut s.normed);
        rmsnorm(key, &mut s.k);
        let gate = 1.0 / (1.0 + (-dot(&s.normed, &s.k) / (dim as f32).sqrt()).exp());
        self.history.extend(value.iter().map(|v| gate * v));
        // Tap j weighs the position j back; the sequence start has fewer.
        let positions = self.history.len() / dim;
        s.out.fill(0.0);
        for (tap, back) in self.taps.chunks_exact(dim).zip(0..positions) {
            let at = (positions - 1 - back) * dim;
            for ((o, w), u) in s.out.iter_mut().zip(tap).zip(&self.history[at..at + dim]) {
                *o += w * u;
            }
        }
        add(h, &s.out);
    }
}

/// One transformer layer with its attention cache.
pub(super) struct Block {
    wq: Matrix,
    wk: Matrix,
    wv: Matrix,
    wo: Matrix,
    up: Matrix,
    down: Matrix,
    heads: usize,
    /// Present at the model's Engram layers.
    pub(super) engram: Option<EngramBlock>,
    /// Keys (rotated) and values of every position so far, per head
    /// (`[head][position][head_dim]`: a head's scan reads memory in order).
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    /// Positions `0..done` have been through this layer.
    pub(super) done: usize,
}

impl Block {
    /// Layer `layer` of a model of `shape`. The residual branches
    /// are scaled by `1/sqrt(2 layers)` so the hidden state stays O(1).
    pub(super) fn new(shape: &CpuShape, layer: u32) -> Block {
        let (dim, ffn, heads) = (shape.dim, shape.ffn, shape.heads);
        let rng = |kind| Rng::stream(shape.seed, kind, u64::from(layer));
        let branch = 1.0 / (2.0 * shape.layers as f32).sqrt();
        Block {
            wq: Matrix::random(dim, dim, 1.0, rng(Stream::Query)),
            wk: Matrix::random(dim, dim, 1.0, rng(Stream::Key)),
            wv: Matrix::random(dim, dim, 1.0, rng(Stream::Value)),
            wo: Matrix::random(dim, dim, branch, rng(Stream::Output)),
            up: Matrix::random(ffn, dim, 1.0, rng(Stream::Up)),
            down: Matrix::random(dim, ffn, branch, rng(Stream::Down)),
            heads,
            engram: None,
            keys: vec![Vec::new(); heads],
            values: vec![Vec::new(); heads],
            done: 0,
        }
    }

    /// Forgets the previous sequence and makes room for `positions`.
    pub(super) fn reset(&mut self, positions: usize) {
        let head_dim = self.wq.cols() / self.heads;
        for cache in self.keys.iter_mut().chain(&mut self.values) {
            cache.clear();
            cache.reserve(positions * head_dim);
        }
        if let Some(engram) = &mut self.engram {
            engram.reset();
        }
        self.done = 0;
    }

    /// Runs the next positions (`done..`) through this layer: `hidden` holds
    /// their states, updated in place, and `rows` their rows at an Engram
    /// layer (rows per token times the row width, per position).
    pub(super) fn forward(&mut self, hidden: &mut [f32], rows: Option<&[f32]>, s: &mut Scratch) {
        let dim = self.wq.cols();
        // Taken out of `s` for the loop, which lends `s` to each position.
        let mut keys = std::mem::take(&mut s.engram_keys);
        let mut values = std::mem::take(&mut s.engram_values);
        let projected = match (&self.engram, rows) {
            (Some(engram), Some(rows)) => engram.project(rows, &mut keys, &mut values, dim),
            _ => false,
        };
        for (i, h) in hidden.chunks_exact_mut(dim).enumerate() {
            if let Some(engram) = self.engram.as_mut().filter(|_| projected) {
                let at = i * dim..(i + 1) * dim;
                engram.forward(h, &keys[at.clone()], &values[at], s);
            }
            self.attention(h, s);
            self.mlp(h, s);
            self.done += 1;
        }
        s.engram_keys = keys;
        s.engram_values = values;
    }

    /// Pre-norm causal self-attention of position `done` over `0..=done`.
    fn attention(&mut self, h: &mut [f32], s: &mut Scratch) {
        let dim = h.len();
        let head_dim = dim / self.heads;
        rmsnorm(h, &mut s.normed);
        self.wq.apply(&s.normed, &mut s.q);
        self.wk.apply(&s.normed, &mut s.k);
        self.wv.apply(&s.normed, &mut s.v);
        s.set_rope(self.done);
        Scratch::rotate(&s.rope, &mut s.q, head_dim);
        Scratch::rotate(&s.rope, &mut s.k, head_dim);
        for head in 0..self.heads {
            let lanes = head * head_dim..(head + 1) * head_dim;
            self.keys[head].extend_from_slice(&s.k[lanes.clone()]);
            self.values[head].extend_from_slice(&s.v[lanes.clone()]);
            self.attend_head(head, lanes, s);
        }
        self.wo.apply(&s.mixed, &mut s.out);
        add(h, &s.out);
    }

    /// Softmax attention of `head` (its `lanes` of the hidden vector),
    /// summing over positions in order.
    fn attend_head(&self, head: usize, lanes: std::ops::Range<usize>, s: &mut Scratch) {
        let scale = 1.0 / (lanes.len() as f32).sqrt();
        let q = &s.q[lanes.clone()];
        let keys = self.keys[head].chunks_exact(lanes.len());
        s.scores.clear();
        s.scores.extend(keys.map(|k| dot(q, k) * scale));
        let max = s.scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut total = 0.0;
        for score in &mut s.scores {
            *score = (*score - max).exp();
            total += *score;
        }
        let out = &mut s.mixed[lanes.clone()];
        out.fill(0.0);
        let values = self.values[head].chunks_exact(lanes.len());
        for (weight, v) in s.scores.iter().zip(values) {
            for (o, x) in out.iter_mut().zip(v) {
                *o += weight * x;
            }
        }
        for o in out {
            *o /= total;
        }
    }

    /// Pre-norm MLP with a SiLU.
    fn mlp(&self, h: &mut [f32], s: &mut Scratch) {
        rmsnorm(h, &mut s.normed);
        self.up.apply(&s.normed, &mut s.inner);
        for x in &mut s.inner {
            *x = silu(*x);
        }
        self.down.apply(&s.inner, &mut s.out);
        add(h, &s.out);
    }
}

/// The embedding of `token`: unit-variance values drawn from the token id,
/// so any `u32` has one without a table.
pub(super) fn embed(seed: u64, token: u32, dim: usize) -> Vec<f32> {
    Rng::stream(seed, Stream::Embedding, u64::from(token)).fill(dim, 3f32.sqrt())
}
