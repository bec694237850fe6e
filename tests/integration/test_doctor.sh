#!/usr/bin/env bash
# moetune doctor against prepared engine folders, with tests/tools/fake_probe.sh standing in for
# the interpreter (no torch, Triton, engine or GPU needed): exit 0 when the engine finds a file for
# the running Triton, 3 when not (with the fallback named and the tune command printed), 1 when the
# probe cannot run or reports something missing, 2 for bad usage.
source "$(dirname "$0")/lib.sh"
: "${MT_SOURCE_DIR:?}"
M="$BIN/moetune"
PY="$MT_SOURCE_DIR/tests/tools/fake_probe.sh"
export MOETUNE_HELPER="$PY"  # the fake ignores the helper; doctor needs one that exists
unset FAKE_PROBE FAKE_TRITON FAKE_DEVICE FAKE_CONFIG_DIR FAKE_ENV_DIR

# doctor ARGS...: runs it, output in $T/out, exit code in $rc
doctor() { rc=0; "$M" doctor --python "$PY" "$@" >"$T/out" 2>&1 || rc=$?; }
expect() { [ "$rc" = "$1" ] || { cat "$T/out"; fail "$2: exit $rc, expected $1"; }; }
has() { grep -qF -- "$1" "$T/out" || { cat "$T/out"; fail "$2: no line with '$1'"; }; }

ENTRY='{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}'
NAME="E=128,N=384,device_name=NVIDIA_H200.json"   # qwen3-30b-a3b at TP 2 on an H200
SG=$T/sglang
for v in 3_6_0 3_9_0 3_10_0; do mkdir -p "$SG/configs/triton_$v"; echo "$ENTRY" >"$SG/configs/triton_$v/$NAME"; done

# SGLang, the file for the running Triton is there.
FAKE_CONFIG_DIR=$SG doctor --engine sglang --model qwen3-30b-a3b --tp 2
expect 0 "sglang found"
has "expected file: $SG/configs/triton_3_6_0/$NAME" "sglang found"
has "for Triton 3.6.0: found" "sglang found"
has "down file:" "sglang found"
pass "sglang: the file for Triton 3.6.0 is found (exit 0)"
! grep -q "^buys:" "$T/out" || { cat "$T/out"; fail "buys without a manifest"; }

# The manifest moetune wrote beside the file says what it buys; doctor reads it back.
cat >"$SG/configs/triton_3_6_0/manifest.json" <<EOF
{"$NAME": {"guard": {"speedup_over_default": [1.02, 1.43], "speedup_over_incumbent": [1.0, 1.07],
  "incumbent_file": "triton_3_5_1's file", "default_shipped_at": [8], "incumbent_shipped_at": [],
  "between_keys_checked": [136, 137], "keys_added": [136]}}}
EOF
BUYS="1.02x-1.43x faster than the engine's default, 1.00x-1.07x faster than triton_3_5_1's file; the default kept at 1 batch size; 1 key added"
FAKE_CONFIG_DIR=$SG doctor --engine sglang --model qwen3-30b-a3b --tp 2
expect 0 "sglang buys"
has "buys:          $BUYS" "sglang buys"
FAKE_CONFIG_DIR=$SG doctor --engine sglang --model qwen3-30b-a3b --tp 2 --json
[ "$(jq -r .buys "$T/out")" = "$BUYS" ] || { cat "$T/out"; fail "buys in --json"; }
echo '{"'"$NAME"'": {"entries": {}}}' >"$SG/configs/triton_3_6_0/manifest.json"
FAKE_CONFIG_DIR=$SG doctor --engine sglang --model qwen3-30b-a3b --tp 2
has "buys:          not measured (its manifest has no guard figures" "sglang buys, no guard"
rm "$SG/configs/triton_3_6_0/manifest.json"
pass "sglang: what the found file buys, from the manifest beside it (text and --json); none without a manifest"

# A Triton nobody tuned: the newest other folder by version order (3.10.0, not 3.9.0).
FAKE_TRITON=3.7.1 FAKE_CONFIG_DIR=$SG doctor --engine sglang --model qwen3-30b-a3b --tp 2
expect 3 "sglang fallback"
has "for Triton 3.7.1: missing" "sglang fallback"
has "the Triton 3.10.0 configs" "sglang fallback"
has "$SG/configs/triton_3_10_0/$NAME" "sglang fallback"
has "to tune:       moetune tune --backend triton --kernel sglang --python $PY --model qwen3-30b-a3b --tp 2 --out " "sglang fallback"
has "SGLANG_MOE_CONFIG_DIR=" "sglang fallback"
pass "sglang: missing for 3.7.1, falls back to triton_3_10_0 (exit 3), tune command printed"

# The variable wins and the bundled files are not searched: nothing there means defaults.
mkdir -p "$T/mine"
FAKE_ENV_DIR=$T/mine FAKE_CONFIG_DIR=$SG doctor --engine sglang --shape E=128,N=384,K=2048,topk=8
expect 3 "sglang env"
has "config folder: $T/mine (SGLANG_MOE_CONFIG_DIR)" "sglang env"
has "untuned defaults" "sglang env"
has "GROUP_SIZE_M 1 when M <= E (128)" "sglang env"
has "--shape E=128,N=384,K=2048,topk=8 --out $T/mine" "sglang env"
has "SGLANG_MOE_CONFIG_DIR=$T/mine" "sglang env"
FAKE_ENV_DIR=$T/mine FAKE_CONFIG_DIR=$SG doctor --engine sglang --shape E=128,N=384,K=2048,topk=8 --json
expect 3 "sglang env json"
[ "$(jq -r '.status + " " + .fallback + " " + .config_dir_from' "$T/out")" = "missing defaults SGLANG_MOE_CONFIG_DIR" ] \
  || { cat "$T/out"; fail "json output"; }
pass "sglang: SGLANG_MOE_CONFIG_DIR wins; untuned defaults spelled out (exit 3, --json too)"

# vLLM: flat folder, an H200 NVL reads the NVIDIA_H200 file.
VL=$T/vllm BUNDLED=$T/vllm-bundled
mkdir -p "$VL" "$BUNDLED"
FP8="E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
echo "{\"triton_version\": \"3.6.0\", ${ENTRY#\{}" >"$VL/$FP8"
FAKE_DEVICE="NVIDIA H200 NVL" FAKE_ENV_DIR=$VL FAKE_CONFIG_DIR=$BUNDLED \
  doctor --engine vllm --shape E=256,N=256,K=7168,topk=8,dtype=fp8_w8a8,block_shape=128x128
expect 0 "vllm found"
has "expected file: $VL/$FP8" "vllm found"
pass "vllm: H200 NVL finds the NVIDIA_H200 fp8 file in VLLM_TUNED_CONFIG_FOLDER (exit 0)"

# A file tuned with another Triton is not a match (vLLM would load it anyway).
FAKE_TRITON=3.7.0 FAKE_DEVICE="NVIDIA H200 NVL" FAKE_ENV_DIR=$VL FAKE_CONFIG_DIR=$BUNDLED \
  doctor --engine vllm --shape E=256,N=256,K=7168,topk=8,dtype=fp8_w8a8,block_shape=128x128
expect 3 "vllm other triton"
has "tuned with Triton 3.6.0" "vllm other triton"
has "--kernel vllm" "vllm other triton"
has "VLLM_TUNED_CONFIG_FOLDER=$VL" "vllm other triton"
# Not in the variable's folder, but bundled: that is what vLLM falls back to.
BF="E=8,N=7168,device_name=NVIDIA_H200.json"
echo "$ENTRY" >"$BUNDLED/$BF"
FAKE_ENV_DIR=$VL FAKE_CONFIG_DIR=$BUNDLED doctor --engine vllm --model mixtral-8x7b --tp 2
expect 3 "vllm bundled"
has "the file bundled with vLLM" "vllm bundled"
has "$BUNDLED/$BF" "vllm bundled"
has "--model mixtral-8x7b --tp 2 --out $VL" "vllm bundled"
FAKE_CONFIG_DIR=$BUNDLED doctor --engine vllm --model mixtral-8x7b --tp 2
expect 0 "vllm bundled only"
pass "vllm: another Triton's file and the bundled fallback are named (exit 3)"

# The probe cannot help: one line naming what and which interpreter, exit 1.
for mode in no_torch no_device no_engine silent crash; do
  FAKE_PROBE=$mode doctor --engine sglang --model qwen3-30b-a3b --tp 2
  expect 1 "probe $mode"
  [ "$(wc -l <"$T/out")" = 1 ] || { cat "$T/out"; fail "probe $mode: more than one line"; }
  has "$PY" "probe $mode"
  grep -q '^Traceback' "$T/out" && fail "probe $mode: a traceback as the message"
done
FAKE_PROBE=no_torch doctor --engine sglang --model qwen3-30b-a3b --tp 2
has "torch is not importable in $PY" "no torch"
FAKE_PROBE=no_device doctor --engine sglang --model qwen3-30b-a3b --tp 2
has "a CUDA device is not visible" "no device"
FAKE_PROBE=silent doctor --engine sglang --model qwen3-30b-a3b --tp 2
has "ImportError: something broke" "silent"
rc=0; "$M" doctor --engine vllm --python "$T/no-such-python" --model mixtral-8x7b >"$T/out" 2>&1 || rc=$?
expect 1 "no interpreter"
has "cannot run $T/no-such-python" "no interpreter"
rc=0; MOETUNE_HELPER=$T/none "$M" doctor --engine vllm --python "$PY" --model mixtral-8x7b >"$T/out" 2>&1 || rc=$?
expect 1 "no helper"
has "MOETUNE_HELPER=$T/none" "no helper"
pass "probe failures: exit 1 with one line naming what and the interpreter"

# Usage.
for args in "--model mixtral-8x7b" "--engine trtllm --model mixtral-8x7b" "--engine vllm" \
            "--engine vllm --model mixtral-8x7b --shape E=8,N=1,K=2,topk=1" "--engine vllm --shape E=8 --tp 2" \
            "--engine vllm --model nosuchmodel"; do
  # shellcheck disable=SC2086
  doctor $args
  expect 2 "usage: $args"
done
pass "usage errors exit 2"
