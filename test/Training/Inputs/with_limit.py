#!/usr/bin/env python3
"""Runs a command under an address-space limit, as `ulimit -v` would
(standard library only; lit's shell has no ulimit).

  with_limit.py MIB SECONDS [--stack STACK_MIB] COMMAND...

Sets RLIMIT_AS to MIB mebibytes (and with --stack, RLIMIT_STACK, the stack
each new thread reserves, to STACK_MIB) and runs COMMAND, passing its
output and exit status through; a command still running after SECONDS is
killed and reported ("timed out", exit 124): what a hang looks like in a
test.
"""
import resource
import subprocess
import sys


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    limit = int(argv[1]) << 20
    command = argv[3:]
    stack = None
    if command[:1] == ["--stack"]:
        stack = int(command[1]) << 20
        command = command[2:]

    def limited():
        if stack is not None:
            resource.setrlimit(resource.RLIMIT_STACK, (stack, stack))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    try:
        return subprocess.run(command, preexec_fn=limited,
                              timeout=float(argv[2])).returncode
    except subprocess.TimeoutExpired:
        print(f"with_limit.py: {command[0]} timed out after {argv[2]} s",
              file=sys.stderr)
        return 124


if __name__ == "__main__":
    sys.exit(main(sys.argv))
