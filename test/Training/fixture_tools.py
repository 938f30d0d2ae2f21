#!/usr/bin/env python3
"""Helpers for the HF-fixture replay tests (standard library only).

  fixture_tools.py tokens FIXTURE_DIR OUT.u16
      Writes the fixture's token rows, in step order, as one raw uint16 stream:
      read in windows of seq_len + 1 without shuffling, it reproduces the batches.

  fixture_tools.py variant IN.safetensors OUT.safetensors drop|extra|reshape|nan NAME
      Writes a copy of IN with tensor NAME removed, an extra tensor NAME added,
      NAME's shape flattened, or NAME's first element set to NaN: the bad
      checkpoints of the error tests.

  fixture_tools.py corrupt IN OUT
      Writes IN with its second half cut off (a truncated plan or checkpoint).

  fixture_tools.py falls LOG.jsonl DROP
      Checks that training learned: the mean loss of the last five logged
      steps is at least DROP below the mean of the first five.

  fixture_tools.py check FIXTURE_DIR LOG.jsonl [--weights DIR] [--grads FILE]
      Compares an mlt-run replay with the fixture, at the agreement its README
      states: every step's loss within 1e-5 relative; per tensor
      |w - w_ref| / |w_ref - w_init| within 1e-3 for the final weights; and
      |g - g_ref| / |g_ref| within 1e-4 for the step-0 gradients. Prints one
      line per check and the worst figures; exits 1 on any failure.

  fixture_tools.py check-eval FIXTURE_DIR LOG.jsonl
      Checks an evaluation of the fixture's initial weights on its first
      batch (mlt-run --steps 0 --eval-data TOKENS --eval-iters 1): the log's
      one eval_loss is HF's loss of step 1 (the forward loss of those
      weights on that batch), within the fixtures' 1e-5 relative.

  fixture_tools.py check-loss FIXTURE_DIR LOG.jsonl TOL
      Checks only that every step's loss is within TOL (relative) of the
      fixture's: the agreement of a bf16 mixed-precision run (2e-2).
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


def write_safetensors(path, tensors):
    """Writes {name: (shape, [floats])} as F32 safetensors."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = array("f", values)
        if sys.byteorder != "little":
            blob.byteswap()
        blob = blob.tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_variant(src, out, kind, name):
    tensors = read_safetensors(src)
    if kind == "drop":
        del tensors[name]
    elif kind == "extra":
        tensors[name] = ([2], [1.0, 2.0])
    elif kind == "reshape":
        shape, values = tensors[name]
        tensors[name] = ([len(values)], values)
    elif kind == "nan":
        shape, values = tensors[name]
        values = list(values)
        values[0] = float("nan")
        tensors[name] = (shape, values)
    else:
        raise SystemExit(f"unknown variant {kind}")
    write_safetensors(out, tensors)


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


def check_losses(train, records, limit):
    """Prints the loss check; returns 1 on failure."""
    losses = [r["loss"] for r in records]
    if len(losses) != len(train["loss"]):
        print(f"FAIL: {len(losses)} steps logged, fixture has {len(train['loss'])}")
        return 1
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, train["loss"]))
    ok = worst <= limit
    print(f"{'ok' if ok else 'FAIL'}: losses of {len(losses)} steps, worst relative error {worst:.3e} (limit {limit:g})")
    return 0 if ok else 1


def check(fixture, log, weights=None, grads=None):
    train = json.load(open(f"{fixture}/train.json"))
    records = [json.loads(line) for line in open(log) if line.strip()]
    failures = check_losses(train, records, 1e-5)
    if len(records) != len(train["loss"]):
        return 1
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
        # mlt-run dumps the gradients before clipping. The fixture's file holds
        # them after clipping (its global norm is max_grad_norm, not
        # grad_norm_before_clip[0], whatever its README says), so compare
        # ours scaled by torch's clip coefficient.
        ours_norm = math.sqrt(sum(norm(v) ** 2 for _, v in ours.values()))
        ref_norm = math.sqrt(sum(norm(v) ** 2 for _, v in ref.values()))
        before = train["grad_norm_before_clip"][0]
        err = abs(ours_norm - before) / before
        ok = err <= 1e-4
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'}: norm of the dumped step-0 gradients {ours_norm:.6f} vs grad_norm_before_clip {before:.6f} (limit 1e-4 relative)")
        scale = min(1.0, train["max_grad_norm"] / (ours_norm + 1e-6))
        if abs(ref_norm - before) / before <= 1e-6:
            scale = 1.0  # a fixture that holds unclipped gradients
        worst_name, worst = None, 0.0
        for name, (shape, values) in ref.items():
            err = diff_norm([g * scale for g in ours[name][1]], values) / norm(values)
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
    if len(argv) == 6 and argv[1] == "variant":
        write_variant(argv[2], argv[3], argv[4], argv[5])
        return 0
    if len(argv) == 4 and argv[1] == "falls":
        losses = [json.loads(l)["loss"] for l in open(argv[2]) if l.strip()]
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        ok = len(losses) >= 10 and first - last >= float(argv[3])
        print(f"{'ok' if ok else 'FAIL'}: loss fell from {first:.4f} to {last:.4f} over {len(losses)} steps (needed {argv[3]})")
        return 0 if ok else 1
    if len(argv) == 4 and argv[1] == "corrupt":
        data = open(argv[2], "rb").read()
        open(argv[3], "wb").write(data[: len(data) // 2])
        return 0
    if len(argv) == 4 and argv[1] == "check-eval":
        train = json.load(open(f"{argv[2]}/train.json"))
        evals = [json.loads(line) for line in open(argv[3]) if line.strip()]
        evals = [r for r in evals if "eval_loss" in r]
        if len(evals) != 1 or evals[0]["step"] != 0:
            print(f"FAIL: expected one evaluation before training, got {evals}")
            return 1
        ours, ref = evals[0]["eval_loss"], train["loss"][0]
        error = abs(ours - ref) / abs(ref)
        ok = error <= 1e-5
        print(f"{'ok' if ok else 'FAIL'}: eval_loss {ours:.7f} of the initial "
              f"weights on the first batch, HF's {ref:.7f}, relative error "
              f"{error:.3e} (limit 1e-05)")
        return 0 if ok else 1
    if len(argv) == 5 and argv[1] == "check-loss":
        train = json.load(open(f"{argv[2]}/train.json"))
        records = [json.loads(line) for line in open(argv[3]) if line.strip()]
        return check_losses(train, records, float(argv[4]))
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
