#!/usr/bin/env bash
# The ship guard's benchmark (docs/ship-guard.md; bench/RESULTS.md, "Ship guard"), on one GPU in
# one run: three guarded tunes with the triton backend, each followed at once by guard_check.py,
# which re-measures the exported file in one process (compare.py's method) at every key and every
# batch size the guard checked between the keys, against the engine's default and the incumbent:
#  (a) Qwen3-30B-A3B TP1, --kernel moetune;
#  (b) Mixtral-8x7B TP2, --kernel moetune (for both, tune asks PYTHON's engine for an incumbent:
#      with none installed, the engine's default alone guards them; guard_check.py measures the
#      incumbent the manifest names, if any);
#  (c) the sglang-new engine snapshot (shared/engines), --kernel sglang, Qwen3-30B-A3B TP1, with
#      --baseline a triton_3_5_1 file made here whose entries are plausible, not the best, at
#      other keys than the sweep's (so the guard has something to beat or keep).
# Each tune measures the same 12 configs (--configs), all with BLOCK_SIZE_M >= 32 and
# BLOCK_SIZE_N >= 128: at M=1 they split the layer into 4-8 times fewer tiles than the engine's
# default (16x32x64) does, so that the default should win at the smallest batch sizes and the
# guard ship it there (each tune prints the manifest's default_shipped_at). Racing and the decide
# step are on (--race-margin, --decide-margin): the decide step is the side-by-side step the guard
# measures in, and after it the batch sizes between the keys are checked.
#   bench/triton/guard.sh OUT_DIR
# Needs the moetune binaries (MT_BIN_DIR, as deploy/bundle.sh packs them, or PATH) and PYTHON
# (default python3) with torch and Triton; snapshots at MT_ENGINES, else shared/engines under the
# repository root, else ../shared/engines beside it. BACKEND=sim runs the same tunes on sim
# workers and guard_check.py --dry-run (what it would measure): the plumbing, on CPU.
# CASES (default "a b c") runs some of the three, e.g. CASES=c in a second run where one command
# may not last the three. Everything it writes is under OUT_DIR: a folder per tune (the tunes'
# process logs in its logs/); the Triton cache, OUT_DIR/triton-cache, is removed at the end unless
# KEEP_CACHE is set. ROUNDS (3) and CHECK_BUDGET_MS (1000) are guard_check.py's --rounds and
# --budget-ms; SWITCH_POINTS=1 adds its --switch-points (the exported file's own switch points,
# where the guard did not measure; about doubles the checks' time).
# Exit 0 when every tune ran and no check found a loss, 1 otherwise.
set -uo pipefail
out=${1:?usage: bench/triton/guard.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
backend=${BACKEND:-triton}
py=${PYTHON:-python3}
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune 2>/dev/null || echo .)")}
[ -x "$bin/moetune" ] || { echo "guard.sh: no moetune binary in '$bin' (set MT_BIN_DIR)"; exit 1; }
case $backend in sim | triton) ;; *) echo "guard.sh: BACKEND is sim or triton, not '$backend'"; exit 1 ;; esac
mkdir -p "$out" && out=$(cd "$out" && pwd)
if [ -n "${MT_ENGINES:-}" ]; then eng=$MT_ENGINES
elif [ -d "$root/shared/engines" ]; then eng=$root/shared/engines
else eng=$root/../shared/engines; fi
export PYTHONUNBUFFERED=1

CONFIGS=32x128x64x1x4x4,32x128x128x16x4x3,64x128x64x1x4x3,64x128x64x16x4x4,64x128x64x16x8x4,64x128x128x16x8x3
CONFIGS=$CONFIGS,64x256x64x32x8x3,128x128x64x16x8x4,128x128x64x32x8x3,128x128x128x16x8x3,128x256x64x16x8x3,128x256x64x1x8x4
BS=1,16,64,256,1024,4096
MEASURE=(--warmup 2 --min-samples 5 --max-samples 40 --budget-ms 400 --race-margin 0.2 --decide-margin 0.02)
CHECK=(--rounds "${ROUNDS:-3}" --budget-ms "${CHECK_BUDGET_MS:-1000}" ${SWITCH_POINTS:+--switch-points})
if [ "$backend" = sim ]; then
  RUN=(--backend sim --workers 1 --sim-time-scale 0)
  CHECK+=(--dry-run)
  dev=NVIDIA_H200 # the sim's device
else
  RUN=(--backend triton --python "$py")
  export TRITON_CACHE_DIR=$out/triton-cache # the tunes' compiles serve the checks too; removed at the end
  "$py" -c 'import torch, triton' || { echo "guard.sh: $py cannot import torch and triton"; exit 1; }
  dev=$("$py" -c 'import torch; print(torch.cuda.get_device_name().replace(" ", "_"))') || exit 1
fi

# incumbent DIR: the triton_3_5_1 file of Qwen3-30B-A3B TP1 (E=128, N=768) for (c); prints its path
incumbent() {
  local f="$1/configs/triton_3_5_1/E=128,N=768,device_name=$dev.json"
  mkdir -p "$(dirname "$f")"
  cat >"$f" <<'EOF'
{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
 "8": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
 "32": {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 16, "num_warps": 4, "num_stages": 3},
 "128": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
 "512": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 8, "num_stages": 3},
 "2048": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 8, "num_stages": 3},
 "4096": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 8, "num_stages": 3}}
EOF
  echo "$f"
}

# one NAME KERNEL MODEL TP [INCUMBENT]: the guarded tune, then guard_check.py on its export
one() {
  local name=$1 kernel=$2 model=$3 tp=$4 inc=${5:-} o=$out/$1 rc t0 run f
  rm -rf "$o" && mkdir -p "$o"
  local args=("${RUN[@]}" --model "$model" --tp "$tp" --batch-sizes $BS --configs $CONFIGS "${MEASURE[@]}"
    --db "$o/tune.db" --out "$o/cfg" --keep-temp)
  [ "$backend" = triton ] && args+=(--kernel "$kernel" --engine sglang)
  [ -n "$inc" ] && args+=(--baseline "$inc")
  echo "== $name: tune --kernel $kernel --model $model --tp $tp${inc:+ --baseline $inc}"
  t0=$(date +%s.%N)
  "$bin/moetune" tune "${args[@]}" >"$o/tune.out" 2>"$o/tune.err"
  rc=$?
  echo "tune exit $rc after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee "$o/tune.time"
  run=$(sed -n 's/.*logs of the coordinator and workers are in //p' "$o/tune.err" | tail -n1)
  case $run in /tmp/moetune-tune-*) [ -d "$run" ] && cp -r "$run" "$o/logs" && rm -rf "$run" ;; esac
  cat "$o/tune.out"
  [ $rc = 0 ] || { tail -n 5 "$o/tune.err"; return 1; }
  f=$(find "$o/cfg"/configs/triton_* "$o/cfg"/sim -name 'E=*.json' ! -name '*_down.json' 2>/dev/null | head -n1)
  [ -n "$f" ] || { echo "no exported file under $o/cfg"; return 1; }
  python3 - "$f" <<'PY'
import json, os, sys
f = sys.argv[1]
g = json.load(open(os.path.join(os.path.dirname(f), "manifest.json")))[os.path.basename(f)].get("guard", {})
for k in ("default_shipped_at", "incumbent_shipped_at", "between_keys_checked", "keys_added"):
    print("  manifest guard.%s: %s" % (k, g.get(k)))
PY
  echo "== $name: guard_check.py"
  t0=$(date +%s.%N)
  "$py" "$here/guard_check.py" --file "$f" --kernel "$kernel" ${inc:+--incumbent "$inc"} --out "$o/check.json" \
    "${CHECK[@]}" 2>&1 | tee "$o/check.txt"
  rc=${PIPESTATUS[0]}
  echo "guard_check exit $rc after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee "$o/check.time"
  return "$rc"
}

start=$(date +%s.%N)
verdicts=()
want() { [[ " ${CASES:-a b c} " == *" $1 "* ]]; }
if want a; then
  one a-qwen3-tp1 moetune qwen3-30b-a3b 1
  verdicts+=("a:$?")
fi
if want b; then
  one b-mixtral-tp2 moetune mixtral-8x7b 2
  verdicts+=("b:$?")
fi
inc=$(incumbent "$out/incumbent")
if ! want c; then
  :
elif [ -x "$eng/env.sh" ] && [ -d "$eng/sglang-new/real" ]; then
  (
    eval "$("$eng/env.sh" sglang-new)"
    unset SGLANG_MOE_CONFIG_DIR
    one c-sglang-new sglang qwen3-30b-a3b 1 "$inc"
  )
  verdicts+=("c:$?")
elif [ "$backend" = sim ]; then # the sim needs no engine
  echo "(no engine snapshots at $eng: (c) runs without one)"
  one c-sglang-new sglang qwen3-30b-a3b 1 "$inc"
  verdicts+=("c:$?")
else
  echo "== c-sglang-new: no engine snapshot sglang-new at $eng (set MT_ENGINES)"
  verdicts+=("c:1")
fi
[ "$backend" = triton ] && [ -z "${KEEP_CACHE:-}" ] && rm -rf "$out/triton-cache"
# one line a tune, for bench/RESULTS.md: times, where the default and the incumbent were shipped,
# keys added, and the re-measured speed-ups of the shipped entries over both
python3 - "$out" <<'PY'
import glob, json, os, sys
for d in sorted(glob.glob(os.path.join(sys.argv[1], "[abc]-*"))):
    def first(name):
        try:
            return open(os.path.join(d, name)).read().split("\n")[0]
        except OSError:
            return "-"
    line = "%s: %s; %s" % (os.path.basename(d), first("tune.time"), first("check.time"))
    try:
        c = json.load(open(os.path.join(d, "check.json")))
        rows = c["rows"]
        for k, what in (("default_ratio", "default"), ("incumbent_ratio", "incumbent")):
            r = [x[k] for x in rows if k in x]
            if r:
                line += "; over the %s %.2f-%.2fx" % (what, min(r), max(r))
        line += "; %d points, %d losses" % (len(rows), len(c["losses"]))
    except (OSError, ValueError, KeyError):
        pass
    print(line)
PY
echo "== guard.sh: ${verdicts[*]} (0 = no loss), $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s in all"
for v in "${verdicts[@]}"; do [ "${v#*:}" = 0 ] || exit 1; done
exit 0
