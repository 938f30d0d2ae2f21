#!/usr/bin/env python3
"""Damages a training checkpoint one byte at a time and checks that every
reader refuses it.

  damage_checkpoint.py TRIALS SEED DIR -- MLT-RUN-COMMAND...

The command (an mlt-run training, without --steps or --save-checkpoint)
first saves a checkpoint of step 2 under DIR/base. Each of TRIALS trials
copies it, picks one of its files (each file alike, so that the small
files are hit as often as the shards), one byte of that file, and a value
other than the byte's to write there (all from SEED), and runs every reader
of the damaged checkpoint:

  mlt-checkpoint info --verify CKPT
  mlt-checkpoint to-hf CKPT OUT
  MLT-RUN-COMMAND --steps 3 --resume CKPT
  MLT-RUN-COMMAND --steps 1 --init-from CKPT/step-000002

Each must fail with an exit status of 1 and one line on stderr,
"<tool>: error: ...", and write nothing: the damaged copy is left as it
was (every file's bytes) and to-hf's OUT does not exist. Plain
`mlt-checkpoint info` (which checks the small files and the shards'
headers, not their data) is run too and its refusals counted. Prints one
line per file of the checkpoint (trials, refusals of plain info) and a
summary; exits 1 at the first reader that accepts a damaged checkpoint.
Standard library only.
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys


def tool(name, command):
    """The path of mlt tool `name`, beside the command's mlt-run."""
    found = shutil.which(command[0])
    return os.path.join(os.path.dirname(found), name) if found else name


def snapshot(directory):
    """Every file under `directory` with a hash of its bytes."""
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, directory)] = hashlib.sha256(
                    f.read()).hexdigest()
    return files


def refused(run, what, prefix):
    """None if `run` (a CompletedProcess) refused with one error line of
    printable UTF-8 text."""
    try:
        text = run.stderr.decode()
    except UnicodeDecodeError:
        return f"{what}: an error that is not UTF-8 text: {run.stderr!r}"
    if not text.strip().isprintable():
        return f"{what}: an error with unprintable characters: {text!r}"
    lines = text.strip().splitlines()
    if run.returncode != 1:
        return f"{what}: exit status {run.returncode}: {text.strip()}"
    if len(lines) != 1 or not lines[0].startswith(prefix + ": error: "):
        return f"{what}: not one '{prefix}: error:' line: {lines}"
    return None


def main(argv):
    if len(argv) < 6 or argv[4] != "--":
        print(__doc__)
        return 2
    trials, seed, directory = int(argv[1]), int(argv[2]), argv[3]
    command = argv[5:]
    checkpoint_tool = tool("mlt-checkpoint", command)
    rng = random.Random(seed)

    base = os.path.join(directory, "base")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    made = subprocess.run(command + ["--steps", "2", "--save-checkpoint", base],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if made.returncode != 0:
        print(f"FAIL: saving the checkpoint: {made.stderr!r}")
        return 1
    step = os.path.join(base, "step-000002")
    names = sorted(os.listdir(step))
    tally = {name: [0, 0] for name in names}  # trials, plain info refusals

    for trial in range(trials):
        name = rng.choice(names)
        size = os.path.getsize(os.path.join(step, name))
        offset = rng.randrange(size)
        work = os.path.join(directory, "trial")
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(base, work)
        path = os.path.join(work, "step-000002", name)
        with open(path, "r+b") as f:
            f.seek(offset)
            old = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([old ^ rng.randrange(1, 256)]))
        before = snapshot(work)
        out = os.path.join(directory, "trial-hf")
        damage = f"trial {trial + 1}: {name} byte {offset} of {size}"

        def run(args):
            return subprocess.run(args, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)

        readers = [
            ("info --verify", "mlt-checkpoint",
             [checkpoint_tool, "info", "--verify", work]),
            ("to-hf", "mlt-checkpoint", [checkpoint_tool, "to-hf", work, out]),
            ("--resume", "mlt-run",
             command + ["--steps", "3", "--resume", work]),
            ("--init-from", "mlt-run",
             command + ["--steps", "1", "--init-from",
                        os.path.join(work, "step-000002")]),
        ]
        for what, prefix, args in readers:
            problem = refused(run(args), what, prefix)
            if problem is None and os.path.exists(out):
                problem = f"{what}: wrote {out}"
            if problem is None and snapshot(work) != before:
                problem = f"{what}: changed the checkpoint's files"
            if problem:
                print(f"FAIL: {damage}: {problem}")
                return 1
        tally[name][0] += 1
        if run([checkpoint_tool, "info", work]).returncode != 0:
            tally[name][1] += 1

    for name in names:
        hits, plain = tally[name]
        print(f"  {name}: {hits} damaged, refused by all four readers; "
              f"plain info refused {plain}")
    print(f"ok: {trials} checkpoints with one byte damaged, each refused by "
          f"info --verify, to-hf, --resume and --init-from, nothing written")
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
