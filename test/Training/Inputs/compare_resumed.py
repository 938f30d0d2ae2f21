#!/usr/bin/env python3
"""Compares a resumed mlt-run run with the run that never stopped.

  compare_resumed.py [--updates-from INIT.safetensors] TOL FULL.jsonl
                     RESUMED.jsonl [A.safetensors B.safetensors]...

Checks that RESUMED's steps are FULL's last steps, by number (a run of
--steps 6 resumed at step 3 logs steps 4, 5 and 6), each loss and
grad_norm within TOL relative (TOL 0: the same bits), and that each pair of
safetensors files holds the same tensors with values within TOL normwise
relative (max |a - b| / max |a|; 0: the same bits), or with --updates-from
relative to what training changed, |a - b| / |a - init| in L2 norm per
tensor (as compare_runs.py and the fixtures' README measure final weights).
Prints one line per check; exits 1 on any failure. Standard library only.
"""
import json
import sys

sys.path.insert(0, __import__("os").path.join(
    __import__("os").path.dirname(__file__), ".."))
from fixture_tools import diff_norm, read_safetensors  # noqa: E402


def main(argv):
    init = None
    if len(argv) > 2 and argv[1] == "--updates-from":
        init = read_safetensors(argv[2])
        argv = argv[:1] + argv[3:]
    if len(argv) < 4 or len(argv) % 2 != 0:
        print(__doc__)
        return 2
    tol = float(argv[1])
    full, resumed = ([json.loads(l) for l in open(p) if l.strip()]
                     for p in argv[2:4])
    ok = True
    steps = [line["step"] for line in resumed]
    if not resumed or steps != [line["step"] for line in full[-len(resumed):]]:
        print(f"FAIL: the resumed run logged steps {steps}, the full run "
              f"{[line['step'] for line in full]}")
        return 1
    worst = 0.0
    for a, b in zip(full[-len(resumed):], resumed):
        for key in ("loss", "grad_norm"):
            worst = max(worst, abs(a[key] - b[key]) / max(abs(a[key]), 1e-30))
    what = "the same bits" if tol == 0 else f"within {tol:g}"
    if worst <= tol:
        print(f"ok: steps {steps[0]}-{steps[-1]}, loss and grad_norm {what}"
              f" (worst {worst:.1e})")
    else:
        ok = False
        print(f"FAIL: steps {steps[0]}-{steps[-1]}: loss and grad_norm differ "
              f"by {worst:.1e} relative, more than {tol:g}")
    for a_path, b_path in zip(argv[4::2], argv[5::2]):
        a, b = read_safetensors(a_path), read_safetensors(b_path)
        if sorted(a) != sorted(b):
            print(f"FAIL: {a_path} and {b_path} hold other tensors")
            ok = False
            continue
        worst = 0.0
        for name in a:
            (shape_a, x), (shape_b, y) = a[name], b[name]
            if shape_a != shape_b:
                print(f"FAIL: {name} has shape {shape_a} and {shape_b}")
                ok = False
                continue
            if init is not None:
                num, den = diff_norm(x, y), diff_norm(x, init[name][1])
            else:
                num = max((abs(p - q) for p, q in zip(x, y)), default=0.0)
                den = max((abs(q) for q in x), default=0.0)
            worst = max(worst, num / den if den else num)
        if worst <= tol:
            print(f"ok: {len(a)} tensors {what} (worst {worst:.1e})")
        else:
            ok = False
            print(f"FAIL: {len(a)} tensors: differ by {worst:.1e}, more than "
                  f"{tol:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
