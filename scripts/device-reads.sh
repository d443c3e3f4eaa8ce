#!/usr/bin/env bash
# Where the read rate goes, on the device machine: fio's yardsticks and the
# engine's `iobench` interleaved over ROUNDS rounds on one table's byte
# range, each engine run in every read order (`--read-order`, which goes
# first alternating by round) and against a device probe measured just
# before it (`--device-fresh`: the device's rate drifts between runs), with
# the CPU each spends a read; then the bench's 8K prefill against a floor
# probed just before each run (DeepSeek layer and chunk sweeps, the
# Qwen4-Exp layer sweep); FLOOR_EXTRA=1 adds the DeepSeek sweeps pinned to
# 2 cores (`--cores 2`), a 64K layer sweep and the Qwen4-Exp sweep direct
# and direct on the pread pool. BASE_BIN, an earlier build, runs each bench
# run again right after ENGRAM_BIN's (its runs named NAME-base).
# docs/log/2026-12-03-read-order.md and docs/log/2026-12-04-floor.md hold
# runs of it.
#
#   OUT=DIR scripts/device-reads.sh ENGRAM_BIN [FIO_BIN]
#
# FIO_BIN defaults to the fio on PATH (fio is skipped, and said so, if
# there is none). ROUNDS (3); ORDERS ("sorted spread"); SCALE (8) sizes the
# DeepSeek model; FIO_SECONDS (5) each fio run; PROBE_SECONDS (2) each
# probe; FIO_SWEEP=1 adds, in the first round, fio's io_uring at depths 32
# and 128 and 8 and 16 KiB reads. PHASES ("reads floor") picks the phases:
# `reads` (fio and iobench), `floor` (the bench against the floor);
# FLOOR_MODELS ("deepseek qwen") the models the floor phase runs.
# Results: $OUT/reads.tgz, written again after each phase, holding
# summary.txt (a line per run, then medians and spreads over the rounds)
# and every run's JSON. About 6 minutes on 16 cores.
set -euo pipefail
bin=${1:?usage: device-reads.sh ENGRAM_BIN [FIO_BIN]}
fio=${2:-$(command -v fio || true)}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-reads}
scale=${SCALE:-8}
rounds=${ROUNDS:-3}
orders=${ORDERS:-sorted spread}
fio_seconds=${FIO_SECONDS:-5}
probe=(--device-fresh --device-seconds "${PROBE_SECONDS:-2}")
phases=" ${PHASES:-reads floor} "
floor_extra=${FLOOR_EXTRA:-0}
floor_models=" ${FLOOR_MODELS:-deepseek qwen} "
[ -x "$bin" ] || { echo "device-reads: $bin is not an executable" >&2; exit 2; }
[ -z "${BASE_BIN:-}" ] || [ -x "$BASE_BIN" ] || { echo "device-reads: BASE_BIN $BASE_BIN is not an executable" >&2; exit 2; }
[ -d crates ] || { echo "device-reads: run it from the repository root" >&2; exit 2; }
res="$out/reads"
mkdir -p "$res" "$work"
export XDG_CACHE_HOME="$work/cache"
started=$(date +%s)
stamp() { echo "device-reads: $(( $(date +%s) - started )) s: $*" | tee -a "$res/times.txt" >&2; }
pack() { tar -C "$out" -czf "$out/reads.tgz.part" reads && mv "$out/reads.tgz.part" "$out/reads.tgz"; }
timed=()
[ -x /usr/bin/time ] && timed=(/usr/bin/time -v)

{
    nproc; uname -a
    for f in nr_requests max_sectors_kb scheduler rotational read_ahead_kb; do
        echo "vda $f: $(cat /sys/block/vda/queue/$f 2>/dev/null || echo '?')"
    done
    echo "vda hardware queues: $(ls /sys/block/vda/mq 2>/dev/null | wc -l)"
    echo "filesystem of $work: $(df -T "$work" 2>/dev/null | tail -1)"
} > "$res/machine.txt" 2>&1

prompt="$work/prompt.txt"
find crates -name '*.rs' | sort | xargs cat > "$prompt"
model="$work/s$scale/model.gguf"
stamp "synth deepseek-v4.1-flash --scale $scale"
[ -f "$model" ] || "$bin" synth --preset deepseek-v4.1-flash --scale "$scale" --out "$work/s$scale" > /dev/null
"$bin" inspect "$model" --json > "$res/inspect.json"
# Table 0's byte range, whole 4 KiB pages (direct reads are aligned).
read -r t0_offset t0_size < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["tables"][0]
start = t["offset"] // 4096 * 4096
end = -(-(t["offset"] + t["rows"] * t["row_bytes"]) // 4096) * 4096
print(start, end - start)' "$res/inspect.json")
evict() { "$bin" iobench --model "$model" --cold --singles 1 --batches 1 --repeats 1 --no-floor --json >/dev/null 2>&1 || true; }

# fio NAME ROUND ARGS...: one fio run on table 0, its IOPS and CPU a read.
run_fio() {
    local name=$1 round=$2; shift 2
    evict
    stamp "fio $name, round $round"
    local file="$res/fio-$name-$round"
    "${timed[@]}" "$fio" --name=r --filename="$model" --offset="$t0_offset" --size="$t0_size" \
        --rw=randread --runtime="$fio_seconds" --time_based --output-format=json "$@" \
        > "$file.json" 2> "$file.err" || { stamp "fio $name failed"; return; }
    python3 -c '
import json, re, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
r = j["read"]
err = open(sys.argv[2]).read()
cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", err))
cpu_line = " cpu_us_per_read %.1f" % (cpu * 1e6 / max(r["total_ios"], 1)) if cpu else ""
print("fio", sys.argv[3], "round", sys.argv[4], "iops %.0f" % r["iops"],
      "mean_latency_us %.0f" % (r["lat_ns"]["mean"] / 1e3),
      "batch24_us %.0f" % (24e6 / max(r["iops"], 1)) + cpu_line)
' "$file.json" "$file.err" "$name" "$round" >> "$res/summary.txt"
}

# iobench NAME ROUND ARGS...: the engine's prefill batch and decode batch.
run_iobench() {
    local name=$1 round=$2; shift 2
    stamp "iobench $name, round $round"
    local file="$res/io-$name-$round"
    "${timed[@]}" "$bin" iobench --model "$model" --cold --repeats 2 --singles 100 --batches 300 \
        --text "$prompt" --json "${probe[@]}" "$@" > "$file.json" 2> "$file.err"
    python3 -c '
import json, re, sys
doc = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
switches = re.findall(r"(Voluntary|Involuntary) context switches: (\d+)", err)
p = doc["prefill_batch"]
probe = (doc.get("device") or {}).get("iops") or 0
print("iobench", sys.argv[3], "round", sys.argv[4], "reads_per_s %.0f" % p["reads_per_s"],
      "of_probe %.3f" % (p["reads_per_s"] / probe if probe else 0),
      "in_flight %.1f" % p["mean_in_flight"], "cpu_us_per_read %.1f" % p["cpu_us_per_read"],
      "decode24_p50_us %.0f" % doc["decode_batch"]["p50_us"],
      "probe %.0f" % probe,
      " ".join("%s_switches %s" % s for s in switches))
' "$file.json" "$file.err" "$name" "$round" >> "$res/summary.txt"
}

for round in $(seq 1 "$rounds"); do
    [[ $phases == *" reads "* ]] || break
    if [ -n "$fio" ]; then
        uring=(--ioengine=io_uring)
        run_fio direct-4k-psync64 "$round" --ioengine=psync --bs=4k --direct=1 --numjobs=64 --group_reporting
        run_fio direct-4k-q64 "$round" "${uring[@]}" --bs=4k --direct=1 --iodepth=64
        run_fio buffered-4k-b24 "$round" "${uring[@]}" --bs=4k --direct=0 --iodepth=24 \
            --iodepth_batch_submit=24 --iodepth_batch_complete_min=24
        run_fio direct-4k-b24 "$round" "${uring[@]}" --bs=4k --direct=1 --iodepth=24 \
            --iodepth_batch_submit=24 --iodepth_batch_complete_min=24
        if [ "$round" = 1 ] && [ "${FIO_SWEEP:-0}" = 1 ]; then
            run_fio buffered-4k-psync64 "$round" --ioengine=psync --bs=4k --direct=0 --numjobs=64 --group_reporting
            run_fio direct-4k-q32 "$round" "${uring[@]}" --bs=4k --direct=1 --iodepth=32
            run_fio direct-4k-q128 "$round" "${uring[@]}" --bs=4k --direct=1 --iodepth=128
            run_fio direct-8k-q64 "$round" "${uring[@]}" --bs=8k --direct=1 --iodepth=64
            run_fio direct-16k-q64 "$round" "${uring[@]}" --bs=16k --direct=1 --iodepth=64
        fi
    elif [ "$round" = 1 ]; then
        echo "fio: absent" >> "$res/machine.txt"
        stamp "fio absent: iobench only"
    fi
    # Each pair of orders back to back, the first alternating by round, so
    # a drift within the round does not favour either.
    ordered=$orders
    [ $((round % 2)) = 0 ] && ordered=$(echo $orders | tr ' ' '\n' | tac | tr '\n' ' ')
    for run in "psync-direct --backend psync --direct" "psync-buffered --backend psync" \
        "uring-direct --backend uring --direct"; do
        set -- $run
        name=$1; shift
        for order in $ordered; do
            run_iobench "$name-$order" "$round" "$@" --read-order "$order"
        done
    done
    pack
done
[ -n "$fio" ] && echo "fio: $("$fio" --version)" >> "$res/machine.txt"

[[ $phases == *" floor "* ]] || { pack; exit 0; }
# bench NAME ROUND PREFILL ARGS...: one cold prefill of `overlap`, by each
# build.
bench() {
    local name=$1 round=$2 tokens=$3; shift 3
    local build exe file
    for build in new ${BASE_BIN:+base}; do
        exe=$bin; file=$name
        [ "$build" = base ] && { exe=$BASE_BIN; file=$name-base; }
        stamp "bench $file, round $round"
        "$exe" bench --prompt "$prompt" --cold --json --prefill "$tokens" --decode 0 --repeat 1 \
            --schedule overlap "${probe[@]}" "$@" > "$res/bench-$file-$round.json" 2> "$res/bench-$file-$round.err"
    done
}
# The bench's prefill in the default read order, each run against a floor
# probed just before it (under `--cores 2` the probe is pinned too).
for round in $(seq 1 "$rounds"); do
    [[ $floor_models == *" deepseek "* ]] || break
    common=(--model "$model" --compute gpu:flash)
    bench layer "$round" 8192 "${common[@]}" --sweep layer
    bench chunk "$round" 8192 "${common[@]}" --sweep chunk
    if [ "$floor_extra" = 1 ]; then
        bench layer2c "$round" 8192 "${common[@]}" --sweep layer --cores 2
        bench chunk2c "$round" 8192 "${common[@]}" --sweep chunk --cores 2
        bench layer64k "$round" 65536 "${common[@]}" --sweep layer
    fi
    pack
done
rm -rf "$work/s$scale"
stamp "synth qwen3.8-flash-next --scale 32"
"$bin" synth --preset qwen3.8-flash-next --scale 32 --out "$work/q32" --quiet > /dev/null
for round in $(seq 1 "$rounds"); do
    [[ $floor_models == *" qwen "* ]] || break
    qwen=(--model "$work/q32/model.gguf" --compute gpu:m4-max-qwen38 --sweep layer)
    bench qwen "$round" 8192 "${qwen[@]}"
    if [ "$floor_extra" = 1 ]; then
        bench qwendirect "$round" 8192 "${qwen[@]}" --direct
        bench qwendirectpsync "$round" 8192 "${qwen[@]}" --direct --backend psync
    fi
    pack
done
rm -rf "$work/q32"
stamp "done"
python3 - "$res" >> "$res/summary.txt" <<'PY'
import collections, glob, json, os, re, statistics, sys
res = sys.argv[1]
# Each bench run's stall against the floor and its reads in flight.
rows = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(res, "bench-*.json"))):
    name = re.sub(r"-\d+$", "", os.path.basename(f)[len("bench-"):-len(".json")])
    for s in json.load(open(f))["prompts"][0]["schedules"]:
        fl = s.get("floor") or {}
        stall = s["prefill"]["stall_seconds"]["median"]
        floor = fl.get("prefill_stall_seconds", {}).get("median") or 0.0
        io = s.get("io") or {}
        figure = lambda key: (io.get(key) or {}).get("median")
        probe = (json.load(open(f)).get("device") or {}).get("iops")
        print("bench", os.path.basename(f), "stall %.3f s" % stall, "floor %.3f s" % floor,
              "probe %s" % probe,
              "in_flight %s" % figure("prefill_mean_in_flight"),
              "within_batches %s" % figure("prefill_batch_in_flight"),
              "batch_seconds %s" % figure("prefill_batch_seconds"),
              "reads %s" % figure("reads"))
        if floor:
            rows["bench %s stall_over_floor" % name].append(stall / floor)
        rows["bench %s stall_s" % name].append(stall)
# Medians and spreads of the per-run lines above, by run name and figure.
for line in open(os.path.join(res, "summary.txt")):
    words = line.split()
    if len(words) < 4 or words[0] not in ("fio", "iobench") or words[2] != "round":
        continue
    pairs = words[4:]
    for key, value in zip(pairs[::2], pairs[1::2]):
        try:
            rows["%s %s %s" % (words[0], words[1], key)].append(float(value))
        except ValueError:
            pass
print("median (min-max) over the rounds:")
for key in sorted(rows):
    v = rows[key]
    print("  %s: %.4g (%.4g-%.4g, n %d)" % (key, statistics.median(v), min(v), max(v), len(v)))
PY
cat "$res/summary.txt" >&2
pack
