#!/usr/bin/env python3
# ===- attention_torch.py - PyTorch SDPA timings for comparison ----------=== #
#
# Part of mlt. Times torch.nn.functional.scaled_dot_product_attention (bf16,
# causal, layout [b, h, s, d], enable_gqa) with the FLASH_ATTENTION and the
# CUDNN_ATTENTION backends at the shapes of bench/attention_bench.cu: the
# forward, and forward + backward (the backward's time is their difference).
# CUDA events, warm-up, median. FLOPs as the bench counts them: forward
# 2 * 2 * b * h * s * s * d / 2 when causal, backward 2.5 times that.
# A backend that refuses GQA is retried with k and v expanded to the query
# heads (repeat_interleave outside the timed region), and says so.
#
# Usage: python3 bench/attention_torch.py [reps]
#
# ===----------------------------------------------------------------------=== #

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
SHAPES = [
    ("TinyLlama", 4, 2048, 32, 4, 64),
    ("LLaMA-7B", 1, 4096, 32, 32, 128),
]


def median_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPS):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def bench(name, b, s, hq, hkv, d):
    print(f"\n{name}: batch {b} seq {s} q_heads {hq} kv_heads {hkv} "
          f"head_dim {d} causal", flush=True)
    fwd_flops = 4.0 * b * hq * s * s * d / 2
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, lo, hi):
        x = torch.rand(*shape, device="cuda", generator=gen) * (hi - lo) + lo
        return x.to(torch.bfloat16)

    q = rand(b, hq, s, d, lo=-2, hi=2).requires_grad_()
    k = rand(b, hkv, s, d, lo=-2, hi=2).requires_grad_()
    v = rand(b, hkv, s, d, lo=-1, hi=1).requires_grad_()
    dout = rand(b, hq, s, d, lo=-1, hi=1)
    for label, backend in (("torch flash", SDPBackend.FLASH_ATTENTION),
                           ("torch cudnn", SDPBackend.CUDNN_ATTENTION)):
        for gqa in (True, False):
            if gqa:
                kk, vv, note = k, v, ""
            else:
                rep = hq // hkv
                kk = k.detach().repeat_interleave(rep, 1).requires_grad_()
                vv = v.detach().repeat_interleave(rep, 1).requires_grad_()
                note = " (k, v expanded)"
            try:
                with sdpa_kernel(backend):
                    def fwd():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(
                                q, kk, vv, is_causal=True, enable_gqa=gqa)

                    def fwd_bwd():
                        out = F.scaled_dot_product_attention(
                            q, kk, vv, is_causal=True, enable_gqa=gqa)
                        out.backward(dout)

                    tf = median_ms(fwd)
                    tfb = median_ms(fwd_bwd)
            except RuntimeError as e:
                msg = str(e).strip().splitlines()[0][:100]
                print(f"  {label}{' gqa' if gqa else ''}: unavailable: {msg}")
                continue
            tb = tfb - tf
            print(f"  fwd  {label + note:<44} {tf:8.3f} ms "
                  f"{fwd_flops / tf * 1e-9:7.1f} TFLOP/s")
            print(f"  bwd  {label + note:<44} {tb:8.3f} ms "
                  f"{2.5 * fwd_flops / tb * 1e-9:7.1f} TFLOP/s")
            print(f"  f+b  {label + note:<44} {tfb:8.3f} ms "
                  f"{3.5 * fwd_flops / tfb * 1e-9:7.1f} TFLOP/s", flush=True)
            if hq == hkv or gqa:
                break  # GQA ran (or there is none): no expanded retry


print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
      f"cudnn {torch.backends.cudnn.version()}; median of {REPS} reps")
for shape in SHAPES:
    bench(*shape)
