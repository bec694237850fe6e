#!/usr/bin/env bash
# What `moetune tune` and `status` tell the user: a device filter no worker matches is refused with
# what is connected (no sweep left behind); a storage error shows in tune's progress line; --json
# keeps stdout JSON; a worker that refuses its arguments gives exit 2 and its whole message;
# `status --json` and `workers --json` keep names that are not UTF-8 (escaped).
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SHAPE=(--shape E=8,N=1024,K=1024,topk=2 --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1,16
       --num-warps 4 --num-stages 3,4 --batch-sizes 1,8,64 --chunk 2)

# ---- a device filter that matches no worker here
set +e
start=$(date +%s)
timeout 60 "$M" tune --backend sim --workers 2 --sim-time-scale 0 "${SHAPE[@]}" --device-filter H100 \
  --db "$DB" --out "$T/configs" >"$T/filter.out" 2>"$T/filter.err"
rc=$?
set -e
took=$(( $(date +%s) - start ))
[ $rc = 2 ] || { cat "$T/filter.err"; fail "--device-filter H100 on sim H200 workers: exit $rc, expected 2"; }
grep -qF "matches none of 2 x NVIDIA H200 (sim)" "$T/filter.err" || fail "message lacks what is connected: $(cat "$T/filter.err")"
[ "$(sql "SELECT count(*) FROM sweeps" 2>/dev/null || echo 0)" = 0 ] || fail "a refused filter left a sweep in the database"
pass "--device-filter H100 refused after ${took}s: $(tail -n1 "$T/filter.err" | cut -c1-120)"

# ---- tune --json: every stdout line is JSON, the export's files among them
"$M" tune --json --backend sim --workers 2 --sim-time-scale 0 "${SHAPE[@]}" --db "$DB" --out "$T/configs" \
  >"$T/json.out" 2>"$T/json.err" || { cat "$T/json.err"; fail "tune --json failed"; }
n=0
while IFS= read -r line; do
  jq -e . >/dev/null 2>&1 <<<"$line" || fail "tune --json stdout line is not JSON: $line"
  n=$((n + 1))
done <"$T/json.out"
[ "$(jq -r 'select(.file) | .state' "$T/json.out")" = new ] || fail "no file object in tune --json: $(cat "$T/json.out")"
# 144 searched results and the ship guard's rows outside the space: the final object counts them all
[ "$(jq -r 'select(.state == "done") | "\(.done >= 144 and .done == .total)"' "$T/json.out" | tail -n1)" = true ] \
  || fail "no final progress object"
pass "tune --json: $n stdout lines, each JSON (progress, the file, where)"

# ---- a worker that refuses its arguments: exit 2, its whole message
set +e
"$M" tune --backend sim --workers 1 --sim-time-scale 5000 "${SHAPE[@]}" --db "$T/w.db" --out "$T/w" \
  >"$T/wu.out" 2>"$T/wu.err"
rc=$?
set -e
[ $rc = 2 ] || { cat "$T/wu.err"; fail "a worker usage error: tune exited $rc, expected 2"; }
grep -qF "bad --sim-time-scale '5000'" "$T/wu.err" || fail "the worker's message is not shown whole: $(cat "$T/wu.err")"
pass "worker usage error: exit 2: $(grep -F "bad --sim-time-scale" "$T/wu.err" | head -n1)"

# ---- a storage error shows in tune's progress line
DB2=$T/locked.db
"$M" tune --backend sim --workers 2 --sim-time-scale 10 "${SHAPE[@]}" --db "$DB2" --out "$T/c2" \
  >"$T/lock-tune.out" 2>"$T/lock-tune.err" &
TUNE=$!
PIDS+=($TUNE)
for _ in $(seq 1 300); do
  [ "$(sqlite3 -batch -noheader "$DB2" "SELECT count(*) FROM results" 2>/dev/null || echo 0)" -gt 0 ] && break
  sleep 0.05
done
lock_db "$DB2" 10
seen=0
wait_log "$T/lock-tune.err" "storage: .*results waiting for a commit" 15 && seen=1
unlock_db
[ $seen = 1 ] || { tail -n5 "$T/lock-tune.err"; fail "tune's progress line never showed the storage error"; }
set +e
wait $TUNE
rc=$?
set -e
[ $rc = 0 ] || { tail "$T/lock-tune.err"; fail "tune after the lock exited $rc"; }
pass "locked database: $(grep -m1 -o "storage: .*" "$T/lock-tune.err" | cut -c1-100)"

# ---- names that are not UTF-8 survive status --json and workers --json
DB=$T/names.db
start_coordinator
start_workers 1 --id $'w\xff-bad' --sim-time-scale 1
"$BIN/moetune" submit --control "$CEP" --name $'sw\xfe\xffeep' "${SHAPE[@]}" >/dev/null
for _ in $(seq 1 50); do
  "$M" workers --control "$CEP" --json | jq -e '.workers | length == 1' >/dev/null 2>&1 && break
  sleep 0.1
done
name=$("$M" status --control "$CEP" --json | jq -r '.sweeps[0].name')
[ "$name" = 'sw\xFE\xFFeep' ] || fail "status --json sweep name is '$name', expected 'sw\\xFE\\xFFeep'"
wid=$("$M" workers --control "$CEP" --json | jq -r '.workers[0].worker')
[ "$wid" = 'w\xFF-bad' ] || fail "workers --json worker id is '$wid'"
pass "non-UTF-8 names kept, escaped: sweep '$name', worker '$wid'"

# ---- results (read-only) on a database in a folder and file the user cannot write
mkdir "$T/ro"
cp "$T/moetune.db" "$T/ro/r.db"
want=$(sqlite3 -batch -noheader "$T/moetune.db" "SELECT count(*) FROM results")
chmod 444 "$T/ro/r.db"
chmod 555 "$T/ro" "$T"
as_user=()
if [ "$(id -u)" = 0 ]; then
  command -v setpriv >/dev/null || { chmod 755 "$T"; echo "setpriv not found (needed as root)"; exit 77; }
  as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
set +e
"${as_user[@]}" "$M" results --db "$T/ro/r.db" --json >"$T/ro.out" 2>"$T/ro.err"
rc=$?
set -e
chmod 755 "$T" "$T/ro"
[ $rc = 0 ] || fail "results on a read-only database exited $rc: $(cat "$T/ro.err")"
[ "$(wc -l <"$T/ro.out")" = "$want" ] || fail "results on a read-only database gave $(wc -l <"$T/ro.out") rows, expected $want"
[ ! -e "$T/ro/r.db-shm" ] || fail "results wrote beside a read-only database"
pass "results on a read-only database: $want rows"
