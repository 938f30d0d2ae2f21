#!/bin/bash
# ===- progress_cp2_gpu.sh - MFU and cp 2 on a two-GPU machine -----------=== #
#
# Part of mlt. What bench/RESULTS.md records under "The progress line's MFU"
# and "Context parallelism ... cp 2 measured", in one call: the progress
# line's MFU on TinyLlama-1.1B bf16 (batch 4 x 2048) beside the HF
# reference's (the same FLOPs convention), and the Llama-3.2-1B shape at
# 32,768 tokens on one GPU and at cp 2 (issue 37).
#
#   bash bench/progress_cp2_gpu.sh pack DIR   # here: the runtime, the plans
#   bash DIR/progress_cp2_gpu.sh              # on the GPU machine
#
# `pack` needs a compiler build in build/ (for the plans) and builds the
# runtime-only CUDA mlt-run in build-runtime-cuda/.
#
# ===----------------------------------------------------------------------=== #
set -u
if [[ "${1:-}" == pack ]]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  dir=${2:?pack needs a directory}
  source "$root"/scripts/gpu-pack-common.sh
  pack_binaries "$root" "$dir" mlt-run || exit 1
  mkdir -p "$dir"/tools
  compile() { "$root"/build/bin/mlt-run "$root"/models/llama/$1 --device cuda --dtype bf16 \
    "${@:3}" --emit-plan "$dir"/plans/$2.mltplan >/dev/null; }
  compile tinyllama-1.1b.mlir tl --batch 4 --seq-len 2048
  compile llama-3.2-1b.mlir one --batch 1 --seq-len 32768
  compile llama-3.2-1b.mlir cp2 --batch 1 --seq-len 32768 --cp 2
  cp "$0" "$dir"/
  cp "$root"/../shared/bench/hf_llama_bench.py "$dir"/tools/
  echo "packed $dir ($(du -sh "$dir" | cut -f1))"
  exit 0
fi
cd "$(dirname "$0")"
source ./gpu-pack-common.sh
gpu_start
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 - <<'PY'
import random, struct
random.seed(0)
with open("tl.u16", "wb") as f:
    f.write(struct.pack("<%dH" % (1 << 20), *(random.randrange(32000) for _ in range(1 << 20))))
with open("l1b.u32", "wb") as f:
    f.write(struct.pack("<%dI" % (1 << 19), *(random.randrange(128256) for _ in range(1 << 19))))
PY
echo "== TinyLlama-1.1B bf16, batch 4 x 2048, one GPU"
./bin/mlt-run plans/tl.mltplan --device cuda --data tl.u16 --steps 12 --tensorboard "$out"/tb \
  --log-json "$out"/tl.jsonl 2>&1 | tail -4
ls "$out"/tb
echo "== HF reference (eager), the same shape"
timeout 240 python3 tools/hf_llama_bench.py --config llama-1b --mode eager --steps 10 2>&1 | tail -2
echo "== Llama-3.2-1B bf16, 1 x 32768, one GPU"
./bin/mlt-run plans/one.mltplan --device cuda --data l1b.u32 --no-shuffle --steps 6 \
  --log-json "$out"/one.jsonl 2>&1 | tail -3
echo "== the same at cp 2 (two processes, NCCL)"
$mpirun -np 2 ./bin/mlt-run plans/cp2.mltplan --device cuda --data l1b.u32 --no-shuffle --steps 6 \
  --log-json "$out"/cp2.jsonl 2>&1 | tail -3
python3 - "$out" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = {n: [json.loads(l) for l in open(f"{out}/{n}.jsonl")] for n in ("one", "cp2")}
for n, r in rows.items():
    print(n, "losses", " ".join(f"{x['loss']:.4f}" for x in r),
          "median tokens/s (steps 3-6)", round(statistics.median(x["tokens_per_s"] for x in r[2:])))
one, cp2 = rows["one"], rows["cp2"]
print("cp2 / one tokens/s:", round(statistics.median(x["tokens_per_s"] for x in cp2[2:]) /
                                   statistics.median(x["tokens_per_s"] for x in one[2:]), 3))
print("largest loss difference:", max(abs(a["loss"] - b["loss"]) for a, b in zip(one, cp2)))
PY
