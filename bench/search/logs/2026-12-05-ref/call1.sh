#!/usr/bin/env bash
# The lease's first call (run from the repository root on the GPU machine, the bundle in dist/,
# the previous worker in dist/before/): the GPU tests, the reference's setup and the check
# before and after on a 24-config Mixtral halving sweep each, then Mixtral's whole-space halving.
set -u
W=/tmp/w; mkdir -p "$W"; t0=$(date +%s)
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
MT_GPU_STRIDE=32 timeout 200 tests/gpu/run.sh "$W/gpu" >"$W/gputest.log" 2>&1; echo "rc $?" >>"$W/gputest.log"
rm -rf "$W/gpu"
if grep -q '^PASSED' "$W/gputest.log"; then
  mkdir -p "$W/bin-before"; cp dist/bin/* "$W/bin-before/"; cp dist/before/moetune-worker "$W/bin-before/"
  for v in before after; do
    b=$PWD/dist/bin; [ $v = before ] && b=$W/bin-before
    MT_BIN_DIR=$b MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh "$W/ab-$v" 150 halving \
      --model mixtral-8x7b --tp 2 --sample 24 >/dev/null 2>&1
    rm -f "$W/ab-$v"/*.db
  done
  left=$((585 - ($(date +%s) - t0)))
  MOETUNE_CUDA_PROFILE=1 bash bench/search/fullspace.sh "$W/full" "$left" halving --model mixtral-8x7b --tp 2 >/dev/null 2>&1
  gzip -f "$W/full/halving.db"
fi
rm -rf "$W/bin-before"
tar czf "$OUT/r.tgz" -C "$W" .
