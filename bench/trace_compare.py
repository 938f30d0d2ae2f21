#!/usr/bin/env python3
"""Compares the compute launches of two `mlt-run --trace` files, launch by launch.

  trace_compare.py BASE.json OTHER.json [--rank R]

BASE is usually one GPU's step and OTHER the same step under data
parallelism (the same compute launches, plus collectives on side streams).
The compute-stream launches of rank R (default 0) of each are matched in
order by kernel name (difflib; launches only one of them has, such as the
collectives' followers, are left out and counted), and each matched pair is
put in a class: its kernel family (matmul, attention, other) and the side
streams that ran beside OTHER's launch. Prints, per class, the launches,
the milliseconds in BASE and in OTHER, and the difference: where the
overlapped step loses time to the collectives beside it. Standard library
only.
"""
import argparse
import collections
import difflib
import json
import sys


def launches(path, rank):
    events = json.load(open(path))["traceEvents"]
    mine = [e for e in events if e["ph"] == "X" and e["pid"] == rank]
    if not mine:
        sys.exit(f"trace_compare: {path} has no launches of rank {rank}")
    return sorted(mine, key=lambda e: e["ts"])


def family(name):
    if name.startswith("matmul"):
        return "matmul"
    if name.startswith("attention"):
        return "attention"
    return "other"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("base")
    parser.add_argument("other")
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    base = [e for e in launches(args.base, args.rank) if e["tid"] == 0]
    other_all = launches(args.other, args.rank)
    other = [e for e in other_all if e["tid"] == 0]
    side = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in other_all if e["tid"] != 0]

    def beside(e):
        begin, end = e["ts"], e["ts"] + e["dur"]
        return tuple(sorted({t for b, f, t in side if b < end and f > begin}))

    matcher = difflib.SequenceMatcher(
        None, [e["name"] for e in base], [e["name"] for e in other], autojunk=False)
    classes = collections.defaultdict(lambda: [0, 0.0, 0.0])
    unmatched = [0, 0]
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            unmatched[0] += i2 - i1
            unmatched[1] += j2 - j1
            continue
        for a, b in zip(base[i1:i2], other[j1:j2]):
            row = classes[(family(a["name"]), beside(b))]
            row[0] += 1
            row[1] += a["dur"] / 1e3
            row[2] += b["dur"] / 1e3
    print(f"{'kernels':<10} {'beside streams':<15} {'launches':>8} "
          f"{'base ms':>9} {'other ms':>9} {'change':>16}")
    for (fam, streams), (count, a, b) in sorted(classes.items()):
        where = ",".join(map(str, streams)) or "-"
        change = f"{b - a:+.2f} ms ({100 * (b - a) / a:+.0f}%)" if a > 0 else ""
        print(f"{fam:<10} {where:<15} {count:>8} {a:>9.2f} {b:>9.2f} {change:>16}")
    total_a = sum(r[1] for r in classes.values())
    total_b = sum(r[2] for r in classes.values())
    print(f"matched: {sum(r[0] for r in classes.values())} launches, "
          f"{total_a:.2f} ms -> {total_b:.2f} ms; unmatched: {unmatched[0]} "
          f"of base, {unmatched[1]} of other")


if __name__ == "__main__":
    main()
