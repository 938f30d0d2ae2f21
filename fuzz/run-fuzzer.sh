#!/usr/bin/env bash
# Runs one libFuzzer target for a while and says how it went in one line.
#
# Usage: fuzz/run-fuzzer.sh FUZZER SECONDS WORKDIR "SEED_DIRS" [libFuzzer options...]
#
# The corpus grows in WORKDIR/corpus/<name> (kept between runs; the seed
# directories, `;`-separated as CMake lists them, are read but not written);
# the whole log goes to WORKDIR/<name>.log and a crashing input to
# WORKDIR/crashes/. Prints "<name>: <seconds> s, <execs> runs, corpus
# <files> files, no findings", or the end of the log and exits 1 when the
# fuzzer found something (a crash, a leak, a timeout, an out-of-memory).
set -uo pipefail
fuzzer=$1 seconds=$2 workdir=$3 seeds=$4
shift 4
name=$(basename "$fuzzer")
corpus=$workdir/corpus/$name
mkdir -p "$corpus" "$workdir/crashes"
IFS=';' read -r -a seed_dirs <<< "$seeds"
log=$workdir/$name.log

# (the sanitizers' options are compiled in: lib/Support/SanitizerOptions.cpp)
"$fuzzer" "$corpus" "${seed_dirs[@]}" -max_total_time="$seconds" \
  -print_final_stats=1 -artifact_prefix="$workdir/crashes/$name-" "$@" \
  > "$log" 2>&1
status=$?
if [ $status -ne 0 ]; then
  echo "$name: FOUND A BUG (exit $status); the end of $log:" >&2
  tail -n 60 "$log" >&2
  exit 1
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
files=$(find "$corpus" -type f | wc -l)
echo "$name: $seconds s, ${execs:-?} runs, corpus $files files, no findings"
