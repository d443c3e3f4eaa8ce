#!/usr/bin/env python3
"""Independent reference for the Qwen4-Exp (Qwen3.8-Flash-Next) PLE n-gram hash.

Written from the rules alone (the facts sheet, sections 1-3), sharing no code
with the Rust engine: its own SplitMix64, its own prime test (trial
division), its own walk back through each token's history. Pure Python 3, no
dependencies.

Writes crates/engram/tests/data/qwen4exp_vectors.json (or the path given as
the first argument): for four configurations (the release, the release with
ngram_vocab_size_base divided by 4096, a small one with two PLE layers,
4-grams and 4 heads per order, and a bigram-only one with three PLE layers,
3 heads and EOS = 0) the derived constants and, for each test
sequence, every token's row ids (per token, per PLE table, one row per head
in head order). The row ids of every sequence are computed twice, once from
scratch per position and once carrying two-token history across chunks of
several sizes, one token at a time, and after a rollback; the script stops if
the two ever disagree.

Usage: python3 scripts/qwen4exp_ref.py [OUT.json]
"""

import json
import os
import sys

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
INT64_MAX = (1 << 63) - 1
LAYER_STRIDE = 10007


def splitmix64(x):
    """One SplitMix64 step from state x: add GAMMA, then the three mixes."""
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def is_prime(n):
    """Primality by trial division (slow, obviously right)."""
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    d = 3
    while d * d <= n:
        if n % d == 0:
            return False
        d += 2
    return True


def primes_from(base, count):
    """The first `count` primes >= base, in increasing order."""
    out = []
    c = base
    while len(out) < count:
        if is_prime(c):
            out.append(c)
        c += 1
    return out


def derive(cfg):
    """Per PLE layer (sorted one-based ids): multipliers, primes, offsets, rows."""
    n = cfg["ngram_size"]
    heads = (n - 1) * cfg["heads_per_ngram"]
    layers = sorted(set(cfg["ple_layer_ids"]))
    half = max(1, (INT64_MAX // cfg["vocab_size"]) // 2)
    all_primes = primes_from(cfg["ngram_vocab_size_base"], heads * len(layers))
    tables = []
    for index, layer in enumerate(layers):
        mults = []
        for i in range(n):
            state = (cfg["seed"] + LAYER_STRIDE * index + GAMMA * (i + 1)) & MASK64
            mults.append(2 * (splitmix64(state) % half) + 1)
        primes = all_primes[index * heads:(index + 1) * heads]
        offsets = []
        total = 0
        for p in primes:
            offsets.append(total)
            total += p
        d = cfg["make_ngram_vocab_size_divisible_by"]
        stored = (total + d - 1) // d * d
        tables.append({
            "layer_id": layer - 1,  # zero-based decoder layer
            "multipliers": mults,
            "primes": primes,
            "offsets": offsets,
            "rows": total,
            "stored_rows": stored,
        })
    return tables


def context_of(seq, p, n, eos):
    """The ids c0..c(n-1) of position p of `seq` (mask already applied).

    c0 is the token itself; walking back, the first EOS met is kept and
    everything older reads as EOS; before the start reads as EOS.
    """
    ctx = [seq[p]]
    cut = False
    for j in range(1, n):
        q = p - j
        if q < 0 or cut:
            ctx.append(eos)
            continue
        c = seq[q]
        ctx.append(c)
        if c == eos:
            cut = True
    return ctx


def rows_of_context(ctx, tables, cfg):
    """Per table, one row id per head: bigram heads, then trigram, ..."""
    h = cfg["heads_per_ngram"]
    out = []
    for t in tables:
        m = t["multipliers"]
        mix = ctx[0] * m[0]
        rows = []
        for k in range(1, cfg["ngram_size"]):
            mix ^= ctx[k] * m[k]
            assert 0 <= mix < (1 << 63), "mix must stay a non-negative int64"
            for head in range(h):
                g = (k - 1) * h + head
                rows.append(mix % t["primes"][g] + t["offsets"][g])
        out.append(rows)
    return out


def masked(tokens, mask, eos):
    if mask is None:
        return list(tokens)
    return [t if m else eos for t, m in zip(tokens, mask)]


def rows_from_scratch(tokens, mask, tables, cfg):
    """Every position's rows, each computed from the whole sequence."""
    seq = masked(tokens, mask, cfg["eos_token_id"])
    n = cfg["ngram_size"]
    return [rows_of_context(context_of(seq, p, n, cfg["eos_token_id"]), tables, cfg)
            for p in range(len(seq))]


class Carried:
    """A second path: only the last n-1 ids are carried between calls."""

    def __init__(self, cfg, tables):
        self.cfg = cfg
        self.tables = tables
        self.eos = cfg["eos_token_id"]
        # A sequence starts as if preceded by EOS.
        self.tail = [self.eos] * (cfg["ngram_size"] - 1)

    def feed(self, tokens, mask=None):
        out = []
        n = self.cfg["ngram_size"]
        for t in masked(tokens, mask, self.eos):
            window = self.tail + [t]
            ctx = context_of(window, len(window) - 1, n, self.eos)
            out.append(rows_of_context(ctx, self.tables, self.cfg))
            self.tail = window[1:]
        return out


def carried_rows(tokens, mask, tables, cfg, chunk):
    state = Carried(cfg, tables)
    out = []
    for start in range(0, len(tokens), chunk):
        end = min(start + chunk, len(tokens))
        out.extend(state.feed(tokens[start:end], None if mask is None else mask[start:end]))
    return out


def lcg_tokens(count, vocab, seed):
    x = seed
    out = []
    for _ in range(count):
        x = (x * 6364136223846793005 + 1442695040888963407) & MASK64
        out.append((x >> 33) % vocab)
    return out


def sequences(cfg):
    v = cfg["vocab_size"]
    e = cfg["eos_token_id"]
    a, b, c, d = 11 % v, 22 % v, 33 % v, 44 % v
    noisy = lcg_tokens(48, v, 7)
    for i in (5, 6, 19, 30, 47):
        noisy[i] = e
    seqs = [
        ("eos_at_0", [e, a, b, c, d, a], None),
        ("eos_eos", [a, b, e, e, c, d, e, a], None),
        ("eos_last", [a, b, c, e], None),
        ("eos_only", [e], None),
        ("edge_ids", [v - 1, v - 2, 0, 1, v - 1, 0, e, v - 2, 1, 1, v - 1], None),
        ("repeated_trigrams", [a, b, c] * 5 + [a, b], None),
        ("noisy", noisy, None),
        ("masked", [a, b, c, d, a, b, c, d, v - 1, 0, b, c],
         [0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 0]),
        ("masked_noisy", noisy, [0 if i % 7 in (2, 3) else 1 for i in range(len(noisy))]),
    ]
    return seqs


CHUNKS = [1, 2, 3, 5, 7]


def cases_for(cfg, tables):
    out = []
    for name, tokens, mask in sequences(cfg):
        want = rows_from_scratch(tokens, mask, tables, cfg)
        for chunk in CHUNKS:
            if carried_rows(tokens, mask, tables, cfg, chunk) != want:
                sys.exit(f"{name}: carried history in chunks of {chunk} disagrees")
        case = {"name": name, "tokens": tokens}
        if mask is not None:
            case["attention_mask"] = mask
        case["token_rows"] = want
        out.append(case)
    return out


def rollbacks_for(cfg, tables):
    """A sequence, a rollback to an earlier position, then other tokens."""
    v = cfg["vocab_size"]
    e = cfg["eos_token_id"]
    out = []
    specs = [
        ("rollback_mid", lcg_tokens(20, v, 3), 9, [v - 1, e, 5 % v, 6 % v], None),
        ("rollback_after_eos", [1, 2, e, 3, 4, 5], 3, [7 % v, 8 % v, 9 % v], None),
        ("rollback_to_0", [4, 5, 6], 0, [6 % v, 5 % v, e, 4 % v], None),
        ("rollback_masked", lcg_tokens(12, v, 9), 7, [1, 2, 3, 4], [1, 0, 1, 1]),
    ]
    for name, first, to, then, then_mask in specs:
        whole = first[:to] + then
        whole_mask = None if then_mask is None else [1] * to + then_mask
        want = rows_from_scratch(whole, whole_mask, tables, cfg)[to:]
        # The carried path: feed `first`, restart from its prefix, feed `then`.
        state = Carried(cfg, tables)
        state.feed(first[:to])
        if state.feed(then, then_mask) != want:
            sys.exit(f"{name}: carried history after rollback disagrees")
        case = {"name": name, "tokens": first, "rollback_to": to, "then": then}
        if then_mask is not None:
            case["then_attention_mask"] = then_mask
        case["token_rows"] = want
        out.append(case)
    return out


RELEASED = {
    "vocab_size": 248320,
    "ngram_size": 3,
    "heads_per_ngram": 8,
    "ngram_vocab_size_base": 20000000,
    "make_ngram_vocab_size_divisible_by": 128,
    "seed": 1234,
    "eos_token_id": 248044,
    "ple_layer_ids": [2],
}

CONFIGS = [
    ("released", "qwen3.8-flash-next", 1, RELEASED),
    ("scaled_4096", "qwen3.8-flash-next", 4096,
     dict(RELEASED, ngram_vocab_size_base=20000000 // 4096)),
    ("two_layers_n4_h4", None, None, {
        "vocab_size": 1000,
        "ngram_size": 4,
        "heads_per_ngram": 4,
        "ngram_vocab_size_base": 5000,
        "make_ngram_vocab_size_divisible_by": 64,
        "seed": 99,
        "eos_token_id": 3,
        # One-based and out of order on purpose: tables follow sorted ids.
        "ple_layer_ids": [7, 2],
    }),
    # Bigram only, 3 heads: a shape without an unrolled loop in the engine.
    ("bigram_h3", None, None, {
        "vocab_size": 50000,
        "ngram_size": 2,
        "heads_per_ngram": 3,
        "ngram_vocab_size_base": 1000,
        "make_ngram_vocab_size_divisible_by": 1,
        "seed": 1234,
        "eos_token_id": 0,
        "ple_layer_ids": [1, 4, 5],
    }),
]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "crates", "engram", "tests", "data",
                           "qwen4exp_vectors.json")
    path = sys.argv[1] if len(sys.argv) > 1 else default
    doc = {"about": "Qwen4-Exp PLE n-gram row ids from scripts/qwen4exp_ref.py; "
                    "token_rows[token][table][head]", "chunks": CHUNKS, "configs": []}
    for name, preset, scale, cfg in CONFIGS:
        tables = derive(cfg)
        doc["configs"].append({
            "name": name,
            "preset": preset,
            "scale": scale,
            "config": cfg,
            "tables": tables,
            "cases": cases_for(cfg, tables),
            "rollbacks": rollbacks_for(cfg, tables),
        })
    released = doc["configs"][0]["tables"][0]
    assert released["multipliers"] == [23703573157769, 20109073645365, 8052911324071]
    assert released["primes"][:3] == [20000003, 20000023, 20000033]
    assert released["primes"][-1] == 20000171
    assert released["rows"] == 320001446 and released["stored_rows"] == 320001536
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
