#!/usr/bin/env python3
# ===- make_long_fixture.py - HF's training at 256 tokens ---------------=== #
#
# Part of mlt. Makes llama-ref-long, the reference fixture whose sequence is
# long enough that context parallelism's chunks hold many tokens (cp 4: 8
# chunks of 32): HF transformers' LlamaForCausalLM trained in float64 by
# ../shared/fixtures/make_fixture.py's make(), with an even but not power-of-two vocabulary (302, which tp 2 divides)
# and 6 query / 2 key-value heads of head_dim 12, untied. Run where torch and
# transformers are installed (the GPU machine; CPU float64, so the result
# does not depend on the GPU):
#
#   OUT=DIR python3 scripts/make_long_fixture.py   # writes DIR/llama-ref-long
#
# (make_fixture.py beside this file, or in ../shared/fixtures.) The result
# lives in test/Training/Inputs/llama-ref-long.
#
# ===----------------------------------------------------------------------=== #
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
for place in (here, os.path.join(here, "..", "..", "shared", "fixtures")):
    if os.path.exists(os.path.join(place, "make_fixture.py")):
        sys.path.insert(0, place)
        break
import make_fixture  # noqa: E402  (its module body makes nothing on import)

make_fixture.make(
    "llama-ref-long",
    dict(vocab_size=302, hidden_size=72, intermediate_size=148,
         num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
         rms_norm_eps=1e-5, rope_theta=10000.0),
    batch=2, seq=256, steps=4,
    opt_kw=dict(lr=3e-3, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1),
    clip=1.0, seed=3707)
