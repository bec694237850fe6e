#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time from the seed corpus in the tree.
#   tests/fuzz/run.sh FUZZ_BUILD_DIR [SECONDS_EACH]     (build with: CC=clang cmake -DMT_FUZZ=ON)
# Prints the number of inputs each target ran; exits non-zero on any crash, leak or timeout.
set -euo pipefail
build=${1:?usage: tests/fuzz/run.sh FUZZ_BUILD_DIR [SECONDS_EACH]}
secs=${2:-60}
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/moetune-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
total=0
for name in wire spec config routing; do
  mkdir -p "$work/$name"
  cp "$src/corpus/$name/"* "$work/$name/"
  log=$work/$name.log
  if ! "$build/fuzz_$name" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$work/$name-" "$work/$name" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz_$name: FAILED (artifacts in $work)"; trap - EXIT; exit 1
  fi
  runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  echo "fuzz_$name: ${runs:-0} inputs in ${secs}s, no crash"
  total=$((total + ${runs:-0}))
done
echo "fuzz: $total inputs in all"
echo "fuzz: 4 passed, 0 failed"
