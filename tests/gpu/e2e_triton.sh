#!/usr/bin/env bash
# End to end on a GPU machine with PyTorch and Triton: `moetune tune --backend triton --kernel
# moetune` of Qwen3-30B-A3B TP1 over a 192-config space at 6 batch sizes, then the SGLang export:
# configs/triton_X_Y_Z/E=128,N=768,device_name=<GPU>.json and its _down file, every config checked
# against the reference (the helper reports ok only after the check; no wrong_result row; a config
# pruned by racing is never a winner and is not checked).
# Needs the moetune binaries (MT_BIN_DIR or PATH) and python3 with torch and triton.
# Exit 0 passed, 1 failed, 77 skipped (no GPU or no torch/triton).
#   tests/gpu/e2e_triton.sh OUT_DIR [PYTHON]
. "$(dirname "$0")/e2e_lib.sh"
out=${1:?usage: tests/gpu/e2e_triton.sh OUT_DIR [PYTHON]}
py=${2:-python3}
need_triton "$out" "$py" 'import torch, triton' "torch/triton"
SPACE=(--block-m 16,32,64,128 --block-n 64,128,256 --block-k 64,128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)
BS=1,8,64,256,1024,4096

echo "== tune --backend triton --kernel moetune: qwen3-30b-a3b TP1, 192 configs, batch sizes $BS"
tune_timed "$out" --backend triton --kernel moetune --python "$py" --model qwen3-30b-a3b --tp 1 \
  --batch-sizes $BS "${SPACE[@]}" --warmup 2 --min-samples 5 --db "$out/tune.db" --out "$out/configs" \
  ${MT_TUNE_ARGS:-} --keep-temp
run=$(sed -n 's/.*logs of the coordinator and workers are in //p' "$out/tune.err" | tail -n1)
[ -n "$run" ] && cp "$run"/worker-0.log "$out/worker.log" 2>/dev/null
grep -h "triton helper" "$out/worker.log" 2>/dev/null | tail -n 4
tune_check "$out"
f=$(ls "$out"/configs/configs/triton_*/E=128,N=768,device_name=*.json 2>/dev/null | grep -v _down | head -n1)
[ -n "$f" ] || { find "$out/configs"; fail "no SGLang file under configs/triton_*/"; }
d=${f%.json}_down.json
[ -f "$d" ] || fail "no _down file beside $f"
echo "wrote $f and $(basename "$d")"; cat "$f"; echo; cat "$d"; echo
"$bin/moetune" results --db "$out/tune.db" --json >"$out/results.json" || fail "results failed"
python3 - "$f" "$d" "$out/results.json" <<'PY' || fail "files or rows wrong"
import json, sys
up, down = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
keys = [k for k in up if k.isdigit()]
assert keys == ["1", "8", "64", "256", "1024", "4096"], keys
for k in keys:
    assert up[k]["BLOCK_SIZE_M"] == down[k]["BLOCK_SIZE_M"], (k, up[k], down[k])
rows = [json.loads(l) for l in open(sys.argv[3]) if l.strip()]
st = {}
for r in rows:
    st[r["status"]] = st.get(r["status"], 0) + 1
print("rows", len(rows), "by status", st)
configs = {tuple(r["config"].values()) for r in rows}
assert len(configs) >= 150, len(configs)
ok = [r for r in rows if r["status"] == "ok"]
# every ok row was checked against the reference; the halves are timed only near the best
# (MOETUNE_SPLIT_MARGIN), which always includes each batch size's whole-layer winner
assert all("rel_err=" in (r.get("detail") or "") for r in ok), "ok rows unverified"
for m in sorted({r["batch_size"] for r in ok}):
    best = min((r for r in ok if r["batch_size"] == m), key=lambda r: r["median_us"])
    assert best.get("up_us", 0) > 0 and best.get("down_us", 0) > 0, ("winner without up/down", m)
split = [r for r in ok if r.get("up_us", 0) > 0 and r.get("down_us", 0) > 0]
print("ok rows with up/down timed", len(split), "of", len(ok))
# racing: a pruned row is never a winner, so it was not checked, and says so
pruned = [r for r in rows if r["status"] == "pruned"]
assert all("not verified" in (r.get("detail") or "") and r.get("median_us", 0) > 0 for r in pruned), "pruned rows"
assert all("kernel=moetune" in (r.get("versions") or "") for r in rows), "rows without versions"
assert not [r for r in rows if r["status"] in ("wrong_result", "crashed", "timeout")], "wrong/crashed/timeout rows"
print("configs", len(configs), "ok rows", len(ok), "pruned rows", len(pruned), "ok rows verified; versions:",
      rows[0].get("versions"))
PY
echo "all triton GPU end-to-end checks passed"
