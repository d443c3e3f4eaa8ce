#!/usr/bin/env bash
# Decode on a fast step, both families, on the device machine: the replay
# bench's `full` against compute-only and the peers, the build under test
# and (optionally) a base build interleaved on the same machine; then a
# decode batch of 24 after a 13.3 ms idle gap against one back to back.
# docs/log/2026-12-03-device-reads.md holds a run of it.
#
#   OUT=DIR scripts/device-decode.sh ENGRAM_BIN [BASE_BIN]
#
# DeepSeek: a --scale 8 model, `gpu:flash` (13 ms steps), 2,048-token
# prefill, DS_DECODE (300) steps, `ds4-linux,overlap,full`, `--repeat 2`.
# Qwen4-Exp: a --scale 32 table, `gpu:m4-max-qwen38`, 2,048-token prefill,
# QWEN_DECODE (500) steps, `freetoken,ds4-qwen,overlap,full`. ROUNDS (2)
# invocations of each, the builds alternating. All cold; the prompt is the
# repository's Rust sources. Results: $OUT/decode.tgz (ds-BUILD-ROUND.json,
# qwen-BUILD-ROUND.json, gap.json, nogap.json, summary.txt). About 6.5
# minutes on 16 cores with a base build, half without.
set -euo pipefail
new=${1:?usage: device-decode.sh ENGRAM_BIN [BASE_BIN]}
base=${2:-}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-decode}
rounds=${ROUNDS:-2}
ds_decode=${DS_DECODE:-300}
qwen_decode=${QWEN_DECODE:-500}
for b in "$new" $base; do
    [ -x "$b" ] || { echo "device-decode: $b is not an executable" >&2; exit 2; }
done
[ -d crates ] || { echo "device-decode: run it from the repository root" >&2; exit 2; }
res="$out/decode"
mkdir -p "$res" "$work"
export XDG_CACHE_HOME="$work/cache"
started=$(date +%s)
stamp() { echo "device-decode: $(( $(date +%s) - started )) s: $*" | tee -a "$res/times.txt" >&2; }

{
    nproc; uname -a
    echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')"
    # What a thread-CPU clock read costs here against a monotonic one.
    python3 -c '
import time
def per_call(f, n=200000):
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6
print("time.thread_time %.3f us, time.perf_counter %.3f us" % (per_call(time.thread_time), per_call(time.perf_counter)))'
} > "$res/machine.txt" 2>&1

prompt="$work/prompt.txt"
find crates -name '*.rs' | sort | xargs cat > "$prompt"
stamp "synth"
[ -f "$work/s8/model.gguf" ] || "$new" synth --preset deepseek-v4.1-flash --scale 8 --out "$work/s8" > /dev/null
[ -f "$work/q32/model.gguf" ] || "$new" synth --preset qwen3.8-flash-next --scale 32 --out "$work/q32" --quiet > /dev/null

builds=(new); [ -n "$base" ] && builds+=(base)
for round in $(seq 1 "$rounds"); do
    for build in "${builds[@]}"; do
        bin=$new; [ "$build" = base ] && bin=$base
        stamp "deepseek $build $round"
        "$bin" bench --model "$work/s8/model.gguf" --prompt "$prompt" --compute gpu:flash --cold --json \
            --schedule ds4-linux,overlap,full --repeat 2 --prefill 2048 --decode "$ds_decode" \
            > "$res/ds-$build-$round.json"
        stamp "qwen $build $round"
        "$bin" bench --model "$work/q32/model.gguf" --prompt "$prompt" --compute gpu:m4-max-qwen38 --cold --json \
            --schedule freetoken,ds4-qwen,overlap,full --repeat 1 --prefill 2048 --decode "$qwen_decode" \
            > "$res/qwen-$build-$round.json"
    done
done
stamp "decode batches after a 13.3 ms gap, and back to back"
"$new" iobench --model "$work/s8/model.gguf" --cold --singles 300 --batches 300 --repeats 1 --gap-us 13300 --json > "$res/gap.json"
"$new" iobench --model "$work/s8/model.gguf" --cold --singles 300 --batches 300 --repeats 1 --json > "$res/nogap.json"
stamp "done"

# Per run and schedule: decode tok/s over the compute-only rate, stalls.
python3 - "$res" > "$res/summary.txt" <<'PY' || true
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*-*-*.json"))):
    doc = json.load(open(f))
    for s in doc["prompts"][0]["schedules"]:
        d = s["decode"]
        rate = d["tokens"]["median"] / d["compute_seconds"]["median"]
        print(os.path.basename(f), s["name"],
              "of compute-only %.4f (%.4f-%.4f)" % tuple(d["tokens_per_s"][k] / rate for k in ("median", "min", "max")),
              "stall mean %.1f us p50 %.1f us p99 %.1f us" % tuple(d["stall_us"][k]["median"] for k in ("mean", "p50", "p99")),
              # The forward thread's time in the hint call (builds that report it).
              "hint call p50 %.1f us p99 %.1f us" % tuple(d["hint_call_us"][k]["median"] for k in ("p50", "p99"))
              if "hint_call_us" in d else "")
for name in ("gap.json", "nogap.json"):
    doc = json.load(open(os.path.join(sys.argv[1], name)))
    print(name, "single p50 %.0f us" % doc["single"]["p50_us"], "batch of 24 p50 %.0f us p99 %.0f us"
          % (doc["decode_batch"]["p50_us"], doc["decode_batch"]["p99_us"]))
PY
cat "$res/summary.txt" >&2
tar -C "$out" -czf "$out/decode.tgz" decode
