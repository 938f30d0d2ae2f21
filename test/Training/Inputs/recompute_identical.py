#!/usr/bin/env python3
"""Trains one layout with and without recomputation and compares the runs.

  recompute_identical.py WORK "RECOMPUTE FLAGS" MODEL ARGS...

Runs `mlt-run MODEL ARGS...` (mlt-run from PATH) twice, as given and with
RECOMPUTE FLAGS added (such as "--recompute-layers all"), logging every
step, dumping the first step's gradients and saving the final weights
under WORK, and compiles both with --print-plan. Recomputation runs the
same kernels on the same operands, so the runs must be identical bit for
bit: every loss and gradient norm, every gradient and every weight. And it
must keep less: the largest rank's arena must shrink. Prints one line:

  identical: ARGS + RECOMPUTE FLAGS: N steps, G gradients, W weights; arena A -> B bytes

or a line starting with FAIL, and exits 1.
"""
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from fixture_tools import read_safetensors  # noqa: E402


def train(work, name, model, args):
    out = os.path.join(work, name)
    subprocess.run(
        ["mlt-run", model, *args, "--log-json", out + ".jsonl",
         "--dump-grads", out + ".grads", "--save-hf", out],
        check=True, stdout=subprocess.DEVNULL)
    with open(out + ".jsonl") as f:
        steps = [(r["step"], r["loss"], r["grad_norm"])
                 for r in map(json.loads, f) if "loss" in r]
    return (steps, read_safetensors(out + ".grads"),
            read_safetensors(os.path.join(out, "model.safetensors")))


def arena(model, args):
    """The largest rank's arena of the plan `args` compile to."""
    text = subprocess.run(["mlt-run", model, *args, "--print-plan"],
                          capture_output=True, text=True, check=True).stdout
    return max(int(n) for n in re.findall(r"^rank \d+: arena (\d+) bytes", text, re.M))


def main(argv):
    work, flags, model, args = argv[1], shlex.split(argv[2]), argv[3], argv[4:]
    os.makedirs(work, exist_ok=True)
    base = train(work, "base", model, args)
    recomputed = train(work, "recomputed", model, args + flags)
    what = f"{' '.join(args)} + {' '.join(flags)}"
    problems = []
    if base[0] != recomputed[0]:
        problems.append(f"steps differ: {base[0]} vs {recomputed[0]}")
    for kind, a, b in (("gradients", base[1], recomputed[1]),
                       ("weights", base[2], recomputed[2])):
        different = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
        if different:
            problems.append(f"{kind} differ: {', '.join(different[:4])}")
    before, after = arena(model, args), arena(model, args + flags)
    if after >= before:
        problems.append(f"the arena does not shrink: {before} -> {after} bytes")
    if problems:
        print(f"FAIL: {what}: {'; '.join(problems)}")
        return 1
    print(f"identical: {what}: {len(base[0])} steps, {len(base[1])} gradients, "
          f"{len(base[2])} weights; arena {before} -> {after} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
