#!/usr/bin/env bash
# The triton backend's benchmark, on one GPU in one run (bench/RESULTS.md, "Triton backend"):
#  (a) moetune's tuning wall time (tests/gpu/e2e_triton.sh: tune + export, empty Triton cache)
#      against engine_style.py, which tunes the same configs and batch sizes the way the engines'
#      tuner scripts do (one process, compile inside the loop, graph of 10, 5+10 replays), also
#      from an empty Triton cache;
#  (b) per batch size, moetune's pick against the engines' untuned default and against the
#      baseline's pick, all measured again under one method (compare.py);
#  (c) what the separate up/down configs buy (compare.py, and the manifest);
#  (d) the helper's peak RSS over the sweep and the GPU-busy fraction (the worker log's
#      "triton helper:" line, written when the helper closes, with the seconds to the helper's
#      hello and to its first result, and the "triton helper stats:" line: reference checks,
#      configs pruned unchecked, halves timed and skipped, configs compiled by the measuring
#      process, seconds in checks, captures and compile waits; worker/HELPER.md), and where the
#      sweep's GPU time went per batch size and outcome (rows.py: ok, settled, pruned).
# Knob: MOETUNE_SPLIT_MARGIN (the helper's; default 0.1, "inf" = the halves of every checked
# config, as before it existed) is printed first and reaches the helper through tune's worker.
#   bench/triton/run.sh OUT_DIR        (needs the moetune binaries on MT_BIN_DIR or PATH)
set -uo pipefail
out=${1:?usage: bench/triton/run.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export PYTHONUNBUFFERED=1
echo "MOETUNE_SPLIT_MARGIN=${MOETUNE_SPLIT_MARGIN:-0.1 (default)}"
# Both sides start with torch and triton in the page cache: on a fresh machine the first import
# reads them from disk, and that would land on whichever side runs first (moetune's).
python3 -c 'import torch, triton' >/dev/null 2>&1 || true
"$root/tests/gpu/e2e_triton.sh" "$out" || exit $?
echo "== where the sweep's GPU time went (rows.py)"
python3 "$here/rows.py" "$out/results.json" --top 6 >"$out/rows.txt"
head -n 24 "$out/rows.txt"
echo "== baseline: the engines' way, same configs"
start=$(date +%s.%N)
TRITON_CACHE_DIR="$out/triton-cache-baseline" python3 "$here/engine_style.py" \
  --space 16,32,64,128:64,128,256:64,128:1,16:4,8:3,4 --batch-sizes 1,8,64,256,1024,4096 \
  --out "$out/baseline.json" 2>&1 | tail -n 8
echo "baseline wall $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s"
cat "$out/tune.time"
f=$(ls "$out"/configs/configs/triton_*/E=128,N=768,device_name=*.json | grep -v _down | head -n1)
# the whole-layer picks: vLLM's file (SGLang's holds the up halves of the split pairs)
"${MT_BIN_DIR:-$(dirname "$(command -v moetune)")}/moetune" export --engine vllm --db "$out/tune.db" \
  --out "$out/vllm" >/dev/null || exit 1
v=$(ls "$out"/vllm/E=128,N=768,device_name=*.json | head -n1)
echo "== (b)/(c): re-measured under one method (tuned = the whole-layer pick, vLLM's file; split = SGLang's pair)"
python3 "$here/compare.py" --file "$f" --down "${f%.json}_down.json" --whole "$v" --baseline "$out/baseline.json" \
  --out "$out/compare.json" 2>&1 | grep -v Warning
echo "== (d) helper memory and GPU busy"
grep -h "triton helper" "$out"/worker.log 2>/dev/null | tail -n 4
