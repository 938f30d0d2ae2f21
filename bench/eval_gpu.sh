#!/bin/bash
# ===- eval_gpu.sh - held-out evaluation on GPUs -------------------------=== #
#
# Part of mlt. --eval-data, --split and --steps 0 on the CUDA backend (issue
# 34's evaluation), on the tiny LLaMA (f32, batch 8 x 64, 4 micro-batches)
# with Genesis and Exodus as data and a held-out split of it:
#   - --steps 0 (the weights of --seed, evaluated) on one GPU, at pp 2 and
#     at dp 2 with ZeRO-2: the same eval_loss within 1e-5 (the layouts
#     differ only in NCCL's order of sums);
#   - 10 steps evaluating every 5 (--split 95,5, 4 batches): the same
#     training losses and eval_loss at steps 5 and 10 within 1e-4 on the
#     three layouts; a run evaluating only at the end trains the same
#     losses bit for bit (an evaluation leaves training alone);
#   - one bf16 TinyLlama-1.1B step with an evaluation of 4 batches: its
#     time beside the step's (a forward pass of each batch, about a third
#     of a training step's work).
#
#   bash bench/eval_gpu.sh pack DIR   # here: the runtime, the plans
#   bash DIR/eval_gpu.sh              # on the GPU machine (2 GPUs)
#
# ===----------------------------------------------------------------------=== #
set -u
if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  source "$root"/scripts/gpu-pack-common.sh
  pack_start "${2:?pack needs a directory}" mlt-run
  cp "$root"/data/kjv-genesis-exodus.txt "$dir"/plans/genesis.txt
  tiny() { # name, layout flags...
    local name=$1; shift
    "$root"/build/bin/mlt-run "$root"/models/llama/tiny.mlir --device cuda --batch 8 \
      --microbatches 4 --seq-len 64 --split 95,5 "$@" --emit-plan "$dir"/plans/eval-$name.mltplan >/dev/null
  }
  tiny one
  tiny pp2 --pp 2
  tiny zero2 --dp 2 --zero 2
  "$root"/build/bin/mlt-run "$root"/models/llama/tinyllama-1.1b.mlir --device cuda --dtype bf16 \
    --batch 16 --microbatches 4 --seq-len 2048 --split 95,5 --emit-plan "$dir"/plans/eval-tl.mltplan >/dev/null
  packed "$dir" "$0"
  exit 0
fi

cd "$(dirname "$0")"
source ./gpu-pack-common.sh
gpu_start
bin=$PWD/bin/mlt-run
run() { # NAME PLAN ARGS...: one process per plan rank
  local name=$1 plan=$2
  shift 2
  if [[ $plan == one || $plan == tl ]]; then
    timeout 300 "$bin" plans/eval-$plan.mltplan --device cuda "$@" > "$out/$name.log" 2>&1
  else
    timeout 300 $mpirun -np 2 "$bin" plans/eval-$plan.mltplan --device cuda "$@" \
      > "$out/$name.log" 2>&1
  fi || fail "$name: exit $?"
  grep -E '^eval|^trained|error' "$out/$name.log" | sed "s/^/  $name: /"
}
data=plans/genesis.txt
echo "== --steps 0: the weights of --seed evaluated"
for plan in one pp2 zero2; do
  run init-$plan $plan --data $data --eval-data $data --eval-iters 4 --steps 0 \
    --log-json "$out/init-$plan.jsonl"
done
echo "== 10 steps, --split 95,5, evaluated every 5 steps"
for plan in one pp2 zero2; do
  run split-$plan $plan --data $data --split 95,5 --eval-every 5 --eval-iters 4 --steps 10 \
    --lr 3e-3 --log-json "$out/split-$plan.jsonl"
done
run plain-one one --data $data --split 95,5 --steps 10 --lr 3e-3 --log-json "$out/plain-one.jsonl"
python3 - "$out" <<'PY' || fail "the comparison"
import json, sys
out = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
status = 0
def close(what, a, b, tol):
    global status
    ok = abs(a - b) <= tol * max(1.0, abs(a))
    print(f"{what}: {a:.8f} vs {b:.8f} ({'within' if ok else 'NOT within'} {tol:g})")
    status |= not ok
init = {p: [r["eval_loss"] for r in rows(f"init-{p}")] for p in ("one", "pp2", "zero2")}
for p in ("pp2", "zero2"):
    close(f"--steps 0 eval_loss, one GPU vs {p}", init["one"][0], init[p][0], 1e-5)
split = {p: rows(f"split-{p}") for p in ("one", "pp2", "zero2")}
for p in ("pp2", "zero2"):
    for a, b in zip(split["one"], split[p]):
        for key in ("loss", "eval_loss"):
            if key in a:
                close(f"step {a['step']} {key}, one GPU vs {p}", a[key], b[key], 1e-4)
plain = [r["loss"] for r in rows("plain-one") if "loss" in r]
trained = [r["loss"] for r in split["one"] if "loss" in r]
same = plain == trained
print(f"one GPU, 10 steps evaluated every 5 and only at the end: losses "
      f"{'the same bits' if same else 'DIFFER'}")
status |= not same
sys.exit(status)
PY
echo "== TinyLlama-1.1B bf16, 16 x 2048 a step: 2 steps, an evaluation of 4 batches after each"
random_tokens tl.u16
timeout 300 "$bin" plans/eval-tl.mltplan --device cuda --data tl.u16 --eval-data tl.u16 \
  --eval-every 1 --eval-iters 4 --steps 2 > "$out/tl.log" 2>&1 || fail "TinyLlama: exit $?"
grep -E '^step|^eval|^trained' "$out/tl.log"
[[ $status == 0 ]] && echo "PASS: eval_gpu.sh" || echo "FAIL: eval_gpu.sh"
exit $status
