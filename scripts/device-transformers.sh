#!/usr/bin/env bash
# engram.transformers on the device machine (CUDA, no network):
#   1. the bit-exact tests (tests/test_transformers.py) on CPU and CUDA;
#   2. a Qwen3.8-Flash-Next-width model (hidden 2560, 512 experts top-10,
#      PLE at decoder layer 1 with 16 heads of 160 values; LAYERS decoder
#      layers, transformers' defaults for the other widths) with a
#      TABLE_BASE-sized PLE table (16 primes >= TABLE_BASE rows, bf16, about
#      5.1 GB at the default 1,000,000) written as safetensors shards:
#      decode tok/s of the engram-attached model against the stock model
#      with its table in GPU memory (median of ROUNDS, min-max), warm (table
#      in the page cache) and cold (posix_fadvise DONTNEED on the shards
#      before each run), and the stock model's compute profile:
#      layer_ms_per_prefill_token, decode_step_ms and its layer count.
#
#   scripts/device-transformers.sh WHEEL_DIR
#
# WHEEL_DIR holds the engram abi3 wheel (pip wheel ./crates/engram-py) and
# transformers 5.23.0 with its dependencies for CPython 3.12 (pip download
# --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.12
# transformers==5.23.0 safetensors pytest); torch and numpy come from the
# host. Results: $OUT/transformers.tgz. TEST_TIMEOUT and BENCH_TIMEOUT (seconds,
# default 300 and 330) bound the two parts, to fit one device call;
# TEST_SELECT, a pytest -k expression, runs some of the tests; TESTS=0 skips
# them. Each round runs every arm once, in reversed order every other round,
# and the engine's tok/s is also given against the stock model's of the same
# round (median, min-max). PROFILE=1 adds a cProfile of the attachment's
# calls over 32 decode steps ($OUT's profile.txt).
set -euo pipefail
wheels=${1:?usage: device-transformers.sh WHEEL_DIR}
final=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-transformers}
out=$work/results
export LAYERS=${LAYERS:-4} ROUNDS=${ROUNDS:-3} TABLE_BASE=${TABLE_BASE:-1000000}
export PROMPT=${PROMPT:-512} NEW=${NEW:-128} PREFILL_PROFILE=${PREFILL_PROFILE:-2048}
rm -rf "$work"
mkdir -p "$out" "$work"
export XDG_CACHE_HOME="$work/cache" HF_HUB_OFFLINE=1
started=$(date +%s)
stamp() { echo "device-transformers: $(( $(date +%s) - started )) s: $*" >&2; }

stamp "install"
# Every wheel of WHEEL_DIR into one directory on PYTHONPATH, without
# resolving (torch and numpy are the host's; the rest is in WHEEL_DIR).
python3 -m pip install -q --no-index --no-deps --target "$work/site" "$wheels"/*.whl
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
py=python3
"$py" -c "import torch, transformers, engram; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)" | tee "$out/versions.txt"

stamp "bit-exact tests"
[ "${TESTS:-1}" = 0 ] || (cd crates/engram-py/tests && timeout "${TEST_TIMEOUT:-300}" "$py" -m pytest -q -p no:cacheprovider --tb=short --show-capture=no ${TEST_SELECT:+-k "$TEST_SELECT"} test_transformers.py 2>&1 | tail -40) | tee "$out/tests.txt" || true

stamp "bench"
timeout "${BENCH_TIMEOUT:-330}" "$py" - "$work/model" "$out" <<'PY' 2>&1 | tee "$out/bench.txt" || true
import json, os, statistics, sys, time
import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GenerationConfig, Qwen4ExpForCausalLM, Qwen4ExpTextConfig
import engram, engram.transformers as et

root, out = sys.argv[1], sys.argv[2]
layers, rounds = int(os.environ["LAYERS"]), int(os.environ["ROUNDS"])
prompt_len, new = int(os.environ["PROMPT"]), int(os.environ["NEW"])
dev = os.environ.get("DEVICE", "cuda")  # DEVICE=cpu with small HIDDEN/EXPERTS: a smoke run
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
eos = 248044
cfg = Qwen4ExpTextConfig(
    vocab_size=248320, hidden_size=int(os.environ.get("HIDDEN", 2560)), num_hidden_layers=layers,
    num_experts=int(os.environ.get("EXPERTS", 512)),
    num_experts_per_tok=min(10, int(os.environ.get("EXPERTS", 512))), ple_layer_ids=[2], ple_embed_dim=2560,
    ngram_vocab_size_base=int(os.environ["TABLE_BASE"]), split_ngram_parts=16,
    eos_token_id=eos, pad_token_id=eos, bos_token_id=eos, indexer_n_heads=8, indexer_kv_heads=1,
    indexer_head_dim=256, indexer_budget=2048, indexer_compress_ratio=4,
    layer_types=[("indexed_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(layers)])
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
t = time.time()
with torch.device(dev):
    model = Qwen4ExpForCausalLM(cfg).eval()
torch.set_default_dtype(torch.float32)
print(f"model built in {time.time() - t:.1f} s: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B params")
table = model.model.layers[1].ple.ple_embedding.ngram_embedding.weight
t = time.time()
os.makedirs(root, exist_ok=True)
cfg.save_pretrained(root)
parts = table.detach().chunk(cfg.split_ngram_parts, 0)
shards = []
prefix = "model.layers.1.ple.ple_embedding.ngram_embedding"
for i, part in enumerate(parts):
    name = f"ple-{i:02d}.safetensors"
    save_file({f"{prefix}.shard_{i}.weight": part.cpu().contiguous()}, os.path.join(root, name))
    shards.append(os.path.join(root, name))
print(f"table {tuple(table.shape)} bf16 = {table.numel() * 2 / 2**30:.2f} GiB written in {time.time() - t:.1f} s")

rng = np.random.default_rng(1)
ids = torch.tensor(rng.integers(0, 248000, (1, prompt_len)), device=dev)
mask = torch.ones_like(ids)
gen = GenerationConfig(max_new_tokens=new, min_new_tokens=new, do_sample=False,
                       pad_token_id=eos, eos_token_id=eos)

def timed(m):
    sync(); t0 = time.perf_counter()
    with torch.no_grad():
        m(input_ids=ids, attention_mask=mask)
    sync(); t1 = time.perf_counter()
    with torch.no_grad():
        seq = m.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
    sync(); t2 = time.perf_counter()
    prefill = t1 - t0
    return prefill, new / max(1e-9, (t2 - t1) - prefill), seq

def drop_cache():
    for f in shards:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)

# The host time the engine adds: every call of the attachment's layer-0
# hook (`_start`: the ids to the CPU, the reads begun) and of its lookup at
# the PLE layer (`_rows`: the wait and the copy to the GPU), by whether the
# forward was a decode step (one token a row) or a prefill.
hook_s = {"decode": [], "prefill": []}
def clocked(name, decode_of):
    inner = getattr(et.Attachment, name)
    def call(self, *args, **kwargs):
        before, t0 = self._forward, time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            fw = decode_of(before, self._forward)
            hook_s["decode" if fw is not None and fw.tokens == 1 else "prefill"].append(
                (name, time.perf_counter() - t0))
    setattr(et.Attachment, name, call)
# `_start` sets the forward; `_rows` runs inside it (and may end it).
clocked("_start", lambda before, after: after)
clocked("_rows", lambda before, after: before)

results = {"layers": layers, "prompt": prompt_len, "new_tokens": new, "rounds": rounds,
           "table_rows": table.shape[0], "arms": {}}
timed(model)  # warm-up (kernels, allocator)
want = None
arms = {"stock": [], "engram-warm": [], "engram-cold": []}
engine = engram.open(root, format="raw")
# Every round runs each arm once, the order reversed in every other round
# (stock first, then stock last), so a drift of the host's speed within a
# round weighs on both sides alike; the ratios are taken within a round.
for r in range(rounds):
    order = ["stock", "engram-warm", "engram-cold"]
    for arm in order if r % 2 == 0 else order[::-1]:
        if arm == "stock":
            p, tps, seq = timed(model)
        else:
            if arm == "engram-cold":
                drop_cache()
            with et.attach(model, engine):
                p, tps, seq = timed(model)
        arms[arm].append((p, tps))
        want = seq if want is None else want
        if not torch.equal(seq, want):
            print(f"{arm}: generated tokens differ from the first run's")
for arm, runs in arms.items():
    tps = [x[1] for x in runs]; pre = [x[0] * 1000 for x in runs]
    results["arms"][arm] = {"decode_tok_s": tps, "decode_tok_s_median": statistics.median(tps),
                            "prefill_ms": pre, "prefill_ms_median": statistics.median(pre)}
    print(f"{arm}: decode {statistics.median(tps):.2f} tok/s (min {min(tps):.2f}, max {max(tps):.2f}), "
          f"prefill {prompt_len} tokens {statistics.median(pre):.1f} ms (min {min(pre):.1f}, max {max(pre):.1f})")
s = results["arms"]["stock"]["decode_tok_s_median"]
for arm in ("engram-warm", "engram-cold"):
    ratios = [a[1] / b[1] for a, b in zip(arms[arm], arms["stock"])]
    results["arms"][arm]["decode_of_stock_by_round"] = ratios
    print(f"{arm} / stock decode: {results['arms'][arm]['decode_tok_s_median'] / s:.4f} of medians; "
          f"by round {statistics.median(ratios):.4f} (min {min(ratios):.4f}, max {max(ratios):.4f}, "
          f"{len(ratios)} rounds)")
steps = sum(1 for name, _ in hook_s["decode"] if name == "_start")
if steps:
    per = {name: sum(d for n, d in hook_s["decode"] if n == name) / steps * 1e6 for name in ("_start", "_rows")}
    step_ms = 1000 / s
    added = sum(per.values())
    results["engine_host_us_per_decode_step"] = per
    print(f"engine host time a decode step: {added:.1f} us (_start {per['_start']:.1f}, _rows {per['_rows']:.1f}; "
          f"{steps} steps) of the stock step's {step_ms:.2f} ms: decode at least {1 - added / 1000 / step_ms:.4f} of stock")
if os.environ.get("PROFILE") == "1":
    # Where the attachment's host time goes: 32 decode steps under cProfile.
    import cProfile, io, pstats
    short = GenerationConfig(max_new_tokens=32, min_new_tokens=32, do_sample=False,
                             pad_token_id=eos, eos_token_id=eos)
    with et.attach(model, engine), torch.no_grad():
        prof = cProfile.Profile()
        prof.enable()
        model.generate(input_ids=ids, attention_mask=mask, generation_config=short)
        prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text).sort_stats("cumulative")
    for name in ("_start", "_begin", "_rows", "deliver", "_fill"):
        stats.print_callees(rf"\b{name}\b")
    with open(os.path.join(out, "profile.txt"), "w") as f:
        f.write(text.getvalue())
    print("\n".join(l for l in text.getvalue().splitlines() if "->" in l or "cumtime" in l or l.startswith(" " * 20))[:6000])
results["engine_stats"] = engine.stats()
engine.close()

if dev != "cuda":
    print(json.dumps(results["arms"]))
    sys.exit(0)
# Compute profile of the stock model: CUDA events around every decoder layer.
starts, ends = {}, {}
def pre(i):
    def hook(mod, args, kwargs):
        e = torch.cuda.Event(enable_timing=True); e.record(); starts.setdefault(i, []).append(e)
    return hook
def post(i):
    def hook(mod, args, kwargs, output):
        e = torch.cuda.Event(enable_timing=True); e.record(); ends.setdefault(i, []).append(e)
    return hook
handles = []
for i, layer in enumerate(model.model.layers):
    handles.append(layer.register_forward_pre_hook(pre(i), with_kwargs=True))
    handles.append(layer.register_forward_hook(post(i), with_kwargs=True))
def layer_ms():
    torch.cuda.synchronize()
    got = [statistics.median(a.elapsed_time(b) for a, b in zip(starts[i], ends[i])) for i in sorted(starts)]
    starts.clear(); ends.clear()
    return got
n = int(os.environ["PREFILL_PROFILE"])
long_ids = torch.tensor(rng.integers(0, 248000, (1, n)), device=dev)
with torch.no_grad():
    for _ in range(3):
        model(input_ids=long_ids)
per_layer_prefill = layer_ms()
steps = []
with torch.no_grad():
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    model(input_ids=ids, past_key_values=cache, use_cache=True)
    layer_ms()
    tok = ids[:, -1:]
    for _ in range(32):
        sync(); t0 = time.perf_counter()
        model(input_ids=tok, past_key_values=cache, use_cache=True)
        torch.cuda.synchronize(); steps.append((time.perf_counter() - t0) * 1000)
per_layer_decode = layer_ms()
for h in handles:
    h.remove()
results["profile"] = {
    "layers": layers, "prefill_tokens": n,
    "layer_ms_per_prefill_token_each": [x / n for x in per_layer_prefill],
    "layer_ms_per_prefill_token": statistics.mean(per_layer_prefill) / n,
    "decode_layer_ms_each": per_layer_decode,
    "decode_step_ms": statistics.median(steps),
    "decode_step_ms_min": min(steps), "decode_step_ms_max": max(steps),
}
p = results["profile"]
print(f"layers {layers}")
print(f"layer_ms_per_prefill_token {p['layer_ms_per_prefill_token']:.5f} (per layer: "
      + ", ".join(f"{x:.5f}" for x in p["layer_ms_per_prefill_token_each"]) + f"; {n}-token prefill)")
print(f"decode_step_ms {p['decode_step_ms']:.3f} (min {p['decode_step_ms_min']:.3f}, max {p['decode_step_ms_max']:.3f}; "
      f"{layers} layers; per layer: " + ", ".join(f"{x:.3f}" for x in per_layer_decode) + ")")
with open(os.path.join(out, "bench.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
PY
rm -rf "$work/model"
tar czf "$final/transformers.tgz" -C "$out" .
stamp done
