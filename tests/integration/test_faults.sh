#!/usr/bin/env bash
# Faulty configs on real worker processes: one that kills the worker's child (retried once on
# another worker, then quarantined as `crashed`), one that hangs (killed at the per-config
# timeout, `timeout`), one that computes a wrong answer (`wrong_result`). The workers survive,
# the sweep completes with exactly the planned rows, and none of the three is ever exported.
source "$(dirname "$0")/lib.sh"
SPACE=(--block-m 16,64 --block-n 64,128 --block-k 128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)
CRASH=16x64x128x1x4x3 HANG=64x128x128x16x8x4 WRONG=16x128x128x1x4x3

start_coordinator --heartbeat-ms 200 --lease-ms 5000
start_workers 3 --sim-time-scale 0.2 --sim-faults "crash=$CRASH,hang=$HANG,wrong=$WRONG"
"$BIN/moetune" submit --control "$CEP" --name faults --chunk 4 --race-margin 0 --config-timeout-ms 1500 "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 --batch-sizes 1,64,4096 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
state=$(wait_sweep 1 240)
[ "$state" = done ] || fail "sweep state is $state"
rows=$(check_rows 1)

cfg_status() { # BMxBNxBKxGMxWxS -> the distinct statuses of its rows
  sql "SELECT group_concat(DISTINCT r.status) FROM results r JOIN configs c ON c.id=r.config_id
       WHERE r.sweep_id=1 AND $(cfg_where "$1")"
}
[ "$(cfg_status $CRASH)" = crashed ] || fail "crashing config has status '$(cfg_status $CRASH)'"
[ "$(cfg_status $HANG)" = timeout ] || fail "hanging config has status '$(cfg_status $HANG)'"
grep -q "timed out after 1500 ms" "$T"/worker*.log || fail "the hang was not cut at the sweep's --config-timeout-ms 1500"
[ "$(cfg_status $WRONG)" = wrong_result ] || fail "wrong config has status '$(cfg_status $WRONG)'"
crashes=$(sql "SELECT max(count) FROM crashes WHERE sweep_id=1")
[ "$crashes" = 2 ] || fail "crash count is $crashes, expected 2 (retried once, then quarantined)"
retry=$(sql "SELECT count(*) FROM jobs WHERE sweep_id=1 AND avoid_worker IS NOT NULL")
[ "$retry" -ge 1 ] || fail "the crashing config was not retried on another worker"
ok=$(sql "SELECT count(*) FROM results WHERE sweep_id=1 AND status='ok'")
[ "$ok" = $((rows - 9)) ] || fail "$ok ok rows, expected $((rows - 9))"
pass "crash -> crashed after $crashes crashes ($retry retry job), hang -> timeout, wrong -> wrong_result; $ok ok rows"
for i in 1 2 3; do kill -0 "${PIDS[$((i-1))]}" || fail "worker $i died"; done
restarts=$(grep -c "starting a new child" "$T"/worker*.log | awk -F: '{s+=$2} END {print s}')
[ "$restarts" -ge 3 ] || fail "expected >= 3 child restarts (2 crashes + 1 hang), saw $restarts"
pass "all 3 workers alive, $restarts child restarts"

"$BIN/moetune" export --db "$DB" --out "$T/out" >/dev/null || fail "export failed"
f=$(ls "$T"/out/sim/E=*.json)
for c in $CRASH $HANG $WRONG; do
  IFS=x read -r bm bn bk gm w s <<<"$c"
  hits=$(jq --argjson bm $bm --argjson bn $bn --argjson bk $bk --argjson gm $gm --argjson w $w --argjson s $s \
    '[.[] | select(.BLOCK_SIZE_M==$bm and .BLOCK_SIZE_N==$bn and .BLOCK_SIZE_K==$bk and .GROUP_SIZE_M==$gm and .num_warps==$w and .num_stages==$s)] | length' "$f")
  [ "$hits" = 0 ] || fail "faulty config $c was exported"
done
pass "none of the faulty configs is exported"
