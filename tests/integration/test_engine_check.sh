#!/usr/bin/env bash
# The engine's own config lookup, asked through the helper's probe (cli/engine_check.h), against
# fake engine packages (tests/fixtures/engines: plain Python, with a fake torch naming a GPU):
# doctor shows the engine's own file name and the file its lookup reads beside moetune's, follows
# the engine's fallback (SGLang 0.5.x's fixed Triton list, not the newest folder), and says when
# the names differ (exit 1); export --engine writes files whose names the engine's own function
# gives and refuses, naming both, when it gives another.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || { echo "skip: $PY not found"; exit 77; }
: "${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source tree}"
F=$MT_SOURCE_DIR/tests/fixtures/engines
M="$BIN/moetune"
unset MOETUNE_HELPER SGLANG_MOE_CONFIG_DIR VLLM_TUNED_CONFIG_FOLDER
export MOETUNE_FAKE_GPU="NVIDIA H100 80GB HBM3"
NAME="E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"
ENTRY='{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}'
for v in 3_4_0 3_5_1; do mkdir -p "$T/c/configs/triton_$v"; echo "$ENTRY" >"$T/c/configs/triton_$v/$NAME"; done

# doctor LAYOUT ARGS...: output in $T/out, exit code in $rc
doctor() {
  local l=$1; shift
  rc=0
  SGLANG_MOE_CONFIG_DIR=$T/c PYTHONPATH=$F/$l:$F/_stubs "$M" doctor --python "$PY" --model qwen3-30b-a3b --tp 1 "$@" \
    >"$T/out" 2>&1 || rc=$?
}
has() { grep -qF -- "$1" "$T/out" || { cat "$T/out"; fail "$2: no line with '$1'"; }; }

doctor sglang-old --engine sglang
[ $rc = 3 ] || { cat "$T/out"; fail "sglang-old: exit $rc, expected 3"; }
has "engine's own:  $NAME (sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_config.get_config_file_name, 0.5.8.fake): the same name" "sglang-old"
has "engine reads:  $T/c/configs/triton_3_4_0/$NAME" "sglang-old"
has "fallback:      SGLang uses the file its own lookup read" "sglang-old"
doctor sglang-old --engine sglang --json
[ "$(jq -r '.fallback + " " + .rule_fallback + " " + (.engine_own.agrees|tostring)' "$T/out")" = \
  "$T/c/configs/triton_3_4_0/$NAME $T/c/configs/triton_3_5_1/$NAME true" ] || { cat "$T/out"; fail "sglang-old json"; }
pass "doctor, SGLang 0.5.x layout: the engine's own name and its fixed-list fallback (3.4.0, not moetune's 3.5.1)"

doctor sglang-new --engine sglang
[ $rc = 3 ] || { cat "$T/out"; fail "sglang-new: exit $rc"; }
has "engine reads:  $T/c/configs/triton_3_5_1/$NAME" "sglang-new"
pass "doctor, newest SGLang layout: the engine falls back to the newest other folder (3.5.1)"

doctor sglang-renamed --engine sglang
[ $rc = 1 ] || { cat "$T/out"; fail "sglang-renamed: exit $rc, expected 1"; }
has "engine's own:  E=128,N=768,device=NVIDIA_H100_80GB_HBM3.json" "sglang-renamed"
has "DIFFERENT:     moetune names it $NAME" "sglang-renamed"
pass "doctor: an engine that names the file otherwise is shown and exits 1"

doctor vllm-new --engine vllm
has "engine's own:  $NAME (vllm.model_executor.layers.fused_moe.fused_moe.get_config_file_name, 0.20.0.fake): the same name" "vllm-new"
has "engine reads:  no file: its built-in defaults" "vllm-new"
MOETUNE_FAKE_GPU="NVIDIA H200 NVL" doctor vllm-old --engine vllm
has "engine's own:  E=128,N=768,device_name=NVIDIA_H200.json" "vllm-old H200 NVL"
pass "doctor, vLLM layouts: the engine's own names (an H200 NVL reads the NVIDIA_H200 file)"

doctor sglang-new --engine sglang --json
[ "$(jq -r .engine_own.asked "$T/out")" = true ] || fail "asked"
SGLANG_MOE_CONFIG_DIR=$T/c PYTHONPATH=$F/_stubs "$M" doctor --python "$PY" --model qwen3-30b-a3b --tp 1 --engine sglang \
  >"$T/out" 2>&1 || true
has "sglang is not installed" "no engine"
pass "doctor without the engine: moetune's rules, said so"

mkdir -p "$T/notriton/triton"
echo "raise ImportError('No module named triton (test)')" >"$T/notriton/triton/__init__.py"
PYTHONPATH=$T/notriton:$F/_stubs "$M" doctor --python "$PY" --model qwen3-30b-a3b --tp 1 --engine sglang \
  >"$T/out" 2>&1 && fail "doctor without Triton exited 0"
has "Triton is not importable in" "no triton"
has "(torch 2.11.0)" "no triton"
grep -q "torch is not importable" "$T/out" && { cat "$T/out"; fail "doctor blamed torch"; }
pass "doctor with torch but no Triton names Triton, not torch"

# ---- tune asks before any GPU time: a sweep whose file the engine would not read is refused
rc=0
PYTHONPATH=$F/sglang-renamed:$F/_stubs "$M" tune --backend triton --kernel sglang --python "$PY" \
  --shape E=128,N=768,K=2048,topk=8 --batch-sizes 1,16 --db "$T/tune.db" --out "$T/tune-out" >"$T/out" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$T/out"; fail "tune with a differently naming engine: exit $rc"; }
has "looks for E=128,N=768,device=NVIDIA_H100_80GB_HBM3.json" "tune refused"
has "moetune would write $NAME" "tune refused"
[ ! -e "$T/tune.db" ] || fail "tune made a database before refusing"
pass "tune --kernel sglang refuses before starting when the engine's own name differs, naming both"

# ---- export --engine against the engine's own names: triton rows from the fake helper
start_coordinator --heartbeat-ms 200 --lease-ms 5000
FAKE_HELPER_MODE=ok MOETUNE_HELPER=$MT_SOURCE_DIR/tests/tools/fake_helper.py "$BIN/moetune-worker" --connect "$WEP" \
  --backend triton --python "$PY" --kernel sglang --id "w-$$" --heartbeat-ms 200 >>"$T/w.log" 2>&1 &
PIDS+=($!)
"$M" submit --control "$CEP" --name e --race-margin 0 --block-m 16,64 --block-n 64 --block-k 128 --group-m 1 \
  --num-warps 4 --num-stages 3 --shape E=128,N=768,K=2048,topk=8 --batch-sizes 1,16 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit"; }
[ "$(wait_sweep 1 120)" = done ] || { cat "$T/w.log"; fail "sweep not done"; }
FAKE="E=128,N=768,device_name=Fake_H200.json"

PYTHONPATH=$F/sglang-renamed:$F/_stubs MOETUNE_PYTHON=$PY "$M" export --engine sglang --db "$DB" --out "$T/x1" \
  >"$T/out" 2>&1 && { cat "$T/out"; fail "export into a differently named engine file succeeded"; }
has "looks for E=128,N=768,device=Fake_H200.json" "export refused"
has "moetune would write $FAKE" "export refused"
[ -z "$(find "$T/x1" -name '*.json' 2>/dev/null)" ] || fail "the refused export wrote files"
pass "export --engine refuses, naming both, when the engine's own function names the file otherwise; nothing written"

PYTHONPATH=$F/sglang-new:$F/_stubs MOETUNE_PYTHON=$PY "$M" export --engine sglang --db "$DB" --out "$T/x2" \
  >"$T/out" 2>&1 || { cat "$T/out"; fail "export with an agreeing engine failed"; }
has "sglang 0.6.0.fake in $PY names 1 file as moetune does" "export agreed"
[ -f "$T/x2/configs/triton_3_6_0/$FAKE" ] || { find "$T/x2"; fail "no $FAKE"; }
PYTHONPATH=$F/vllm-new:$F/_stubs MOETUNE_PYTHON=$PY "$M" export --engine vllm --db "$DB" --out "$T/x3" \
  >"$T/out" 2>&1 || { cat "$T/out"; fail "vllm export failed"; }
has "vllm 0.20.0.fake in $PY names 1 file as moetune does" "vllm export agreed"
[ -f "$T/x3/E=128,N=768,device_name=NVIDIA_H200.json" ] || { find "$T/x3"; fail "no flat vLLM file"; }
PYTHONPATH=$F/_stubs MOETUNE_PYTHON=$PY "$M" export --engine sglang --db "$DB" --out "$T/x4" >"$T/out" 2>&1 \
  || { cat "$T/out"; fail "export without the engine failed"; }
grep -q "as moetune does" "$T/out" && fail "a check was claimed without the engine"
pass "export --engine with the engine's own names agreeing (SGLang and vLLM layouts), and without the engine: written"
