#!/usr/bin/env python3
"""Runs mlt-run with outputs it must refuse and checks each refusal.

  bad_outputs.py WORK -- MLT-RUN-COMMAND...

For every output flag (--save-checkpoint, --save-hf, --tensorboard,
--log-json, --emit-plan, --trace) and every kind of path no run may write (the root
directory, '.', '..', paths under /proc, /sys and /dev, a name longer than
255 bytes, a missing parent, a parent that is a file, a FIFO, a symbolic
link, a directory where a file goes, a file where a directory goes, a
directory of the user's for --save-hf, the data file itself, two outputs of
one path), the command (a short training) must exit 1 with one line
"mlt-run: error: <flag>...", before its first step (no "step" line), and
leave WORK's files as they were (nothing created, removed or changed; the
user's directory and data intact). Prints a line per flag with the cases
refused; exits 1 at the first failure. Standard library only.
"""
import hashlib
import os
import shutil
import subprocess
import sys

FLAGS = {  # flag: whether it writes a directory
    "--save-checkpoint": True,
    "--save-hf": True,
    "--tensorboard": True,
    "--log-json": False,
    "--emit-plan": False,
    "--trace": False,
}


def snapshot(directory):
    state = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                state[path] = os.path.islink(path) and os.readlink(path)
            else:
                with open(path, "rb") as f:
                    state[path] = hashlib.sha256(f.read()).hexdigest()
    return state


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__)
        return 2
    work, command = os.path.abspath(argv[1]), argv[3:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    data = os.path.join(work, "data.txt")
    with open(data, "w") as f:
        f.write("In the beginning God created the heaven and the earth. " * 40)
    os.mkfifo(os.path.join(work, "fifo"))
    with open(os.path.join(work, "file"), "w") as f:
        f.write("a file of the user's\n")
    os.makedirs(os.path.join(work, "users"))
    with open(os.path.join(work, "users", "notes.txt"), "w") as f:
        f.write("mine\n")
    os.symlink("file", os.path.join(work, "link"))
    os.makedirs(os.path.join(work, "dir"))

    cases = {
        "root": "/", "dot": ".", "dotdot": "..",
        "proc": "/proc/mlt-output", "sys": "/sys/mlt-output",
        "dev": "/dev/mlt-output",
        "long name": os.path.join(work, "x" * 256),
        "missing parent": os.path.join(work, "missing", "out"),
        "parent a file": os.path.join(work, "file", "out"),
        "fifo": os.path.join(work, "fifo"),
        "symlink": os.path.join(work, "link"),
    }
    before = snapshot(work)
    cwd = os.path.join(work, "dir")
    for flag, directory in FLAGS.items():
        flag_cases = dict(cases)
        if directory:
            flag_cases["a file there"] = os.path.join(work, "file")
        else:
            flag_cases["a directory there"] = os.path.join(work, "dir")
            flag_cases["the data"] = data
        if flag == "--save-hf":
            flag_cases["the user's directory"] = os.path.join(work, "users")
        refused = []
        for case, path in flag_cases.items():
            run = command + ["--data", data, flag, path]
            result = subprocess.run(run, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, timeout=300)
            out = result.stdout.decode(errors="replace")
            err = result.stderr.decode(errors="replace").strip().splitlines()
            what = f"{flag} {case} ({path[:60]})"
            if result.returncode != 1 or len(err) != 1 or \
                    not err[0].startswith(f"mlt-run: error: {flag}"):
                print(f"FAIL: {what}: exit status {result.returncode}, "
                      f"stderr {err}")
                return 1
            if any(line.startswith("step") for line in out.splitlines()):
                print(f"FAIL: {what}: refused after training: {err[0]}")
                return 1
            if snapshot(work) != before:
                print(f"FAIL: {what}: the files under {work} changed")
                return 1
            refused.append(case)
        print(f"ok: {flag}: {len(refused)} refused before the first step, "
              f"nothing written: {', '.join(refused)}")
    # Two outputs of one path.
    same = os.path.join(work, "same.json")
    result = subprocess.run(command + ["--data", data, "--log-json", same,
                                       "--trace", same],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = result.stderr.decode().strip().splitlines()
    if result.returncode != 1 or len(err) != 1 or os.path.exists(same):
        print(f"FAIL: two outputs of one path: {result.returncode} {err}")
        return 1
    print("ok: two outputs of one path: " + err[0])
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
