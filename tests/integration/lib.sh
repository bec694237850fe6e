# Shared helpers for the integration tests: real processes on loopback, a temporary database.
# Sourced by tests/integration/test_*.sh. Needs MT_BIN_DIR (the build folder).
set -euo pipefail
: "${MT_BIN_DIR:?MT_BIN_DIR must point at the build folder}"
BIN=$MT_BIN_DIR
T=$(mktemp -d /tmp/moetune-it.XXXXXX)
DB=$T/moetune.db
PIDS=()
COORD_PID=

cleanup() {
  local rc=$?
  for p in "${PIDS[@]}" $COORD_PID; do kill_quiet "$p"; done
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    echo "---- test failed (rc=$rc); logs from $T:"
    for f in "$T"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -n 30 "$f"; }; done
  fi
  if [ -n "${MT_KEEP_LOGS:-}" ]; then echo "logs kept in $T"; else rm -rf "$T"; fi
  exit $rc
}
trap cleanup EXIT

# SIGKILLs a background process and reaps it without the shell's "Killed" notice.
kill_quiet() { { kill -KILL "$1" && wait "$1"; } 2>/dev/null || true; }

fail() { echo "FAIL: $*" >&2; exit 1; }

# Conditions on a results row r. NOGAP: not at one of the ship guard's batch sizes between the keys
# (coordinator/guard.h); SEARCHED: the search's own, not one of the guard's configs outside the
# space (measured at their own batch sizes only) nor a row between the keys.
NOGAP="NOT EXISTS (SELECT 1 FROM guard g WHERE g.sweep_id = r.sweep_id AND g.batch_size = r.batch_size
  AND g.role = 'nearest')"
SEARCHED="NOT EXISTS (SELECT 1 FROM guard g WHERE g.sweep_id = r.sweep_id AND g.shape_id = r.shape_id
  AND g.config_id = r.config_id AND g.searched = 0) AND $NOGAP"
pass() { echo "ok: $*"; }

# A free TCP port on loopback, below the kernel's ephemeral range (32768 and up on Linux) so that
# no outgoing connection of another test can take it between the check and the bind.
free_port() {
  local p
  while :; do
    p=$(( (RANDOM % 12000) + 20000 ))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
  done
}

pick_ports() {
  WPORT=$(free_port)
  CPORT=$(free_port)
  while [ "$CPORT" = "$WPORT" ]; do CPORT=$(free_port); done
  WEP=tcp://127.0.0.1:$WPORT
  CEP=tcp://127.0.0.1:$CPORT
}
pick_ports
STARTS=0
CLIENT_ARGS=()   # extra arguments of the CLI when it checks that the coordinator answers (CURVE keys)

# start_coordinator [extra args...]: starts it on WEP/CEP and waits until it answers
start_coordinator() {
  local try
  for try in 1 2 3 4 5; do
    "$BIN/moetune-coordinator" --db "$DB" --bind "$WEP" --control "$CEP" "$@" >>"$T/coord.log" 2>&1 &
    COORD_PID=$!
    for _ in $(seq 1 100); do
      if "$BIN/moetune" status --control "$CEP" --timeout-ms 300 "${CLIENT_ARGS[@]}" >/dev/null 2>&1; then
        STARTS=$((STARTS + 1)); return 0
      fi
      kill -0 "$COORD_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$COORD_PID" 2>/dev/null && fail "coordinator did not answer on $CEP"
    # A port taken by another process between the check and the bind: the first start may move
    # to new ports (no worker knows the old ones yet); a restart must keep its ports.
    if [ $STARTS = 0 ] && tail -n 3 "$T/coord.log" | grep -q "Address already in use"; then
      pick_ports
      continue
    fi
    fail "coordinator exited at start"
  done
  fail "no free ports for the coordinator after 5 tries"
}

# start_workers N [extra worker args...]
start_workers() {
  local n=$1; shift
  for i in $(seq 1 "$n"); do
    "$BIN/moetune-worker" --connect "$WEP" --backend sim --id "w$i-$$" "$@" >>"$T/worker$i.log" 2>&1 &
    PIDS+=($!)
  done
}

sql() { sqlite3 -batch -noheader "$DB" "$1"; }

# The fake engine packages (tests/fixtures/engines, in $F) for /usr/bin/python3 ($PY), whose fake
# torch names the sim's GPU; q DB SQL reads any database. Skips the test where $PY is missing.
fake_engines() {
  PY=/usr/bin/python3
  [ -x "$PY" ] || { echo "skip: $PY not found"; exit 77; }
  F=$(cd "$(dirname "${BASH_SOURCE[0]}")/../fixtures/engines" && pwd)
  unset MOETUNE_HELPER SGLANG_MOE_CONFIG_DIR VLLM_TUNED_CONFIG_FOLDER
  export MOETUNE_FAKE_GPU="NVIDIA H200"
}
q() { sqlite3 -batch -noheader "$1" "$2"; }

# wait_sweep ID TIMEOUT_S : waits until the sweep leaves 'running'; prints its state.
wait_sweep() {
  local id=$1 limit=$2 state=""
  for _ in $(seq 1 $((limit * 5))); do
    state=$(sql "SELECT state FROM sweeps WHERE id=$id" 2>/dev/null || true)
    if [ -n "$state" ] && [ "$state" != running ]; then echo "$state"; return 0; fi
    sleep 0.2
  done
  echo "timeout(${state:-none})"
}

# cfg_where BMxBNxBKxGMxWxS : the SQL condition on the configs table (alias c) that selects
# that config, as the sim's --sim-faults names it.
cfg_where() {
  local bm bn bk gm w s
  IFS=x read -r bm bn bk gm w s <<<"$1"
  echo "c.block_m=$bm AND c.block_n=$bn AND c.block_k=$bk AND c.group_m=$gm AND c.num_warps=$w AND c.num_stages=$s"
}

# pick_where FILE BS : the SQL condition on configs (alias c) that selects the config an exported
# FILE holds for batch size BS.
pick_where() {
  cfg_where "$(jq -r --arg k "$2" '.[$k] | "\(.BLOCK_SIZE_M)x\(.BLOCK_SIZE_N)x\(.BLOCK_SIZE_K)x\(.GROUP_SIZE_M)x\(.num_warps)x\(.num_stages)"' "$1")"
}

# near_best REF_DB BS WHERE WHO : fails unless the config WHERE selects (a condition on configs c)
# is within 1 % of REF_DB's best ok median at batch size BS (the message names WHO's pick). Sets
# RATIO to that ratio, WORST to the largest RATIO so far (the caller starts it at 0), and GAP to
# how far REF_DB's best leads its runner-up there (clear_lead).
near_best() {
  local db=$1 bs=$2 w=$3
  RATIO=$(sqlite3 -batch -noheader "$db" "SELECT r.median_us / (SELECT MIN(median_us) FROM results WHERE status = 'ok' AND batch_size = $bs)
          FROM results r JOIN configs c ON c.id = r.config_id WHERE r.batch_size = $bs AND $w")
  awk -v r="$RATIO" 'BEGIN { exit !(r >= 1 && r <= 1.01) }' || fail "batch size $bs: $4's pick is ${RATIO}x the exhaustive best"
  WORST=$(awk -v a="$WORST" -v r="$RATIO" 'BEGIN { print (r > a ? r : a) }')
  GAP=$(sqlite3 -batch -noheader "$db" "SELECT (SELECT median_us FROM results WHERE status = 'ok' AND batch_size = $bs ORDER BY median_us
        LIMIT 1 OFFSET 1) / MIN(median_us) - 1 FROM results WHERE status = 'ok' AND batch_size = $bs")
}

# clear_lead : whether the last near_best's reference best leads its runner-up by more than 3 %
# (beyond the noise: a pick there must be that very config).
clear_lead() { awk -v g="$GAP" 'BEGIN { exit !(g > 0.03) }'; }

# wait_log FILE PATTERN TIMEOUT_S : waits until an extended regex matches a line of FILE.
# Events that depend on a peer's retry timing (a refused handshake) are awaited, not grepped once.
wait_log() {
  local file=$1 pattern=$2 limit=$3
  for _ in $(seq 1 $((limit * 10))); do
    grep -qE "$pattern" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# lock_db FILE TIMEOUT_S : another process (sqlite3, its pid in LOCKER) takes an exclusive lock on
# the database FILE and holds it until unlock_db; fails unless it has it within TIMEOUT_S.
lock_db() {
  mkfifo "$T/lock.fifo"
  sqlite3 "$1" <"$T/lock.fifo" >"$T/lock.out" 2>&1 &
  LOCKER=$!
  PIDS+=($LOCKER)
  exec 5>"$T/lock.fifo"
  echo ".timeout 5000" >&5
  echo "BEGIN EXCLUSIVE; SELECT 'locked';" >&5
  wait_log "$T/lock.out" locked "$2" || fail "could not take the lock: $(cat "$T/lock.out")"
}

# unlock_db : lock_db's process rolls back and exits.
unlock_db() {
  echo "ROLLBACK;" >&5
  exec 5>&-
  wait "$LOCKER" 2>/dev/null || true
}

# check_rows ID : the result rows of the sweep are exactly the planned set, no duplicates.
check_rows() {
  local id=$1
  local planned rows distinct
  planned=$(sql "SELECT results_planned FROM sweeps WHERE id=$id")
  rows=$(sql "SELECT count(*) FROM results WHERE sweep_id=$id")
  distinct=$(sql "SELECT count(*) FROM (SELECT DISTINCT shape_id, config_id, batch_size FROM results WHERE sweep_id=$id)")
  [ "$planned" -gt 0 ] || fail "sweep $id planned no results"
  [ "$rows" = "$planned" ] || fail "sweep $id: $rows result rows, $planned planned"
  [ "$distinct" = "$rows" ] || fail "sweep $id: duplicate rows ($rows rows, $distinct distinct)"
  # every planned (shape, valid config) has every batch size: valid configs x batch sizes = rows;
  # the ship guard's configs outside the space are measured at their own batch sizes only
  local bad
  bad=$(sql "SELECT count(*) FROM (SELECT shape_id, config_id, count(*) c FROM results r WHERE sweep_id=$id
             AND $SEARCHED GROUP BY 1,2)
             WHERE c <> (SELECT count(DISTINCT batch_size) FROM results r WHERE sweep_id=$id AND $NOGAP)")
  [ "$bad" = 0 ] || fail "sweep $id: $bad configs miss batch sizes"
  # no config is both rejected and measured
  local both
  both=$(sql "SELECT count(*) FROM rejected j JOIN results r ON r.sweep_id=j.sweep_id AND r.shape_id=j.shape_id AND r.config_id=j.config_id WHERE j.sweep_id=$id")
  [ "$both" = 0 ] || fail "sweep $id: $both rejected configs have results"
  echo "$rows"
}
