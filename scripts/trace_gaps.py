#!/usr/bin/env python3
"""Where a CUDA stream idles between its kernels and copies, from a Chrome
trace of torch.profiler (torch_host.py --profile-steps N writes one per
schedule and run).

    scripts/trace_gaps.py TRACE.json [TRACE.json ...]

For each trace: the device work's busy and idle time, the idle gaps by size,
and the kinds of work that most often come right before and after the gaps
longer than --long-us, so two schedules' traces say where one idles more."""
import argparse
import collections
import json
import statistics

DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def device_events(path: str) -> list:
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    work = [e for e in events if e.get("cat") in DEVICE_WORK and e.get("ph") == "X"]
    return sorted(work, key=lambda e: e["ts"])


def short(name: str) -> str:
    return name.split("(")[0].split("<")[0][-48:]


def summarize(path: str, long_us: float) -> None:
    work = device_events(path)
    if len(work) < 2:
        print(f"{path}: {len(work)} device events: nothing to measure")
        return
    busy = sum(e["dur"] for e in work)
    span = work[-1]["ts"] + work[-1]["dur"] - work[0]["ts"]
    gaps = []
    for before, after in zip(work, work[1:]):
        gap = after["ts"] - (before["ts"] + before["dur"])
        gaps.append((gap, before, after))
    idle = [g for g, _, _ in gaps if g > 0]
    print(f"{path}")
    print(f"  {len(work)} device events over {span / 1e3:.1f} ms: busy {busy / 1e3:.1f} ms, "
          f"idle {sum(idle) / 1e3:.1f} ms in {len(idle)} gaps")
    if idle:
        print(f"  gap us: p50 {statistics.median(idle):.2f}, mean {statistics.fmean(idle):.2f}, "
              f"max {max(idle):.1f}")
    edges = [0.5, 1, 2, 4, 8, 16, 50, 200, 1000, float("inf")]
    counts = collections.Counter()
    totals = collections.Counter()
    for g in idle:
        edge = next(e for e in edges if g <= e)
        counts[edge] += 1
        totals[edge] += g
    for edge in edges:
        if counts[edge]:
            print(f"    <= {edge:>6} us: {counts[edge]:6} gaps, {totals[edge] / 1e3:8.2f} ms")
    pairs = collections.Counter()
    pair_us = collections.Counter()
    for g, before, after in gaps:
        if g > long_us:
            key = (short(before["name"]), short(after["name"]))
            pairs[key] += 1
            pair_us[key] += g
    for (before, after), n in pair_us.most_common(8):
        print(f"    {pair_us[(before, after)] / 1e3:7.2f} ms in {pairs[(before, after)]:5} gaps "
              f"> {long_us} us: after {before} / before {after}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--long-us", type=float, default=4.0)
    args = p.parse_args()
    for path in args.traces:
        summarize(path, args.long_us)


if __name__ == "__main__":
    main()
