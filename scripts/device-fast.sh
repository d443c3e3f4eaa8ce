#!/usr/bin/env bash
# Fast hosts on the device machine: reads against fio, prefill at an H200's
# speed with narrow and host-wide waits, decode on a 13 ms step.
#
#   scripts/device-fast.sh ENGRAM_BIN
#
# Run from the repository root (the prompt is built from the repo's own Rust
# sources). ENGRAM_BIN: a stripped release `engram` (cargo build --release
# -p engram-cli; strip target/release/engram). Needs about 24 GB free under
# $WORK (default /tmp/engram-fast) for a --scale 8 model (two tables of
# 11.8 GiB), deleted at the end unless KEEP_MODEL is set. Results (JSON
# documents and logs) go to $OUT, packed into $OUT/fast.tgz.
#
# What runs (each bench run cold, schedules interleaved over REPEAT repeats):
#   io-*      iobench (depth 64, decode batches of 24) against fio random
#             4 KiB reads of table 0 at depth 64 and in batches of 24,
#             buffered and direct (fio skipped, and said so, if absent)
#   layer8k   8K layer sweep, --ubatch 512: sync (each table read at its
#             layer), overlap, full, 16 cores and 2
#   wide8k    the same with --wait-tokens 2048 (waits as wide as the ring)
#   chunk8k   8K chunk sweep, 16 cores and 2
#   layer64k  64K layer sweep (LONG_REPEAT repeats at 16 cores, 1 at 2)
#   wide8k-ENGRAM_*  wide8k's overlap with one batch in flight (the
#             default is two), and with read batches of 1,024 tokens
#             (16 cores)
#   decode    300 decode steps on gpu:flash (13 ms): ds4-linux (the peer:
#             both tables before the step), overlap, full
# on the gpu:flash profile (5,000 prompt tok/s: 38 ms a layer for 8K).
# Budget: compute alone is 8K 1.64 s a run (24 runs), 64K 13.1 s (6 runs),
# decode 3.9 s (9 runs): about 153 s, plus stalls, the synth and fio's 32 s;
# a dry run here (below) prints the time of every part.
# Dry run elsewhere: SCALE=4096 SHORT_PREFILL=600 LONG_PREFILL=1200 DECODE=10
# REPEAT=1 LONG_REPEAT=1 CORES="1 2" FIO_SECONDS=1 took 140 s on the 2-core VM.
set -euo pipefail

bin=${1:?usage: device-fast.sh ENGRAM_BIN}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-fast}
compute=${COMPUTE:-gpu:flash}
repeat=${REPEAT:-3}
long_repeat=${LONG_REPEAT:-2}
cores_list=${CORES:-16 2}
scale=${SCALE:-8}
short=${SHORT_PREFILL:-8192}
long=${LONG_PREFILL:-65536}
decode=${DECODE:-300}
fio_seconds=${FIO_SECONDS:-8}

[ -x "$bin" ] || { echo "device-fast: $bin is not an executable" >&2; exit 2; }
[ -d crates ] || { echo "device-fast: run it from the repository root" >&2; exit 2; }
mkdir -p "$out/fast" "$work"
res="$out/fast"
export XDG_CACHE_HOME="$work/cache"
started=$(date +%s)
stamp() { echo "device-fast: $(( $(date +%s) - started )) s: $*" | tee -a "$res/times.txt" >&2; }

{ nproc; uname -a; lsblk -d -o NAME,MODEL,SIZE,ROTA 2>/dev/null || true; } > "$res/machine.txt"

# The prompt: the repo's Rust sources, long enough for the 64K prefill.
prompt="$work/prompt.txt"
find crates -name '*.rs' | sort | xargs cat > "$prompt"

model="$work/s$scale/model.gguf"
if [ ! -f "$model" ]; then
    stamp "synthesizing the --scale $scale model"
    "$bin" synth --preset deepseek-v4.1-flash --scale "$scale" --out "$work/s$scale" >&2
fi
"$bin" inspect "$model" --json > "$res/inspect.json"
stamp "model ready"

# Table 0's byte range in the file, for fio.
read -r t0_offset t0_size < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["tables"][0]
# Whole 4 KiB pages, so direct reads are aligned.
start = t["offset"] // 4096 * 4096
end = -(-(t["offset"] + t["rows"] * t["row_bytes"]) // 4096) * 4096
print(start, end - start)' "$res/inspect.json")

evict() { "$bin" iobench --model "$model" --cold --singles 1 --batches 1 --repeats 1 --json >/dev/null 2>&1 || true; }
if command -v fio >/dev/null; then
    echo "fio: $(fio --version)" >> "$res/machine.txt"
    for mode in buffered direct; do
        d=0; [ "$mode" = direct ] && d=1
        common=(--name=r --filename="$model" --offset="$t0_offset" --size="$t0_size"
                --rw=randread --bs=4k --direct=$d --runtime="$fio_seconds"
                --time_based --output-format=json)
        evict
        stamp "fio $mode depth 64"
        fio "${common[@]}" --ioengine=io_uring --iodepth=64 > "$res/fio-$mode-d64.json" \
            2> "$res/fio-$mode-d64.err" || stamp "fio $mode depth 64 failed (see its .err)"
        evict
        stamp "fio $mode batches of 24"
        fio "${common[@]}" --ioengine=io_uring --iodepth=24 --iodepth_batch_submit=24 \
            --iodepth_batch_complete_min=24 > "$res/fio-$mode-b24.json" \
            2> "$res/fio-$mode-b24.err" || stamp "fio $mode batches of 24 failed (see its .err)"
    done
else
    echo "fio: absent (command -v fio found nothing)" >> "$res/machine.txt"
    stamp "fio absent: iobench only"
fi
for mode in buffered direct; do
    flag=(); [ "$mode" = direct ] && flag=(--direct)
    for backend in psync uring; do
        stamp "iobench $backend $mode"
        "$bin" iobench --model "$model" --backend "$backend" "${flag[@]}" --depth 64 --cold \
            --repeats 3 --text "$prompt" --json > "$res/io-$backend-$mode.json"
    done
done

bench() {
    local name=$1 cores=$2; shift 2
    stamp "$name --cores $cores"
    "$bin" bench --model "$model" --prompt "$prompt" --compute "$compute" \
        --cores "$cores" --cold --json "$@" > "$res/$name-cores$cores.json"
}

# Decode first: the parts after it are the longest.
bench decode "${cores_list%% *}" --schedule ds4-linux,overlap,full --repeat "$repeat" \
    --prefill 2048 --decode "$decode"
for cores in $cores_list; do
    long_r=$long_repeat
    [ "$cores" != "${cores_list%% *}" ] && long_r=1
    bench layer8k "$cores" --schedule sync,overlap,full --repeat "$repeat" \
        --prefill "$short" --decode 0 --sweep layer
    bench wide8k "$cores" --schedule sync,overlap,full --repeat "$repeat" \
        --prefill "$short" --decode 0 --sweep layer --wait-tokens 2048
    bench chunk8k "$cores" --schedule overlap,full --repeat "$repeat" \
        --prefill "$short" --decode 0 --sweep chunk
    bench layer64k "$cores" --schedule overlap,full --repeat "$long_r" \
        --prefill "$long" --decode 0 --sweep layer
done
# A/B of the device queue between batches, wide waits, most cores: one
# batch in flight (against the default two, one per table), and read
# batches of 1,024 tokens.
many=${cores_list%% *}
for ab in ENGRAM_BATCHES_IN_FLIGHT=1 ENGRAM_READ_BATCH_TOKENS=1024; do
    stamp "wide8k $ab"
    env "$ab" "$bin" bench --model "$model" --prompt "$prompt" --compute "$compute" \
        --cores "$many" --cold --json --schedule overlap --repeat "$repeat" \
        --prefill "$short" --decode 0 --sweep layer --wait-tokens 2048 \
        > "$res/wide8k-${ab%%=*}-cores$many.json"
done
stamp "done"

# One line per run for the status page: stall/floor and decode tok/s ratios.
python3 - "$res" > "$res/summary.txt" <<'EOF' || true
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name = os.path.basename(f)
    try:
        doc = json.load(open(f))
    except Exception as e:
        print(name, "unreadable:", e)
        continue
    if name == "inspect.json":
        continue
    if name.startswith("fio-"):
        job = doc["jobs"][0]["read"]
        print(name, "iops %.0f" % job["iops"], "24 reads %.0f us" % (24e6 / max(job["iops"], 1)))
    elif name.startswith("io-"):
        print(name, json.dumps({k: doc.get(k) for k in ("decode_batch", "prefill_batch")}))
    else:
        med = lambda v: v["median"] if isinstance(v, dict) else v
        for s in doc["prompts"][0]["schedules"]:
            pf, fl, dc = s["prefill"], s.get("floor") or {}, s["decode"]
            print(name, s["name"],
                  "prefill stall %.3f s" % med(pf["stall_seconds"]),
                  "tables", ["%.3f" % med(t) for t in pf["stall_seconds_table"]],
                  "over floor", "%.2f" % med(fl["stall_over_floor"]) if fl else "-",
                  "decode tok/s %.2f" % med(dc["tokens_per_s"]) if med(dc["tokens"]) else "")
EOF
cat "$res/summary.txt" >&2

tar -C "$out" -czf "$out/fast.tgz" fast
if [ -z "${KEEP_MODEL:-}" ]; then
    rm -rf "$work/s$scale"
fi
