#!/usr/bin/env bash
# Regenerates models/llama/<name>.mlir from models/llama/configs/<name>.json with
# the HF importer, so the model files and `mlt-translate --import-hf-llama` never
# drift apart (test/Models checks they agree).
#
# Usage: scripts/gen-models.sh [BUILD_DIR]     (default: build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
translate=$build/bin/mlt-translate
[ -x "$translate" ] || { echo "gen-models: $translate not found; build first" >&2; exit 1; }

declare -A about=(
  [tiny]="a tiny LLaMA for tests and the default CPU run (byte-level vocabulary)"
  [llama-125m]="the 125M shape of ../shared/bench/hf_llama_bench.py (llama-125m; no HF checkpoint)"
  [tinyllama-1.1b]="TinyLlama-1.1B (TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T)"
  [llama-2-7b]="LLaMA-2-7B (meta-llama/Llama-2-7b-hf)"
  [llama-3-8b]="LLaMA-3-8B (meta-llama/Meta-Llama-3-8B)"
  [llama-3.1-8b]="Llama-3.1-8B (meta-llama/Llama-3.1-8B; llama3 rope scaling)"
  [llama-3.2-1b]="Llama-3.2-1B (meta-llama/Llama-3.2-1B; llama3 rope scaling, tied)"
  [llama-2-70b]="LLaMA-2-70B (meta-llama/Llama-2-70b-hf)"
)
for config in "$root"/models/llama/configs/*.json; do
  name=$(basename "$config" .json)
  out=$root/models/llama/$name.mlir
  tmp=$(mktemp "$out.XXXXXX")
  {
    echo "// ${about[$name]:-$name}: forward pass and mean cross-entropy loss."
    echo "//"
    echo "// Generated from configs/$name.json by scripts/gen-models.sh; edit freely, but"
    echo "// test/Models checks that this file still matches the importer's output."
    echo "// @forward takes (tokens, labels), both [batch, seq] i32; batch and seq are"
    echo "// dynamic. The decoder layer is written once, inside mlt.repeat."
    "$translate" --import-hf-llama "$config"
  } > "$tmp"
  mv "$tmp" "$out"
  echo "wrote $out"
done
