#!/usr/bin/env bash
# Routing and fp8 on one GPU (bench/RESULTS.md, "Triton backend"), about 4 minutes plus (c):
#  (a) a Zipf-skewed routing capture for Qwen3-30B-A3B (E=128, top-8, 16384 tokens, s = 1.0);
#  (b) `moetune tune --backend triton --kernel moetune` of qwen3-30b-a3b TP1 (bf16) over a 64-config
#      space (BLOCK_SIZE_M 16,32,64,128 x N 64,128 x K 64,128 x GROUP 1,16 x 4 warps x stages 3,4)
#      at 6 batch sizes, once on uniform routing and once with --routing on the capture; then both
#      picks measured again on the capture (routing_bench.py compare): which batch sizes change
#      their winner and by how much; and `moetune results --compare-routing` for every config;
#  (c) with FP8_DIR (the OUT_DIR of tests/gpu/e2e_fp8.sh): the tuned DeepSeek-V3 TP8 fp8 file
#      against the engines' fp8 default configs, measured in one process.
#   bench/triton/routing.sh OUT_DIR [FP8_DIR]    (moetune binaries on MT_BIN_DIR or PATH)
set -uo pipefail
out=${1:?usage: bench/triton/routing.sh OUT_DIR [FP8_DIR]}
fp8dir=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune)")}
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if ! nvidia-smi -L >/dev/null 2>&1; then echo "skipped: no NVIDIA GPU here"; exit 77; fi
if ! "$py" -c 'import torch, triton' 2>/dev/null; then echo "skipped: $py has no torch/triton"; exit 77; fi
mkdir -p "$out"
fail() { echo "FAIL: $*"; exit 1; }
SPACE=(--block-m 16,32,64,128 --block-n 64,128 --block-k 64,128 --group-m 1,16 --num-warps 4 --num-stages 3,4)
BS=1,16,64,256,1024,4096
export TRITON_CACHE_DIR="$out/triton-cache"

echo "== (a) Zipf routing"
"$py" "$here/routing_bench.py" zipf "$out/zipf.npy" --experts 128 --topk 8 --tokens 16384 --s 1.0 \
  || fail "writing the routing failed"

for run in uniform skewed; do
  extra=()
  [ $run = skewed ] && extra=(--routing "$out/zipf.npy")
  echo "== (b) tune on $run routing"
  start=$(date +%s.%N)
  "$bin/moetune" tune --backend triton --kernel moetune --python "$py" --model qwen3-30b-a3b --tp 1 \
    --batch-sizes $BS "${SPACE[@]}" --warmup 2 --min-samples 5 --db "$out/tune.db" --out "$out/$run" \
    "${extra[@]}" >"$out/tune-$run.out" 2>"$out/tune-$run.err"
  rc=$?
  echo "tune $run exit $rc after $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
  tail -n 3 "$out/tune-$run.err"
  [ $rc = 0 ] || fail "tune $run exited $rc"
done
uf=$(ls "$out"/uniform/configs/triton_*/E=128,N=768,device_name=*.json | grep -v _down | head -n1)
sf=$(ls "$out"/skewed/configs/triton_*/E=128,N=768,device_name=*.json | grep -v _down | head -n1)
[ -n "$uf" ] && [ -n "$sf" ] || fail "missing exported files"
python3 -c "import json,sys; print('skewed manifest routing:', [v.get('routing') for v in json.load(open(sys.argv[1])).values() if isinstance(v, dict) and 'routing' in v][:1])" \
  "$(dirname "$sf")/manifest.json"
echo "== (b) both picks measured on the skewed routing"
"$py" "$here/routing_bench.py" compare --uniform "$uf" --skewed "$sf" --routing "$out/zipf.npy" \
  --shape 128,768,2048,8 --out "$out/routing_compare.json" 2>&1 | grep -v Warning
"$bin/moetune" results --db "$out/tune.db" --compare-routing >"$out/compare_routing.txt" \
  || fail "results --compare-routing failed"
echo "results --compare-routing: $(($(wc -l <"$out/compare_routing.txt") - 1)) (config, batch size) pairs; the 10 most slowed:"
(head -n 1 "$out/compare_routing.txt"; tail -n +2 "$out/compare_routing.txt" | sort -k6 -n -r | head -n 10)

if [ -n "$fp8dir" ]; then
  f8=$(ls "$fp8dir"/configs/configs/triton_*/"E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json" | head -n1)
  [ -n "$f8" ] || fail "no fp8 file under $fp8dir (run tests/gpu/e2e_fp8.sh $fp8dir first)"
  echo "== (c) fp8: tuned against the engines' fp8 default configs"
  TRITON_CACHE_DIR="$fp8dir/triton-cache" "$py" "$here/routing_bench.py" fp8 --file "$f8" --shape 256,256,7168,8 \
    --block 128,128 --out "$out/fp8_vs_default.json" 2>&1 | grep -v Warning
fi
echo "routing bench done"
