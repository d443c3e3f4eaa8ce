"""A real GPU host for engram: a PyTorch decoder whose Engram blocks consume
the engine's rows, prefill then decode, under four schedules.

The decoder has the model's layer count (43 for DeepSeek V4.1-Flash) and an
Engram block at each of the model's Engram layer ids (the same block as the
replay bench's ``cpu`` compute model: key and value projections of the
token's rows, a sigmoid gate from the normalized hidden state and key, a
short causal depthwise convolution); the other layers are attention + a
SwiGLU MLP. Rows reach the GPU as a runtime would move them, through
``engram.torch.DeviceRows``: the host waits for them into a pinned buffer
(double-buffered per table), a side stream copies them and the compute
stream waits on the copy's event right before the Engram block, which marks
the rows consumed once its kernels are queued; raw rows are decoded on the
GPU (``DeviceRows.decoder``, inside the decode graphs too). In decode the
host calls ``step_begin`` as soon as the sampled token is on the host
(``--step-edge ahead`` queues the next step's embedding and the layers
before its first Engram block behind the sampled token first: a
diagnostic, slower on an H100, docs/log/2026-12-06-step-edge-ahead.md).

Schedules:
  resident  the floor: the rows read before the run (no storage, no engine).
            Prefill gathers each chunk's from a device copy; decode gathers
            every step's before the run into pinned host memory, and each
            step copies its rows into the buffer the graph reads, as every
            schedule does, with no gather on the host (rows copied from
            device memory there slowed this GPU's graphs by 8%:
            docs/log/2026-12-06-resident-floor.md). The summary's ``of_resident`` is
            against it; where ``pinned`` ran too, ``of_pinned`` beside it, and
            ``resident``'s row says whether it was the slower of the two
            (``floor_below_pinned``: then ratios to it flatter the engine)
  pinned    the rows gathered on the host from a memory copy, then moved as the
            engine's are (no storage, no engine): what the copy path costs
  shadow    pinned's rows, and beside them overlap's engine calls (step_begin
            each step, its reads) whose rows nobody waits for: what the engine's
            reads alone do to the host
  sync      the engine with prefetch off: rows read at the layer, then copied
  overlap   the engine's pipeline (no row cache, no hints)
  full      overlap + a row cache + draft hints (right with probability P)

The final hidden states are hashed (blake2b of their bytes) per phase; the
digest must be the same under every schedule.

    python3 torch_host.py --model M.gguf --prompt FILE [--profile mac|flash|tiny]
        [--prefill 8192] [--decode 500] [--sweep layer|chunk] [--cold] [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import hashlib
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

# Bit-identical results across schedules need deterministic GPU kernels:
# cuBLAS may pick workspaces per stream (the copy stream is a second one)
# unless its workspace is fixed, before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

import engram
import engram.torch

from host_measure import (GcClock, HostClock, Timeline, engine_threads_cpu_s,  # noqa: E402
                          evict, open_options, series, stall_summary, totals,
                          unique_reads, wait_points, wait_profile, write_results)
from torch_model import PROFILES, Decoder, calibrate_ffn, rmsnorm  # noqa: E402

SCHEDULES = ("resident", "sync", "overlap", "full")
# Diagnostic schedules, run only when named.
EXTRA_SCHEDULES = ("pinned", "shadow")
# Schedules that open no engine, and those whose rows come from the memory copy.
NO_ENGINE = ("resident", "pinned")
ROWS_FROM_MEMORY = NO_ENGINE + ("shadow",)


class Stage:
    """What every schedule runs on: the row buffers a runtime copies rows
    into (``DeviceRows``) and the decoder, its weights and decode graphs.

    One stage serves every run of a process, so every schedule's graphs
    read the same weights at the same device addresses and only the rows'
    delivery differs between schedules."""

    def __init__(self, args, info):
        device = torch.device(args.device)
        # Made before the decoder: its decode graphs read rows from buffers
        # shaped by these, and decode them with these tables' decoders.
        self.rows = engram.torch.DeviceRows(info, device, format=args.rows,
                                            tokens=min(args.ubatch, max(args.prefill, 1)),
                                            side_stream=args.side_stream)
        engram_layers = {layer: t for t, layer in enumerate(info.layer_ids)}
        self.model = Decoder(args.sizes, args.layers, engram_layers,
                             info.rows_per_token, info.row_dim, device,
                             args.prefill + args.decode + 1,
                             graphs=device.type == "cuda" and args.graphs,
                             decoders={t: self.rows.decoder(t) for t in range(info.tables)},
                             row_input=self.rows.empty)


class Host:
    """Runs one schedule over a prompt on a stage: prefill (layer or chunk
    sweep), then teacher-forced decode steps."""

    def __init__(self, args, schedule: str, info, tokens: np.ndarray, ids: np.ndarray, rows,
                 stage: Stage):
        self.args, self.schedule, self.tokens, self.ids = args, schedule, tokens, ids
        self.device = torch.device(args.device)
        self.rows_per_token = info.rows_per_token
        self.engram_layers = {layer: t for t, layer in enumerate(info.layer_ids)}
        self.resident = rows.gpu
        # `resident`'s decode rows: per table, every step's gathered once,
        # before the run, from the device copy into pinned host memory
        # (`step_rows`; --resident-copy).
        self.step_rows = (step_rows(rows.gpu, args.prefill, args.prefill + args.decode,
                                    args.resident_copy)
                          if schedule == "resident" else None)
        self.in_memory = rows.host
        self.reads = rows.reads  # per table and prefix, for the floor
        cuda = self.device.type == "cuda"
        self.compute = torch.cuda.current_stream() if cuda else None
        self.rows, self.model = stage.rows, stage.model
        for layer in self.model.layers:
            layer.reset()  # the caches and histories of the stage's last run
        self.gpu_wait = []  # (start, end) CUDA events around the compute stream's waits
        # Enough events for every decode mark (7 a step for two tables).
        self.timeline = Timeline(self.compute, reserve=(2 * len(info.layer_ids) + 4) * (args.decode + 1))
        # The host's prefill waits: (table, upto, start s from the prefill's
        # start, blocked s), to tell a first-chunk stall from a steady one.
        self.waits = []
        self.phase_start = 0.0

    # --- row delivery -------------------------------------------------
    def deliver(self, table: int, lo: int, hi: int, fill) -> torch.Tensor:
        """Rows of `table` for tokens [lo, hi) on the device, ordered after
        their copy on the compute stream; the compute stream's wait for the
        copy is timed between two CUDA events."""
        if self.schedule == "resident":
            index, rows = self.resident[table]
            return rows[index[lo:hi]]
        if self.compute is None:
            return self.rows.deliver(table, hi - lo, fill)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(self.compute)
        rows = self.rows.deliver(table, hi - lo, fill)
        end.record(self.compute)
        self.gpu_wait.append((start, end))
        return rows

    def deliver_step(self, seg, pos: int, fill):
        """A decode step's rows for the segment that starts with an Engram
        block, into the fixed device buffer its graph reads.

        This runs between the rows' arrival and the launch that needs them,
        and the GPU idles for as long as it takes: on the H200 host, table
        0's part of a `flash` step took the host 440 us, of which 256 us
        were the engine's wait, and `pinned`'s (no engine) 190 us
        (docs/log/2026-12-gpu.md, "Where `overlap`'s decode loss is").
        DeviceRows makes no event or view there. Under `resident` the host
        launches one copy, on the compute stream, from the step's rows
        gathered before the run: the same graphs read the same bytes, and
        the host does the least it can between them."""
        if self.step_rows is not None:
            if self.args.resident_gap_us and self.compute is not None:
                # The GPU idles before each table's rows, as it may while a
                # host fetches them: whether the graphs' own time depends on
                # being launched back to back.
                self.compute.synchronize()
                busy(self.args.resident_gap_us)
            if self.args.resident_host_us:
                # The host busy this long before each table's rows, the GPU
                # left running: as `pinned`'s gather keeps it.
                busy(self.args.resident_host_us)
            src = self.step_rows[seg.table][pos - self.args.prefill]
            if self.args.resident_copy_stream and self.compute is not None:
                # A diagnostic: the copy on a stream of its own, which the
                # compute stream waits for, as `pinned`'s host copy is.
                side = self._side_stream()
                side.wait_stream(self.compute)  # the buffer's readers are queued
                with torch.cuda.stream(side):
                    seg.rows.copy_(src)
                self.compute.wait_stream(side)
                return
            seg.rows.copy_(src, non_blocking=True)
            return
        self.rows.deliver(seg.table, 1, fill, out=seg.rows)

    def _side_stream(self):
        if getattr(self, "_side", None) is None:
            self._side = torch.cuda.Stream(self.device)
        return self._side

    def step_done(self, seg):
        """The segment's graph, the reader of its rows, is queued."""
        if seg.table is not None:
            self.rows.consumed(seg.table)

    def layer(self, i: int, h: torch.Tensor, lo: int, hi: int, wait_into) -> torch.Tensor:
        table = self.engram_layers.get(i)
        rows = None
        if table is not None:
            rows = self.deliver(table, lo, hi, lambda out: wait_into(table, out))
        h = self.model.layers[i].forward(h, rows)
        if table is not None:
            self.rows.consumed(table)
        return h

    def gather_in_memory(self, table: int, lo: int, out: np.ndarray):
        """`pinned`: the rows of tokens [lo, lo + len(out)) from the host copy."""
        index, rows = self.in_memory[table]
        np.take(rows, index[lo:lo + out.shape[0]], axis=0, out=out)

    def step_source(self, seq, table: int, pos: int):
        """How a decode step's rows of `table` come into a host buffer."""
        if self.schedule in ROWS_FROM_MEMORY:
            return lambda out: self.gather_in_memory(table, pos, out)
        return lambda out: seq.step_wait_into(table, out)

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    # --- phases ------------------------------------------------------
    def prefill(self, seq) -> dict:
        n, ub = self.args.prefill, self.args.ubatch
        chunks = [(lo, min(lo + ub, n)) for lo in range(0, n, ub)]
        prompt = self.tokens[:n]
        self.sync()
        started = time.perf_counter()
        # `shadow` prefills from memory: its engine's history is the decode's only.
        pf = None if self.schedule in ROWS_FROM_MEMORY else seq.prefill(prompt)

        def wait_into(table, out, hi):
            t0 = time.perf_counter()
            written = None
            if pf is None:
                self.gather_in_memory(table, hi - out.shape[0], out)
            else:
                written = pf.wait_into(table, hi, out)
            t1 = time.perf_counter()
            self.waits.append((table, hi, t0 - started, t1 - t0))
            return written

        hidden = {c: self.model.embed_tokens(prompt[c[0]:c[1]]) for c in chunks}
        order = ([(i, c) for i in range(len(self.model.layers)) for c in chunks]
                 if self.args.sweep == "layer"
                 else [(i, c) for c in chunks for i in range(len(self.model.layers))])
        self.timeline.mark("start")
        for i, (lo, hi) in order:
            hidden[(lo, hi)] = self.layer(i, hidden[(lo, hi)], lo, hi,
                                          lambda t, out, hi=hi: wait_into(t, out, hi))
            # An Engram layer's interval holds its wait for the rows' copy
            # and any idle while the host was blocked getting them.
            self.timeline.mark(f"engram{self.engram_layers[i]}" if i in self.engram_layers
                               else "layers")
        final = torch.cat([hidden[c] for c in chunks])
        digest = hashlib.blake2b(final.float().cpu().numpy().tobytes(), digest_size=16)
        wall = time.perf_counter() - started
        if pf is not None:
            pf.end()
        intervals = self.timeline.intervals_ms()
        return {"wall_s": wall, "tok_s": n / wall, "checksum": digest.hexdigest(),
                "waits": wait_profile(self.waits, ub), "gpu_ms": totals(intervals),
                # Each Engram layer's GPU time per chunk: against `resident`'s,
                # where in the prompt the GPU idled for rows.
                "gpu_engram_ms_by_chunk": {str(t): series(intervals, f"engram{t}")
                                           for t in range(len(self.engram_layers))},
                # Where each Engram layer came in the GPU's time, and the reads
                # needed by then: `resident`'s give the floor (--device-iops).
                "floor_points": wait_points(order, intervals, self.engram_layers, self.reads)}

    def decode(self, seq) -> dict:
        n, k = self.args.prefill, self.args.decode
        drafts = random.Random(self.args.seed)
        vocab = self.args.vocab
        # Each step's final hidden state, kept on the device and hashed at
        # the end: hashing it on the host each step would put a copy and a
        # sync between the sampled token and the next `step_begin`.
        finals = torch.empty(k, self.model.dim, dtype=self.model.dtype, device=self.device)
        segments = self.model.segments
        # The segments before the first Engram block need no rows: under
        # `--step-edge ahead` they are launched with the embedding before
        # the host has the sampled token.
        lead = next((i for i, seg in enumerate(segments) if seg.table is not None),
                    len(segments))
        ahead = self.args.step_edge == "ahead"
        cuda = self.compute is not None
        if ahead:
            # The teacher's tokens on the device, read at the step's
            # position by the embedding, as a runtime's embedding reads the
            # token its sampler left on the device.
            tokens_dev = torch.from_numpy(self.tokens.astype(np.int64)).to(self.device)
            sampled = torch.empty(1, dtype=torch.long, pin_memory=cuda)
            sampled_ready = torch.cuda.Event() if cuda else None
        step_s = []
        self.sync()
        started = time.perf_counter()
        clock = HostClock()  # the host's time per part of a step
        profiling = DecodeProfile(self.args, self.schedule)

        def launch_front(s: int) -> torch.Tensor:
            """Step `s`'s embedding and the segments before its first
            Engram block, queued; returns their hidden state."""
            pos = n + s
            if ahead:
                self.model.pos.fill_(pos)
                h = self.model.embed_at(tokens_dev, self.model.pos)
            else:
                h = self.model.embed_tokens(self.tokens[pos:pos + 1])
                self.model.pos.fill_(pos)
            clock.lap("embed")
            for i in range(lead):
                h = self.run_segment(i, h)
                clock.lap(f"launch{i}")
            return h

        with GcClock() as collector:
            h = None
            for s in range(k):
                profiling.at(s)
                t0 = time.perf_counter()
                if s == 0 or not ahead:
                    clock.restart()
                pos = n + s
                token = int(self.tokens[pos])
                guess = None
                if ahead and s == 0:
                    h = launch_front(0)
                if seq is not None:
                    seq.step_begin(token)  # the token is on the host: reads start now
                    clock.lap("step_begin")
                self.timeline.mark("between")  # the sampling sync and the host's turn
                if not ahead:
                    h = launch_front(s)
                if self.schedule == "full" and pos + 1 < len(self.tokens):
                    # The stand-in for a sampler's top 3 is drawn while the
                    # GPU runs the lead layers: a runtime has its top-k from
                    # the step before, and the draw is no part of the
                    # engine's cost.
                    guess = offer_hints(drafts, int(self.tokens[pos + 1]), self.args, vocab)
                    clock.lap("offer")
                for i in range(lead, len(segments)):
                    seg = segments[i]
                    if seg.table is not None:
                        self.deliver_step(seg, pos, self.step_source(seq, seg.table, pos))
                        self.timeline.mark(f"rows{seg.table}")  # idle until this table's rows
                        clock.lap(f"rows{seg.table}")
                    h = self.run_segment(i, h)
                    clock.lap(f"launch{i}")
                    if seg.table is not None and guess is not None:
                        # Once the first table's rows are delivered and the
                        # layers that use them launched: the engine holds a
                        # step's hints until its first table is read, so
                        # hinting earlier reads nothing sooner, and the call
                        # (74 us a step on an H100 host) then held back the
                        # delivery the GPU was waiting for.
                        seq.hint(**guess)
                        guess = None
                        clock.lap("hint")
                logits = rmsnorm(h) @ self.model.head.T
                clock.lap("head")
                finals[s].copy_(h[0])
                clock.lap("digest")
                if not ahead:
                    _sampled = int(logits.argmax())  # the sampling sync of a real runtime
                    clock.lap("sample")
                    self.timeline.mark("head")
                    step_s.append(time.perf_counter() - t0)
                    continue
                # The token comes to the host by an event on its copy alone,
                # so the next step's embedding and lead segments, queued
                # behind it, keep the GPU busy while the host takes it and
                # begins the step.
                sampled.copy_(logits.argmax().reshape(1), non_blocking=True)
                if cuda:
                    sampled_ready.record(self.compute)
                self.timeline.mark("head")
                if s + 1 < k:
                    h = launch_front(s + 1)
                if cuda:
                    sampled_ready.synchronize()  # the sampling sync of a real runtime
                _sampled = int(sampled[0])
                clock.lap("sample")
                step_s.append(time.perf_counter() - t0)
        profiling.finish()
        wall = time.perf_counter() - started
        digest = hashlib.blake2b(finals.float().cpu().numpy().tobytes(), digest_size=16)
        gpu_ms = self.timeline.totals_ms()
        host_us = {key: 1e6 * v / max(k, 1) for key, v in clock.parts.items()}
        host_us["gc"] = 1e6 * collector.seconds / max(k, 1)
        return {"wall_s": wall, "tok_s": k / wall if k else 0.0,
                "step_ms_p50": 1e3 * statistics.median(step_s) if step_s else 0.0,
                "host_us_per_step": host_us, "gc_collections": collector.collections,
                "gpu_us_per_step": {key: 1e3 * v / max(k, 1) for key, v in gpu_ms.items()},
                # The compute stream's time from a segment's end to its next
                # table's rows (the wait on the copy's event; under
                # `resident`, the device-to-device copy), all steps.
                "gpu_wait_ms": (sum(v for key, v in gpu_ms.items() if key.startswith("rows"))
                                if self.compute is not None else None),
                "checksum": digest.hexdigest()}

    def run_segment(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Launches decode segment `i` on hidden state `h`; returns its output."""
        seg = self.model.segments[i]
        if seg.graph is None:
            seg.h_in = h
        elif seg.h_in is not h:
            seg.h_in.copy_(h)
        h = seg.run()
        self.timeline.mark(f"segment{i}")
        self.step_done(seg)
        return h

    def gpu_wait_ms(self) -> float:
        self.sync()
        total = sum(a.elapsed_time(b) for a, b in self.gpu_wait)
        self.gpu_wait.clear()
        return total


class DecodeProfile:
    """A diagnostic (--profile-steps N): `torch.profiler` over N decode
    steps from the 50th, each kernel's total GPU time and a Chrome trace
    written beside the --json file, one of each per schedule and run."""

    def __init__(self, args, schedule: str):
        self.steps, self.prof = args.profile_steps, None
        self.path = f"{args.json or 'torch_host'}.profile-{schedule}-{os.getpid()}-{id(self)}.txt"

    def at(self, step: int):
        """Called before each decode step."""
        if self.steps and self.prof is None and step == 50:
            from torch.profiler import ProfilerActivity, profile
            cuda = [ProfilerActivity.CUDA] if torch.cuda.is_available() else []
            self.prof = profile(activities=[ProfilerActivity.CPU, *cuda])
            self.prof.__enter__()
        elif self.prof is not None and step >= 50 + self.steps:
            self.finish()

    def finish(self):
        """Called after the last step too: stops a profile still running."""
        if self.prof is None:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.prof.__exit__(None, None, None)
        with open(self.path, "w") as f:
            key = "cuda_time_total" if torch.cuda.is_available() else "cpu_time_total"
            f.write(self.prof.key_averages().table(sort_by=key, row_limit=40))
        # Every kernel's and copy's start and duration on the device, to
        # tell idle time between kernels apart by where it falls.
        self.prof.export_chrome_trace(self.path.replace(".txt", ".trace.json"))
        self.prof, self.steps = None, 0


def offer_hints(rng: random.Random, actual: int, args, vocab: int) -> dict:
    """`Sequence.hint`'s arguments for the next token, whose true value is
    `actual`, as a sampler's top 3 would give them (the replay bench's
    `--hints draft:P,Q`): the true token first with probability
    ``--draft``, within the top 3 with ``--top3``; the first is the draft,
    the other two are alternatives."""
    if rng.random() < args.draft:
        rank = 0
    elif args.top3 > args.draft and rng.random() < (args.top3 - args.draft) / (1 - args.draft):
        rank = rng.choice((1, 2))
    else:
        rank = None
    ranked = []
    for i in range(3):
        if i == rank:
            ranked.append(actual)
            continue
        wrong = rng.randrange(vocab)
        while wrong == actual or wrong in ranked:
            wrong = rng.randrange(vocab)
        ranked.append(wrong)
    hints = {"tokens": ranked[:1], "draft_probs": [args.draft]}
    if args.top3 > args.draft:
        p = (args.top3 - args.draft) / 2
        hints.update(alternatives=ranked[1:], alternative_probs=[p, p])
    return hints


def load_tokens(args) -> np.ndarray:
    if args.tokens:
        with open(args.tokens) as f:
            return np.asarray(json.load(f), dtype=np.uint32)
    from tokenizers import Tokenizer
    with gzip.open(args.tokenizer, "rt", encoding="utf-8") as f:
        tok = Tokenizer.from_str(f.read())
    with open(args.prompt, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)


@dataclass
class InMemoryRows:
    """Per table: the distinct rows the run needs, read once (untimed), and
    each token's index into them; on the device (`resident`) and in host
    memory (`pinned`); and the reads every prefix of the prompt needs
    (`host_measure.unique_reads`, for the floor). All depend only on the
    prompt, so every schedule and repeat shares them."""

    gpu: list
    host: list
    reads: list


def resident_rows(args, engine, ids: np.ndarray, device) -> InMemoryRows:
    gpu, host = [], []
    for table in range(ids.shape[1]):
        flat = ids[:, table, :].reshape(-1)
        uniq, inverse = np.unique(flat, return_inverse=True)
        rows = np.ascontiguousarray(engine.rows(table, uniq, format=args.rows))
        index = inverse.reshape(ids.shape[0], ids.shape[2]).astype(np.int64)
        host.append((index, rows))
        gpu.append((torch.from_numpy(index).to(device), torch.from_numpy(rows).to(device)))
    return InMemoryRows(gpu, host, unique_reads(ids, engine.info))


def busy(us: float):
    """Keeps the host thread busy (not asleep) for `us` microseconds."""
    until = time.perf_counter() + us / 1e6
    while time.perf_counter() < until:
        pass


def step_rows(gpu: list, lo: int, hi: int, copy: str = "device") -> list:
    """Per table of `gpu` (`InMemoryRows.gpu`), the rows of tokens [lo, hi)
    gathered into one device tensor `[hi - lo, rows_per_token, width]` (raw
    or f32, as delivered), as its one-token views `[1, rows_per_token,
    width]`, so a decode step takes its rows with no index, slice or gather.

    `copy` (--resident-copy) says where a step's copy comes from: "host"
    (the default) the same rows in pinned host memory (a host-to-device
    copy as every schedule's, with no gather on the host); as diagnostics,
    "device" the views above (a device-to-device memcpy) and "kernel"
    strided views of them (torch copies those with a kernel on the SMs).
    On an H100 host the graphs after a copy from device memory ran their
    kernels 0.3 us further apart, 8% of a `flash` step
    (docs/log/2026-12-06-resident-floor.md)."""
    steps = []
    for index, rows in gpu:
        gathered = rows[index[lo:hi]]
        if copy == "kernel":
            spaced = torch.zeros(gathered.shape[:-1] + (2 * gathered.shape[-1],),
                                 dtype=gathered.dtype, device=gathered.device)
            spaced[..., ::2] = gathered
            gathered = spaced[..., ::2]
        elif copy == "host" and gathered.is_cuda:
            gathered = gathered.cpu().pin_memory()
        steps.append(gathered.split(1))
    return steps


def raw_decode_problem(info) -> str | None:
    """Why engram.torch cannot decode some table's raw rows on the device
    (None when it decodes every table's)."""
    for table in range(info.tables):
        try:
            engram.torch.RowDecoder(info.encodings[table], info.row_dim,
                                    info.stored_row_bytes[table])
        except ValueError as err:
            return f"table {table}: {err}"
    return None


def run_schedule(args, schedule: str, tokens, ids, rows, info, stage: Stage | None = None) -> dict:
    """One run of `schedule`, on `stage` (a stage of its own when none, or
    under --stage-per-run)."""
    torch.manual_seed(0)
    if stage is None or args.stage_per_run:
        stage = Stage(args, info)
    host = Host(args, schedule, info, tokens, ids, rows, stage)
    engine = None
    seq = None
    if schedule not in NO_ENGINE:
        if args.cold:
            evict(args.model)
        # The runtime knows its sweep, and says so (--open may override it).
        options = {"prefill_order": "chunk" if args.sweep == "chunk" else "auto",
                   **args.open_options}
        if args.host_cpu is not None:
            # The engine's threads, made at open, take the creating thread's
            # CPUs: every CPU but the forward thread's.
            os.sched_setaffinity(0, args.cpus - {args.host_cpu})
        engine = engram.open(args.model, env=True, format=args.rows, direct_io=args.direct,
                             prefetch=schedule != "sync",
                             cache_bytes=args.cache_mib << 20 if schedule == "full" else 0,
                             **options)
        seq = engine.sequence()
    if args.host_cpu is not None:
        os.sched_setaffinity(0, {args.host_cpu})  # this (the forward) thread only
    cpu0 = engine_threads_cpu_s()
    prefill = host.prefill(seq)
    prefill["gpu_wait_ms"] = host.gpu_wait_ms() if host.compute is not None else None
    cpu1 = engine_threads_cpu_s()
    decode = host.decode(seq)
    cpu2 = engine_threads_cpu_s()
    result = {"schedule": schedule, "prefill": prefill, "decode": decode}
    if seq is not None:
        prefill["stall"] = stall_summary(seq.stall("prefill"))
        decode["stall"] = stall_summary(seq.stall("decode"))
        prefill["engine_cpu_us_per_token"] = 1e6 * (cpu1 - cpu0) / max(args.prefill, 1)
        decode["engine_cpu_us_per_token"] = 1e6 * (cpu2 - cpu1) / max(args.decode, 1)
        seq.close()
        engine.close()
    del host, stage
    if args.host_cpu is not None:
        os.sched_setaffinity(0, args.cpus)  # the caller's CPUs back
    gc.collect()  # whatever else holds a decoder: free it before the next one
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def profile_sizes(args) -> dict:
    """The profile's layer sizes, its MLP width calibrated on this GPU where
    the profile names a decode layer time instead."""
    sizes = dict(PROFILES[args.profile])
    if args.layer_us is not None:
        sizes["layer_us"], sizes["ffn"] = args.layer_us, None
    if args.ffn is not None:
        sizes["ffn"] = args.ffn
    if sizes["ffn"] is None:
        if args.device != "cuda" or not args.graphs:
            raise SystemExit(f"--profile {args.profile} sizes its MLP by timing captured "
                             "CUDA graphs: pass --ffn on CPU or with --eager")
        ffn, us = calibrate_ffn(sizes, args.prefill + args.decode + 1, torch.device("cuda"))
        print(f"{args.profile}: MLP width {ffn} (one decode layer {us:.0f} us, "
              f"target {sizes['layer_us']:.0f} us)", flush=True)
        sizes["ffn"], sizes["calibrated_layer_us"] = ffn, us
    return sizes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", help="text file, tokenized with --tokenizer")
    p.add_argument("--tokens", help="JSON list of token ids (instead of --prompt)")
    p.add_argument("--tokenizer", default=os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "assets", "deepseek-v4", "tokenizer.json.gz"))
    p.add_argument("--profile", choices=sorted(PROFILES), default="mac")
    p.add_argument("--ffn", type=int, help="MLP width (the mac profile calibrates it otherwise)")
    p.add_argument("--layer-us", type=float,
                   help="decode layer time the mac profile's MLP width is calibrated to (870)")
    p.add_argument("--eager", dest="graphs", action="store_false",
                   help="launch decode kernels one by one instead of from CUDA graphs")
    p.add_argument("--layers", type=int, default=43)
    p.add_argument("--prefill", type=int, default=8192)
    p.add_argument("--decode", type=int, default=500)
    p.add_argument("--ubatch", type=int, default=512)
    p.add_argument("--sweep", choices=("layer", "chunk"), default="layer")
    p.add_argument("--schedule", default=",".join(SCHEDULES))
    p.add_argument("--rows", choices=("auto", "raw", "f32"), default="auto",
                   help="raw: the engine's stored rows, decoded on the device by "
                        "engram.torch (what a GPU runtime would take: 264 bytes a row of "
                        "e4m3_e8m0_32_row264, no decoding on the readers); f32: the engine's "
                        "decoded rows; auto: raw where engram.torch decodes every table's "
                        "encoding, else f32")
    p.add_argument("--draft", type=float, default=0.79,
                   help="`full`: the draft (a sampler's top 1) is the next token with this "
                        "probability")
    p.add_argument("--top3", type=float, default=0.95,
                   help="`full`: the next token is within the top 3 (the draft and two "
                        "alternatives) with this probability (at most --draft: no alternatives)")
    p.add_argument("--cache-mib", type=int, default=256)
    p.add_argument("--direct", action="store_true")
    p.add_argument("--cold", action="store_true")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host-cpu", type=int,
                   help="run the forward thread on this CPU alone and the engine's threads "
                        "on the others (Linux)")
    p.add_argument("--device-iops", type=float,
                   help="the disk's random 4 KiB reads a second (the replay bench's device.iops): "
                        "the summary gives the prefill floor on this GPU's times and each "
                        "schedule's GPU idle against it (needs resident)")
    p.add_argument("--stage-per-run", action="store_true",
                   help="a decoder and row buffers made for each run (as before) instead of "
                        "one shared by every run")
    p.add_argument("--resident-copy-stream", action="store_true",
                   help="a diagnostic of resident's decode: its step copy on a "
                        "stream of its own that the compute stream waits for")
    p.add_argument("--resident-copy", choices=("host", "device", "kernel"), default="host",
                   help="where resident's decode copies each step's rows from: pinned host "
                        "memory (the default: a host-to-device copy, as every schedule's, "
                        "without a gather), or, as diagnostics, the device (a memcpy) or the "
                        "device by a copy kernel (both slow this GPU's graphs: "
                        "docs/log/2026-12-06-resident-floor.md)")
    p.add_argument("--compute-stream", action="store_true",
                   help="a diagnostic: run on a created CUDA stream, not the default one")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="a diagnostic: torch.profiler over this many decode steps from the "
                        "50th, kernel times and a Chrome trace written beside --json "
                        "(scripts/trace_gaps.py reads the trace)")
    p.add_argument("--resident-gap-us", type=float, default=0.0,
                   help="a diagnostic of resident's decode: the GPU idles this long before "
                        "each table's rows (the host synchronizes, then waits)")
    p.add_argument("--resident-host-us", type=float, default=0.0,
                   help="a diagnostic of resident's decode: the host spins this long before "
                        "each table's rows without waiting for the GPU")
    p.add_argument("--step-edge", choices=("sync", "ahead"), default="sync",
                   help="decode: sync (the default) waits for the whole step and launches the "
                        "next after step_begin; ahead, a diagnostic, queues the next step's "
                        "embedding and the segments before its first Engram block behind the "
                        "sampled token's copy and waits for that copy alone, as an asynchronous "
                        "runtime does (the GPU never idles at the step's edge, yet on an H100 "
                        "host every later graph ran 9%% slower: "
                        "docs/log/2026-12-06-step-edge-ahead.md)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-side-stream", dest="side_stream", action="store_false",
                   help="copy rows on the compute stream (a check of the copy path)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--open", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of engram.open for the engine schedules, an integer "
                        "or a name (e.g. reuse_bytes=67108864, backend=uring); repeatable")
    p.add_argument("--json", help="write the results here")
    return p


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.compute_stream and torch.cuda.is_available():
        # Every kernel, copy and graph replay of the run on a created stream
        # rather than the legacy default stream.
        torch.cuda.set_stream(torch.cuda.Stream())

    if args.host_cpu is not None:
        args.cpus = os.sched_getaffinity(0)
        if args.host_cpu not in args.cpus or len(args.cpus) < 2:
            p.error(f"--host-cpu {args.host_cpu}: this process may run on CPUs "
                    f"{sorted(args.cpus)}; it needs that one and at least one other")
    if args.device_iops is not None and not args.device_iops > 0:
        p.error(f"--device-iops {args.device_iops}: expected a positive number of reads a second")
    if args.device_iops is not None and "resident" not in args.schedule.split(","):
        p.error("--device-iops: the floor is taken from resident's run; "
                "add resident to --schedule")
    args.sizes = profile_sizes(args)
    args.open_options = open_options(args.open)
    tokens = load_tokens(args)
    need = args.prefill + args.decode + 1
    if len(tokens) < need:
        p.error(f"the prompt has {len(tokens)} tokens; --prefill + --decode need {need}")
    tokens = tokens[:need]
    probe = engram.open(args.model, format="f32")
    info = probe.info
    undecoded = raw_decode_problem(info)
    if args.rows == "auto":
        args.rows = "f32" if undecoded else "raw"
    elif args.rows == "raw" and undecoded:
        p.error(f"--rows raw: {args.model}: {undecoded}")
    args.vocab = info.vocab_size
    ids = probe.sequence().row_ids(tokens)
    rows = resident_rows(args, probe, ids, torch.device(args.device))
    probe.close()

    # Warm-up, untimed: kernels chosen and loaded, allocator primed.
    warm = argparse.Namespace(**{**vars(args), "prefill": min(args.ubatch, args.prefill),
                                 "decode": min(4, args.decode)})
    run_schedule(warm, "resident", tokens, ids, rows, info)
    stage = None if args.stage_per_run else Stage(args, info)

    schedules = args.schedule.split(",")
    unknown = [s for s in schedules if s not in SCHEDULES + EXTRA_SCHEDULES]
    if unknown:
        p.error(f"--schedule: unknown {', '.join(unknown)} "
                f"(expected some of {', '.join(SCHEDULES + EXTRA_SCHEDULES)})")
    runs = {s: [] for s in schedules}
    for repeat in range(args.repeat):  # interleaved: drift hits every schedule alike
        for schedule in schedules:
            r = run_schedule(args, schedule, tokens, ids, rows, info, stage)
            r["repeat"] = repeat
            runs[schedule].append(r)
            print(f"{schedule:9} prefill {r['prefill']['tok_s']:9.1f} tok/s "
                  f"decode {r['decode']['tok_s']:8.2f} tok/s "
                  f"checksums {r['prefill']['checksum'][:8]} {r['decode']['checksum'][:8]}",
                  flush=True)
            # After every run: a run cut short by a time limit keeps what it measured.
            doc = write_results(args, runs)
    for row in doc["summary"]:
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in row.items()))
    for row in doc["summary"]:
        for phase in ("prefill", "decode"):
            if row.get(f"{phase}_floor_below_pinned"):
                # Not a failure of the run, but its ratios to resident flatter.
                print(f"{phase}: resident, the floor, ran at {row[f'{phase}_of_pinned']:.4g} of "
                      "pinned: shares of resident overstate every schedule", file=sys.stderr)
    results = doc["results"]
    sums = {(r["prefill"]["checksum"], r["decode"]["checksum"]) for r in results}
    if len(sums) != 1:
        print("checksums differ between schedules", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
