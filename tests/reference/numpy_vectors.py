"""Reference vectors for engram's re-implementation of NumPy's default_rng.

Produced with numpy 2.4.6 (Python 3.11.7) by running, from the repository root:

    python3 tests/reference/numpy_vectors.py > crates/engram/tests/data/numpy_vectors.json

Everything comes from NumPy's public API: SeedSequence.pool and generate_state,
PCG64.random_raw (64-bit outputs), the PCG64 ctypes next_uint32 hook (32-bit
outputs, which buffer the high half of a 64-bit draw), and
Generator.integers(..., dtype=np.int64) over ranges wider and narrower than 2**32.
Integers above 2**53 are written as decimal strings so no JSON reader rounds them.
"""

import json
import sys

import numpy as np

SEEDS = [0, 1, 42, 10007, 140098, 2**32 - 1, 2**32, 2**63 + 12345, 2**64 + 7, 2**100 + 3]
INT64_MAX = int(np.iinfo(np.int64).max)
INT64_MIN = int(np.iinfo(np.int64).min)


def s(v):
    return str(int(v))


def seed_sequence(seed):
    ss = np.random.SeedSequence(seed)
    return {
        "seed": s(seed),
        "pool": [int(w) for w in ss.pool],
        "state_u32_8": [int(w) for w in ss.generate_state(8, np.uint32)],
        "state_u64_4": [s(w) for w in ss.generate_state(4, np.uint64)],
    }


def raw_u64(seed, n=16):
    return {"seed": s(seed), "u64": [s(v) for v in np.random.PCG64(seed).random_raw(n)]}


def next_u32(seed, n=17):
    bg = np.random.PCG64(seed)
    hook = bg.ctypes
    out = [int(hook.next_uint32(hook.state)) for _ in range(n)]
    return {"seed": s(seed), "u32": out}


def integers(seed, low, high, n):
    g = np.random.default_rng(seed)
    vals = g.integers(low, high, size=n, dtype=np.int64)
    return {"seed": s(seed), "low": s(low), "high": s(high), "values": [s(v) for v in vals]}


def integer_cases():
    cases = []
    for seed in [0, 1, 10007, 140098, 2**40 + 5]:
        for cvocab in [99092, 129280, 1000]:
            half = max(1, (INT64_MAX // cvocab) // 2)
            cases.append(integers(seed, 0, half, 4))
        cases.append(integers(seed, -(2**62), 2**62 + 17, 8))  # span > 2**32, near 2**63
        cases.append(integers(seed, -(2**62) - 1, 2**62 + 2, 8))  # span 2**63 + 2: ~half rejected
        cases.append(integers(seed, 0, 2**32, 8))  # span == 2**32 - 1: raw next_uint32
        cases.append(integers(seed, 0, 2**32 + 1, 8))  # span == 2**32: 64-bit path
        cases.append(integers(seed, 10, 17, 33))  # tiny span: buffered 32-bit draws
        cases.append(integers(seed, -5, 3 * 2**30, 9))  # span < 2**32 with rejection
        cases.append(integers(seed, 3, 4, 5))  # span 0
        cases.append(integers(seed, INT64_MIN, INT64_MAX, 5))  # full span minus one
    return cases


def main():
    doc = {
        "numpy_version": np.__version__,
        "seed_sequence": [seed_sequence(x) for x in SEEDS],
        "pcg64_raw": [raw_u64(x) for x in SEEDS],
        "pcg64_next_uint32": [next_u32(x) for x in SEEDS],
        "integers_int64": integer_cases(),
    }
    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
