#!/usr/bin/env python3
"""Runs a command under an address-space limit, as `ulimit -v` would
(standard library only; lit's shell has no ulimit).

  with_limit.py MIB SECONDS COMMAND...

Sets RLIMIT_AS to MIB mebibytes and runs COMMAND, passing its output and
exit status through; a command still running after SECONDS is killed and
reported ("timed out", exit 124): what a hang looks like in a test.
"""
import resource
import subprocess
import sys


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    limit = int(argv[1]) << 20

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        return subprocess.run(argv[3:], preexec_fn=limited,
                              timeout=float(argv[2])).returncode
    except subprocess.TimeoutExpired:
        print(f"with_limit.py: {argv[3]} timed out after {argv[2]} s",
              file=sys.stderr)
        return 124


if __name__ == "__main__":
    sys.exit(main(sys.argv))
