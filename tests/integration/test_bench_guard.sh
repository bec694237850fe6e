#!/usr/bin/env bash
# The ship guard's GPU benchmark, its plumbing on CPU: bench/triton/guard_check.py --dry-run on a
# sim export lists exactly the file's keys and the batch sizes the manifest says were checked
# between them, each with the entry the engine takes there (the nearest key, the smaller one on a
# tie, from the _down file too), the engine's default for that M and the incumbent's nearest
# entry; bad input is one line and exit 2; bench/triton/guard.sh runs its three tunes on sim.
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
CHECK=$S/bench/triton/guard_check.py
NAME="E=128,N=768,device_name=NVIDIA_H200.json"
A=16x64x64x1x4x3 X=64x128x64x1x4x3
cfg() { jq -r --arg k "$2" '.[$k] | "\(.BLOCK_SIZE_M)x\(.BLOCK_SIZE_N)x\(.BLOCK_SIZE_K)x\(.GROUP_SIZE_M)x\(.num_warps)x\(.num_stages)"' "$1"; }
entry() { printf '"%s": {"BLOCK_SIZE_M": %s, "BLOCK_SIZE_N": %s, "BLOCK_SIZE_K": %s, "GROUP_SIZE_M": %s, "num_warps": %s, "num_stages": %s}' \
  "$1" $(echo "$2" | tr x ' '); }

# An incumbent keyed elsewhere than the sweep: M=136 lies midway between its keys 96 and 176
mkdir -p "$T/inc"
echo "{$(entry 1 128x256x64x16x8x3), $(entry 96 32x128x64x1x4x4), $(entry 176 64x256x64x32x8x3),
 $(entry 4096 128x128x64x16x8x4)}" >"$T/inc/$NAME"
# A fast at 1, 16 and 136 (and at 8 and 9, between keys 1 and 16), X at 256, 4096 and 137 (and at
# 2176 and 2177): the picks are A below the switch point between keys 16 and 256 (136: a tie, the
# smaller key's) and X from 137 on; every pair of keys is checked (the defaults differ from the
# picks) and no point adds a key
"$BIN/moetune" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 \
  --batch-sizes 1,16,256,4096 --configs $A,$X,32x128x64x1x4x3,128x128x64x16x8x4 --race-margin 0.2 --decide-margin 0.02 \
  --sim-faults "speed=$A@1:0.5,speed=$A@16:0.5,speed=$A@8:0.5,speed=$A@9:0.5,speed=$A@136:0.5,speed=$X@256:0.3,speed=$X@4096:0.3,speed=$X@137:0.3,speed=$X@2176:0.3,speed=$X@2177:0.3" \
  --baseline "$T/inc/$NAME" --db "$T/t.db" --out "$T/out" >"$T/tune.out" 2>"$T/tune.log" || fail "tune exited $?"
F=$T/out/sim/$NAME
[ "$(jq -c --arg n "$NAME" '.[$n].guard | [.between_keys_checked, .keys_added]' "$T/out/sim/manifest.json")" = "[[8,9,136,137,2176,2177],[]]" ] \
  || fail "the planted sweep's guard: $(jq -c --arg n "$NAME" '.[$n].guard' "$T/out/sim/manifest.json")"

python3 "$CHECK" --file "$F" --incumbent "$T/inc/$NAME" --dry-run --json >"$T/plan.json" 2>"$T/plan.err" \
  || fail "dry run exited $?: $(cat "$T/plan.err")"
# the points: the file's keys and the manifest's between_keys_checked, nothing else
want=$(jq -c -s --arg n "$NAME" '(.[0] | keys | map(tonumber)) + .[1][$n].guard.between_keys_checked | unique' \
  "$F" "$T/out/sim/manifest.json")
[ "$(jq -c -s 'map(.m)' "$T/plan.json")" = "$want" ] || fail "points $(jq -c -s 'map(.m)' "$T/plan.json"), want $want"
[ "$want" = "[1,8,9,16,136,137,256,2176,2177,4096]" ] || fail "the planted file's points are $want"
pt() { jq -r --argjson m "$1" "select(.m == \$m) | $2" "$T/plan.json"; }
# at the switch point: 136 is as far from 16 as from 256 and takes key 16's entry, 137 key 256's
[ "$(pt 136 '[.where, .shipped_key, .shipped] | join(" ")')" = "between 16 $(cfg "$F" 16)" ] || fail "M=136: $(pt 136 .)"
[ "$(pt 137 '[.where, .shipped_key, .shipped] | join(" ")')" = "between 256 $(cfg "$F" 256)" ] || fail "M=137: $(pt 137 .)"
[ "$(cfg "$F" 16)" = $A ] && [ "$(cfg "$F" 256)" = $X ] || fail "the planted picks are not shipped"
for m in 1 16 256 4096; do
  [ "$(pt $m '[.where, .shipped_key, .shipped] | join(" ")')" = "key $m $(cfg "$F" $m)" ] || fail "M=$m: $(pt $m .)"
done
# the engine's default: 16x32x64 GROUP 1 up to E = 128, 64x64x32 GROUP 8 above; the guard's own at the keys
[ "$(jq -r -s 'map("\(.m):\(.default | join(","))") | join(" ")' "$T/plan.json")" \
  = "1:16x32x64x1x4x3 8:16x32x64x1x4x3 9:16x32x64x1x4x3 16:16x32x64x1x4x3 136:64x64x32x8x4x3 137:64x64x32x8x4x3 \
256:64x64x32x8x4x3 2176:64x64x32x8x4x3 2177:64x64x32x8x4x3 4096:64x64x32x8x4x3" ] \
  || fail "defaults: $(jq -r -s 'map("\(.m):\(.default)") | join(" ")' "$T/plan.json")"
# the incumbent's nearest entry: 16 takes key 1, 136 (midway between 96 and 176) key 96, 137 key 176
[ "$(jq -r -s 'map("\(.m):\(.incumbent_key)") | join(" ")' "$T/plan.json")" = "1:1 8:1 9:1 16:1 136:96 137:176 256:176 2176:4096 2177:4096 4096:4096" ] \
  || fail "incumbent keys: $(jq -r -s 'map("\(.m):\(.incumbent_key)") | join(" ")' "$T/plan.json")"
[ "$(pt 136 .incumbent)" = "$(cfg "$T/inc/$NAME" 96)" ] || fail "M=136's incumbent config: $(pt 136 .incumbent)"
# without --incumbent, the file the manifest's guard names (the tune's --baseline)
python3 "$CHECK" --file "$F" --dry-run --json >"$T/plan2.json" 2>"$T/plan2.err" || fail "dry run exited $?"
cmp -s "$T/plan.json" "$T/plan2.json" || fail "the manifest's incumbent is not the --baseline file: $(head -n 2 "$T/plan2.json")"
pass "dry run: keys and the checked points between them, nearest keys (136 -> 16, 137 -> 256), defaults, incumbent"

# A split pair: the _down file's own nearest entry runs the second GEMM
mkdir -p "$T/split"
cp "$F" "$T/out/sim/manifest.json" "$T/split/"
echo "{$(entry 1 16x32x64x1x4x3), $(entry 200 64x64x64x1x4x3), $(entry 4096 64x128x128x1x8x3)}" \
  >"$T/split/${NAME%.json}_down.json"
python3 "$CHECK" --file "$T/split/$NAME" --dry-run --json >"$T/split.json" || fail "split dry run exited $?"
[ "$(jq -r -s 'map("\(.m):\(.shipped_down_key):\(.shipped_down)") | join(" ")' "$T/split.json")" \
  = "1:1:16x32x64x1x4x3 8:1:16x32x64x1x4x3 9:1:16x32x64x1x4x3 16:1:16x32x64x1x4x3 136:200:16x64x64x1x4x3 \
137:200:64x64x64x1x4x3 256:200:64x64x64x1x4x3 2176:4096:64x128x128x1x8x3 2177:4096:64x128x128x1x8x3 4096:4096:64x128x128x1x8x3" ] \
  || fail "down entries: $(jq -r -s 'map("\(.m):\(.shipped_down_key):\(.shipped_down)") | join(" ")' "$T/split.json")"
# at 136 key 16's up entry (BLOCK_SIZE_M 16) meets key 200's down entry (64): SGLang runs the down
# GEMM with the up entry's BLOCK_SIZE_M (one align for both), and the list says so
[ "$(jq -r -s 'map(select(.notes | length > 0) | .m) | join(" ")' "$T/split.json")" = 136 ] \
  || fail "BLOCK_SIZE_M notes at: $(jq -r -s 'map(select(.notes | length > 0) | .m) | join(" ")' "$T/split.json")"
python3 "$CHECK" --file "$T/split/$NAME" --dry-run >"$T/split.txt" || fail "split dry run (table) exited $?"
grep -q "down 64x64x64x1x4x3@200" "$T/split.txt" || fail "the table does not show the down entry: $(cat "$T/split.txt")"
pass "split: the _down file's nearest entries listed, BLOCK_SIZE_M the up entry's as SGLang runs it"

# --switch-points: where the file as written switches between two different entries (a key 3001
# with A's entry switches at 1628/1629 from 256's X and at 3548/3549 back to 4096's X)
mkdir -p "$T/sw"
jq --argjson a "$(jq '.["16"]' "$F")" '. + {"3001": $a}' "$F" >"$T/sw/$NAME"
cp "$T/out/sim/manifest.json" "$T/sw/"
python3 "$CHECK" --file "$T/sw/$NAME" --dry-run --json --switch-points >"$T/sw.json" || fail "--switch-points exited $?"
[ "$(jq -r -s 'map("\(.m):\(.where):\(.shipped_key)") | join(" ")' "$T/sw.json")" = "1:key:1 8:between:1 9:between:16 16:key:16 \
136:between:16 137:between:256 256:key:256 1628:switch:256 1629:switch:3001 2176:between:3001 2177:between:3001 3001:key:3001 \
3548:switch:3001 3549:switch:4096 4096:key:4096" ] \
  || fail "switch points: $(jq -r -s 'map("\(.m):\(.where):\(.shipped_key)") | join(" ")' "$T/sw.json")"
python3 "$CHECK" --file "$T/sw/$NAME" --dry-run --json >"$T/nosw.json" || fail "dry run exited $?"
[ "$(jq -c -s 'map(.m)' "$T/nosw.json")" = "[1,8,9,16,136,137,256,2176,2177,3001,4096]" ] || fail "without --switch-points: $(jq -c -s 'map(.m)' "$T/nosw.json")"
pass "--switch-points: the file's own switch points between different entries, and only with it"

# Bad input: one line, exit 2
"$BIN/moetune" tune --backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,256 \
  --configs $A,$X --guard off --db "$T/o.db" --out "$T/off" >/dev/null 2>&1 || fail "tune --guard off exited $?"
rc=0; python3 "$CHECK" --file "$T/off/sim/$NAME" --dry-run >/dev/null 2>"$T/e1" || rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/e1")" = 1 ] && grep -q "has no guard figures" "$T/e1" || fail "no guard figures: exit $rc, $(cat "$T/e1")"
rc=0; python3 "$CHECK" --file "$T/nothing.json" --dry-run >/dev/null 2>"$T/e2" || rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/e2")" = 1 ] && grep -q "nothing.json" "$T/e2" || fail "a missing file: exit $rc, $(cat "$T/e2")"
echo '{"1": {"BLOCK_SIZE_M": 16}}' >"$T/split/bad.json"
rc=0; python3 "$CHECK" --file "$T/split/$NAME" --incumbent "$T/split/bad.json" --dry-run >/dev/null 2>"$T/e3" || rc=$?
[ $rc = 2 ] && grep -q "entry 1 lacks" "$T/e3" || fail "a broken incumbent: exit $rc, $(cat "$T/e3")"
pass "no guard figures, a missing file, a broken incumbent: one line, exit 2"

# guard.sh's three tunes and checks, on sim workers
BACKEND=sim MT_BIN_DIR=$BIN bash "$S/bench/triton/guard.sh" "$T/bench" >"$T/bench.out" 2>&1 \
  || { tail -n 30 "$T/bench.out"; fail "guard.sh exited $?"; }
for c in a-qwen3-tp1 b-mixtral-tp2 c-sglang-new; do
  grep -q "^would measure kernel" "$T/bench/$c/check.txt" || fail "$c: no check: $(cat "$T/bench/$c/check.txt")"
  [ -d "$T/bench/$c/logs" ] || fail "$c: the tune's logs are not under OUT_DIR"
done
grep -q "kernel sglang, shape E,N,K,topk 128,768,2048,8" "$T/bench/c-sglang-new/check.txt" || fail "(c) is not the sglang kernel"
grep -q "shape E,N,K,topk 8,7168,4096,2" "$T/bench/b-mixtral-tp2/check.txt" || fail "(b) is not Mixtral TP2"
grep -q "guard.sh: a:0 b:0 c:0" "$T/bench.out" || fail "guard.sh's verdicts: $(tail -n 1 "$T/bench.out")"
pass "guard.sh BACKEND=sim: three guarded tunes, each with its check's list"
