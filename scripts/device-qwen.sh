#!/usr/bin/env bash
# Qwen4-Exp against its runtimes' read paths on the device machine's 16
# cores: a --scale 32 Qwen3.8-Flash-Next table (bf16 GGUF, 10.0M
# rows, 3.2 GB), an 8,192-token layer sweep then 500 decode steps, cold,
# the Mac compute stand-in, REPEAT interleaved repeats (the targets of
# docs/status.md, "Qwen4-Exp against its runtimes' read paths").
#
#   OUT=DIR scripts/device-qwen.sh ENGRAM_BIN
#
# SCHEDULES picks the schedules (default: the peers best in prefill or
# decode on the 2-core runs, and the engine's two); COMPUTE, PREFILL,
# DECODE, REPEAT and SCALE as named. The prompt is the repository's Rust
# sources (token ids of the vendored DeepSeek tokenizer, all inside Qwen's
# vocabulary: a stand-in for Qwen's own tokenizer). Results:
# $OUT/qwen.json and $OUT/qwen-summary.txt.
set -euo pipefail
bin=${1:?usage: device-qwen.sh ENGRAM_BIN}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-qwen}
schedules=${SCHEDULES:-llama-readahead,omlx,ds4-qwen,freetoken,overlap,full}
compute=${COMPUTE:-gpu:m4-max-qwen38}
prefill=${PREFILL:-8192}
decode=${DECODE:-500}
repeat=${REPEAT:-3}
scale=${SCALE:-32}
[ -x "$bin" ] || { echo "device-qwen: $bin is not an executable" >&2; exit 2; }
[ -d crates ] || { echo "device-qwen: run it from the repository root" >&2; exit 2; }
mkdir -p "$out" "$work"
export XDG_CACHE_HOME="$work/cache"
started=$(date +%s)
stamp() { echo "device-qwen: $(( $(date +%s) - started )) s: $*" >&2; }

find crates -name '*.rs' | sort | xargs cat > "$work/prompt.txt"
stamp "synth qwen3.8-flash-next --scale $scale"
"$bin" synth --preset qwen3.8-flash-next --scale "$scale" --out "$work/q$scale" --quiet
stamp "bench $schedules"
"$bin" bench --model "$work/q$scale/model.gguf" --prompt "$work/prompt.txt" --prefill "$prefill" \
    --decode "$decode" --sweep layer --cold --repeat "$repeat" --compute "$compute" \
    --schedule "$schedules" --json > "$out/qwen.json"
stamp "done"
rm -rf "$work/q$scale"

python3 - "$out/qwen.json" > "$out/qwen-summary.txt" <<'EOF' || true
import json, sys
doc = json.load(open(sys.argv[1]))
med = lambda v: v["median"] if isinstance(v, dict) else v
rng = lambda v: "(%.3f-%.3f)" % (v["min"], v["max"]) if isinstance(v, dict) else ""
for s in doc["prompts"][0]["schedules"]:
    pf, dc, fl = s["prefill"], s["decode"], s.get("floor") or {}
    print(s["name"],
          "prefill stall %.3f s %s" % (med(pf["stall_seconds"]), rng(pf["stall_seconds"])),
          "over floor %.2f" % med(fl["stall_over_floor"]) if fl else "",
          "decode mean %.0f us %s" % (med(dc["stall_us"]["mean"]), rng(dc["stall_us"]["mean"])),
          "p99 %.0f us" % med(dc["stall_us"]["p99"]),
          "step_begin mean %.1f p50 %.1f us" % (med(dc["step_begin_us"]["mean"]),
                                                 med(dc["step_begin_us"]["p50"])),
          "tok/s %.2f" % med(dc["tokens_per_s"]))
EOF
cat "$out/qwen-summary.txt" >&2
