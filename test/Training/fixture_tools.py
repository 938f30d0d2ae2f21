#!/usr/bin/env python3
"""Helpers for the HF-fixture replay tests (standard library only).

  fixture_tools.py tokens FIXTURE_DIR OUT.u16
      Writes the fixture's token rows, in step order, as one raw uint16 stream:
      read in windows of seq_len + 1 without shuffling, it reproduces the batches.

  fixture_tools.py check FIXTURE_DIR LOG.jsonl [--weights DIR] [--grads FILE]
      Compares an mlt-run replay with the fixture, at the agreement its README
      states: every step's loss within 1e-5 relative; per tensor
      |w - w_ref| / |w_ref - w_init| within 1e-3 for the final weights; and
      |g - g_ref| / |g_ref| within 1e-4 for the step-0 gradients. Prints one
      line per check and the worst figures; exits 1 on any failure.
"""
import json
import math
import struct
import sys
from array import array


def read_safetensors(path):
    """Returns {name: (shape, [floats])} for F32/F64 tensors."""
    with open(path, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        code = {"F32": "f", "F64": "d"}[entry["dtype"]]
        values = array(code)
        values.frombytes(data[base + begin : base + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (entry["shape"], values)
    return tensors


def norm(values):
    return math.sqrt(sum(v * v for v in values))


def diff_norm(a, b):
    return math.sqrt(sum((x - y) * (x - y) for x, y in zip(a, b)))


def write_tokens(fixture, out):
    train = json.load(open(f"{fixture}/train.json"))
    stream = array("H", [t for step in train["tokens"] for row in step for t in row])
    if sys.byteorder != "little":
        stream.byteswap()
    with open(out, "wb") as f:
        stream.tofile(f)


def check(fixture, log, weights=None, grads=None):
    train = json.load(open(f"{fixture}/train.json"))
    failures = 0
    records = [json.loads(line) for line in open(log) if line.strip()]
    losses = [r["loss"] for r in records]
    if len(losses) != len(train["loss"]):
        print(f"FAIL: {len(losses)} steps logged, fixture has {len(train['loss'])}")
        return 1
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, train["loss"]))
    ok = worst <= 1e-5
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}: losses of {len(losses)} steps, worst relative error {worst:.3e} (limit 1e-5)")
    gnorms = [r["grad_norm"] for r in records]
    worst = max(abs(a - b) / abs(b) for a, b in zip(gnorms, train["grad_norm_before_clip"]))
    ok = worst <= 1e-4
    failures += not ok
    print(f"{'ok' if ok else 'FAIL'}: gradient norms before clipping, worst relative error {worst:.3e} (limit 1e-4)")

    if weights:
        init = read_safetensors(f"{fixture}/model.safetensors")
        ref = read_safetensors(f"{fixture}/final.safetensors")
        ours = read_safetensors(f"{weights}/model.safetensors")
        if set(ours) != set(ref):
            print(f"FAIL: saved tensors differ from the fixture's: {sorted(set(ours) ^ set(ref))}")
            return failures + 1
        worst_name, worst = None, 0.0
        for name, (shape, values) in ref.items():
            if ours[name][0] != shape:
                print(f"FAIL: {name} has shape {ours[name][0]}, expected {shape}")
                failures += 1
                continue
            moved = diff_norm(values, init[name][1])
            err = diff_norm(ours[name][1], values) / moved
            if err > worst:
                worst_name, worst = name, err
        ok = worst <= 1e-3
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}: final weights of {len(ref)} tensors, worst |w-w_ref|/|w_ref-w_init| {worst:.3e} ({worst_name}; limit 1e-3)")

    if grads:
        ref = read_safetensors(f"{fixture}/grads_step0.safetensors")
        ours = read_safetensors(grads)
        if set(ours) != set(ref):
            print(f"FAIL: dumped gradients differ from the fixture's: {sorted(set(ours) ^ set(ref))}")
            return failures + 1
        worst_name, worst = None, 0.0
        for name, (shape, values) in ref.items():
            err = diff_norm(ours[name][1], values) / norm(values)
            if err > worst:
                worst_name, worst = name, err
        ok = worst <= 1e-4
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}: step-0 gradients of {len(ref)} tensors, worst |g-g_ref|/|g_ref| {worst:.3e} ({worst_name}; limit 1e-4)")
    return 1 if failures else 0


def main(argv):
    if len(argv) >= 4 and argv[1] == "tokens":
        write_tokens(argv[2], argv[3])
        return 0
    if len(argv) >= 4 and argv[1] == "check":
        opts = {"--weights": None, "--grads": None}
        rest = argv[4:]
        while rest:
            if rest[0] not in opts or len(rest) < 2:
                print(__doc__)
                return 2
            opts[rest[0]] = rest[1]
            rest = rest[2:]
        return check(argv[2], argv[3], opts["--weights"], opts["--grads"])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
