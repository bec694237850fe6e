#!/usr/bin/env bash
# What one result row costs the coordinator's writer, with and without schema 4's index
# results_best (bench/coord/store_rows.c says how): builds store_rows against a build's store
# library and runs it in a temporary folder.
#   bench/coord/store_rows.sh BUILD_DIR [ROUNDS]        (default 3 rounds)
# Needs gcc, pkg-config and the project's build dependencies (deploy/install-deps.sh).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: bench/coord/store_rows.sh BUILD_DIR [ROUNDS]}" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
gcc -O2 -Wall -Wextra -std=c11 -D_GNU_SOURCE -I"$src/common" -I"$src/kernels" -I"$src/proto" -I"$src/db" -I"$build/proto" \
  "$src/bench/coord/store_rows.c" "$build/libmt_db.a" "$build/libmt_proto.a" "$build/libmt_kernels.a" \
  "$build/libmt_common.a" $(pkg-config --cflags --libs sqlite3 jansson libprotobuf-c libczmq libzmq libsodium) \
  -lpthread -lm -o "$T/store_rows"
"$T/store_rows" "$T" "${2:-3}"
