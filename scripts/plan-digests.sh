#!/usr/bin/env bash
# Prints the SHA-256 of the plan mlt-run emits for each of a fixed set of
# layouts (one rank, tp2 + SP, dp2 ZeRO-1 and ZeRO-2, pp2 1f1b and zb-h1,
# pp2 vp2, FP8, a 3-D layout, recompute), on the tiny model and on a
# pipeline-deep one: the check that a change meant to leave plans alone
# (a refactoring of the layout, the tools or the libraries) did. Compare
# the output before and after the change; bench/RESULTS.md records it.
#
# Usage: scripts/plan-digests.sh [MLT_RUN]   (default: build/bin/mlt-run)
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:-build/bin/mlt-run}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

tiny=models/llama/tiny.mlir
deep=models/llama/configs/llama-125m.json
layouts=(
  "one-rank|$tiny|--batch 4 --seq-len 32"
  "tp2-sp|$tiny|--batch 4 --seq-len 32 --tp 2 --sequence-parallel"
  "dp2-zero1|$tiny|--batch 4 --seq-len 32 --dp 2 --zero 1"
  "dp2-zero2|$tiny|--batch 4 --seq-len 32 --dp 2 --zero 2"
  "pp2-1f1b|$tiny|--batch 4 --seq-len 32 --pp 2 --microbatches 4"
  "pp2-zbh1|$tiny|--batch 4 --seq-len 32 --pp 2 --microbatches 4 --schedule zb-h1"
  "pp2-vp2|$tiny|--batch 4 --seq-len 32 --pp 2 --vp 2 --microbatches 4"
  "fp8|$tiny|--batch 4 --seq-len 32 --dtype bf16 --fp8"
  "bf16-tp2-dp2-zero2|$tiny|--batch 8 --seq-len 32 --dtype bf16 --tp 2 --dp 2 --zero 2 --grad-reduce-dtype bf16"
  "pp2-tp2-dp2|$tiny|--batch 8 --seq-len 32 --pp 2 --tp 2 --dp 2 --zero 1 --microbatches 2"
  "recompute|$tiny|--batch 4 --seq-len 32 --recompute swiglu"
  "125m-pp4-vp2|$deep|--batch 8 --seq-len 64 --pp 4 --vp 2 --microbatches 8 --dtype bf16"
)
for entry in "${layouts[@]}"; do
  IFS='|' read -r name model flags <<<"$entry"
  # shellcheck disable=SC2086
  "$run" "$model" $flags --emit-plan "$out/$name.mltplan" >/dev/null 2>&1 ||
    { echo "$name: mlt-run failed: $run $model $flags" >&2; exit 1; }
  printf '%s  %s\n' "$(sha256sum <"$out/$name.mltplan" | cut -c1-16)" "$name"
done
