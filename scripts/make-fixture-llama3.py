#!/usr/bin/env python3
"""Makes the llama-ref-d fixture: HF transformers' training reference for
Llama 3.1's rotary scaling (rope_type "llama3") and tied embeddings.

A tiny LLaMA shaped as llama-ref-a (vocabulary 256, hidden 64, SwiGLU 176,
2 layers, 4 query / 2 key-value heads of 16, RMSNorm eps 1e-5, rope theta
10000), with tied embeddings and llama3 scaling chosen so that it changes the
rotation at the fixture's sequence length: original_max_position_embeddings
32, low_freq_factor 1, high_freq_factor 4, factor 8. The 8 frequencies of a
head of 16 have wavelengths 6.3, 19.9, 62.8, ... 19869 positions: the first
is kept (below 32 / 4 = 8), the second smoothed (between 8 and 32), the other
six divided by 8, so every branch of the formula is taken, and by position
31 the scaled angles differ from the unscaled ones by radians. Batch 4 x
sequence 32, 6 steps, AdamW as llama-ref-a (lr 3e-3, betas 0.9/0.95, eps
1e-8, weight decay 0.1, clipping at 1.0).

The training itself is make() of the shared fixtures' make_fixture.py (HF
transformers' LlamaForCausalLM in float64 on the CPU), imported from the
directory given by --make-fixture-dir; that file is not part of this
repository. Afterwards the script checks what it made, with HF's own
classes, and fails if any check does:
  - the saved config.json reads back with rope_type llama3 and these values,
    and tied embeddings;
  - HF's inverse frequencies (the model's rotary_emb.inv_freq) are the
    formula mlt computes (include/mlt/Plan/RopeFrequencies.h), written
    out here in Python, within float32 rounding, with each of the three
    branches taken;
  - the head is the embedding (one tensor), and neither the initial nor the
    final weights nor the step-0 gradients hold an lm_head.weight;
  - the step-0 loss recomputed from model.safetensors is train.json's;
  - the same weights with unscaled rotary embeddings give step-0 gradients
    of the query and key projections that differ by far more than the
    replay's tolerance (1e-4 relative per tensor), so a replay that ignored
    the scaling would fail (the loss of a freshly initialized model hardly
    depends on the rotation: its attention is nearly uniform; the
    projections' gradients go through it).
It then writes README.md into the fixture: the command, the machine and the
versions of Python, torch and transformers, and the checks' figures.

Needs torch, transformers 5 and safetensors; no network and no LLVM.
Usage (from the repository root):
  python3 scripts/make-fixture-llama3.py \\
      --make-fixture-dir /path/to/shared/fixtures --out test/Fixtures
writes test/Fixtures/llama-ref-d/ (config.json, model.safetensors,
train.json, grads_step0.safetensors, final.safetensors, README.md).
"""
import argparse
import json
import math
import os

import fixture_common

NAME = "llama-ref-d"
THETA = 10000.0
SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=32)
MODEL = dict(vocab_size=256, hidden_size=64, intermediate_size=176,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, rms_norm_eps=1e-5)
BATCH, SEQ, STEPS, SEED, CLIP = 4, 32, 6, 2468, 1.0
OPTIMIZER = dict(lr=3e-3, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1)
# The replay's tolerance for step-0 gradients (the fixtures' README), and how
# far above it the unscaled rotation's gradients must be for the fixture to
# tell scaled from unscaled.
GRAD_TOLERANCE = 1e-4
DISCRIMINATION = 100 * GRAD_TOLERANCE
# The projections whose gradients go through the rotation.
ROTATED = [f"model.layers.{layer}.self_attn.{proj}_proj.weight"
           for layer in range(MODEL["num_hidden_layers"]) for proj in "qk"]


def rope_parameters(rope_type):
    if rope_type == "default":
        return dict(rope_type="default", rope_theta=THETA)
    return dict(rope_type="llama3", rope_theta=THETA, **SCALING)


def mlt_inverse_frequencies(theta, dim, scaling):
    """mlt's formula (RopeFrequencies.h), in double: returns the inverse
    frequencies and the branch each took ("kept", "smoothed", "scaled")."""
    original = float(scaling["original_max_position_embeddings"])
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    factor = scaling["factor"]
    values, branches = [], []
    for i in range(dim // 2):
        inv = theta ** (-(2.0 * i) / dim)
        wavelen = 2 * math.pi / inv
        if wavelen < original / high:
            values.append(inv)
            branches.append("kept")
        elif wavelen > original / low:
            values.append(inv / factor)
            branches.append("scaled")
        else:
            smooth = (original / wavelen - low) / (high - low)
            values.append((1.0 - smooth) * inv / factor + smooth * inv)
            branches.append("smoothed")
    return values, branches


def check_config(config_cls):
    """Fails unless this transformers keeps llama3 rope_parameters as given."""
    cfg = config_cls(**MODEL, rope_parameters=rope_parameters("llama3"),
                     max_position_embeddings=max(SEQ, 64))
    params = getattr(cfg, "rope_parameters", None) or {}
    for key, value in dict(rope_type="llama3", rope_theta=THETA, **SCALING).items():
        if params.get(key) != value:
            raise SystemExit(f"{NAME}: this transformers turns rope_parameters "
                             f"into {params}; expected {key} = {value}")


def step0(model, tokens, vocab):
    """The step-0 loss of `model` on `tokens` and the gradients (unclipped)
    of the rotated projections."""
    import torch
    x, y = tokens[:, :-1], tokens[:, 1:]
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             y.reshape(-1))
    loss.backward()
    params = dict(model.named_parameters())
    return float(loss), {name: params[name].grad.detach().clone()
                         for name in ROTATED}


def load_model(out, rope_type):
    """The fixture's initial weights in float64, as make() trains them, with
    the given rotary embeddings."""
    def configure(cfg):
        cfg.rope_parameters = rope_parameters(rope_type)
    return fixture_common.load_model(out, NAME, configure)[0]


def verify(out):
    """The checks of the module docstring; returns lines for the README."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig
    lines = []

    cfg = LlamaConfig.from_pretrained(out)
    params = cfg.rope_parameters
    for key, value in dict(rope_type="llama3", rope_theta=THETA, **SCALING).items():
        if params.get(key) != value:
            raise SystemExit(f"{NAME}: config.json reads back with "
                             f"rope_parameters {params}")
    if not cfg.tie_word_embeddings:
        raise SystemExit(f"{NAME}: config.json has untied embeddings")

    model = load_model(out, "llama3")
    if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
        raise SystemExit(f"{NAME}: lm_head.weight is not the embedding")
    for file in ("model.safetensors", "final.safetensors", "grads_step0.safetensors"):
        if "lm_head.weight" in load_file(os.path.join(out, file)):
            raise SystemExit(f"{NAME}: {file} holds an lm_head.weight")

    hf = [float(v) for v in model.model.rotary_emb.inv_freq]
    ours, branches = mlt_inverse_frequencies(THETA, MODEL["head_dim"], SCALING)
    worst = max(abs(a - b) / b for a, b in zip(hf, ours))
    if worst > 1e-6:  # HF computes them in float32
        raise SystemExit(f"{NAME}: HF's inverse frequencies {hf} are not mlt's "
                         f"{ours} (worst relative difference {worst:.2e})")
    if set(branches) != {"kept", "smoothed", "scaled"}:
        raise SystemExit(f"{NAME}: the scaling takes only {set(branches)}")
    lines.append(f"HF's inverse frequencies = mlt's within {worst:.1e} "
                 f"(float32); branches {branches}")

    train = json.load(open(os.path.join(out, "train.json")))
    tokens = torch.tensor(train["tokens"][0])
    scaled, scaled_grads = step0(model, tokens, cfg.vocab_size)
    if abs(scaled - train["loss"][0]) > 1e-9 * abs(train["loss"][0]):
        raise SystemExit(f"{NAME}: the step-0 loss recomputed, {scaled!r}, is "
                         f"not train.json's {train['loss'][0]!r}")
    unscaled, unscaled_grads = step0(load_model(out, "default"), tokens,
                                     cfg.vocab_size)
    gaps = {name: float(torch.linalg.norm(unscaled_grads[name] - g) /
                        torch.linalg.norm(g))
            for name, g in scaled_grads.items()}
    least = min(gaps, key=gaps.get)
    if gaps[least] < DISCRIMINATION:
        raise SystemExit(f"{NAME}: unscaled rotary embeddings change the step-0 "
                         f"gradient of {least} by only {gaps[least]:.2e} "
                         f"(relative)")
    lines.append(f"step-0 loss {scaled:.9f} recomputed from model.safetensors "
                 f"(train.json's); without the scaling {unscaled:.9f} "
                 f"({abs(unscaled - scaled) / scaled:.1e} relative)")
    lines.append("without the scaling the step-0 gradients of the query and key "
                 "projections change by " +
                 ", ".join(f"{gaps[n]:.2e}" for n in ROTATED) +
                 f" (relative; the replay's limit is {GRAD_TOLERANCE:g})")
    return lines


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-fixture-dir", required=True,
                        help="the directory of make_fixture.py (the shared "
                             "fixtures' directory)")
    parser.add_argument("--out", required=True,
                        help=f"where to write {NAME}/ (e.g. test/Fixtures)")
    args = parser.parse_args()
    make = fixture_common.import_make(NAME, args.make_fixture_dir)
    from transformers import LlamaConfig
    check_config(LlamaConfig)

    os.environ["OUT"] = os.path.abspath(args.out)
    out = os.path.join(os.environ["OUT"], NAME)
    # make() fixes max_position_embeddings to max(seq, 64) = 64, above the
    # original context of 32 (as HF's llama3 validation wants).
    make(NAME, dict(MODEL, rope_parameters=rope_parameters("llama3")),
         batch=BATCH, seq=SEQ, steps=STEPS, opt_kw=OPTIMIZER, clip=CLIP,
         seed=SEED, tie=True)
    checks = verify(out)

    fixture_common.write_readme(
        out, NAME, "HF transformers' training reference for llama3 rotary scaling and tied embeddings",
        f"""A tiny LLaMA as llama-ref-a (vocab 256, hidden 64, SwiGLU 176, 2 layers, 4 / 2 heads of 16,
RMSNorm eps 1e-5, rope theta 10000), with tied embeddings and
`rope_parameters` `{json.dumps(rope_parameters("llama3"))}`
(max_position_embeddings 64), trained by `LlamaForCausalLM` in float64 on the CPU for {STEPS}
steps of batch {BATCH} x seq {SEQ}: AdamW lr {OPTIMIZER['lr']}, betas {OPTIMIZER['betas']},
eps {OPTIMIZER['eps']}, weight decay {OPTIMIZER['weight_decay']}, clipping at {CLIP}, seed {SEED}.
The files are those of the shared fixtures (README.md there): config.json, model.safetensors,
train.json, grads_step0.safetensors, final.safetensors; no lm_head.weight anywhere (tied).
test/Training/llama3-fixture.test replays it.""",
        fixture_common.command_line(), "scripts/make-fixture-llama3.py", checks)


if __name__ == "__main__":
    main()
