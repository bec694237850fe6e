#!/usr/bin/env bash
# Runs the reliability tests and prints each one's figures (the "ok:" lines the tests print):
# worker and coordinator kills, chaos, faulty configs, forged results, storage faults, CURVE,
# 500 connections; then each fuzz target for SECONDS (default 60) when FUZZ_BUILD_DIR is given.
#   bench/reliability/run.sh BUILD_DIR [FUZZ_BUILD_DIR [SECONDS]]
set -uo pipefail
build=$(cd "${1:?usage: bench/reliability/run.sh BUILD_DIR [FUZZ_BUILD_DIR [SECONDS]]}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F)"
fails=0
for t in kill_worker kill_coordinator chaos faults forged storage curve load; do
  start=$(date +%s)
  out=$(MT_BIN_DIR=$build MT_SOURCE_DIR=$src bash "$src/tests/integration/test_$t.sh" 2>&1)
  rc=$?
  echo "== test_$t: exit $rc in $(( $(date +%s) - start )) s"
  grep -E '^(ok|FAIL)' <<<"$out" | sed 's/^/   /'
  [ $rc = 0 ] || fails=$((fails + 1))
done
if [ -n "${2:-}" ]; then
  echo "== fuzz"
  "$src/tests/fuzz/run.sh" "$2" "${3:-60}" | sed 's/^/   /' || fails=$((fails + 1))
fi
echo "$fails failed"
exit $((fails > 0))
