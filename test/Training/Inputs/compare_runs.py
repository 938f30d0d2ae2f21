#!/usr/bin/env python3
"""Compares two mlt-run runs (standard library only).

  compare_runs.py [--updates-from INIT.safetensors] TOL LOG_A.jsonl LOG_B.jsonl
                  [A.safetensors B.safetensors]...

Checks that the two logs have the same steps with every loss and grad_norm
within TOL relative (and, where they hold evaluations' records, the same
evaluations with every eval_loss within TOL), and that each pair of safetensors files holds the same
tensors (names and shapes) with values within TOL normwise relative
(max |a - b| / max |b|). With --updates-from, tensors are weights trained
from INIT and the difference is measured against what training changed,
in L2 norm per tensor, |a - b| / |b - init| (as the fixtures' README
measures final weights). Prints one line per check; exits 1 on any failure.
"""
import json
import sys

sys.path.insert(0, __import__("os").path.join(
    __import__("os").path.dirname(__file__), ".."))
from fixture_tools import diff_norm, read_safetensors  # noqa: E402


def parse_arguments(argv):
    """(initial weights or None, TOL, the rest) of a command line
    `[--updates-from INIT] TOL LOG LOG [A B]...`; None when malformed."""
    init = None
    if len(argv) > 2 and argv[1] == "--updates-from":
        init = read_safetensors(argv[2])
        argv = argv[:1] + argv[3:]
    if len(argv) < 4 or len(argv) % 2 != 0:
        return None
    return init, float(argv[1]), argv[2:]


def main(argv):
    parsed = parse_arguments(argv)
    if parsed is None:
        print(__doc__)
        return 2
    init, tol, rest = parsed
    ok = True
    records = [[json.loads(l) for l in open(p) if l.strip()] for p in rest[:2]]
    # The steps' records, and the evaluations' (eval_loss; after the same
    # steps in both).
    logs = [[r for r in log if "eval_loss" not in r] for log in records]
    evals = [[r for r in log if "eval_loss" in r] for log in records]
    if len(logs[0]) != len(logs[1]):
        print(f"FAIL: {len(logs[0])} steps against {len(logs[1])}")
        return 1
    worst = 0.0
    for a, b in zip(*logs):
        for key in ("loss", "grad_norm"):
            worst = max(worst, abs(a[key] - b[key]) / max(abs(b[key]), 1e-30))
    ok &= worst <= tol
    print(f"{'ok' if worst <= tol else 'FAIL'}: {len(logs[0])} steps, "
          f"loss and grad_norm within {tol:g} (worst {worst:.1e})")
    if evals[0] or evals[1]:
        same = [a["step"] for a in evals[0]] == [b["step"] for b in evals[1]]
        worst = max(abs(a["eval_loss"] - b["eval_loss"]) /
                    max(abs(b["eval_loss"]), 1e-30)
                    for a, b in zip(*evals)) if same else float("inf")
        ok &= worst <= tol
        print(f"{'ok' if worst <= tol else 'FAIL'}: {len(evals[0])} "
              f"evaluations (after steps "
              f"{','.join(str(a['step']) for a in evals[0])}), eval_loss "
              f"within {tol:g} (worst {worst:.1e})")
    for path_a, path_b in zip(rest[2::2], rest[3::2]):
        ok &= compare_tensor_files(path_a, path_b, tol, init)
    return 0 if ok else 1


def compare_tensor_files(path_a, path_b, tol, init=None, what=None):
    """Prints whether two safetensors files hold the same tensors with
    values within `tol` (see the module comment; `init`: the initial
    weights, to measure against what training changed; `what`: the words
    for the tolerance); returns whether they do."""
    a, b = read_safetensors(path_a), read_safetensors(path_b)
    if sorted(a) != sorted(b):
        print(f"FAIL: {path_a} and {path_b} hold different tensors")
        return False
    ok, worst = True, 0.0
    for name in a:
        if a[name][0] != b[name][0]:
            print(f"FAIL: {name} has shape {a[name][0]} and {b[name][0]}")
            ok = False
            continue
        if init is not None:
            num = diff_norm(a[name][1], b[name][1])
            den = diff_norm(b[name][1], init[name][1])
        else:
            num = max((abs(x - y) for x, y in zip(a[name][1], b[name][1])),
                      default=0.0)
            den = max((abs(y) for y in b[name][1]), default=0.0)
        worst = max(worst, num / den if den else num)
    ok &= worst <= tol
    print(f"{'ok' if worst <= tol else 'FAIL'}: {len(a)} tensors "
          f"{what or f'within {tol:g}'} (worst {worst:.1e})")
    return ok


if __name__ == "__main__":
    sys.exit(main(sys.argv))
