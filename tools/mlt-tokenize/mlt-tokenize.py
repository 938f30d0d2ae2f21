#!/usr/bin/env python3
# ===- mlt-tokenize.py - text to a Megatron indexed dataset --------------=== #
#
# Part of mlt. Tokenizes text with a model's own tokenizer and writes
# PREFIX.bin + PREFIX.idx, Megatron-Core's MMapIndexedDataset, byte for byte
# as Megatron's tools/preprocess_data.py writes them for the same tokens
# (one sequence per document, lengths, pointers and document indices as its
# _IndexWriter lays them out; see include/mlt/Runtime/io/IndexedDataset.h).
# `mlt-run --data PREFIX` trains on the result. Beside them, PREFIX.meta.json
# records which tokenizer made the tokens: its files (the tokenizer and the
# tokenizer_config.json and special_tokens_map.json beside it), each with
# its absolute path and XXH3-64 hash, which mlt-run checks before it copies
# them into an HF export (include/mlt/Runtime/io/ExportFiles.h).
#
# Tokenizers come from well-kept libraries, never our own: SentencePiece
# (`tokenizer.model`, LLaMA-2) through PyPI's sentencepiece, and Hugging
# Face's `tokenizer.json` (LLaMA-3's BPE) through PyPI's tokenizers. Each
# document is tokenized as Megatron does it: the tokenizer's BOS first
# (SentencePiece: its bos id; tokenizer.json: its post-processor's template,
# which for LLaMA-3 puts <|begin_of_text|> first), then, with --append-eod
# (the default), the tokenizer's EOS id as the end-of-document token.
#
# Nothing partial is ever left: the outputs are written to temporary files
# beside them (.NAME.bin.mlt-tokenize-PID-TAG.tmp, locked while their run
# lives) and renamed into place at the end, the .idx last; any error removes
# them and prints one line, "mlt-tokenize: error: ...". The .meta.json comes
# before the .idx too, so that a dataset is never beside another's record.
# The temporaries of a
# run killed outright (kill -9, a lost node) are removed by the next run for
# the same prefix, which says so; a run finding another live one writing the
# same prefix is refused.
#
# ===----------------------------------------------------------------------=== #
"""usage: mlt-tokenize --tokenizer PATH --output-prefix PREFIX [options] INPUT...

Turns text into a Megatron indexed dataset, PREFIX.bin + PREFIX.idx, with a
model's own tokenizer, for `mlt-run --data PREFIX`; and PREFIX.meta.json, the
record of the tokenizer (its files' paths and XXH3 hashes: the tokenizer, and
the tokenizer_config.json and special_tokens_map.json beside it), which
mlt-run's HF exports copy the tokenizer by.

Inputs (by extension):
  FILE.txt            plain UTF-8 text; documents are separated by one or
                      more blank lines (lines of only spaces count as blank),
                      each document's lines joined by "\\n"; --whole-files
                      makes each .txt file one document
  FILE.jsonl          one JSON object per line, its --json-key string a
                      document (Megatron's preprocess_data.py input)

Options:
  --tokenizer PATH    tokenizer.model (SentencePiece, LLaMA-2),
                      tokenizer.json (Hugging Face tokenizers, LLaMA-3), or
                      a model directory holding one (tokenizer.json first)
  --output-prefix P   writes P.bin, P.idx and P.meta.json (refused when
                      one exists, unless --force)
  --json-key KEY      the text of a .jsonl line (default: text)
  --whole-files       each .txt input is one document
  --append-eod        end each document with the tokenizer's EOS id (the
                      default, as Megatron's --append-eod)
  --no-append-eod     do not
  --eod-token TOKEN   the end-of-document token of a tokenizer.json (default:
                      tokenizer_config.json's eos_token beside it, else the
                      first of <|end_of_text|>, </s>, <|endoftext|>, <eos>
                      that the vocabulary holds)
  --no-bos            no BOS token before each document
  --workers N         tokenizing processes (default 1)
  --force             replace existing outputs
  -h, --help          this text

Token ids are uint16 when the vocabulary has fewer than 65500 ids, else int32
(Megatron's DType.optimal_dtype), counting the tokenizer's largest id as well
(a sparse vocabulary). Progress goes to stderr (documents/s, MB/s); a summary
line to stdout at the end. Errors are one line on stderr and leave nothing
behind; temporaries of an earlier run killed outright are removed (and named
on stderr).
"""

import contextlib
import errno
import fcntl
import json
import multiprocessing
import os
import re
import secrets
import signal
import stat
import struct
import sys
import time
from array import array

PROG = "mlt-tokenize"

# Megatron's MMapIndexedDataset index: magic, version 1, dtype codes.
INDEX_MAGIC = b"MMIDIDX\x00\x00"
DTYPE_UINT16, DTYPE_INT32 = 8, 4
# Megatron's DType.optimal_dtype: uint16 below this many ids.
UINT16_VOCAB_LIMIT = 65500
# int32, the widest token type here: ids up to this one.
INT32_LARGEST = 2**31 - 1
# tokenizer.json's end-of-document token when nothing names it, in order.
EOD_CANDIDATES = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")
# The outputs: the dataset, and the record of its tokenizer.
META_SUFFIX = ".meta.json"
SUFFIXES = (".bin", ".idx", META_SUFFIX)
# The files that configure a tokenizer, recorded with it when they lie beside
# it (the names AutoTokenizer reads; HFModelDirectory.h lists the same).
TOKENIZER_COMPANIONS = ("tokenizer_config.json", "special_tokens_map.json")


class Failure(Exception):
    """A user error: printed as one line, exit status 1."""


# ---------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------


def parse_arguments(argv):
    options = {
        "tokenizer": None, "output_prefix": None, "json_key": "text",
        "whole_files": False, "append_eod": True, "eod_token": None,
        "bos": True, "workers": 1, "force": False, "inputs": [],
    }
    valued = {"--tokenizer": "tokenizer", "--output-prefix": "output_prefix",
              "--json-key": "json_key", "--eod-token": "eod_token",
              "--workers": "workers"}
    flags = {"--whole-files": ("whole_files", True),
             "--append-eod": ("append_eod", True),
             "--no-append-eod": ("append_eod", False),
             "--no-bos": ("bos", False), "--force": ("force", True)}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        name, has_value, value = arg, False, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
            has_value = True
        if name in flags:
            if has_value:
                raise Failure(f"{name} takes no value")
            key, flag_value = flags[name]
            options[key] = flag_value
        elif name in valued:
            if not has_value:
                if i + 1 >= len(argv):
                    raise Failure(f"{name} needs a value")
                i += 1
                value = argv[i]
            if value == "":
                raise Failure(f"{name}: expected a value, got an empty one")
            options[valued[name]] = value
        elif arg.startswith("-") and arg != "-":
            raise Failure(f"unknown option '{name}' (see --help)")
        else:
            options["inputs"].append(arg)
        i += 1
    if options["tokenizer"] is None:
        raise Failure("--tokenizer is required (tokenizer.model or "
                      "tokenizer.json)")
    if options["output_prefix"] is None:
        raise Failure("--output-prefix is required")
    if not options["inputs"]:
        raise Failure("no input: name .txt or .jsonl files")
    try:
        options["workers"] = int(options["workers"])
    except ValueError:
        raise Failure(f"--workers: expected an integer, got "
                      f"'{options['workers']}'")
    if not 1 <= options["workers"] <= 1024:
        raise Failure(f"--workers must be 1 to 1024, got {options['workers']}")
    return options


# ---------------------------------------------------------------------------
# Paths: inputs are regular files, outputs replace nothing that is not theirs
# ---------------------------------------------------------------------------


def kind_of(mode):
    for test, name in ((stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_input(path, directory_too=False):
    """Fails unless `path` is a regular file (a FIFO would block a read)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise Failure(f"{path}: does not exist")
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Failure(f"{path}: is a symbolic link loop")
        raise Failure(f"{path}: cannot be read: {e.strerror}")
    if directory_too and stat.S_ISDIR(st.st_mode):
        return st
    if not stat.S_ISREG(st.st_mode):
        raise Failure(f"{path}: is {kind_of(st.st_mode)}, not a file")
    return st


def split_prefix(prefix):
    """(the outputs' directory, their file name without .bin/.idx)."""
    return (os.path.dirname(os.path.abspath(prefix)),
            os.path.basename(prefix))


def check_outputs(prefix, force, inputs):
    """The outputs' paths: refused when one exists (without --force), is not
    a regular file, is an input, or has no directory to go into."""
    outputs = [prefix + suffix for suffix in SUFFIXES]
    directory, base = split_prefix(prefix)
    if base in ("", ".", ".."):
        raise Failure(f"--output-prefix {prefix}: names a directory, not the "
                      f"datasets' name in it (e.g. "
                      f"{os.path.join(prefix, 'corpus')})")
    if not os.path.isdir(directory):
        if os.path.lexists(directory):
            raise Failure(f"--output-prefix {prefix}: {directory} is not a "
                          f"directory")
        raise Failure(f"--output-prefix {prefix}: the directory {directory} "
                      f"does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Failure(f"--output-prefix {prefix}: the directory {directory} "
                      f"is not writable")
    try:
        name_max = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    longest = max(len(os.fsencode(temporary_name(base, suffix, LONGEST_TAG)))
                  for suffix in SUFFIXES)
    if longest > name_max:
        raise Failure(f"--output-prefix {prefix}: the name is too long: "
                      f"its temporaries' names would have {longest} bytes, "
                      f"beyond the file system's {name_max} (a name of at "
                      f"most {name_max - longest + len(os.fsencode(base))} "
                      f"bytes)")
    for output in outputs:
        try:
            st = os.lstat(output)
        except FileNotFoundError:
            continue
        try:  # (through a link: a link to an input is that input)
            target = os.stat(output)
        except OSError:
            target = st
        for name, input_st in inputs:
            if (target.st_dev, target.st_ino) == (input_st.st_dev,
                                                  input_st.st_ino):
                raise Failure(f"--output-prefix: {output} is the input "
                              f"{name}; writing it would destroy the input")
        if not stat.S_ISREG(st.st_mode):
            raise Failure(f"{output}: is {kind_of(st.st_mode)}, which writing "
                          f"the dataset there would replace")
        if not force:
            raise Failure(f"{output} exists (pass --force to replace it)")
    return outputs


# ---------------------------------------------------------------------------
# Temporaries: .NAME.bin.mlt-tokenize-PID-TAG.tmp beside NAME.bin (and the
# same for .idx and .meta.json), PID the writing process, TAG 8 random hex
# digits (a PID can be reused, or be another host's on a shared file
# system). The writer holds an fcntl lock on each while it lives; the kernel
# drops the locks of a killed process, so a temporary of this name that
# nobody locks is a dead run's, and the only files the next run removes.
# ---------------------------------------------------------------------------

LONGEST_TAG = "4194304-ffffffff"  # (Linux's largest PID)


def temporary_name(base, suffix, tag):
    return f".{base}{suffix}.mlt-tokenize-{tag}.tmp"


def temporary_pattern(base):
    """What temporary_name makes for `base`, and nothing else (the name is
    fixed text around `base`, so another prefix never matches)."""
    return re.compile(re.escape(f".{base}") + r"\.(bin|idx|meta\.json)"
                      r"\.mlt-tokenize-([0-9]+)-[0-9a-f]{8}\.tmp")


def remove_leftovers(prefix):
    """Removes the temporaries that runs killed outright left for `prefix`;
    fails when a live run is writing it. Leaves alone anything else: other
    names, links, directories, files it may not open for writing."""
    directory, base = split_prefix(prefix)
    pattern = temporary_pattern(base)
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        raise Failure(f"--output-prefix {prefix}: cannot list {directory}: "
                      f"{e.strerror}")
    removed = []
    for name in names:
        match = pattern.fullmatch(name)
        if not match:
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EAGAIN):
                    raise Failure(
                        f"{prefix}.bin is being written by another "
                        f"mlt-tokenize (process {match.group(2)}, writing "
                        f"{path}); wait for it to end or choose another "
                        f"--output-prefix")
                continue
            try:  # (still the file listed, not one made since)
                now = os.lstat(path)
                if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                    os.unlink(path)
                    removed.append(path)
            except OSError:
                pass
        finally:
            os.close(fd)
    if removed:
        say(f"removed {len(removed)} temporary file"
            f"{'s' if len(removed) > 1 else ''} of an earlier run of "
            f"mlt-tokenize that was killed: {', '.join(removed)}")


# ---------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------


def find_tokenizer_file(path):
    st = check_input(path, directory_too=True)
    if stat.S_ISDIR(st.st_mode):
        for name in ("tokenizer.json", "tokenizer.model"):
            candidate = os.path.join(path, name)
            if os.path.exists(candidate):
                check_input(candidate)
                return candidate
        raise Failure(f"{path}: a directory with neither tokenizer.json nor "
                      f"tokenizer.model")
    return path


def tokenizer_record(path, kind):
    """What PREFIX.meta.json says of the tokenizer at `path`: each of its
    files (the tokenizer under the name an HF model directory gives it, and
    the files beside it that configure it) with its absolute path, size and
    XXH3-64 hash, as `xxhsum -H3` prints it."""
    xxhash = import_or_fail("xxhash", "xxhash")
    directory = os.path.dirname(os.path.abspath(path))
    named = [("tokenizer.json" if kind == "json" else "tokenizer.model",
              os.path.abspath(path))]
    for name in TOKENIZER_COMPANIONS:
        companion = os.path.join(directory, name)
        if os.path.lexists(companion):
            check_input(companion)
            named.append((name, companion))
    files = []
    for name, file in named:
        try:
            with open(file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise Failure(f"{file}: cannot be read: {e.strerror}")
        files.append({"name": name, "path": file, "bytes": len(data),
                      "xxh3": xxhash.xxh3_64_hexdigest(data)})
    return {"files": files}


def tokenizer_kind(path):
    """'json' for a Hugging Face tokenizer.json, 'sentencepiece' otherwise
    (a serialized protobuf), by content, or a name saying JSON."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip()
    except OSError as e:
        raise Failure(f"{path}: cannot be read: {e.strerror}")
    json_named = path.endswith(".json")
    return "json" if head.startswith(b"{") or json_named else "sentencepiece"


def import_or_fail(module, package):
    try:
        return __import__(module)
    except ImportError:
        raise Failure(f"the Python package {package} is not installed for "
                      f"{sys.executable} (run scripts/install-deps.sh)")


class Tokenizer:
    """One tokenizer, loaded once per process: `encode(text)` gives the ids
    of one document, BOS and EOD included as configured."""

    def __init__(self, path, bos, append_eod, eod_token):
        self.path = path
        self.kind = tokenizer_kind(path)
        self.bos = bos
        self.append_eod = append_eod
        if self.kind == "sentencepiece":
            spm = import_or_fail("sentencepiece", "sentencepiece")
            self.sp = spm.SentencePieceProcessor()
            try:
                loaded = self.sp.Load(path)
            except Exception as e:  # the library raises on garbage
                raise Failure(f"{path}: not a SentencePiece model "
                              f"({first_line(e)})")
            if not loaded or self.sp.GetPieceSize() <= 0:
                raise Failure(f"{path}: not a SentencePiece model")
            self.vocab_size = self.sp.GetPieceSize()
            self.largest_id = self.vocab_size - 1
            self.eod = self.sp.eos_id()
            self.bos_id = self.sp.bos_id()
            if append_eod and self.eod < 0:
                raise Failure(f"{path}: the SentencePiece model has no EOS "
                              f"token for --append-eod (pass --no-append-eod)")
            if bos and self.bos_id < 0:
                raise Failure(f"{path}: the SentencePiece model has no BOS "
                              f"token (pass --no-bos)")
            self.name = "SentencePiece"
        else:
            tokenizers = import_or_fail("tokenizers", "tokenizers")
            try:
                self.tk = tokenizers.Tokenizer.from_file(path)
            except Exception as e:
                raise Failure(f"{path}: not a Hugging Face tokenizer.json "
                              f"({first_line(e)})")
            # Whole documents, as Megatron's tokenizer call makes them: a
            # tokenizer.json saved with truncation or padding on would
            # otherwise cut or pad every document.
            self.tk.no_truncation()
            self.tk.no_padding()
            self.vocab_size = self.tk.get_vocab_size(with_added_tokens=True)
            self.eod = None
            if append_eod:
                token = eod_token or eos_token_beside(path) or next(
                    (t for t in EOD_CANDIDATES
                     if self.tk.token_to_id(t) is not None), None)
                if token is None:
                    raise Failure(f"{path}: cannot tell the tokenizer's "
                                  f"end-of-document token; pass --eod-token")
                self.eod = self.tk.token_to_id(token)
                if self.eod is None:
                    raise Failure(f"{path}: the end-of-document token "
                                  f"'{token}' is not in the vocabulary")
            self.name = "tokenizer.json"
            self.largest_id = self.tokenizer_json_largest_id()
        if self.vocab_size <= 0:
            raise Failure(f"{path}: an empty vocabulary")
        if self.largest_id > INT32_LARGEST:
            raise Failure(f"{path}: the tokenizer's largest id, "
                          f"{self.largest_id}, does not fit int32, the "
                          f"widest token type of an indexed dataset")

    def tokenizer_json_largest_id(self):
        """The largest id a tokenizer.json can give: its vocabulary's (not
        always its size - 1: the ids may have gaps) or its template's (the
        post-processor names its special tokens' ids itself)."""
        try:
            largest = max(self.tk.get_vocab(with_added_tokens=True).values(),
                          default=-1)
            for sample in ("", "a"):
                ids = self.tk.encode(sample, add_special_tokens=self.bos).ids
                largest = max([largest] + ids)
        except Exception as e:
            raise Failure(f"{self.path}: the tokenizer fails on a sample "
                          f"text ({first_line(e)})")
        return max(largest, self.eod if self.eod is not None else -1)

    def encode(self, text):
        if self.kind == "sentencepiece":
            ids = self.sp.EncodeAsIds(text)
            if self.bos:
                ids = [self.bos_id] + ids
        else:
            ids = self.tk.encode(text, add_special_tokens=self.bos).ids
        # Megatron: an empty document stays empty, without its EOD.
        if ids and self.append_eod:
            ids.append(self.eod)
        return ids


def eos_token_beside(path):
    """tokenizer_config.json's eos_token next to a tokenizer.json; None
    without the file or the key. A file there that cannot be read is an
    error: it would name the end-of-document token."""
    config = os.path.join(os.path.dirname(os.path.abspath(path)),
                          "tokenizer_config.json")
    advice = "pass --eod-token to go without it"
    try:  # (numbers as floats, as in jsonl_documents)
        with open(config, "rb") as f:
            data = json.loads(f.read().decode("utf-8-sig"), parse_int=float)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Failure(f"{config}: cannot be read: {e.strerror} ({advice})")
    except UnicodeDecodeError as e:
        raise Failure(f"{config}: not UTF-8 (byte {e.start}: {e.reason}; "
                      f"{advice})")
    except RecursionError:
        raise Failure(f"{config}: JSON nested too deeply to read ({advice})")
    except ValueError as e:
        raise Failure(f"{config}: not JSON ({first_line(e)}; {advice})")
    if not isinstance(data, dict):
        raise Failure(f"{config}: a JSON {json_type(data)}, not an object "
                      f"({advice})")
    token = data.get("eos_token")
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) and token else None


def json_type(value):
    for kind, name in ((dict, "object"), (list, "array"), (str, "string"),
                       (bool, "boolean"), (int, "number"), (float, "number")):
        if isinstance(value, kind):
            return name
    return "null"


def first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


# ---------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------


def read_documents(inputs, json_key, whole_files, failures):
    """Yields (text, bytes read, where it starts: FILE:LINE) per document,
    in input order. A failure (bad JSON, not UTF-8, a read error) ends the
    documents and is appended to `failures`: with workers, this runs in the
    pool's feeding thread, whose exceptions would not reach the caller."""
    path = None
    try:
        for path in inputs:
            if path.endswith(".jsonl") or path.endswith(".json"):
                yield from jsonl_documents(path, json_key)
            else:
                yield from text_documents(path, whole_files)
    except OSError as e:
        failures.append(Failure(f"{path}: cannot be read: {e.strerror}"))
    except Exception as e:  # (Failure, and main's last resort for others)
        failures.append(e)


def open_text(path):
    return open(path, "r", encoding="utf-8", errors="strict", newline="")


def not_utf8(path):
    """The Failure of a .txt input that is not UTF-8, naming the first bad
    line (found again byte-wise: the text reader decodes whole blocks)."""
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    return Failure(f"{path}:{number}: not UTF-8 text (byte "
                                   f"{e.start + 1} of the line: {e.reason})")
    except OSError as e:
        return Failure(f"{path}: cannot be read: {e.strerror}")
    return Failure(f"{path}: not UTF-8 text")


def jsonl_documents(path, json_key):
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{number}"
            try:  # (a byte order mark may open the file)
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise Failure(f"{where}: not UTF-8 text (byte {e.start + 1} "
                              f"of the line: {e.reason})")
            try:  # (numbers as floats: a long integer elsewhere on the
                #      line is valid JSON, beyond int()'s digit limit)
                data = json.loads(line, parse_int=float)
            except RecursionError:
                raise Failure(f"{where}: JSON nested too deeply to read")
            except ValueError as e:
                raise Failure(f"{where}: not JSON ({first_line(e)})")
            if not isinstance(data, dict):
                raise Failure(f"{where}: a JSON {json_type(data)}, not an "
                              f"object with a '{json_key}' string")
            if json_key not in data:
                raise Failure(f"{where}: no key '{json_key}' (see "
                              f"--json-key)")
            text = data[json_key]
            if not isinstance(text, str):
                raise Failure(f"{where}: '{json_key}' is a JSON "
                              f"{json_type(text)}, not a string")
            try:  # (JSON's \ud800 escapes make strings that are not text)
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise Failure(f"{where}: '{json_key}' holds an unpaired "
                              f"surrogate (\\u{ord(text[e.start]):04x}, "
                              f"character {e.start + 1}), which is not "
                              f"Unicode text")
            yield text, len(raw), where


def text_documents(path, whole_files):
    try:
        with open_text(path) as f:
            if whole_files:
                text = f.read()
                yield text, len(text.encode("utf-8")), path
                return
            lines, size, first = [], 0, 0
            for number, line in enumerate(f, start=1):
                size += len(line.encode("utf-8"))
                if line.strip():
                    if not lines:
                        first = number
                    lines.append(line.rstrip("\r\n"))
                elif lines:
                    yield "\n".join(lines), size, f"{path}:{first}"
                    lines, size = [], 0
            if lines:
                yield "\n".join(lines), size, f"{path}:{first}"
    except UnicodeDecodeError:
        raise not_utf8(path)


def encode_document(tokenizer, text, where):
    try:
        return tokenizer.encode(text)
    except Exception as e:  # (the libraries raise their own kinds)
        raise Failure(f"{where}: the tokenizer fails on this document "
                      f"({first_line(e)})")


# Each worker process loads the tokenizer once (multiprocessing initializer);
# a failure to load is reported by its first task (an initializer that
# raises would be restarted by the pool, endlessly).
_worker_tokenizer = None
_worker_failure = None


def _init_worker(parent, path, bos, append_eod, eod_token):
    global _worker_tokenizer, _worker_failure
    # (the parent cleans up; Pool.terminate ends workers with SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # A parent killed outright (kill -9) cannot end its workers, and a
    # worker waiting for tasks would wait forever: the kernel ends it.
    try:
        import ctypes
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # (the parent died before the prctl)
        os._exit(1)
    try:
        _worker_tokenizer = Tokenizer(path, bos, append_eod, eod_token)
    except Failure as e:
        _worker_failure = e
    except Exception as e:
        _worker_failure = Failure(f"{path}: a worker cannot load the "
                                  f"tokenizer ({first_line(e)})")


def _encode_in_worker(item):
    if _worker_failure is not None:
        raise _worker_failure
    text, size, where = item
    return encode_document(_worker_tokenizer, text, where), size, where


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


class DatasetWriter:
    """Megatron's IndexedDatasetBuilder + _IndexWriter, one sequence per
    document, into locked temporary files (made by begin()) renamed into
    place by finish() (the .idx last: it makes the pair a dataset); abandon()
    removes them."""

    def __init__(self, prefix, tokenizer, record):
        # Megatron's DType.optimal_dtype of the vocabulary's size, widened
        # when the tokenizer's ids go beyond it.
        id_limit = max(tokenizer.vocab_size, tokenizer.largest_id + 1)
        self.dtype_code = (DTYPE_UINT16 if id_limit < UINT16_VOCAB_LIMIT
                           else DTYPE_INT32)
        self.dtype = "uint16" if self.dtype_code == DTYPE_UINT16 else "int32"
        self.typecode = "H" if self.dtype_code == DTYPE_UINT16 else "i"
        self.itemsize = 2 if self.dtype_code == DTYPE_UINT16 else 4
        if array(self.typecode).itemsize != self.itemsize:
            raise Failure(f"this Python's array('{self.typecode}') is not "
                          f"{self.itemsize} bytes")
        self.tokenizer = tokenizer
        self.record = record
        self.final = [prefix + suffix for suffix in SUFFIXES]
        self.directory, base = split_prefix(prefix)
        tag = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.temporary = [os.path.join(self.directory,
                                       temporary_name(base, suffix, tag))
                          for suffix in SUFFIXES]
        self.created = []  # (the temporaries made, open and locked)
        self.placed = []  # (the .bin and .meta.json, renamed before the .idx)
        self.written = False  # (both renamed: the dataset is in place)
        self.bin = None
        self.lengths = array("i")
        self.document_indices = array("q", [0])
        self.tokens = 0

    def begin(self):
        """Makes the .bin's temporary: apart from __init__, so that the
        caller holds the writer, and can abandon it, before any file of it
        exists (an interruption may come at any moment)."""
        self.bin = self.create(0)

    def create(self, which):
        """Makes and locks temporary `which` (0: .bin, 1: .idx, 2:
        .meta.json)."""
        path = self.temporary[which]
        try:
            f = open(path, "xb")
        except OSError as e:
            raise Failure(f"cannot write {self.final[which]}: cannot create "
                          f"a file in {self.directory} ({e.strerror})")
        self.created.append((path, f))
        try:
            fcntl.lockf(f.fileno(), fcntl.LOCK_EX)
            st, now = os.fstat(f.fileno()), os.lstat(path)
        except OSError as e:
            raise Failure(f"cannot write {self.final[which]}: cannot lock "
                          f"{path} ({e.strerror})")
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
            raise Failure(f"cannot write {self.final[which]}: {path} was "
                          f"removed by another mlt-tokenize starting for the "
                          f"same --output-prefix")
        return f

    def add_document(self, ids, where):
        if ids:
            try:
                out = array(self.typecode, ids)
            except OverflowError:
                raise self.unfit(ids, where)
            try:
                out.tofile(self.bin)
            except OSError as e:
                raise Failure(f"cannot write {self.final[0]}: {e.strerror}")
            self.lengths.append(len(ids))
            self.tokens += len(ids)
        self.document_indices.append(len(self.lengths))

    def unfit(self, ids, where):
        """The Failure of an id beyond the dtype chosen from the tokenizer's
        vocabulary and template: a tokenizer giving ids it does not have."""
        largest = 0xFFFF if self.dtype_code == DTYPE_UINT16 else INT32_LARGEST
        bad = next(i for i in ids if not 0 <= i <= largest)
        return Failure(f"{where}: the tokenizer gave the token id {bad}, "
                       f"which does not fit {self.dtype}, the type chosen "
                       f"for its vocabulary of {self.tokenizer.vocab_size} "
                       f"ids (largest {self.tokenizer.largest_id}); the "
                       f"tokenizer {self.tokenizer.path} is inconsistent: "
                       f"fix it or use the model's own")

    def finish(self):
        pointers = array("q")
        at = 0
        for length in self.lengths:
            pointers.append(at)
            at += length * self.itemsize
        writing = self.final[0]
        try:
            self.bin.flush()
            os.fsync(self.bin.fileno())
            writing = self.final[1]
            idx = self.create(1)
            idx.write(INDEX_MAGIC)
            idx.write(struct.pack("<Q", 1))
            idx.write(struct.pack("<B", self.dtype_code))
            idx.write(struct.pack("<Q", len(self.lengths)))
            idx.write(struct.pack("<Q", len(self.document_indices)))
            self.lengths.tofile(idx)
            pointers.tofile(idx)
            self.document_indices.tofile(idx)
            idx.flush()
            os.fsync(idx.fileno())
            writing = self.final[2]
            meta = self.create(2)
            meta.write((json.dumps({"format": "mlt-tokenize", "version": 1,
                                    "tokenizer": self.record}, indent=2)
                        + "\n").encode("utf-8"))
            meta.flush()
            os.fsync(meta.fileno())
            # An old .idx goes first and the new one comes last, so that a
            # run killed in between leaves a .bin (and .meta.json) alone,
            # never a dataset that does not match its files. (The
            # temporaries stay open, and so locked, until they are renamed.)
            # Interruptions wait until the files and their record, which
            # abandon() reads, agree.
            with interruptions_held():
                try:
                    os.unlink(self.final[1])
                except FileNotFoundError:
                    pass
                for which in (0, 2):
                    writing = self.final[which]
                    os.replace(self.temporary[which], self.final[which])
                    self.placed.append(self.final[which])
                writing = self.final[1]
                os.replace(self.temporary[1], self.final[1])
                self.temporary, self.placed, self.written = [], [], True
        except OSError as e:
            raise Failure(f"cannot write {writing}: {e.strerror}")
        try:  # (the renames made durable; not every file system can)
            directory = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError:
            pass
        self.close()

    def close(self):
        for _, f in self.created:
            try:
                f.close()
            except Exception:  # (a write error again, on the last flush)
                pass
        self.created = []

    def abandon(self):
        """Removes the temporaries (while still holding their locks), and a
        .bin or .meta.json renamed without its .idx. By name, not by
        self.created: an interruption may come between a file's creation
        and its record, and the names, with this process's PID and a random
        tag, are this run's alone."""
        paths = self.temporary + self.placed
        for path in paths:
            try:
                os.unlink(path)
            except OSError:
                pass
        self.temporary, self.placed = [], []
        self.close()


# ---------------------------------------------------------------------------
# Interruptions: Ctrl-C's SIGINT, a scheduler's SIGTERM, a closed terminal's
# SIGHUP. main() hands them to _interrupt, which raises KeyboardInterrupt
# once, while the run can still clean up (as Ctrl-C is); inside a section
# that must run whole (interruptions_held) one waits for the section's end;
# once the run is ending (cleaning up after an error, reporting, done), they
# are ignored: the process is about to exit, with its own status and one
# line, and an exception then would only cut its cleanup short or print a
# traceback from Python's own shutdown. (Python signal handlers run in the
# main thread, between two of its bytecodes, whichever thread the signal
# reached: a mode, not a signal mask, decides.)
# ---------------------------------------------------------------------------

INTERRUPTIONS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_interruptions = "raise"  # or "held", "pending" (held, one came), "ignored"


def _interrupt(signum, frame):
    global _interruptions
    if _interruptions == "raise":
        _interruptions = "ignored"  # (the run ends: one is enough)
        raise KeyboardInterrupt
    if _interruptions == "held":
        _interruptions = "pending"


def ignore_interruptions():
    """From now on the process only ends: interruptions are ignored by the
    kernel (Python's shutdown restores the default action of a signal that
    has a handler, not of one ignored, so that one arriving then would
    otherwise end a finished run with the signal's status)."""
    global _interruptions
    _interruptions = "ignored"
    for signum in INTERRUPTIONS:
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def interruptions_held():
    """Holds an interruption back while a section that must run whole
    runs; it is raised as the section ends (unless the section fails: then
    the run is ending anyway)."""
    global _interruptions
    if _interruptions != "raise":
        yield
        return
    _interruptions = "held"
    try:
        yield
    finally:
        pending = _interruptions == "pending"
        _interruptions = "raise" if not pending else "ignored"
    if pending:
        raise KeyboardInterrupt


class Progress:
    """A line on stderr about once a second (rewritten in place on a
    terminal, one line every 10 s otherwise)."""

    def __init__(self):
        self.start = time.monotonic()
        self.last = self.start
        self.tty = stderr_is_terminal()

    def update(self, documents, size, tokens, final=False):
        global _progress_open
        now = time.monotonic()
        if not final and now - self.last < (1.0 if self.tty else 10.0):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        line = (f"{PROG}: {documents:,} documents, {tokens:,} tokens, "
                f"{documents / elapsed:,.0f} documents/s, "
                f"{size / elapsed / 1e6:.2f} MB/s")
        try:
            if self.tty:
                sys.stderr.write("\r" + line + ("\n" if final else ""))
                _progress_open = not final
            elif not final:
                sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except OSError:  # (progress is not worth failing for)
            pass


def stderr_is_terminal():
    try:
        return sys.stderr.isatty()
    except (OSError, ValueError):
        return False


# A progress line without its newline yet (on a terminal): one more line on
# stderr starts a line of its own.
_progress_open = False


def say(message, error=False):
    """One line on stderr, "mlt-tokenize: [error: ]MESSAGE", whatever the
    message holds (a file name may have a newline in it)."""
    global _progress_open
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    line = f"{PROG}: {'error: ' if error else ''}{message}"
    try:
        sys.stderr.write(("\n" if _progress_open else "") + line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    _progress_open = False


def tokenize(options):
    tokenizer_path = find_tokenizer_file(options["tokenizer"])
    inputs = []
    for path in options["inputs"]:
        st = check_input(path)
        if not (path.endswith((".txt", ".jsonl", ".json"))):
            raise Failure(f"{path}: unknown input extension (expected .txt "
                          f"or .jsonl)")
        inputs.append((path, st))
    inputs.append((tokenizer_path, os.stat(tokenizer_path)))
    prefix = options["output_prefix"]
    check_outputs(prefix, options["force"], inputs)
    tokenizer = Tokenizer(tokenizer_path, options["bos"],
                          options["append_eod"], options["eod_token"])
    record = tokenizer_record(tokenizer_path, tokenizer.kind)

    progress = Progress()
    documents = size = 0
    pool = writer = None
    failures = []
    try:
        if options["workers"] > 1:
            pool = multiprocessing.Pool(
                options["workers"], initializer=_init_worker,
                initargs=(os.getpid(), tokenizer_path, options["bos"],
                          options["append_eod"], options["eod_token"]))
        # (after the pool: its workers need not inherit the temporaries)
        remove_leftovers(prefix)
        writer = DatasetWriter(prefix, tokenizer, record)
        writer.begin()
        items = read_documents(options["inputs"], options["json_key"],
                               options["whole_files"], failures)
        if pool is not None:
            encoded = pool.imap(_encode_in_worker, items, chunksize=64)
        else:
            encoded = ((encode_document(tokenizer, text, where), n, where)
                       for text, n, where in items)
        for ids, n, where in encoded:
            writer.add_document(ids, where)
            documents += 1
            size += n
            progress.update(documents, size, writer.tokens)
        if pool is not None:
            pool.close()
            pool.join()
            pool = None
        if failures:
            raise failures[0]
        if documents == 0:
            raise Failure(f"no documents in {', '.join(options['inputs'])} "
                          f"(empty, or only blank lines)")
        writer.finish()
        summarize(prefix, tokenizer, writer, progress, documents, size)
        ignore_interruptions()  # (done: nothing is left to clean up)
    except BaseException as e:
        ignore_interruptions()  # (the cleanup runs whole)
        if pool is not None:
            pool.terminate()
            pool.join()
        if writer is not None:
            writer.abandon()
        if (isinstance(e, KeyboardInterrupt) and writer is not None
                and writer.written):
            raise KeyboardInterrupt(f"interrupted after writing "
                                    f"{written(prefix)} (whole)") from None
        raise


def written(prefix):
    """The outputs, for messages."""
    return f"{prefix}.bin, {prefix}.idx and {prefix}{META_SUFFIX}"


def summarize(prefix, tokenizer, writer, progress, documents, size):
    """The last progress line and the summary on stdout."""
    progress.update(documents, size, writer.tokens, final=True)
    elapsed = max(time.monotonic() - progress.start, 1e-9)
    ids = ("" if tokenizer.largest_id < tokenizer.vocab_size
           else f", ids to {tokenizer.largest_id:,}")
    summary = (f"{PROG}: wrote {written(prefix)}: {documents:,} "
               f"documents, {writer.tokens:,} tokens ({writer.dtype}, vocab "
               f"{tokenizer.vocab_size:,}{ids}, {tokenizer.name}) from "
               f"{size / 1e6:.2f} MB in {elapsed:.1f} s "
               f"({documents / elapsed:,.0f} documents/s, "
               f"{size / elapsed / 1e6:.2f} MB/s)")
    try:
        print(summary, flush=True)
    except OSError as e:
        # (and the exit's flush of what is left must not fail again)
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        raise Failure(f"wrote {written(prefix)}, but not the summary: "
                      f"stdout: {e.strerror}")


def main(argv):
    # A closed pipe ends the tool quietly (mlt-tokenize --help | head);
    # SIGINT, SIGTERM and SIGHUP are interruptions, cleaned up alike.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for signum in INTERRUPTIONS:
        signal.signal(signum, _interrupt)
    # (file names that are not UTF-8 print escaped rather than fail)
    sys.stdout.reconfigure(errors="backslashreplace")
    try:
        tokenize(parse_arguments(argv))
        return 0
    except SystemExit:  # (--help)
        raise
    except BaseException as e:
        ignore_interruptions()  # (the report comes whole)
        return report(e)


def report(error):
    """Says what ended the run, in one line; its exit status."""
    if isinstance(error, Failure):
        say(str(error), error=True)
        return 1
    if isinstance(error, KeyboardInterrupt):
        say(str(error) or "interrupted; nothing written", error=True)
        return 130
    if isinstance(error, OSError):
        where = f"{error.filename}: " if error.filename else ""
        say(f"{where}{error.strerror or error}", error=True)
        return 1
    if isinstance(error, MemoryError):
        say("out of memory", error=True)
        return 1
    # The last resort: a bug, but still one line.
    say(f"unexpected {type(error).__name__} ({first_line(error)}); this is "
        f"a bug of mlt-tokenize, please report it with the command line",
        error=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
