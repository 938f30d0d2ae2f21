#!/usr/bin/env python3
"""Changes a run's data files while it trains and checks what it says.

  change_while_training.py WORK -- MLT-RUN-COMMAND...

The command (an mlt-run training with --data FILE and many --steps) is
started once per change below, on a fresh copy of FILE in WORK (and, for an
indexed dataset PREFIX, of PREFIX.idx and PREFIX.bin); after its first step
the copy is changed:

  truncate  the file cut to a quarter (the .bin of an indexed dataset)
  rewrite   the file written again in place, the same size, other tokens
  append    tokens appended
  index     (indexed datasets) the .idx written again in place, unchanged

Each run must end with exit status 1 and, on stderr, exactly one line,
"mlt-run: error: --data: <the file>: changed while the run reads it (...)",
never a signal (a SIGBUS was how a truncated file ended a run) or a hang.
A copy replaced by another file (renamed over it) is not a change of the
file the run has open: that run must go on to its end. Prints a line per
case; exits 1 at the first failure. Standard library only.
"""
import os
import shutil
import subprocess
import sys
import time


def copy_data(data, work):
    """Copies the dataset `data` into `work`; returns the --data argument
    and the path of the file whose tokens it reads."""
    if data.endswith((".u16", ".u32", ".txt")):
        target = os.path.join(work, os.path.basename(data))
        shutil.copyfile(data, target)
        return target, target
    prefix = os.path.join(work, os.path.basename(data))
    for suffix in (".idx", ".bin"):
        shutil.copyfile(data + suffix, prefix + suffix)
    return prefix, prefix + ".bin"


def change(kind, tokens):
    if kind == "truncate":
        os.truncate(tokens, os.path.getsize(tokens) // 4 // 4 * 4)
    elif kind == "rewrite":
        size = os.path.getsize(tokens)
        with open(tokens, "r+b") as f:
            f.write(bytes(size))
    elif kind == "append":
        with open(tokens, "ab") as f:
            f.write(bytes(64))
    elif kind == "index":
        index = tokens[:-len(".bin")] + ".idx"
        data = open(index, "rb").read()
        with open(index, "r+b") as f:
            f.write(data)
    elif kind == "replace":
        other = tokens + ".new"
        shutil.copyfile(tokens, other)
        os.replace(other, tokens)


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    work, command = argv[1], argv[3:]
    at = command.index("--data") + 1
    indexed = not command[at].endswith((".u16", ".u32", ".txt"))
    kinds = ["truncate", "rewrite", "append"] + (["index"] if indexed else [])
    for kind in kinds + ["replace"]:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        data, tokens = copy_data(command[at], work)
        run = list(command)
        run[at] = data
        if kind == "replace":
            steps = run.index("--steps") + 1
            run[steps] = "20"
        process = subprocess.Popen(run, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        for line in process.stdout:
            if line.startswith("step"):
                break
        changed = tokens if kind != "index" else tokens[:-4] + ".idx"
        change(kind, tokens)
        try:
            out, err = process.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
            print(f"FAIL: {kind}: the run did not end")
            return 1
        lines = err.strip().splitlines()
        if kind == "replace":
            if process.returncode != 0:
                print(f"FAIL: replace: exit status {process.returncode}: {err}")
                return 1
            print("ok: replace: the run trains on the file it opened")
            continue
        expected = (f"mlt-run: error: --data: {changed}: changed while the "
                    f"run reads it (")
        if process.returncode != 1 or len(lines) != 1 or \
                not lines[0].startswith(expected):
            print(f"FAIL: {kind}: exit status {process.returncode}, "
                  f"stderr {lines}")
            return 1
        print(f"ok: {kind}: {lines[0][len(expected) - 1:]}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
