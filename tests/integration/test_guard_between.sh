#!/usr/bin/env bash
# The ship guard between the keys (sim backend): at a switch point the entry the engine runs is
# the one the file ships at the nearest key (its pick, or the default's or incumbent's config the
# guard shipped there), and that literal entry is what the point is checked against; the
# manifest's between_keys_checked lists only points where the written file's entry was measured,
# and the written file's switch points that were not are listed as between_keys_unchecked.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
q() { sqlite3 -batch -noheader "$1" "$2"; }
NAME="E=128,N=768,device_name=NVIDIA_H200.json"
D1=16x32x64x1x4x3 # SGLang's bf16 default at M <= E: planted within the noise of the pick at M=1, so key 1 ships it
Y=32x128x64x1x4x3 # planted fastest at 16, 9 and 8 (8: the switch point that takes key 1's entry)
cfg_of() { jq -r --arg k "$2" '.[$k] | "\(.BLOCK_SIZE_M)x\(.BLOCK_SIZE_N)x\(.BLOCK_SIZE_K)x\(.GROUP_SIZE_M)x\(.num_warps)x\(.num_stages)"' "$1"; }
"$M" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16 \
  --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3 \
  --sim-faults "speed=$D1@1:0.9754,speed=$Y@16:0.3,speed=$Y@8:0.3,speed=$Y@9:0.3" --db "$T/t.db" --out "$T/o" >"$T/t.out" 2>"$T/t.err" \
  || { tail "$T/t.err"; fail "tune exited $?"; }
F=$T/o/sim/$NAME
rec=$(jq -c --arg n "$NAME" '.[$n]' "$T/o/sim/manifest.json")
[ "$(cfg_of "$F" 1)" = $D1 ] && [ "$(echo "$rec" | jq -r '.entries["1"].guard.shipped')" = default ] \
  || fail "key 1 does not ship the default: $(cfg_of "$F" 1), $(echo "$rec" | jq -c '.entries["1"].guard.shipped')"
pick1=$(q "$T/t.db" "SELECT config_id FROM guard WHERE batch_size = 8 AND role = 'nearest' AND engine = ''")
[ -n "$pick1" ] && [ "$pick1" != "$(echo "$rec" | jq '.entries["1"].config_id')" ] || fail "key 1's pick is the default itself"
# 8 takes key 1's entry: the default the file ships there, measured at 8 beside key 1's pick
[ "$(cfg_of "$F" 8)" = $Y ] || fail "key 8 was not added with the planted config: $(cfg_of "$F" 8)"
a=$(echo "$rec" | jq -c '.entries["8"].guard.added')
[ "$(echo "$a" | jq -r '"\(.nearest_key) \(.nearest_config)"')" = "1 $D1" ] || fail "M=8's nearest entry is not key 1's shipped default: $a"
near=$(q "$T/t.db" "SELECT median_us FROM results WHERE batch_size = 8 AND status = 'ok' AND config_id = $(echo "$a" | jq .nearest_config_id)")
awk -v n="$near" -v m="$(echo "$a" | jq .nearest_median_us)" 'BEGIN { d = n - m; if (d < 0) d = -d; exit !(d < 1e-6) }' \
  || fail "M=8: nearest_median_us $(echo "$a" | jq .nearest_median_us), the database's row of $D1 at 8 $near"
echo "$a" | jq -r .why | grep -qF "key 1's entry ($D1)" || fail "M=8's why does not name the shipped entry: $a"
pass "between keys 1 and 16: M=8 checked against key 1's shipped default $D1 (${near} us), key 8 added"

# The written file switches from key 1's D1 to key 8's Y at 4/5: points the manifest must not claim
g=$(echo "$rec" | jq -c .guard)
for m in $(echo "$g" | jq -r '.between_keys_checked[]'); do
  k=$(jq -r --argjson m "$m" 'keys | map(tonumber) | min_by(if . > $m then . - $m else $m - . end)' "$F")
  IFS=x read -r bm bn bk gm nw ns <<<"$(cfg_of "$F" "$k")"
  [ "$(q "$T/t.db" "SELECT COUNT(*) FROM results r JOIN configs c ON c.id = r.config_id WHERE r.batch_size = $m
        AND r.status = 'ok' AND c.block_m = $bm AND c.block_n = $bn AND c.block_k = $bk AND c.group_m = $gm
        AND c.num_warps = $nw AND c.num_stages = $ns")" -ge 1 ] || fail "M=$m is listed as checked, its entry (key $k) was not measured there"
done
for m in $(echo "$g" | jq -r '.between_keys_unchecked[]?'); do
  echo "$g" | jq -e --argjson m "$m" '.between_keys_checked | index($m) | not' >/dev/null || fail "M=$m both checked and unchecked: $g"
done
[ "$(echo "$g" | jq -c '[.between_keys_checked, .keys_added]')" = "[[8,9],[8]]" ] || fail "checked and added: $g"
[ "$(echo "$g" | jq -c '.between_keys_unchecked')" = "[4,5]" ] || fail "the moved switch points 4 and 5 are not listed unchecked: $g"
pass "manifest: checked points all measured with the file's entry; the moved points 4 and 5 listed unchecked"
