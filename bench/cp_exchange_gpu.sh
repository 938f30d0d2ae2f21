#!/bin/bash
# ===- cp_exchange_gpu.sh - context parallelism's exchanges on 2 GPUs ---=== #
#
# Part of mlt. What bench/RESULTS.md records under "cp 2, gathered keys and
# values against the all-to-all exchange" and "the ring", in one call on a
# machine of two GPUs (issue 37):
#   - the CUDA tests of the all-to-all and the permute (NCCL, every axis of 2
#     ranks), of reorder_sequence, of attention over the whole sequence in
#     its load-balanced order, and of the ring's steps and merge;
#   - llama-ref-a (f32) on two GPUs at --cp 2 with each --cp-comm against
#     HF's training (the fixture's tolerances) and the one-GPU run;
#   - Llama-3.2-1B at 32,768 tokens (bf16, one sequence a step): one GPU,
#     and cp 2 with ZeRO-1 over cp under each exchange, and the all-to-all
#     with ZeRO-2 reducing bf16 gradients, on the same random tokens, their
#     losses and tokens/s.
#
#   bash bench/cp_exchange_gpu.sh pack DIR   # here: the runtime, the plans
#   bash DIR/cp_exchange_gpu.sh              # on the GPU machine
#   ROUNDS=3 bash DIR/cp_exchange_gpu.sh     # the 1B runs three times, interleaved
#
# `pack` needs a compiler build in build/ (for the plans) and builds the
# runtime-only CUDA mlt-run and MLTRuntimeCUDATests in build-runtime-cuda/.
#
# ===----------------------------------------------------------------------=== #
set -u
if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  source "$root"/scripts/gpu-pack-common.sh
  pack_start "${2:?pack needs a directory}" mlt-run MLTRuntimeCUDATests
  mkdir -p "$dir"/tools/Inputs "$dir"/fixtures
  fixture=$root/../shared/fixtures/llama-ref-a
  cp -r "$fixture" "$dir"/fixtures/
  cp "$root"/test/Training/fixture_tools.py "$dir"/tools/
  cp "$root"/test/Training/Inputs/compare_runs.py "$dir"/tools/Inputs/
  python3 "$root"/test/Training/fixture_tools.py tokens "$fixture" "$dir"/plans/tokens.u16
  fixture_plan() { # name, layout flags...
    local name=$1; shift
    "$root"/build/bin/mlt-run "$fixture" --batch 4 --seq-len 32 --device cuda "$@" \
      --emit-plan "$dir"/plans/$name.mltplan >/dev/null
  }
  fixture_plan a-one
  fixture_plan a-cp2 --cp 2
  fixture_plan a-cp2-a2a --cp 2 --cp-comm a2a
  fixture_plan a-cp2-ring --cp 2 --cp-comm ring
  long_plan() { # name, layout flags...
    local name=$1; shift
    "$root"/build/bin/mlt-run "$root"/models/llama/llama-3.2-1b.mlir --device cuda \
      --dtype bf16 --batch 1 --seq-len 32768 "$@" --emit-plan "$dir"/plans/$name.mltplan >/dev/null
  }
  long_plan l1b-one
  long_plan l1b-cp2z1 --cp 2 --zero 1
  long_plan l1b-cp2z1-a2a --cp 2 --zero 1 --cp-comm a2a
  long_plan l1b-cp2z1-ring --cp 2 --zero 1 --cp-comm ring
  long_plan l1b-cp2z2-a2a-bf16 --cp 2 --zero 2 --grad-reduce-dtype bf16 --cp-comm a2a
  packed "$dir" "$0"
  exit 0
fi
cd "$(dirname "$0")"
source ./gpu-pack-common.sh
gpu_start
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

echo "== CUDA tests: NCCL collectives (all_to_all, permute), context-parallel attention, the ring's steps"
./bin/MLTRuntimeCUDATests --gtest_filter='Nccl*:*ContextParallel*:*ReorderSequence*:*Ring*:*Merge*' > "$out"/cuda-tests.log 2>&1 ||
  fail "CUDA tests"
grep -E "^\[  (PASSED|FAILED) |^\[  SKIPPED \]" "$out"/cuda-tests.log

echo "== llama-ref-a (f32), 6 steps: one GPU, cp 2 (gathered keys and values), cp 2 a2a, cp 2 ring"
hyper="--lr 0.003 --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --weight-decay 0.1 --clip-grad 1.0"
fixture_run() { # plan, launcher...
  local name=$1; shift
  "$@" ./bin/mlt-run plans/$name.mltplan --device cuda \
    --init-from fixtures/llama-ref-a/model.safetensors --data plans/tokens.u16 --no-shuffle \
    --steps 6 $hyper --log-json "$out"/$name.jsonl --save-hf /tmp/mlt-$name \
    --dump-grads /tmp/mlt-$name.grads > "$out"/$name.log 2>&1 ||
    { cat "$out"/$name.log; fail "$name: mlt-run"; return; }
  python3 tools/fixture_tools.py check fixtures/llama-ref-a "$out"/$name.jsonl \
    --weights /tmp/mlt-$name --grads /tmp/mlt-$name.grads || fail "$name: against HF"
}
fixture_run a-one
for plan in a-cp2 a-cp2-a2a a-cp2-ring; do
  fixture_run $plan $mpirun -np 2
  python3 tools/Inputs/compare_runs.py 1e-5 "$out"/$plan.jsonl "$out"/a-one.jsonl \
    /tmp/mlt-$plan.grads /tmp/mlt-a-one.grads || fail "$plan: against one GPU"
done

echo "== Llama-3.2-1B bf16, 1 x 32768, 8 steps: one GPU, cp 2 + ZeRO-1 with each exchange"
python3 - <<'PY'
import random, struct
random.seed(0)
with open("l1b.u32", "wb") as f:
    f.write(struct.pack("<%dI" % (1 << 19), *(random.randrange(128256) for _ in range(1 << 19))))
PY
long_run() { # plan, launcher...
  local name=$1; shift
  "$@" ./bin/mlt-run plans/$name.mltplan --device cuda --data l1b.u32 --no-shuffle --steps 8 \
    --log-json "$out"/$name.jsonl > "$out"/$name.log 2>&1 ||
    { cat "$out"/$name.log; fail "$name: mlt-run"; return; }
  tail -2 "$out"/$name.log
}
# ROUNDS (default 1) times, interleaved; each round's ratios against its own
# one-GPU run.
for round in $(seq 1 "${ROUNDS:-1}"); do
  echo "-- round $round"
  mkdir -p "$out"/round$round
  long_run l1b-one
  long_run l1b-cp2z1 $mpirun -np 2
  long_run l1b-cp2z1-a2a $mpirun -np 2
  long_run l1b-cp2z1-ring $mpirun -np 2
  long_run l1b-cp2z2-a2a-bf16 $mpirun -np 2
  python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = {n: [json.loads(l) for l in open(f"{out}/{n}.jsonl")]
        for n in ("l1b-one", "l1b-cp2z1", "l1b-cp2z1-a2a", "l1b-cp2z1-ring",
                  "l1b-cp2z2-a2a-bf16")}
speed = {n: statistics.median(x["tokens_per_s"] for x in r[2:]) for n, r in rows.items()}
for n, r in rows.items():
    print(f"{n}: losses", " ".join(f"{x['loss']:.4f}" for x in r),
          f"median tokens/s (steps 3-8) {speed[n]:.0f}",
          f"({speed[n] / speed['l1b-one']:.3f}x one GPU)")
for n in ("l1b-cp2z1", "l1b-cp2z1-a2a", "l1b-cp2z1-ring", "l1b-cp2z2-a2a-bf16"):
    print(f"{n}: largest loss difference from one GPU",
          max(abs(a["loss"] - b["loss"]) for a, b in zip(rows["l1b-one"], rows[n])))
PY
  mv "$out"/l1b-*.jsonl "$out"/l1b-*.log "$out"/round$round/
done
exit $status
