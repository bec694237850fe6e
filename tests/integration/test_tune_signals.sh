#!/usr/bin/env bash
# However `moetune tune` ends, its coordinator and workers end with it: SIGHUP (an SSH session
# that drops), SIGTERM and SIGKILL. And an interrupt that comes right after the last result is
# committed is not an interruption: tune exports and exits 0, and the rerun measures nothing.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SHAPE=(--shape E=8,N=1024,K=1024,topk=2 --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1,16
       --num-warps 4 --num-stages 3,4 --batch-sizes 1,8,64 --chunk 2)

descendants() { local c; for c in $(pgrep -P "$1" || true); do echo "$c"; descendants "$c"; done; }

# signal_case SIG: a slow tune gets SIG once its workers measure; every process it started must end.
signal_case() {
  local sig=$1 db=$T/$1.db
  "$M" tune --backend sim --workers 2 --sim-time-scale 30 "${SHAPE[@]}" --db "$db" --out "$T/c-$sig" \
    >"$T/$sig.out" 2>"$T/$sig.err" &
  local pid=$!
  for _ in $(seq 1 300); do
    [ "$(sqlite3 -batch -noheader "$db" "SELECT count(*) FROM results" 2>/dev/null || echo 0)" -gt 0 ] && break
    sleep 0.05
  done
  local kids
  kids=$(descendants $pid | tr '\n' ' ')
  [ "$(wc -w <<<"$kids")" -ge 3 ] || fail "$sig: expected a coordinator and 2 workers under tune, found '$kids'"
  kill -"$sig" $pid
  set +e
  wait $pid
  local rc=$?
  set -e
  local left=""
  for _ in $(seq 1 100); do
    left=""
    for k in $kids; do kill -0 "$k" 2>/dev/null && left="$left $k"; done
    [ -z "$left" ] && break
    sleep 0.1
  done
  for k in $left; do kill -KILL "$k" 2>/dev/null || true; done
  [ -z "$left" ] || fail "$sig: tune (exit $rc) left running:$(for k in $left; do echo -n " $(ps -o comm= -p "$k" 2>/dev/null)[$k]"; done)"
  echo "$rc"
}

rc=$(signal_case HUP)
[ "$rc" = 130 ] || fail "SIGHUP: tune exited $rc, expected 130 (interrupted)"
pass "SIGHUP: tune exited 130 and its coordinator and workers ended"
rc=$(signal_case TERM)
[ "$rc" = 130 ] || fail "SIGTERM: tune exited $rc, expected 130"
pass "SIGTERM: tune exited 130 and its coordinator and workers ended"
rc=$(signal_case KILL)
pass "SIGKILL: tune died ($rc) and its coordinator and workers ended with it"

# ---- Ctrl-C right after the last commit (decide step off: the last result row is then the last commit)
"$M" tune --backend sim --workers 2 --sim-time-scale 1 "${SHAPE[@]}" --decide-margin 0 --db "$DB" --out "$T/configs" \
  >"$T/late.out" 2>"$T/late.err" &
pid=$!
planned=0
for _ in $(seq 1 600); do
  planned=$(sql "SELECT results_planned FROM sweeps WHERE id=1" 2>/dev/null || echo 0)
  [ "${planned:-0}" -gt 0 ] && [ "$(sql "SELECT count(*) FROM results")" = "$planned" ] && break
  sleep 0.02
done
kill -INT $pid
set +e
wait $pid
rc=$?
set -e
[ "$(sql "SELECT count(*) FROM results")" = "$planned" ] || fail "the sweep did not complete before the interrupt"
[ $rc = 0 ] || { cat "$T/late.err"; fail "Ctrl-C after the last commit: tune exited $rc, expected 0"; }
grep -q interrupted "$T/late.err" && fail "Ctrl-C after the last commit reported an interruption"
[ -f "$T/configs/sim/E=8,N=1024,device_name=NVIDIA_H200.json" ] || fail "Ctrl-C after the last commit skipped the export"
"$M" tune --backend sim --workers 2 --sim-time-scale 0 "${SHAPE[@]}" --decide-margin 0 --db "$DB" --out "$T/configs" \
  >"$T/late2.out" 2>"$T/late2.err" || { cat "$T/late2.err"; fail "rerun failed"; }
[ "$(sql "SELECT count(*) FROM sweeps")" = 1 ] && [ "$(sql "SELECT count(*) FROM results")" = "$planned" ] \
  || fail "the rerun measured again"
pass "Ctrl-C right after the last of $planned commits: exit 0, files exported; the rerun measured nothing"
