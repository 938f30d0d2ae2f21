#!/bin/bash
# ===- memory_kernels_gpu.sh - memory-bound kernels on a GPU machine -----=== #
#
# Part of mlt. Runs, from a checkout's root on a machine with an H100 (the
# device tool's machine), what bench/memory-kernels-notes.md records: the
# rmsnorm, rope and optimizer tests, bench/memory_kernels_bench.cu built
# before (MLTMemoryKernelsBench-before, -DMLT_BENCH_OLD_API against the
# launchers it replaces) and after, the rest of the GPU suite, and with
# SANITIZE=<seconds> this family's tests under compute-sanitizer memcheck.
# Expects in $C (default .carry-kernels): MLTRuntimeCUDATests,
# MLTMemoryKernelsBench, MLTMemoryKernelsBench-before and lib/ with the test
# binary's OpenBLAS libraries. Logs go to $OUT.
#
# ===----------------------------------------------------------------------=== #

C=${C:-.carry-kernels}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$C/lib:$LD_LIBRARY_PATH
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
FAMILIES='*RMSNorm*:*Rope*:*Optimizer*'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used \
  --format=csv 2>&1 | tee "$OUT/smi.log"
echo "== tests ($FAMILIES)"
timeout 120 "$C/MLTRuntimeCUDATests" --gtest_filter="$FAMILIES" >"$OUT/tests.log" 2>&1
echo "rc $?" >>"$OUT/tests.log"
grep -E "OK \]|FAILED|Failure|Expected|Which is|first at|rc |error" "$OUT/tests.log" | head -80
echo "== bench before"
timeout 100 "$C/MLTMemoryKernelsBench-before" "${REPS:-20}" 2>&1 | tee "$OUT/bench-before.log"
echo "== bench after"
timeout 100 "$C/MLTMemoryKernelsBench" "${REPS:-20}" 2>&1 | tee "$OUT/bench-after.log"
if [ -n "$SUITE" ]; then
  echo "== the rest of the GPU suite"
  timeout "$SUITE" "$C/MLTRuntimeCUDATests" --gtest_filter="-$FAMILIES" >"$OUT/suite.log" 2>&1
  echo "rc $?"
  grep -E "PASSED|FAILED|Failure" "$OUT/suite.log" | head -20
fi
if [ -n "$SANITIZE" ]; then
  echo "== sanitizer"
  timeout "$SANITIZE" compute-sanitizer --tool memcheck "$C/MLTRuntimeCUDATests" \
    --gtest_filter="$FAMILIES" >"$OUT/sanitizer.log" 2>&1
  echo "rc $?"
  grep -E "ERROR SUMMARY|Invalid|OK \]|FAILED" "$OUT/sanitizer.log" | head -30
fi
