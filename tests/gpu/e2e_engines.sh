#!/usr/bin/env bash
# The engines' own code against moetune, on every engine snapshot (real SGLang/vLLM fused-MoE
# files with stand-ins for their compiled ops; shared/engines/README.md), on a GPU with torch and
# Triton. Per snapshot:
#   1. its probe.py passes (the real launcher and kernel against a float32 MoE, the align ops);
#   2. `moetune doctor` names the file the engine's own lookup names (probe.py `which`), and
#      reports the engine's own answer beside its own;
#   3. `tune --kernel sglang|vllm` of Qwen3-30B-A3B TP1 (3 configs, batch sizes 1,64,300)
#      exports files whose every entry the engine's own loader returns (main and _down for
#      SGLang; try_get_optimal_moe_config per batch size too): engine_loader_check.py;
#   4. the fallback: with only another Triton version's folder (SGLang) or a file tuned with
#      another Triton (vLLM), doctor says what the engine's own lookup reads.
# Snapshots are found at $MT_ENGINES, else shared/engines under the repository root, else
# ../shared/engines beside it. Needs the moetune binaries (MT_BIN_DIR or PATH).
# Exit 0 passed, 1 failed, 77 skipped (no GPU, torch/triton or snapshots; the reason is printed).
#   tests/gpu/e2e_engines.sh OUT_DIR [PYTHON] [SNAPSHOT...]
. "$(dirname "$0")/e2e_lib.sh"
out=${1:?usage: tests/gpu/e2e_engines.sh OUT_DIR [PYTHON] [SNAPSHOT...]}
py=${2:-python3}
shift $(( $# >= 2 ? 2 : 1 ))
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${MT_ENGINES:-}" ]; then eng=$MT_ENGINES
elif [ -d "$root/shared/engines" ]; then eng=$root/shared/engines
else eng=$root/../shared/engines; fi
[ -x "$eng/env.sh" ] || { echo "skipped: no engine snapshots at $eng (set MT_ENGINES)"; exit 77; }
need_triton "$out" "$py" 'import torch, triton' "torch/triton"
snaps=("$@")
[ ${#snaps[@]} -gt 0 ] || snaps=(sglang-old sglang-new vllm-old vllm-new)
E=128 N=768 K=2048 TOPK=8 BS=1,64,300
MODEL=(--model qwen3-30b-a3b --tp 1)
CONFIGS=64x64x64x1x4x3,32x128x64x16x4x3,16x64x128x1x4x4
failed=0

# check SNAP WHAT: prints and counts a failure without stopping the other snapshots
bad() { echo "FAIL [$snap]: $*"; failed=$((failed + 1)); }
jqr() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d = d.get(k) if isinstance(d, dict) else None
print("" if d is None else d)' "$1" "$2"; }

one() { # SNAP: every step on one snapshot, in a subshell with its environment
  local snap=$1 e=${1%%-*} o=$out/$1
  mkdir -p "$o"
  [ -d "$eng/$snap/real" ] || { echo "SKIP [$snap]: no snapshot at $eng/$snap"; return 0; }
  eval "$("$eng/env.sh" "$snap")"
  unset SGLANG_MOE_CONFIG_DIR VLLM_TUNED_CONFIG_FOLDER
  export MOETUNE_PYTHON=$py
  echo "== $snap: probe.py"
  "$py" "$eng/$snap/probe.py" >"$o/probe.json" 2>"$o/probe.err" || bad "probe.py failed: $(tail -n 3 "$o/probe.err")"
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(" ", r["step"], "ok" if "error" not in r and r.get("ok", True) is not False else "FAILED",
                             r.get("file", ""), [x.get("rel_err_vs_fp32") for x in r.get("layer", [])])' "$o/probe.json"
  local which
  which=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["step"] == "which": print(r["file"])' "$o/probe.json")
  echo "   engine's own name (probe.py which): $which"

  echo "== $snap: doctor"
  "$bin/moetune" doctor --engine "$e" --python "$py" "${MODEL[@]}" --json >"$o/doctor.json" 2>"$o/doctor.err"
  local drc=$?
  cat "$o/doctor.json"; echo
  [ "$drc" = 0 ] || [ "$drc" = 3 ] || bad "doctor exit $drc: $(cat "$o/doctor.err")"
  [ "$(basename "$(jqr "$o/doctor.json" file)")" = "$which" ] || bad "doctor's file is not the engine's $which"
  [ "$(jqr "$o/doctor.json" engine_own.file)" = "$which" ] || bad "doctor's engine_own.file is not $which"
  [ "$(jqr "$o/doctor.json" engine_own.agrees)" = "True" ] || bad "doctor: moetune and the engine disagree"
  local module
  module=$(jqr "$o/doctor.json" engine_own.module)

  echo "== $snap: tune --kernel $e (configs $CONFIGS, batch sizes $BS)"
  local t0=$SECONDS
  "$bin/moetune" tune --backend triton --kernel "$e" --python "$py" "${MODEL[@]}" --batch-sizes $BS \
    --configs $CONFIGS --warmup 1 --min-samples 3 --max-samples 20 --db "$o/tune.db" --out "$o/cfg" \
    --keep-temp >"$o/tune.out" 2>"$o/tune.err"
  local trc=$?
  echo "   tune exit $trc after $((SECONDS - t0)) s"; cat "$o/tune.out"; tail -n 4 "$o/tune.err"
  [ $trc = 0 ] || { bad "tune exited $trc"; cp "$(sed -n 's/.*logs of the coordinator and workers are in //p' \
    "$o/tune.err" | tail -n1)"/worker-0.log "$o/worker.log" 2>/dev/null; return 0; }
  grep -q "names 1 file as moetune does\|names 2 files as moetune does" "$o/tune.out" \
    || bad "tune's export did not say the engine's own names agree"
  find "$o/cfg" -name '*.json' | sort
  local var=SGLANG_MOE_CONFIG_DIR
  [ "$e" = vllm ] && var=VLLM_TUNED_CONFIG_FOLDER
  echo "== $snap: the engine's own loader reads the export ($var=$o/cfg)"
  env "$var=$o/cfg" "$py" "$here/engine_loader_check.py" "$e" "$module" "$o/cfg" $E $N $K $TOPK $BS \
    | tee "$o/loader.json" || bad "the engine's loader did not return every exported entry"

  echo "== $snap: fallback"
  local f
  f=$(find "$o/cfg" -name "$which" | head -n1)
  if [ "$e" = sglang ]; then
    local v
    for v in 3_4_0 3_5_1; do
      rm -rf "$o/fb$v"; mkdir -p "$o/fb$v/configs/triton_$v"; cp "$f" "$o/fb$v/configs/triton_$v/"
      SGLANG_MOE_CONFIG_DIR=$o/fb$v "$bin/moetune" doctor --engine sglang --python "$py" "${MODEL[@]}" --json \
        >"$o/fb$v.json" 2>"$o/fb$v.err"
      local reads fb rule
      reads=$(jqr "$o/fb$v.json" engine_own.reads) fb=$(jqr "$o/fb$v.json" fallback)
      rule=$(jqr "$o/fb$v.json" rule_fallback)
      echo "   only triton_$v: the engine reads '${reads:-its defaults}'; doctor says '$fb'; moetune's rule '$rule'"
      [ "${reads:-defaults}" = "$fb" ] || bad "fallback triton_$v: doctor says $fb, the engine reads ${reads:-defaults}"
    done
  else
    rm -rf "$o/fbv"; mkdir -p "$o/fbv"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["triton_version"]="3.5.0"
json.dump(d, open(sys.argv[2], "w"))' "$f" "$o/fbv/$which"
    VLLM_TUNED_CONFIG_FOLDER=$o/fbv "$bin/moetune" doctor --engine vllm --python "$py" "${MODEL[@]}" --json \
      >"$o/fbv.json" 2>"$o/fbv.err"
    local reads fb
    reads=$(jqr "$o/fbv.json" engine_own.reads) fb=$(jqr "$o/fbv.json" fallback)
    echo "   a file tuned with Triton 3.5.0: the engine reads '$reads'; doctor says '$fb' ($(jqr "$o/fbv.json" status))"
    [ "$reads" = "$o/fbv/$which" ] && [ "$fb" = "$reads" ] || bad "vLLM other-Triton file: doctor $fb, engine $reads"
  fi
}

for snap in "${snaps[@]}"; do
  ( one "$snap"; exit $failed ) || failed=$((failed + 1))
done
[ $failed = 0 ] || fail "$failed snapshot(s) failed"
echo "all engine snapshot checks passed"
