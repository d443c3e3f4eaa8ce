#!/usr/bin/env bash
# The torch host (crates/engram-py/examples/torch_host.py) on the device
# machine, `flash` profile, --scale 8 model, cold, the repository's Rust
# sources as prompt:
#   1. prefill, table by table (layer sweep, 8,192 tokens): `resident` (the
#      rows on the GPU beforehand), `sync` (rows read at each table's layer)
#      and `overlap`, with waits of 512 tokens and of 2,048 (the whole ring),
#      for each wheel given, REPEAT (3) repeats each, against the prefill
#      floor on this GPU's times at the disk's rate (the replay bench's
#      probe, taken once before the runs);
#   2. decode (2,048-token prefill, DECODE (300) steps): `pinned`,
#      `resident`, `overlap` and `full` (a draft and two alternatives,
#      right 79% at top 1 and 95% within the top 3), REPEAT repeats, with the
#      first wheel;
#   3. decode-ahead (not run unless PARTS names it): the same decode with
#      `--step-edge ahead` (the next step's lead layers queued behind the
#      sampled token), against the default edge;
#      decode-same-stream (not run unless PARTS names it): the same decode
#      with each step's rows copied on the compute stream (`--no-side-stream`)
#      instead of a copy stream of their own;
#   4. floor (not run unless PARTS names it): `resident` against `pinned`
#      in decode, its step copy from each source, and their kernel traces.
#
#   OUT=DIR scripts/device-host.sh ENGRAM_BIN WHEEL [BASE_WHEEL]
#
# Results: $OUT/host.tgz (waits-BUILD-WIDTH.json and .log, decode.json and
# .log, summary.txt). PARTS (waits decode) picks the parts, DECODE_SCHEDULES
# (pinned,resident,overlap,full) the decode parts' schedules. About 6 minutes
# on 16 cores with a base wheel.
set -euo pipefail
bin=${1:?usage: device-host.sh ENGRAM_BIN WHEEL [BASE_WHEEL]}
wheel=${2:?usage: device-host.sh ENGRAM_BIN WHEEL [BASE_WHEEL]}
base=${3:-}
out=${OUT:?set OUT to the directory the results go to}
work=${WORK:-/tmp/engram-host}
repeat=${REPEAT:-3}
decode=${DECODE:-300}
parts=${PARTS:-waits decode}
decode_schedules=${DECODE_SCHEDULES:-pinned,resident,overlap,full}
[ -d crates ] || { echo "device-host: run it from the repository root" >&2; exit 2; }
here=$(pwd)
host="$here/crates/engram-py/examples/torch_host.py"
res="$work/results"
mkdir -p "$res" "$out"
started=$(date +%s)
stamp() { echo "device-host: $(( $(date +%s) - started )) s: $*" | tee -a "$res/times.txt" >&2; }

builds="new"
python3 -m pip install -q --no-index --no-deps --target "$work/site-new" "$wheel"
if [ -n "$base" ]; then
    python3 -m pip install -q --no-index --no-deps --target "$work/site-base" "$base"
    builds="base new"
fi
{ nproc; uname -a; nvidia-smi -L; } > "$res/machine.txt" 2>&1 || true

model="$work/s8/model.gguf"
[ -f "$model" ] || "$bin" synth --preset deepseek-v4.1-flash --scale 8 --out "$work/s8" >&2
prompt="$work/prompt.txt"
find crates -name '*.rs' | sort | xargs cat > "$prompt"
stamp "model and prompt ready"
# The disk's random 4 KiB read rate, from the replay bench's probe: the
# floor of the waits' summaries.
iops=$("$bin" bench --model "$model" --prompt "$prompt" --prefill 512 --decode 0 \
    --schedule overlap --repeat 1 --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["device"]["iops"])')
echo "$iops" > "$res/iops.txt"
stamp "device: $iops random reads/s"

run_host() { # BUILD NAME ARGS...
    local build=$1 name=$2
    shift 2
    PYTHONPATH="$work/site-$build" python3 "$host" --model "$model" --prompt "$prompt" \
        --profile flash --cold --repeat "$repeat" --json "$res/$name.json" "$@" \
        > "$res/$name.log" 2>&1 || echo "device-host: $name failed" >&2
    stamp "$name"
}

for part in $parts; do
    case $part in
    waits)
        for width in 512 2048; do
            for build in $builds; do
                run_host "$build" "waits-$build-$width" --sweep layer --prefill 8192 --decode 0 \
                    --ubatch "$width" --schedule resident,sync,overlap --device-iops "$iops"
            done
        done
        ;;
    decode)
        run_host new decode --prefill 2048 --decode "$decode" \
            --schedule "$decode_schedules"
        ;;
    decode-same-stream)
        # Whether the copy stream's events and stream switches, on the host
        # between a table's rows and the launch that needs them, cost more
        # than copying on the compute stream behind the last graph.
        run_host new decode-same-stream --prefill 2048 --decode "$decode" \
            --schedule "$decode_schedules" --no-side-stream
        ;;
    decode-ahead)
        # The same with the next step's embedding and layer 0 queued behind
        # the sampled token (`--step-edge ahead`): the GPU never idles at
        # the step's edge, yet its later graphs ran slower on an H100 host.
        run_host new decode-ahead --prefill 2048 --decode "$decode" \
            --schedule "$decode_schedules" --step-edge ahead
        ;;
    floor)
        # Why `resident` decodes slower than `pinned`: its step copy from
        # the device (a memcpy), by a copy kernel, and from pinned host
        # memory; the host busy 200 us before each table's rows as
        # `pinned`'s gather keeps it; then 20 profiled steps of each, whose
        # traces' idle gaps scripts/trace_gaps.py sorts by where they fall.
        for copy in device kernel host; do
            run_host new "floor-$copy" --prefill 2048 --decode "$decode" \
                --schedule resident,pinned --resident-copy "$copy"
        done
        run_host new floor-spin --prefill 2048 --decode "$decode" \
            --schedule resident,pinned --resident-host-us 200
        run_host new floor-profile --prefill 2048 --decode 100 --repeat 1 \
            --schedule resident,pinned --profile-steps 20
        python3 "$here/scripts/trace_gaps.py" "$res"/floor-profile.json.profile-*.trace.json \
            > "$res/trace-gaps.txt" 2>&1 || true
        ;;
    esac
done

# Per repeat: overlap's prefill stall over sync's (the engine reading at each
# table's layer), each table's stall; decode tok/s against pinned.
python3 - "$res" > "$res/summary.txt" <<'EOF'
import glob, json, os, statistics, sys
res = sys.argv[1]
def med(xs):
    xs = [x for x in xs if x is not None]
    return f"{statistics.median(xs):.4g} ({min(xs):.4g}-{max(xs):.4g})" if xs else "-"
for path in sorted(glob.glob(os.path.join(res, "waits-*.json"))):
    runs = json.load(open(path))["results"]
    by, idle, reach = {}, {}, {}
    for r in runs:
        if r["schedule"] == "resident":
            continue  # no engine, no stall: the floor's compute
        by.setdefault(r["schedule"], {})[r["repeat"]] = r["prefill"]["stall"]
        # The GPU's wait for rows (its idle at the Engram layers), and when
        # the host first waited on table 1 (s from the prefill's start).
        idle.setdefault(r["schedule"], []).append(r["prefill"]["gpu_wait_ms"] / 1e3)
        firsts = [w[2] for w in r["prefill"]["waits"]["long"] if w[0] == 1]
        reach.setdefault(r["schedule"], []).append(min(firsts) if firsts else None)
    sync, over = by.get("sync", {}), by.get("overlap", {})
    reps = sorted(set(sync) & set(over))
    total = lambda stall: sum(stall["per_table_s"])
    ratio = [total(over[i]) / total(sync[i]) for i in reps if total(sync[i]) > 0]
    print(os.path.basename(path), "overlap/sync", med(ratio),
          "sync s", med([total(sync[i]) for i in reps]),
          "overlap s", med([total(over[i]) for i in reps]),
          "overlap tables s", [med([over[i]["per_table_s"][t] for i in reps]) for t in (0, 1)],
          "sync tables s", [med([sync[i]["per_table_s"][t] for i in reps]) for t in (0, 1)],
          "GPU idle s sync", med(idle.get("sync", [])), "overlap", med(idle.get("overlap", [])),
          "host's first blocked wait on table 1 at s", med(reach.get("overlap", [])))
    # The least GPU idle a perfect scheduler leaves at the probed rate on
    # these compute times, and each schedule's GPU idle for rows over it;
    # the 0.7x target is within reach only where the floor is below 0.7 of
    # `sync`'s stall.
    summary = json.load(open(path))["summary"]
    floors = [row["prefill_floor_s"] for row in summary if "prefill_floor_s" in row]
    if floors and reps:
        print("    floor s %.4g, 0.7 x sync's stall %.4g s" % (floors[0], 0.7 * statistics.median(
            [total(sync[i]) for i in reps])))
    for row in summary:
        if "prefill_floor_s" in row and row["schedule"] != "resident":
            print("   ", row["schedule"], "floor s %.4g" % row["prefill_floor_s"],
                  "GPU idle s %.4g" % row["prefill_gpu_idle_s"],
                  "over the floor %.4g" % row["prefill_gpu_idle_over_floor"],
                  "compute s %.4g" % (row["prefill_floor_s"] / row["prefill_floor_of_compute"]
                                      if row["prefill_floor_of_compute"] else float("nan")))
for path in sorted(glob.glob(os.path.join(res, "floor-*.json"))):
    if ".profile-" in path:
        continue  # a profiled run's Chrome trace (trace-gaps.txt reads them)
    for r in json.load(open(path))["results"]:
        segs = {k: round(v) for k, v in r["decode"]["gpu_us_per_step"].items()}
        print(os.path.basename(path), r["schedule"], r["repeat"],
              "tok/s %.2f" % r["decode"]["tok_s"], "GPU us a step", segs)
    for row in json.load(open(path))["summary"]:
        print("   ", row.get("schedule"), "of pinned", row.get("decode_of_pinned"),
              f"({row.get('decode_of_pinned_min')}-{row.get('decode_of_pinned_max')})")
for name in ("decode", "decode-ahead", "decode-same-stream"):
    path = os.path.join(res, f"{name}.json")
    if not os.path.exists(path):
        continue
    for r in json.load(open(path))["results"]:
        segs = {k: round(v) for k, v in r["decode"]["gpu_us_per_step"].items()}
        host = {k: round(v) for k, v in r["decode"]["host_us_per_step"].items()}
        print(name, r["schedule"], r["repeat"], "tok/s %.2f" % r["decode"]["tok_s"],
              "GPU us a step", segs, "host us a step", host)
    for row in json.load(open(path))["summary"]:
        print(name, row.get("schedule"),
              "tok/s", row.get("decode_tok_s"), "of pinned", row.get("decode_of_pinned"),
              f"({row.get('decode_of_pinned_min')}-{row.get('decode_of_pinned_max')})",
              "of resident", row.get("decode_of_resident"),
              f"({row.get('decode_of_resident_min')}-{row.get('decode_of_resident_max')})",
              "stall mean us", row.get("decode_stall_mean_us"), "p99", row.get("decode_stall_p99_us"))
EOF
cat "$res/summary.txt" "$res/trace-gaps.txt" >&2 2>/dev/null || true
tar -C "$res" -czf "$out/host.tgz" .
stamp "done"
