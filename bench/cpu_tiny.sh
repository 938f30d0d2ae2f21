#!/usr/bin/env bash
# CPU training throughput of mlt-run on the tiny model (models/llama/tiny.mlir)
# with the bundled corpus: prints the median tokens/s and step time over the
# steps after a warm-up, from mlt-run's --log-json. A benchmark, not a test:
# record its output with the date, machine and commit in bench/RESULTS.md.
#
# Usage: bench/cpu_tiny.sh [BUILD_DIR] [STEPS] [BATCH] [SEQ_LEN]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
steps=${2:-30}
batch=${3:-8}
seq=${4:-128}
run=$build/bin/mlt-run
[ -x "$run" ] || { echo "cpu_tiny: $run not found; build first" >&2; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "mlt-run tiny.mlir, batch $batch x seq $seq, $steps steps, $(nproc) cores, OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-unset}"
"$run" "$root/models/llama/tiny.mlir" --batch "$batch" --seq-len "$seq" \
  --steps "$steps" --lr 3e-3 --log-json "$log" > /dev/null
python3 - "$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = rows[3:] if len(rows) > 6 else rows
tps = statistics.median(r["tokens_per_s"] for r in steady)
sec = statistics.median(r["step_time_s"] for r in steady)
print(f"median over steps {steady[0]['step']}..{steady[-1]['step']}: "
      f"{tps:.0f} tokens/s, {sec * 1000:.1f} ms/step; "
      f"loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}")
PY
