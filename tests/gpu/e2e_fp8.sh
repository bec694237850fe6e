#!/usr/bin/env bash
# fp8 end to end on one GPU (H200): `moetune tune --backend triton --kernel moetune` of DeepSeek-V3
# TP8 (the preset's own dtype: fp8_w8a8 with 128x128 weight blocks; E=256, N=256, K=7168, topk 8)
# at the 18 default batch sizes over a 48-config space (BLOCK_SIZE_M 16,32,64,128 x N 64,128,256
# x K 64,128 x GROUP 1,32 x 4 warps x 3 stages; about 6 minutes on one H200), for both engines
# (--engine sglang,vllm: the union is measured once, each engine gets what it can run). Checks:
#   - every config verified (no wrong_result, crashed or timeout row; ok rows carry rel_err),
#   - SGLang's configs/triton_X_Y_Z/E=256,N=256,device_name=<GPU>,dtype=fp8_w8a8,block_shape=[128, 128].json
#     with 18 keys and BLOCK_SIZE_K dividing 128,
#   - vLLM's flat E=256,N=256,device_name=<GPU>,dtype=fp8_w8a8,block_shape=[128,128].json with
#     BLOCK_SIZE_N and BLOCK_SIZE_K multiples of 128.
# Needs the moetune binaries (MT_BIN_DIR or PATH) and python3 with torch and triton.
# Exit 0 passed, 1 failed, 77 skipped (no GPU or no torch/triton).
#   tests/gpu/e2e_fp8.sh OUT_DIR [PYTHON]
. "$(dirname "$0")/e2e_lib.sh"
out=${1:?usage: tests/gpu/e2e_fp8.sh OUT_DIR [PYTHON]}
py=${2:-python3}
need_triton "$out" "$py" 'import torch, triton; torch.float8_e4m3fn' "torch/triton with fp8"
SPACE=(--block-m 16,32,64,128 --block-n 64,128,256 --block-k 64,128 --group-m 1,32 --num-warps 4 --num-stages 3)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"

echo "== tune --backend triton --kernel moetune: deepseek-v3 TP8 fp8 128x128 blocks, 48 configs, 18 batch sizes"
tune_timed "$out" --backend triton --kernel moetune --engine sglang,vllm --python "$py" --model deepseek-v3 --tp 8 \
  "${SPACE[@]}" --warmup 2 --min-samples 5 --max-samples 30 --budget-ms 500 --config-timeout-ms 300000 \
  --db "$out/tune.db" --out "$out/configs"
tune_check "$out"
sg=$(ls "$out"/configs/configs/triton_*/"E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json" 2>/dev/null | head -n1)
[ -n "$sg" ] || { find "$out/configs" -name '*.json'; fail "no SGLang fp8 file named ...block_shape=[128, 128].json"; }
vl="$out/configs/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
[ -f "$vl" ] || { find "$out/configs" -name '*.json'; fail "no vLLM fp8 file $vl"; }
echo "wrote $sg"; cat "$sg"; echo; echo "wrote $vl"; cat "$vl"; echo
"$bin/moetune" results --db "$out/tune.db" --json >"$out/results.json" || fail "results failed"
python3 - "$sg" "$vl" "$out/results.json" <<'PY' || fail "files or rows wrong"
import json, sys
sg, vl = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
want = ["1", "2", "4", "8", "16", "24", "32", "48", "64", "96", "128", "256", "512", "1024", "1536", "2048", "3072", "4096"]
assert [k for k in sg if k.isdigit()] == want, list(sg)
assert [k for k in vl if k.isdigit()] == want, list(vl)
assert all(128 % sg[k]["BLOCK_SIZE_K"] == 0 for k in want), "SGLang file has a BLOCK_SIZE_K not dividing 128"
assert all(vl[k]["BLOCK_SIZE_K"] % 128 == 0 and vl[k]["BLOCK_SIZE_N"] % 128 == 0 for k in want), \
    "vLLM file has BLOCK_SIZE_N/K that are not multiples of 128"
rows = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
st = {}
for r in rows:
    st[r["status"]] = st.get(r["status"], 0) + 1
print("rows", len(rows), "by status", st)
assert all(r["shape"]["dtype"] == "fp8_w8a8" for r in rows)
configs = {tuple(r["config"].values()) for r in rows}
assert len(configs) == 48, len(configs)
assert len(rows) == 48 * 18, len(rows)
bad = [r for r in rows if r["status"] in ("wrong_result", "crashed", "timeout")]
assert not bad, "wrong/crashed/timeout rows: %s" % bad[:3]
ok = [r for r in rows if r["status"] == "ok"]
# "rel_err=4.38e-03", and for a settled row "rel_err=4.38e-03; settled: mean 1.032x the best ..."
errs = [float(r["detail"].split(";")[0].split("=")[1]) for r in ok if r["detail"].startswith("rel_err=")]
assert len(errs) == len(ok), "ok rows without their verification error"
print("ok rows", len(ok), "all verified against the fp32 reference; max rel_err %.3g (limit 0.03)" % max(errs))
inval = [r for r in rows if r["status"] == "invalid"]
if inval:
    print("invalid (the device refused):", len(inval), inval[0]["detail"][:120])
PY
echo "all fp8 GPU end-to-end checks passed"
