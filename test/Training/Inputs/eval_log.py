#!/usr/bin/env python3
"""Checks the evaluations of an mlt-run --log-json (standard library only).

  eval_log.py check LOG.jsonl STEPS TOKENS
      The log's evaluation records ({"step", "eval_loss", "eval_perplexity",
      "eval_tokens", "eval_time_s"}) are after the steps STEPS
      (comma-separated), each right after its step's record (or first, for
      step 0), with eval_perplexity = exp(eval_loss) and TOKENS tokens.

  eval_log.py same-training LOG_A.jsonl LOG_B.jsonl
      The two logs' step records have the same steps with bit-identical
      losses and gradient norms (the evaluations' records left out): an
      evaluation does not perturb training.

Prints one line per check; exits 1 on a failure.
"""
import json
import math
import sys


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check(path, steps, tokens):
    rows = records(path)
    evals = [(i, r) for i, r in enumerate(rows) if "eval_loss" in r]
    got = [r["step"] for _, r in evals]
    if got != steps:
        print(f"FAIL: evaluations after steps {got}, expected {steps}")
        return 1
    for i, r in evals:
        keys = sorted(r)
        if keys != ["eval_loss", "eval_perplexity", "eval_time_s",
                    "eval_tokens", "step"]:
            print(f"FAIL: an evaluation record has the keys {keys}")
            return 1
        before = rows[i - 1] if i > 0 else None
        if r["step"] > 0 and (before is None or before.get("step") != r["step"]
                              or "loss" not in before):
            print(f"FAIL: the evaluation after step {r['step']} does not "
                  f"follow that step's record")
            return 1
        if abs(r["eval_perplexity"] - math.exp(r["eval_loss"])) > \
                1e-12 * r["eval_perplexity"]:
            print(f"FAIL: eval_perplexity {r['eval_perplexity']} is not "
                  f"exp({r['eval_loss']})")
            return 1
        if r["eval_tokens"] != tokens or not r["eval_time_s"] >= 0:
            print(f"FAIL: eval_tokens {r['eval_tokens']}, expected {tokens}")
            return 1
    print(f"ok: evaluations after steps {','.join(map(str, steps))}, each "
          f"after its step, eval_perplexity = exp(eval_loss), {tokens} tokens")
    return 0


def same_training(path_a, path_b):
    a = [r for r in records(path_a) if "eval_loss" not in r]
    b = [r for r in records(path_b) if "eval_loss" not in r]
    key = lambda r: (r["step"], r["loss"], r["grad_norm"])
    if list(map(key, a)) != list(map(key, b)):
        print(f"FAIL: the steps differ: {list(map(key, a))} against "
              f"{list(map(key, b))}")
        return 1
    print(f"ok: {len(a)} steps, losses and gradient norms bit-identical")
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "check":
        steps = [int(s) for s in argv[3].split(",")]
        return check(argv[2], steps, int(argv[4]))
    if len(argv) == 4 and argv[1] == "same-training":
        return same_training(argv[2], argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
