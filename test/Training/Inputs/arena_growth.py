#!/usr/bin/env python3
"""How a plan's arena grows with the micro-batches, per schedule.

Compiles MODEL (with `mlt-run` from PATH, --print-plan) at 2, 4 and 8
micro-batches of 2 sequences of 64 tokens, for 1f1b and for gpipe, and
prints one line per schedule stating what the memory planner promises:
1F1B keeps one micro-batch's activations at a time, so the arena stays
within the inputs' own copies of the same size; GPipe keeps every
micro-batch's, so its buffers kept per slot have as many copies as
micro-batches and each further micro-batch adds the same bytes. A line
starting with FAIL says which promise broke.
"""
import re
import subprocess
import sys


def plan(model, microbatches, schedule):
    text = subprocess.run(
        ["mlt-run", model, "--batch", str(2 * microbatches), "--seq-len", "64",
         "--microbatches", str(microbatches), "--schedule", schedule, "--print-plan"],
        capture_output=True, text=True, check=True).stdout
    arena = int(re.search(r"^rank 0: arena (\d+) bytes", text, re.M).group(1))
    slots = {int(n) for n in re.findall(r" x(\d+) \(a copy per slot", text)}
    return arena, slots


def main():
    model = sys.argv[1]
    counts = [2, 4, 8]
    ok = True
    arenas = [plan(model, m, "1f1b") for m in counts]
    # Only the copies of tokens, labels and loss grow: a few KiB.
    if any(slots for _, slots in arenas) or arenas[-1][0] - arenas[0][0] > 16384:
        print(f"FAIL: 1f1b: arenas {[a for a, _ in arenas]}, slots {[s for _, s in arenas]}")
        ok = False
    else:
        print("1f1b: the arena does not grow with the micro-batches")
    gpipe = [plan(model, m, "gpipe") for m in counts]
    steps = [(gpipe[i + 1][0] - gpipe[i][0]) / (counts[i + 1] - counts[i])
             for i in range(len(counts) - 1)]
    if [s for _, s in gpipe] != [{m} for m in counts] or steps[0] != steps[1] or steps[0] <= 0:
        print(f"FAIL: gpipe: arenas {[a for a, _ in gpipe]}, slots {[s for _, s in gpipe]}")
        ok = False
    else:
        print(f"gpipe: 2, 4, 8 micro-batches keep 2, 4, 8 copies; each more costs "
              f"the same bytes ({int(steps[0])})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
