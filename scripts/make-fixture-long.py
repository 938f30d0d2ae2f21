#!/usr/bin/env python3
"""Makes the llama-ref-e fixture: HF transformers' training reference at a
sequence long enough for context parallelism's chunks to hold many tokens.

A small LLaMA of odd sizes (vocabulary 300, hidden 96, SwiGLU 200, 2 layers,
6 query / 2 key-value heads of 16, RMSNorm eps 1e-5, rope theta 500000,
tied embeddings), batch 2 x sequence 384, 4 steps, AdamW lr 3e-3, betas
0.9/0.95, eps 1e-8, weight decay 0.1, clipping at 1.0. 384 = 2^7 * 3 cuts
into the 2 * cp load-balanced chunks of cp 2, 3, 4, 6 and 8 (96 tokens a
chunk at cp 2, 24 at cp 8), and none of the sizes is a multiple of 32 but
the sequence.

The training itself is make() of the shared fixtures' make_fixture.py (HF
transformers' LlamaForCausalLM in float64 on the CPU), imported from the
directory given by --make-fixture-dir; that file is not part of this
repository. Afterwards the script checks what it made, with HF's own
classes, and fails if any check does:
  - the saved config.json reads back with these sizes and tied embeddings,
    and no file holds an lm_head.weight;
  - the step-0 loss recomputed from model.safetensors is train.json's;
  - the sequence matters far: the step-0 gradients of the query and key
    projections with attention limited to the last 64 tokens differ from
    the full attention's by far more than the replay's tolerance (1e-4
    relative per tensor), so a replay whose distant chunks saw each other
    wrongly would fail.
It then writes README.md into the fixture: the command, the machine, the
versions of Python, torch and transformers, and the checks' figures.

Needs torch, transformers 5 and safetensors; no network and no LLVM.
Usage (from the repository root):
  python3 scripts/make-fixture-long.py \\
      --make-fixture-dir /path/to/shared/fixtures --out test/Fixtures
"""
import argparse
import json
import os

import fixture_common

NAME = "llama-ref-e"
MODEL = dict(vocab_size=300, hidden_size=96, intermediate_size=200,
             num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
             head_dim=16, rms_norm_eps=1e-5,
             rope_parameters=dict(rope_type="default", rope_theta=500000.0))
BATCH, SEQ, STEPS, SEED, CLIP = 2, 384, 4, 97531, 1.0
OPTIMIZER = dict(lr=3e-3, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1)
GRAD_TOLERANCE = 1e-4
WINDOW = 64
ROTATED = [f"model.layers.{layer}.self_attn.{proj}_proj.weight"
           for layer in range(MODEL["num_hidden_layers"]) for proj in "qk"]


def step0(model, tokens, vocab, window=None):
    """The step-0 loss and the rotated projections' gradients; with `window`,
    each query attends to the last `window` keys only."""
    import torch
    x, y = tokens[:, :-1], tokens[:, 1:]
    model.zero_grad(set_to_none=True)
    kwargs = {}
    if window is not None:
        n = x.shape[1]
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        allowed = (j <= i) & (j > i - window)
        mask = torch.zeros(n, n, dtype=torch.float64)
        mask[~allowed] = torch.finfo(torch.float64).min
        kwargs["attention_mask"] = mask[None, None].expand(x.shape[0], 1, n, n)
    logits = model(input_ids=x, **kwargs).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             y.reshape(-1))
    loss.backward()
    params = dict(model.named_parameters())
    return float(loss), {n: params[n].grad.detach().clone() for n in ROTATED}


def verify(out):
    import torch
    from safetensors.torch import load_file
    lines = []
    model, cfg = fixture_common.load_model(out, NAME)
    for key in ("vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim"):
        if getattr(cfg, key) != MODEL[key]:
            raise SystemExit(f"{NAME}: config.json has {key} "
                             f"{getattr(cfg, key)}, expected {MODEL[key]}")
    if not cfg.tie_word_embeddings:
        raise SystemExit(f"{NAME}: config.json has untied embeddings")
    for file in ("model.safetensors", "final.safetensors",
                 "grads_step0.safetensors"):
        if "lm_head.weight" in load_file(os.path.join(out, file)):
            raise SystemExit(f"{NAME}: {file} holds an lm_head.weight")

    train = json.load(open(os.path.join(out, "train.json")))
    tokens = torch.tensor(train["tokens"][0])
    loss, grads = step0(model, tokens, cfg.vocab_size)
    if abs(loss - train["loss"][0]) > 1e-9 * abs(train["loss"][0]):
        raise SystemExit(f"{NAME}: the step-0 loss recomputed, {loss!r}, is "
                         f"not train.json's {train['loss'][0]!r}")
    lines.append(f"step-0 loss {loss:.9f} recomputed from model.safetensors "
                 "(train.json's)")
    windowed, windowed_grads = step0(model, tokens, cfg.vocab_size, WINDOW)
    gaps = {n: float(torch.linalg.norm(windowed_grads[n] - g) /
                     torch.linalg.norm(g)) for n, g in grads.items()}
    least = min(gaps, key=gaps.get)
    if gaps[least] < 100 * GRAD_TOLERANCE:
        raise SystemExit(f"{NAME}: attention limited to {WINDOW} tokens "
                         f"changes the gradient of {least} by only "
                         f"{gaps[least]:.2e}")
    lines.append(f"attention limited to the last {WINDOW} tokens changes the "
                 "step-0 gradients of the query and key projections by " +
                 ", ".join(f"{gaps[n]:.2e}" for n in ROTATED) +
                 f" (relative; the replay's limit is {GRAD_TOLERANCE:g}) and "
                 f"the loss to {windowed:.9f}")
    return lines


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--make-fixture-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    make = fixture_common.import_make(NAME, args.make_fixture_dir)
    os.environ["OUT"] = os.path.abspath(args.out)
    out = os.path.join(os.environ["OUT"], NAME)
    make(NAME, MODEL, batch=BATCH, seq=SEQ, steps=STEPS, opt_kw=OPTIMIZER,
         clip=CLIP, seed=SEED, tie=True)
    checks = verify(out)
    fixture_common.write_readme(
        out, NAME,
        "HF transformers' training reference at a long sequence (context "
        "parallelism)",
        f"""A small LLaMA of odd sizes (vocab 300, hidden 96, SwiGLU 200, 2 layers, 6 / 2 heads of 16,
RMSNorm eps 1e-5, rope theta 500000, tied embeddings), trained by `LlamaForCausalLM` in float64
on the CPU for {STEPS} steps of batch {BATCH} x seq {SEQ}: AdamW lr {OPTIMIZER['lr']}, betas
{OPTIMIZER['betas']}, eps {OPTIMIZER['eps']}, weight decay {OPTIMIZER['weight_decay']}, clipping
at {CLIP}, seed {SEED}. Seq {SEQ} = 2^7 x 3 cuts into the 2 x cp load-balanced chunks of cp 2,
3, 4, 6 and 8. The files are those of the shared fixtures (README.md there); no lm_head.weight
anywhere (tied). test/Training/context-parallel-fixture.test replays it.""",
        fixture_common.command_line(), "scripts/make-fixture-long.py", checks)


if __name__ == "__main__":
    main()
