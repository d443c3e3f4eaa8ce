#!/usr/bin/env bash
# The engine inside a real PyTorch forward pass on the device machine's GPU
# (docs/gpu.md): crates/engram-py/examples/torch_host.py under its four
# schedules, for the `mac` and `flash` layer profiles, in the layer and the
# chunk sweep (each against the prefill floor on the GPU's own times),
# then the replay bench's `ds4` / `ds4-linux` / `overlap` on the
# same prompt with the GPU's measured per-layer times as its compute model.
#
#   scripts/device-gpu.sh ENGRAM_BIN WHEEL PROMPT
#
# ENGRAM_BIN: a stripped release `engram`; WHEEL: the abi3 wheel
# (`maturin build --release` in crates/engram-py); PROMPT: a text file of at
# least 9K tokens (e.g. code-python.txt of scripts/corpus.py). Writes JSON
# documents and logs to $OUT. Needs ~24 GB under $WORK for a --scale 8 model,
# deleted at the end unless KEEP_MODEL is set. PROFILES (mac flash), SWEEPS
# (layer chunk), REPEAT (1), BENCH (1: the replay bench after each profile;
# its compute model is COMPUTE, or else read from this run's layer-sweep
# JSON), BENCH_SWEEPS (layer chunk), PREFILL, DECODE, HOST_ARGS (more
# torch_host options, e.g. --ffn to skip the mac profile's calibration).
set -euo pipefail

bin=${1:?usage: device-gpu.sh ENGRAM_BIN WHEEL PROMPT}
wheel=${2:?usage: device-gpu.sh ENGRAM_BIN WHEEL PROMPT}
prompt=${3:?usage: device-gpu.sh ENGRAM_BIN WHEEL PROMPT}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-gpu}
scale=${SCALE:-8}
prefill=${PREFILL:-8192}
decode=${DECODE:-500}
profiles=${PROFILES:-mac flash}
repeat=${REPEAT:-1}
sweeps=${SWEEPS:-layer chunk}
bench=${BENCH:-1}
bench_sweeps=${BENCH_SWEEPS:-layer chunk}
here=$(cd "$(dirname "$0")/.." && pwd)
host="$here/crates/engram-py/examples/torch_host.py"

started=$(date +%s)
failed=0
stamp() { echo "device-gpu: $(( $(date +%s) - started )) s: $*" >&2; }

python3 -m pip install -q --no-index --no-deps --target "$work/site" "$wheel"
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c 'import engram, torch; print("engram", engram.__file__, "torch", torch.__version__, torch.cuda.get_device_name())' >&2
{ nproc; uname -a; nvidia-smi -L; lsblk -d -o NAME,MODEL,SIZE,ROTA 2>/dev/null || true; } > "$out/machine.txt"

model="$work/s$scale/model.gguf"
if [ ! -f "$model" ]; then
    stamp "synthesizing the --scale $scale model"
    "$bin" synth --preset deepseek-v4.1-flash --scale "$scale" --out "$work/s$scale" >&2
fi
stamp "model ready"
# The device's random 4 KiB read rate (the replay bench's probe, cached per
# file and machine): the hosts' summaries give the prefill floor with it.
iops=$("$bin" bench --model "$model" --prompt "$prompt" --prefill 512 --decode 0 \
    --schedule overlap --repeat 1 --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["device"]["iops"])')
stamp "device: $iops random reads/s"

for profile in $profiles; do
    for sweep in $sweeps; do
        steps=$decode
        [ "$sweep" = chunk ] && steps=0
        stamp "torch_host --profile $profile --sweep $sweep"
        python3 "$host" --model "$model" --prompt "$prompt" --profile "$profile" \
            --sweep "$sweep" --prefill "$prefill" --decode "$steps" --cold \
            --repeat "$repeat" --device-iops "$iops" ${HOST_ARGS:-} --json "$out/host-$profile-$sweep.json" \
            > "$out/host-$profile-$sweep.log" 2>&1 || { echo "device-gpu: torch_host failed" >&2; failed=1; }
        tail -n 6 "$out/host-$profile-$sweep.log" >&2
    done
    [ "$bench" = 1 ] || continue
    # The replay bench with the compute this GPU measured (resident rows,
    # layer sweep), so its ds4 schedules meet the same compute timeline.
    compute=${COMPUTE:-}
    [ -n "$compute" ] || compute=$(python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
p = next(r for r in doc["summary"] if r["schedule"] == "compute_profile")
print("gpu:custom:%.3f,%.3f,%d" % (p["prefill_us_per_token_layer"], p["decode_us_per_layer"], p["layers"]))
' "$out/host-$profile-layer.json")
    for sweep in $bench_sweeps; do
        stamp "bench --compute $compute --sweep $sweep"
        "$bin" bench --model "$model" --prompt "$prompt" --prefill "$prefill" --decode 0 \
            --sweep "$sweep" --compute "$compute" --schedule ds4,ds4-linux,overlap --cold \
            --repeat "$repeat" --json > "$out/bench-$profile-$sweep.json"
    done
done
stamp "done"

if [ -z "${KEEP_MODEL:-}" ]; then
    rm -rf "$work/s$scale"
fi
exit "$failed"
