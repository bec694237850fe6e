#!/usr/bin/env bash
# Triton's static rules per device, with sim workers standing in for a Triton kernel (--kernel):
# a sweep submitted while such a worker is connected is planned for its device (sm_120: 944 of
# the default space rejected, with the reason, none measured; an H100: 616), and submit says which
# rules planned it. A sweep submitted before any worker is planned without a device; the sm_120
# worker that measures it refuses, before compiling, each config its shared memory cannot fit.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SUB=(--control "$CEP" --json --model qwen3-30b-a3b --tp 1 --batch-sizes 1,64 --worker-backend sim)

# wait_workers N: until N live workers have said hello
wait_workers() {
  for _ in $(seq 1 100); do
    [ "$("$M" workers --control "$CEP" --json | jq "[.workers[] | select(.state != \"dead\")] | length")" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "$1 workers did not connect"
}

start_coordinator
# submitted before any worker: Triton's rules need a device, the sim's CUDA rules plan it
"$M" submit "${SUB[@]}" >"$T/early.json" || fail "the early submit exited $?"
grep -q "moetune's CUDA kernel" <<<"$(jq -r .rules "$T/early.json")" || fail "early rules: $(cat "$T/early.json")"
start_workers 1 --kernel moetune --sim-device rtx-pro-6000 --sim-time-scale 0
wait_workers 1
[ "$(wait_sweep 1 120)" = done ] || fail "sweep 1 did not finish"
refused=$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 1 AND status = 'invalid'
  AND detail LIKE 'Triton needs at least % B of shared memory > 101376 B per block on sm_120'")
other=$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 1 AND status = 'invalid' AND detail NOT LIKE 'Triton needs%'")
[ "$refused" -gt 0 ] && [ "$other" = 0 ] || fail "sweep 1: $refused rows refused by the sm_120 rule, $other invalid otherwise"
pass "a sweep planned without a device: its sm_120 worker refused $refused rows by Triton's rule before compiling"

# planned for the connected sm_120 worker: its rule rejects at submit, nothing is measured invalid
"$M" submit "${SUB[@]}" --name sm120 >"$T/sm120.json" || fail "submit exited $?"
[ "$(jq -r .configs_rejected "$T/sm120.json")" = 944 ] || fail "sm_120 plan: $(cat "$T/sm120.json")"
[ "$(jq -r .rules "$T/sm120.json")" = \
  "sim: Triton's on NVIDIA RTX PRO 6000 Blackwell Server Edition (sm_120, 101376 B shared memory per block)" ] \
  || fail "sm_120 rules: $(jq -r .rules "$T/sm120.json")"
[ "$(wait_sweep 2 120)" = done ] || fail "sweep 2 did not finish"
[ "$(sql "SELECT COUNT(*) FROM rejected WHERE sweep_id = 2 AND reason LIKE 'Triton needs at least %'")" = 944 ] \
  || fail "sweep 2 stores $(sql "SELECT COUNT(*) FROM rejected WHERE sweep_id = 2") rejections"
[ "$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 2 AND status = 'invalid'")" = 0 ] \
  || fail "sweep 2 measured configs invalid: $(sql "SELECT detail FROM results WHERE sweep_id = 2 AND status = 'invalid' LIMIT 1")"
[ "$(sql "SELECT COUNT(*) FROM results r WHERE sweep_id = 2 AND $SEARCHED")" = $(( (1920 - 944) * 2 )) ] \
  || fail "sweep 2 has $(sql "SELECT COUNT(*) FROM results r WHERE sweep_id = 2 AND $SEARCHED") results of the search"
pass "planned for sm_120: 944 of 1920 rejected with the reason, the other 976 measured, none invalid"

# an H100 beside it: the plan takes the larger card's rule (either may bind the sweep)
start_workers 1 --id h100 --kernel moetune --sim-device h100 --sim-time-scale 0
wait_workers 2
"$M" submit "${SUB[@]}" --name mixed >"$T/mixed.json" || fail "submit exited $?"
[ "$(jq -r .configs_rejected "$T/mixed.json")" = 616 ] || fail "mixed plan: $(cat "$T/mixed.json")"
grep -q "sm_90, 232448 B" <<<"$(jq -r .rules "$T/mixed.json")" || fail "mixed rules: $(jq -r .rules "$T/mixed.json")"
pass "an H100 and an sm_120 card connected: planned with the H100's rule (616 rejected)"
