#!/usr/bin/env python3
"""Summarizes a training checkpoint's index and checks it against its shards.

  checkpoint_index.py CHECKPOINT_DIR

Prints, per shard file, how many pieces it holds and how many elements
(parameters and AdamW moments), then one line with the model's tensors and
elements. Checks, standard library only, that every piece named by the index
is in its shard as F32 of the piece's shape, that each shard's size is the
index's, that the pieces of each tensor add up to its elements, and that
each shard's content hash in the index is what `xxhsum -H3` (xxHash's own
tool, independent of mlt) prints for the file; exits 1 with a FAIL line
otherwise.
"""
import json
import os
import struct
import subprocess
import sys


def header(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    root = argv[1]
    index = json.load(open(os.path.join(root, "index.json")))
    files = index["files"]
    per_file = [[0, 0] for _ in files]
    headers = {}
    total = 0
    for name, tensor in sorted(index["tensors"].items()):
        elements = 1
        for d in tensor["shape"]:
            elements *= d
        covered = 0
        for piece in tensor["pieces"]:
            f = files[piece["file"]]
            path = os.path.join(root, f["name"])
            if f["name"] not in headers:
                if os.path.getsize(path) != f["bytes"]:
                    print(f"FAIL: {f['name']} is {os.path.getsize(path)} bytes,"
                          f" the index says {f['bytes']}")
                    return 1
                headers[f["name"]] = header(path)
            stored = headers[f["name"]].get(piece["key"])
            count = piece.get("count")
            if count is None:
                count = 1
                for d in piece["block"]:
                    count *= d
                shape = piece["block"]
            else:
                shape = [count]
            if stored is None or stored["dtype"] != "F32" or \
                    stored["shape"] != shape:
                print(f"FAIL: {piece['key']} is not F32 {shape} in {f['name']}")
                return 1
            covered += count
            per_file[piece["file"]][0] += 1
            per_file[piece["file"]][1] += count
        if covered != elements:
            print(f"FAIL: {name}: pieces hold {covered} of {elements} elements")
            return 1
        total += elements
    for f in files:
        printed = subprocess.run(["xxhsum", "-H3", os.path.join(root, f["name"])],
                                 capture_output=True, text=True, check=True)
        # "XXH3 (path) = 610e1635fa02bef4"
        if printed.stdout.split()[-1] != f.get("xxh3"):
            print(f"FAIL: {f['name']}: xxhsum -H3 says "
                  f"{printed.stdout.split()[-1]}, the index {f.get('xxh3')}")
            return 1
    for f, (pieces, elements) in zip(files, per_file):
        print(f"{f['name']}: {pieces} pieces, {elements} elements")
    print(f"{len(index['tensors'])} tensors, {total} elements")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
