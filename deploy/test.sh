#!/usr/bin/env bash
# The test command: installs what is missing, then
#   1. builds with warnings as errors and runs every test (unit, integration, NVRTC compile);
#   2. builds everything again with AddressSanitizer + UndefinedBehaviorSanitizer and runs the
#      suite under them (the NVRTC compile test is left out there: it only drives the compiler,
#      and it already ran in step 1);
#   3. builds the libFuzzer targets with clang and runs each for MT_FUZZ_SECONDS (default 60).
# Usage: deploy/test.sh [--quick]      (--quick: step 1 only)
# Build folders: build-test, build-test-asan, build-test-fuzz (or $MT_BUILD_DIR as the prefix).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
prefix=${MT_BUILD_DIR:-build-test}
jobs=$(nproc)

echo "== 1/3 build and test (-Werror)"
cmake -S . -B "$prefix" -DMT_WERROR=ON ${MT_CMAKE_ARGS:-} >/dev/null
cmake --build "$prefix" -j"$jobs"
(cd "$prefix" && ctest --output-on-failure --timeout 900 -j"$jobs")
[ "${1:-}" = "--quick" ] && exit 0

echo "== 2/3 build and test under ASan + UBSan"
cmake -S . -B "$prefix-asan" -DMT_WERROR=ON -DMT_SANITIZE=ON >/dev/null
cmake --build "$prefix-asan" -j"$jobs"
(cd "$prefix-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure --timeout 900 -j"$jobs" -E 'unit/test_nvrtc')

echo "== 3/3 fuzz targets (clang, libFuzzer)"
CC=clang cmake -S . -B "$prefix-fuzz" -DMT_FUZZ=ON -DMT_CUDA=OFF >/dev/null
cmake --build "$prefix-fuzz" -j"$jobs" --target fuzz_wire fuzz_spec fuzz_config fuzz_routing
tests/fuzz/run.sh "$prefix-fuzz" "${MT_FUZZ_SECONDS:-60}"
