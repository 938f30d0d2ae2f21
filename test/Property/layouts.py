#!/usr/bin/env python3
"""The layout rule book's property test (standard library only).

  layouts.py [--cases N] [--seed S] [--mlt-run PATH] [--work DIR] [--keep]
             [--jobs J] [--verbose] [--case K]

Draws random small LLaMA shapes (hidden sizes, heads, key/value heads, head
dims, intermediate sizes and vocabularies that are not multiples of 8 or 64
included; tied embeddings; 1 to 6 layers) and random layouts (tp, sequence
parallelism, pp, vp, pp-group-size, dp, cp (both exchanges), ZeRO 0/1/2,
micro-batches, every schedule, recomputed activations and whole layers, fp32/bf16/FP8 (and
both of FP8's weight caches), bf16 gradient
reduction, overlap switches (the tp overlap's too), bucket sizes), and holds `mlt-run` to the rule
book's promise:

  - a layout the rule book accepts compiles, passes the plan verifier and
    trains 2 steps equal to the one-rank run of the same model, batch and
    precision: every step's loss and gradient norm, the step-1 gradients,
    the final weights and the loss of an evaluation of held-out data after
    the last step (--split, the plan's evaluation step) within the
    tolerances below;
  - a layout it refuses is refused before anything runs, every line of the
    error a rule's one-line message (`mlt-run: error: ... (rule NAME)`),
    exit status 1, and nothing written.

Tolerances. fp32: the layouts sum the same products in other orders (split
over tp, dp and micro-batches), so results differ by f32 rounding: losses
and step-1 gradient norms within 1e-5 relative (the HF fixtures'
agreement), later gradient norms within 1e-4, each step-1 gradient tensor
within 1e-4 of its norm, each final weight within 1e-3 of what the two
steps changed (the fixtures' measure of final weights; a slice left out or
updated twice misses by all of it). AdamW runs with eps 1e-5: its first
steps move an element by lr * g / (|g| + eps), which for |g| near eps turns
a rounding difference of g into one of the update (an element of |g| ~
1e-8, the sum of terms that cancel, moved 0.5% of lr apart between two
orders of summation with eps 1e-8); eps 1e-5 keeps that below the
gradients' own agreement, and the elements that matter, |g| of 1e-4 and
more, are still normalized.

bf16: activations and weight copies are rounded to 8 bits of mantissa at
points that depend on the split, and AdamW's first step (lr 1e-2 on a tiny
model) amplifies that, so how far a layout may be from the one-rank bf16
run is measured on the case itself: twice the distance of the one-rank
bf16 run from the one-rank fp32 run, metric by metric, and at least 2e-2
on losses (the fixtures' bf16 agreement), 5e-2 on step-1 gradient norms and
gradients (computed from the same weights, and where a bf16 path's bug
shows), 0.2 on later gradient norms and 0.5 on final weights against their
update: one bf16 sample says little of that spread (measured: a step-2
gradient norm of a tiny bf16 model 0.1% from fp32's, the same model at tp 2
3.3% on one side and a tp 2 x dp 2 x pp 2 layout 5.4% on the other, whose
fp32 run is fp32's within 1e-5).

FP8 (`--dtype bf16 --fp8`): the same, from the one-rank FP8 run against
the one-rank fp32 run. Each rank scales the tensors it holds by their own
largest magnitude, and each micro-batch its own activations, so a layout's
quantization differs from the one-rank run's within FP8's rounding, which
that distance measures.

A failure prints the case (its seed, shape and flags, and the command to run
it alone); the run exits 1 if any case fails. With a fixed --seed the cases
are the same on every machine.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from array import array
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "Training"))
from fixture_tools import read_safetensors  # noqa: E402

RULE_LINE = "mlt-run: error: "

# The agreement asked of a layout with the one-rank run (see the top).
TOLERANCES = {
    "fp32": {"loss": 1e-5, "grad_norm": 1e-5, "grad_norm_later": 1e-4,
             "grads": 1e-4, "weights": 1e-3},
    "bf16": {"loss": 2e-2, "grad_norm": 5e-2, "grad_norm_later": 2e-1,
             "grads": 5e-2, "weights": 5e-1},
}
TOLERANCES["fp8"] = TOLERANCES["bf16"]

# Each precision's flags (the one-rank reference's too).
PRECISION_FLAGS = {"fp32": [], "bf16": ["--dtype", "bf16"],
                   "fp8": ["--dtype", "bf16", "--fp8"]}


def draw_model(rng):
    """A random LLaMA config.json (as a dict). Half the time the sizes that
    tensor parallelism splits are multiples of 12 (divisible by tp 2, 3 and
    4, and still not multiples of 8 or 64 as often as not), so that layouts
    with tp are not mostly refusals."""
    kv_heads = rng.choice([1, 1, 2, 2, 3, 4, 6, 12])
    heads = kv_heads * rng.choice([1, 1, 2, 3])
    if rng.random() < 0.5:
        head_dim = rng.choice([4, 6, 8, 10, 12, 16])
        hidden = heads * head_dim
        explicit_head_dim = False
    else:
        head_dim = rng.choice([4, 6, 8, 12, 16])
        hidden = rng.randrange(8, 97)
        explicit_head_dim = True
    friendly = rng.random() < 0.5
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": 12 * rng.randrange(1, 14) if friendly
                             else rng.randrange(8, 161),
        "vocab_size": 12 * rng.randrange(2, 34) if friendly
                      else rng.randrange(17, 400),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "num_hidden_layers": rng.choice([1, 2, 2, 3, 4, 4, 5, 6]),
        "max_position_embeddings": rng.choice([24, 32, 48]),
        "rms_norm_eps": 1e-5,
        "rope_theta": rng.choice([10000.0, 500000.0]),
        "tie_word_embeddings": rng.random() < 0.3,
    }
    if explicit_head_dim:
        config["head_dim"] = head_dim
    return config


def draw_layout(rng, config):
    """(flags, batch, seq_len, dtype) of a random layout for `config`;
    mostly layouts the rule book should accept (a tp that divides what it
    splits, stages that the layers fill), sometimes ones it should not."""
    splits = [config[k] for k in ("num_attention_heads", "num_key_value_heads",
                                  "intermediate_size", "vocab_size")]
    fitting_tp = [t for t in (2, 3, 4) if all(n % t == 0 for n in splits)]
    layers = config["num_hidden_layers"]
    while True:
        tp = rng.choice([1, 1, 2, 2, 3, 4])
        if fitting_tp and rng.random() < 0.6:
            tp = rng.choice(fitting_tp)
        dp = rng.choice([1, 1, 2, 2, 3, 4])
        pp = rng.choice([1, 1, 2, 2, 3])
        if pp > layers and rng.random() < 0.8:
            pp = rng.choice([1, min(2, layers)])
        cp = rng.choice([1, 1, 1, 2, 2, 3, 4])
        if tp * dp * pp * cp <= 8:
            break
    flags = []
    if tp > 1:
        flags += ["--tp", str(tp)]
        if rng.random() < 0.4:
            flags.append("--sequence-parallel")
    if dp > 1:
        flags += ["--dp", str(dp)]
    if cp > 1:
        flags += ["--cp", str(cp)]
        # The all-to-all exchange, mostly where tp x cp divides the heads
        # (the rule book refuses the rest); the ring, any heads.
        heads_fit = all(config[k] % (tp * cp) == 0 for k in
                        ("num_attention_heads", "num_key_value_heads"))
        exchange = rng.random()
        if exchange < (0.4 if heads_fit else 0.1):
            flags += ["--cp-comm", "a2a"]
        elif exchange > 0.6:
            flags += ["--cp-comm", "ring"]
    vp = 1
    microbatches = rng.choice([1, 1, 2, 3, 4])
    if pp > 1:
        flags += ["--pp", str(pp)]
        microbatches = rng.choice([pp, pp, 2 * pp, pp + 1, 1, 3])
        if rng.random() < 0.35 and (2 * pp <= layers or rng.random() < 0.2):
            vp = rng.choice([2, 2, 3])
            flags += ["--vp", str(vp)]
            if rng.random() < 0.3:
                flags += ["--pp-group-size", str(rng.choice([pp, pp + 1]))]
    schedule = rng.random()
    if schedule < 0.15:
        flags += ["--schedule", "gpipe"]
    elif schedule < 0.3:
        flags += ["--schedule", "zb-h1"]
    elif schedule < 0.35:
        flags += ["--schedule", "interleaved" if vp == 1 else "1f1b"]
    if microbatches > 1:
        flags += ["--microbatches", str(microbatches)]
    if dp > 1:
        zero = rng.choice([0, 1, 2, 2])
        if zero:
            flags += ["--zero", str(zero)]
    recompute = rng.random()
    if recompute < 0.2:
        flags += ["--recompute", "swiglu"]
    elif recompute < 0.3:
        flags += ["--recompute", "attention"]
    if rng.random() < 0.3:
        flags += ["--recompute-layers", rng.choice(["all", "every:2", "every:3"])]
    dtype = "bf16" if rng.random() < 0.3 else "fp32"
    if dtype == "bf16" and rng.random() < 0.4:
        dtype = "fp8"
    flags += PRECISION_FLAGS[dtype]
    if dtype == "fp8" and microbatches > 1 and rng.random() < 0.5:
        flags += ["--fp8-weight-cache", "both"]
    if dtype != "fp32":
        if "--zero" in flags and flags[flags.index("--zero") + 1] == "2" \
                and rng.random() < 0.5:
            flags += ["--grad-reduce-dtype", "bf16"]
    if rng.random() < 0.2:
        flags += ["--overlap-grad-reduce", "off"]
    if rng.random() < 0.2:
        flags += ["--overlap-param-gather", "off"]
    if rng.random() < 0.4:
        flags += ["--grad-bucket-mb", str(rng.choice([0, 1]))]
    if "--tp" in flags and rng.random() < 0.2:
        flags += ["--overlap-tp-comm", "off"]
    # Mostly a batch that the micro-batches and dp divide.
    per = rng.choice([1, 1, 2])
    batch = microbatches * dp * per
    if rng.random() < 0.1:
        batch += 1
    seq_len = rng.randrange(3, 33)
    # Mostly a sequence the splits divide: tp's blocks with sequence
    # parallelism (under cp, of each cp block: cp x tp), cp's 2 x cp
    # load-balanced chunks.
    unit = 1
    if tp > 1 and "--sequence-parallel" in flags and rng.random() < 0.8:
        unit = tp * cp
    if cp > 1 and rng.random() < 0.85:
        unit = math.lcm(unit, 2 * cp)
    seq_len = max(unit, seq_len - seq_len % unit)
    return flags, batch, seq_len, dtype


class Case:
    def __init__(self, index, seed):
        self.index = index
        self.seed = seed
        rng = random.Random(seed)
        self.config = draw_model(rng)
        self.flags, self.batch, self.seq_len, self.dtype = draw_layout(
            rng, self.config)
        positions = self.config["max_position_embeddings"]
        if self.seq_len > positions or rng.random() < 0.03:
            self.seq_len = positions + 1 if rng.random() < 0.3 else positions

    def describe(self):
        c = self.config
        shape = (f"hidden {c['hidden_size']}, intermediate "
                 f"{c['intermediate_size']}, vocab {c['vocab_size']}, heads "
                 f"{c['num_attention_heads']}/{c['num_key_value_heads']}"
                 f"{', head_dim ' + str(c['head_dim']) if 'head_dim' in c else ''}"
                 f", layers {c['num_hidden_layers']}, max positions "
                 f"{c['max_position_embeddings']}"
                 f"{', tied' if c['tie_word_embeddings'] else ''}")
        return (f"case {self.index} (seed {self.seed}): {shape}; batch "
                f"{self.batch} x seq {self.seq_len}; "
                f"{' '.join(self.flags) or 'one rank'}")


def write_tokens(path, vocab, count, seed):
    rng = random.Random(seed)
    tokens = array("H", (rng.randrange(vocab) for _ in range(count)))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(tokens.tobytes())


def run(command):
    proc = subprocess.run(command, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def update_diff(a, b, init):
    """|a - b| / |b - init| in L2 norm: weights trained from `init`, their
    difference against what training changed (the fixtures' measure)."""
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum((y - z) ** 2 for y, z in zip(b, init))
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def norm_diff(a, b):
    """|a - b| / |b| in L2 norm over the values of two tensors."""
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def compare(ref, out, init, tolerances):
    """(failure messages, worst figures) of the run `out` against the run
    `ref` (directories holding log.jsonl, grads.safetensors and final/),
    whose initial weights are `init`, at `tolerances` (TOLERANCES' keys)."""
    worst = {key: 0.0 for key in tolerances}
    problems = []
    logs = []
    for d in (out, ref):
        with open(os.path.join(d, "log.jsonl")) as f:
            logs.append([json.loads(line) for line in f if line.strip()])
    if len(logs[0]) != len(logs[1]):
        return [f"{len(logs[0])} logged steps against {len(logs[1])}"], worst

    def note(key, value, what):
        worst[key] = max(worst[key], value)
        if value > tolerances[key]:
            problems.append(f"{what} differs by {value:.3g} (tolerance "
                            f"{tolerances[key]:g})")

    for a, b in zip(*logs):
        if ("eval_loss" in a) != ("eval_loss" in b):
            problems.append(f"after step {a['step']}: a step's record against "
                            f"an evaluation's")
            continue
        if "eval_loss" in a:
            # (the held-out batch's loss: the forward pass alone, held to
            # the losses' tolerance)
            note("loss", relative(a["eval_loss"], b["eval_loss"]),
                 f"the evaluation after step {a['step']}: eval_loss "
                 f"{a['eval_loss']!r} against {b['eval_loss']!r}:")
            continue
        note("loss", relative(a["loss"], b["loss"]),
             f"step {a['step']}: loss {a['loss']!r} against {b['loss']!r}:")
        key = "grad_norm" if a["step"] == 1 else "grad_norm_later"
        note(key, relative(a["grad_norm"], b["grad_norm"]),
             f"step {a['step']}: grad_norm {a['grad_norm']!r} against "
             f"{b['grad_norm']!r}:")
    for name, key in (("grads.safetensors", "grads"),
                      ("final/model.safetensors", "weights")):
        mine = read_safetensors(os.path.join(out, name))
        theirs = read_safetensors(os.path.join(ref, name))
        if sorted(mine) != sorted(theirs):
            problems.append(f"{name}: tensors {sorted(set(mine) ^ set(theirs))} "
                            f"in one only")
            continue
        for tensor in sorted(mine):
            if mine[tensor][0] != theirs[tensor][0]:
                problems.append(f"{name}: {tensor} shape {mine[tensor][0]} "
                                f"against {theirs[tensor][0]}")
                continue
            if key == "grads":
                d = norm_diff(mine[tensor][1], theirs[tensor][1])
                what = f"{name}: {tensor} (of its norm)"
            else:
                d = update_diff(mine[tensor][1], theirs[tensor][1],
                                init[tensor][1])
                what = f"{name}: {tensor} (of the update's norm)"
            note(key, d, what)
    return problems, worst


# Every run but the initial weights' holds a quarter of the data out and
# evaluates one batch of it after its last step (the evaluation step of
# the plan, through the layout), which the comparison holds to the loss's
# tolerance. The data has 4 batches and more, so a batch is held out.
EVAL_FLAGS = ["--split", "3,1", "--eval-iters", "1"]


def train_command(args, model, data, case, out, flags, lr="1e-2",
                  evaluate=True):
    return [args.mlt_run, model, "--data", data, "--batch", str(case.batch),
            "--seq-len", str(case.seq_len), "--steps", "2", "--lr", lr,
            "--adam-eps", "1e-5",
            "--seed", str(case.seed), "--log-json",
            os.path.join(out, "log.jsonl"), "--dump-grads",
            os.path.join(out, "grads.safetensors"), "--save-hf",
            os.path.join(out, "final")] + flags + (EVAL_FLAGS if evaluate
                                                   else [])


def check_case(args, case):
    """(verdict, messages): verdict 'trained', 'refused' or 'FAILED'."""
    work = os.path.join(args.work, f"case-{case.index}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model = os.path.join(work, "model")
    os.makedirs(model)
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(case.config, f)
    data = os.path.join(work, "tokens.u16")
    write_tokens(data, case.config["vocab_size"],
                 (case.seq_len + 1) * case.batch * 4 + 64, case.seed)
    out = os.path.join(work, "layout")
    os.makedirs(out)
    command = train_command(args, model, data, case, out, case.flags)
    code, stdout, stderr = run(command)
    lines = [line for line in stderr.splitlines() if line.strip()]
    if code != 0:
        bad = [line for line in lines
               if not (line.startswith(RULE_LINE) and line.endswith(")")
                       and "(rule " in line)]
        problems = []
        if bad or not lines:
            problems.append("refused or failed without naming a rule: " +
                            (" | ".join(lines[-3:]) or f"exit {code}"))
        if code != 1:
            problems.append(f"exit status {code}, not 1")
        if "step " in stdout:
            problems.append("refused after training had begun")
        if os.listdir(out):
            problems.append(f"left {sorted(os.listdir(out))} behind")
        if problems:
            return "FAILED", problems + [" ".join(command)]
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return "refused", [lines[0][len(RULE_LINE):]]
    # The one-rank reference of the same model, batch and precision.
    ref = os.path.join(work, "one-rank")
    os.makedirs(ref)
    ref_flags = PRECISION_FLAGS[case.dtype]
    code, _, ref_err = run(train_command(args, model, data, case, ref,
                                         ref_flags))
    if code != 0:
        return "FAILED", ["the one-rank reference failed: " +
                          " | ".join(ref_err.splitlines()[-3:])]
    # Its initial weights: a step of learning rate 0 (AdamW's decay is lr
    # times the weight decay) saved.
    start = os.path.join(work, "init")
    os.makedirs(start)
    code, _, init_err = run(train_command(args, model, data, case, start,
                                          ref_flags, lr="0", evaluate=False))
    if code != 0:
        return "FAILED", ["the initial weights' run failed: " +
                          " | ".join(init_err.splitlines()[-3:])]
    init = read_safetensors(os.path.join(start, "final", "model.safetensors"))
    tolerances = dict(TOLERANCES[case.dtype])
    if case.dtype != "fp32":
        # bf16's (or FP8's) own rounding in this case: the one-rank run
        # against the one-rank fp32 run; a layout may differ from the
        # one-rank run by twice that (and by the base tolerances at least).
        exact = os.path.join(work, "one-rank-fp32")
        os.makedirs(exact)
        code, _, exact_err = run(train_command(args, model, data, case, exact,
                                               []))
        if code != 0:
            return "FAILED", ["the fp32 one-rank run failed: " +
                              " | ".join(exact_err.splitlines()[-3:])]
        _, noise = compare(exact, ref, init,
                           {key: math.inf for key in tolerances})
        for key in tolerances:
            tolerances[key] = max(tolerances[key], 2 * noise[key])
    problems, worst = compare(ref, out, init, tolerances)
    figures = "worst: " + ", ".join(f"{k} {v:.2g}" for k, v in worst.items())
    if problems:
        return "FAILED", problems + [figures, " ".join(command)]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return "trained", [figures]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--case", type=int, default=None,
                        help="run only case K of the seed's cases")
    parser.add_argument("--mlt-run", default=shutil.which("mlt-run") or "mlt-run")
    parser.add_argument("--work", default=None)
    parser.add_argument("--keep", action="store_true",
                        help="keep every case's files (failures' always are)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    own_work = args.work is None
    if own_work:
        args.work = tempfile.mkdtemp(prefix="mlt-layouts-")
    master = random.Random(args.seed)
    cases = [Case(i, master.randrange(1 << 30)) for i in range(args.cases)]
    if args.case is not None:
        cases = [cases[args.case]]
    counts = {"trained": 0, "refused": 0, "FAILED": 0}
    rules = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for case, (verdict, messages) in zip(
                cases, pool.map(lambda c: check_case(args, c), cases)):
            counts[verdict] += 1
            if verdict == "refused":
                rule = messages[0].rsplit("(rule ", 1)[-1].rstrip(")")
                rules[rule] = rules.get(rule, 0) + 1
            if verdict == "FAILED" or args.verbose:
                print(f"{verdict}: {case.describe()}")
                for message in messages:
                    print(f"  {message}")
                sys.stdout.flush()
    print(f"layouts: {len(cases)} cases (seed {args.seed}): "
          f"{counts['trained']} trained as one rank, {counts['refused']} "
          f"refused by a rule, {counts['FAILED']} failed")
    if rules:
        print("  refusals: " + ", ".join(f"{rule} {n}"
                                         for rule, n in sorted(rules.items())))
    if own_work and counts["FAILED"] == 0:
        shutil.rmtree(args.work, ignore_errors=True)
    elif counts["FAILED"]:
        print(f"  the failed cases' files are under {args.work}")
    return 1 if counts["FAILED"] else 0


if __name__ == "__main__":
    sys.exit(main())
