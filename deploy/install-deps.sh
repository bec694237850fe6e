#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages moetune needs to build, test and run. Idempotent: packages
# already present are left alone, and apt-get runs only when something is missing.
# Usage: deploy/install-deps.sh [--runtime]   (--runtime: only what the binaries need to run)
set -euo pipefail
build_pkgs=(build-essential cmake pkg-config protobuf-c-compiler libprotobuf-c-dev libzmq3-dev
            libczmq-dev libsodium-dev libsqlite3-dev libjansson-dev libcmocka-dev sqlite3 jq util-linux clang)
runtime_pkgs=(libzmq5 libczmq4 libprotobuf-c1 libsodium23 libsqlite3-0 libjansson4)
pkgs=("${build_pkgs[@]}")
[ "${1:-}" = "--runtime" ] && pkgs=("${runtime_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
if [ -d /usr/local/cuda ] || command -v nvcc >/dev/null 2>&1; then
  echo "install-deps: CUDA toolkit found: the cuda backend will be built"
else
  echo "install-deps: no CUDA toolkit: only the sim backend will be built (install the CUDA toolkit 12+ for real GPUs)"
fi
