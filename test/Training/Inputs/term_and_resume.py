#!/usr/bin/env python3
"""Stops a training run with SIGTERM and resumes it for one step.

  term_and_resume.py DELAY DIR -- MLT-RUN-COMMAND...

Starts the command (an mlt-run training with --save-checkpoint DIR and a
large --steps), sends it SIGTERM DELAY seconds after its first step, and
prints the last
line it printed and its exit status; then runs it again with --resume DIR
and --steps one past the step it stopped after, and prints that run's first
line and its exit status. Standard library only.
"""
import re
import signal
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 5 or argv[3] != "--":
        print(__doc__)
        return 2
    delay, directory, command = float(argv[1]), argv[2], argv[4:]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    # Once it trains (compiling the model first may take a while on a busy
    # machine), a little longer.
    out = []
    for line in process.stdout:
        out.append(line.rstrip("\n"))
        if line.startswith("step"):
            break
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    out += process.communicate()[0].strip().splitlines()
    print(out[-1] if out else "(nothing printed)")
    print(f"exit {process.returncode}")
    match = re.search(r"after step (\d+)", out[-1] if out else "")
    if not match:
        return 1
    resumed = list(command)
    resumed[resumed.index("--steps") + 1] = str(int(match.group(1)) + 1)
    result = subprocess.run(resumed + ["--resume", directory],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = result.stdout.strip().splitlines()
    print(lines[0] if lines else "(nothing printed)")
    print(f"exit {result.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
