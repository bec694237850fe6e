#!/usr/bin/env bash
# On a GPU host with torch and Triton: does Triton's static rule (kernels/space.c) ever reject a
# config that Triton runs? Builds rules_dump from the kernels' sources, lists the default space's
# verdicts for the shape on this GPU's limits, and launches every config once (rules_check.py).
#   bench/triton/rules_check.sh E N K TOPK [OUT_DIR]        (default OUT_DIR: $OUT or /tmp/moetune-bench)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
e=$1 n=$2 k=$3 topk=$4 out=${5:-${OUT:-/tmp/moetune-bench}}
mkdir -p "$out"
# rules_dump: the build's (MT_BIN_DIR, as deploy/bundle.sh packs it), else compiled here (needs libsodium)
bin=${MT_BIN_DIR:-}/mt_rules_dump
if [ ! -x "$bin" ]; then
  bin=$(mktemp -d)/rules_dump
  gcc -O2 -std=c11 -D_GNU_SOURCE -I"$src/common" -I"$src/kernels" "$src/bench/triton/rules_dump.c" \
    "$src/kernels/space.c" "$src/kernels/routing.c" "$src/common/mt.c" -o "$bin" -lsodium -lm
fi
read -r smem cc < <(python3 -c "import torch; p=torch.cuda.get_device_properties(0); \
print(p.shared_memory_per_block_optin, '%d %d' % (p.major, p.minor))")
list="$out/rules-E$e-N$n-K$k.csv"
"$bin" "E=$e,N=$n,K=$k,topk=$topk" "$smem" $cc > "$list"
echo "device limit $smem B, cc $cc: $(grep -c ',reject' "$list") of $(wc -l < "$list") configs rejected by the rule"
python3 "$src/bench/triton/rules_check.py" "$list" "$e" "$n" "$k" "$topk"
