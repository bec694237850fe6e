#!/usr/bin/env bash
# The ship guard between the keys (sim backend): at a switch point the entry the engine runs is
# the one the file ships at the nearest key (its pick, or the default's or incumbent's config the
# guard shipped there), and that literal entry is what the point is checked against; a key added
# moves the switch points, and further rounds (at most two) measure the moved ones; the manifest's
# between_keys_checked lists only points where the written file's entry was measured, and the
# written file's switch points that were not are listed as between_keys_unchecked.
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

# switch_points FILE: the points where the engine's nearest entry changes config (one a line)
switch_points() {
  jq -r 'to_entries | map(select(.key | test("^[0-9]+$")) | {k: (.key | tonumber), c: (.value | tostring)}) | sort_by(.k)
    | . as $e | range(0; length - 1) | select($e[.].c != $e[. + 1].c) | ($e[.].k) as $a | ($e[. + 1].k) as $b
    | ($a + (($b - $a) / 2 | floor)) as $mid | ($mid, $mid + 1) | select(. > $a and . < $b)' "$1"
}
# check_manifest FILE DB: checked points all measured with the file's entry there; every switch point
# of the written file either checked or listed unchecked, never both
check_manifest() {
  local f=$1 db=$2 g
  g=$(jq -c --arg n "$NAME" '.[$n].guard' "$(dirname "$f")/manifest.json")
  for m in $(echo "$g" | jq -r '.between_keys_checked[]'); do
    k=$(jq -r --argjson m "$m" 'keys | map(tonumber) | min_by(if . > $m then . - $m else $m - . end)' "$f")
    IFS=x read -r bm bn bk gm nw ns <<<"$(cfg_of "$f" "$k")"
    [ "$(q "$db" "SELECT COUNT(*) FROM results r JOIN configs c ON c.id = r.config_id WHERE r.batch_size = $m
          AND r.status = 'ok' AND c.block_m = $bm AND c.block_n = $bn AND c.block_k = $bk AND c.group_m = $gm
          AND c.num_warps = $nw AND c.num_stages = $ns")" -ge 1 ] || fail "M=$m is listed as checked, its entry (key $k) was not measured there"
  done
  for m in $(switch_points "$f"); do
    c=$(echo "$g" | jq --argjson m "$m" '[(.between_keys_checked | index($m)), (.between_keys_unchecked | index($m))] | map(select(. != null)) | length')
    [ "$c" = 1 ] || fail "switch point $m of the written file is listed $c times: $g"
  done
}

# The key added at 8 moves the engine's switch points (to 4/5 between keys 1 and 8): a further
# round measures them, and the manifest lists them checked only as measured
g=$(echo "$rec" | jq -c .guard)
check_manifest "$F" "$T/t.db"
echo "$g" | jq -e '(.between_keys_checked | index(4)) and (.between_keys_checked | index(5))' >/dev/null \
  || fail "the moved switch points 4 and 5 were not measured: $g"
[ "$(q "$T/t.db" "SELECT COUNT(*) FROM guard WHERE batch_size IN (4, 5) AND role = 'nearest' AND engine = ''")" = 2 ] \
  || fail "no further round's rows at 4 and 5"
[ "$(echo "$g" | jq -c .between_keys_unchecked)" = "[]" ] || fail "points left unchecked: $g"
pass "the moved switch points measured in further rounds ($(echo "$g" | jq -c .between_keys_checked)); every switch point checked"

# Rounds are bounded: keys 1 and 4096 add a key at 2048, then 1024, then 512; after three rounds the
# points the last key moved (256/257) are left unmeasured and the manifest says so
"$M" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,4096 \
  --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3 \
  --sim-faults "speed=$D1@1:0.9754" --db "$T/b.db" --out "$T/b" >"$T/b.out" 2>"$T/b.err" || { tail "$T/b.err"; fail "tune exited $?"; }
gb=$(jq -c --arg n "$NAME" '.[$n].guard' "$T/b/sim/manifest.json")
[ "$(q "$T/b.db" "SELECT group_concat(batch_size) FROM (SELECT DISTINCT batch_size FROM guard WHERE role = 'nearest' ORDER BY batch_size)")" \
  = "512,513,1024,1025,2048,2049" ] || fail "not three rounds of switch points: $gb"
[ "$(echo "$gb" | jq -c .between_keys_unchecked)" = "[256,257]" ] || fail "the fourth round's points are not listed unchecked: $gb"
[ "$(q "$T/b.db" "SELECT COUNT(*) FROM results WHERE batch_size IN (256, 257)")" = 0 ] || fail "256/257 were measured"
check_manifest "$T/b/sim/$NAME" "$T/b.db"
pass "three rounds at most; the points beyond are listed in between_keys_unchecked and never as checked"

# A guard config outside the searched space is never a key's searched pick at the switch points:
# the engine's default (BLOCK_SIZE_M 16, not searched) planted fastest at 16 ships there as the
# default, but the rows "key 16's pick" hold the search's own best
"$M" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16 \
  --block-m 32,64 --block-n 64,128 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3 \
  --sim-faults "speed=$D1@16:0.3" --db "$T/s.db" --out "$T/s" >"$T/s.out" 2>"$T/s.err" || { tail "$T/s.err"; fail "tune exited $?"; }
[ "$(q "$T/s.db" "SELECT COUNT(*) FROM guard WHERE role = 'nearest'")" -gt 0 ] || fail "no switch point measured"
[ "$(q "$T/s.db" "SELECT COUNT(*) FROM guard WHERE batch_size = 16 AND role = 'default' AND searched = 0")" -gt 0 ] \
  || fail "the default at 16 is not a guard config outside the space"
[ "$(q "$T/s.db" "SELECT COUNT(*) FROM guard g WHERE g.source = 'key 16''s pick' AND EXISTS (SELECT 1 FROM guard o
      WHERE o.sweep_id = g.sweep_id AND o.shape_id = g.shape_id AND o.config_id = g.config_id AND o.searched = 0)")" = 0 ] \
  || fail "key 16's pick at a switch point is a guard config outside the space: $(q "$T/s.db" "SELECT * FROM guard WHERE source LIKE 'key 16%'")"
pass "a guard config outside the space is never a key's searched pick at the switch points"
