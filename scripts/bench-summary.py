#!/usr/bin/env python3
"""Markdown tables of `engram bench --json` documents (one or more files):
per prompt and schedule the median (min-max over repeats) of the prefill
stall, its floor and stall/floor, the decode stall mean and p99 and the CPU
cost; then the geometric mean over prompts of the ratios against a chosen
schedule.

    scripts/bench-summary.py [--over ds4] RUN.json [RUN2.json ..]
"""

import argparse
import json
import sys


def get(d, path):
    for key in path.split("."):
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def spread(s, path, digits):
    v = get(s, path)
    if not isinstance(v, dict) or v.get("median") is None:
        return "-"
    med, lo, hi = v["median"], v["min"], v["max"]
    if lo == hi:
        return f"{med:,.{digits}f}"
    return f"{med:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def short(name):
    return name.rsplit("/", 1)[-1].removesuffix(".txt")


def document(doc, over, path):
    d = doc.get("device") or {}
    print(f"### {path}\n")
    print(f"compute `{doc['compute']}`, {doc['sweep']} sweep, ubatch {doc['ubatch']}, "
          f"repeat {doc['repeat']}, cores {doc.get('cores') or 'all'}, cold {doc['cold']}, "
          f"direct {doc['direct']}; device {d.get('iops', 0):,.0f} reads/s at depth "
          f"{d.get('depth', '-')} ({d.get('source', 'none')})\n")
    decode = any(p["decode_tokens"] > 0 for p in doc["prompts"])
    head = ["prompt", "tokens", "schedule", "prefill stall s", "floor s", "stall / floor"]
    if decode:
        head += ["decode mean us", "decode p99 us"]
    head += ["cpu us/token"] + (["cpu us/step"] if decode else [])
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for p in doc["prompts"]:
        for s in p["schedules"]:
            row = [short(p["prompt"]), f"{p['prefill_tokens']:,}", s["name"],
                   spread(s, "prefill.stall_seconds", 3),
                   spread(s, "floor.prefill_stall_seconds", 3),
                   spread(s, "floor.stall_over_floor", 1)]
            if decode:
                row += [spread(s, "decode.stall_us.mean", 0), spread(s, "decode.stall_us.p99", 0)]
            row += [spread(s, "cpu.prefill_us_per_token", 1)]
            if decode:
                row += [spread(s, "cpu.decode_us_per_step", 0)]
            print("| " + " | ".join(row) + " |")
    print()
    figures = ["prefill.stall_seconds", "cpu.prefill_us_per_token"]
    if decode:
        figures[1:1] = ["decode.stall_us.mean", "decode.stall_us.p99"]
        figures.append("cpu.decode_us_per_step")
    n = len(doc["prompts"])
    print(f"Geometric mean over {n} prompt(s) of the per-prompt median ratio "
          f"(min-max of the prompts' medians), against `{over}`:\n")
    print("| schedule / " + over + " | " + " | ".join(f"`{f}`" for f in figures) + " |")
    print("|" + " --- |" * (len(figures) + 1))
    names = [s["name"] for s in doc["prompts"][0]["schedules"]]
    for name in names:
        if name == over:
            continue
        cells = []
        for f in figures:
            r = next((r for r in doc["geomean"] if r["figure"] == f and
                      {r["schedule"], r["over"]} == {name, over}), None)
            v = r and r["value"]
            if not v:
                cells.append("-")
                continue
            med, lo, hi = v["median"], v["min"], v["max"]
            if r["schedule"] != name:  # stored the other way round
                med, lo, hi = (1 / x if x else float("inf") for x in (med, hi, lo))
            cells.append(f"{med:.2f} ({lo:.2f}-{hi:.2f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--over", default="ds4", help="the schedule ratios are taken against")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    for path in args.files:
        with open(path) as f:
            doc = json.load(f)
        if not doc.get("prompts"):
            sys.exit(f"{path}: not an engram bench --json document")
        document(doc, args.over, path)


if __name__ == "__main__":
    main()
