#!/bin/bash
# ===- gemm_norm_gpu.sh - matmul and gradient-norm checks on a GPU -------=== #
#
# Part of mlt. Runs, from a checkout's root on a machine with an H100 (the
# device tool's machine), in one call, what bench/matmul-notes.md and
# bench/memory-kernels-notes.md record for the matmul configuration and
# sum_squares_multi: the GPU suite's matmul, optimizer and backend tests,
# MLTMatmulBench, MLTMemoryKernelsBench's sum_squares part, and the
# TinyLlama-1.1B step (bf16, micro-batch 4 x 2048) with the mlt-run before
# the change and after it, alternated, each on its own plan. Expects in $C
# (default .carry-gemm): MLTRuntimeCUDATests, MLTMatmulBench,
# MLTMemoryKernelsBench, lib/ (OpenBLAS for the tests), and optionally
# bin-before/mlt-run + plans/before.mltplan and bin-after/mlt-run +
# plans/after.mltplan (or all of these in $C/pack.tar.xz). STEPS (default
# 12) steps per run. Logs go to $OUT.
#
# ===----------------------------------------------------------------------=== #

C=${C:-.carry-gemm}
# A carry folder near the 64 MiB limit ships its files as pack.tar.xz.
if [ -f "$C/pack.tar.xz" ]; then
  mkdir -p /tmp/carry-unpacked && tar -xJf "$C/pack.tar.xz" -C /tmp/carry-unpacked
  C=/tmp/carry-unpacked
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$C/lib:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used \
  --format=csv,noheader 2>&1 | tee "$OUT/smi.log"
if [ -x "$C/MLTRuntimeCUDATests" ]; then
  timeout 300 "$C/MLTRuntimeCUDATests" --gtest_filter="${TESTS:-*Matmul*:*Optimizer*:*CudaBackend*}" >"$OUT/tests.log" 2>&1
  echo "tests rc $?: $(grep -cE '^\[       OK' "$OUT/tests.log") ok; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Expected|Which is" "$OUT/tests.log" | head -20
fi
if [ -x "$C/MLTMemoryKernelsBench" ]; then
  timeout 120 "$C/MLTMemoryKernelsBench" 20 sum_squares >"$OUT/sumsq.log" 2>&1
  echo "sum_squares bench rc $?"; grep -E "copy|sum_squares" "$OUT/sumsq.log" | head -4
fi
if [ -x "$C/MLTMatmulBench" ] && [ -z "$NO_MATMUL" ]; then
  timeout "${BENCH_TIMEOUT:-300}" "$C/MLTMatmulBench" ${REPS:-10} $FILTER >"$OUT/bench.log" 2>&1
  echo "matmul bench rc $?"
  sed -n '/^summary/,$p' "$OUT/bench.log" | cut -c1-120
fi
if [ -x "$C/bin-after/mlt-run" ]; then
  python3 -c 'import random, struct; r = random.Random(1); n = 4 * 2049 * 40
open("/tmp/tokens.u16", "wb").write(struct.pack(f"<{n}H", *(r.randrange(32000) for _ in range(n))))'
  for round in 1 2; do
    for which in before after; do
      timeout 120 "$C/bin-$which/mlt-run" "$C/plans/$which.mltplan" --device cuda \
        --data /tmp/tokens.u16 --steps "${STEPS:-12}" --lr 1e-4 \
        --log-json "$OUT/step-$which-$round.jsonl" >"$OUT/step-$which-$round.log" 2>&1
      python3 - "$OUT/step-$which-$round.jsonl" "$which" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [s for s in steps if "tokens_per_s" in s]
tps = statistics.median(s["tokens_per_s"] for s in steps[3:])
print(f"{sys.argv[2]:6s} median tokens/s over steps 4..{len(steps)}: {tps:.0f} "
      f"= {4 * 2048 / tps * 1e3:.2f} ms/step; loss {steps[-1].get('loss')}")
PY
    done
  done
  timeout 120 "$C/bin-after/mlt-run" "$C/plans/after.mltplan" --device cuda \
    --data /tmp/tokens.u16 --steps 3 --lr 1e-4 --profile-step 3 >"$OUT/profile-after.log" 2>&1
  grep -E "matmul|sum_squares|adamw|total|step" "$OUT/profile-after.log" | head -12
fi
