#!/usr/bin/env bash
# Coordinator + 4 sim workers as separate processes on loopback; 2 shapes x 18 batch sizes x the
# default space. The result rows must be exactly what the planner promised, and every exported
# entry must equal the minimum over the stored results for its (shape, batch size).
source "$(dirname "$0")/lib.sh"

start_coordinator
start_workers 4 --sim-time-scale 0
"$BIN/moetune" submit --control "$CEP" --name e2e \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
state=$(wait_sweep 1 300)
[ "$state" = done ] || fail "sweep state is $state, expected done"
rows=$(check_rows 1)
pass "sweep done with $rows rows, exactly the planned set"

# Per shape: measured configs + rejected configs = the whole default space (1920), 18 batch sizes
# (the ship guard's configs outside the space apart).
for sid in $(sql "SELECT DISTINCT shape_id FROM results WHERE sweep_id=1"); do
  measured=$(sql "SELECT count(DISTINCT config_id) FROM results r WHERE sweep_id=1 AND shape_id=$sid AND $SEARCHED")
  rejected=$(sql "SELECT count(*) FROM rejected WHERE sweep_id=1 AND shape_id=$sid")
  [ $((measured + rejected)) -eq 1920 ] || fail "shape $sid: $measured measured + $rejected rejected != 1920"
  nbs=$(sql "SELECT count(DISTINCT batch_size) FROM results r WHERE sweep_id=1 AND shape_id=$sid AND $NOGAP")
  [ "$nbs" = 18 ] || fail "shape $sid has $nbs batch sizes"
  noreason=$(sql "SELECT count(*) FROM rejected WHERE sweep_id=1 AND shape_id=$sid AND length(reason) < 10")
  [ "$noreason" = 0 ] || fail "shape $sid: rejected configs without a reason"
  pass "shape $sid: $measured measured + $rejected rejected = 1920"
done
[ "$(sql "SELECT count(DISTINCT shape_id) FROM results WHERE sweep_id=1")" = 2 ] || fail "expected 2 shapes"

"$BIN/moetune" status --control "$CEP" >"$T/status.out" 2>&1 || fail "status failed"

# Export and compare every entry with the minimum over the stored results.
"$BIN/moetune" export --db "$DB" --out "$T/out" >"$T/export.out" 2>&1 || { cat "$T/export.out"; fail "export failed"; }
files=$(ls "$T/out/sim/"E=*.json 2>/dev/null | wc -l)
[ "$files" = 2 ] || fail "expected 2 config files under sim/, found $files"
[ -f "$T/out/sim/manifest.json" ] || fail "no manifest.json"
[ "$(jq -r '[.. | objects | select(has("simulated")) | .simulated] | all' "$T/out/sim/manifest.json")" = true ] \
  || fail "manifest does not mark the sim results simulated"
checked=0
for f in "$T/out/sim/"E=*.json; do
  base=$(basename "$f")
  e=$(echo "$base" | sed -E 's/^E=([0-9]+),N=.*/\1/')
  n=$(echo "$base" | sed -E 's/^E=[0-9]+,N=([0-9]+),.*/\1/')
  case "$base" in *device_name=*) ;; *) fail "file name $base has no device_name" ;; esac
  # keys in numeric order
  jq -r 'keys_unsorted | map(tonumber) | . == sort' "$f" | grep -qx true || fail "$base: keys not in numeric order"
  # the sweep's batch sizes (a key the ship guard added between them is the fastest there too,
  # tests/integration/test_guard.sh)
  added=$(jq -c --arg n "$base" '[.[$n].guard.keys_added[] | tostring]' "$T/out/sim/manifest.json")
  jq -r --argjson a "$added" 'to_entries[] | select(.key as $k | $a | index($k) | not) | "\(.key) \(.value.BLOCK_SIZE_M) \(.value.BLOCK_SIZE_N) \(.value.BLOCK_SIZE_K) \(.value.GROUP_SIZE_M) \(.value.num_warps) \(.value.num_stages)"' "$f" >"$T/got.txt"
  sql "SELECT batch_size, block_m, block_n, block_k, group_m, num_warps, num_stages FROM (
         SELECT r.batch_size, c.*, ROW_NUMBER() OVER (PARTITION BY r.shape_id, r.batch_size ORDER BY r.median_us, r.config_id) rn
         FROM results r JOIN configs c ON c.id = r.config_id JOIN shapes s ON s.id = r.shape_id
         WHERE s.e=$e AND s.n=$n AND r.status='ok' AND $NOGAP) WHERE rn=1 ORDER BY batch_size" | tr '|' ' ' >"$T/want.txt"
  diff "$T/want.txt" "$T/got.txt" >"$T/diff.txt" || { cat "$T/diff.txt"; fail "$base differs from the stored minimum"; }
  checked=$((checked + $(wc -l <"$T/got.txt")))
done
[ "$checked" = 36 ] || fail "checked $checked entries, expected 36"
pass "36 exported entries equal the stored minimum per (shape, batch size)"
# Different configs win at different batch sizes (the sim model is not flat).
winners=$(cut -d' ' -f2- "$T/got.txt" | sort -u | wc -l)
[ "$winners" -gt 1 ] || fail "one config wins every batch size"
pass "$winners distinct winning configs in the last file"
