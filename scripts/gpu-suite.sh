#!/bin/bash
# The GPU suite: CUDA kernel tests and fp32 and bf16 parity of `mlt-run --device
# cuda` with the llama-ref-a fixture (HF transformers' training; and fp32 with
# test/Fixtures/llama-ref-d, llama3 rotary scaling, once it is made), on a
# machine with a GPU but no LLVM.
#
#   scripts/gpu-suite.sh pack [DIR]   (build machine) runtime-only build with
#                                     CUDA, plans compiled by build/bin/mlt-run,
#                                     fixture, libraries, and the benchmark's
#                                     plans and tools -> DIR (default .carry)
#   DIR/gpu-suite.sh run              (GPU machine) runs the tests and the
#                                     parity runs (1F1B and GPipe); logs and
#                                     metrics go to $OUT (or DIR/out)
#   DIR/gpu-suite.sh bench [STEPS]    (GPU machine) the issue-5 benchmark:
#                                     bench/gpu_bench.py on the TinyLlama-1.1B
#                                     shape (bf16, micro-batch 4 x 2048; also
#                                     with --recompute swiglu, batch 16
#                                     as 4 micro-batches, and --fp8) beside HF
#                                     transformers eager and torch.compile,
#                                     then mlt-run --profile-step on it
#   DIR/gpu-suite.sh recompute [STEPS] (GPU machine) whole-layer
#                                     recomputation on the TinyLlama-1.1B
#                                     shape (bf16, micro-batch 4 x 2048):
#                                     none, --recompute swiglu,
#                                     --recompute-layers every:2 and all
#                                     beside HF torch.compile, each plan's
#                                     predicted step, and the losses of
#                                     none and all compared bit for bit
#   DIR/gpu-suite.sh small [STEPS]    (GPU machine) the small shape of
#                                     issue 16: the reference's llama-125m
#                                     (bf16, micro-batch 16 x 1024; and
#                                     with --fp8) beside
#                                     HF eager and torch.compile, then
#                                     mlt-run --profile-step on it
#
# `pack` needs a compiler build in build/ (for mlt-run to compile the plans)
# and ../shared/fixtures; the packed folder is self-contained (about 50 MiB,
# mostly OpenBLAS, which the CPU backend links).
set -euo pipefail

if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=$(realpath -m "${2:-$root/.carry}")
  fixture=$root/../shared/fixtures/llama-ref-a
  test -d "$fixture" || { echo "gpu-suite: no fixture at $fixture" >&2; exit 1; }
  source "$root"/scripts/gpu-pack-common.sh
  pack_runtime "$root" "$root"/build-runtime-cuda "$dir" "$fixture"
  for mb in 1 2; do
    for dtype in fp32 bf16; do
      "$root"/build/bin/mlt-run "$fixture" --batch 4 --seq-len 32 --microbatches $mb \
        --dtype $dtype --emit-plan "$dir"/plans/ref-a-$dtype-mb$mb.mltplan
    done
  done
  # GPipe: forward and backward bodies, activations kept per slot.
  for dtype in fp32 bf16; do
    "$root"/build/bin/mlt-run "$fixture" --batch 4 --seq-len 32 --microbatches 2 \
      --dtype $dtype --schedule gpipe --emit-plan "$dir"/plans/ref-a-$dtype-mb2-gpipe.mltplan
  done
  # llama-ref-d (llama3 rotary scaling, tied embeddings), once made
  # (test/Fixtures/README.md): fp32 against HF.
  ref_d=$root/test/Fixtures/llama-ref-d
  if [[ -f $ref_d/train.json ]]; then
    cp -r "$ref_d" "$dir"/fixtures/
    python3 "$root"/test/Training/fixture_tools.py tokens "$ref_d" \
      "$dir"/plans/ref-d-tokens.u16
    "$root"/build/bin/mlt-run "$ref_d" --batch 4 --seq-len 32 \
      --emit-plan "$dir"/plans/ref-d-fp32.mltplan
  fi
  # Checkpoints: compare_resumed.py (beside compare_runs.py, and below
  # fixture_tools.py, which it uses).
  mkdir -p "$dir"/tools/Inputs
  cp "$root"/test/Training/Inputs/compare_resumed.py \
    "$root"/test/Training/Inputs/compare_runs.py "$dir"/tools/Inputs/
  # The benchmark: the reference's llama-1b shape, its default micro-batch.
  "$root"/build/bin/mlt-run "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 \
    --batch 4 --seq-len 2048 --emit-plan "$dir"/plans/tinyllama-bf16-b4.mltplan
  "$root"/build/bin/mlt-run "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 \
    --batch 4 --seq-len 2048 --recompute swiglu \
    --emit-plan "$dir"/plans/tinyllama-bf16-b4-recompute.mltplan
  for layers in every:2 all; do
    "$root"/build/bin/mlt-run "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 \
      --batch 4 --seq-len 2048 --recompute-layers $layers \
      --emit-plan "$dir"/plans/tinyllama-bf16-b4-layers-${layers/:/}.mltplan
  done
  # The reference's llama-125m shape, its default micro-batch.
  "$root"/build/bin/mlt-run "$root"/models/llama/llama-125m.mlir --dtype bf16 \
    --batch 16 --seq-len 1024 --emit-plan "$dir"/plans/llama-125m-bf16-b16.mltplan
  # Both shapes with the decoder layers' products in FP8.
  "$root"/build/bin/mlt-run "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 \
    --fp8 --batch 4 --seq-len 2048 --emit-plan "$dir"/plans/tinyllama-fp8-b4.mltplan
  "$root"/build/bin/mlt-run "$root"/models/llama/llama-125m.mlir --dtype bf16 \
    --fp8 --batch 16 --seq-len 1024 --emit-plan "$dir"/plans/llama-125m-fp8-b16.mltplan
  # The same micro-batch, four per step: one step program of four calls.
  "$root"/build/bin/mlt-run "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 \
    --batch 16 --microbatches 4 --seq-len 2048 \
    --emit-plan "$dir"/plans/tinyllama-bf16-b16-mb4.mltplan
  finish_pack "$root" "$dir" "$0"
  exit 0
fi

[[ "${1:-}" =~ ^(run|bench|small|recompute)$ ]] ||
  { echo "usage: $0 pack [DIR] | run | bench [STEPS] | small [STEPS] | recompute [STEPS]" >&2; exit 2; }
cd "$(dirname "$0")"
out=${OUT:-$PWD/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out"/gpu.txt

# The benchmarks run the products with the tuned cuBLASLt table of this GPU
# (calibration/matmuls/*.json, packed as matmuls/: the one whose "device" is
# this GPU's name) when there is one; MATMULS=none runs cuBLASLt's
# heuristic's choices instead.
table=
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
for candidate in matmuls/*.json; do
  if [[ -f $candidate ]] && grep -qF "\"device\": \"$gpu\"" "$candidate"; then
    table=$candidate
  fi
done
[[ ${MATMULS:-} == none ]] && table=
matmul_flags=()
[[ -n $table ]] && matmul_flags=(--matmul-algorithms "$table")
echo "matmul algorithms: ${table:-the cuBLASLt heuristic}"

if [[ "$1" == small ]]; then
  plan=plans/llama-125m-bf16-b16.mltplan
  python3 tools/gpu_bench.py --mlt-run bin/mlt-run --plan $plan \
    --plan plans/llama-125m-fp8-b16.mltplan \
    --ref tools/hf_llama_bench.py --config llama-125m --modes eager,compile \
    --steps "${2:-20}" --out "$out" ${table:+--matmul-algorithms "$table"} 2>&1 | tee "$out"/small.txt
  source ./gpu-pack-common.sh
  random_tokens /tmp/small-tokens.u16
  ./bin/mlt-run $plan --device cuda --data /tmp/small-tokens.u16 --steps 3 \
    --lr 1e-4 --profile-step 3 "${matmul_flags[@]}" 2>&1 | tee "$out"/small-profile.txt
  exit 0
fi
if [[ "$1" == recompute ]]; then
  plans=(plans/tinyllama-bf16-b4.mltplan plans/tinyllama-bf16-b4-recompute.mltplan
         plans/tinyllama-bf16-b4-layers-every2.mltplan plans/tinyllama-bf16-b4-layers-all.mltplan)
  for plan in "${plans[@]}"; do
    echo "$plan: $(./bin/mlt-run "$plan" --device cuda --report | grep '^predicted step')"
  done 2>&1 | tee "$out"/recompute-predicted.txt
  python3 tools/gpu_bench.py --mlt-run bin/mlt-run "${plans[@]/#/--plan=}" \
    --ref tools/hf_llama_bench.py --config llama-1b --modes compile \
    --steps "${2:-20}" --out "$out" ${table:+--matmul-algorithms "$table"} 2>&1 | tee "$out"/recompute.txt
  # The same 6 steps with and without recomputation: equal bit for bit.
  python3 -c 'import random, struct; r = random.Random(1); n = 24 * 2049 * 4
open("/tmp/recompute-tokens.u16", "wb").write(struct.pack(f"<{n}H", *(r.randrange(32000) for _ in range(n))))'
  for plan in "${plans[0]}" "${plans[3]}"; do
    ./bin/mlt-run "$plan" --device cuda --data /tmp/recompute-tokens.u16 --no-shuffle \
      --steps 6 --lr 1e-4 "${matmul_flags[@]}" --log-json "$out/$(basename "$plan" .mltplan).jsonl" > /dev/null
  done
  python3 tools/Inputs/compare_runs.py 0 "$out"/tinyllama-bf16-b4.jsonl \
    "$out"/tinyllama-bf16-b4-layers-all.jsonl 2>&1 | tee -a "$out"/recompute.txt
  exit 0
fi
if [[ "$1" == bench ]]; then
  steps=${2:-10}
  plan=plans/tinyllama-bf16-b4.mltplan
  python3 tools/gpu_bench.py --mlt-run bin/mlt-run --plan $plan \
    --plan plans/tinyllama-bf16-b4-recompute.mltplan \
    --plan plans/tinyllama-bf16-b16-mb4.mltplan \
    --plan plans/tinyllama-fp8-b4.mltplan \
    --ref tools/hf_llama_bench.py --config llama-1b --modes eager,compile \
    --steps "$steps" --out "$out" ${table:+--matmul-algorithms "$table"} 2>&1 | tee "$out"/bench.txt
  python3 -c 'import random, struct; r = random.Random(1); n = 4 * 2049 * 4
open("/tmp/profile-tokens.u16", "wb").write(struct.pack(f"<{n}H", *(r.randrange(32000) for _ in range(n))))'
  ./bin/mlt-run $plan --device cuda --data /tmp/profile-tokens.u16 --steps 3 \
    --lr 1e-4 --profile-step 3 "${matmul_flags[@]}" 2>&1 | tee "$out"/profile.txt
  # A 1.1B training checkpoint: 2 steps with and without saving one, and
  # resuming from it for one more; the differences are the save and the load.
  rm -rf /tmp/tl-ckpt
  for run in plain save resume; do
    flags=
    [[ $run == save ]] && flags="--save-checkpoint /tmp/tl-ckpt"
    [[ $run == resume ]] && flags="--resume /tmp/tl-ckpt --steps 3"
    start=$(date +%s.%N)
    ./bin/mlt-run $plan --device cuda --data /tmp/profile-tokens.u16 --steps 2 \
      --lr 1e-4 $flags > "$out"/ckpt-$run.txt 2>&1 || echo "FAIL: checkpoint $run"
    echo "checkpoint timing: $run $(python3 -c "print(round($(date +%s.%N) - $start, 2))") s"
  done
  du -sb /tmp/tl-ckpt/step-000002 | sed 's/^/checkpoint bytes: /'
  exit 0
fi
status=0
./bin/MLTRuntimeCUDATests > "$out"/cuda-tests.log 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out"/cuda-tests.log
hyper="--lr 0.003 --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --weight-decay 0.1 --clip-grad 1.0"
for mb in 1 2; do
  echo "== mlt-run --device cuda, fp32, llama-ref-a, $mb micro-batch(es)"
  ./bin/mlt-run plans/ref-a-fp32-mb$mb.mltplan --device cuda \
    --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
    --no-shuffle --steps 6 $hyper --log-json "$out"/gpu-mb$mb.jsonl \
    --save-hf /tmp/gpu-mb$mb --dump-grads /tmp/gpu-mb$mb.grads || status=1
  python3 tools/fixture_tools.py check fixtures/llama-ref-a "$out"/gpu-mb$mb.jsonl \
    --weights /tmp/gpu-mb$mb --grads /tmp/gpu-mb$mb.grads || status=1
done
# llama-ref-d: Llama 3.1's rotary scaling (the CUDA rope's scaled
# frequencies) and tied embeddings, fp32 against HF, when packed.
if [[ -f plans/ref-d-fp32.mltplan ]]; then
  echo "== mlt-run --device cuda, fp32, llama-ref-d (llama3 rope scaling, tied)"
  ./bin/mlt-run plans/ref-d-fp32.mltplan --device cuda \
    --init-from fixtures/llama-ref-d/model.safetensors --data plans/ref-d-tokens.u16 \
    --no-shuffle --steps 6 $hyper --log-json "$out"/gpu-ref-d.jsonl \
    --save-hf /tmp/gpu-ref-d --dump-grads /tmp/gpu-ref-d.grads || status=1
  python3 tools/fixture_tools.py check fixtures/llama-ref-d "$out"/gpu-ref-d.jsonl \
    --weights /tmp/gpu-ref-d --grads /tmp/gpu-ref-d.grads || status=1
fi
# bf16 mixed precision: every step's loss within 2e-2 of HF's (fp32 HF,
# float64 reference), as on the CPU backend (test/Training/bf16-fixture.test).
for mb in 1 2; do
  echo "== mlt-run --device cuda, bf16, llama-ref-a, $mb micro-batch(es)"
  ./bin/mlt-run plans/ref-a-bf16-mb$mb.mltplan --device cuda \
    --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
    --no-shuffle --steps 6 $hyper --log-json "$out"/gpu-bf16-mb$mb.jsonl || status=1
  python3 tools/fixture_tools.py check-loss fixtures/llama-ref-a \
    "$out"/gpu-bf16-mb$mb.jsonl 2e-2 || status=1
done
# GPipe (--schedule gpipe, 2 micro-batches): the same launches per
# micro-batch as 1F1B in split bodies, so the same bits as the runs above.
for dtype in fp32 bf16; do
  echo "== mlt-run --device cuda, $dtype, llama-ref-a, 2 micro-batches, gpipe"
  ./bin/mlt-run plans/ref-a-$dtype-mb2-gpipe.mltplan --device cuda \
    --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
    --no-shuffle --steps 6 $hyper --log-json "$out"/gpu-$dtype-gpipe.jsonl || status=1
  base="$out"/gpu-mb2.jsonl
  [[ $dtype == bf16 ]] && base="$out"/gpu-bf16-mb2.jsonl
  # (Tolerance 0: every loss and gradient norm the same bits; the logs'
  # other fields, such as times, differ from run to run.)
  if python3 tools/Inputs/compare_runs.py 0 "$base" "$out"/gpu-$dtype-gpipe.jsonl; then
    echo "ok: $dtype gpipe gives the 1F1B losses and gradient norms bit for bit"
  else
    echo "FAIL: $dtype gpipe differs from 1F1B"; status=1
  fi
done
# Checkpoints on one GPU: 6 steps saving at 3 and 6, and the run resumed
# from step 3: the same bits in steps 4 to 6 and in the final weights.
for dtype in fp32 bf16; do
  echo "== mlt-run --device cuda, $dtype, llama-ref-a, resumed from a checkpoint"
  rm -rf /tmp/ckpt-$dtype
  ./bin/mlt-run plans/ref-a-$dtype-mb2.mltplan --device cuda \
    --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
    --no-shuffle --steps 6 $hyper --save-checkpoint /tmp/ckpt-$dtype --save-every 3 \
    --log-json "$out"/ckpt-$dtype-full.jsonl --save-hf /tmp/ckpt-$dtype-full > /dev/null || status=1
  ./bin/mlt-run plans/ref-a-$dtype-mb2.mltplan --device cuda --data plans/tokens.u16 \
    --no-shuffle --steps 6 $hyper --resume /tmp/ckpt-$dtype/step-000003 \
    --log-json "$out"/ckpt-$dtype-resumed.jsonl --save-hf /tmp/ckpt-$dtype-resumed > /dev/null || status=1
  python3 tools/Inputs/compare_resumed.py 0 "$out"/ckpt-$dtype-full.jsonl \
    "$out"/ckpt-$dtype-resumed.jsonl || status=1
  cmp /tmp/ckpt-$dtype-full/model.safetensors /tmp/ckpt-$dtype-resumed/model.safetensors \
    && echo "ok: the same final weights, byte for byte" || status=1
done
exit $status
