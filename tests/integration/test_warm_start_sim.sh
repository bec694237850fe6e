#!/usr/bin/env bash
# The warm start: a second sweep of the same shapes on the same database (tune --fresh, standing
# in for a Triton upgrade) measures the first sweep's picks first, so racing prunes more from its
# first jobs, and it ends with the same picks. Its manifest and status say what the start came
# from; the first sweep (nothing known) has none. A third sweep of a shape never measured starts
# from the nearest measured shape. A sweep with nothing known starts from the engine's defaults.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
RUN=(--backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --model mixtral-8x7b --tp 2 --db "$DB")

"$M" tune "${RUN[@]}" --out "$T/a" >"$T/a.out" 2>"$T/a.err" || { tail "$T/a.err"; fail "the first tune exited $?"; }
"$M" tune "${RUN[@]}" --out "$T/b" --fresh >"$T/b.out" 2>"$T/b.err" || { tail "$T/b.err"; fail "tune --fresh exited $?"; }
[ "$(sql "SELECT COUNT(*) FROM sweeps")" = 2 ] || fail "--fresh did not make a second sweep"
p1=$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 1 AND status = 'pruned'")
p2=$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 2 AND status = 'pruned'")
all=$(sql "SELECT COUNT(*) FROM results WHERE sweep_id = 2")
[ "$p2" -gt "$p1" ] || fail "the warm sweep pruned $p2 results, the cold one $p1"
for f in "$T"/a/sim/E=*.json; do
  cmp -s <(jq -S . "$f") <(jq -S . "$T/b/sim/$(basename "$f")") || fail "$(basename "$f"): other picks after the warm start"
done
pass "warm sweep: $p2 of $all results pruned (cold: $p1), the same picks in both files"

# the first job of each shape holds the picks of sweep 1, and those jobs come first
first=$(sql "SELECT MIN(id) FROM jobs WHERE sweep_id = 2")
[ "$(sql "SELECT COUNT(DISTINCT shape_id) FROM jobs WHERE sweep_id = 2 AND id < $first + 2")" = 2 ] \
  || fail "the first two jobs of sweep 2 are not one per shape"
missing=$(sql "WITH best AS (SELECT shape_id, config_id, batch_size, MIN(median_us) FROM results
    WHERE sweep_id = 1 AND status = 'ok' GROUP BY shape_id, batch_size)
  SELECT COUNT(*) FROM (SELECT DISTINCT shape_id, config_id FROM best) b
  WHERE NOT EXISTS (SELECT 1 FROM jobs j JOIN job_configs jc ON jc.job_id = j.id
    WHERE j.sweep_id = 2 AND j.id < $first + 2 AND j.shape_id = b.shape_id AND jc.config_id = b.config_id)")
[ "$missing" = 0 ] || fail "$missing best configs of sweep 1 are not in sweep 2's first jobs"
pass "sweep 2's first job per shape holds sweep 1's best configs"

man=$T/b/sim/manifest.json
warm=$(jq -r '[.[] | .coverage.sweeps["2"].warm_start? // empty][0]' "$man")
grep -Eq "known picks first(: [0-9]+ from | \()the best of 1 earlier sweep on NVIDIA H200 for this shape" <<<"$warm" \
  || fail "the manifest does not say what the start came from: $warm"
# nothing known in the database: the cold sweep starts from the engine's defaults alone
cold=$(jq -r '[.[] | .coverage.sweeps["1"].warm_start? // empty][0]' "$T/a/sim/manifest.json")
grep -Eq "^E=[^;]*: ([0-9]+) known picks? first: \1 engine defaults?(;|$)" <<<"$cold" \
  || fail "the cold sweep's manifest names a start other than the engine's defaults: $cold"
start_coordinator
"$M" status --control "$CEP" >"$T/status.txt"
grep -q "^sweep 2: warm start: E=128,N=384,K=2048,topk=8: [0-9]* known picks first" "$T/status.txt" \
  || fail "status does not say what sweep 2 started from: $(cat "$T/status.txt")"
grep "^sweep 1: warm start" "$T/status.txt" | grep -q "earlier sweep" && fail "status names earlier sweeps for the cold sweep 1"
pass "manifest and status say where sweep 2's start came from"

# a shape never measured: the nearest measured shape's picks (Qwen3 at TP 4: N=192 near N=384), on
# a sim worker standing in for Triton, whose rules (no divisibility) keep them
start_workers 1 --kernel moetune --sim-time-scale 0
for _ in $(seq 1 100); do
  [ "$("$M" workers --control "$CEP" --json | jq '.workers | length')" -ge 1 ] && break
  sleep 0.1
done
"$M" submit --control "$CEP" --model qwen3-30b-a3b --tp 4 --worker-backend sim --name near >/dev/null \
  || fail "submit exited $?"
[ "$(wait_sweep 3 120)" = done ] || fail "sweep 3 did not finish"
"$M" status --control "$CEP" >"$T/status3.txt"
grep -q "^sweep 3: warm start: E=128,N=192,K=2048,topk=8: [0-9]* known picks first\(: [0-9]* from \| (\)the best of 2 earlier sweeps on NVIDIA H200 for the nearest shape E=128,N=384,K=2048,topk=8" "$T/status3.txt" \
  || fail "sweep 3's start: $(grep 'sweep 3' "$T/status3.txt")"
pass "a new shape starts from the nearest measured shape's picks"
