#!/usr/bin/env bash
# The ship guard (sim backend): the engine's default config and the incumbent file's entry for
# each batch size are measured beside the finalists, whatever the search space; export never
# ships a config slower than either (a tie goes to the incumbent); the manifest says what each
# entry buys over both, and its figures are the database's.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
q() { sqlite3 -batch -noheader "$1" "$2"; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
NAME="E=128,N=768,device_name=NVIDIA_H200.json"
BS=1,16,256,4096
SPACE=(--block-m 16,32,64,128 --block-n 64,128,256 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3)
SPEC=(--backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes $BS "${SPACE[@]}")
DEF=64x64x32x8x4x3 # SGLang's bf16 default for M > E: BLOCK_SIZE_K 32 and GROUP_SIZE_M 8 are outside this space
cfg_of() { jq -r --arg k "$2" '.[$k] | "\(.BLOCK_SIZE_M)x\(.BLOCK_SIZE_N)x\(.BLOCK_SIZE_K)x\(.GROUP_SIZE_M)x\(.num_warps)x\(.num_stages)"' "$1"; }
db_cfg() { q "$1" "SELECT block_m || 'x' || block_n || 'x' || block_k || 'x' || group_m || 'x' || num_warps || 'x' || num_stages FROM configs WHERE id = $2"; }

# ---- 1: the default beats every candidate at M=256 (planted): the guard ships it and says so
"$M" tune "${SPEC[@]}" --sim-faults "speed=$DEF@256:0.5" --db "$T/d.db" --out "$T/d" >"$T/d.out" 2>"$T/d.err" \
  || { tail "$T/d.err"; fail "tune exited $?"; }
KEYS="g.batch_size IN (1, 16, 256, 4096)" # the sweep's batch sizes; the others lie between them
[ "$(q "$T/d.db" "SELECT COUNT(*) FROM guard g WHERE role = 'default' AND engine = 'sglang' AND $KEYS")" = 4 ] \
  || fail "not one default guard row per batch size"
[ "$(q "$T/d.db" "SELECT COUNT(*) FROM guard g JOIN results r ON r.sweep_id = g.sweep_id AND r.shape_id = g.shape_id
      AND r.config_id = g.config_id AND r.batch_size = g.batch_size WHERE r.status = 'ok' AND r.phase = 2
      AND g.role = 'default' AND $KEYS")" = 4 ] \
  || fail "the defaults were not measured side by side (phase 2) at every batch size"
[ "$(q "$T/d.db" "SELECT searched FROM guard WHERE batch_size = 256")" = 0 ] || fail "the M > E default is marked searched"
[ "$(cfg_of "$T/d/sim/$NAME" 256)" = "$DEF" ] || fail "the file's 256 entry is $(cfg_of "$T/d/sim/$NAME" 256), not the default"
rec=$(jq -c --arg n "$NAME" '.[$n]' "$T/d/sim/manifest.json")
[ "$(echo "$rec" | jq -r '.entries["256"].guard.shipped')" = default ] || fail "the manifest does not say the default shipped"
echo "$rec" | jq -e '.guard.default_shipped_at | index(256)' >/dev/null || fail "default_shipped_at: $(echo "$rec" | jq -c .guard)"
for bs in 1 16 4096; do
  [ "$(echo "$rec" | jq -r --arg k $bs '.entries[$k].guard.shipped')" = pick ] || fail "batch size $bs: not the pick"
done
grep -q "faster than the engine's default; the default kept at [0-9]* batch size" "$T/d.out" \
  || fail "tune's last lines do not say what the file buys: $(cat "$T/d.out")"
# `results` marks the guard's rows apart from the searched ones
[ "$("$M" results --db "$T/d.db" --json | jq -s 'map(select(.guard == "default" and ([.batch_size] | inside([1, 16, 256, 4096])))) | length')" = 4 ] \
  || fail "results --json does not mark the 4 default rows"
[ "$("$M" results --db "$T/d.db" --batch-size 256 | grep -c 'guard: default$')" = 1 ] || fail "results does not mark the default"
pass "planted default at M=256 shipped, manifest, tune and results say so"

# The manifest's figures are the database's: each entry's default median and speed-up
for bs in 1 16 256 4096; do
  e=$(echo "$rec" | jq -c --arg k $bs '.entries[$k]')
  cid=$(echo "$e" | jq .guard.default.config_id)
  want=$(q "$T/d.db" "SELECT median_us FROM results WHERE batch_size = $bs AND config_id = $cid AND status = 'ok'")
  got=$(echo "$e" | jq .guard.default.median_us)
  ship=$(echo "$e" | jq .median_us)
  [ "$(q "$T/d.db" "SELECT median_us FROM results WHERE batch_size = $bs AND config_id = $(echo "$e" | jq .config_id)")" != "" ] \
    || fail "batch size $bs: the shipped row is not in the database"
  awk -v a="$want" -v b="$got" -v s="$ship" -v x="$(echo "$e" | jq .guard.default.speedup)" \
    'BEGIN { d = a - b; if (d < 0) d = -d; r = a / s - x; if (r < 0) r = -r; exit !(d < 1e-6 && r < 1e-9 && x >= 1) }' \
    || fail "batch size $bs: default median $got (database $want), speed-up $(echo "$e" | jq .guard.default.speedup)"
  [ "$(db_cfg "$T/d.db" "$cid")" = "$(echo "$e" | jq -r .guard.default.config)" ] || fail "batch size $bs: the default's config"
done
pass "manifest: default medians and speed-ups match the database, none under 1.00x"

# ---- 2: an incumbent from --baseline FILE; within the noise the incumbent wins the tie
"$M" tune "${SPEC[@]}" --db "$T/a.db" --out "$T/a" >"$T/a.out" 2>"$T/a.err" || { tail "$T/a.err"; fail "tune exited $?"; }
# at M=1 this space's winner and runner-up tie in the sim: the runner-up becomes the incumbent
win=$(q "$T/a.db" "SELECT config_id FROM results WHERE batch_size = 1 AND phase = 2 AND status = 'ok' ORDER BY median_us, config_id LIMIT 1")
read -r ru margin <<<"$(q "$T/a.db" "SELECT u.config_id, (u.median_us - b.median_us) / sqrt(b.stddev_us * b.stddev_us + u.stddev_us * u.stddev_us)
   FROM results b JOIN results u ON u.batch_size = 1 AND u.phase = 2 AND u.status = 'ok' AND u.config_id <> b.config_id
   WHERE b.batch_size = 1 AND b.config_id = $win ORDER BY u.median_us LIMIT 1" | tr '|' ' ')"
awk -v m="$margin" 'BEGIN { exit !(m < 1) }' || fail "no near tie at M=1 to plant an incumbent on (margin $margin)"
IFS=x read -r bm bn bk gm nw ns <<<"$(db_cfg "$T/a.db" "$ru")"
mkdir -p "$T/base"
cat >"$T/base/$NAME" <<EOF
{"1": {"BLOCK_SIZE_M": $bm, "BLOCK_SIZE_N": $bn, "BLOCK_SIZE_K": $bk, "GROUP_SIZE_M": $gm, "num_warps": $nw, "num_stages": $ns},
 "4096": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}
EOF
"$M" tune "${SPEC[@]}" --baseline "$T/base/$NAME" --db "$T/b.db" --out "$T/b" >"$T/b.out" 2>"$T/b.err" \
  || { tail "$T/b.err"; fail "tune --baseline exited $?"; }
# the runner-up's id in b.db (the warm start stores the incumbent's configs first: ids differ from a.db's)
ru=$(q "$T/b.db" "SELECT id FROM configs WHERE block_m = $bm AND block_n = $bn AND block_k = $bk AND group_m = $gm AND num_warps = $nw AND num_stages = $ns")
[ "$(q "$T/b.db" "SELECT batch_size || ':' || config_id FROM guard g WHERE role = 'incumbent' AND $KEYS ORDER BY batch_size" | paste -sd' ')" \
  = "1:$ru 16:$ru 256:$ru 4096:$(q "$T/b.db" "SELECT id FROM configs WHERE block_m = 16 AND block_n = 64 AND block_k = 64 AND group_m = 1 AND num_warps = 4 AND num_stages = 3")" ] \
  || fail "the incumbent rows are not the nearest keys entries"
[ "$(cfg_of "$T/b/sim/$NAME" 1)" = "${bm}x${bn}x${bk}x${gm}x${nw}x${ns}" ] || fail "M=1: the near tie did not go to the incumbent"
recb=$(jq -c --arg n "$NAME" '.[$n]' "$T/b/sim/manifest.json")
[ "$(echo "$recb" | jq -r '.entries["1"].guard.shipped')" = incumbent ] || fail "M=1: the manifest does not say the incumbent shipped"
[ "$(echo "$recb" | jq -r '.entries["4096"].guard.shipped')" = pick ] || fail "M=4096: the slow incumbent was not beaten"
x=$(echo "$recb" | jq '.entries["4096"].guard.incumbent.speedup')
inc=$(q "$T/b.db" "SELECT r.median_us FROM results r JOIN guard g ON g.config_id = r.config_id AND g.batch_size = r.batch_size
       AND g.sweep_id = r.sweep_id
       WHERE g.role = 'incumbent' AND g.batch_size = 4096")
awk -v x="$x" -v i="$inc" -v s="$(echo "$recb" | jq '.entries["4096"].median_us')" 'BEGIN { d = i / s - x; if (d < 0) d = -d; exit !(x > 1 && d < 1e-9) }' \
  || fail "M=4096: speed-up over the incumbent $x, database $inc / shipped"
grep -q "faster than $NAME" "$T/b.out" || fail "tune does not name the incumbent file: $(cat "$T/b.out")"
# the report draws the three curves over M: best, the engine's default, the incumbent file
"$M" report --db "$T/b.db" --sweep 1 -o "$T/b.html" >/dev/null 2>&1 || fail "report exited $?"
# (at the sweep's batch sizes and those checked between them)
n_m=$(q "$T/b.db" "SELECT COUNT(DISTINCT batch_size) FROM results WHERE status = 'ok'")
for k in best default incumbent; do
  [ "$(grep -c "<circle class=\"point $k\"" "$T/b.html")" = "$n_m" ] || fail "the report has no $n_m '$k' points"
done
pass "--baseline FILE: nearest-key entries measured, the M=1 tie kept the incumbent, M=4096 beat it by ${x}x"

# ---- 3: the incumbent from an engine's bundled files (SGLang's fallback: the newest triton_* folder with the file)
PKG="$SRC/tests/data/fake_sglang/sglang/srt/layers/moe/fused_moe_triton"
"$M" tune "${SPEC[@]}" --baseline "$PKG" --db "$T/c.db" --out "$T/c" >"$T/c.out" 2>"$T/c.err" \
  || { tail "$T/c.err"; fail "tune --baseline DIR exited $?"; }
src=$(q "$T/c.db" "SELECT DISTINCT source FROM guard WHERE role = 'incumbent' AND batch_size = 16")
[[ "$src" == *"triton_3_4_0/$NAME, key 1" ]] || fail "M=16's incumbent is '$src', not triton_3_4_0's key 1"
[ "$(q "$T/c.db" "SELECT c.block_m || 'x' || c.block_n FROM guard g JOIN configs c ON c.id = g.config_id
      WHERE g.role = 'incumbent' AND g.batch_size = 256")" = 32x64 ] || fail "M=256's incumbent is not key 64's entry"
grep -q "faster than triton_3_4_0's file" "$T/c.out" || fail "tune does not name the bundled file: $(cat "$T/c.out")"
rc=0; "$M" tune "${SPEC[@]}" --baseline "$T/nothing" --db "$T/e.db" --out "$T/e" >/dev/null 2>"$T/e.err" || rc=$?
[ $rc = 2 ] && grep -q "baseline $T/nothing" "$T/e.err" || fail "a missing --baseline: exit $rc, $(cat "$T/e.err")"
pass "--baseline DIR: SGLang's fallback folder found, its entries measured; a missing path refused"

# ---- 4: --guard off measures the search alone
"$M" tune "${SPEC[@]}" --guard off --db "$T/o.db" --out "$T/o" >"$T/o.out" 2>"$T/o.err" || { tail "$T/o.err"; fail "tune exited $?"; }
[ "$(q "$T/o.db" "SELECT COUNT(*) FROM guard")" = 0 ] || fail "--guard off stored guard rows"
grep -q "faster than" "$T/o.out" && fail "--guard off still reports a guard line"
# a done guarded sweep is not reused for the search alone (or for another baseline): named, exit 2
rc=0; "$M" tune "${SPEC[@]}" --guard off --db "$T/d.db" --out "$T/d2" >/dev/null 2>"$T/d2.err" || rc=$?
[ $rc = 2 ] && grep -q "guard 'on', now 'off'" "$T/d2.err" || fail "--guard off on a guarded sweep: exit $rc, $(cat "$T/d2.err")"
rc=0; "$M" tune "${SPEC[@]}" --baseline "$T/base/$NAME" --db "$T/d.db" --out "$T/d2" >/dev/null 2>"$T/d2.err" || rc=$?
[ $rc = 2 ] && grep -q "baseline none, now other entries" "$T/d2.err" || fail "a new --baseline: exit $rc, $(cat "$T/d2.err")"
pass "--guard off: no guard rows, no guard line; a guarded sweep is not taken for it, nor for a new baseline"

# ---- 5: a --configs re-measure: the defaults join its one side-by-side job, and the rule holds
"$M" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,256 \
  --configs 16x64x64x1x4x3,32x128x64x1x4x3 --sim-faults "speed=$DEF@256:0.5" --db "$T/l.db" --out "$T/l" >"$T/l.out" 2>"$T/l.err" \
  || { tail "$T/l.err"; fail "tune --configs exited $?"; }
[ "$(q "$T/l.db" "SELECT COUNT(*) FROM jobs")" = 1 ] || fail "the re-measure is not one job"
[ "$(q "$T/l.db" "SELECT COUNT(*) FROM job_configs")" = 4 ] || fail "the job does not hold the 2 listed configs and 2 defaults"
[ "$(q "$T/l.db" "SELECT batch_size || ':' || searched FROM guard ORDER BY batch_size" | paste -sd' ')" = "1:0 256:0" ] \
  || fail "the re-measure's guard rows"
[ "$(cfg_of "$T/l/sim/$NAME" 256)" = "$DEF" ] || fail "the re-measure shipped $(cfg_of "$T/l/sim/$NAME" 256) at 256, not the faster default"
pass "--configs: the defaults measured in its one job; the faster default shipped"

# ---- 6: between the keys: a config planted fast at M=256, 137 and 136 (where the engine still takes
# key 16's entry) is added as key 136; at 137 the engine takes key 256's entry, that same config: no key
X=64x128x64x1x4x3
"$M" tune "${SPEC[@]}" --sim-faults "speed=$X@256:0.3,speed=$X@136:0.3,speed=$X@137:0.3" --db "$T/g.db" --out "$T/g" >"$T/g.out" 2>"$T/g.err" \
  || { tail "$T/g.err"; fail "tune exited $?"; }
[ "$(cfg_of "$T/g/sim/$NAME" 256)" = "$X" ] || fail "the planted config is not the pick at 256"
[ "$(q "$T/g.db" "SELECT role || ':' || source FROM guard WHERE batch_size = 136 AND role IN ('nearest', 'other') AND engine = ''
      ORDER BY role" | paste -sd' ')" = "nearest:key 16's pick other:key 256's pick" ] || fail "M=136 is not checked between keys 16 and 256"
# every config either neighbour could ship is measured there: its pick and its own default
[ "$(q "$T/g.db" "SELECT role || ':' || source FROM guard WHERE batch_size = 136 AND engine = 'sglang-default' ORDER BY role" | paste -sd'|')" \
  = "nearest:key 16's default (sglang get_default_config, M <= E)|other:key 256's default (sglang get_default_config, M > E)" ] \
  || fail "M=136 does not measure the neighbours' defaults"
[ "$(q "$T/g.db" "SELECT COUNT(*) FROM results r JOIN jobs j ON j.id = r.job_id WHERE r.batch_size = 136 AND j.phase = 2
      AND j.batch_sizes = '136' AND r.status = 'ok'")" -ge 3 ] || fail "M=136 was not measured side by side (pick 16, pick 256, default)"
[ "$(cfg_of "$T/g/sim/$NAME" 136)" = "$X" ] || fail "key 136 was not added with the planted config"
[ "$(jq -r '.["137"] // "none"' "$T/g/sim/$NAME")" = none ] || fail "key 137 added though the engine's entry there is the fastest"
recg=$(jq -c --arg n "$NAME" '.[$n]' "$T/g/sim/manifest.json")
echo "$recg" | jq -e '.guard.keys_added | index(136)' >/dev/null || fail "the manifest does not list key 136 as added"
echo "$recg" | jq -e '(.guard.between_keys_checked | index(137)) and (.guard.keys_added | index(137) | not)' >/dev/null \
  || fail "the manifest does not say 137 was checked and not added"
a=$(echo "$recg" | jq -c '.entries["136"].guard.added')
[ "$(echo "$a" | jq .nearest_key)" = 16 ] || fail "added: $a"
near=$(q "$T/g.db" "SELECT median_us FROM results WHERE batch_size = 136 AND config_id = $(echo "$a" | jq .nearest_config_id)")
awk -v n="$near" -v m="$(echo "$a" | jq .nearest_median_us)" -v x="$(echo "$a" | jq .speedup)" \
  -v s="$(echo "$recg" | jq '.entries["136"].median_us')" 'BEGIN { d = n - m; if (d < 0) d = -d; r = n / s - x; if (r < 0) r = -r;
  exit !(d < 1e-6 && r < 1e-9 && x > 1.5) }' || fail "M=136: the nearest entry's figures are not the database's: $a"
grep -q "[1-9][0-9]* keys\? added" "$T/g.out" || fail "tune does not say keys were added: $(cat "$T/g.out")"
pass "between the keys: 136 added with the planted config (${near} us for key 16's entry), 137 checked and not added"
