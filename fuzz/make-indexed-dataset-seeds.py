#!/usr/bin/env python3
"""Writes the seed corpus of mlt-fuzz-indexed-dataset: Megatron .idx files
(the MMapIndexedDataset format of include/mlt/Runtime/io/IndexedDataset.h),
each after the 8 bytes (little-endian) of the size of its .bin, as the
fuzzer reads its inputs: several documents, each dtype, an empty document,
one sequence per document and several, the multimodal modes. Standard
library only.

Usage: make-indexed-dataset-seeds.py OUTDIR   (writes OUTDIR/*.idx and
OUTDIR/stamp)
"""
import os
import struct
import sys

# Megatron's dtype codes and their widths.
WIDTHS = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}


def index(dtype, documents, modes=False):
    """documents: a list of documents, each a list of sequence lengths."""
    lengths = [n for doc in documents for n in doc]
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += n * WIDTHS[dtype]
    doc_idx = [0]
    for doc in documents:
        doc_idx.append(doc_idx[-1] + len(doc))
    data = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, dtype, len(lengths),
                                            len(doc_idx))
    data += struct.pack(f"<{len(lengths)}i", *lengths)
    data += struct.pack(f"<{len(pointers)}q", *pointers)
    data += struct.pack(f"<{len(doc_idx)}q", *doc_idx)
    if modes:
        data += bytes(len(lengths))
    return struct.pack("<Q", at) + data


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "uint16-three-docs": index(8, [[5], [3], [7]]),
        "int32-two-sequences-a-doc": index(4, [[4, 2], [6, 1]]),
        "uint8-empty-document": index(1, [[3], [], [2]]),
        "int64-one": index(5, [[9]]),
        "int16-modes": index(3, [[2], [2, 2]], modes=True),
        "uint16-no-documents": index(8, []),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".idx"), "wb") as f:
            f.write(data)
    open(os.path.join(out, "stamp"), "w").close()


if __name__ == "__main__":
    main()
