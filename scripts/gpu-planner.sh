#!/bin/bash
# The planner on the GPU: `mlt-run --layout auto` picks a layout for
# TinyLlama-1.1B (bf16, global batch 16 x 2048) on two 80 GB GPUs; every
# layout it considered that fits is then trained on the GPUs, and the
# pick's measured step is compared with the fastest measured one (issue 15
# asks that it be the fastest or within 5% of it). PLANNER_MODEL=llama-2-7b
# (at pack time): LLaMA-2-7B (global batch 8 x 2048), the planner's five
# layouts trained, each one's measured step beside its predicted one.
# PLANNER_BATCH: the global batch (default 16 for TinyLlama, 8 for 7B).
#
#   scripts/gpu-planner.sh pack [DIR]   (build machine) the runtime-only
#                                       mlt-run and a plan per layout,
#                                       compiled by a compiler build's
#                                       mlt-run ($MLT_COMPILE, default
#                                       build/bin/mlt-run) -> DIR (default
#                                       .carry-planner); the pick is
#                                       DIR/plans/auto.mltplan
#   DIR/gpu-planner.sh run [STEPS]      (GPU machine, 2 GPUs) trains each
#                                       plan STEPS steps (default 5) and
#                                       prints measured and predicted steps
#                                       and the pick's place among them
set -euo pipefail

# PLANNER_MODEL: tinyllama-1.1b (default: every layout of two GPUs
# measured) or llama-2-7b (the planner's five measured; global batch 8).
planner_model=${PLANNER_MODEL:-tinyllama-1.1b}
case "$planner_model" in
  tinyllama-1.1b) batch=${PLANNER_BATCH:-16} ;;
  llama-2-7b) batch=${PLANNER_BATCH:-8} ;;
  *) echo "gpu-planner: PLANNER_MODEL must be tinyllama-1.1b or llama-2-7b, got '$planner_model'" >&2; exit 2 ;;
esac
model_flags=(--device cuda --dtype bf16 --batch "$batch" --seq-len 2048)

if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=$(realpath -m "${2:-$root/.carry-planner}")
  compile=${MLT_COMPILE:-$root/build/bin/mlt-run}
  test -x "$compile" || { echo "gpu-planner: no compiler build's mlt-run at $compile (set MLT_COMPILE)" >&2; exit 1; }
  rt=${MLT_RUNTIME_BUILD:-$root/build-runtime-cuda}
  source "$root"/scripts/gpu-pack-common.sh
  pack_runtime "$root" "$rt" "$dir" "$root"/../shared/fixtures/llama-ref-a
  rm -rf "$dir"/fixtures "$dir"/bin/MLTRuntimeCUDATests
  model=$root/models/llama/$planner_model.mlir
  "$compile" "$model" "${model_flags[@]}" --layout auto --gpus 2 --gpu-memory 80GiB \
    --emit-plan "$dir"/plans/auto.mltplan | tee "$dir"/plans/auto.txt
  layouts=()
  if [[ "$planner_model" == tinyllama-1.1b ]]; then
    # Every layout of LayoutSpace.h for 2 GPUs and a batch of 16 (those that
    # fit 78 GiB of arena without recomputation; none needs it here).
    for m in 1 2 4 8; do for z in 0 1 2; do layouts+=("--dp 2 --zero $z --microbatches $m"); done; done
    for m in 1 2 4 8 16; do layouts+=("--tp 2 --microbatches $m"); done
    for m in 2 4 8 16; do layouts+=("--pp 2 --microbatches $m" "--pp 2 --vp 2 --microbatches $m"); done
  else
    # The planner's five (its ranking's rows: rank, flags, step, ...).
    while read -r layout; do layouts+=("$layout"); done < <(
      sed -nE 's/^  [1-5] +(--.*[^ ]) +[0-9.]+ ms .*/\1/p' "$dir"/plans/auto.txt)
  fi
  : > "$dir"/plans/layouts.txt
  for layout in "${layouts[@]}"; do
    name=$(echo "$layout" | tr -d ' -' | tr -c 'a-z0-9\n' '_')
    if "$compile" "$model" "${model_flags[@]}" $layout --emit-plan "$dir"/plans/$name.mltplan \
        > /dev/null 2>&1; then
      echo "$name $layout" >> "$dir"/plans/layouts.txt
    else
      echo "gpu-planner: $layout does not compile" >&2
    fi
  done
  cp "$0" "$dir"/
  echo "packed $dir ($(du -sh "$dir" | cut -f1), $(wc -l < "$dir"/plans/layouts.txt) layouts); on the GPU machine: bash $dir/gpu-planner.sh run"
  exit 0
fi

[[ "${1:-}" == run ]] || { echo "usage: $0 pack [DIR] | run [STEPS]" >&2; exit 2; }
steps=${2:-5}
cd "$(dirname "$0")"
out=${OUT:-$PWD/out}
mkdir -p "$out"
source ./gpu-pack-common.sh
gpu_env
random_tokens "$out"/tokens.u16
grep '^chose' plans/auto.txt
: > "$out"/measured.txt
while read -r name layout; do
  $mpirun -np 2 ./bin/mlt-run plans/$name.mltplan --device cuda --data "$out"/tokens.u16 \
    --steps "$steps" < /dev/null > "$out"/$name.log 2>&1 || { tail -2 "$out"/$name.log; echo "FAIL: $layout"; continue; }
  line=$(grep '^step time:' "$out"/$name.log)
  measured=$(echo "$line" | sed 's/step time: measured \([0-9.]*\) ms.*/\1/')
  predicted=$(echo "$line" | sed 's/.*predicted \([0-9.]*\) ms.*/\1/')
  printf '%-40s measured %9s ms  predicted %9s ms\n' "$layout" "$measured" "$predicted" | tee -a "$out"/measured.txt
done < plans/layouts.txt
chosen=$(sed -n 's/^chose //p' plans/auto.txt)
python3 - "$out"/measured.txt "$chosen" <<'PY'
import sys
rows = []
import re
for line in open(sys.argv[1]):
    m = re.match(r"^(.*?)\s+measured\s+([\d.]+) ms\s+predicted\s+([\d.]+) ms", line)
    rows.append((float(m.group(2)), float(m.group(3)), m.group(1).strip()))
rows.sort()
chosen = sys.argv[2].strip()
normalize = lambda s: " ".join(s.replace("--microbatches 1", "").replace("--zero 0", "").split())
pick = [r for r in rows if normalize(r[2]) == normalize(chosen)]
best = rows[0]
print(f"fastest measured: {best[2]} at {best[0]:.2f} ms (predicted {best[1]:.2f} ms)")
if pick:
    p = pick[0]
    rank = rows.index(p) + 1
    print(f"the planner's pick: {p[2]} at {p[0]:.2f} ms, {100 * (p[0] / best[0] - 1):+.1f}% "
          f"from the fastest, measured rank {rank} of {len(rows)}")
else:
    print(f"the planner's pick ({chosen}) was not measured")
PY
