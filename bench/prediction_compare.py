#!/usr/bin/env python3
"""Compares the predicted step with the measured one in a trace that
`mlt-run --trace` wrote with a calibration (its "predicted rank R" processes
beside the measured "rank R"), kernel family by kernel family.

  prediction_compare.py TRACE [--rank R]

For rank R (default 0): each kernel's launches, their measured and
predicted time (the sum of their durations) and the ratio, largest first;
then the step's span (first start to last end) both ways. The measured step
of a trace is a profiled one (every launch timed), slower than an untimed
step; the run's own "step time:" line compares untimed steps.
"""
import argparse
import collections
import json
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    pids = {name: pid for pid, name in names.items()}
    measured_pid = pids.get(f"rank {args.rank}")
    predicted_pid = pids.get(f"predicted rank {args.rank}")
    if measured_pid is None or predicted_pid is None:
        sys.exit(f"prediction_compare: {args.trace} has no measured and "
                 f"predicted tracks of rank {args.rank} (was the run given a "
                 "calibration?)")
    totals = {pid: collections.defaultdict(lambda: [0, 0.0])
              for pid in (measured_pid, predicted_pid)}
    spans = {}
    for pid in totals:
        launches = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
        for e in launches:
            totals[pid][e["name"]][0] += 1
            totals[pid][e["name"]][1] += e["dur"] / 1e3
        spans[pid] = (max(e["ts"] + e["dur"] for e in launches)
                      - min(e["ts"] for e in launches)) / 1e3
    measured, predicted = totals[measured_pid], totals[predicted_pid]
    kernels = sorted(set(measured) | set(predicted),
                     key=lambda k: -measured[k][1])
    print(f"{'kernel':24} {'launches':>8} {'measured ms':>12} "
          f"{'predicted ms':>13} {'predicted/measured':>19}")
    for kernel in kernels:
        m, p = measured[kernel][1], predicted[kernel][1]
        ratio = f"{p / m:.3f}" if m > 0 else "-"
        print(f"{kernel:24} {measured[kernel][0]:>8} {m:>12.3f} {p:>13.3f} "
              f"{ratio:>19}")
    m_sum = sum(v[1] for v in measured.values())
    p_sum = sum(v[1] for v in predicted.values())
    print(f"{'all launches':24} {'':>8} {m_sum:>12.3f} {p_sum:>13.3f} "
          f"{p_sum / m_sum:>19.3f}")
    m_span, p_span = spans[measured_pid], spans[predicted_pid]
    print(f"{'step span':24} {'':>8} {m_span:>12.3f} {p_span:>13.3f} "
          f"{p_span / m_span:>19.3f}")


if __name__ == "__main__":
    main()
