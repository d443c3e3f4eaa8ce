"""A prefill host that sleeps each layer's time instead of computing, over
the Python API: the replay bench's stand-in GPU, but in the engine's f32
format and with any engram.open option, to A/B engine settings where torch
is not needed. Cold (the model's files are evicted first), one run.

    python3 sleep_host.py --model M.gguf --prompt FILE [--sweep chunk|layer]
        [--us 14.8] [--format f32|raw] [--open KEY=VALUE ...]

Prints one JSON line (stall per table, stall as % of compute) and the waits
over 5 ms as (table, upto, start s, blocked s).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time

import numpy as np

import engram
from host_measure import evict, open_options


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--tokenizer", default=os.path.join(
        here, "..", "..", "..", "assets", "deepseek-v4", "tokenizer.json.gz"))
    p.add_argument("--prefill", type=int, default=8192)
    p.add_argument("--ubatch", type=int, default=512)
    p.add_argument("--us", type=float, default=14.8, help="compute per token per layer, us")
    p.add_argument("--layers", type=int, default=43)
    p.add_argument("--sweep", choices=("chunk", "layer"), default="chunk")
    p.add_argument("--format", choices=("f32", "raw"), default="f32")
    p.add_argument("--open", action="append", default=[], metavar="KEY=VALUE",
                   help="an engram.open option (e.g. prefill_order=chunk); repeatable")
    a = p.parse_args()

    from tokenizers import Tokenizer
    with gzip.open(a.tokenizer, "rt", encoding="utf-8") as f:
        tok = Tokenizer.from_str(f.read())
    with open(a.prompt, encoding="utf-8", errors="replace") as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids[:a.prefill]
    tokens = np.asarray(ids, dtype=np.uint32)
    evict(a.model)
    engine = engram.open(a.model, env=True, format=a.format, **open_options(a.open))
    info = engine.info
    engram_layers = {layer: t for t, layer in enumerate(info.layer_ids)}
    seq = engine.sequence()
    n = len(tokens)
    chunks = [(lo, min(lo + a.ubatch, n)) for lo in range(0, n, a.ubatch)]
    order = ([(i, c) for i in range(a.layers) for c in chunks] if a.sweep == "layer"
             else [(i, c) for c in chunks for i in range(a.layers)])
    width = 256 if a.format == "f32" else max(info.stored_row_bytes)
    dtype = np.float32 if a.format == "f32" else np.uint8
    buffers = {}
    stall = [0.0] * info.tables
    waits = []
    started = time.perf_counter()
    deadline = started
    prefill = seq.prefill(tokens)
    for i, (lo, hi) in order:
        table = engram_layers.get(i)
        if table is not None:
            out = buffers.setdefault((table, hi - lo), np.empty(
                (hi - lo, info.rows_per_token, width), dtype=dtype))
            t0 = time.perf_counter()
            prefill.wait_into(table, hi, out)
            t1 = time.perf_counter()
            stall[table] += t1 - t0
            waits.append((table, hi, round(t0 - started, 4), round(t1 - t0, 4)))
            deadline = max(deadline, t1)  # a stall is not paid back by skipping compute
        deadline += (hi - lo) * a.us * 1e-6
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)
    prefill.end()
    compute = n * a.layers * a.us * 1e-6
    print(json.dumps({"open": a.open, "format": a.format, "sweep": a.sweep,
                      "compute_s": round(compute, 3), "stall_s": [round(s, 3) for s in stall],
                      "stall_pct_of_compute": round(100 * sum(stall) / compute, 2)}))
    print("waits over 5 ms:", [w for w in waits if w[3] > 0.005])


if __name__ == "__main__":
    main()
