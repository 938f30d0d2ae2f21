#!/usr/bin/env python3
# ===- trace_overlap.py - how much of a kernel's time hides under compute -=== #
#
# Part of mlt. Reads a trace that `mlt-run --trace` wrote (Trace Event
# Format: one process a rank, one thread a stream, tid = the plan's stream)
# and prints, for each rank and each KERNEL given, the launches' count and
# total time and how much of that time the compute stream (tid 0) was busy
# with something else: the part of the communication that hides under
# compute. Used for the ring's permutes on stream 4 (bench/RESULTS.md).
#
#   python3 bench/trace_overlap.py TRACE collective_permute [KERNEL ...]
#
# ===----------------------------------------------------------------------=== #
import collections
import json
import sys


def merged(intervals):
    """The union of [start, end) intervals, sorted and disjoint."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def covered(start, end, union):
    """The length of [start, end) inside the sorted disjoint `union`."""
    return sum(max(0.0, min(end, e) - max(start, s)) for s, e in union
               if s < end and e > start)


def main(argv):
    if len(argv) < 3:
        print("usage: trace_overlap.py TRACE KERNEL...",
              file=sys.stderr)
        return 2
    events = json.load(open(argv[1]))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    by_rank = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X" and not names.get(e["pid"], "").startswith("predicted"):
            by_rank[e["pid"]].append(e)
    for pid in sorted(by_rank):
        launches = by_rank[pid]
        for kernel in argv[2:]:
            # The compute stream's other launches (a collective on it hides
            # under nothing of its own).
            compute = merged((e["ts"], e["ts"] + e["dur"]) for e in launches
                             if e["tid"] == 0 and e["name"] != kernel)
            mine = [e for e in launches if e["name"] == kernel]
            total = sum(e["dur"] for e in mine)
            hidden = sum(covered(e["ts"], e["ts"] + e["dur"], compute)
                         for e in mine)
            streams = sorted({e["tid"] for e in mine})
            share = 100.0 * hidden / total if total else 0.0
            print(f"{names.get(pid, pid)}: {kernel} x{len(mine)} on streams "
                  f"{streams}: {total / 1000:.2f} ms, {hidden / 1000:.2f} ms of "
                  f"it under compute ({share:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
