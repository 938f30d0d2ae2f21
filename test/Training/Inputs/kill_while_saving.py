#!/usr/bin/env python3
"""Kills a run that saves a checkpoint every step, at random moments, and
checks after each kill that the checkpoints left are whole.

  kill_while_saving.py KILLS SEED DIR -- MLT-RUN-COMMAND...

The command (an mlt-run training with --save-checkpoint DIR --save-every 1)
is started KILLS times, each killed with SIGKILL a random delay (from SEED)
after its first step (after its first save while DIR holds none), each
start resuming from DIR once it holds a checkpoint. After every
kill: each DIR/step-* directory holds config.json, index.json, trainer.json
and the shards the index lists (rank-*.safetensors, of the sizes it says);
DIR/latest, if there, names one of them; and the command resumes from DIR
for one more step (mlt-run checks every shard and every byte's checksum,
so a torn or damaged file fails it), bit for bit: the weights it exports
(--save-hf) are byte for byte those of a run that trains as many steps
without stopping. Prints one line; exits 1 on a failure. Standard
library only.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

FILES = {"config.json", "index.json", "trainer.json"}


def check(directory):
    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    steps = [n for n in names if n.startswith("step-")]
    for name in steps:
        path = os.path.join(directory, name)
        held = set(os.listdir(path))
        if not FILES <= held:
            return f"{name} holds {sorted(held)}"
        shards = json.load(open(os.path.join(path, "index.json")))["files"]
        if held != FILES | {f["name"] for f in shards}:
            return f"{name} holds {sorted(held)}, its index lists {shards}"
        for f in shards:
            size = os.path.getsize(os.path.join(path, f["name"]))
            if size != f["bytes"]:
                return f"{name}/{f['name']} is {size} bytes, not {f['bytes']}"
    latest = os.path.join(directory, "latest")
    if os.path.exists(latest):
        named = open(latest).read().strip()
        if named not in steps:
            return f"latest names {named}, which is not there"
    return None


def latest_step(directory):
    latest = os.path.join(directory, "latest")
    if not os.path.exists(latest):
        return None
    return int(open(latest).read().strip()[len("step-"):])


def main(argv):
    if len(argv) < 6 or argv[4] != "--":
        print(__doc__)
        return 2
    kills, seed, directory = int(argv[1]), int(argv[2]), argv[3]
    command = argv[5:]
    rng = random.Random(seed)
    for kill in range(kills):
        step = latest_step(directory)
        run = command + (["--resume", directory] if step else [])
        process = subprocess.Popen(run, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        # Once it trains (compiling first may take a while on a busy
        # machine), at a random moment; while DIR holds no checkpoint yet,
        # once the first is saved (a kill before it, on a machine where a
        # step takes longer than the delay, would test nothing, and five
        # such would leave no checkpoint at all).
        wanted = "step" if step else "saved checkpoint"
        for line in process.stdout:
            if line.startswith(wanted):
                break
        time.sleep(rng.uniform(0.0, 1.0))
        process.send_signal(signal.SIGKILL)
        process.communicate()
        problem = check(directory)
        if problem:
            print(f"FAIL: after kill {kill + 1}: {problem}")
            return 1
        step = latest_step(directory)
        if step is None:
            continue
        steps = command.index("--steps")
        resumed = list(command)
        resumed[steps + 1] = str(step + 1)
        saving = ("--save-checkpoint", "--save-every", "--keep-last")
        resumed = [a for i, a in enumerate(resumed)
                   if a not in saving and (i == 0 or resumed[i - 1] not in saving)]
        exports = {}
        for name, extra in (("resumed", ["--resume", directory]),
                            ("uninterrupted", [])):
            exports[name] = directory + f".{name}-hf"
            shutil.rmtree(exports[name], ignore_errors=True)
            result = subprocess.run(
                resumed + extra + ["--save-hf", exports[name]],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if result.returncode != 0:
                print(f"FAIL: after kill {kill + 1}, from step {step}, the "
                      f"{name} run: {result.stderr.strip()}")
                return 1
        weights = [open(os.path.join(exports[name], "model.safetensors"),
                        "rb").read() for name in ("resumed", "uninterrupted")]
        for export in exports.values():
            shutil.rmtree(export, ignore_errors=True)
        if weights[0] != weights[1]:
            print(f"FAIL: after kill {kill + 1}, resumed from step {step}: "
                  f"step {step + 1}'s weights differ from those of a run "
                  f"that never stopped")
            return 1
    step = latest_step(directory)
    print(f"ok: {kills} kills while saving, every checkpoint whole, the "
          f"latest resumable bit for bit (step {step})" if step else
          f"FAIL: no checkpoint after {kills} kills")
    return 0 if step else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
