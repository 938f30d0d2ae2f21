#!/usr/bin/env bash
# Writes the seed corpora of mlt-fuzz-checkpoint-index and
# mlt-fuzz-checkpoint: the index.json and the shards of training
# checkpoints of the test plans at layouts whose indexes differ in kind
# (whole tensors at one rank, blocks of tensor parallelism replicated over
# data parallelism, a ZeRO optimizer's ranges cutting through parameters).
#
# Usage: fuzz/make-checkpoint-index-seeds.sh BIN_DIR OUTDIR SHARD_OUTDIR
set -euo pipefail
bin=$1 out=$2 shards=$3
mkdir -p "$shards"
work=$out.work
rm -rf "$work" && mkdir -p "$work" "$out"
# Token ids below every test plan's vocabulary.
python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("<4096H", *[i * 7 % 8 for i in range(4096)]))' > "$work/tokens.u16"
# seed NAME MODEL [mlt-run options...]: one step of MODEL, checkpointed.
seed() {
  local name=$1 model=$2
  shift 2
  "$bin/mlt-run" "$model" --steps 1 --save-checkpoint "$work/$name" "$@" \
    > /dev/null
  cp "$work/$name"/step-*/index.json "$out/$name.json"
  for shard in "$work/$name"/step-*/rank-*.safetensors; do
    cp "$shard" "$shards/$name-$(basename "$shard")"
  done
}
"$bin/mlt-make-test-plan" tiny "$work/tiny.mltplan"
"$bin/mlt-make-test-plan" mlp "$work/mlp-dp2-tp2.mltplan" --dp 2 --tp 2
seed tiny "$work/tiny.mltplan" --data "$work/tokens.u16"
seed mlp-dp2-tp2 "$work/mlp-dp2-tp2.mltplan" --data "$work/tokens.u16"
seed llama-dp2-zero1 "$(dirname "$0")/../models/llama/tiny.mlir" \
  --batch 4 --seq-len 8 --dp 2 --zero 1
rm -rf "$work"
touch "$out/stamp" "$shards/stamp"
