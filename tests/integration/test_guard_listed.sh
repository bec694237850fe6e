#!/usr/bin/env bash
# The ship guard over a listed space (--configs) with racing and the decide step on: the guard's
# configs that are not listed are marked searched = 0 (they were measured only because of the
# guard), and none of them is ever the searched pick: an entry labelled "pick" holds a listed
# config; where a guard config of that batch size is the fastest it ships with its own label.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
q() { sqlite3 -batch -noheader "$1" "$2"; }
NAME="E=128,N=768,device_name=NVIDIA_H200.json"
LIST=32x128x64x1x4x4,64x128x64x1x4x3,64x256x64x32x8x3,128x128x64x16x8x4,128x256x64x16x8x3
INC8=16x128x128x1x4x3 # the incumbent's key-8 entry: not listed, fast at every small M in the sim
cat >"$T/inc.json" <<EOF
{"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 4},
 "8": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3},
 "512": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 16, "num_warps": 8, "num_stages": 3}}
EOF
cfg() { q "$1" "SELECT block_m || 'x' || block_n || 'x' || block_k || 'x' || group_m || 'x' || num_warps || 'x' || num_stages
  FROM configs WHERE id = $2"; }
tune() { # NAME ARGS...: a guarded tune of the listed space into $T/NAME
  local n=$1
  shift
  "$M" tune --backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16,64,256,1024 \
    --configs $LIST --baseline "$T/inc.json" "$@" --db "$T/$n.db" --out "$T/$n" >"$T/$n.out" 2>"$T/$n.err" \
    || { tail "$T/$n.err"; fail "tune $n exited $?"; }
}

for mode in plain race; do
  args=()
  [ $mode = race ] && args=(--race-margin 0.2 --decide-margin 0.02)
  tune $mode "${args[@]}"
  # 3: every guard row's searched flag says whether its config is one of the listed
  while IFS='|' read -r bs role cid searched; do
    c=$(cfg "$T/$mode.db" "$cid")
    want=0
    [[ ",$LIST," == *",$c,"* ]] && want=1
    [ "$searched" = $want ] || fail "$mode: the $role row at M=$bs ($c) says searched=$searched"
  done < <(q "$T/$mode.db" "SELECT batch_size, role, config_id, searched FROM guard")
  [ "$(q "$T/$mode.db" "SELECT COUNT(*) FROM guard WHERE searched = 0")" -gt 0 ] || fail "$mode: no guard row outside the list"
done
pass "--configs, plain and with racing: the guard rows' searched flags are the list's"

for mode in plain race; do
  # 4: an entry labelled pick holds a listed config; the incumbent's key-8 config is never a pick
  rec=$(jq -c --arg n "$NAME" '.[$n]' "$T/$mode/sim/manifest.json")
  for k in $(echo "$rec" | jq -r '.entries | keys[]'); do
    e=$(echo "$rec" | jq -c --arg k "$k" '.entries[$k]')
    shipped=$(echo "$e" | jq -r '.guard.shipped')
    c=$(cfg "$T/$mode.db" "$(echo "$e" | jq .config_id)")
    if [ "$shipped" = pick ]; then
      [[ ",$LIST," == *",$c,"* ]] || fail "$mode: M=$k ships $c labelled pick, a config outside the list"
    else
      [ "$(echo "$e" | jq -r --arg s "$shipped" '.guard[$s].config')" = "$c" ] \
        || fail "$mode: M=$k ships $c labelled $shipped, not that guard config's"
    fi
  done
  [ "$(echo "$rec" | jq -r '.entries["1"].guard.shipped')" != pick ] || [ "$(echo "$rec" | jq -r '.entries["1"].config_id')" != \
    "$(q "$T/$mode.db" "SELECT id FROM configs WHERE block_m = 16 AND block_n = 128 AND block_k = 128 AND group_m = 1 AND num_stages = 3")" ] \
    || fail "$mode: M=1 ships the incumbent's key-8 config $INC8 as the pick"
  pass "$mode --configs: every entry labelled pick is listed, the others are their guard config"
done
