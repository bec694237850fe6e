#!/usr/bin/env bash
# End to end on a GPU machine: `moetune tune --backend cuda` with a real coordinator and one real
# worker per GPU writes config files into cuda_<major>_<minor>/; then a run with one config
# injected to fault (illegal address) and one injected to hang: the fault is reported as
# launch_error, the hang as timeout, the workers go on with the next configs and the sweep
# completes. Needs the moetune binaries on PATH (or MT_BIN_DIR) and python3 for the checks.
# Exit 0 passed, 1 failed, 77 skipped (no GPU).
#   tests/gpu/e2e.sh OUT_DIR
. "$(dirname "$0")/e2e_lib.sh"
out=${1:?usage: tests/gpu/e2e.sh OUT_DIR}
need_gpu
mkdir -p "$out"
ngpu=$(nvidia-smi -L | wc -l)
SPACE=(--block-m 16,64 --block-n 64,128 --block-k 64,128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)

echo "== tune qwen3-30b-a3b TP1 on $ngpu GPU(s), 128-config space, 6 batch sizes (at most 30 samples, 200 ms per batch size, to fit the device budget)"
start=$(date +%s)
"$bin/moetune" tune --backend cuda --model qwen3-30b-a3b --tp 1 --batch-sizes 1,8,64,256,1024,4096 \
  "${SPACE[@]}" --max-samples 30 --budget-ms 200 --db "$out/tune.db" --out "$out/configs" --keep-temp >"$out/tune.out" 2>"$out/tune.err"
rc=$?
echo "tune exit $rc after $(( $(date +%s) - start )) s"; tail -n 5 "$out/tune.err"
[ $rc = 0 ] || fail "tune exited $rc"
f=$(ls "$out"/configs/cuda_*/E=128,N=768,device_name=*.json 2>/dev/null | head -n1)
[ -n "$f" ] || { find "$out/configs"; fail "no config file under cuda_*/"; }
echo "wrote $f"; cat "$f"
python3 - "$f" "$(dirname "$f")/manifest.json" <<'PY' || fail "config file or manifest wrong"
import json, sys
cfg = json.load(open(sys.argv[1]))
keys = list(cfg)
assert keys == sorted(keys, key=int) == ["1", "8", "64", "256", "1024", "4096"], keys
for k, v in cfg.items():
    assert set(v) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}, v
man = json.load(open(sys.argv[2]))
text = json.dumps(man)
assert '"simulated": true' not in text, "cuda results marked simulated"
print("config file and manifest ok")
PY
"$bin/moetune" results --db "$out/tune.db" --best --batch-size 64 | head -n 3

echo "== fault and hang injection through the real worker"
export MOETUNE_CUDA_INJECT=fault:16x64x64x1x4x3,hang:64x128x128x16x8x3
"$bin/moetune" tune --backend cuda --gpus 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,64 \
  --block-m 16,64 --block-n 64,128 --block-k 64,128 --group-m 1,16 --num-warps 4,8 --num-stages 3 \
  --max-samples 30 --budget-ms 200 --config-timeout-ms 8000 --db "$out/inject.db" --out "$out/inject" --keep-temp >"$out/inject.out" 2>"$out/inject.err"
rc=$?
unset MOETUNE_CUDA_INJECT
echo "inject tune exit $rc"; tail -n 3 "$out/inject.err"
[ $rc = 0 ] || fail "tune with injected faults exited $rc"
"$bin/moetune" results --db "$out/inject.db" --json >"$out/inject.json" || fail "results failed"
python3 - "$out/inject.json" <<'PY' || fail "injected configs not reported as expected"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def status(bm, bn, bk, gm, w, s):
    return {r["status"] for r in rows if [r["config"][k] for k in ("BLOCK_SIZE_M","BLOCK_SIZE_N","BLOCK_SIZE_K","GROUP_SIZE_M","num_warps","num_stages")] == [bm, bn, bk, gm, w, s]}
fault, hang = status(16, 64, 64, 1, 4, 3), status(64, 128, 128, 16, 8, 3)
print("rows", len(rows), "fault config:", fault, "hang config:", hang)
ok = sum(1 for r in rows if r["status"] == "ok")
assert fault and fault <= {"launch_error", "crashed"}, fault
assert hang == {"timeout"}, hang
assert ok == len(rows) - 4, ok   # 2 configs x 2 batch sizes are the injected ones
print("ok rows", ok, "of", len(rows))
PY
echo "all GPU end-to-end checks passed"
