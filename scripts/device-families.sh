#!/usr/bin/env bash
# Both model families on the device machine, in one call:
#   1. DeepSeek V4.1 non-regression: the same --scale 32 synthetic model
#      benchmarked by two builds (BASE_BIN, then NEW_BIN, interleaved, three
#      rounds), cold, 8,192-token layer sweep + 300 decode steps, schedules
#      overlap and full;
#   2. Qwen4-Exp: synthetic Qwen3.8-Flash-Next tables at --scale 32 (bf16
#      checkpoint, MLX 4-bit) benchmarked by NEW_BIN under sync, overlap
#      and full, cold, three repeats;
#   3. engram.torch on CUDA: the wheel installed into a scratch directory
#      and the torch tests run (when WHEEL is given).
#
#   scripts/device-families.sh NEW_BIN BASE_BIN [WHEEL]
#
# The prompt is the repository's docs (about 60K tokens with the vendored
# DeepSeek tokenizer; Qwen4-Exp models take the same token ids, all inside
# their vocabulary, as a stand-in for Qwen's own tokenizer). The JSON
# documents go to $OUT/families.tgz (the device tool returns 8 files at most).
set -euo pipefail
new=${1:?usage: device-families.sh NEW_BIN BASE_BIN [WHEEL]}
base=${2:?usage: device-families.sh NEW_BIN BASE_BIN [WHEEL]}
wheel=${3:-}
final=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-families}
out=$work/results
compute=${COMPUTE:-gpu:custom:4.225,108.6}
rounds=${ROUNDS:-3}
prefill=${PREFILL:-8192}
decode=${DECODE:-300}
scale=${SCALE:-32}
rm -rf "$out"
mkdir -p "$out" "$work"
export XDG_CACHE_HOME="$work/cache"
started=$(date +%s)
stamp() { echo "device-families: $(( $(date +%s) - started )) s: $*" >&2; }

cat docs/*.md docs/log/*.md > "$work/prompt.txt"
common=(--prompt "$work/prompt.txt" --prefill "$prefill" --decode "$decode" --cold
        --compute "$compute" --json)

stamp "synth deepseek-v4.1-flash --scale $scale"
"$new" synth --preset deepseek-v4.1-flash --scale "$scale" --out "$work/v41" --quiet
for r in $(seq "$rounds"); do
    for which in base new; do
        bin=$base; [ "$which" = new ] && bin=$new
        stamp "v41 round $r $which"
        "$bin" bench --model "$work/v41/model.gguf" "${common[@]}" --schedule overlap,full \
            > "$out/v41-$which-$r.json"
    done
done
rm -rf "$work/v41"

for fmt in hf mlx; do
    stamp "synth qwen3.8-flash-next --scale $scale --format $fmt"
    "$new" synth --preset qwen3.8-flash-next --scale "$scale" --format "$fmt" --out "$work/q-$fmt" --quiet
    stamp "qwen $fmt bench"
    "$new" bench --model "$work/q-$fmt" "${common[@]}" --schedule sync,overlap,full \
        --repeat "$rounds" > "$out/qwen-$fmt.json"
    "$new" iobench --model "$work/q-$fmt" --cold --json > "$out/qwen-$fmt-iobench.json" || true
    rm -rf "$work/q-$fmt"
done

if [ -n "$wheel" ]; then
    stamp "engram.torch on CUDA"
    python3 -m pip install -q --no-index --no-deps --target "$work/site" "$wheel"
    (cd crates/engram-py/tests && PYTHONPATH="$work/site" python3 -m pytest -q \
        test_torch.py test_torch_import.py test_torch_host.py 2>&1 | tail -30) | tee "$out/torch-tests.txt"
fi
tar czf "$final/families.tgz" -C "$out" .
stamp done
