#!/usr/bin/env bash
# bench/triton/busy.sh on a fake helper (no torch, no GPU): the tune runs under the wall limit, is
# stopped there with SIGINT and exits as interrupted; the summary has the configs done (as the
# database counts them), the results and ETA of the last progress line, the static rules'
# rejections, and the worker's busy breakdown from its log (the fake's phases: timed 60 %).
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
[ -x /usr/bin/python3 ] || { echo "skip: /usr/bin/python3 not found"; exit 77; }
export MOETUNE_HELPER=$S/tests/tools/fake_helper.py FAKE_HELPER_DONE_MS=20 MOETUNE_TRITON_BUSY_LOG_MS=1000
export MT_TUNE_ARGS="--python /usr/bin/python3 --gpus 0"
bash "$S/bench/triton/busy.sh" "$T/out" 9 >"$T/busy.out" 2>"$T/busy.err" || { cat "$T/busy.out" "$T/busy.err"; fail "busy.sh exited $?"; }
cat "$T/busy.out"
has() { grep -q "$1" "$T/busy.out" || fail "no '$1' in the summary"; }
has "^tune: stopped at the limit (SIGINT), exit 130$"
has "^rejected by rule: 616$"
has "^results done: [0-9][0-9]*/23472 ([0-9.]*%)$"
has "^eta shown: [0-9]"
has "^busy (worker-0):  at close: wall [0-9]* s, [0-9]* configs: timed 60 %, samples 10 %, .* compile wait 20 %, "
n=$(sed -n 's/^configs done: \([0-9]*\) of 1304 planned$/\1/p' "$T/busy.out")
db=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT COUNT(DISTINCT config_id) FROM results').fetchone()[0])" "$T/out/tune.db")
[ -n "$n" ] && [ "$n" -gt 0 ] && [ "$n" = "$db" ] || fail "configs done '$n', the database has $db"
[ "$(grep -c "triton busy: wall" "$T/out/logs/worker-0.log")" -ge 2 ] || fail "no busy line while the helper ran"
run=$(sed -n 's/.*logs of the coordinator and workers are in //p' "$T/out/tune.err" | tail -n1)
[ -n "$run" ] || fail "tune named no run folder"
[ ! -e "$run" ] || fail "run folder $run left behind"
pass "busy.sh: stopped at the limit, $n configs done, the busy breakdown from the worker's log"
# a second run on the same folder would resume the sweep: refused, nothing touched
bash "$S/bench/triton/busy.sh" "$T/out" 5 >"$T/again.out" 2>&1 && fail "a second run on the same OUT_DIR was not refused"
grep -q "tune.db exists" "$T/again.out" || fail "refusal: $(cat "$T/again.out")"
pass "an OUT_DIR with a database is refused"
