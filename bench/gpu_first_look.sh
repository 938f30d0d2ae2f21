#!/bin/bash
# A first look at the CUDA backend at scale (bench/RESULTS.md): the
# out-of-memory error predicted from the plan, and fp32 training of the
# TinyLlama-1.1B shape beside the PyTorch reference in the same call.
#
# Build machine: scripts/gpu-suite.sh pack .carry, then
#   build/bin/mlt-run models/llama/tinyllama-1.1b.mlir --batch 1 --seq-len 2048 \
#     --emit-plan .carry/plans/tinyllama-b1-s2048.mltplan
#   build/bin/mlt-run models/llama/llama-2-7b.mlir --batch 16 --seq-len 4096 \
#     --emit-plan .carry/plans/llama7b-b16-s4096.mltplan
#   cp bench/gpu_first_look.sh .carry/perf.sh; cp ../shared/bench/hf_llama_bench.py .carry/tools/
# GPU machine (from the repository root, carrying .carry): bash .carry/perf.sh
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
./bin/MLTRuntimeCUDATests --gtest_filter='*Predicted*:*ArenaCopies*' 2>&1 | grep -E "OK|FAILED|PASSED"
echo "== llama-2-7b shape, batch 16 x 4096, fp32 (must not fit)"
./bin/mlt-run plans/llama7b-b16-s4096.mltplan --device cuda --steps 1 --data ../data/kjv-genesis-exodus.txt 2>&1 | tail -2; echo "rc=$?"
echo "== tinyllama shape, batch 1 x 2048, fp32, no TF32"
python3 - <<'PY' > /tmp/tokens.u16
import random, struct, sys
random.seed(0)
sys.stdout.buffer.write(struct.pack('<%dH' % 400000, *[random.randrange(32000) for _ in range(400000)]))
PY
nvidia-smi --query-gpu=memory.used --format=csv,noheader
( while sleep 2; do nvidia-smi --query-gpu=memory.used --format=csv,noheader; done ) > $OUT/mem.txt &
mon=$!
./bin/mlt-run plans/tinyllama-b1-s2048.mltplan --device cuda --steps 8 --data /tmp/tokens.u16 --lr 1e-4 --log-json $OUT/tinyllama-fp32.jsonl 2>&1 | tail -5
kill $mon; sort -n $OUT/mem.txt | tail -1
echo "== PyTorch reference, same shape (bf16 autocast), eager, mb 1"
cd tools && timeout 300 python3 hf_llama_bench.py --config llama-1b --mode eager --mb 1 --steps 10 2>&1 | tail -3
