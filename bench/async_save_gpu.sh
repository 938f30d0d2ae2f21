#!/bin/bash
# ===- async_save_gpu.sh - checkpoints written in the background, on a GPU -=== #
#
# Part of mlt. What bench/RESULTS.md records under "Checkpoints written in
# the background" (issue 34), in one call on one GPU:
#   - the disk's write rate (dd, 4 GiB, flushed);
#   - TinyLlama-1.1B bf16, global batch 64 x 2048 (16 micro-batches of 4),
#     STEPS steps: without saving; saving only at the end; saving every 2
#     steps and at the end, in the background (the default) and while
#     training waits (--no-async-save). What a save every 2 steps stalls
#     training is (T(every 2) - T(end only)) / (its saves before the end):
#     both runs pay the end's save, which a run must wait for;
#   - resumed from the background save of step STEPS-2: the last two steps'
#     loss and gradient norm, and the final checkpoint's shard, the same
#     bits as the run that never stopped;
#   - 20 kill -9 trials on the 125m shape saving every step, each killed at
#     a random moment while a background write is in flight (its temporary
#     directory present): `latest` then names a checkpoint that
#     `mlt-checkpoint info --verify` reads whole and that resumes.
#
#   - with `stall` instead: only the stall per save, at 64 x 2048 (STEPS 8)
#     and at 512 x 2048 (1M tokens a step, 128 micro-batches of 4; 6 steps),
#     where two steps take longer than the disk takes to write 13.2 GB
#     (STALL_PLANS="tl1m": only the second).
#
#   bash bench/async_save_gpu.sh pack DIR   # here: the runtime, the plans
#   bash DIR/async_save_gpu.sh [stall]      # on the GPU machine
#
# ===----------------------------------------------------------------------=== #
set -u
if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=${2:?pack needs a directory}
  source "$root"/scripts/gpu-pack-common.sh
  pack_binaries "$root" "$dir" mlt-run mlt-checkpoint || exit 1
  compile() { "$root"/build/bin/mlt-run "$root"/models/llama/$1 --device cuda --dtype bf16 \
    "${@:3}" --emit-plan "$dir"/plans/$2.mltplan >/dev/null || exit 1; }
  compile tinyllama-1.1b.mlir tl --batch 64 --microbatches 16 --seq-len 2048
  compile tinyllama-1.1b.mlir tl1m --batch 512 --microbatches 128 --seq-len 2048
  compile llama-125m.mlir small --batch 4 --seq-len 1024
  cp "$0" "$dir"/
  echo "packed $dir ($(du -sh "$dir" | cut -f1))"
  exit 0
fi
cd "$(dirname "$0")"
steps=${STEPS:-8}
source ./gpu-pack-common.sh
gpu_start
random_tokens tl.u16
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
df -h . | tail -1
echo "== the disk: 4 GiB written and flushed"
dd if=/dev/zero of=ddtest bs=64M count=64 conv=fsync 2>&1 | tail -1
rm -f ddtest

plan=tl
train() { # NAME ARGS...: one TinyLlama run, its wall time in $out/NAME.time
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  ./bin/mlt-run plans/$plan.mltplan --device cuda --data tl.u16 --steps "$steps" \
    --log-json "$out/$name.jsonl" "$@" > "$out/$name.out" 2>&1
  local rc=$?
  end=$(date +%s.%N)
  python3 -c "print(round($end - $start, 2))" > "$out/$name.time"
  echo "-- $name (exit $rc, $(cat "$out/$name.time") s): $*"
  grep -E "saved checkpoint|error" "$out/$name.out" | sed 's/^/   /'
  tail -2 "$out/$name.out" | sed 's/^/   /'
}
stall() { # the stall per save of a save every 2 steps, at $plan and $steps
  train end-$plan --save-checkpoint ck-end
  rm -rf ck-end
  train every2-$plan --save-checkpoint ck --save-every 2 --keep-last 1
  rm -rf ck
  python3 - "$out" "$steps" "$plan" <<'PY'
import json, sys
out, steps, plan = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t = {n: float(open(f"{out}/{n}-{plan}.time").read()) for n in ("end", "every2")}
# Training's own time from step 1's end to the last step's (the log's
# elapsed_s): neither start-up nor the first step (graph capture, cuBLASLt)
# nor the end's save, which both runs pay.
span = {}
for n in ("end", "every2"):
    rows = [json.loads(l) for l in open(f"{out}/{n}-{plan}.jsonl")]
    span[n] = rows[-1]["elapsed_s"] - rows[0]["elapsed_s"]
saves = steps // 2 - 1  # (before the end's)
print(f"{plan}: steps 2-{steps} took {span['end']:.2f} s saving only at the end, "
      f"{span['every2']:.2f} s saving every 2 steps: "
      f"{(span['every2'] - span['end']) / saves:.2f} s of stall per save ({saves} saves); "
      f"process wall {t['end']:.1f} s and {t['every2']:.1f} s")
# Inside the saving run, free of the runs' difference in clock: what went
# on between each step and the next (elapsed_s less the step's own time),
# after a save and after a step without one.
rows = [json.loads(l) for l in open(f"{out}/every2-{plan}.jsonl")]
gaps = {r["step"]: r["elapsed_s"] - p["elapsed_s"] - r["step_time_s"]
        for p, r in zip(rows, rows[1:])}
after = [gaps[s + 1] for s in range(2, steps, 2) if s + 1 in gaps]
other = [g for s, g in gaps.items() if (s - 1) % 2]
print(f"{plan}: between steps, after each save " +
      " ".join(f"{g:.2f}" for g in after) + " s; after a step without one " +
      " ".join(f"{g:.2f}" for g in other) + " s")
for r in rows:
    print(f"  step {r['step']}: step_time_s {r['step_time_s']:.2f}, elapsed_s {r['elapsed_s']:.2f}")
PY
}
if [[ "${1:-}" == stall ]]; then
  # (STALL_PLANS: which of the two, "tl tl1m" by default)
  if [[ " ${STALL_PLANS:-tl tl1m} " == *" tl "* ]]; then
    echo "== TinyLlama-1.1B bf16, 64 x 2048 a step, 8 steps"
    plan=tl steps=8 stall
  fi
  if [[ " ${STALL_PLANS:-tl tl1m} " == *" tl1m "* ]]; then
    echo "== TinyLlama-1.1B bf16, 512 x 2048 a step, 6 steps"
    plan=tl1m steps=6 stall
  fi
  exit 0
fi
echo "== TinyLlama-1.1B bf16, 64 x 2048 a step, $steps steps"
train plain
train end --save-checkpoint ck-end
rm -rf ck-end
train every2 --save-checkpoint ck --save-every 2 --keep-last 2
echo "== resumed from step $((steps - 2)) (the background save)"
train resumed --resume ck/step-$(printf %06d $((steps - 2))) --save-checkpoint ck-resumed
cmp ck/step-$(printf %06d "$steps")/rank-00000.safetensors \
  ck-resumed/step-$(printf %06d "$steps")/rank-00000.safetensors &&
  echo "ok: step $steps's checkpoint (weights and moments) the same bytes"
rm -rf ck ck-resumed
steps=4 train sync2 --save-checkpoint ck-sync --save-every 2 --no-async-save
steps=4 train end4 --save-checkpoint ck-end4 --no-async-save
rm -rf ck-sync ck-end4
python3 - "$out" "$steps" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
t = {n: float(open(f"{out}/{n}.time").read()) for n in
     ("plain", "end", "every2", "sync2", "end4")}
saves = steps // 2 - 1  # (before the end's)
print(f"wall: plain {t['plain']:.1f} s, end only {t['end']:.1f} s, "
      f"every 2 steps {t['every2']:.1f} s ({saves} saves before the end's)")
print(f"background: {(t['every2'] - t['end']) / saves:.2f} s of stall per save")
print(f"while training waits (4 steps): {t['sync2'] - t['end4']:.1f} s for the save of step 2")
full = {r["step"]: r for r in map(json.loads, open(f"{out}/every2.jsonl"))}
resumed = [json.loads(l) for l in open(f"{out}/resumed.jsonl")]
same = all(full[r["step"]]["loss"] == r["loss"] and
           full[r["step"]]["grad_norm"] == r["grad_norm"] for r in resumed)
print(f"resumed steps {resumed[0]['step']}-{resumed[-1]['step']}: loss and grad_norm "
      f"{'the same bits' if same else 'DIFFER'}")
PY

echo "== 20 kill -9 trials, the 125m shape saving every step"
random_tokens small.u16
ok=0 inflight=0
for trial in $(seq 1 20); do
  rm -rf kill
  ./bin/mlt-run plans/small.mltplan --device cuda --data small.u16 --steps 100000 \
    --save-checkpoint kill --save-every 1 > "$out/kill.out" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do [[ -f kill/latest ]] && break; sleep 0.1; done
  sleep "$(python3 -c "import random; print(random.uniform(0.2, 3.0))")"
  # (the write in flight is the temporary directory; killed at once after)
  ls -A kill | grep -q '^\.step-.*\.tmp-' && inflight=$((inflight + 1))
  kill -9 $pid
  wait $pid 2>/dev/null
  latest=$(cat kill/latest)
  step=$((10#${latest#step-}))
  if ./bin/mlt-checkpoint info --verify kill > "$out/kill-info.out" 2>&1 &&
     ./bin/mlt-run plans/small.mltplan --device cuda --data small.u16 \
       --steps $((step + 1)) --resume kill > "$out/kill-resume.out" 2>&1 &&
     grep -q "step *$((step + 1))/" "$out/kill-resume.out"; then
    ok=$((ok + 1))
  else
    echo "trial $trial: $latest"; tail -2 "$out/kill-info.out" "$out/kill-resume.out"
  fi
done
echo "kill -9: $ok of 20 left latest whole and resumable ($inflight killed with a write in flight)"
rm -rf kill
