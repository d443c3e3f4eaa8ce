"""What a host run (torch_host.py, sleep_host.py) measures and reports:
CUDA-event timelines of the compute stream, the prefill's host waits, the
engine's reader-thread CPU, the page-cache eviction before a cold run, the
engine options given on the command line, the summary over repeats and
the results document.
Kept apart from torch_host.py, which drives the model and moves the rows;
torch is imported only where a timeline is recorded."""

from __future__ import annotations

import gc
import json
import os
import statistics
import time


class Timeline:
    """CUDA events on the compute stream at labelled points: the GPU time
    between two marks is put under the later mark's label, so a phase's
    GPU time splits into its parts (e.g. the layers before an Engram block
    against the Engram block with its wait for the rows). No-op on CPU."""

    def __init__(self, stream, reserve: int = 0):
        self.stream = stream
        self.marks = []
        # Events made up front and reused: a mark sits on the host's path
        # between a row wait and the next launch, where making an event
        # would count against the schedule being measured.
        self.free = []
        if stream is not None:
            import torch
            self.free = [torch.cuda.Event(enable_timing=True) for _ in range(reserve)]
            for event in self.free:  # torch makes the CUDA event at its first record
                event.record(stream)

    def mark(self, label: str):
        if self.stream is not None:
            if self.free:
                event = self.free.pop()
            else:
                import torch
                event = torch.cuda.Event(enable_timing=True)
            event.record(self.stream)
            self.marks.append((label, event))

    def intervals_ms(self) -> list:
        """(label, GPU milliseconds since the mark before) for every mark
        after the first, in order; clears the marks."""
        if not self.marks:
            return []
        self.marks[-1][1].synchronize()
        out = [(label, a.elapsed_time(b))
               for (_, a), (label, b) in zip(self.marks, self.marks[1:])]
        self.free += [event for _, event in self.marks]
        self.marks.clear()
        return out

    def totals_ms(self) -> dict:
        """GPU milliseconds per label since the first mark; clears the marks."""
        return totals(self.intervals_ms())


def totals(intervals: list) -> dict:
    """Per label, the sum of its intervals' milliseconds."""
    out = {}
    for label, ms in intervals:
        out[label] = out.get(label, 0.0) + ms
    return out


def series(intervals: list, label: str) -> list:
    """The milliseconds of `label`'s intervals, in order (a prefill's
    Engram layer: one per chunk, in the order the chunks ran)."""
    return [ms for name, ms in intervals if name == label]


class HostClock:
    """The host thread's own time per labelled part of a loop: `lap(label)`
    puts the time since the previous lap under `label`. With the GPU
    timeline it tells a GPU that idles because the host is late (and where
    the host spent the time) from one that waits for rows."""

    def __init__(self):
        self.parts = {}
        self.last = time.perf_counter()

    def lap(self, label: str):
        now = time.perf_counter()
        self.parts[label] = self.parts.get(label, 0.0) + (now - self.last)
        self.last = now

    def restart(self):
        self.last = time.perf_counter()


class GcClock:
    """Time the Python garbage collector ran while open: a host that
    allocates a few objects a step (events, views) triggers collections that
    walk every tracked object, on the host's path between two launches."""

    def __init__(self):
        self.seconds = 0.0
        self.collections = 0
        self._start = None

    def _callback(self, phase, _info):
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.seconds += time.perf_counter() - self._start
            self.collections += 1
            self._start = None

    def __enter__(self):
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)
        return False


def unique_reads(ids, info) -> list:
    """Per table, the reads tokens `[0, n)` need, at index `n`: the row ids
    `ids` (`[token][table][column]`) with rows whose bytes start in the same
    4 KiB page of the table's file counted as one read, as the engine's
    page coalescing reads them (the replay bench's count, engram-replay's
    `floor.rs`)."""
    import numpy as np
    tokens, tables, columns = ids.shape
    out = []
    for t in range(tables):
        offsets = ids[:, t, :].astype(np.int64) * int(info.stored_row_bytes[t])
        pages = (offsets + int(info.table_offsets[t])) // 4096
        _, first = np.unique(pages.reshape(-1), return_index=True)
        new = np.bincount(first // columns, minlength=tokens)
        out.append([0] + np.cumsum(new).tolist())
    return out


def wait_points(order: list, intervals: list, engram_layers: dict, reads: list) -> list:
    """Each Engram layer of a prefill as the GPU met it, for the floor:
    `order` is the sweep's `(layer, (lo, hi))` in the order they ran and
    `intervals` their GPU times (one per entry, `Timeline.intervals_ms`),
    `reads` from `unique_reads`. Per Engram layer: its table, the tokens it
    needs (`upto`), the GPU milliseconds before it (`before_ms`) and the
    reads every table needs so far (`reads`). Empty without a timeline."""
    if len(intervals) != len(order):
        return []
    upto = [0] * len(reads)
    points, before = [], 0.0
    for (layer, (_, hi)), (_, ms) in zip(order, intervals):
        table = engram_layers.get(layer)
        if table is not None:
            upto[table] = max(upto[table], hi)
            points.append({"table": table, "upto": hi, "before_ms": before,
                           "reads": sum(r[u] for r, u in zip(reads, upto))})
        before += ms
    return points


def floor_s(points: list, iops: float) -> float:
    """The least prefill stall a perfect scheduler leaves on a device of
    `iops` reads a second, with the compute of the run that gave `points`
    (`wait_points`; take a run that did not stall, `resident`): every
    unique read issued from the start in the order the waits need them,
    so wait `j` cannot start before `reads_j / iops`. The replay bench's
    floor (engram-replay's `floor.rs`) on the real GPU's times."""
    late = [p["reads"] / iops - p["before_ms"] / 1e3 for p in points]
    return max([0.0] + late)


def floor_row(rs: list, resident: list, iops: float) -> dict:
    """A schedule's prefill GPU idle for rows (its Engram layers' GPU time
    over `resident`'s, per repeat) against the floor and the compute of
    `resident`'s run of the same repeat."""
    def engram_ms(r):
        return sum(ms for label, ms in r["prefill"]["gpu_ms"].items() if label.startswith("engram"))

    pairs = [(r, f) for r, f in zip(rs, resident) if f["prefill"].get("floor_points")]
    if not pairs:
        return {}
    floors = [floor_s(f["prefill"]["floor_points"], iops) for _, f in pairs]
    compute = [sum(f["prefill"]["gpu_ms"].values()) / 1e3 for _, f in pairs]
    idle = [max(0.0, engram_ms(r) - engram_ms(f)) / 1e3 for r, f in pairs]
    return {"prefill_floor_s": spread(floors)["median"],
            "prefill_floor_of_compute": spread([a / c for a, c in zip(floors, compute)])["median"],
            "prefill_gpu_idle_s": spread(idle)["median"],
            "prefill_gpu_idle_of_compute": spread([a / c for a, c in zip(idle, compute)])["median"],
            "prefill_gpu_idle_over_floor": spread([a / f for a, f in zip(idle, floors) if f])["median"]}


def wait_profile(waits: list, ubatch: int) -> dict:
    """Where a prefill's host waits went: the first chunk's against the
    rest's per table, and the waits over 5 ms (table, upto, start s, s)."""
    first = {}
    rest = {}
    for table, hi, _, blocked in waits:
        into = first if hi <= ubatch else rest
        into[table] = into.get(table, 0.0) + blocked
    return {"first_chunk_s": first, "rest_s": rest,
            "long": [(t, hi, round(at, 4), round(s, 4)) for t, hi, at, s in waits if s > 0.005]}


def engine_threads_cpu_s() -> float:
    """CPU time (user + system) of the engine's reader threads, Linux only."""
    total = 0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/comm") as f:
                    name = f.read().strip()
                if not (name.startswith("engram-") or name.startswith("iou-")):
                    continue
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
            except OSError:
                continue
    except OSError:
        return float("nan")
    return total / tick


def evict(path: str):
    """Drops the model's files from the page cache (Linux), so reads are cold."""
    files = [path] if os.path.isfile(path) else [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for name in files:
        fd = os.open(name, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def stall_summary(phase: dict) -> dict:
    """The engine's stall report of one phase (``Sequence.stall``): per token
    summed over the tables, and each table's total."""
    total = phase.get("stall_per_token_total") or {}
    return {
        "per_token_us": {k: total.get(k) for k in ("count", "mean_us", "p50_us", "p90_us",
                                                    "p99_us", "max_us")},
        "per_table_s": [t.get("stall_total_us", 0.0) / 1e6 for t in phase.get("tables", [])],
        "rows_from_storage": sum(t.get("rows_unique", 0) - t.get("cache_hits", 0)
                                 - t.get("hot_hits", 0) for t in phase.get("tables", [])),
        # Per table, where the rows came from: the reuse store, read ahead
        # into it, warmed into the page cache, and how many reads were issued.
        "rows_per_table": [{k: t.get(k, 0) for k in ("rows_requested", "reuse_hits", "ahead_rows",
                                                     "warm_rows", "reads_issued")}
                           for t in phase.get("tables", [])],
    }


def spread(values: list) -> dict:
    values = sorted(v for v in values if v is not None)
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(values), "min": values[0], "max": values[-1]}


def repeat_tok_s(runs: dict, name: str, phase: str) -> list:
    """Per repeat, the named schedule's tok/s (empty where it did not run)."""
    return [r[phase]["tok_s"] for r in runs.get(name) or []]


def share(rs: list, floors: list, phase: str) -> dict:
    """Median and min-max of each repeat's tok/s over that repeat's floor."""
    return spread([r[phase]["tok_s"] / f for r, f in zip(rs, floors) if f])


# The floor (rows already on the GPU), and the copy path from host memory
# with no engine: a floor slower than the copy path is no floor, and the
# summary says so rather than picking the faster of the two.
FLOOR, COPY_PATH = "resident", "pinned"


def summarize(runs: dict, args) -> list:
    """Per schedule: medians (and min-max) over the repeats, and tok/s as a
    share of the floor (`resident`: `of_resident`) and of `pinned`
    (`of_pinned`), each taken within a repeat. On the H200, an earlier
    `resident` (each step's rows gathered from Python between the decode
    graphs) decoded 3-10% slower than `pinned` with the same graphs and the
    same result (docs/log/2026-12-gpu.md, "`resident` is not the floor on
    this GPU"); so where both ran, `resident`'s row has
    `PHASE_floor_below_pinned`: whether its median share of `pinned` is
    under 1, when ratios against it overstate every other schedule."""
    floor = runs.get(FLOOR)
    rows = []
    for schedule, rs in runs.items():
        row = {"schedule": schedule}
        for phase in ("prefill", "decode"):
            tok = [r[phase]["tok_s"] for r in rs]
            row[f"{phase}_tok_s"] = spread(tok)["median"]
            for name in (FLOOR, COPY_PATH):
                floors = repeat_tok_s(runs, name, phase)
                if floors:
                    sp = share(rs, floors, phase)
                    row[f"{phase}_of_{name}"] = sp["median"]
                    row[f"{phase}_of_{name}_min"] = sp["min"]
                    row[f"{phase}_of_{name}_max"] = sp["max"]
            if schedule == FLOOR and row.get(f"{phase}_of_{COPY_PATH}") is not None:
                row[f"{phase}_floor_below_{COPY_PATH}"] = row[f"{phase}_of_{COPY_PATH}"] < 1.0
            if "stall" in rs[0][phase]:
                per_token = [r[phase]["stall"]["per_token_us"] for r in rs]
                for key in ("mean_us", "p50_us", "p99_us"):
                    row[f"{phase}_stall_{key}"] = spread([p.get(key) for p in per_token])["median"]
                tables = zip(*[r[phase]["stall"]["per_table_s"] for r in rs])
                for t, values in enumerate(tables):
                    row[f"{phase}_stall_table{t}_s"] = spread(list(values))["median"]
                row[f"{phase}_engine_cpu_us_per_token"] = spread(
                    [r[phase].get("engine_cpu_us_per_token") for r in rs])["median"]
            if "waits" in rs[0][phase] and schedule != "resident":
                for part in ("first_chunk_s", "rest_s"):
                    totals = [sum(r[phase]["waits"][part].values()) for r in rs]
                    row[f"{phase}_host_wait_{part}"] = spread(totals)["median"]
            for key in rs[0][phase].get("gpu_us_per_step", {}):
                row[f"{phase}_gpu_{key}_us"] = spread(
                    [r[phase]["gpu_us_per_step"].get(key) for r in rs])["median"]
            for key in rs[0][phase].get("gpu_ms", {}):
                row[f"{phase}_gpu_{key}_ms"] = spread(
                    [r[phase]["gpu_ms"].get(key) for r in rs])["median"]
            for key in rs[0][phase].get("host_us_per_step", {}):
                row[f"{phase}_host_{key}_us"] = spread(
                    [r[phase]["host_us_per_step"][key] for r in rs])["median"]
            if rs[0][phase].get("gpu_wait_ms") is not None:
                row[f"{phase}_gpu_wait_ms"] = spread([r[phase]["gpu_wait_ms"] for r in rs])["median"]
        if floor and getattr(args, "device_iops", None):
            row.update(floor_row(rs, floor, args.device_iops))
        rows.append(row)
    if floor:
        # The compute alone, per layer: for the replay bench's
        # `--compute gpu:custom:PREFILL_US,DECODE_US,LAYERS`.
        p = spread([r["prefill"]["tok_s"] for r in floor])["median"]
        d = spread([r["decode"]["tok_s"] for r in floor])["median"]
        rows.append({"schedule": "compute_profile",
                     "prefill_us_per_token_layer": 1e6 / p / args.layers,
                     "decode_us_per_layer": 1e6 / d / args.layers if d else 0.0,
                     "layers": args.layers})
    return rows


def open_options(pairs: list) -> dict:
    """`--open KEY=VALUE` pairs as engram.open keyword arguments."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"--open {pair!r}: expected KEY=VALUE")
        try:
            options[key] = int(value, 0)
        except ValueError:
            options[key] = value  # a name: backend=uring, prefill_order=chunk
    return options


def write_results(args, runs: dict) -> dict:
    """The runs so far and their summary (the repeats done so far), to --json."""
    done = {s: rs for s, rs in runs.items() if rs}
    doc = {"args": dict(vars(args)), "results": [r for rs in done.values() for r in rs],
           "summary": summarize(done, args)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return doc
