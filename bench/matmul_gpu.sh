#!/bin/bash
# ===- matmul_gpu.sh - the matmul benchmark on a GPU machine -------------=== #
#
# Part of mlt. Runs, from a checkout's root on a machine with an H100 (the
# device tool's machine), what bench/matmul-notes.md records: the GPU state,
# bench/matmul_bench.cu (MLTMatmulBench, built before) and, when present, the
# matmul tests of the GPU suite. Expects in $C (default .carry-gemm):
# MLTMatmulBench and optionally MLTRuntimeCUDATests with lib/ holding its
# OpenBLAS libraries. Logs go to $OUT.
#
# ===----------------------------------------------------------------------=== #

C=${C:-.carry-gemm}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$C/lib:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used \
  --format=csv 2>&1 | tee "$OUT/smi.log"
if [ -x "$C/MLTRuntimeCUDATests" ]; then
  echo "== tests (${TESTS:-*Matmul*})"
  timeout 200 "$C/MLTRuntimeCUDATests" --gtest_filter="${TESTS:-*Matmul*}" >"$OUT/tests.log" 2>&1
  echo "rc $?" >>"$OUT/tests.log"
  grep -E "OK \]|FAILED|Failure|Expected|Which is|rc |error|PASSED" "$OUT/tests.log" | head -60
fi
if [ -x "$C/MLTMatmulBench" ]; then
  echo "== bench"
  timeout "${BENCH_TIMEOUT:-300}" "$C/MLTMatmulBench" ${REPS:-10} $FILTER >"$OUT/bench.log" 2>&1
  echo "rc $?"
  sed -n '/^summary/,$p' "$OUT/bench.log"
fi
