#!/usr/bin/env python3
# ===- run_blocks.py - run the documentation's runnable shell blocks -----=== #
#
# Part of mlt. The guides (README.md, docs/*.md) mark the shell examples
# that run on a CPU in a couple of seconds with the fence info string
# `sh runnable`:
#
#   ```sh runnable
#   mlt-run $MLT_SRC/models/llama/tiny.mlir --batch 4 --seq-len 64 --steps 2
#   ```
#
# This script extracts every such block and runs it with
# `bash -e -o pipefail`, each in a fresh directory of its own, with:
#   - the build's tools first on PATH (lit's PATH already has them; or
#     --bin-dir DIR), so a block calls `mlt-run`, not `build/bin/mlt-run`;
#   - MLT_SRC naming the repository, so a block reads
#     `$MLT_SRC/models/llama/tiny.mlir` whatever its directory;
#   - with --python PY, `python3` resolving to PY (the Python that
#     mlt-tokenize runs with, which has sentencepiece and tokenizers);
#   - stdin from /dev/null and a time limit per block (--timeout);
#   - OPENBLAS_NUM_THREADS=1 unless set: the CPU backend's ranks are threads,
#     and OpenBLAS's own threads beside them only wait on a small machine
#     (the results do not depend on it).
# Every block runs, even after a failure; each failure is reported as
# `FILE:LINE: ...` (the line of the block's opening fence), with the block
# and the end of what it printed, and the exit status is 1. A directory is
# removed once its block passes and kept when it fails.
#
# It also checks the guides' relative Markdown links, `[text](path)`, for a
# file or directory that exists (code spans are not links), and refuses a
# `runnable` fence of another language. Standard library only.
#
# Usage (test/Docs/runnable-blocks.test runs it under lit):
#   run_blocks.py [--src DIR] [--bin-dir DIR] [--python PY] [--work-dir DIR]
#                 [--timeout S] [--list] [FILE.md ...]
# With no files: DIR/README.md and DIR/docs/*.md.
#
# ===----------------------------------------------------------------------=== #

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# An opening or closing fence: up to three spaces, then ``` or ~~~ (or
# longer), then the info string.
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
# Inline Markdown links and images: [text](target) or [text](target "title").
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
SHELLS = ("sh", "bash")


class Block:
    def __init__(self, path, line, text):
        self.path = path
        self.line = line
        self.text = text

    def where(self, root):
        return "%s:%d" % (os.path.relpath(self.path, root), self.line)


def scan(path):
    """Returns (runnable blocks, problems, prose lines) of one Markdown file.

    problems: (line, message) pairs. prose: (line, text) of every line
    outside fenced blocks, for the link check."""
    blocks, problems, prose = [], [], []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None  # (marker char, length, line, runnable, body lines)
    for number, line in enumerate(lines, start=1):
        match = FENCE.match(line)
        if fence is None:
            if not match:
                prose.append((number, line))
                continue
            marker, info = match.group(1), match.group(2).strip()
            words = info.split()
            runnable = "runnable" in words
            if runnable and (not words or words[0] not in SHELLS):
                problems.append((number, "a runnable block must be fenced "
                                 "as ```sh runnable, not ```%s" % info))
                runnable = False
            fence = (marker[0], len(marker), number, runnable, [])
            continue
        char, length, start, runnable, body = fence
        if (match and match.group(1)[0] == char and
                len(match.group(1)) >= length and not match.group(2).strip()):
            if runnable:
                blocks.append(Block(path, start, "\n".join(body) + "\n"))
            fence = None
        else:
            body.append(line)
    if fence is not None:
        problems.append((fence[2], "the fence opened here is never closed"))
    return blocks, problems, prose


def check_links(path, prose):
    """The relative links of `prose` whose target does not exist."""
    problems = []
    base = os.path.dirname(path)
    for number, line in prose:
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, mailto:, or an anchor in this page
            file_part = target.split("#", 1)[0]
            if file_part and not os.path.exists(os.path.join(base, file_part)):
                problems.append((number, "the link to '%s' names no file" %
                                 target))
    return problems


def python_shim(python, directory):
    """A directory whose `python3` runs `python`."""
    os.makedirs(directory, exist_ok=True)
    shim = os.path.join(directory, "python3")
    if os.path.lexists(shim):
        os.unlink(shim)
    os.symlink(os.path.abspath(python), shim)
    return directory


def tail(text, lines=40):
    parts = text.rstrip("\n").split("\n")
    if len(parts) > lines:
        parts = ["[... %d lines before ...]" % (len(parts) - lines)] + \
            parts[-lines:]
    return "\n".join("  | " + part for part in parts)


def run_block(block, root, env, work_dir, timeout):
    """Runs one block; returns (ok, seconds, message)."""
    name = re.sub(r"[^A-Za-z0-9]+", "-", block.where(root)).strip("-")
    directory = tempfile.mkdtemp(prefix=name + ".", dir=work_dir)
    script = directory + ".sh"
    with open(script, "w", encoding="utf-8") as f:
        f.write(block.text)
    start = time.monotonic()
    try:
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", script], cwd=directory, env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, timeout=timeout)
        output = result.stdout.decode("utf-8", "replace")
        status = result.returncode
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode("utf-8", "replace")
        status = None
    seconds = time.monotonic() - start
    if status == 0:
        shutil.rmtree(directory, ignore_errors=True)
        os.unlink(script)
        return True, seconds, ""
    why = ("timed out after %d s" % timeout if status is None
           else "exited with status %d" % status)
    message = "%s: runnable block failed: %s (in %s)\n%s\n  output:\n%s" % (
        block.where(root), why, directory,
        "\n".join("  $ " + l for l in block.text.rstrip("\n").split("\n")),
        tail(output))
    return False, seconds, message


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--src", default=os.path.join(here, "..", ".."),
                        help="the repository (MLT_SRC); default: this "
                        "script's ../..")
    parser.add_argument("--bin-dir", help="put DIR first on PATH (the "
                        "build's bin directory, or a copy of its tools)")
    parser.add_argument("--python", help="the Python that `python3` in a "
                        "block runs (lit's %%mlt_python)")
    parser.add_argument("--work-dir", help="where the blocks' directories "
                        "go (default: a new temporary directory)")
    parser.add_argument("--timeout", type=float, default=180,
                        help="seconds a block may take (default 180)")
    parser.add_argument("--list", action="store_true",
                        help="list the runnable blocks and run nothing")
    parser.add_argument("files", nargs="*", help="Markdown files (default: "
                        "README.md and docs/*.md)")
    args = parser.parse_args(argv)

    root = os.path.abspath(args.src)
    files = args.files or ([os.path.join(root, "README.md")] +
                           sorted(glob.glob(os.path.join(root, "docs",
                                                         "*.md"))))
    blocks, problems = [], []
    for path in files:
        found, wrong, prose = scan(path)
        blocks += found
        problems += [(path, line, text) for line, text in
                     wrong + check_links(path, prose)]
    for path, line, text in problems:
        print("%s:%d: %s" % (os.path.relpath(path, root), line, text))
    if not blocks:
        print("error: no ```sh runnable block in %s" % ", ".join(files))
        return 1
    if args.list:
        for block in blocks:
            print(block.where(root))
        return 1 if problems else 0

    work_dir = args.work_dir or tempfile.mkdtemp(prefix="mlt-doc-blocks.")
    os.makedirs(work_dir, exist_ok=True)
    env = dict(os.environ)
    path = [env.get("PATH", "")]
    if args.python:
        path.insert(0, python_shim(args.python, os.path.join(work_dir,
                                                             "python-bin")))
    if args.bin_dir:
        path.insert(0, os.path.abspath(args.bin_dir))
    env["PATH"] = os.pathsep.join(path)
    env["MLT_SRC"] = root
    env.setdefault("OPENBLAS_NUM_THREADS", "1")

    failures, total = 0, 0.0
    for block in blocks:
        ok, seconds, message = run_block(block, root, env, work_dir,
                                         args.timeout)
        total += seconds
        if ok:
            print("ok   %s (%.1f s)" % (block.where(root), seconds))
        else:
            failures += 1
            print("FAIL %s (%.1f s)" % (block.where(root), seconds))
            print(message)
        sys.stdout.flush()
    print("%d runnable blocks of %d files: %d passed, %d failed, %.1f s" %
          (len(blocks), len(files), len(blocks) - failures, failures, total))
    if not args.work_dir and not failures:
        shutil.rmtree(work_dir, ignore_errors=True)
    return 1 if failures or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
