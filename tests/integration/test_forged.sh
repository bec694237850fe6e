#!/usr/bin/env bash
# Lease discipline against a hostile client: while one real sim worker runs a sweep, mt_forge
# (a DEALER with its own worker id that says Hello) sends Results with a made-up token for a real
# job, for a job that does not exist, and with a real job's current lease token read from the
# database. All three are rejected and counted; the result rows are exactly the planned set and
# every one of them is the real worker's. The job the forgeries aim at holds a config that hangs
# until the per-config timeout, so it is still leased when they arrive, however slow the machine.
source "$(dirname "$0")/lib.sh"
[ -x "$BIN/mt_forge" ] || { echo "mt_forge not built"; exit 77; }
SPACE=(--block-m 16,64 --block-n 64,128 --block-k 128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)
BS=1,2,4,8

start_coordinator --heartbeat-ms 200 --lease-ms 5000
HANG=16x64x128x1x4x3
start_workers 1 --sim-time-scale 1 --sim-faults "hang=$HANG"
"$BIN/moetune" submit --control "$CEP" --name forged --chunk 4 --config-timeout-ms 8000 --batch-sizes $BS "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit failed"; }

# the job of the hanging config, once it is leased to the real worker
job="" tok="" cfg=""
for _ in $(seq 1 200); do
  row=$(sql "SELECT j.id || ' ' || j.lease_token || ' ' || c.id FROM jobs j JOIN job_configs jc ON jc.job_id = j.id
             JOIN configs c ON c.id = jc.config_id WHERE j.state = 'leased' AND $(cfg_where "$HANG")" 2>/dev/null || true)
  if [ -n "$row" ]; then read -r job tok cfg <<<"$row"; break; fi
  sleep 0.05
done
[ -n "$job" ] || fail "the hanging config's job was not seen leased"
tok=$(printf '%u' "$tok")    # SQLite keeps the 64-bit token signed
holder=$(sql "SELECT worker_id FROM jobs WHERE id=$job")
fake=$(( (tok ^ 0x5a5a5a5a) & 0x7fffffffffffffff )); [ "$fake" != "$tok" ] || fake=$((fake + 1))
"$BIN/mt_forge" "$WEP" "forge-$$" $BS "$job:$fake:$cfg" "987654:$tok:$cfg" "$job:$tok:$cfg" >"$T/forge.out" 2>&1 \
  || { cat "$T/forge.out"; fail "forged results were not all acknowledged"; }
grep -q "acked 3 of 3" "$T/forge.out" || fail "forge: $(cat "$T/forge.out")"
rejected=$("$BIN/moetune" status --control "$CEP" --json | jq -r .counters.rejected_results)
[ "$rejected" = 3 ] || fail "rejected_results is $rejected, expected 3"
grep -q "job $job rejected: lease token is not the job's" "$T/coord.log" || fail "forged token not rejected as such"
grep -q "job 987654 rejected: unknown job" "$T/coord.log" || fail "unknown job not rejected as such"
grep -q "job $job rejected: lease is held by $holder" "$T/coord.log" \
  || fail "stolen token not rejected as such"
pass "3 forged results (job $job held by $holder) rejected and counted"

state=$(wait_sweep 1 120)
[ "$state" = done ] || fail "sweep state is $state"
rows=$(check_rows 1)
forged=$(sql "SELECT count(*) FROM results WHERE worker_id <> '$holder' OR median_us = 1.0")
[ "$forged" = 0 ] || fail "$forged rows not from the real worker"
mine=$(sql "SELECT count(*) FROM results WHERE job_id=$job AND config_id=$cfg AND worker_id='$holder' AND status='timeout'")
[ "$mine" = 4 ] || fail "config $cfg of job $job has $mine timeout rows from $holder, expected 4"
[ "$(sql "SELECT count(*) FROM workers WHERE worker_id='forge-$$'")" = 1 ] || fail "forge not recorded as a worker"
pass "sweep done: $rows rows, exactly the planned set, all from $holder"
