#!/bin/bash
# The cost model on the GPU: measures a calibration of the machine's GPU
# (`mlt-run --calibrate`) from TinyLlama-1.1B plans of one shape set, then
# checks the step times it predicts for plans of other shapes and layouts
# against the measured ones. This is how calibration/h100.json was made.
#
#   scripts/gpu-calibrate.sh pack [DIR]   (build machine) the runtime-only
#                                         mlt-run (CUDA, NCCL, MPI) and the
#                                         plans, compiled by a compiler
#                                         build's mlt-run ($MLT_COMPILE,
#                                         default build/bin/mlt-run) -> DIR
#                                         (default .carry-calibrate)
#   DIR/gpu-calibrate.sh run              (GPU machine, 2 GPUs) calibrates
#                                         into $OUT/calibration.json, then
#                                         runs every check plan with it;
#                                         logs, the check table and a trace
#                                         with the predicted tracks in $OUT
#   DIR/gpu-calibrate.sh check            (GPU machine, 2 GPUs) only the
#                                         check plans, priced by the
#                                         calibration built into mlt-run
#                                         for the machine's GPU
#
# Calibrating plans (bf16): micro-batches of 2 x 1024, 8 x 512 and 1 x 2048
# tokens on one GPU; 4 x 1024 per rank at dp=2 and with ZeRO-1 and -2 (the
# gradients' collectives beside compute), 2 x 1024 and 4 x 1024 at
# tp=2 (the activations' all-reduces) and pp=2 (the stages' transfers); and
# the three one-GPU shapes again with --fp8 (the FP8 products and the
# scaling kernels: amax, quantize_fp8).
# Sequence parallelism (issue 33): 2 x 1024 and 1 x 2048 at tp=2 with
# --sequence-parallel (its all-gathers, reduce-scatters and transposes),
# checked at 4 x 2048 and 4 micro-batches of 1 x 2048. Its collective
# matmuls (micro-batches of one sequence: each all-gather split beside the
# products on the side stream): 1 x 512 and 1 x 1024 at tp=2 with
# --sequence-parallel (side-stream gathers of 1 and 2 MiB a rank's block),
# checked at 1 x 2048 (TinyLlama, 4 MiB) and on LLaMA-2-7B at 2 x 2048 a step
# (l7-b2m2-tp2-sp: micro-batches of one sequence; l7-b2-tp2-sp: one
# micro-batch of two, gathers whole).
# Long sequences (issue 37): the Llama-3.2-1B shape at 32,768 tokens, on
# one GPU and at cp 2 (attention at head dim 64 over the whole sequence and
# over a context-parallel rank's block, whose curves the shorter plans'
# attention, at up to 2,048 tokens, cannot stand for: 25-30% faster a
# FLOP).
# Checked plans: the benchmark's shape, 4 x 2048 per GPU, which no
# calibrating plan has: one GPU, dp=2, tp=2, pp=2 (8 micro-batches), ZeRO-1
# and ZeRO-2 at dp=2, and --fp8 on one GPU; a model no calibrating plan
# has, LLaMA-2-7B at seq 4096, 16 micro-batches of 1 a step with
# --recompute swiglu (issue 35's shape), bf16 and --fp8; and Llama-3.1-8B
# at 65,536 tokens on two GPUs at cp 2 (head dim 128, which no calibrating
# plan has at length), as ZeRO-2 with every layer recomputed and as the
# planner's pick with gradients reduced in bf16.
# CALIBRATING and CHECKED replace the lists (empty: none); BASE, a
# calibration file, is what the calibrating runs merge into (default: none,
# a fresh file), so that a few plans can add to a built-in calibration.
set -euo pipefail

calibrating=${CALIBRATING-"c-b2s1024 c-b8s512 c-b1s2048 c-b2s1024-tp2 c-b4s1024-tp2 c-b2s1024-tp2-sp c-b1s2048-tp2-sp c-b1s512-tp2-sp c-b1s1024-tp2-sp c-b8s1024-pp2 c-b8s1024-dp2 c-b8s1024-dp2-z1 c-b8s1024-dp2-z2 c-b2s1024-fp8 c-b8s512-fp8 c-b1s2048-fp8 c-l1b-s32k c-l1b-s32k-cp2"}
checked=${CHECKED-"tl-b4 tl-b8-dp2 tl-b4-tp2 tl-b4-tp2-sp tl-b4m4-tp2-sp l7-b2m2-tp2-sp l7-b2-tp2-sp tl-b32-pp2 tl-b8-dp2-z1 tl-b8-dp2-z2 tl-b4-fp8 l7-b16-fp8 l7-b16 l8b-s64k-cp2 l8b-s64k-cp2-pick"}

if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=$(realpath -m "${2:-$root/.carry-calibrate}")
  compile=${MLT_COMPILE:-$root/build/bin/mlt-run}
  test -x "$compile" || { echo "gpu-calibrate: no compiler build's mlt-run at $compile (set MLT_COMPILE)" >&2; exit 1; }
  rt=${MLT_RUNTIME_BUILD:-$root/build-runtime-cuda}
  source "$root"/scripts/gpu-pack-common.sh
  pack_runtime "$root" "$rt" "$dir" "$root"/../shared/fixtures/llama-ref-a
  tinyllama() { # name, flags...
    local name=$1; shift
    "$compile" "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 --device cuda \
      "$@" --emit-plan "$dir"/plans/$name.mltplan 2>/dev/null
  }
  tinyllama c-b2s1024 --batch 2 --seq-len 1024
  tinyllama c-b8s512 --batch 8 --seq-len 512
  tinyllama c-b1s2048 --batch 1 --seq-len 2048
  tinyllama c-b8s1024-dp2 --batch 8 --seq-len 1024 --dp 2
  tinyllama c-b8s1024-dp2-z1 --batch 8 --seq-len 1024 --dp 2 --zero 1
  tinyllama c-b8s1024-dp2-z2 --batch 8 --seq-len 1024 --dp 2 --zero 2
  tinyllama c-b2s1024-tp2 --batch 2 --seq-len 1024 --tp 2
  tinyllama c-b4s1024-tp2 --batch 4 --seq-len 1024 --tp 2
  tinyllama c-b8s1024-pp2 --batch 8 --seq-len 1024 --microbatches 4 --pp 2
  # Sequence parallelism: the sequence's all-gathers and reduce-scatters
  # (and, with 2 sequences a micro-batch, the transposes around them).
  tinyllama c-b2s1024-tp2-sp --batch 2 --seq-len 1024 --tp 2 --sequence-parallel
  tinyllama c-b1s2048-tp2-sp --batch 1 --seq-len 2048 --tp 2 --sequence-parallel
  tinyllama c-b1s1024-tp2-sp --batch 1 --seq-len 1024 --tp 2 --sequence-parallel
  tinyllama c-b1s512-tp2-sp --batch 1 --seq-len 512 --tp 2 --sequence-parallel
  tinyllama tl-b4-tp2-sp --batch 4 --seq-len 2048 --tp 2 --sequence-parallel
  tinyllama tl-b4m4-tp2-sp --batch 4 --microbatches 4 --seq-len 2048 --tp 2 \
    --sequence-parallel
  tinyllama tl-b4 --batch 4 --seq-len 2048
  tinyllama tl-b8-dp2 --batch 8 --seq-len 2048 --dp 2
  tinyllama tl-b4-tp2 --batch 4 --seq-len 2048 --tp 2
  tinyllama tl-b32-pp2 --batch 32 --seq-len 2048 --microbatches 8 --pp 2
  tinyllama tl-b8-dp2-z1 --batch 8 --seq-len 2048 --dp 2 --zero 1
  tinyllama tl-b8-dp2-z2 --batch 8 --seq-len 2048 --dp 2 --zero 2
  tinyllama c-b2s1024-fp8 --batch 2 --seq-len 1024 --fp8
  tinyllama c-b8s512-fp8 --batch 8 --seq-len 512 --fp8
  tinyllama c-b1s2048-fp8 --batch 1 --seq-len 2048 --fp8
  tinyllama tl-b4-fp8 --batch 4 --seq-len 2048 --fp8
  for fp8 in "" --fp8; do
    "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --device cuda --batch 16 \
      --microbatches 16 --seq-len 4096 --recompute swiglu $fp8 \
      --emit-plan "$dir"/plans/l7-b16${fp8:+-fp8}.mltplan 2>/dev/null
  done
  for tp in "l7-b2m2-tp2-sp --microbatches 2" "l7-b2-tp2-sp"; do
    set -- $tp
    name=$1; shift
    "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --device cuda --batch 2 \
      --seq-len 2048 --tp 2 --sequence-parallel "$@" --emit-plan "$dir"/plans/$name.mltplan 2>/dev/null
  done
  long() { # name, model, flags...
    local name=$1 model=$2; shift 2
    "$compile" "$root"/models/llama/$model.mlir --dtype bf16 --device cuda --batch 1 \
      "$@" --emit-plan "$dir"/plans/$name.mltplan >/dev/null
  }
  long c-l1b-s32k llama-3.2-1b --seq-len 32768
  long c-l1b-s32k-cp2 llama-3.2-1b --seq-len 32768 --cp 2
  long l8b-s64k-cp2 llama-3.1-8b --seq-len 65536 --cp 2 --zero 2 --recompute-layers all
  long l8b-s64k-cp2-pick llama-3.1-8b --seq-len 65536 --cp 2 --zero 2 \
    --recompute swiglu,rms_norm --recompute-layers every:2 --grad-reduce-dtype bf16
  mkdir -p "$dir"/calibration
  cp "$root"/calibration/*.json "$dir"/calibration/
  cp "$0" "$dir"/
  echo "packed $dir ($(du -sh "$dir" | cut -f1)); on the GPU machine: bash $dir/gpu-calibrate.sh run"
  exit 0
fi

[[ "${1:-}" == run || "${1:-}" == check ]] || { echo "usage: $0 pack [DIR] | run | check" >&2; exit 2; }
mode=$1
cd "$(dirname "$0")"
out=${OUT:-$PWD/out}
mkdir -p "$out"
source ./gpu-pack-common.sh
gpu_env
nvidia-smi --query-gpu=name --format=csv,noheader | head -2
random_tokens "$out"/tokens.u16
# run NAME ARGS...: mlt-run on PLAN's ranks (mpirun for several).
run() {
  local plan=$1; shift
  local world
  world=$(./bin/mlt-run plans/$plan.mltplan --print-plan | sed -n 's/.*world size \([0-9]*\).*/\1/p' | head -1)
  if [[ "${world:-1}" -gt 1 ]]; then
    $mpirun -np "$world" ./bin/mlt-run plans/$plan.mltplan --device cuda --data "$out"/tokens.u16 "$@"
  else
    ./bin/mlt-run plans/$plan.mltplan --device cuda --data "$out"/tokens.u16 "$@"
  fi
}
status=0
if [[ -n ${BASE:-} ]]; then
  cp "$BASE" "$out"/calibration.json
  echo "calibrating into a copy of $BASE"
fi
calibration=(--calibration "$out"/calibration.json)
[[ $mode == check ]] && { calibrating=; calibration=(); }
for plan in $calibrating; do
  echo "== calibrate: $plan"
  run $plan --steps 6 --calibrate "$out"/calibration.json > "$out"/$plan.log 2>&1 \
    || { tail -3 "$out"/$plan.log; echo "FAIL: $plan"; status=1; continue; }
  grep '^calibration of' "$out"/$plan.log
done
echo "== check: predicted against measured (10 steps; the median of steps 3-10 but the profiled one)"
for plan in $checked; do
  trace=()
  trace=(--trace "$out"/$plan.trace.json)
  run $plan --steps 10 "${calibration[@]}" "${trace[@]}" > "$out"/$plan.log 2>&1 \
    || { tail -3 "$out"/$plan.log; echo "FAIL: $plan"; status=1; continue; }
  printf '%-14s %s\n' "$plan" "$(grep '^step time:' "$out"/$plan.log || echo 'no prediction (no calibration for this GPU)')"
done
exit $status
