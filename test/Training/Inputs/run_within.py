#!/usr/bin/env python3
"""Runs a command with a bound on its time, and says how it ended.

  run_within.py SECONDS COMMAND...

Prints the command's output (stdout and stderr, merged as 2>&1 would), then
"exit N" with its status, or "killed after SECONDS s" when it ran longer
(it and every process it started are killed then); exits 0 either way, so
that a test checks the status in the output. Standard library only.
"""
import os
import signal
import subprocess
import sys


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    seconds, command = float(argv[1]), argv[2:]
    process = subprocess.Popen(command, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        out, _ = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        sys.stdout.write(out)
        print(f"killed after {seconds:g} s")
        return 0
    sys.stdout.write(out)
    print(f"exit {process.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
