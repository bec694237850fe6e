#!/usr/bin/env bash
# Packs moetune's binaries with the shared libraries a bare GPU node lacks (libzmq, czmq,
# protobuf-c, libsodium and what they pull in), so the folder can be copied to any glibc >= 2.36
# x86-64 host with a CUDA driver and run there:
#
#   deploy/bundle.sh BUILD_DIR OUT_DIR        ->  OUT_DIR/bin/{moetune,moetune-coordinator,moetune-worker,...,moetune_helper.py,helper/}
#                                                  OUT_DIR/lib/*.so*   (found through LD_LIBRARY_PATH or RPATH)
#
# Libraries every such host has (glibc, libstdc++, libgcc, libm, libcuda, NVRTC from the driver or
# toolkit, sqlite3, jansson) are left out; CUDA libraries are never bundled: the node's own must match its driver.
set -euo pipefail
build=${1:?usage: deploy/bundle.sh BUILD_DIR OUT_DIR}
out=${2:?usage: deploy/bundle.sh BUILD_DIR OUT_DIR}
mkdir -p "$out/bin" "$out/lib"
bins=()
for b in moetune moetune-coordinator moetune-worker "$@"; do
  [ "$b" = "$build" ] || [ "$b" = "$out" ] && continue
  if [ -x "$build/$b" ]; then bins+=("$build/$b"); elif [ -x "$b" ]; then bins+=("$b"); fi
done
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|libcuda\.so|libnvrtc|libsqlite3|libjansson|libresolv)'
for b in "${bins[@]}"; do
  cp -f "$b" "$out/bin/"
  ldd "$b" | awk '/=> \//{print $1" "$3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    cp -Lf "$path" "$out/lib/$name"
  done
done
# The triton backend's helper goes beside the worker, where it looks first: its entry point, its
# package (worker/helper/: modules and the tables they read) and moetune's kernel.
root=$(cd "$(dirname "$0")/.." && pwd)
cp -f "$root/worker/moetune_helper.py" "$root/worker/moetune_kernel.py" "$root/worker/HELPER.md" "$out/bin/"
rm -rf "$out/bin/helper" && mkdir -p "$out/bin/helper"
cp -f "$root"/worker/helper/*.py "$out/bin/helper/"
if compgen -G "$root/worker/helper/*.json" >/dev/null; then cp -f "$root"/worker/helper/*.json "$out/bin/helper/"; fi
echo "bundled ${#bins[@]} binaries and $(ls "$out/lib" | wc -l) libraries into $out (run with LD_LIBRARY_PATH=$out/lib)"
