"""Drives mlt-run through what --resume holds a run to (resume-options.test).

A run of the tiny model saves checkpoints at steps 2 and 4; each option that
sets the samples read or the optimizer's trajectory is then changed on
--resume, alone, and the one-line refusal printed; the changes are then
allowed (--allow-data-change, --allow-optimizer-change) and their notes
printed; a longer --steps keeps the cosine's end; and the JSON log is
appended to. Prints one line per case for FileCheck.

usage: resume_options.py MLT_RUN MODEL WORKDIR
"""

import json
import os
import subprocess
import sys

MLT_RUN, MODEL, WORK = sys.argv[1:4]

BASE = {
    "--batch": "4",
    "--seq-len": "16",
    "--lr-schedule": "cosine",
    "--lr": "0.003",
    "--min-lr": "0.0003",
    "--warmup": "1",
    "--adam-beta1": "0.9",
    "--adam-beta2": "0.95",
    "--adam-eps": "1e-08",
    "--weight-decay": "0.1",
    "--clip-grad": "1",
}


def run(steps, changes=(), extra=()):
    options = dict(BASE)
    options.update(dict(changes))
    argv = [MLT_RUN, MODEL, "--steps", str(steps)]
    for flag, value in options.items():
        if value is not None:
            argv += [flag, value]
    argv += list(extra)
    return subprocess.run(argv, capture_output=True, text=True)


def lrs(log):
    with open(log) as f:
        return [(r["step"], r["lr"]) for r in map(json.loads, f)]


ck = os.path.join(WORK, "ck")
log = os.path.join(WORK, "log.jsonl")
saved = run(4, extra=["--save-checkpoint", ck, "--save-every", "2",
                      "--log-json", log])
assert saved.returncode == 0, saved.stderr
with open(os.path.join(ck, "step-000002", "trainer.json")) as f:
    record = json.load(f)["training"]
print("record:", ", ".join(f"{k}={record[k]}" for k in sorted(record)))

step2 = os.path.join(ck, "step-000002")
refused = [("--batch", "8"), ("--seq-len", "32"), ("--lr-schedule", "constant"),
           ("--lr", "0.002"), ("--min-lr", "0"), ("--warmup", "2"),
           ("--lr-decay-steps", "6"), ("--adam-beta1", "0.8"),
           ("--adam-beta2", "0.99"), ("--adam-eps", "1e-06"),
           ("--weight-decay", "0.01"), ("--clip-grad", "0.5")]
for flag, value in refused:
    changes = [(flag, value)]
    if flag == "--lr-schedule":  # (the constant schedule takes no min-lr)
        changes.append(("--min-lr", None))
    r = run(4, changes, ["--resume", step2])
    lines = r.stderr.strip().splitlines()
    print(f"refused {flag} rc={r.returncode} lines={len(lines)}:",
          lines[-1] if lines else "")

for flag, value, allow in [("--lr", "0.002", "--allow-optimizer-change"),
                           ("--batch", "8", "--allow-data-change")]:
    r = run(4, [(flag, value)], ["--resume", step2, allow])
    notes = [l for l in r.stdout.splitlines() if l.startswith("note:")]
    print(f"allowed {flag} rc={r.returncode}:", " | ".join(notes))

# A longer run from the last checkpoint: the cosine's end stays at step 4,
# and the log goes on.
step4 = os.path.join(ck, "step-000004")
r = run(6, extra=["--resume", step4, "--log-json", log])
assert r.returncode == 0, r.stderr
print("longer:", " | ".join(l for l in r.stdout.splitlines()
                            if l.startswith("note:")))
print("log:", " ".join(f"{s}:{lr:.6g}" for s, lr in lrs(log)))
moved = os.path.join(WORK, "moved.jsonl")
r = run(6, [("--lr-decay-steps", "6")],
        ["--resume", step4, "--allow-optimizer-change", "--log-json", moved])
assert r.returncode == 0, r.stderr
print("moved:", " ".join(f"{s}:{lr:.6g}" for s, lr in lrs(moved)))
