#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages moetune needs to build, test and run. Idempotent: packages
# already present are left alone, and apt-get runs only when something is missing.
# Usage: deploy/install-deps.sh [--runtime]   (--runtime: only what the binaries need to run)
set -euo pipefail
build_pkgs=(build-essential cmake pkg-config protobuf-c-compiler libprotobuf-c-dev libzmq3-dev
            libczmq-dev libsodium-dev libsqlite3-dev libjansson-dev libcmocka-dev sqlite3 jq bc procps
            util-linux diffutils clang libmicrohttpd-dev chromium systemd curl python3-yaml python3-torch)
runtime_pkgs=(libzmq5 libczmq4 libprotobuf-c1 libsodium23 libsqlite3-0 libjansson4 libmicrohttpd12)
pkgs=("${build_pkgs[@]}")
[ "${1:-}" = "--runtime" ] && pkgs=("${runtime_pkgs[@]}")

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
updated=0
install() {
  [ $updated = 1 ] || { $sudo apt-get update -qq; updated=1; }
  echo "install-deps: installing $*"
  $sudo apt-get install -y -qq --no-install-recommends "$@"
}

missing=()
for p in "${pkgs[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then install "${missing[@]}"; fi
# The fuzz build needs clang's libFuzzer runtime, a package of its own named after clang's
# major version (libclang-rt-14-dev on Debian 12, libclang-rt-18-dev on Ubuntu 24.04).
if [ "${1:-}" != "--runtime" ]; then
  v=$(clang --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -n1)
  if [ -n "$v" ] && ! installed "libclang-rt-$v-dev"; then
    [ $updated = 1 ] || { $sudo apt-get update -qq; updated=1; }
    if apt-cache show "libclang-rt-$v-dev" >/dev/null 2>&1; then install "libclang-rt-$v-dev"; missing+=(rt); fi
  fi
fi
[ ${#missing[@]} -eq 0 ] && echo "install-deps: all ${#pkgs[@]} packages present"
if [ -d /usr/local/cuda ] || command -v nvcc >/dev/null 2>&1; then
  echo "install-deps: CUDA toolkit found: the cuda backend will be built"
else
  echo "install-deps: no CUDA toolkit: only the sim backend will be built (install the CUDA toolkit 12+ for real GPUs)"
fi
