#!/usr/bin/env bash
# --round-process: a side-by-side job's rounds all in the worker's one child (same, the default on the sim)
# or each in a new child (new). On the sim, a --configs re-measure of 3 configs in 5 rounds: with
# new, the worker starts 4 more children, one per round after the first, each a new process, and
# the rows are those of the same re-measure in one child (the sim reads a config alike in any
# process); with same, none. The setting also comes from a spec file, and a wrong value is refused.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
RM=(--backend sim --workers 1 --sim-time-scale 0 --model mixtral-8x7b --tp 2 --batch-sizes 1,256
  --configs 32x256x64x16x4x2,32x256x64x32x4x2,64x128x128x1x8x2)

# run NAME [extra...]: the re-measure into $T/NAME.db, its worker's log kept as $T/NAME.worker.log
run() {
  local name=$1; shift
  "$M" tune "${RM[@]}" --db "$T/$name.db" --out "$T/$name" --keep-temp "$@" >"$T/$name.out" 2>"$T/$name.err" \
    || { cat "$T/$name.err"; fail "tune $* exited $?"; }
  local d
  d=$(grep -o '/tmp/moetune-tune-[A-Za-z0-9]*' "$T/$name.err" | head -1)
  [ -n "$d" ] && [ -f "$d/worker-0.log" ] || fail "tune $*: no worker log kept ($(cat "$T/$name.err"))"
  cp "$d/worker-0.log" "$T/$name.worker.log"
  rm -rf "$d"
}
rows() { sqlite3 -batch -noheader "$T/$1.db" "SELECT config_id || ' ' || batch_size || ' ' || status || ' ' || median_us
  || ' ' || samples FROM results ORDER BY config_id, batch_size"; }

run same
run new --round-process new
# the 3 listed configs and the ship guard's 2 defaults (M <= E and M > E), in one job
grep -q 'job 1: 5 configs x 2 batch sizes, 5 rounds, side by side' "$T/new.worker.log" \
  || fail "the re-measure is not one side-by-side job of 5 rounds: $(grep 'job 1' "$T/new.worker.log")"
lines=$(grep -c 'in a new child (pid ' "$T/new.worker.log" || true)
[ "$lines" = 4 ] || fail "--round-process new: $lines rounds in a new child, not 4: $(grep 'round' "$T/new.worker.log")"
for r in 2 3 4 5; do
  grep -q "job 1: round $r of 5 in a new child" "$T/new.worker.log" || fail "round $r of 5 was not in a new child"
done
pids=$(grep -o 'in a new child (pid [0-9]*' "$T/new.worker.log" | grep -o '[0-9]*$' | sort -u | wc -l)
[ "$pids" = 4 ] || fail "the 4 new children were $pids distinct processes"
n=$(grep -c 'in a new child' "$T/same.worker.log" || true)
[ "$n" = 0 ] || fail "--round-process same (the default) started $n children for rounds"
[ "$(rows same | wc -l)" = 10 ] && ! rows same | grep -v ' ok ' >/dev/null || fail "the re-measure's rows: $(rows same)"
[ "$(rows new)" = "$(rows same)" ] || fail "rounds in new children read otherwise than in one: $(rows new) against $(rows same)"
pass "--round-process new: rounds 2-5 each in a new child (4 processes), rows as in one child; same: no new child"

# from a spec file
printf '{"measure": {"round_process": "new"}}\n' >"$T/spec.json"
run spec --spec "$T/spec.json"
lines=$(grep -c 'in a new child (pid ' "$T/spec.worker.log" || true)
[ "$lines" = 4 ] || fail "a spec's round_process new: $lines rounds in a new child, not 4"
pass "a spec's \"round_process\": \"new\" does the same"

# a wrong value: refused before anything runs
set +e
"$M" tune "${RM[@]}" --db "$T/bad.db" --out "$T/bad" --round-process maybe >"$T/bad.out" 2>"$T/bad.err"
rc=$?
set -e
[ $rc = 2 ] || fail "--round-process maybe exited $rc, not 2"
grep -q -- '--round-process maybe: not same or new' "$T/bad.err" || fail "no reason given: $(cat "$T/bad.err")"
[ ! -s "$T/bad.db" ] || [ "$(sqlite3 "$T/bad.db" "SELECT count(*) FROM results" 2>/dev/null || echo 0)" = 0 ] \
  || fail "--round-process maybe measured something"
pass "--round-process maybe: refused with exit 2 and a reason, nothing measured"
