#!/bin/bash
# ===- cp_reference_gpu.sh - context parallelism beside PyTorch's --------=== #
#
# Part of mlt. Issue 37's two-GPU comparison, in one call: the PyTorch
# reference written as torchtitan does it (bench/torch_cp_bench.py: FSDP2
# over dp x cp, torch's context_parallel with load balancing, SDPA,
# per-layer torch.compile) beside mlt at the same cp, on the same shape and
# number of GPUs, random tokens. CP_MODEL picks the shape: llama-3.2-1b
# (default: 32,768 tokens, cp 2) or llama-3.1-8b (65,536 tokens, cp 2, with
# full activation checkpointing in the reference, and --zero 2 (over cp)
# --recompute-layers all in mlt; CP_FLAGS, when packing, replaces those).
# CP_MORE_FLAGS, when packing, adds a second mlt plan of those flags, run
# after the first in the same call.
#
#   bash bench/cp_reference_gpu.sh pack DIR   # here: the runtime, the plan
#   bash DIR/cp_reference_gpu.sh              # on the GPU machine (2 GPUs)
#
# ===----------------------------------------------------------------------=== #
set -u
model=${CP_MODEL:-llama-3.2-1b}
case $model in
  llama-3.2-1b) seq=32768 mlt_flags=() torch_flags=() ;;
  llama-3.1-8b) seq=65536 mlt_flags=(--zero 2 --recompute-layers all) torch_flags=(--ac full) ;;
  *) echo "cp_reference_gpu: CP_MODEL is llama-3.2-1b or llama-3.1-8b, not $model" >&2; exit 2 ;;
esac
if [[ "${1:-}" == pack && -n "${CP_FLAGS:-}" ]]; then
  # shellcheck disable=SC2206 # (the flags, word by word)
  mlt_flags=($CP_FLAGS)
fi
if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  source "$root"/scripts/gpu-pack-common.sh
  pack_start "${2:?pack needs a directory}" mlt-run
  mkdir -p "$dir"/tools
  "$root"/build/bin/mlt-run "$root"/models/llama/$model.mlir --device cuda --dtype bf16 \
    --batch 1 --seq-len $seq --cp 2 "${mlt_flags[@]}" --emit-plan "$dir"/plans/cp2.mltplan >/dev/null
  echo "${mlt_flags[*]}" > "$dir"/plans/cp2.flags
  if [[ -n "${CP_MORE_FLAGS:-}" ]]; then
    # shellcheck disable=SC2086 # (the flags, word by word)
    "$root"/build/bin/mlt-run "$root"/models/llama/$model.mlir --device cuda --dtype bf16 \
      --batch 1 --seq-len $seq --cp 2 $CP_MORE_FLAGS --emit-plan "$dir"/plans/cp2-more.mltplan >/dev/null
    echo "$CP_MORE_FLAGS" > "$dir"/plans/cp2-more.flags
  fi
  cp "$root"/bench/torch_cp_bench.py "$root"/../shared/bench/hf_llama_bench.py "$dir"/tools/
  packed "$dir" "$0"
  exit 0
fi
cd "$(dirname "$0")"
source ./gpu-pack-common.sh
gpu_start
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 - <<'PY'
import random, struct
random.seed(0)
with open("tokens.u32", "wb") as f:
    f.write(struct.pack("<%dI" % (1 << 19), *(random.randrange(128256) for _ in range(1 << 19))))
PY
echo "== PyTorch reference: $model, $seq tokens, cp 2, torch.compile per layer ${torch_flags[*]}"
timeout ${TORCH_TIMEOUT:-300} torchrun --nproc-per-node 2 tools/torch_cp_bench.py --config $model \
  --seq $seq --cp 2 --compile "${torch_flags[@]}" --steps ${STEPS:-8} > "$out"/torch.log 2>&1 ||
  fail "the PyTorch reference: exit $?"
grep -v "^\s*$" "$out"/torch.log | tail -4
for plan in plans/cp2.mltplan plans/cp2-more.mltplan; do
  [[ -f $plan ]] || continue
  name=$(basename "$plan" .mltplan)
  echo "== mlt: the same at --cp 2 (two processes, NCCL): $(cat plans/$name.flags 2>/dev/null ||
    echo "${mlt_flags[*]}")"
  $mpirun -np 2 ./bin/mlt-run "$plan" --device cuda --data tokens.u32 --no-shuffle \
    --steps ${STEPS:-8} --log-json "$out"/$name.jsonl > "$out"/$name.log 2>&1 ||
    { tail -3 "$out"/$name.log; fail "mlt ($name): exit $?"; continue; }
  tail -2 "$out"/$name.log
  python3 - "$out" "$name" <<'PY' || fail "the comparison"
import json, statistics, sys
out, name = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if '"loss"' in l]
mlt = statistics.median(r["tokens_per_s"] for r in rows[2:]) / 2
print("losses:", " ".join(f"{r['loss']:.4f}" for r in rows))
ref = [json.loads(l) for l in open(f"{out}/torch.log") if l.startswith("{")][-1]
per_gpu = ref.get("tokens_per_s_per_gpu") or ref.get("tokens_per_sec_per_gpu")
print(f"mlt: {mlt:.0f} tokens/s per GPU (median of steps 3 on); PyTorch: {per_gpu} tokens/s per GPU")
if per_gpu:
    print(f"mlt / PyTorch: {mlt / float(per_gpu):.3f}")
PY
done
[[ $status == 0 ]] && echo "PASS: cp_reference_gpu.sh" || echo "FAIL: cp_reference_gpu.sh"
exit $status
