#!/usr/bin/env bash
# The test command: installs what is missing, builds with warnings as errors, runs every test.
# Usage: deploy/test.sh [ctest arguments...]    (build folder: build-test, or $MT_BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/install-deps.sh
build=${MT_BUILD_DIR:-build-test}
cmake -S . -B "$build" -DMT_WERROR=ON ${MT_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
ctest --output-on-failure --timeout 900 "$@"
