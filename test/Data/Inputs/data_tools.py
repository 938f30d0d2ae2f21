#!/usr/bin/env python3
"""Helpers of the indexed-data tests: small corpora and tokenizers made on
the spot (nothing is downloaded), and an independent check of what
mlt-tokenize wrote.

  data_tools.py documents TEXT OUT.txt LINES   TEXT's lines, a blank line
                                               after every LINES lines
  data_tools.py jsonl TEXT OUT.jsonl LINES     the same documents as JSONL
                                               ({"text": ...} per line)
  data_tools.py sentencepiece TEXT DIR VOCAB   trains DIR/tokenizer.model
                                               (BPE, LLaMA-2's special ids:
                                               unk 0, bos 1, eos 2)
  data_tools.py bpe TEXT DIR VOCAB [EXTRA]     trains DIR/tokenizer.json (HF
                                               tokenizers BPE with LLaMA-3's
                                               <|begin_of_text|> template and
                                               <|end_of_text|>), EXTRA unused
                                               added tokens after its vocab
                                               (a vocabulary of LLaMA-3's
                                               size, for int32 datasets)
  data_tools.py check PREFIX TOKENIZER DOCS    reads PREFIX.idx/.bin with its
                                               own reader (Megatron's layout)
                                               and checks every document is
                                               BOS + the library's tokens +
                                               EOS of DOCS (.txt or .jsonl)
  data_tools.py meta PREFIX                    PREFIX.meta.json's tokenizer
                                               files, each checked against
                                               its file (size, and the hash
                                               `xxhsum -H3` prints)
  data_tools.py patch FILE OFFSET HEX          overwrites bytes of FILE
  data_tools.py truncate FILE BYTES            cuts FILE to BYTES bytes

Prints one line per result; exits 1 on a failed check. Needs sentencepiece
and tokenizers (scripts/requirements.txt) for the tokenizer commands.
"""
import json
import os
import struct
import subprocess
import sys


def documents_of(text_path, lines_per_document):
    with open(text_path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    return ["\n".join(lines[i:i + lines_per_document])
            for i in range(0, len(lines), lines_per_document)]


def sentencepiece(text, directory, vocab):
    import sentencepiece as spm
    os.makedirs(directory, exist_ok=True)
    with open(os.devnull, "w") as quiet:
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=os.path.join(directory, "tokenizer"),
            vocab_size=vocab, model_type="bpe", character_coverage=1.0,
            unk_id=0, bos_id=1, eos_id=2, pad_id=-1, logstream=quiet)
    os.unlink(os.path.join(directory, "tokenizer.vocab"))
    print(f"ok: trained {directory}/tokenizer.model")


def bpe(text, directory, vocab, extra=0):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from tokenizers import decoders, trainers
    os.makedirs(directory, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    specials = ["<unk>", "<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                  show_progress=False)
    tokenizer.train([text], trainer)
    bos = tokenizer.token_to_id("<|begin_of_text|>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>",
                                                        bos)])
    path = os.path.join(directory, "tokenizer.json")
    tokenizer.save(path)
    if extra:
        # Entries of the model's vocabulary (added tokens would each cost
        # the tokenizer's matcher time at every load).
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        base = len(spec["model"]["vocab"])
        for i in range(extra):
            spec["model"]["vocab"][f"<unused{i}>"] = base + i
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        tokenizer = Tokenizer.from_file(path)
    print(f"ok: trained {directory}/tokenizer.json, vocab "
          f"{tokenizer.get_vocab_size()}")


def read_dataset(prefix):
    """Megatron's _IndexReader and _MMapBinReader, in plain Python."""
    with open(prefix + ".idx", "rb") as f:
        index = f.read()
    assert index[:9] == b"MMIDIDX\x00\x00", "magic"
    version, code, sequences, documents = struct.unpack_from("<QBQQ", index, 9)
    assert version == 1, "version"
    width, fmt = {8: (2, "H"), 4: (4, "i")}[code]
    lengths = struct.unpack_from(f"<{sequences}i", index, 34)
    pointers = struct.unpack_from(f"<{sequences}q", index, 34 + 4 * sequences)
    doc_index = struct.unpack_from(f"<{documents}q", index,
                                   34 + 12 * sequences)
    assert len(index) == 34 + 12 * sequences + 8 * documents, "index size"
    with open(prefix + ".bin", "rb") as f:
        data = f.read()
    out = []
    for d in range(documents - 1):
        tokens = []
        for s in range(doc_index[d], doc_index[d + 1]):
            tokens += struct.unpack_from(f"<{lengths[s]}{fmt}", data,
                                         pointers[s])
        out.append(tokens)
    return code, out


def check(prefix, tokenizer_path, docs_path):
    code, stored = read_dataset(prefix)
    if docs_path.endswith(".jsonl"):
        with open(docs_path, encoding="utf-8") as f:
            texts = [json.loads(line)["text"] for line in f if line.strip()]
    else:
        with open(docs_path, encoding="utf-8") as f:
            texts = [d for d in f.read().split("\n\n") if d.strip()]
    if tokenizer_path.endswith(".json"):
        from tokenizers import Tokenizer
        tk = Tokenizer.from_file(tokenizer_path)
        encode = lambda text: tk.encode(text).ids  # noqa: E731
        eos = tk.token_to_id("<|end_of_text|>")
    else:
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=tokenizer_path)
        encode = lambda text: [sp.bos_id()] + sp.encode(text)  # noqa: E731
        eos = sp.eos_id()
    if len(stored) != len(texts):
        print(f"FAIL: {len(stored)} documents stored, {len(texts)} in "
              f"{docs_path}")
        return 1
    for i, (tokens, text) in enumerate(zip(stored, texts)):
        expected = encode(text.strip("\n")) + [eos]
        if list(tokens) != expected:
            print(f"FAIL: document {i}: {list(tokens)[:12]}... stored, "
                  f"{expected[:12]}... expected")
            return 1
    dtype = {8: "uint16", 4: "int32"}[code]
    total = sum(len(t) for t in stored)
    print(f"ok: {len(stored)} documents, {total} tokens, each BOS + text + "
          f"EOS ({eos}), {dtype}")
    return 0


def meta(prefix):
    with open(prefix + ".meta.json", encoding="utf-8") as f:
        record = json.load(f)
    if record.get("format") != "mlt-tokenize" or record.get("version") != 1:
        print(f"FAIL: {prefix}.meta.json: format {record.get('format')!r}, "
              f"version {record.get('version')!r}")
        return 1
    for entry in record["tokenizer"]["files"]:
        path = entry["path"]
        printed = subprocess.run(["xxhsum", "-H3", path], capture_output=True,
                                 text=True, check=True)
        # "XXH3 (path) = 610e1635fa02bef4"
        if (printed.stdout.split()[-1] != entry["xxh3"]
                or os.path.getsize(path) != entry["bytes"]
                or not os.path.isabs(path)):
            print(f"FAIL: {entry}: xxhsum -H3 says {printed.stdout.strip()}, "
                  f"{os.path.getsize(path)} bytes")
            return 1
        print(f"{entry['name']}: {path}, {entry['bytes']} bytes, hash ok")
    return 0


def main(argv):
    command, args = argv[1], argv[2:]
    if command == "documents" or command == "jsonl":
        docs = documents_of(args[0], int(args[2]))
        with open(args[1], "w", encoding="utf-8") as f:
            for doc in docs:
                f.write(json.dumps({"text": doc}) + "\n" if command == "jsonl"
                        else doc + "\n\n")
        print(f"ok: {len(docs)} documents")
    elif command == "sentencepiece":
        sentencepiece(args[0], args[1], int(args[2]))
    elif command == "bpe":
        bpe(args[0], args[1], int(args[2]), int(args[3]) if len(args) > 3
            else 0)
    elif command == "check":
        return check(*args)
    elif command == "meta":
        return meta(args[0])
    elif command == "patch":
        with open(args[0], "r+b") as f:
            f.seek(int(args[1]))
            f.write(bytes.fromhex(args[2]))
    elif command == "truncate":
        os.truncate(args[0], int(args[1]))
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
