"""The Python cost of a decode step above the Rust API's.

A decode step is step_begin(token) and step_wait on both tables. The same
loop (same model, options and tokens) runs in Rust (the decode_loop example
of crates/engram) and in Python (returning arrays, and with step_wait_into
a preallocated buffer), on a model in the page cache, timed per step.

Each run alternates blocks of the three loops (so machine noise hits all
alike) and takes, per loop, the median and the 10th percentile of its
per-step times over all its blocks; the overhead is the Python figure minus
the Rust one. The script prints every run, then the median and spread
(min..max) of the overhead over the runs. Both engine modes are measured:
prefetch on (reads on the engine's decode threads, the real configuration)
and off (reads at the wait on the calling thread: fewer thread wake-ups, so
less noise).

    python crates/engram-py/bench/overhead.py [--runs 3] [--blocks 4] [--steps 1000]

Needs the engram package installed and cargo (it builds the Rust loop in
release mode unless --rust-bin names a built binary).
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import engram

ROOT = pathlib.Path(__file__).resolve().parents[3]
WARMUP = 100


def rust_binary(given):
    if given:
        return given
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "engram", "--example", "decode_loop"],
        cwd=ROOT, check=True,
    )
    return str(ROOT / "target" / "release" / "examples" / "decode_loop")


def rust_block(binary, model, steps, prefetch):
    """Per-step quantiles of one block of the Rust loop (its own process)."""
    out = subprocess.run(
        [binary, model, str(steps), str(WARMUP), "1" if prefetch else "0"],
        check=True, capture_output=True, text=True,
    ).stdout
    doc = json.loads(out)
    return doc["median_us"], doc["p10_us"]


def python_block(model, steps, prefetch, into):
    """Per-step quantiles of one block of the Python loop."""
    with engram.open(model, format="f32", prefetch=prefetch) as e:
        vocab, tables = e.info.vocab_size, e.info.tables
        seq = e.sequence()
        out = [np.empty((1, e.info.rows_per_token, 256), np.float32) for _ in range(tables)]
        times = []
        clock = time.perf_counter_ns
        for i in range(WARMUP + steps):
            token = (i * 7919 + 13) % vocab  # the Rust loop's tokens
            start = clock()
            seq.step_begin(token)
            if into:
                for t in range(tables):
                    seq.step_wait_into(t, out[t])
            else:
                for t in range(tables):
                    seq.step_wait(t)
            end = clock()
            if i >= WARMUP:
                times.append((end - start) / 1000)
        seq.close()
    times.sort()
    return statistics.median(times), times[len(times) // 10]


def one_run(binary, model, args, prefetch):
    blocks = {"rust": [], "python": [], "python_into": []}
    for _ in range(args.blocks):
        blocks["rust"].append(rust_block(binary, model, args.steps, prefetch))
        blocks["python"].append(python_block(model, args.steps, prefetch, into=False))
        blocks["python_into"].append(python_block(model, args.steps, prefetch, into=True))
    # Per loop: the median over its blocks of each block's median / p10.
    fig = {
        name: {
            "median_us": statistics.median(b[0] for b in v),
            "p10_us": statistics.median(b[1] for b in v),
        }
        for name, v in blocks.items()
    }
    for name in ("python", "python_into"):
        for q in ("median_us", "p10_us"):
            fig[name]["overhead_" + q] = fig[name][q] - fig["rust"][q]
    return fig


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--blocks", type=int, default=4, help="blocks of each loop per run")
    ap.add_argument("--steps", type=int, default=1000, help="timed steps per block")
    ap.add_argument("--scale", type=int, default=65536, help="synth scale of the model")
    ap.add_argument("--model", help="an existing model instead of a synthetic one")
    ap.add_argument("--rust-bin", help="a built decode_loop example")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    binary = rust_binary(args.rust_bin)
    result = {"runs": args.runs, "blocks": args.blocks, "steps": args.steps, "modes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(engram.synth(pathlib.Path(tmp) / "model", scale=args.scale))
        path = pathlib.Path(model)
        for f in [path] if path.is_file() else sorted(path.iterdir()):
            f.read_bytes()  # the loops run on a model in the page cache
        for prefetch in (True, False):
            mode = "prefetch" if prefetch else "no-prefetch"
            runs = []
            for r in range(args.runs):
                fig = one_run(binary, model, args, prefetch)
                runs.append(fig)
                print(
                    f"{mode} run {r + 1}: per step median / p10: rust "
                    f"{fig['rust']['median_us']:.1f} / {fig['rust']['p10_us']:.1f} us; python "
                    f"{fig['python']['median_us']:.1f} / {fig['python']['p10_us']:.1f} "
                    f"(+{fig['python']['overhead_median_us']:.1f} / +{fig['python']['overhead_p10_us']:.1f}); "
                    f"wait_into {fig['python_into']['median_us']:.1f} / {fig['python_into']['p10_us']:.1f} "
                    f"(+{fig['python_into']['overhead_median_us']:.1f} / +{fig['python_into']['overhead_p10_us']:.1f})",
                    file=sys.stderr,
                )
            summary = {
                f"{loop}_overhead_{q}": spread([f[loop][f"overhead_{q}"] for f in runs])
                for loop in ("python", "python_into")
                for q in ("median_us", "p10_us")
            }
            result["modes"][mode] = {"runs": runs, "summary": summary}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for mode, doc in result["modes"].items():
        for key, s in doc["summary"].items():
            print(f"{mode:12} {key:32} median {s['median']:7.2f} us  spread {s['min']:.2f}..{s['max']:.2f}")
    print("target: <= 20 us per step")


if __name__ == "__main__":
    main()
