#!/usr/bin/env bash
# Which backend reads direct I/O faster at each core count: `engram
# iobench` with the pread pool (`psync`) and with io_uring (`uring`, what
# `auto` picks for direct I/O), direct, cold, depth 64, pinned by taskset
# to the first N CPUs, interleaved over ROUNDS rounds (the backend that goes
# first alternates by round). Reports, per core count and backend, the
# prefill batch's unique rows/s and the decode batch's p50, medians and
# spreads.
#
#   OUT=DIR scripts/device-cores.sh ENGRAM_BIN MODEL
#
# CPUS ("2 4 8 16"), ROUNDS (2), BATCHES (300). Results: $OUT/cores.tgz
# (every run's JSON and summary.txt). About 2 minutes on 16 cores.
set -euo pipefail
bin=${1:?usage: device-cores.sh ENGRAM_BIN MODEL}
model=${2:?usage: device-cores.sh ENGRAM_BIN MODEL}
out=${OUT:?set OUT to the directory the results go to}
cpus=${CPUS:-2 4 8 16}
rounds=${ROUNDS:-2}
batches=${BATCHES:-300}
res=${WORK:-/tmp/engram-cores}/results
mkdir -p "$res" "$out"
have=$(nproc)
for round in $(seq 1 "$rounds"); do
    backends="psync uring"
    [ $((round % 2)) -eq 0 ] && backends="uring psync"
    for n in $cpus; do
        [ "$n" -le "$have" ] || { echo "device-cores: $n CPUs asked, $have here" >&2; continue; }
        for backend in $backends; do
            taskset -c "0-$((n - 1))" "$bin" iobench --model "$model" --backend "$backend" \
                --direct --depth 64 --cold --repeats 1 --singles 50 --batches "$batches" \
                --no-floor --json > "$res/$n-$backend-$round.json" 2> "$res/$n-$backend-$round.log" ||
                echo "device-cores: $n $backend round $round failed" >&2
        done
    done
done
python3 - "$res" > "$res/summary.txt" <<'EOF'
import glob, json, os, statistics, sys
res = sys.argv[1]
runs = {}
for path in glob.glob(os.path.join(res, "*.json")):
    n, backend, _ = os.path.basename(path)[:-5].split("-")
    try:
        doc = json.load(open(path))
    except ValueError:
        continue
    runs.setdefault((int(n), backend), []).append(
        (doc["prefill_batch"]["unique_rows_per_s"], doc["decode_batch"]["p50_us"]))
def med(xs):
    return f"{statistics.median(xs):.6g} ({min(xs):.6g}-{max(xs):.6g})"
for (n, backend), rs in sorted(runs.items()):
    print(f"cpus {n:2} {backend:5} prefill unique rows/s {med([r[0] for r in rs])} "
          f"decode batch p50 us {med([r[1] for r in rs])}")
EOF
cat "$res/summary.txt" >&2
tar -C "$res" -czf "$out/cores.tgz" .
