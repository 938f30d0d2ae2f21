#!/usr/bin/env python3
# ===- mlt-tokenize.py - text to a Megatron indexed dataset --------------=== #
#
# Part of mlt. Tokenizes text with a model's own tokenizer and writes
# PREFIX.bin + PREFIX.idx, Megatron-Core's MMapIndexedDataset, byte for byte
# as Megatron's tools/preprocess_data.py writes them for the same tokens
# (one sequence per document, lengths, pointers and document indices as its
# _IndexWriter lays them out; see include/mlt/Runtime/io/IndexedDataset.h).
# `mlt-run --data PREFIX` trains on the result.
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
# beside them and renamed into place at the end; any error removes them and
# prints one line, "mlt-tokenize: error: ...".
#
# ===----------------------------------------------------------------------=== #
"""usage: mlt-tokenize --tokenizer PATH --output-prefix PREFIX [options] INPUT...

Turns text into a Megatron indexed dataset, PREFIX.bin + PREFIX.idx, with a
model's own tokenizer, for `mlt-run --data PREFIX`.

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
  --output-prefix P   writes P.bin and P.idx (refused when they exist,
                      unless --force)
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
(Megatron's DType.optimal_dtype). Progress goes to stderr (documents/s,
MB/s); a summary line to stdout at the end.
"""

import json
import multiprocessing
import os
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
# tokenizer.json's end-of-document token when nothing names it, in order.
EOD_CANDIDATES = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")


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
        if e.errno == 40:  # ELOOP
            raise Failure(f"{path}: is a symbolic link loop")
        raise Failure(f"{path}: cannot be read: {e.strerror}")
    if directory_too and stat.S_ISDIR(st.st_mode):
        return st
    if not stat.S_ISREG(st.st_mode):
        raise Failure(f"{path}: is {kind_of(st.st_mode)}, not a file")
    return st


def check_outputs(prefix, force, inputs):
    """The outputs' paths: refused when one exists (without --force), is not
    a regular file, is an input, or has no directory to go into."""
    outputs = [prefix + ".bin", prefix + ".idx"]
    directory = os.path.dirname(os.path.abspath(prefix))
    if not os.path.isdir(directory):
        raise Failure(f"--output-prefix {prefix}: the directory {directory} "
                      f"does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Failure(f"--output-prefix {prefix}: the directory {directory} "
                      f"is not writable")
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


def tokenizer_kind(path):
    """'json' for a Hugging Face tokenizer.json, 'sentencepiece' otherwise
    (a serialized protobuf), by content rather than by name."""
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    return "json" if head.startswith(b"{") else "sentencepiece"


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
        if self.vocab_size <= 0:
            raise Failure(f"{path}: an empty vocabulary")

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
    """tokenizer_config.json's eos_token next to a tokenizer.json."""
    config = os.path.join(os.path.dirname(os.path.abspath(path)),
                          "tokenizer_config.json")
    try:
        with open(config, encoding="utf-8") as f:
            token = json.load(f).get("eos_token")
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) and token else None


def first_line(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


# ---------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------


def read_documents(inputs, json_key, whole_files, failures):
    """Yields (text, bytes read) per document, in input order. A failure
    (bad JSON, not UTF-8, a read error) ends the documents and is appended
    to `failures`: with workers, this runs in the pool's feeding thread,
    whose exceptions would not reach the caller."""
    try:
        for path in inputs:
            if path.endswith(".jsonl") or path.endswith(".json"):
                yield from jsonl_documents(path, json_key)
            else:
                yield from text_documents(path, whole_files)
    except (Failure, OSError) as e:
        failures.append(e)


def open_text(path):
    return open(path, "r", encoding="utf-8", errors="strict", newline="")


def decode_failure(path, error):
    return Failure(f"{path}: not UTF-8 text (byte {error.start} of a line: "
                   f"{error.reason})")


def jsonl_documents(path, json_key):
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as e:
                raise Failure(f"{path}:{number}: not JSON ({first_line(e)})")
            if not isinstance(data, dict) or json_key not in data:
                raise Failure(f"{path}:{number}: no key '{json_key}' (see "
                              f"--json-key)")
            text = data[json_key]
            if not isinstance(text, str):
                raise Failure(f"{path}:{number}: '{json_key}' is "
                              f"{type(text).__name__}, not a string")
            yield text, len(raw)


def text_documents(path, whole_files):
    try:
        with open_text(path) as f:
            if whole_files:
                text = f.read()
                yield text, len(text.encode("utf-8"))
                return
            lines, size = [], 0
            for line in f:
                size += len(line.encode("utf-8"))
                if line.strip():
                    lines.append(line.rstrip("\r\n"))
                elif lines:
                    yield "\n".join(lines), size
                    lines, size = [], 0
            if lines:
                yield "\n".join(lines), size
    except UnicodeDecodeError as e:
        raise decode_failure(path, e)


# Each worker process loads the tokenizer once (multiprocessing initializer).
_worker_tokenizer = None


def _init_worker(path, bos, append_eod, eod_token):
    global _worker_tokenizer
    # (the parent cleans up; Pool.terminate ends workers with SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _worker_tokenizer = Tokenizer(path, bos, append_eod, eod_token)


def _encode_in_worker(item):
    text, size = item
    return _worker_tokenizer.encode(text), size


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


class DatasetWriter:
    """Megatron's IndexedDatasetBuilder + _IndexWriter, one sequence per
    document, into temporary files renamed into place by finish()."""

    def __init__(self, prefix, vocab_size):
        self.dtype_code = (DTYPE_UINT16 if vocab_size < UINT16_VOCAB_LIMIT
                           else DTYPE_INT32)
        self.typecode = "H" if self.dtype_code == DTYPE_UINT16 else "i"
        self.itemsize = 2 if self.dtype_code == DTYPE_UINT16 else 4
        if array(self.typecode).itemsize != self.itemsize:
            raise Failure(f"this Python's array('{self.typecode}') is not "
                          f"{self.itemsize} bytes")
        self.vocab_size = vocab_size
        self.final = [prefix + ".bin", prefix + ".idx"]
        self.temporary = []
        directory = os.path.dirname(os.path.abspath(prefix))
        base = os.path.basename(prefix)
        for suffix in (".bin", ".idx"):
            path = os.path.join(directory,
                                f".{base}{suffix}.tmp-{os.getpid()}")
            self.temporary.append(path)
        try:
            self.bin = open(self.temporary[0], "xb")
        except OSError as e:
            raise Failure(f"cannot write {self.final[0]}: {e.strerror}")
        self.lengths = array("i")
        self.document_indices = array("q", [0])
        self.tokens = 0

    def add_document(self, ids):
        if ids:
            out = array(self.typecode, ids)
            out.tofile(self.bin)
            self.lengths.append(len(ids))
            self.tokens += len(ids)
        self.document_indices.append(len(self.lengths))

    def finish(self):
        self.bin.flush()
        os.fsync(self.bin.fileno())
        self.bin.close()
        pointers = array("q")
        at = 0
        for length in self.lengths:
            pointers.append(at)
            at += length * self.itemsize
        with open(self.temporary[1], "xb") as idx:
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
        for temporary, final in zip(self.temporary, self.final):
            os.replace(temporary, final)
        self.temporary = []

    def abandon(self):
        try:
            self.bin.close()
        except Exception:
            pass
        for path in self.temporary:
            try:
                os.unlink(path)
            except OSError:
                pass


class Progress:
    """A line on stderr about once a second (rewritten in place on a
    terminal, one line every 10 s otherwise)."""

    def __init__(self):
        self.start = time.monotonic()
        self.last = self.start
        self.tty = sys.stderr.isatty()
        self.shown = False

    def update(self, documents, size, tokens, final=False):
        now = time.monotonic()
        if not final and now - self.last < (1.0 if self.tty else 10.0):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        line = (f"{PROG}: {documents:,} documents, {tokens:,} tokens, "
                f"{documents / elapsed:,.0f} documents/s, "
                f"{size / elapsed / 1e6:.2f} MB/s")
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        elif not final:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self.shown = not final


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

    writer = DatasetWriter(prefix, tokenizer.vocab_size)
    progress = Progress()
    documents = size = 0
    pool = None
    failures = []
    try:
        items = read_documents(options["inputs"], options["json_key"],
                               options["whole_files"], failures)
        if options["workers"] > 1:
            pool = multiprocessing.Pool(
                options["workers"], initializer=_init_worker,
                initargs=(tokenizer_path, options["bos"],
                          options["append_eod"], options["eod_token"]))
            encoded = pool.imap(_encode_in_worker, items, chunksize=64)
        else:
            encoded = ((tokenizer.encode(text), n) for text, n in items)
        for ids, n in encoded:
            writer.add_document(ids)
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
            raise Failure("the inputs hold no documents")
        writer.finish()
    except BaseException:
        if pool is not None:
            pool.terminate()
            pool.join()
        writer.abandon()
        raise
    progress.update(documents, size, writer.tokens, final=True)
    elapsed = max(time.monotonic() - progress.start, 1e-9)
    dtype = "uint16" if writer.dtype_code == DTYPE_UINT16 else "int32"
    print(f"{PROG}: wrote {prefix}.bin and {prefix}.idx: {documents:,} "
          f"documents, {writer.tokens:,} tokens ({dtype}, vocab "
          f"{tokenizer.vocab_size:,}, {tokenizer.name}) from "
          f"{size / 1e6:.2f} MB in {elapsed:.1f} s ({documents / elapsed:,.0f} "
          f"documents/s, {size / elapsed / 1e6:.2f} MB/s)")


def main(argv):
    # A closed pipe ends the tool quietly (mlt-tokenize --help | head); a
    # scheduler's SIGTERM is an interruption, cleaned up as Ctrl-C is.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        tokenize(parse_arguments(argv))
    except Failure as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted; nothing written", file=sys.stderr)
        return 130
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"{PROG}: error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
