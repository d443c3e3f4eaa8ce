"""Engine rows with prefetch on vs off, waited in the layer-sweep and chunk-sweep orders, against Engine.rows.

    python3 wait_order_check.py MODEL TOKENS UBATCH PROMPT_FILE   (run from the repo root)
"""
import sys, gzip, numpy as np, engram
from tokenizers import Tokenizer
model, n, ub = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with gzip.open("assets/deepseek-v4/tokenizer.json.gz", "rt") as f:
    tok = Tokenizer.from_str(f.read())
toks = np.asarray(tok.encode(open(sys.argv[4]).read(), add_special_tokens=False).ids[:n], dtype=np.uint32)
chunks = [(lo, min(lo + ub, n)) for lo in range(0, n, ub)]
def run(prefetch, sweep, **kw):
    e = engram.open(model, format="f32", prefetch=prefetch, **kw)
    s = e.sequence(); out = {}
    with s.prefill(toks) as pf:
        order = [(t, c) for t in (0, 1) for c in chunks] if sweep == "layer" else [(t, c) for c in chunks for t in (0, 1)]
        for t, (lo, hi) in order:
            out[(t, lo)] = pf.wait(t, hi)
    e.close(); return out
with engram.open(model, format="f32") as e:
    ids = e.sequence().row_ids(toks)
    ref = {t: e.rows(t, ids[:, t, :].reshape(-1)).reshape(n, -1, 256) for t in (0, 1)}
for sweep in ("layer", "chunk"):
    for prefetch in (False, True):
        out = run(prefetch, sweep)
        bad = []
        for (t, lo), rows in out.items():
            want = ref[t][lo:lo + rows.shape[0]]
            if not np.array_equal(rows, want):
                tokbad = np.nonzero((rows != want).any(axis=(1, 2)))[0]
                bad.append((t, lo, len(tokbad), int(tokbad[0])))
        print(sweep, "prefetch" if prefetch else "sync", "mismatching (table, chunk, tokens, first):", bad[:12], flush=True)
