#!/bin/bash
# ===- attention_gpu.sh - attention tests and timings on a GPU machine ---=== #
#
# Part of mlt. Runs, from a checkout's root on a machine with an H100 (the
# device tool's machine), what bench/attention-notes.md records: the
# attention tests, bench/attention_bench.cu, bench/attention_torch.py, the
# SASS of the bench binary (gzip) and, with SANITIZE=<seconds>, the bf16
# tests under compute-sanitizer memcheck. Expects in $C (default
# .carry-attn): MLTRuntimeCUDATests, MLTAttentionBench, attention_torch.py
# and lib/ with the test binary's OpenBLAS libraries. Logs go to $OUT.
#
# ===----------------------------------------------------------------------=== #

C=${C:-.carry-attn}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/$C/lib:$LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used \
  --format=csv 2>&1 | tee "$OUT/smi.log"
echo "== tests"
timeout 150 "$C/MLTRuntimeCUDATests" --gtest_filter='*Attention*' >"$OUT/tests.log" 2>&1
echo "rc $?" >>"$OUT/tests.log"
grep -E "^\[ bf16|OK \]|FAILED|Failure|error|Expected|Which is|rc " "$OUT/tests.log" | head -60
echo "== bench"
timeout 150 "$C/MLTAttentionBench" "${REPS:-20}" 2>&1 | tee "$OUT/bench.log"
echo "== torch"
timeout 150 python3 "$C/attention_torch.py" "${REPS:-20}" 2>&1 | tee "$OUT/torch.log" | grep -v Warning
(cuobjdump -sass "$C/MLTAttentionBench" | gzip >"$OUT/sass.gz") 2>&1 | head -3
if [ -n "$SANITIZE" ]; then
  echo "== sanitizer"
  timeout "$SANITIZE" compute-sanitizer --tool memcheck "$C/MLTRuntimeCUDATests" \
    --gtest_filter='*Bf16*' >"$OUT/sanitizer.log" 2>&1
  echo "rc $?"
  grep -E "ERROR SUMMARY|Invalid|OK \]|FAILED" "$OUT/sanitizer.log" | head -20
fi
