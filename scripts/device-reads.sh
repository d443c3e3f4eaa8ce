#!/usr/bin/env bash
# Where the read rate goes, on the device machine: fio's engines, depths and
# block sizes on one table's byte range; `engram iobench` by backend, mode
# and depth (with each run's context switches where /usr/bin/time exists);
# the bench's 8K prefill buffered against direct (DeepSeek layer and chunk
# sweeps, the Qwen4-Exp layer sweep). docs/log/2026-12-03-device-reads.md
# holds a run of it.
#
#   OUT=DIR scripts/device-reads.sh ENGRAM_BIN [FIO_BIN]
#
# FIO_BIN defaults to the fio on PATH (fio is skipped, and said so, if there
# is none). SCALE (8) sizes the DeepSeek model, FIO_SECONDS (5) each fio run.
# Results: $OUT/reads.tgz, with summary.txt (a line per fio and iobench run)
# and the bench's JSON documents. About 4 minutes on 16 cores.
set -euo pipefail
bin=${1:?usage: device-reads.sh ENGRAM_BIN [FIO_BIN]}
fio=${2:-$(command -v fio || true)}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-reads}
scale=${SCALE:-8}
fio_seconds=${FIO_SECONDS:-5}
[ -x "$bin" ] || { echo "device-reads: $bin is not an executable" >&2; exit 2; }
[ -d crates ] || { echo "device-reads: run it from the repository root" >&2; exit 2; }
res="$out/reads"
mkdir -p "$res" "$work"
export XDG_CACHE_HOME="$work/cache"
started=$(date +%s)
stamp() { echo "device-reads: $(( $(date +%s) - started )) s: $*" | tee -a "$res/times.txt" >&2; }

{
    nproc; uname -a
    for f in nr_requests max_sectors_kb scheduler rotational read_ahead_kb; do
        echo "vda $f: $(cat /sys/block/vda/queue/$f 2>/dev/null || echo '?')"
    done
    echo "vda hardware queues: $(ls /sys/block/vda/mq 2>/dev/null | wc -l)"
    echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')"
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
evict() { "$bin" iobench --model "$model" --cold --singles 1 --batches 1 --repeats 1 --json >/dev/null 2>&1 || true; }

run_fio() {
    local name=$1; shift
    evict
    stamp "fio $name"
    "$fio" --name=r --filename="$model" --offset="$t0_offset" --size="$t0_size" --rw=randread \
        --runtime="$fio_seconds" --time_based --output-format=json "$@" \
        > "$res/fio-$name.json" 2> "$res/fio-$name.err" || { stamp "fio $name failed"; return; }
    python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
r = j["read"]
print(sys.argv[2], "iops %.0f" % r["iops"], "MB/s %.0f" % (r["bw_bytes"] / 1e6),
      "mean latency %.0f us" % (r["lat_ns"]["mean"] / 1e3), "24 reads %.0f us" % (24e6 / max(r["iops"], 1)))
' "$res/fio-$name.json" "fio $name" >> "$res/summary.txt"
}
if [ -n "$fio" ]; then
    echo "fio: $("$fio" --version)" >> "$res/machine.txt"
    uring=(--ioengine=io_uring)
    run_fio direct-4k-q32 "${uring[@]}" --bs=4k --direct=1 --iodepth=32
    run_fio direct-4k-q64 "${uring[@]}" --bs=4k --direct=1 --iodepth=64
    run_fio direct-4k-q128 "${uring[@]}" --bs=4k --direct=1 --iodepth=128
    run_fio direct-8k-q64 "${uring[@]}" --bs=8k --direct=1 --iodepth=64
    run_fio direct-16k-q64 "${uring[@]}" --bs=16k --direct=1 --iodepth=64
    run_fio buffered-4k-q64 "${uring[@]}" --bs=4k --direct=0 --iodepth=64
    run_fio direct-4k-psync64 --ioengine=psync --bs=4k --direct=1 --numjobs=64 --group_reporting
    run_fio buffered-4k-psync64 --ioengine=psync --bs=4k --direct=0 --numjobs=64 --group_reporting
    run_fio buffered-4k-b24 "${uring[@]}" --bs=4k --direct=0 --iodepth=24 \
        --iodepth_batch_submit=24 --iodepth_batch_complete_min=24
    run_fio direct-4k-b24 "${uring[@]}" --bs=4k --direct=1 --iodepth=24 \
        --iodepth_batch_submit=24 --iodepth_batch_complete_min=24
else
    echo "fio: absent" >> "$res/machine.txt"
    stamp "fio absent: iobench only"
fi

timed=()
[ -x /usr/bin/time ] && timed=(/usr/bin/time -v)
for depth in 64 128; do
    for backend in psync uring; do
        for mode in direct buffered; do
            flag=(); [ "$mode" = direct ] && flag=(--direct)
            name="$backend-$mode-$depth"
            stamp "iobench $name"
            "${timed[@]}" "$bin" iobench --model "$model" --backend "$backend" "${flag[@]}" \
                --depth "$depth" --cold --repeats 2 --batches 300 --text "$prompt" --json \
                > "$res/io-$name.json" 2> "$res/io-$name.err"
            python3 -c '
import json, re, sys
doc = json.load(open(sys.argv[1]))
err = open(sys.argv[2]).read()
switches = re.findall(r"(Voluntary|Involuntary) context switches: (\d+)", err)
p = doc["prefill_batch"]
print(sys.argv[3], "prefill batch %.0f unique rows/s" % p["unique_rows_per_s"],
      "%.1f reads in flight" % p["mean_in_flight"],
      "decode batch p50 %.0f us" % doc["decode_batch"]["p50_us"],
      " ".join("%s switches %s" % s for s in switches))
' "$res/io-$name.json" "$res/io-$name.err" "iobench $name" >> "$res/summary.txt"
        done
    done
done

bench() {
    local name=$1; shift
    stamp "bench $name"
    "$bin" bench --prompt "$prompt" --cold --json --prefill 8192 --decode 0 "$@" \
        > "$res/bench-$name.json" 2> "$res/bench-$name.err"
}
for mode in buffered direct; do
    flag=(); [ "$mode" = direct ] && flag=(--direct)
    common=(--model "$model" --compute gpu:flash --schedule overlap --repeat 2 "${flag[@]}")
    bench "$mode-layer" "${common[@]}" --sweep layer
    bench "$mode-layer-wide" "${common[@]}" --sweep layer --wait-tokens 2048
    bench "$mode-chunk" "${common[@]}" --sweep chunk
done
rm -rf "$work/s$scale"
stamp "synth qwen3.8-flash-next --scale 32"
"$bin" synth --preset qwen3.8-flash-next --scale 32 --out "$work/q32" --quiet > /dev/null
for mode in buffered direct; do
    flag=(); [ "$mode" = direct ] && flag=(--direct)
    bench "qwen-$mode" --model "$work/q32/model.gguf" --compute gpu:m4-max-qwen38 \
        --schedule overlap --repeat 1 --sweep layer "${flag[@]}"
done
rm -rf "$work/q32"
stamp "done"
python3 - "$res" >> "$res/summary.txt" <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "bench-*.json"))):
    doc = json.load(open(f))
    for s in doc["prompts"][0]["schedules"]:
        fl = s.get("floor") or {}
        over = (fl.get("stall_over_floor") or {}).get("median")
        print(os.path.basename(f), s["name"], "stall %.3f s" % s["prefill"]["stall_seconds"]["median"],
              "floor %.3f s" % fl.get("prefill_stall_seconds", {}).get("median", 0.0),
              "over floor %s" % ("%.2f" % over if over else "-"),
              "reads in flight %s, within batches %s" % tuple(
                  (s["io"].get(k) or {}).get("median") for k in ("prefill_mean_in_flight", "prefill_batch_in_flight")))
PY
cat "$res/summary.txt" >&2
tar -C "$out" -czf "$out/reads.tgz" reads
