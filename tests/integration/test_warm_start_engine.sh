#!/usr/bin/env bash
# The warm start from the engine's own files (sim backend): a cold sweep (nothing in the database)
# whose tune found the engine's bundled file in the serving interpreter (--python) measures that
# file's entries, then the engine's default, in each shape's first job, before any other job; status
# and the manifest say so, naming the engine, the device and the Triton folder. It only reorders:
# the same configs are planned and the searched picks are those of the same tune without the file.
# Fake engine packages: tests/fixtures/engines (a fake torch naming $MOETUNE_FAKE_GPU, Triton 3.6.0).
source "$(dirname "$0")/lib.sh"
fake_engines
M="$BIN/moetune"
RUN=(--backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1)
SHAPE="E=128,N=768,K=2048,topk=8"
# tune LAYOUT OUT: a sim tune of Qwen3-30B-A3B at TP 1 with the fake engine LAYOUT in $PY
tune() {
  local rc=0
  PYTHONPATH=$F/$1:$F/_stubs "$M" tune "${RUN[@]}" --python "$PY" --db "$T/$2.db" --out "$T/$2" \
    >"$T/$2.out" 2>"$T/$2.err" || rc=$?
  [ $rc = 0 ] || { tail "$T/$2.err"; fail "tune ($1) exited $rc"; }
}
cfg="c.block_m || 'x' || c.block_n || 'x' || c.block_k || 'x' || c.group_m || 'x' || c.num_warps || 'x' || c.num_stages"
first_job() { q "$T/$1.db" "SELECT $cfg FROM job_configs jc JOIN configs c ON c.id = jc.config_id
  WHERE jc.job_id = (SELECT MIN(id) FROM jobs WHERE sweep_id = 1) ORDER BY 1" | paste -sd' '; }
# the searched best config at each of the sweep's batch sizes
picks() { q "$T/$1.db" "SELECT r.batch_size || ':' || $cfg, MIN(r.median_us) FROM results r JOIN configs c
  ON c.id = r.config_id WHERE r.sweep_id = 1 AND r.status = 'ok' AND $SEARCHED GROUP BY r.batch_size
  ORDER BY r.batch_size" | cut -d'|' -f1 | paste -sd' '; }

tune sglang-new a    # ships E=128,N=768 for NVIDIA H200 under triton_3_6_0: 2 entries, both in the space
tune sglang-lacking b # ships no config file: the engine's default alone
warm=$(jq -r --arg s "$SHAPE" '[.[] | .coverage.sweeps["1"].warm_start? // empty][0]' "$T/a/sim/manifest.json")
[ "$warm" = "$SHAPE: 3 known picks first: 2 from sglang's bundled file for NVIDIA H200 (triton_3_6_0), 1 engine default" ] \
  || fail "the manifest's warm start: $warm"
jobs=$(first_job a)
for c in 16x128x64x1x4x3 32x64x128x1x8x3 16x32x64x1x4x3; do
  grep -qw "$c" <<<"$jobs" || fail "the first job lacks $c (the file's entry or the engine's default): $jobs"
done
[ "$(wc -w <<<"$jobs")" = 3 ] || fail "the first job holds more than the known picks: $jobs"
pass "a cold sweep measures the engine file's entries and its default in its first job, the manifest says so"

[ "$(first_job b)" = 16x32x64x1x4x3 ] || fail "without a file the first job is not the default alone: $(first_job b)"
plan() { grep -o "^sweep 1: [0-9]* jobs, [0-9]* configs valid, [0-9]* rejected[^,]*" "$T/$1.err"; }
[ -n "$(plan a)" ] && [ "$(plan a)" = "$(plan b)" ] || fail "the file changed the plan: $(plan a) / $(plan b)"
searched() { q "$T/$1.db" "SELECT DISTINCT $cfg FROM results r JOIN configs c ON c.id = r.config_id
  WHERE r.sweep_id = 1 AND $SEARCHED ORDER BY 1" | md5sum; }
[ "$(searched a)" = "$(searched b)" ] || fail "the file changed the configs measured"
pa=$(picks a)
[ -n "$pa" ] && [ "$pa" = "$(picks b)" ] || fail "other picks with the file: $pa / $(picks b)"
pass "the same configs planned and the same searched picks with and without the engine's file"

# status: the same line; another Triton version's file (SGLang's fallback) is named by its folder
tune sglang-mid c
DB=$T/a.db
start_coordinator
"$M" status --control "$CEP" >"$T/status.txt"
grep -qF "sweep 1: warm start: $SHAPE: 3 known picks first: 2 from sglang's bundled file for NVIDIA H200 (triton_3_6_0), 1 engine default" \
  "$T/status.txt" || fail "status: $(cat "$T/status.txt")"
warm=$(jq -r '[.[] | .coverage.sweeps["1"].warm_start? // empty][0]' "$T/c/sim/manifest.json")
grep -qF "from sglang's bundled file for NVIDIA H200 (triton_3_4_0)" <<<"$warm" || fail "the fallback's start: $warm"
pass "status says what the start came from; the fallback folder's file is named by its Triton folder"

# no file for this GPU: the engine's file for this shape on another GPU (sglang-new ships
# E=128,N=384 for an H100 only), else for the nearest shape (N=192 at TP 4: N=384 is nearer than 768)
RUN=(--backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --tp 2)
tune sglang-new d
H100=$F/sglang-new/sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0/E=128,N=384,device_name=NVIDIA_H100_80GB_HBM3.json
grep -qF "warm start for E=128,N=384,K=2048,topk=8: $H100 goes first (no incumbent)" "$T/d.err" \
  || fail "tune does not say which file goes first: $(grep -i 'incumbent\|warm' "$T/d.err")"
warm=$(jq -r '[.[] | .coverage.sweeps["1"].warm_start? // empty][0]' "$T/d/sim/manifest.json")
grep -qE "^E=128,N=384,K=2048,topk=8: [0-9]+ known picks first: 3 from sglang's bundled file for NVIDIA H100 80GB HBM3 \(triton_3_6_0\)" \
  <<<"$warm" || fail "another GPU's file: $warm"
jobs=$(first_job d)
for c in 16x128x128x1x4x3 32x128x64x16x4x3 64x128x64x1x8x3; do
  grep -qw "$c" <<<"$jobs" || fail "the first job lacks the H100 file's $c: $jobs"
done
[ "$(q "$T/d.db" "SELECT COUNT(*) FROM guard WHERE role = 'incumbent'")" = 0 ] || fail "another GPU's file became the incumbent"
RUN=(--backend sim --workers 1 --sim-time-scale 0 --model qwen3-30b-a3b --tp 4)
tune sglang-new e
warm=$(jq -r '[.[] | .coverage.sweeps["1"].warm_start? // empty][0]' "$T/e/sim/manifest.json")
grep -qF "from sglang's bundled file for E=128,N=384 on NVIDIA H100 80GB HBM3 (triton_3_6_0)" <<<"$warm" \
  || fail "the nearest shape's file: $warm"
pass "no file for this GPU: another GPU's file for the shape goes first, else the nearest shape's; neither is the incumbent"
