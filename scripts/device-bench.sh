#!/usr/bin/env bash
# The many-core picture: the corpus bench on a 16-core NVMe machine, pinned
# to 2 cores and to 16, three repeats each, JSON documents to $OUT.
#
#   scripts/device-bench.sh ENGRAM_BIN CORPUS_DIR
#
# ENGRAM_BIN: a stripped release `engram` (cargo build --release -p engram-cli;
# strip target/release/engram). CORPUS_DIR: from scripts/corpus.py (2.4 MB).
# Needs about 24 GB free under $WORK (default /tmp/engram-device) for a
# --scale 8 model (two tables of 11.8 GiB), which it deletes at the end.
#
# What runs, for --cores 2 and then --cores 16, each with --repeat 3
# (schedules interleaved, each run cold):
#   layer8k  8,192-token layer-sweep prefill + 1,000 decode steps
#   chunk8k  8,192-token chunk-sweep prefill
#   layer64k 65,536-token layer-sweep prefill
# on the prompts named by PROMPTS, under the schedules of SCHEDULES.
#
# The 9-minute budget decides the compute stand-in: at m4-max-ds4 speed one
# 64K layer sweep alone computes for 190 s, and these are 18 runs per
# schedule and prompt. COMPUTE defaults to gpu:custom:4.225,108.6: prefill
# 16x and decode 8x faster than ds4 on an M4 Max (67.6 us per token per
# layer and 869 us per layer), a GPU far faster than the Mac, which asks
# more of the readers. With the defaults (3 schedules, 1 prompt) the
# compute alone sums to 176 s per --cores setting (layer8k 9 x 6.16 s,
# chunk8k 9 x 1.49 s, layer64k 9 x 11.9 s), plus the stalls, the synth (30 s
# here at 870 MB/s) and a 3 s device measurement: an estimate of 7 minutes,
# not yet measured on the device. The script prints the time of every part.
# A dry run here: SCALE=4096 SHORT_PREFILL=600 LONG_PREFILL=1200 DECODE=10
# REPEAT=2 CORES="1 2" COMPUTE=gpu:custom:1,20 took 19 s.
set -euo pipefail

bin=${1:?usage: device-bench.sh ENGRAM_BIN CORPUS_DIR}
corpus_src=${2:?usage: device-bench.sh ENGRAM_BIN CORPUS_DIR}
out=${OUT:?set OUT to the directory the JSON documents go to}
work=${WORK:-/tmp/engram-device}
compute=${COMPUTE:-gpu:custom:4.225,108.6}
schedules=${SCHEDULES:-ds4,ds4-linux,overlap}
prompts=${PROMPTS:-code-python.txt}
repeat=${REPEAT:-3}
cores_list=${CORES:-2 16}
# SCALE and the sizes only for a quick dry run of the script elsewhere.
scale=${SCALE:-8}
short=${SHORT_PREFILL:-8192}
long=${LONG_PREFILL:-65536}
decode=${DECODE:-1000}

[ -x "$bin" ] || { echo "device-bench: $bin is not an executable" >&2; exit 2; }
[ -d "$corpus_src" ] || { echo "device-bench: $corpus_src is not a directory" >&2; exit 2; }
mkdir -p "$out" "$work/corpus"
# The device measurement is cached next to the model, not in $HOME.
export XDG_CACHE_HOME="$work/cache"

started=$(date +%s)
stamp() { echo "device-bench: $(( $(date +%s) - started )) s: $*" >&2; }

rm -f "$work/corpus/"*
for p in ${prompts//,/ }; do
    [ -f "$corpus_src/$p" ] || { echo "device-bench: $corpus_src/$p missing (PROMPTS)" >&2; exit 2; }
    cp "$corpus_src/$p" "$work/corpus/"
done

{ nproc; uname -a; lsblk -d -o NAME,MODEL,SIZE,ROTA 2>/dev/null || true; } > "$out/machine.txt"

model="$work/s$scale/model.gguf"
if [ ! -f "$model" ]; then
    stamp "synthesizing the --scale $scale model"
    "$bin" synth --preset deepseek-v4.1-flash --scale "$scale" --out "$work/s$scale" >&2
fi
stamp "model ready"

run() {
    local name=$1 cores=$2; shift 2
    stamp "$name --cores $cores"
    "$bin" bench --model "$model" --corpus "$work/corpus" --compute "$compute" \
        --schedule "$schedules" --repeat "$repeat" --cores "$cores" --cold --json "$@" \
        > "$out/$name-cores$cores.json"
}

for cores in $cores_list; do
    run layer8k "$cores" --prefill "$short" --decode "$decode" --sweep layer
    run chunk8k "$cores" --prefill "$short" --decode 0 --sweep chunk
    run layer64k "$cores" --prefill "$long" --decode 0 --sweep layer
done
stamp "done"

if [ -z "${KEEP_MODEL:-}" ]; then
    rm -rf "$work/s$scale"
fi
