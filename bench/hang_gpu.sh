#!/bin/bash
# ===- hang_gpu.sh - the hang report on two GPUs -------------------------=== #
#
# Part of mlt. mlt-run --collective-timeout on one process per GPU (issue
# 34's "hangs named by the plan"): the fault switch MLT_FAULT_STALL holds
# rank 1's host before a matmul of step 3, and the job must end by itself,
# non-zero, within a bound, with rank 0's report naming rank 1's place and
# rank 0's GPU waiting in a collective with its group. Step 3 is one that
# rank 0 replays as a captured CUDA graph (rank 1, held, runs launch by
# launch), so the device's own position words come from a graph; the same
# again without graphs (MLT_CUDA_GRAPHS=0). On the tiny LLaMA at dp 2 (the
# GPU waits in a gradient all-reduce of stream 1 or the loss's of stream 0)
# and at tp 2 (in a tp all-reduce of the forward). Then the runs without a
# fault, with a timeout of 5 s, must train to the end; and TinyLlama-1.1B
# bf16 at dp 2 measures what watching costs: the same run with
# --collective-timeout 0 (no watchdog, no position words) and with the
# default (600 s). Between them, the slowest rank (MLT_FAULT_SLOW): rank 1
# slowed, rank 1 named.
#
#   bash bench/hang_gpu.sh pack DIR   # here: the runtime, the plans
#   bash DIR/hang_gpu.sh [run]        # on the GPU machine (2 GPUs)
#
# `pack` needs a compiler build in build/ (for the plans) and builds the
# runtime-only CUDA mlt-run in build-runtime-cuda/. `run` writes its logs to
# $OUT (default DIR/out), prints a line per check and exits 1 on any
# failure. HANG_GPU_CHECK_LOG=LOG K GROUP runs only the report's checks on
# a saved log (how the checks were tried without GPUs).
#
# ===----------------------------------------------------------------------=== #
set -u

# check_report LOG LAUNCH AXIS: the report of a run with rank 1 held before
# launch LAUNCH of step 3 and rank 0 waiting over mesh axis AXIS; prints
# what is missing, returns non-zero when anything is.
check_report() {
  local log=$1 launch=$2 axis=$3 missing=0
  local expect=(
    "^mlt-run: hang: where each rank is in its plan:"
    "^mlt-run:   rank 0: step 3, launch [0-9]+ of [0-9]+ \(call [0-9]+, instruction [0-9]+\): its GPU waits in all_reduce_sum '[^']+' of $axis group 0,1"
    "^mlt-run:   rank 1: step 3, launch $launch of [0-9]+ \(call 0, instruction $launch\): in matmul[a-z_]* $launch of [a-z_]+ \(F0\.0 B0\.0\) \(held there by MLT_FAULT_STALL\)"
    "^mlt-run: error: no progress for 5 s: rank 1 is in matmul[a-z_]* $launch of [a-z_]+ \(F0\.0 B0\.0\) \(held there by MLT_FAULT_STALL\); rank 0 waits in all_reduce_sum '[^']+' of $axis group 0,1"
  )
  local pattern
  for pattern in "${expect[@]}"; do
    if ! grep -Eq "$pattern" "$log"; then
      echo "  missing: $pattern"
      missing=1
    fi
  done
  # One report, from rank 0 alone.
  if [[ $(grep -c '^mlt-run: hang:' "$log") != 1 ]]; then
    echo "  not exactly one report"
    missing=1
  fi
  return $missing
}

if [[ -n "${HANG_GPU_CHECK_LOG:-}" ]]; then
  read -r log launch axis <<<"$HANG_GPU_CHECK_LOG"
  check_report "$log" "$launch" "$axis" && echo "report checks pass on $log"
  exit $?
fi

if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  compile=${MLT_COMPILE:-$root/build/bin/mlt-run}
  test -x "$compile" || { echo "hang_gpu: no compiler build's mlt-run at $compile (set MLT_COMPILE)" >&2; exit 1; }
  source "$root"/scripts/gpu-pack-common.sh
  pack_start "${2:?pack needs a directory}" mlt-run
  cp "$root"/data/kjv-genesis-exodus.txt "$dir"/plans/tiny.txt
  tiny() { # name, layout flags...
    local name=$1; shift
    "$compile" "$root"/models/llama/tiny.mlir --device cuda --batch 8 --seq-len 64 "$@" \
      --emit-plan "$dir"/plans/$name.mltplan >/dev/null
    # The launch to hold rank 1 before: the first product of its step's
    # first call (a forward matmul, before any collective of the step).
    "$compile" "$dir"/plans/$name.mltplan --print-plan | python3 -c '
import re, sys
lines = sys.stdin.read().split("\n")
start = lines.index(next(l for l in lines if l.startswith("rank 1:")))
step = next(i for i in range(start, len(lines)) if lines[i].startswith("step ("))
first = re.match(r"\s+0: (\S+)", lines[step + 1]).group(1)
program = next(i for i in range(start, step) if lines[i].startswith("program " + first + " ("))
for line in lines[program + 1:step]:
    m = re.match(r"\s+(\d+): (matmul\S*) ", line)
    if m:
        print(m.group(1))
        break
' > "$dir"/plans/$name.stall
    [[ -s "$dir"/plans/$name.stall ]] ||
      { echo "hang_gpu: no product in rank 1's first call of $name" >&2; exit 1; }
    echo "plan $name: rank 1 held before launch $(cat "$dir"/plans/$name.stall) of step 3"
  }
  tiny tiny-dp2 --dp 2
  tiny tiny-tp2 --tp 2
  "$compile" "$root"/models/llama/tinyllama-1.1b.mlir --device cuda --dtype bf16 --batch 8 \
    --seq-len 2048 --dp 2 --emit-plan "$dir"/plans/tl-dp2.mltplan >/dev/null
  packed "$dir" "$0" run
  exit 0
fi

cd "$(dirname "$0")"
source ./gpu-pack-common.sh
gpu_start
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[[ $gpus -ge 2 ]] || { echo "FAIL: two GPUs needed, $gpus visible"; exit 1; }
bin=$PWD/bin/mlt-run

# A held rank: the job ends by itself (mpirun's status non-zero, not
# timeout's 124), within 90 s (5 s of timeout, at most 10 s gathering the
# positions and 10 s aborting NCCL), with the report, and leaves no process.
# (HANG_PLANS: the plans to hold a rank of; HANG_COST=0: no TinyLlama runs)
for plan in ${HANG_PLANS:-tiny-dp2 tiny-tp2}; do
  axis=${plan#tiny-}; axis=${axis%2}
  launch=$(cat plans/$plan.stall)
  for graphs in 1 0; do
    name=$plan-graphs$graphs
    echo "== $plan, rank 1 held before launch $launch of step 3 (CUDA graphs: $graphs)"
    start=$(date +%s)
    MLT_FAULT_STALL=1:3:$launch MLT_CUDA_GRAPHS=$graphs timeout 300 $mpirun -np 2 \
      -x MLT_FAULT_STALL -x MLT_CUDA_GRAPHS "$bin" plans/$plan.mltplan --device cuda \
      --data plans/tiny.txt --steps 6 --collective-timeout 5 > "$out"/$name.log 2>&1
    code=$? seconds=$(( $(date +%s) - start ))
    grep -E '^step|^mlt-run' "$out"/$name.log
    echo "exit $code after $seconds s"
    [[ $code != 0 && $code != 124 ]] || fail "$name: exit $code (0: not stopped; 124: hung)"
    [[ $seconds -le 90 ]] || fail "$name: ended after $seconds s (bound 90 s)"
    grep -q '^step    2/6' "$out"/$name.log || fail "$name: steps 1 and 2 did not train"
    check_report "$out"/$name.log "$launch" "$axis" || fail "$name: the report"
    sleep 2
    if pgrep -f "$bin" >/dev/null; then
      fail "$name: mlt-run processes left: $(pgrep -f "$bin" | tr '\n' ' ')"
      kill -9 $(pgrep -f "$bin") 2>/dev/null
    fi
  done
  echo "== $plan without a fault, --collective-timeout 5"
  timeout 300 $mpirun -np 2 "$bin" plans/$plan.mltplan --device cuda --data plans/tiny.txt \
    --steps 30 --collective-timeout 5 > "$out"/$plan-clean.log 2>&1
  code=$?
  tail -2 "$out"/$plan-clean.log
  [[ $code == 0 ]] || fail "$plan without a fault: exit $code"
  grep -q '^trained 30 steps' "$out"/$plan-clean.log || fail "$plan without a fault: did not finish"
  ! grep -q 'hang' "$out"/$plan-clean.log || fail "$plan without a fault: a hang reported"
done

# The slowest rank: rank 1's host slowed by 200 ms before each step
# (MLT_FAULT_SLOW), so that rank 0's GPU waits for it inside the step's
# collectives (timed by the device's clocks beside its position words): every
# step's log names rank 1, with rank 0's wait at least 150 ms over rank 1's,
# and so does the end of the run.
for plan in ${HANG_PLANS:-tiny-dp2 tiny-tp2}; do
  echo "== $plan, rank 1 slowed by 200 ms a step (MLT_FAULT_SLOW=1:200)"
  MLT_FAULT_SLOW=1:200 timeout 300 $mpirun -np 2 -x MLT_FAULT_SLOW "$bin" \
    plans/$plan.mltplan --device cuda --data plans/tiny.txt --steps 8 \
    --log-json "$out"/$plan-slow.jsonl > "$out"/$plan-slow.log 2>&1 ||
    fail "$plan slowed: exit $?"
  grep -E '^trained|^slowest' "$out"/$plan-slow.log
  grep -q '^slowest rank: 1, ' "$out"/$plan-slow.log || fail "$plan slowed: rank 1 not named"
  python3 - "$out"/$plan-slow.jsonl <<'PY' || fail "$plan slowed: the log's waits"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    print(f"  step {r['step']}: rank_step_time_s {r['rank_step_time_s']}, "
          f"rank_wait_s {r['rank_wait_s']}, slowest_rank {r['slowest_rank']}")
bad = [r["step"] for r in rows if r["slowest_rank"] != 1 or
       r["rank_wait_s"][0] - r["rank_wait_s"][1] < 0.15]
sys.exit(f"steps {bad}: rank 1 not the slowest by 150 ms" if bad else 0)
PY
done

# What watching costs: the position words (two tiny kernels per collective,
# in the captured graph) and the watchdog's thread, against none.
if [[ ${HANG_COST:-1} == 0 ]]; then
  [[ $status == 0 ]] && echo "PASS: hang_gpu.sh (without the cost runs)" || echo "FAIL: hang_gpu.sh"
  exit $status
fi
python3 - <<'PY'
import random, struct
random.seed(0)
with open("tl.u16", "wb") as f:
    f.write(struct.pack("<%dH" % (1 << 20), *(random.randrange(32000) for _ in range(1 << 20))))
PY
for timeout_s in 0 600; do
  echo "== TinyLlama-1.1B bf16, batch 8 x 2048, dp 2, --collective-timeout $timeout_s"
  timeout 600 $mpirun -np 2 "$bin" plans/tl-dp2.mltplan --device cuda --data tl.u16 --steps 14 \
    --collective-timeout $timeout_s --log-json "$out"/tl-$timeout_s.jsonl > "$out"/tl-$timeout_s.log 2>&1 \
    || fail "TinyLlama at --collective-timeout $timeout_s: exit $?"
  tail -1 "$out"/tl-$timeout_s.log
done
python3 - "$out" <<'PY' || fail "the overhead comparison"
import json, statistics, sys
out = sys.argv[1]
rate = {}
for t in ("0", "600"):
    rows = [json.loads(l) for l in open(f"{out}/tl-{t}.jsonl")]
    rate[t] = statistics.median(r["tokens_per_s"] for r in rows[3:])
    print(f"--collective-timeout {t}: median tokens/s over steps 4-14: {rate[t]:.0f}")
print(f"watched / unwatched: {rate['600'] / rate['0']:.4f}")
PY
[[ $status == 0 ]] && echo "PASS: hang_gpu.sh" || echo "FAIL: hang_gpu.sh"
exit $status
