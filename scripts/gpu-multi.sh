#!/bin/bash
# Several GPUs: `mlt-run --device cuda` as one process per GPU under mpirun,
# collectives over NCCL, on a machine with GPUs but no LLVM. Trains the
# llama-ref-a fixture with dp=2, tp=2, tp=2 + sequence parallelism and dp=2
# with 2 micro-batches on 2 GPUs, and llama-ref-c with pp=2 (1F1B with 2
# and 4 micro-batches, GPipe, ZB-H1), checks each run against the fixture (HF
# transformers) and against the 1-GPU run, and checks the error paths (a
# plan of several ranks without mpirun, more processes than GPUs, a plan for
# another world size, a rank failing mid-run). On a machine of one GPU the
# 2-GPU runs are skipped, visibly, and the rest still runs.
#
#   scripts/gpu-multi.sh pack [DIR]   (build machine) runtime-only build with
#                                     CUDA, NCCL and MPI, plans compiled by a
#                                     compiler build's mlt-run ($MLT_COMPILE,
#                                     default build/bin/mlt-run), fixture,
#                                     tools, libraries -> DIR (default
#                                     .carry-multi)
#   DIR/gpu-multi.sh run              (GPU machine) runs everything; logs go
#                                     to $OUT (or DIR/out); exit 1 on any
#                                     failure
#   DIR/gpu-multi.sh four             (GPU machine, 4 GPUs) llama-ref-c at
#                                     pp 4 (1F1B, ZB-H1), pp 2 x dp 2 and
#                                     pp 2 x tp 2 against the fixture and
#                                     the 1-GPU run
#   DIR/gpu-multi.sh bench [STEPS]    (GPU machine, 2 GPUs) TinyLlama-1.1B
#                                     (bf16, micro-batch 4 x 2048 per GPU):
#                                     1 GPU, dp=2 with the gradient
#                                     all-reduces under the backward pass
#                                     (the default), dp=2 with them after it
#                                     (--overlap-grad-reduce off), tp=2,
#                                     ZeRO 1 and 2 with the overlaps on and
#                                     off, ZeRO 2 reducing in bf16, HF
#                                     eager; then again without CUDA graphs
#                                     around NCCL (MLT_CUDA_GRAPHS=compute).
#                                     BENCH_PLANS="tl-b8-dp2-z2 ..." runs
#                                     those beside tl-b4 only, BENCH_MODES=
#                                     without HF
#   DIR/gpu-multi.sh bench7b [STEPS]  (GPU machine, 2 GPUs) LLaMA-2-7B, 1 x
#                                     2048 per GPU, ZeRO 2 (reducing in f32
#                                     and in bf16), then PyTorch FSDP2
#                                     (FSDP_MODES, default "eager compile").
#                                     BENCH7B=b32: a global batch of 32 (8
#                                     micro-batches of 2 per GPU, ZeRO 2,
#                                     SwiGLU recomputed); BENCH7B=s4096:
#                                     seq 4096, 1 per GPU, ZeRO 2 with SwiGLU
#                                     recomputed; FSDP2 at the same sequence
#                                     length and FSDP_MB (default 1)
#   DIR/gpu-multi.sh profile          (GPU machine, 2 GPUs) where a step's
#                                     time goes (--profile-step, --trace):
#                                     PROFILE_PLANS, PROFILE_ENV,
#                                     PROFILE_SUFFIX (see the mode)
#
# mpirun is the GPU machine's Open MPI 4.1 (mlt-run links libmpi.so.40 and
# uses MPI only to start and to end); NCCL_NVLS_ENABLE=0 is set for every
# run, as these machines need.
set -euo pipefail

if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=$(realpath -m "${2:-$root/.carry-multi}")
  compile=${MLT_COMPILE:-$root/build/bin/mlt-run}
  fixture=$root/../shared/fixtures/llama-ref-a
  test -d "$fixture" || { echo "gpu-multi: no fixture at $fixture" >&2; exit 1; }
  test -x "$compile" || { echo "gpu-multi: no compiler build's mlt-run at $compile (set MLT_COMPILE)" >&2; exit 1; }
  rt=${MLT_RUNTIME_BUILD:-$root/build-runtime-cuda}
  source "$root"/scripts/gpu-pack-common.sh
  pack_runtime "$root" "$rt" "$dir" "$fixture"
  mkdir -p "$dir"/tools/Inputs
  cp "$root"/test/Training/Inputs/compare_runs.py \
    "$root"/test/Training/Inputs/compare_resumed.py "$dir"/tools/Inputs/
  python3 "$root"/test/Training/fixture_tools.py variant "$fixture"/model.safetensors \
    "$dir"/plans/nan.safetensors nan model.norm.weight
  compile_plan() { # name, layout flags...
    local name=$1; shift
    "$compile" "$fixture" --batch 4 --seq-len 32 --device cuda "$@" \
      --emit-plan "$dir"/plans/$name.mltplan
  }
  compile_plan one --microbatches 1
  compile_plan dp2 --microbatches 1 --dp 2
  compile_plan tp2 --microbatches 1 --tp 2
  compile_plan tp2sp --microbatches 1 --tp 2 --sequence-parallel
  # Micro-batches of one sequence: the all-gathers' products decomposed
  # (the rank's own block while the others' travel).
  compile_plan tp2sp-mb4 --microbatches 4 --tp 2 --sequence-parallel
  compile_plan dp2-mb2 --microbatches 2 --dp 2
  compile_plan dp2tp2 --microbatches 1 --dp 2 --tp 2
  compile_plan dp2-after --microbatches 1 --dp 2 --overlap-grad-reduce off
  compile_plan dp2-mb2-after --microbatches 2 --dp 2 --overlap-grad-reduce off
  compile_plan dp2-z1 --microbatches 1 --dp 2 --zero 1
  compile_plan dp2-mb2-z1 --microbatches 2 --dp 2 --zero 1
  compile_plan dp2-z1-after --microbatches 1 --dp 2 --zero 1 \
    --overlap-grad-reduce off --overlap-param-gather off
  compile_plan dp2-z2 --microbatches 1 --dp 2 --zero 2
  compile_plan dp2-mb2-z2 --microbatches 2 --dp 2 --zero 2
  # bf16: ZeRO-2 with the gradients reduced in f32 and in bf16.
  compile_plan dp2-z2-bf16 --microbatches 1 --dp 2 --zero 2 --dtype bf16
  compile_plan dp2-z2-bf16r --microbatches 1 --dp 2 --zero 2 --dtype bf16 \
    --grad-reduce-dtype bf16
  compile_plan dp2-mb2-z2-bf16r --microbatches 2 --dp 2 --zero 2 --dtype bf16 \
    --grad-reduce-dtype bf16
  # Pipelines: llama-ref-c (8 layers), pp=2 under 1F1B and GPipe, and the
  # 1-GPU runs of the same micro-batches.
  fixture_c=$root/../shared/fixtures/llama-ref-c
  cp -r "$fixture_c" "$dir"/fixtures/
  python3 "$root"/test/Training/fixture_tools.py tokens "$fixture_c" "$dir"/plans/tokens-c.u16
  compile_plan_c() { # name, layout flags...
    local name=$1; shift
    "$compile" "$fixture_c" --batch 8 --seq-len 32 --device cuda "$@" \
      --emit-plan "$dir"/plans/$name.mltplan 2>/dev/null
  }
  compile_plan_c c-one-m2 --microbatches 2
  compile_plan_c c-one-m4 --microbatches 4
  compile_plan_c c-pp2-m2 --microbatches 2 --pp 2
  compile_plan_c c-pp2-m4 --microbatches 4 --pp 2
  compile_plan_c c-pp2-m4-gpipe --microbatches 4 --pp 2 --schedule gpipe
  compile_plan_c c-pp2-m4-zb --microbatches 4 --pp 2 --schedule zb-h1
  compile_plan_c c-pp2-vp2-m4 --microbatches 4 --pp 2 --vp 2
  # Groups of 4 micro-batches per chunk: sends placed later than their items.
  compile_plan_c c-pp2-vp2-g4-m8 --microbatches 8 --pp 2 --vp 2 --pp-group-size 4
  # Four GPUs (mode four): pp 4, pp 2 x dp 2, pp 2 x tp 2, ZB-H1 at pp 4.
  compile_plan_c c-one-m8 --microbatches 8
  compile_plan_c c-pp4-m8 --microbatches 8 --pp 4
  compile_plan_c c-pp4-m8-zb --microbatches 8 --pp 4 --schedule zb-h1
  compile_plan_c c-pp2-dp2-m4 --microbatches 4 --pp 2 --dp 2
  compile_plan_c c-pp2-tp2-m4 --microbatches 4 --pp 2 --tp 2
  # Tied embeddings across two stages: the tiny config with
  # tie_word_embeddings, on random bytes.
  python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['tie_word_embeddings']=True; json.dump(c, open(sys.argv[2], 'w'))" \
    "$root"/models/llama/configs/tiny.json "$dir"/plans/tied.json
  python3 -c "import random,struct,sys; random.seed(1); open(sys.argv[1],'wb').write(struct.pack('<65536H', *(random.randrange(256) for _ in range(65536))))" \
    "$dir"/plans/tied-tokens.u16
  for pp in 1 2; do
    "$compile" "$dir"/plans/tied.json --batch 8 --seq-len 32 --microbatches 2 --pp $pp \
      --device cuda --emit-plan "$dir"/plans/tied-pp$pp.mltplan 2>/dev/null
  done
  tinyllama() { # name, flags...
    local name=$1; shift
    "$compile" "$root"/models/llama/tinyllama-1.1b.mlir --dtype bf16 --seq-len 2048 \
      --device cuda "$@" --emit-plan "$dir"/plans/$name.mltplan
  }
  tinyllama tl-b4 --batch 4
  tinyllama tl-b8-dp2 --batch 8 --dp 2
  tinyllama tl-b8-dp2-after --batch 8 --dp 2 --overlap-grad-reduce off
  tinyllama tl-b4-tp2 --batch 4 --tp 2
  tinyllama tl-b4-tp2-sync --batch 4 --tp 2 --overlap-tp-comm off
  # Sequence parallelism: micro-batches of 4 (transposes around the
  # sequence's collectives) and of 1; the input gradients' reduce-scatters
  # under the weight gradients, and not.
  tinyllama tl-b4-tp2-sp --batch 4 --tp 2 --sequence-parallel
  tinyllama tl-b4-tp2-sp-sync --batch 4 --tp 2 --sequence-parallel --overlap-tp-comm off
  tinyllama tl-b4m4-tp2-sp --batch 4 --microbatches 4 --tp 2 --sequence-parallel
  tinyllama tl-b4m4-tp2-sp-sync --batch 4 --microbatches 4 --tp 2 --sequence-parallel \
    --overlap-tp-comm off
  tinyllama tl-b4m4-tp2 --batch 4 --microbatches 4 --tp 2
  tinyllama tl-b8-dp2-z1 --batch 8 --dp 2 --zero 1
  tinyllama tl-b8-dp2-z1-after --batch 8 --dp 2 --zero 1 \
    --overlap-grad-reduce off --overlap-param-gather off
  tinyllama tl-b8-dp2-z1-noparam --batch 8 --dp 2 --zero 1 --overlap-param-gather off
  tinyllama tl-b8-dp2-z2 --batch 8 --dp 2 --zero 2
  tinyllama tl-b8-dp2-z2-after --batch 8 --dp 2 --zero 2 \
    --overlap-grad-reduce off --overlap-param-gather off
  tinyllama tl-b8-dp2-z2-bf16r --batch 8 --dp 2 --zero 2 --grad-reduce-dtype bf16
  # pp=2: 8 micro-batches of 4 x 2048 per step (1F1B).
  tinyllama tl-b32-pp2 --batch 32 --microbatches 8 --pp 2 2>/dev/null
  tinyllama tl-b32-pp2-zb --batch 32 --microbatches 8 --pp 2 --schedule zb-h1 2>/dev/null
  tinyllama tl-b32-pp2-vp2 --batch 32 --microbatches 8 --pp 2 --vp 2 2>/dev/null
  # LLaMA-2-7B on two GPUs: ZeRO-2 (10 bytes per parameter) and a micro-batch
  # of 1 x 2048 per GPU.
  "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --seq-len 2048 \
    --device cuda --batch 2 --dp 2 --zero 2 --emit-plan "$dir"/plans/l7-b2-dp2-z2.mltplan
  "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --seq-len 2048 \
    --device cuda --batch 2 --dp 2 --zero 2 --grad-reduce-dtype bf16 \
    --emit-plan "$dir"/plans/l7-b2-dp2-z2-bf16r.mltplan
  # tp 2 on the same 2 x 2048 a step: plain, with sequence parallelism
  # (micro-batch of 2: transposes around its collectives), and with
  # micro-batches of one sequence (collective matmuls).
  for tp in "l7-b2-tp2 --tp 2" "l7-b2-tp2-sp --tp 2 --sequence-parallel" \
      "l7-b2m2-tp2-sp --tp 2 --sequence-parallel --microbatches 2"; do
    set -- $tp
    name=$1; shift
    "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --seq-len 2048 \
      --device cuda --batch 2 "$@" --emit-plan "$dir"/plans/$name.mltplan
  done
  # A global batch of 32 (the planner's ZeRO layout for it), reducing in
  # f32 and in bf16; and seq 4096 (the planner's pick for 2 x 4096).
  for reduce in f32 bf16; do
    "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --seq-len 2048 \
      --device cuda --batch 32 --microbatches 8 --dp 2 --zero 2 --recompute swiglu \
      --grad-reduce-dtype $reduce --emit-plan "$dir"/plans/l7-b32-dp2-z2-rc-$reduce.mltplan
  done
  "$compile" "$root"/models/llama/llama-2-7b.mlir --dtype bf16 --seq-len 4096 \
    --device cuda --batch 2 --dp 2 --zero 2 --recompute swiglu \
    --emit-plan "$dir"/plans/l7s4096-b2-dp2-z2-rc.mltplan
  cp "$root"/../shared/bench/torch_dist_bench.py "$dir"/tools/
  finish_pack "$root" "$dir" "$0"
  exit 0
fi

[[ "${1:-}" == run || "${1:-}" == bench || "${1:-}" == bench7b || "${1:-}" == profile || "${1:-}" == four ]] ||
  { echo "usage: $0 pack [DIR] | run | four | bench [STEPS] | bench7b [STEPS] | profile" >&2; exit 2; }
cd "$(dirname "$0")"
out=${OUT:-$PWD/out}
mkdir -p "$out"
# NCCL_NVLS_ENABLE=0, the library path (Open MPI's libmpi.so.40: the
# machine's own, next to its mpirun) and $mpirun (gpu-pack-common.sh).
source ./gpu-pack-common.sh
gpu_env
if [[ "$1" == bench7b ]]; then
  # LLaMA-2-7B, 1 x 2048 per GPU: mlt with ZeRO-2 beside PyTorch FSDP2 (the
  # torchtitan way), one call.
  steps=${2:-10}
  seq=2048
  case "${BENCH7B:-b2}" in
    b2) plans="l7-b2-dp2-z2 l7-b2-dp2-z2-bf16r" ;;
    b32) plans="l7-b32-dp2-z2-rc-f32 l7-b32-dp2-z2-rc-bf16" ;;
    s4096) plans="l7s4096-b2-dp2-z2-rc" seq=4096 ;;
    # Tensor parallelism against the dp layout, 2 x 2048 a step (issue 33).
    tp) plans="l7-b2-dp2-z2 l7-b2-dp2-z2-bf16r l7-b2-tp2 l7-b2-tp2-sp l7-b2m2-tp2-sp" ;;
    *) echo "gpu-multi: BENCH7B must be b2, b32, s4096 or tp" >&2; exit 2 ;;
  esac
  python3 tools/gpu_bench.py --mlt-run bin/mlt-run \
    $(for p in $plans; do echo --plan plans/$p.mltplan; done) \
    --ref tools/hf_llama_bench.py --config llama-7b --modes '' --steps "$steps" \
    --out "$out" 2>&1 | tee "$out"/bench7b-${BENCH7B:-b2}.txt
  # FSDP_MODES: the FSDP2 runs, "eager compile" by default ("" for none).
  for mode in ${FSDP_MODES-eager compile}; do
    flags=
    [[ "$mode" == compile ]] && flags=--compile
    echo "== PyTorch FSDP2 $flags, seq $seq, micro-batch ${FSDP_MB:-1}"
    timeout 300 torchrun --nproc-per-node 2 tools/torch_dist_bench.py --wrap fsdp \
      --config llama-7b --seq $seq --mb "${FSDP_MB:-1}" --steps "$steps" $flags 2>&1 | tail -2
  done
  exit 0
fi
if [[ "$1" == profile ]]; then
  # Where the time of a step goes, per rank and per stream: mlt-run
  # --profile-step 4 --trace on TinyLlama at 1 GPU and dp=2 (ZeRO 0, 1, 2),
  # each profile in OUT/NAME.profile.txt and its Perfetto trace in
  # OUT/NAME.trace.json. Extra environment for every run: PROFILE_ENV
  # ("MLT_MATMUL_SM_MARGIN=16"), whose runs are named with a suffix
  # (PROFILE_SUFFIX).
  random_tokens "$out"/tl-tokens.u16
  suffix=${PROFILE_SUFFIX:-}
  mpirun="mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
  for plan in ${PROFILE_PLANS:-tl-b4 tl-b8-dp2 tl-b8-dp2-z1 tl-b8-dp2-z2}; do
    world=$(./bin/mlt-run plans/$plan.mltplan --print-plan | sed -n 's/.*world size \([0-9]*\).*/\1/p' | head -1)
    args=(./bin/mlt-run plans/$plan.mltplan --device cuda --data "$out"/tl-tokens.u16
      --steps 5 --profile-step 4 --trace "$out"/$plan$suffix.trace.json)
    echo "== $plan$suffix (${world:-1} ranks) ${PROFILE_ENV:-}"
    if [[ "${world:-1}" -gt 1 ]]; then
      env ${PROFILE_ENV:-} $mpirun $(for v in ${PROFILE_ENV:-}; do echo -x "${v%%=*}"; done) \
        -np "$world" "${args[@]}" > "$out"/$plan$suffix.profile.txt 2>&1 || echo "FAIL: $plan"
    else
      env ${PROFILE_ENV:-} "${args[@]}" > "$out"/$plan$suffix.profile.txt 2>&1 || echo "FAIL: $plan"
    fi
    grep -E '^(step|timeline|  stream)' "$out"/$plan$suffix.profile.txt | head -12
  done
  exit 0
fi
if [[ "$1" == four ]]; then
  # Four GPUs: llama-ref-c's pipelines of four ranks against the fixture
  # and the 1-GPU run of the same micro-batches.
  mpirun="mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
  hyper="--lr 0.003 --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --weight-decay 0.1 --clip-grad 1.0"
  status=0
  for plan in c-one-m4 c-one-m8 c-pp4-m8 c-pp4-m8-zb c-pp2-dp2-m4 c-pp2-tp2-m4; do
    launcher=; [[ $plan != c-one-* ]] && launcher="$mpirun -np 4"
    echo "== $plan"
    $launcher ./bin/mlt-run plans/$plan.mltplan --device cuda \
      --init-from fixtures/llama-ref-c/model.safetensors --data plans/tokens-c.u16 --no-shuffle \
      --steps 6 $hyper --log-json "$out"/$plan.jsonl --save-hf /tmp/mlt-$plan \
      --dump-grads /tmp/mlt-$plan.grads > "$out"/$plan.log 2>&1 \
      || { cat "$out"/$plan.log; echo "FAIL: $plan: mlt-run"; status=1; continue; }
    python3 tools/fixture_tools.py check fixtures/llama-ref-c "$out"/$plan.jsonl \
      --weights /tmp/mlt-$plan --grads /tmp/mlt-$plan.grads || { echo "FAIL: $plan: fixture"; status=1; }
    [[ $plan == c-one-* ]] && continue
    one=c-one-m4; [[ $plan == *m8* ]] && one=c-one-m8
    python3 tools/Inputs/compare_runs.py 1e-4 "$out"/$plan.jsonl "$out"/$one.jsonl \
      /tmp/mlt-$plan.grads /tmp/mlt-$one.grads || { echo "FAIL: $plan: against $one"; status=1; }
  done
  exit $status
fi
if [[ "$1" == bench ]]; then
  steps=${2:-10}
  # BENCH_PLANS: the plans after tl-b4 (the 1-GPU run every ratio is to).
  plans=${BENCH_PLANS:-tl-b8-dp2 tl-b8-dp2-after tl-b4-tp2 tl-b4-tp2-sync tl-b8-dp2-z1 tl-b8-dp2-z1-noparam
    tl-b8-dp2-z1-after tl-b8-dp2-z2 tl-b8-dp2-z2-after tl-b8-dp2-z2-bf16r}
  python3 tools/gpu_bench.py --mlt-run bin/mlt-run --plan plans/tl-b4.mltplan \
    $(for p in $plans; do echo --plan plans/$p.mltplan; done) \
    --ref tools/hf_llama_bench.py --config llama-1b --modes "${BENCH_MODES-eager}" \
    --steps "$steps" --out "$out" 2>&1 | tee "$out"/bench.txt
  [[ -n "${BENCH_PLANS:-}" ]] && exit 0
  echo "== dp=2 without CUDA graphs around NCCL (MLT_CUDA_GRAPHS=compute)"
  mkdir -p "$out"/nographs
  MLT_CUDA_GRAPHS=compute python3 tools/gpu_bench.py --mlt-run bin/mlt-run \
    --plan plans/tl-b4.mltplan --plan plans/tl-b8-dp2.mltplan --plan plans/tl-b8-dp2-z1.mltplan \
    --plan plans/tl-b8-dp2-z2.mltplan \
    --ref tools/hf_llama_bench.py --config llama-1b --modes '' --steps "$steps" \
    --out "$out"/nographs 2>&1 | tee "$out"/bench-nographs.txt
  exit 0
fi
gpus=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out"/gpu.txt
echo "GPUs: $gpus; $(mpirun --version 2>&1 | head -1)"
mpirun="mpirun --allow-run-as-root --bind-to none -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH"
status=0
fail() { echo "FAIL: $*"; status=1; }

./bin/MLTRuntimeCUDATests --gtest_filter='Nccl*:CudaBackend*' > "$out"/nccl-tests.log 2>&1 || fail "NCCL/CUDA backend tests"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  SKIPPED \] Nccl" "$out"/nccl-tests.log || true

hyper="--lr 0.003 --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --weight-decay 0.1 --clip-grad 1.0"
train() { # name, launcher..., then mlt-run's plan
  local name=$1; shift
  "$@" --device cuda --init-from fixtures/llama-ref-a/model.safetensors \
    --data plans/tokens.u16 --no-shuffle --steps 6 $hyper \
    --log-json "$out"/$name.jsonl --save-hf /tmp/mlt-$name --dump-grads /tmp/mlt-$name.grads \
    > "$out"/$name.log 2>&1 || { cat "$out"/$name.log; fail "$name: mlt-run"; return; }
  cat "$out"/$name.log
  python3 tools/fixture_tools.py check fixtures/llama-ref-a "$out"/$name.jsonl \
    --weights /tmp/mlt-$name --grads /tmp/mlt-$name.grads || fail "$name: against the fixture"
}
same() { # name: against the 1-GPU run (as test/Training/sharded-fixture.test)
  python3 tools/Inputs/compare_runs.py 1e-5 "$out"/$1.jsonl "$out"/one.jsonl \
    /tmp/mlt-$1.grads /tmp/mlt-one.grads || fail "$1: against the 1-GPU run"
  python3 tools/Inputs/compare_runs.py --updates-from fixtures/llama-ref-a/model.safetensors 1e-3 \
    "$out"/$1.jsonl "$out"/one.jsonl /tmp/mlt-$1/model.safetensors /tmp/mlt-one/model.safetensors \
    || fail "$1: final weights against the 1-GPU run"
}

echo "== 1 GPU, no launcher"
train one ./bin/mlt-run plans/one.mltplan
echo "== 1 GPU, mpirun -np 1 (a run of one process: no MPI)"
train one-np1 $mpirun -np 1 ./bin/mlt-run plans/one.mltplan
# (compare_runs.py at tolerance 0: every loss and gradient norm the same
# bits; the logs' other fields, such as times, differ from run to run.)
same_bits() { python3 tools/Inputs/compare_runs.py 0 "$1" "$2" > /dev/null; }
same_bits "$out"/one.jsonl "$out"/one-np1.jsonl \
  && echo "ok: mpirun -np 1 gives the 1-GPU losses bit for bit" || fail "mpirun -np 1 differs"

if (( gpus >= 2 )); then
  for plan in dp2 dp2-after tp2 tp2sp dp2-mb2 dp2-mb2-after dp2-z1 dp2-mb2-z1 dp2-z1-after dp2-z2 dp2-mb2-z2; do
    echo "== 2 GPUs, $plan: mpirun -np 2"
    train $plan $mpirun -np 2 ./bin/mlt-run plans/$plan.mltplan
    same $plan
  done
  echo "== 2 GPUs, tp2sp-mb4 (collective matmuls): mpirun -np 2"
  train tp2sp-mb4 $mpirun -np 2 ./bin/mlt-run plans/tp2sp-mb4.mltplan
  for plan in dp2 dp2-mb2; do
    same_bits "$out"/$plan.jsonl "$out"/$plan-after.jsonl \
      && echo "ok: $plan: the all-reduces under the backward give the losses of those after it, bit for bit" \
      || fail "$plan: overlapped and serial gradient all-reduces differ"
  done
  same_bits "$out"/dp2-z1.jsonl "$out"/dp2-z1-after.jsonl \
    && echo "ok: dp2-z1: reduce-scatters and all-gathers overlapped give the losses of both after, bit for bit" \
    || fail "dp2-z1: overlapped and serial ZeRO collectives differ"
  # The runs above capture NCCL in CUDA graphs (the default); these launch
  # the programs with collectives one by one.
  echo "== 2 GPUs, dp2-z1 without graphs around NCCL (MLT_CUDA_GRAPHS=compute)"
  MLT_CUDA_GRAPHS=compute train dp2-z1-nograph $mpirun -x MLT_CUDA_GRAPHS -np 2 ./bin/mlt-run plans/dp2-z1.mltplan
  same dp2-z1-nograph
  echo "== 2 GPUs, dp2 without graphs around NCCL (MLT_CUDA_GRAPHS=compute)"
  MLT_CUDA_GRAPHS=compute train dp2-nograph $mpirun -x MLT_CUDA_GRAPHS -np 2 ./bin/mlt-run plans/dp2.mltplan
  same dp2-nograph
  # Checkpoints of two processes: dp=2 and ZeRO-2 saved every 3 steps
  # (each process writing its rank's shard), resumed from step 3 by
  # two processes (the same bits) and by one GPU (another layout: within
  # 1e-5 of the dp=2 run that never stopped).
  for plan in dp2 dp2-mb2-z2; do
    echo "== 2 GPUs, $plan: checkpoint at step 3, resumed"
    rm -rf /tmp/ckpt-$plan
    $mpirun -np 2 ./bin/mlt-run plans/$plan.mltplan --device cuda \
      --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
      --no-shuffle --steps 6 $hyper --save-checkpoint /tmp/ckpt-$plan --save-every 3 \
      --log-json "$out"/ckpt-$plan-full.jsonl --save-hf /tmp/ckpt-$plan-full \
      > "$out"/ckpt-$plan.log 2>&1 || { cat "$out"/ckpt-$plan.log; fail "$plan: saving"; continue; }
    $mpirun -np 2 ./bin/mlt-run plans/$plan.mltplan --device cuda --data plans/tokens.u16 \
      --no-shuffle --steps 6 $hyper --resume /tmp/ckpt-$plan/step-000003 \
      --log-json "$out"/ckpt-$plan-resumed.jsonl --save-hf /tmp/ckpt-$plan-resumed \
      > "$out"/ckpt-$plan-resumed.log 2>&1 || { cat "$out"/ckpt-$plan-resumed.log; fail "$plan: resuming"; continue; }
    python3 tools/Inputs/compare_resumed.py 0 "$out"/ckpt-$plan-full.jsonl \
      "$out"/ckpt-$plan-resumed.jsonl || fail "$plan: resumed run differs"
    cmp /tmp/ckpt-$plan-full/model.safetensors /tmp/ckpt-$plan-resumed/model.safetensors \
      && echo "ok: $plan: the same final weights, byte for byte" || fail "$plan: final weights differ"
    ./bin/mlt-run plans/one.mltplan --device cuda --data plans/tokens.u16 \
      --no-shuffle --steps 6 $hyper --resume /tmp/ckpt-$plan/step-000003 \
      --log-json "$out"/ckpt-$plan-one.jsonl > "$out"/ckpt-$plan-one.log 2>&1 \
      || { cat "$out"/ckpt-$plan-one.log; fail "$plan: resuming on one GPU"; continue; }
    python3 tools/Inputs/compare_resumed.py 1e-5 "$out"/ckpt-$plan-full.jsonl \
      "$out"/ckpt-$plan-one.jsonl || fail "$plan: resumed on one GPU"
    echo "$plan: step-000003 holds $(ls /tmp/ckpt-$plan/step-000003 | tr '\n' ' ')"
  done
  # A signal stops every process after the same step, with a checkpoint:
  # SIGTERM to every rank (as srun sends it), and to one rank's process
  # alone; each run then resumes. (Not to mpirun: Open MPI kills the ranks
  # on SIGTERM and did not pass SIGUSR1 on.)
  for target in ranks rank1; do
    echo "== 2 GPUs, dp2-mb2-z2: a signal to $target while training"
    rm -rf /tmp/term-$target
    $mpirun -np 2 ./bin/mlt-run plans/dp2-mb2-z2.mltplan --device cuda \
      --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
      --steps 100000 $hyper --save-checkpoint /tmp/term-$target \
      > "$out"/term-$target.log 2>&1 &
    launcher=$!
    for _ in $(seq 600); do grep -q "^step *20/" "$out"/term-$target.log && break; sleep 0.1; done
    if [[ $target == ranks ]]; then
      pkill -TERM -P $launcher
    else
      kill -TERM "$(pgrep -f 'mlt-run plans/dp2-mb2-z2' | sort -n | tail -1)"
    fi
    code=0; wait $launcher || code=$?; echo "exit $code"
    tail -3 "$out"/term-$target.log
    grep -q "^stopped by SIGTERM after step" "$out"/term-$target.log \
      || fail "$target: SIGTERM did not stop the run with a checkpoint"
    ls /tmp/term-$target 2>/dev/null | tr '\n' ' '; echo
    saved=$(sed -n 's/^step-0*//p' /tmp/term-$target/latest 2>/dev/null)
    $mpirun -np 2 ./bin/mlt-run plans/dp2-mb2-z2.mltplan --device cuda \
      --data plans/tokens.u16 --steps $(( ${saved:-0} + 1 )) $hyper \
      --resume /tmp/term-$target 2>&1 | grep -E "resumed|error" \
      || fail "$target: resuming after the signal"
  done
  # bf16 ZeRO-2, the gradients reduced in f32 and in bf16: HF's losses at
  # bf16's tolerance, and the two reductions within 1e-2 of each other.
  for plan in dp2-z2-bf16 dp2-z2-bf16r dp2-mb2-z2-bf16r; do
    echo "== 2 GPUs, $plan (bf16): mpirun -np 2"
    $mpirun -np 2 ./bin/mlt-run plans/$plan.mltplan --device cuda \
      --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 \
      --no-shuffle --steps 6 $hyper --log-json "$out"/$plan.jsonl > "$out"/$plan.log 2>&1 \
      || { cat "$out"/$plan.log; fail "$plan: mlt-run"; continue; }
    python3 tools/fixture_tools.py check-loss fixtures/llama-ref-a "$out"/$plan.jsonl 2e-2 \
      || fail "$plan: against the fixture"
  done
  python3 tools/Inputs/compare_runs.py 1e-2 "$out"/dp2-z2-bf16r.jsonl "$out"/dp2-z2-bf16.jsonl \
    || fail "dp2-z2-bf16r: against the f32 reduction"
  # Pipelines: llama-ref-c at pp=2 against its fixture and against the
  # 1-GPU run of the same micro-batches (the loss sent from the last stage
  # to rank 0, which reports).
  trainc() { # name, launcher..., then mlt-run's plan
    local name=$1; shift
    "$@" --device cuda --init-from fixtures/llama-ref-c/model.safetensors \
      --data plans/tokens-c.u16 --no-shuffle --steps 6 $hyper \
      --log-json "$out"/$name.jsonl --save-hf /tmp/mlt-$name --dump-grads /tmp/mlt-$name.grads \
      > "$out"/$name.log 2>&1 || { cat "$out"/$name.log; fail "$name: mlt-run"; return; }
    cat "$out"/$name.log
    python3 tools/fixture_tools.py check fixtures/llama-ref-c "$out"/$name.jsonl \
      --weights /tmp/mlt-$name --grads /tmp/mlt-$name.grads || fail "$name: against the fixture"
  }
  echo "== 1 GPU, llama-ref-c, 2, 4 and 8 micro-batches"
  trainc c-one-m2 ./bin/mlt-run plans/c-one-m2.mltplan
  trainc c-one-m4 ./bin/mlt-run plans/c-one-m4.mltplan
  trainc c-one-m8 ./bin/mlt-run plans/c-one-m8.mltplan
  for plan in c-pp2-m2 c-pp2-m4 c-pp2-m4-gpipe c-pp2-m4-zb c-pp2-vp2-m4 c-pp2-vp2-g4-m8; do
    echo "== 2 GPUs, $plan: mpirun -np 2"
    trainc $plan $mpirun -np 2 ./bin/mlt-run plans/$plan.mltplan
    one=c-one-m2; [[ $plan == *m4* ]] && one=c-one-m4; [[ $plan == *m8 ]] && one=c-one-m8
    python3 tools/Inputs/compare_runs.py 1e-5 "$out"/$plan.jsonl "$out"/$one.jsonl \
      /tmp/mlt-$plan.grads /tmp/mlt-$one.grads || fail "$plan: against the 1-GPU run"
  done
  echo "== 2 GPUs, tied embeddings at pp=2 against 1 GPU"
  for pp in 1 2; do
    launcher=; [[ $pp == 2 ]] && launcher="$mpirun -np 2"
    $launcher ./bin/mlt-run plans/tied-pp$pp.mltplan --device cuda --data plans/tied-tokens.u16 \
      --no-shuffle --steps 6 $hyper --log-json "$out"/tied-pp$pp.jsonl --save-hf /tmp/mlt-tied-pp$pp \
      > "$out"/tied-pp$pp.log 2>&1 || { cat "$out"/tied-pp$pp.log; fail "tied-pp$pp: mlt-run"; }
  done
  python3 tools/Inputs/compare_runs.py 1e-4 "$out"/tied-pp2.jsonl "$out"/tied-pp1.jsonl \
    /tmp/mlt-tied-pp2/model.safetensors /tmp/mlt-tied-pp1/model.safetensors \
    || fail "tied-pp2: against the 1-GPU run"
  echo "== a rank failing mid-run (NaN loss at step 1, seen by rank 0): the job ends"
  set +e
  timeout 120 $mpirun -np 2 ./bin/mlt-run plans/dp2.mltplan --device cuda \
    --init-from plans/nan.safetensors --data plans/tokens.u16 --steps 3 > "$out"/nan.log 2>&1
  code=$?
  set -e
  cat "$out"/nan.log
  [[ $code != 0 && $code != 124 ]] || fail "mid-run failure: exit $code (124: hung)"
  grep -q "^mlt-run: error: rank 0: loss is NaN at step 1" "$out"/nan.log || fail "mid-run failure: no error line"
else
  echo "SKIPPED: the 2-GPU runs (dp2 tp2 tp2sp dp2-mb2, mid-run failure): $gpus GPU visible"
  # Two processes on the one GPU (a testing knob of mlt-run): NCCL refuses
  # two ranks on one device at init, which must end every process with one
  # line; should it accept them, the run must train like the 1-GPU run.
  echo "== 2 processes sharing GPU 0 (MLT_TEST_SHARE_GPUS=1)"
  set +e
  MLT_TEST_SHARE_GPUS=1 timeout 150 $mpirun -x MLT_TEST_SHARE_GPUS --oversubscribe -np 2 \
    ./bin/mlt-run plans/dp2.mltplan --device cuda --init-from fixtures/llama-ref-a/model.safetensors \
    --data plans/tokens.u16 --no-shuffle --steps 6 $hyper --log-json "$out"/shared.jsonl \
    --save-hf /tmp/mlt-shared --dump-grads /tmp/mlt-shared.grads > "$out"/shared.log 2>&1
  code=$?
  set -e
  cat "$out"/shared.log
  if [[ $code == 0 ]]; then
    python3 tools/fixture_tools.py check fixtures/llama-ref-a "$out"/shared.jsonl \
      --weights /tmp/mlt-shared --grads /tmp/mlt-shared.grads || fail "shared: against the fixture"
    same shared
  elif [[ $code == 124 ]]; then
    fail "2 processes on one GPU: hung"
  else
    lines=$(grep -c "^mlt-run: error: " "$out"/shared.log || true)
    [[ $lines == 1 ]] && echo "ok: refused with one line, exit $code" || fail "2 processes on one GPU: $lines error lines"
  fi
fi

expect_error() { # what, expected line (grep -E), command...
  local what=$1 line=$2; shift 2
  set +e
  timeout 120 "$@" > "$out"/error.log 2>&1
  local code=$?
  set -e
  local lines
  lines=$(grep -c "^mlt-run: error: " "$out"/error.log || true)
  if [[ $code != 0 && $code != 124 && $lines == 1 ]] && grep -Eq "^mlt-run: error: $line" "$out"/error.log; then
    echo "ok: $what: $(grep '^mlt-run: error: ' "$out"/error.log)"
  else
    cat "$out"/error.log
    fail "$what (exit $code, $lines error lines)"
  fi
}
echo "== error paths"
expect_error "several ranks without mpirun" "the plan has 2 ranks \(mesh dp=2\); with --device cuda each rank is a process of its own" \
  ./bin/mlt-run plans/dp2.mltplan --device cuda --steps 1 --data plans/tokens.u16
expect_error "plan for another world size" "the plan has 2 ranks \(mesh dp=2\) but mpirun started 3 processes; start it with mpirun -np 2" \
  $mpirun --oversubscribe -np 3 ./bin/mlt-run plans/dp2.mltplan --device cuda --steps 1 --data plans/tokens.u16
expect_error "1-rank plan, 2 processes" "the plan has 1 rank \(no mesh\) but mpirun started 2 processes" \
  $mpirun --oversubscribe -np 2 ./bin/mlt-run plans/one.mltplan --device cuda --steps 1 --data plans/tokens.u16
if (( gpus < 4 )); then
  if (( gpus == 1 )); then plan=dp2 n=2; else plan=dp2tp2 n=4; fi
  expect_error "more processes than GPUs" "mpirun started $n processes on this node but only $gpus CUDA device" \
    $mpirun --oversubscribe -np $n ./bin/mlt-run plans/$plan.mltplan --device cuda --steps 1 --data plans/tokens.u16
fi
exit $status
