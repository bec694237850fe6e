#!/usr/bin/env bash
# Chaos: a coordinator and 8 sim workers whose jobs take real time; a controller SIGKILLs and
# SIGSTOPs random workers (killed ones are replaced) and SIGKILLs and restarts the coordinator
# three times during the sweep. The sweep completes, the result rows are exactly the planned set
# (no loss, no duplicates) and PRAGMA integrity_check is ok.
source "$(dirname "$0")/lib.sh"
SPACE=(--block-m 16,32,64 --block-n 64,128 --block-k 128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4)
RANDOM=${MT_CHAOS_SEED:-4242}
WORKER_ARGS=(--sim-time-scale 6)

start_coordinator --heartbeat-ms 200 --lease-ms 3000
start_workers 8 "${WORKER_ARGS[@]}"
# Every kill or stop of a lease holder costs that job an attempt; at this rate of chaos the
# default cap (3) would fail jobs that did nothing wrong, so the cap is raised for this sweep.
"$BIN/moetune" submit --control "$CEP" --name chaos --chunk 4 --max-attempts 50 "${SPACE[@]}" \
  --shape E=128,N=768,K=2048,topk=8 --shape E=8,N=7168,K=4096,topk=2 >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
planned=$(sql "SELECT results_planned FROM sweeps WHERE id=1")

kills=0 stops=0 coord_kills=0 spawned=8
for round in $(seq 1 60); do
  state=$(sql "SELECT state FROM sweeps WHERE id=1")
  [ "$state" = running ] || break
  sleep 0.$((3 + RANDOM % 5))
  i=$((RANDOM % ${#PIDS[@]}))
  action=$((RANDOM % 6))   # 0-1 kill, 2-3 stop, 4-5 calm
  case $round in 2|5|8) action=6 ;; esac   # the coordinator dies three times, early
  case $action in
    0|1)
      kill_quiet "${PIDS[$i]}"
      kills=$((kills + 1)); spawned=$((spawned + 1))
      "$BIN/moetune-worker" --connect "$WEP" --backend sim --id "w$spawned-$$" "${WORKER_ARGS[@]}" \
        >>"$T/worker$spawned.log" 2>&1 &
      PIDS[$i]=$!
      ;;
    2|3)
      kill -STOP "${PIDS[$i]}" 2>/dev/null || true
      stops=$((stops + 1))
      ( sleep 1.$((RANDOM % 9)); kill -CONT "${PIDS[$i]}" 2>/dev/null ) &
      ;;
    4|5) ;;
    6)
      if [ $coord_kills -lt 3 ]; then
        kill_quiet "$COORD_PID"
        coord_kills=$((coord_kills + 1))
        sleep 0.5
        start_coordinator --heartbeat-ms 200 --lease-ms 3000
      fi
      ;;
  esac
done
for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
pass "chaos: $kills worker kills, $stops worker stops, $coord_kills coordinator kills"
[ $coord_kills -eq 3 ] || fail "the coordinator was killed $coord_kills times, not 3 (sweep too short)"

state=$(wait_sweep 1 300)
[ "$state" = done ] || fail "sweep state is $state"
rows=$(check_rows 1)
# the ship guard's rows outside the space join the plan when a shape's decide step is planned
[ "$rows" -ge "$planned" ] && [ "$rows" = "$(sql "SELECT results_planned FROM sweeps WHERE id=1")" ] \
  || fail "$rows rows, $planned planned at submit"
[ "$(sql "PRAGMA integrity_check")" = ok ] || fail "integrity_check: $(sql 'PRAGMA integrity_check')"
pass "sweep done: $rows rows = planned, no duplicates, integrity_check ok"
