#!/usr/bin/env python3
"""Writes the seed corpus of mlt-fuzz-safetensors: small .safetensors files of
every kind of entry the reader takes (each dtype, a scalar, an empty tensor,
metadata, several tensors out of order, a padded header), as HF and
`safetensors` write them. Standard library only.

Usage: make-safetensors-seeds.py OUTDIR   (writes OUTDIR/*.safetensors and
OUTDIR/stamp)
"""
import json
import os
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
         "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape)] in file order; data is a counter."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        count = 1
        for dim in shape:
            count *= dim
        size = count * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + size]}
        data += bytes((len(data) + i) % 251 for i in range(size))
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "one-f32": safetensors([("w", "F32", [2, 3])], {"format": "pt"}),
        "every-dtype": safetensors(
            [("t." + d.lower(), d, [2]) for d in SIZES], {"format": "pt"}),
        "scalar-empty": safetensors(
            [("scalar", "I64", []), ("empty", "F32", [0, 4]),
             ("after", "BF16", [3])]),
        "llama-names": safetensors(
            [("model.embed_tokens.weight", "F32", [8, 4]),
             ("model.layers.0.input_layernorm.weight", "F32", [4]),
             ("model.layers.0.self_attn.q_proj.weight", "BF16", [4, 4]),
             ("lm_head.weight", "F16", [8, 4])],
            {"format": "pt", "step": "3"}),
        "unpadded": safetensors([("x", "F64", [1, 1, 2])], pad=False),
        "no-tensors": safetensors([], {"format": "pt"}),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".safetensors"), "wb") as f:
            f.write(data)
    open(os.path.join(out, "stamp"), "w").close()


if __name__ == "__main__":
    main()
