#!/usr/bin/env python3
# ===- tokenize-bad-inputs.py - mlt-tokenize on bad inputs and kills -----=== #
#
# Part of mlt. Issue 36's checks of mlt-tokenize (tokenize-bad-inputs.test
# runs them): bad inputs are written into a work directory and the tool is
# run on each; a tokenization is killed outright at random moments. What
# must hold is stated in each command's text below; the script prints one
# line per case ("ok: CASE: what the tool said", checked by FileCheck) or
# "FAIL: CASE: why", and exits 1 when anything failed.
#
# ===----------------------------------------------------------------------=== #
"""usage:
  tokenize-bad-inputs.py bad-inputs TOOL SP BPE TEXT WORK
      Runs TOOL (mlt-tokenize, found on PATH) on bad inputs written into
      WORK: every run must exit non-zero with exactly one line on stderr,
      "mlt-tokenize: error: ...", no traceback, nothing on stdout, and leave
      the output's directory as it was (no output, no temporary). Odd but
      valid inputs (a 5000-digit integer or a surrogate beside the text, a
      byte order mark) must be accepted, adding the dataset alone. SP and BPE
      are directories holding a tokenizer.model and a tokenizer.json; TEXT a
      text to make documents of.
  tokenize-bad-inputs.py ids TOOL BPE TEXT WORK
      Tokenizers whose ids go beyond uint16 with a small vocabulary (an EOD
      or a template's BOS at 70000, an EOD at 65499, past Megatron's 65500
      ids) store int32 with every id intact; one beyond int32 (2**31) is
      refused with one line; a tokenizer.json saved with truncation and
      padding on stores whole, unpadded documents.
  tokenize-bad-inputs.py kill TOOL SP TEXT WORK [TRIALS [SEED]]
      Kills (SIGKILL) a tokenization of a few MB at random moments: after
      each kill no complete-looking output may exist unless it is the whole
      one, and the next run must remove the temporaries the killed one left
      (saying so), touch no other file (decoys named like them are kept),
      and write the same bytes as an uninterrupted run. Then: SIGTERM leaves
      nothing, even the moment a temporary is created (inotify says when);
      a temporary locked by a live run is kept and the run refused.
"""
import ctypes
import fcntl
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "Inputs"))
import data_tools  # noqa: E402  (documents_of, read_dataset)

ERROR = "mlt-tokenize: error: "
# What mlt-tokenize names its temporaries for the prefix "corpus".
TEMPORARY = re.compile(r"\.corpus\.(bin|idx|meta\.json)\.mlt-tokenize-"
                       r"[0-9]+-[0-9a-f]{8}\.tmp")
# What it writes: the dataset and the record of its tokenizer.
SUFFIXES = (".bin", ".idx", ".meta.json")
OUTPUTS = tuple("corpus" + suffix for suffix in SUFFIXES)


def listing(directory):
    """Every entry of `directory` with what identifies its content."""
    entries = {}
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            entries[name] = ("link", os.readlink(path))
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                entries[name] = ("file", hash(f.read()))
        else:
            entries[name] = (stat.S_IFMT(st.st_mode), st.st_ino)
    return entries


def describe_change(before, after):
    added = sorted(set(after) - set(before))
    gone = sorted(set(before) - set(after))
    changed = sorted(n for n in set(before) & set(after)
                     if before[n] != after[n])
    return f"added {added}, removed {gone}, changed {changed}"


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w",
              **({} if isinstance(data, bytes) else {"encoding": "utf-8"})) \
            as f:
        f.write(data)
    return path


class BadInputs:
    def __init__(self, tool, work):
        self.tool = tool
        self.work = work
        self.failed = 0
        self.passed = 0
        self.accepted_count = 0

    def out(self, name):
        """A fresh output directory holding a file of the user's."""
        directory = os.path.join(self.work, "out", name)
        os.makedirs(directory)
        write(os.path.join(directory, "notes.txt"), "the user's file\n")
        return directory

    def case(self, name, args, watch, stdout=subprocess.PIPE,
             file_size_limit=None, created=()):
        """Runs the tool with `args`; `watch` is the directory that must be
        as it was (plus `created`, names it may make), None for none."""
        before = listing(watch) if watch else None
        limit = None
        if file_size_limit is not None:
            def limit():
                resource.setrlimit(resource.RLIMIT_FSIZE,
                                   (file_size_limit, file_size_limit))
        result = subprocess.run([self.tool] + args, stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=subprocess.PIPE,
                                preexec_fn=limit, timeout=60)
        stderr = result.stderr.decode("utf-8", "backslashreplace")
        problems = []
        if result.returncode <= 0:
            problems.append(f"exit status {result.returncode}")
        if stderr.count("\n") != 1 or not stderr.endswith("\n"):
            problems.append("stderr is not one line")
        if not stderr.startswith(ERROR):
            problems.append(f"stderr does not start with '{ERROR}'")
        if "Traceback" in stderr:
            problems.append("a traceback")
        if result.stdout:
            problems.append(f"stdout: {result.stdout[:200]!r}")
        if watch:
            after = listing(watch)
            for made in created:
                after.pop(made, None)
            if after != before:
                problems.append(f"{watch}: {describe_change(before, after)}")
        if problems:
            self.failed += 1
            print(f"FAIL: {name}: {'; '.join(problems)}; stderr: {stderr!r}")
        else:
            self.passed += 1
            print(f"ok: {name}: {stderr.strip()}")

    def accepted(self, name, args, watch):
        """Runs the tool on valid input that looks odd: it must exit 0 with
        nothing on stderr, the summary on stdout, and add to `watch` the
        dataset, nothing else."""
        before = listing(watch)
        result = subprocess.run([self.tool] + args, stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=60)
        stdout = result.stdout.decode("utf-8", "backslashreplace").strip()
        stderr = result.stderr.decode("utf-8", "backslashreplace")
        problems = []
        if result.returncode != 0:
            problems.append(f"exit status {result.returncode}")
        if stderr:
            problems.append(f"stderr: {stderr!r}")
        after = listing(watch)
        added = sorted(set(after) - set(before))
        if added != sorted(OUTPUTS) or any(
                after[n] != before[n] for n in before):
            problems.append(f"{watch}: {describe_change(before, after)}")
        if problems:
            self.failed += 1
            print(f"FAIL: {name}: {'; '.join(problems)}")
        else:
            self.accepted_count += 1
            print(f"ok: {name}: accepted: {stdout}")


def bad_inputs(tool, sp, bpe, text, work):
    runs = BadInputs(tool, work)
    inputs = os.path.join(work, "in")
    os.makedirs(inputs)
    documents = data_tools.documents_of(text, 8)
    good_jsonl = "".join(json.dumps({"text": d}) + "\n"
                         for d in documents[:50]).encode()
    good_txt = "".join(d + "\n\n" for d in documents[:50]).encode()

    def given(name, data):
        return write(os.path.join(inputs, name), data)

    def tokenize(name, *inputs, tokenizer=sp, extra=(), **how):
        out = runs.out(name)
        runs.case(name, ["--tokenizer", tokenizer, "--output-prefix",
                         os.path.join(out, "corpus")] + list(extra)
                  + list(inputs), out, **how)

    # JSONL: each bad line after 50 good documents, so that the dataset's
    # temporaries exist when it is read; some with workers (the pool's
    # feeding thread reads the lines).
    deep = b"[" * 100000 + b"]" * 100000
    lines = {
        "surrogate": b'{"text": "a\\ud800b"}',
        "surrogate-low": b'{"text": "\\udfff"}',
        "deep-json": deep,
        "deep-json-in-object": b'{"text": "x", "meta": ' + deep + b"}",
        "array-line": b"[1, 2]",
        "string-line": b'"just text"',
        "no-key": b'{"body": "text"}',
        "number-text": b'{"text": 5}',
        "null-text": b'{"text": null}',
        "not-json": b'{"text": "unterminated',
        "bad-utf8-jsonl": b'{"text": "\xff"}',
        "encoded-surrogate-jsonl": b'{"text": "\xed\xa0\x80"}',
    }
    for name, line in lines.items():
        path = given(f"{name}.jsonl", good_jsonl + line + b"\n")
        tokenize(name, path)
        if name in ("surrogate", "deep-json", "not-json"):
            tokenize(f"{name}-workers", path, extra=["--workers", "2"])
    # Valid JSONL that looks odd, accepted: an integer beyond Python's
    # 4300-digit int() limit, a number beyond a double's range, an unpaired
    # surrogate, all beside the text; a byte order mark opening the file.
    odd = {
        "long-integer": b'{"text": "a", "n": ' + b"7" * 5000 + b"}",
        "huge-number": b'{"n": -1e400, "text": "a"}',
        "surrogate-elsewhere": b'{"text": "a", "meta": "\\ud800"}',
    }
    for name, line in odd.items():
        out = runs.out(name)
        runs.accepted(name, ["--tokenizer", sp, "--output-prefix",
                             os.path.join(out, "corpus"),
                             given(f"{name}.jsonl", good_jsonl + line
                                   + b"\n")], out)
    out = runs.out("byte-order-mark")
    runs.accepted("byte-order-mark", [
        "--tokenizer", sp, "--output-prefix", os.path.join(out, "corpus"),
        given("byte-order-mark.jsonl", b"\xef\xbb\xbf" + good_jsonl)], out)
    # Text: bad UTF-8 on line 451, after 50 documents (one document per
    # file, too), a multi-byte character cut at the end, nothing at all.
    path = given("bad-utf8.txt", good_txt + b"fine \xff\xfe text\n")
    tokenize("bad-utf8-txt", path)
    tokenize("bad-utf8-txt-workers", path, extra=["--workers", "2"])
    tokenize("bad-utf8-whole-file", path, extra=["--whole-files"])
    tokenize("cut-utf8-txt", given("cut.txt", good_txt + b"euro \xe2\x82"))
    tokenize("empty-txt", given("empty.txt", b""))
    tokenize("blank-txt", given("blank.txt", b"\n  \n\t\n\n"))
    tokenize("empty-jsonl", given("empty.jsonl", b""))
    tokenize("blank-jsonl", given("blank.jsonl", b"\n\n"))
    # Inputs that are not readable files.
    os.makedirs(os.path.join(inputs, "directory.txt"))
    tokenize("directory-input", os.path.join(inputs, "directory.txt"))
    tokenize("missing-input", os.path.join(inputs, "missing.txt"))
    os.symlink("/proc/self/mem", os.path.join(inputs, "io-error.txt"))
    tokenize("io-error-input", os.path.join(inputs, "io-error.txt"))
    if os.geteuid() != 0:  # (root reads any file)
        os.chmod(given("unreadable.txt", good_txt), 0)
        tokenize("unreadable-input", os.path.join(inputs, "unreadable.txt"))
    os.mkfifo(os.path.join(inputs, "fifo.txt"))
    tokenize("fifo-input", os.path.join(inputs, "fifo.txt"))
    tokenize("unknown-extension", given("table.csv", good_txt))
    tokenize("name-with-newline", os.path.join(inputs, "two\nlines.txt"))
    tokenize("name-not-utf8", os.path.join(inputs, os.fsdecode(b"\xff.txt")))
    good = given("good.txt", good_txt)

    # Outputs.
    def output(name, prefix, watch, extra=(), **how):
        runs.case(name, ["--tokenizer", sp, "--output-prefix", prefix]
                  + list(extra) + [good], watch, **how)

    out = runs.out("missing-directory")
    output("missing-directory", os.path.join(out, "none", "corpus"), out)
    out = runs.out("file-as-directory")
    output("file-as-directory", os.path.join(out, "notes.txt", "corpus"), out)
    out = runs.out("prefix-is-directory")
    output("prefix-is-directory", out + "/", out)
    output("prefix-is-dot", os.path.join(out, "."), out)
    out = runs.out("name-too-long")
    output("name-too-long", os.path.join(out, "x" * 240), out)
    out = runs.out("outputs-exist")
    write(os.path.join(out, "corpus.bin"), b"old")
    write(os.path.join(out, "corpus.idx"), b"old")
    output("outputs-exist", os.path.join(out, "corpus"), out)
    out = runs.out("output-is-input")
    os.symlink(os.path.abspath(good), os.path.join(out, "corpus.idx"))
    output("output-is-input", os.path.join(out, "corpus"), out, ["--force"])
    out = runs.out("output-is-directory")
    os.makedirs(os.path.join(out, "corpus.bin"))
    output("output-is-directory", os.path.join(out, "corpus"), out,
           ["--force"])
    if os.geteuid() != 0:
        out = runs.out("unwritable-directory")
        os.chmod(out, 0o555)
        output("unwritable-directory", os.path.join(out, "corpus"), out)
    output("unwritable-proc", "/proc/corpus", None)
    # Write errors: a file-size limit (the tool gets EFBIG, as it would
    # ENOSPC on a full disk), the old dataset kept; stdout full (the dataset
    # is written, the summary is not: an error all the same).
    out = runs.out("write-error")
    write(os.path.join(out, "corpus.bin"), b"old")
    write(os.path.join(out, "corpus.idx"), b"old")
    runs.case("write-error", ["--tokenizer", sp, "--output-prefix",
                              os.path.join(out, "corpus"), "--force",
                              given("all.txt", "".join(
                                  d + "\n\n" for d in documents))],
              out, file_size_limit=64 * 1024)
    out = runs.out("stdout-full")
    with open("/dev/full", "wb") as full:
        output("stdout-full", os.path.join(out, "corpus"), out, stdout=full,
               created=OUTPUTS)

    # Tokenizers.
    tokenizers = os.path.join(work, "tokenizers")

    def tokenizer_dir(name, files):
        directory = os.path.join(tokenizers, name)
        os.makedirs(directory)
        for file, data in files.items():
            write(os.path.join(directory, file), data)
        return directory

    with open(os.path.join(bpe, "tokenizer.json"), "rb") as f:
        bpe_json = f.read()
    tokenize("missing-tokenizer", good,
             tokenizer=os.path.join(tokenizers, "none.model"))
    tokenize("tokenizer-directory-empty", good,
             tokenizer=tokenizer_dir("empty", {}))
    tokenize("tokenizer-model-garbage", good,
             tokenizer=tokenizer_dir("garbage", {
                 "tokenizer.model": b"not a protobuf\n"}))
    tokenize("tokenizer-json-not-json", good,
             tokenizer=tokenizer_dir("not-json", {
                 "tokenizer.json": b"{not json"}))
    tokenize("tokenizer-json-deep", good,
             tokenizer=tokenizer_dir("deep", {
                 "tokenizer.json": b'{"model": ' + deep + b"}"}))
    tokenize("tokenizer-config-deep", good,
             tokenizer=tokenizer_dir("config-deep", {
                 "tokenizer.json": bpe_json,
                 "tokenizer_config.json": deep}))
    tokenize("tokenizer-config-not-json", good,
             tokenizer=tokenizer_dir("config-not-json", {
                 "tokenizer.json": bpe_json,
                 "tokenizer_config.json": b'{"eos_token": '}))
    out = runs.out("tokenizer-config-long-integer")
    runs.accepted("tokenizer-config-long-integer", [
        "--tokenizer", tokenizer_dir("config-long-integer", {
            "tokenizer.json": bpe_json,
            "tokenizer_config.json": b'{"eos_token": "<|end_of_text|>", '
                                     b'"model_max_length": ' + b"9" * 5000
                                     + b"}"}),
        "--output-prefix", os.path.join(out, "corpus"), good], out)
    tokenize("eod-token-unknown", good, tokenizer=bpe,
             extra=["--eod-token", "<nope>"])
    fifo = os.path.join(tokenizer_dir("fifo", {}), "tokenizer.model")
    os.mkfifo(fifo)
    tokenize("tokenizer-fifo", good, tokenizer=fifo)

    # Options.
    tokenize("unknown-option", good, extra=["--frobnicate"])
    tokenize("workers-zero", good, extra=["--workers", "0"])
    tokenize("workers-not-number", good, extra=["--workers", "many"])
    tokenize("json-key-empty", good, extra=["--json-key="])
    out = runs.out("no-tokenizer")
    runs.case("no-tokenizer", ["--output-prefix",
                               os.path.join(out, "corpus"), good], out)
    out = runs.out("no-inputs")
    runs.case("no-inputs", ["--tokenizer", sp, "--output-prefix",
                            os.path.join(out, "corpus")], out)

    print(f"{'ok' if not runs.failed else 'FAIL'}: {runs.passed} bad "
          f"inputs refused with one line, nothing left behind; "
          f"{runs.accepted_count} odd valid ones accepted; {runs.failed} "
          f"failed")
    return 1 if runs.failed else 0


def ids(tool, bpe, text, work):
    """Sparse ids and a tokenizer.json's truncation and padding."""
    import copy
    from tokenizers import Tokenizer
    documents = data_tools.documents_of(text, 8)[:40]
    docs = write(os.path.join(work, "docs.jsonl"), "".join(
        json.dumps({"text": d}) + "\n" for d in documents))
    with open(os.path.join(bpe, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    eos, bos = "<|end_of_text|>", "<|begin_of_text|>"

    def variant(name, change):
        s = copy.deepcopy(spec)
        change(s)
        directory = os.path.join(work, name)
        os.makedirs(directory)
        with open(os.path.join(directory, "tokenizer.json"), "w",
                  encoding="utf-8") as f:
            json.dump(s, f)
        return os.path.join(directory, "tokenizer.json")

    def renumber_eos(to):
        def change(s):
            s["model"]["vocab"][eos] = to
            for token in s["added_tokens"]:
                if token["content"] == eos:
                    token["id"] = to
        return change

    def renumber_bos_in_template(s):
        s["post_processor"]["special_tokens"][bos]["ids"] = [70000]

    def cut_and_pad(s):
        s["truncation"] = {"direction": "Right", "max_length": 8,
                           "strategy": "LongestFirst", "stride": 0}
        s["padding"] = {"strategy": {"Fixed": 16}, "direction": "Right",
                        "pad_to_multiple_of": None, "pad_id": 0,
                        "pad_type_id": 0, "pad_token": "<unk>"}

    failed = 0
    reference = None
    for name, change in (("plain", lambda s: None),
                         ("eos-70000", renumber_eos(70000)),
                         # (uint16 holds 65535, but Megatron's rule wants
                         # fewer than 65500 ids: 0 to 65498)
                         ("eos-65499", renumber_eos(65499)),
                         ("bos-70000-in-template", renumber_bos_in_template),
                         ("truncation-and-padding", cut_and_pad)):
        path = variant(name, change)
        prefix = os.path.join(work, name)
        result = subprocess.run([tool, "--tokenizer", path, "--output-prefix",
                                 prefix, docs], capture_output=True,
                                text=True, timeout=60)
        if result.returncode != 0:
            print(f"FAIL: {name}: exit status {result.returncode}: "
                  f"{result.stderr.strip()}")
            failed += 1
            continue
        code, stored = data_tools.read_dataset(prefix)
        plain = Tokenizer.from_file(os.path.join(bpe, "tokenizer.json"))
        tokenizer = Tokenizer.from_file(path)
        tokenizer.no_truncation()
        tokenizer.no_padding()
        eod = tokenizer.token_to_id(eos)
        expected = [tokenizer.encode(d).ids + [eod] for d in documents]
        if name == "truncation-and-padding":
            expected = [plain.encode(d).ids + [eod] for d in documents]
        dtype = {8: "uint16", 4: "int32"}[code]
        if [list(t) for t in stored] != expected:
            print(f"FAIL: {name}: the stored ids are not the tokenizer's")
            failed += 1
            continue
        if name == "plain":
            reference = stored
        elif name == "truncation-and-padding" and stored != reference:
            print(f"FAIL: {name}: not the plain tokenizer's documents")
            failed += 1
            continue
        largest = max(max(t) for t in stored)
        print(f"ok: {name}: {dtype}, {len(stored)} whole documents, ids to "
              f"{largest}; {result.stdout.strip()}")

    # An id beyond int32, the widest token type: refused with one line.
    path = variant("eos-2147483648", renumber_eos(2**31))
    prefix = os.path.join(work, "eos-2147483648")
    result = subprocess.run([tool, "--tokenizer", path, "--output-prefix",
                             prefix, docs], capture_output=True, text=True,
                            timeout=60)
    if (result.returncode == 0 or result.stdout
            or result.stderr.count("\n") != 1
            or not result.stderr.startswith(ERROR)
            or any(os.path.exists(prefix + s) for s in SUFFIXES)):
        print(f"FAIL: eos-2147483648: exit status {result.returncode}, "
              f"stdout {result.stdout!r}, stderr {result.stderr!r}")
        failed += 1
    else:
        print(f"ok: eos-2147483648: {result.stderr.strip()}")
    return 1 if failed else 0


# ---------------------------------------------------------------------------
# Kills
# ---------------------------------------------------------------------------


def make_decoys(directory):
    """Files a run must never remove: named almost like a temporary, or
    exactly like one but not a regular file."""
    names = [".corpus.bin.tmp-12345",  # (mlt-tokenize's names before)
             ".corpus.bin.mlt-tokenize-12345-0123abcd.tmp.keep",
             ".other.bin.mlt-tokenize-12345-0123abcd.tmp",
             "corpus.bin.mlt-tokenize-12345-0123abcd.tmp",
             ".corpus.bin.mlt-tokenize-12345-0123ABCD.tmp",
             ".corpus.txt.mlt-tokenize-12345-0123abcd.tmp",
             ".corpus.bin.mlt-tokenize--0123abcd.tmp",
             "notes.txt"]
    for name in names:
        write(os.path.join(directory, name), f"decoy {name}\n")
    os.symlink("notes.txt", os.path.join(
        directory, ".corpus.bin.mlt-tokenize-1-00000000.tmp"))
    os.makedirs(os.path.join(directory,
                             ".corpus.idx.mlt-tokenize-2-00000000.tmp"))
    write(os.path.join(directory, ".corpus.idx.mlt-tokenize-2-00000000.tmp",
                       "inside"), "decoy\n")


def others(directory):
    """The directory's entries but the outputs and real temporaries."""
    entries = listing(directory)
    for name in list(entries):
        if name in OUTPUTS or (
                TEMPORARY.fullmatch(name) and entries[name][0] == "file"):
            del entries[name]
    return entries


def leftovers(directory):
    return sorted(n for n in os.listdir(directory) if TEMPORARY.fullmatch(n)
                  and stat.S_ISREG(os.lstat(os.path.join(directory,
                                                         n)).st_mode))


def same_files(a, b):
    for suffix in (".bin", ".idx"):
        with open(a + suffix, "rb") as f, open(b + suffix, "rb") as g:
            if f.read() != g.read():
                return False
    return True


def wait_for_temporary(process, directory, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        if leftovers(directory):
            return True
        time.sleep(0.002)
    return False


IN_CREATE = 0x100  # (inotify.h)


def created_names(fd):
    """The names in the IN_CREATE events an inotify read gives."""
    data, names, at = os.read(fd, 65536), [], 0
    while at < len(data):
        size = struct.unpack_from("iIII", data, at)[3]
        names.append(os.fsdecode(data[at + 16:at + 16 + size].rstrip(b"\0")))
        at += 16 + size
    return names


def terminate_at_creation(command, directory, prefix_of_name):
    """Starts `command` and sends it SIGTERM as soon as a file whose name
    starts with `prefix_of_name` is created in `directory`. Returns the
    process and what went wrong (None when nothing did)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        process = subprocess.Popen(["true"], stderr=subprocess.PIPE)
        return process, f"inotify_init1: {os.strerror(ctypes.get_errno())}"
    problem = None
    try:
        if libc.inotify_add_watch(fd, os.fsencode(directory), IN_CREATE) < 0:
            problem = f"inotify_add_watch: {os.strerror(ctypes.get_errno())}"
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        while problem is None:
            if not select.select([fd], [], [], 30)[0]:
                problem = f"no {prefix_of_name}* made in 30 s"
            elif any(n.startswith(prefix_of_name)
                     for n in created_names(fd)):
                break
        process.send_signal(signal.SIGTERM)
    finally:
        os.close(fd)
    return process, problem


def kill(tool, sp, text, work, trials, seed):
    rng = random.Random(seed)
    documents = data_tools.documents_of(text, 8)
    big = write(os.path.join(work, "big.txt"),
                "".join(d + "\n\n" for d in documents) * 6)
    reference = os.path.join(work, "reference")
    # (the shorter of two runs: one slowed by a busy machine would put
    # every kill after the end)
    durations = []
    for force in ([], ["--force"]):
        start = time.monotonic()
        subprocess.run([tool, "--tokenizer", sp, "--output-prefix", reference,
                        big] + force, check=True, stdout=subprocess.DEVNULL,
                       timeout=120)
        durations.append(time.monotonic() - start)
    duration = min(durations)
    directory = os.path.join(work, "kill")
    os.makedirs(directory)
    make_decoys(directory)
    decoys = others(directory)
    prefix = os.path.join(directory, "corpus")
    command = [tool, "--tokenizer", sp, "--output-prefix", prefix, big]
    print(f"seed {seed}; an uninterrupted run takes {duration:.2f} s")
    failed, left_behind = 0, 0

    def fail(message):
        nonlocal failed
        failed += 1
        print(f"FAIL: {message}")

    for trial in range(trials):
        workers = ["--workers", "2"] if trial % 2 else []
        # (a session of its own: workers outliving a killed run are found,
        # holding its stderr open, and ended with their process group)
        process = subprocess.Popen(command + workers,
                                   stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE,
                                   start_new_session=True)
        if trial == trials - 1:  # (once at least while it writes: the
            # writing takes most of a run, far more than 50 ms)
            wait_for_temporary(process, directory)
            delay = rng.uniform(0, 0.05)
        else:
            delay = rng.uniform(0, duration * 1.1)
        time.sleep(delay)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        try:
            stderr = process.communicate(timeout=20)[1].decode()
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            fail(f"trial {trial}: 20 s after the kill, a process of the run "
                 f"(a worker) still lives")
            break
        finished = process.returncode == 0
        if not finished and process.returncode != -signal.SIGKILL:
            fail(f"trial {trial}: exit status {process.returncode}: "
                 f"{stderr.strip()}")
            continue
        left = leftovers(directory)
        complete = os.path.exists(prefix + ".idx")
        if complete and not (os.path.exists(prefix + ".bin")
                             and os.path.exists(prefix + ".meta.json")
                             and same_files(prefix, reference)):
            fail(f"trial {trial}: a complete-looking output that is not the "
                 f"whole one")
        if finished and (left or not complete):
            fail(f"trial {trial}: finished, yet outputs {complete}, "
                 f"temporaries {left}")
        if others(directory) != decoys:
            fail(f"trial {trial}: "
                 f"{describe_change(decoys, others(directory))}")
        left_behind += bool(left)
        # The next run: the leftovers removed and named, the same bytes.
        force = ["--force"] if os.path.exists(prefix + ".bin") else []
        rerun = subprocess.run(command + force, capture_output=True, text=True,
                               timeout=120)
        said = [line for line in rerun.stderr.splitlines()
                if "removed" in line]
        named = sorted(os.path.basename(p) for line in said
                       for p in line.split(": ", 1)[1].split(", "))
        if rerun.returncode != 0:
            fail(f"trial {trial}: the next run failed: {rerun.stderr.strip()}")
        elif named != left or len(said) > 1:
            fail(f"trial {trial}: {left} left, the next run said {said}")
        elif leftovers(directory) or others(directory) != decoys:
            fail(f"trial {trial}: after the next run: "
                 f"{describe_change(decoys, others(directory))}, "
                 f"temporaries {leftovers(directory)}")
        elif not same_files(prefix, reference):
            fail(f"trial {trial}: the next run's output differs from an "
                 f"uninterrupted run's")
        else:
            state = ("finished" if finished else
                     f"killed after {delay:.2f} s, "
                     f"{len(left)} temporar{'ies' if len(left) != 1 else 'y'}"
                     f" left" + (", the output in place" if complete else ""))
            print(f"trial {trial}{' (2 workers)' if workers else ''}: "
                  f"{state}; the next run: "
                  f"{repr(said[0]) if said else 'nothing to remove'}, the "
                  f"bytes of an uninterrupted run")
        for suffix in SUFFIXES:
            if os.path.exists(prefix + suffix):
                os.unlink(prefix + suffix)
    if not failed and not left_behind:
        fail("no trial left a temporary to remove")
    if not failed:
        print(f"ok: {trials} kills at random moments: no partial output, the "
              f"temporaries removed by the next run, decoys kept")

    # SIGTERM (a scheduler's): cleaned up at once, one line.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    wait_for_temporary(process, directory)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=60)[1].decode()
    if (process.returncode != 130 or stderr.count("\n") != 1
            or leftovers(directory)
            or any(os.path.exists(prefix + s) for s in SUFFIXES)
            or others(directory) != decoys):
        fail(f"SIGTERM: exit status {process.returncode}, stderr {stderr!r}, "
             f"temporaries {leftovers(directory)}")
    else:
        print(f"ok: SIGTERM: {stderr.strip()}; nothing left")

    # SIGTERM the moment a temporary is created (inotify says when): the
    # interruption comes between the file's creation and the writer's record
    # of it, and must remove it all the same. In turn: the .bin's temporary,
    # the .idx's and the .meta.json's. The run may yet write the whole
    # dataset (its renames being held together: then it exits 0, or 130
    # saying so), at the .bin's too where this watcher is slower to send the
    # signal than the run to end (a busy machine: the small input takes
    # milliseconds); never part of it, nor leave a temporary.
    small = write(os.path.join(work, "small.txt"),
                  "".join(d + "\n\n" for d in documents[:20]))
    small_reference = os.path.join(work, "small-reference")
    subprocess.run([tool, "--tokenizer", sp, "--output-prefix",
                    small_reference, small], check=True,
                   stdout=subprocess.DEVNULL, timeout=60)
    quick = [tool, "--tokenizer", sp, "--output-prefix", prefix, small]
    runs, interrupted = 12, 0
    for run in range(runs):
        which = (".corpus.bin.", ".corpus.idx.", ".corpus.meta.json.")[run % 3]
        process, problem = terminate_at_creation(quick, directory, which)
        stderr = process.communicate(timeout=60)[1].decode()
        status = f"exit status {process.returncode}, stderr {stderr!r}"
        complete = [os.path.exists(prefix + s) for s in SUFFIXES]
        whole, none = all(complete), not any(complete)
        if problem:
            pass
        elif leftovers(directory) or not (whole or none):
            problem = (f"{status}, temporaries {leftovers(directory)}, "
                       f"outputs {complete}")
        elif process.returncode == 130 and (stderr.count("\n") != 1
                                            or not stderr.startswith(ERROR)):
            problem = status
        elif none and process.returncode != 130:
            problem = f"{status}, yet no outputs"
        elif whole and ("nothing written" in stderr
                        or process.returncode not in (0, 130)
                        or not same_files(prefix, small_reference)):
            problem = f"{status}, the outputs in place"
        interrupted += none
        if not problem and others(directory) != decoys:
            problem = describe_change(decoys, others(directory))
        # (the outputs go either way: the checks below start without them)
        for suffix in SUFFIXES:
            if os.path.exists(prefix + suffix):
                os.unlink(prefix + suffix)
        if problem:
            fail(f"SIGTERM as {which}* is created, run {run}: {problem}")
            break
    else:
        print(f"ok: SIGTERM as a temporary is created: {runs} runs, "
              f"{interrupted} interrupted with nothing left, the others "
              f"finished whole")

    # A temporary of a live run (its lock held here): kept, the run refused;
    # once the lock is gone it is a dead run's, and removed.
    live = os.path.join(directory,
                        ".corpus.bin.mlt-tokenize-4242-0123abcd.tmp")
    with open(live, "wb") as f:
        fcntl.lockf(f.fileno(), fcntl.LOCK_EX)
        refused = subprocess.run(command, capture_output=True, text=True,
                                 timeout=60)
    if (refused.returncode == 0 or refused.stderr.count("\n") != 1
            or not refused.stderr.startswith(ERROR)
            or not os.path.exists(live) or os.path.exists(prefix + ".bin")):
        fail(f"a live run's temporary: exit status {refused.returncode}, "
             f"{refused.stderr!r}")
    else:
        print(f"ok: live: {refused.stderr.strip()}")
    after = subprocess.run(command, capture_output=True, text=True,
                           timeout=120)
    if after.returncode != 0 or os.path.exists(live):
        fail(f"once unlocked: exit status {after.returncode}, "
             f"{after.stderr!r}")
    else:
        print(f"ok: unlocked: {after.stderr.strip()}")
    return 1 if failed else 0


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    command, args = argv[1], argv[2:]
    tool = shutil.which(args[0]) if args else None
    if tool is None:
        print(f"FAIL: cannot find the tool {args[:1]}")
        return 2
    work = args[-1] if command != "kill" else args[3]
    os.makedirs(work, exist_ok=True)
    if command == "bad-inputs" and len(args) == 5:
        return bad_inputs(tool, *args[1:4], work)
    if command == "ids" and len(args) == 4:
        return ids(tool, args[1], args[2], work)
    if command == "kill" and 4 <= len(args) <= 6:
        trials = int(args[4]) if len(args) > 4 else 5
        seed = int(args[5]) if len(args) > 5 else random.randrange(10**6)
        return kill(tool, args[1], args[2], work, trials, seed)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
