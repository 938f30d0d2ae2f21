#!/usr/bin/env python3
"""Compares a resumed mlt-run run with the run that never stopped.

  compare_resumed.py [--updates-from INIT.safetensors] TOL FULL.jsonl
                     RESUMED.jsonl [A.safetensors B.safetensors]...

Checks that RESUMED's steps are FULL's last steps, by number (a run of
--steps 6 resumed at step 3 logs steps 4, 5 and 6), each loss and
grad_norm within TOL relative (TOL 0: the same bits), and that each pair of
safetensors files holds the same tensors with values within TOL normwise
relative (0: the same bits), or with --updates-from relative to what
training changed, as compare_runs.py measures them (its
compare_tensor_files, against FULL's weights: the first of each pair).
Prints one line per check; exits 1 on any failure. Standard library only.
"""
import json
import sys

sys.path.insert(0, __import__("os").path.join(
    __import__("os").path.dirname(__file__), ".."))
sys.path.insert(0, __import__("os").path.dirname(__file__))
from compare_runs import compare_tensor_files, parse_arguments  # noqa: E402


def main(argv):
    parsed = parse_arguments(argv)
    if parsed is None:
        print(__doc__)
        return 2
    init, tol, rest = parsed
    full, resumed = ([json.loads(l) for l in open(p) if l.strip()]
                     for p in rest[:2])
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
    for a_path, b_path in zip(rest[2::2], rest[3::2]):
        ok &= compare_tensor_files(b_path, a_path, tol, init, what)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
