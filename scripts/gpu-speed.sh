#!/bin/bash
# Issue 35's speed at 7B-8B on the GPU, each run beside its PyTorch
# reference in the same call, with its predicted step.
#
#   scripts/gpu-speed.sh pack [DIR]   (build machine) the runtime-only
#                                     mlt-run (CUDA, NCCL, MPI), the plans
#                                     compiled by a compiler build's mlt-run
#                                     ($MLT_COMPILE, default
#                                     build/bin/mlt-run) and the PyTorch
#                                     references -> DIR (default .carry-speed)
#   DIR/gpu-speed.sh run ITEM...      (GPU machine) the items, in order;
#                                     logs in $OUT (or DIR/out)
#
# Items (STEPS optimizer steps each, default 5; the 8B plans' steps take
# about 40-50 s, so run them a few to a call):
#   l7-bf16, l7-fp8      LLaMA-2-7B, seq 4096, 16 micro-batches of one
#                        sequence a step, --recompute swiglu, one GPU (issue
#                        35's shape; --fp8 keeps each weight's transposed FP8
#                        copy through the step, the default)
#   l7-fp8-both          l7-fp8 keeping both FP8 copies of each weight
#                        through the step (--fp8-weight-cache both: no
#                        weight quantized after the first micro-batch; the
#                        arena grows by the forward copies)
#   l7-fp8-auto          the same global batch with --fp8 in the layout
#                        --layout auto chooses for one H200 (141 GiB) by the
#                        H200's calibration (16 micro-batches, nothing
#                        recomputed, when this was written)
#   tl-bf16, tl-fp8      TinyLlama-1.1B, seq 2048, a micro-batch of 4
#                        sequences a step, one GPU (issue 35's TinyLlama
#                        target; head_dim 64 and grouped keys and values,
#                        the attention's other kernels)
#   s125-bf16            the 125m shape (the reference's llama-125m: seq
#                        1024, a micro-batch of 16 sequences), one GPU
#   hf-1b, hf-125m       HF transformers with torch.compile on the
#                        TinyLlama and 125m shapes (tl-*, s125-bf16)
#   hf-7b                the same shape in HF transformers with
#                        torch.compile (../shared/bench/hf_llama_bench.py),
#                        one sequence a step
#   l8b-bf16, l8b-fp8, l8b-fp8-both
#                        Llama-3.1-8B, seq 8192, a global batch of 128 over
#                        two GPUs: dp 2 with ZeRO-1, 64 micro-batches of one
#                        sequence a rank, --recompute swiglu; l8b-fp8-both
#                        keeps both FP8 copies of each weight through the
#                        step (--fp8-weight-cache both), and its losses and
#                        gradient norms are compared with l8b-fp8's, which
#                        must be the same bits, when both ran
#   l8b-fp8-auto         the same global batch with --fp8 in the layout
#                        --layout auto chooses for two H200s (dp 2, ZeRO-1,
#                        64 micro-batches, both FP8 copies kept, nothing
#                        recomputed, when this was written)
#   torch-8b             PyTorch FSDP2 on the same shape and GPUs, per-layer
#                        torch.compile, cuDNN attention
#                        (bench/torch_cp_bench.py)
# Each mlt item prints its tokens/s after the warm-up steps and the step the
# built-in calibration predicts; bench/RESULTS.md keeps the figures.
#
# Before and after in one call: with MLT_BEFORE_COMPILE (a compiler build's
# mlt-run) and MLT_BEFORE_RUNTIME (a runtime-only CUDA mlt-run, such as
# another checkout's build-runtime-cuda/bin/mlt-run) set at pack, every plan
# is also compiled by the former and run by the latter: each mlt item then
# runs before, after, ROUNDS times (default 2) alternated, and the first
# round's losses and gradient norms are compared bit for bit (SAME_BITS=0:
# printed, not required).
set -euo pipefail

if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  compile=${MLT_COMPILE:-$root/build/bin/mlt-run}
  test -x "$compile" || { echo "gpu-speed: no compiler build's mlt-run at $compile (set MLT_COMPILE)" >&2; exit 1; }
  before_compile=${MLT_BEFORE_COMPILE:-} before_runtime=${MLT_BEFORE_RUNTIME:-}
  if [[ -n $before_compile || -n $before_runtime ]]; then
    test -x "$before_compile" && test -x "$before_runtime" ||
      { echo "gpu-speed: MLT_BEFORE_COMPILE and MLT_BEFORE_RUNTIME must both name an mlt-run" >&2; exit 1; }
  fi
  source "$root"/scripts/gpu-pack-common.sh
  pack_start "${2:-$root/.carry-speed}" mlt-run
  mkdir -p "$dir"/tools
  if [[ -n $before_runtime ]]; then
    cp "$before_runtime" "$dir"/bin/mlt-run.before && strip "$dir"/bin/mlt-run.before
  fi
  plan() { # name, model, flags...
    local name=$1 model=$2
    shift 2
    "$compile" "$root"/models/llama/$model.mlir --device cuda --dtype bf16 "$@" \
      --emit-plan "$dir"/plans/$name.mltplan >/dev/null
    if [[ -n $before_compile ]]; then
      "$before_compile" "$root"/models/llama/$model.mlir --device cuda --dtype bf16 "$@" \
        --emit-plan "$dir"/plans/$name.before.mltplan >/dev/null
    fi
  }
  l7=(--seq-len 4096 --batch 16 --microbatches 16 --recompute swiglu)
  plan l7-bf16 llama-2-7b "${l7[@]}"
  plan l7-fp8 llama-2-7b "${l7[@]}" --fp8
  plan l7-fp8-both llama-2-7b "${l7[@]}" --fp8 --fp8-weight-cache both
  plan l7-fp8-auto llama-2-7b --seq-len 4096 --batch 16 --fp8 --layout auto --gpus 1 \
    --gpu-memory 141GiB --calibration "$root"/calibration/h200.json
  plan tl-bf16 tinyllama-1.1b --seq-len 2048 --batch 4
  plan tl-fp8 tinyllama-1.1b --seq-len 2048 --batch 4 --fp8
  plan s125-bf16 llama-125m --seq-len 1024 --batch 16
  l8b=(--seq-len 8192 --batch 128 --microbatches 64 --dp 2 --zero 1 --recompute swiglu)
  plan l8b-bf16 llama-3.1-8b "${l8b[@]}"
  plan l8b-fp8 llama-3.1-8b "${l8b[@]}" --fp8
  plan l8b-fp8-both llama-3.1-8b "${l8b[@]}" --fp8 --fp8-weight-cache both
  plan l8b-fp8-auto llama-3.1-8b --seq-len 8192 --batch 128 --fp8 --layout auto --gpus 2 \
    --gpu-memory 141GiB --calibration "$root"/calibration/h200.json
  cp "$root"/../shared/bench/hf_llama_bench.py "$root"/bench/torch_cp_bench.py \
    "$root"/test/Training/Inputs/compare_runs.py "$dir"/tools/
  # (compare_runs.py reads it from the folder above its own)
  cp "$root"/test/Training/fixture_tools.py "$dir"/
  packed "$dir" "$0" "run ITEM..."
  exit 0
fi

[[ "${1:-}" == run && $# -ge 2 ]] || { echo "usage: $0 pack [DIR] | run ITEM..." >&2; exit 2; }
shift
cd "$(dirname "$0")"
source ./gpu-pack-common.sh
gpu_start
steps=${STEPS:-5}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "gpu-speed: no nvidia-smi here"
random_tokens "$out"/tokens.u16
# one NAME GPUS RUNTIME PLAN: a run, its throughput and predicted step.
one() {
  local name=$1 gpus=$2 runtime=$3 plan=$4 launch=()
  [[ $gpus -gt 1 ]] && launch=($mpirun -np "$gpus")
  echo "== $name ($steps steps)"
  "${launch[@]}" "$runtime" "$plan" --device cuda --data "$out"/tokens.u16 \
    --steps "$steps" --log-json "$out"/$name.jsonl > "$out"/$name.log 2>&1 \
    || { tail -3 "$out"/$name.log; fail "$name"; return; }
  grep -E '^(trained|step time:)' "$out"/$name.log || true
}
# mlt NAME GPUS: the plan's run; with a packed "before", ROUNDS of before
# and after alternated (NAME.before-R, NAME-R), the first round compared.
mlt() {
  local name=$1 gpus=$2 r
  if [[ ! -f plans/$name.before.mltplan ]]; then
    one "$name" "$gpus" ./bin/mlt-run plans/$name.mltplan
    return
  fi
  for ((r = 1; r <= ${ROUNDS:-2}; ++r)); do
    one "$name.before-$r" "$gpus" ./bin/mlt-run.before plans/$name.before.mltplan
    one "$name-$r" "$gpus" ./bin/mlt-run plans/$name.mltplan
  done
  if [[ -s "$out"/$name.before-1.jsonl && -s "$out"/$name-1.jsonl ]]; then
    python3 tools/compare_runs.py 0 "$out"/$name.before-1.jsonl "$out"/$name-1.jsonl ||
      [[ ${SAME_BITS:-1} == 0 ]] || fail "$name: not the same bits as before"
  fi
}
for item in "$@"; do
  case $item in
    l7-bf16 | l7-fp8 | l7-fp8-both | l7-fp8-auto | tl-bf16 | tl-fp8 | s125-bf16)
      mlt "$item" 1 ;;
    hf-1b | hf-125m)
      config=llama-1b
      [[ $item == hf-125m ]] && config=llama-125m
      echo "== $item (HF transformers, torch.compile, $config's shape)"
      python3 tools/hf_llama_bench.py --config $config --mode compile --steps 20 \
        2>&1 | tee "$out"/$item.log | tail -2 || fail $item ;;
    l8b-bf16 | l8b-fp8 | l8b-fp8-auto) mlt "$item" 2 ;;
    l8b-fp8-both)
      mlt "$item" 2
      # (with a packed "before": the first rounds' after runs)
      a=l8b-fp8 b=l8b-fp8-both
      [[ -f plans/l8b-fp8.before.mltplan ]] && a=l8b-fp8-1 b=l8b-fp8-both-1
      if [[ -s "$out"/$a.jsonl && -s "$out"/$b.jsonl ]]; then
        python3 tools/compare_runs.py 0 "$out"/$a.jsonl "$out"/$b.jsonl \
          || fail "l8b-fp8-both: not the same bits as l8b-fp8"
      fi ;;
    hf-7b)
      echo "== hf-7b (HF transformers, torch.compile, seq 4096, one sequence a step)"
      python3 tools/hf_llama_bench.py --config llama-7b --mode compile --steps 10 \
        2>&1 | tee "$out"/hf-7b.log | tail -4 || fail hf-7b ;;
    torch-8b)
      echo "== torch-8b (PyTorch FSDP2, per-layer torch.compile, cuDNN attention)"
      torchrun --nproc-per-node 2 tools/torch_cp_bench.py --config llama-3.1-8b --seq 8192 \
        --cp 1 --compile --sdpa cudnn --steps 4 --warmup 2 2>&1 | tee "$out"/torch-8b.log \
        | tail -4 || fail torch-8b ;;
    *) fail "unknown item '$item' (l7-bf16, l7-fp8, l7-fp8-both, l7-fp8-auto, tl-bf16, tl-fp8, s125-bf16, hf-1b, hf-125m, hf-7b, l8b-bf16, l8b-fp8, l8b-fp8-both, l8b-fp8-auto, torch-8b)" ;;
  esac
done
exit $status
