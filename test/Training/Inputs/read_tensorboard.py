"""Reads a run's TensorBoard event files with TensorBoard's own reader
(EventAccumulator) and checks them against the run's --log-json: each tag's
steps and values (a rank's, "NAME/rank R", against entry R of the log's NAME) (as float32, which TensorBoard's simple values are).
Prints one line per tag for FileCheck (tensorboard.test).

usage: read_tensorboard.py DIR LOG.jsonl
"""

import json
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator

directory, log = sys.argv[1:3]
with open(log) as f:
    rows = [json.loads(line) for line in f]
events = event_accumulator.EventAccumulator(
    directory, size_guidance={event_accumulator.SCALARS: 0})
events.Reload()
tags = sorted(events.Tags()["scalars"])
print("tags:", " ".join(tags))
for tag in tags:
    scalars = events.Scalars(tag)
    steps = [s.step for s in scalars]
    mine = [s.value for s in scalars]
    # (the steps' records and the evaluations' hold different tags; a
    # rank's scalar, "NAME/rank R", is entry R of the log's list NAME)
    name, _, rank = tag.partition("/rank ")
    if rank:
        logged = [dict(r, **{tag: r[name][int(rank)]}) for r in rows
                  if name in r]
    else:
        logged = [r for r in rows if tag in r]
    if not logged:  # (mfu, tflops_per_gpu: GPU runs', not logged)
        print(f"{tag}: steps {steps[0]}-{steps[-1]}, not in the log")
        continue
    theirs = [struct.unpack("f", struct.pack("f", r[tag]))[0] for r in logged]
    same = steps == [r["step"] for r in logged] and mine == theirs
    print(f"{tag}: steps {steps[0]}-{steps[-1]}, "
          f"{'the log' + chr(39) + 's values' if same else 'DIFFERENT'}")
